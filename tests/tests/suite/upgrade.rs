//! This release deployed over the table and the Scheduler group as the last
//! release's own code left them (`tests/upgrade/57349f9.json`, written by
//! `infra/scripts/upgrade-fixture.sh` running `tests/upgrade/generate.rs`
//! in a worktree of that release): a chat backend's one-time reminder, a
//! person's daily reminder that ran once, a paused, a skipping and a
//! monthly one, a cancelled one, and an approved connector task. Every
//! task is read by this release's code as that release wrote it: the
//! owner's list and get, the daily repair (which finds every schedule in
//! step and puts none), the missed-occurrence check (which finds exactly
//! the occurrences nobody delivered, finishing the one-time reminder, and
//! records the one its owner skipped as skipped by them), the runner
//! (which runs the daily reminder's next occurrence over the claims and
//! month's budget that release wrote), an owner's edit and an admin's read.

use std::collections::{BTreeMap, BTreeSet};

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, FlexibleTimeWindow, FlexibleTimeWindowMode, ScheduleState, Target,
};
use chrono::{DateTime, Duration, Utc};
use serde_json::{Value, json};
use shared::app::run::Disposition;
use shared::domain::operations::overdue::MARGIN_MINUTES;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::{Task, TaskId};
use shared::ports::TaskStore;
use tests::{RunStack, admin_principal, owner, run_message};

const FIXTURE: &str = include_str!("../../upgrade/57349f9.json");

fn attribute(value: &Value) -> AttributeValue {
    let (kind, inner) = value.as_object().and_then(|o| o.iter().next()).expect("a typed value");
    let strings = || {
        inner
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    match kind.as_str() {
        "S" => AttributeValue::S(inner.as_str().unwrap().to_owned()),
        "N" => AttributeValue::N(inner.as_str().unwrap().to_owned()),
        "BOOL" => AttributeValue::Bool(inner.as_bool().unwrap()),
        "NULL" => AttributeValue::Null(true),
        "SS" => AttributeValue::Ss(strings()),
        "NS" => AttributeValue::Ns(strings()),
        "L" => AttributeValue::L(inner.as_array().unwrap().iter().map(attribute).collect()),
        "M" => AttributeValue::M(
            inner
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), attribute(v)))
                .collect(),
        ),
        other => panic!("an attribute type the fixture does not use: {other}"),
    }
}

struct Upgraded {
    s: RunStack,
    fixture: Value,
    /// When the last release wrote it.
    written_at: DateTime<Utc>,
}

impl Upgraded {
    /// A fresh stack of this release holding what the last release left.
    async fn load() -> Self {
        let s = RunStack::start().await.unwrap();
        let fixture: Value = serde_json::from_str(FIXTURE).unwrap();
        let items = fixture["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| {
                item.as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), attribute(v)))
                    .collect()
            })
            .collect();
        s.t.put_items(items).await;
        let target = s.t.create_config(tests::ENABLED).target;
        for schedule in fixture["schedules"].as_array().unwrap() {
            let text = |key: &str| schedule[key].as_str().map(str::to_owned);
            let end = text("end_date").map(|d| {
                let at: DateTime<Utc> = d.parse().unwrap();
                aws_sdk_scheduler::primitives::DateTime::from_secs(at.timestamp())
            });
            s.t.scheduler
                .create_schedule()
                .group_name(&target.group)
                .name(text("name").unwrap())
                .set_description(text("description"))
                .schedule_expression(text("expression").unwrap())
                .set_schedule_expression_timezone(text("timezone"))
                .set_end_date(end)
                .state(ScheduleState::from(text("state").unwrap().as_str()))
                .action_after_completion(ActionAfterCompletion::from(
                    text("action_after_completion").unwrap().as_str(),
                ))
                .flexible_time_window(
                    FlexibleTimeWindow::builder()
                        .mode(FlexibleTimeWindowMode::Off)
                        .build()
                        .unwrap(),
                )
                .target(
                    Target::builder()
                        .arn(&target.queue_arn)
                        .role_arn(&target.role_arn)
                        .set_input(text("input"))
                        .build()
                        .unwrap(),
                )
                .send()
                .await
                .unwrap();
        }
        let written_at = fixture["written_at"].as_str().unwrap().parse().unwrap();
        Self { s, fixture, written_at }
    }

    fn id(&self, name: &str) -> String {
        self.fixture["tasks"][name].as_str().unwrap().to_owned()
    }

    async fn task(&self, name: &str) -> Task {
        self.s
            .store()
            .task("ws_1", &TaskId::parse(&self.id(name)).unwrap())
            .await
            .unwrap()
            .expect("the task is read")
    }

    async fn owner(&self, request: Value, now: DateTime<Utc>) -> Value {
        self.s.t.schedules_app().handle(request, now).await.unwrap()
    }

    /// Each schedule's expression, zone, state, end, action, input and
    /// last modification, by name.
    async fn schedules(&self) -> BTreeMap<String, String> {
        let mut all = BTreeMap::new();
        for name in self.s.t.schedule_names().await {
            let got = self.s.t.schedule(&name).await;
            let seen = format!(
                "{:?} {:?} {:?} {:?} {:?} {:?} {:?}",
                got.schedule_expression(),
                got.schedule_expression_timezone(),
                got.state(),
                got.end_date(),
                got.action_after_completion(),
                got.target().and_then(|t| t.input()),
                got.last_modification_date(),
            );
            all.insert(name, seen);
        }
        all
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn this_release_reads_runs_and_repairs_what_the_last_release_left() {
    let u = Upgraded::load().await;
    let t0 = u.written_at + Duration::minutes(1);
    let me = owner("usr_1");

    // The owner reads back what they had, as they left it.
    let listed = u.owner(json!({"op": "list", "principal": me}), t0).await;
    let states = tests::listed_states(&listed);
    for (name, state) in [
        ("daily", "scheduled"),
        ("paused", "paused"),
        ("skipping", "scheduled"),
        ("monthly", "scheduled"),
    ] {
        assert_eq!(
            states.get(&u.id(name)).map(String::as_str),
            Some(state),
            "{name}: {listed}"
        );
    }
    assert!(!states.contains_key(&u.id("cancelled")), "{listed}");
    let skipping = u
        .owner(json!({"op": "get", "principal": me, "task_id": u.id("skipping")}), t0)
        .await;
    let next: DateTime<Utc> = skipping["task"]["next_run_at"].as_str().unwrap().parse().unwrap();
    assert!(
        next > t0 + Duration::days(1),
        "the skipped occurrence stays skipped: {skipping}"
    );

    // Every active task is in the schedulable index with its due time: no
    // `sat upgrade` is needed over this release.
    for name in ["chat", "daily", "paused", "skipping", "monthly", "connector"] {
        let task = u.task(name).await;
        let item =
            u.s.t
                .item_at(shared::adapters::keys::Key::task("ws_1", task.task_id.as_str()))
                .await
                .unwrap();
        assert!(item.get("gsi3pk").is_some(), "{name}: {item}");
        if name != "paused" {
            assert!(task.due.is_some(), "{name}: {item}");
        }
    }

    // The daily repair finds every schedule as this release would write
    // it, and puts none.
    let before = u.schedules().await;
    let r = u.s.t.reconciler();
    u.s.t.run_daily_pass(&r, t0).await;
    assert_eq!(u.schedules().await, before, "the daily repair put a schedule");

    // A day on, nobody delivered anything: the check judges every task and
    // finds exactly the two occurrences that were due (the daily one and
    // the chat backend's one-time reminder); the skipped one, the paused
    // one, the monthly one and the connector's (Sunday) are not missed.
    let catch_up = Duration::seconds(shared::config::DEFAULT_CATCH_UP_SECONDS);
    let day_on = u.written_at + Duration::days(1) + catch_up + Duration::minutes(MARGIN_MINUTES + 1);
    let daily_ran: DateTime<Utc> = u.fixture["tasks"]["daily_ran_at"].as_str().unwrap().parse().unwrap();
    let missed = u.s.t.run_overdue_check(&r, day_on).await;
    assert_eq!(missed, 2, "the daily one and the one-time one, nothing else");
    let record =
        u.s.run_record(
            &TaskId::parse(&u.id("daily")).unwrap(),
            &occurrence_key(daily_ran + Duration::days(1)),
        )
        .await
        .expect("the daily's missed occurrence is recorded");
    assert_eq!(record["status"], "skipped", "{record}");
    let chat = u.task("chat").await;
    assert!(
        chat.completed_at.is_some(),
        "a one-time reminder whose one occurrence was missed is finished"
    );
    // The occurrence its owner skipped, never delivered, is recorded as the
    // runner would have: skipped by its owner, not missed.
    let skipped =
        u.s.run_record(&TaskId::parse(&u.id("skipping")).unwrap(), "2026-12-05T18:00:00Z")
            .await
            .expect("the skipped occurrence is recorded");
    assert_eq!(skipped["reason"], "skipped by its owner", "{skipped}");

    // The runner runs the daily reminder's next occurrence over the claims
    // and the month's budget the last release wrote.
    let daily = u.task("daily").await;
    let used_before = daily.budget_used.values().sum::<f64>();
    assert!(used_before > 0.0, "the last release's run was charged");
    let third = daily_ran + Duration::days(2);
    let got =
        u.s.runner()
            .deliver(
                "m1",
                &run_message(&daily, third, "e1"),
                third + Duration::seconds(5),
                tests::deadline(),
            )
            .await
            .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let daily = u.task("daily").await;
    assert!(
        daily.budget_used.values().sum::<f64>() > used_before,
        "{:?}",
        daily.budget_used
    );

    // The owner edits the monthly reminder the last release wrote.
    let got = u
        .owner(json!({"op": "get", "principal": me, "task_id": u.id("monthly")}), t0)
        .await;
    let version = got["task"]["version"].as_u64().unwrap();
    let edited = u
        .owner(
            json!({"op": "update", "principal": me, "task_id": u.id("monthly"), "expected_version": version,
                   "idempotency_key": "upgrade-edit", "input": {"title": "Pay the rent"}}),
            t0,
        )
        .await;
    assert_eq!(edited["ok"], true, "{edited}");
    assert_eq!(edited["task"]["title"], "Pay the rent", "{edited}");

    // An admin reads the connector task the last release approved.
    let admin =
        u.s.t
            .admin()
            .handle(
                json!({"op": "get", "principal": admin_principal(), "task_id": u.id("connector")}),
                t0,
            )
            .await
            .unwrap();
    assert!(
        admin["explanation"].as_str().unwrap().starts_with("runs next at"),
        "{admin}"
    );
    assert_eq!(admin["next_fires"].as_array().map(Vec::len), Some(5), "{admin}");

    // Nothing the last release wrote is gone.
    let kept: BTreeSet<(String, String)> =
        u.s.t
            .items()
            .await
            .iter()
            .map(|i| {
                (
                    i["pk"].as_str().unwrap().to_owned(),
                    i["sk"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
    for item in u.fixture["items"].as_array().unwrap() {
        let key = (
            item["pk"]["S"].as_str().unwrap().to_owned(),
            item["sk"]["S"].as_str().unwrap().to_owned(),
        );
        assert!(kept.contains(&key), "{key:?} is gone");
    }
}
