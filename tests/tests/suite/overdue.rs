//! The missed-occurrence check (SPEC §14) against moto, through the real
//! schedules app, runner, store and the reconcile worker's work item: an
//! occurrence Scheduler never delivered (a lost schedule, a one-time
//! reminder, a connector task), one whose message died after its claim,
//! each reported once with its task and time and recorded `skipped` in
//! words; an occurrence that ran, was skipped at the door or is still
//! running is never reported.

use chrono::{DateTime, Duration, DurationRound, Timelike, Utc};
use serde_json::{Value, json};
use shared::app::overdue::{CheckSettings, Missed, check};
use shared::app::run::Disposition;
use shared::domain::operations::overdue::{MARGIN_MINUTES, refresh_due};
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::schedule::Schedule;
use shared::domain::task::TaskId;
use shared::domain::task::claim::{Claim, RunStatus};
use shared::ports::{ClaimAnswer, ClaimRequest, RunStore};
use tests::{RunStack, owner, run_settings, schedules_create};

/// The runner's default catch-up window, which the test reconciler's check uses.
const CATCH_UP: Duration = Duration::hours(1);

fn id(task: &Value) -> TaskId {
    TaskId::parse(task["task_id"].as_str().expect("a task id")).expect("a task id")
}

async fn create(s: &RunStack, key: &str, when: Value, now: DateTime<Utc>) -> Value {
    let answer =
        s.t.schedules_app()
            .handle(schedules_create(&owner("usr_1"), key, key, when), now)
            .await
            .expect("no internal failure");
    assert_eq!(answer["ok"], true, "{answer}");
    answer["task"].clone()
}

async fn deliver(s: &RunStack, task_id: &TaskId, at: DateTime<Utc>, worker: bool) -> Disposition {
    let body = json!({
        "task_id": task_id.as_str(), "workspace": "ws_1",
        "scheduled_time": occurrence_key(at), "execution_id": format!("e-{}", task_id.as_str()), "attempt": "1",
    })
    .to_string();
    let now = at + Duration::minutes(1);
    s.runner_on(s.store(), run_settings(worker))
        .deliver("m1", &body, now, now + Duration::minutes(5))
        .await
        .expect("the delivery answers")
}

async fn claim(s: &RunStack, task_id: &TaskId, at: DateTime<Utc>, lease_until: DateTime<Utc>) {
    let claim = Claim {
        status: RunStatus::Running,
        lease_until: lease_until.timestamp(),
        execution_id: format!("e-{}", task_id.as_str()),
        attempts: 1,
        started_at: at,
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    let answer = s
        .store()
        .claim(&ClaimRequest {
            workspace: "ws_1",
            task_id,
            occurrence: &occurrence_key(at),
            period: &shared::domain::task::budget::period(at),
            claim: &claim,
            now: at,
            person_cap_usd: None,
            resume: None,
            keep_claims: chrono::Duration::minutes(70),
        })
        .await
        .expect("the claim answers");
    assert!(matches!(answer, ClaimAnswer::Claimed(_)), "{answer:?}");
}

fn found(missed: &[Missed]) -> Vec<(String, DateTime<Utc>, &'static str)> {
    let mut found: Vec<_> = missed
        .iter()
        .map(|m| (m.task_id.clone(), m.scheduled_time, m.reason))
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn each_missed_occurrence_is_reported_once_and_none_that_ran() {
    let s = RunStack::start().await.unwrap();
    let now = Utc::now();
    // A whole hour at least five minutes ahead: every task's first occurrence.
    let h = (now + Duration::minutes(65))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let daily = json!({"daily": {"time": format!("{:02}:00", h.hour()), "timezone": "UTC"}});
    let once = json!({"at": h.to_rfc3339()});
    let lost = id(&create(&s, "lost-schedule", daily, now).await);
    let ran = id(&create(&s, "ran", once.clone(), now).await);
    let undelivered = id(&create(&s, "never-delivered", once.clone(), now).await);
    let crashed = id(&create(&s, "crashed", once.clone(), now).await);
    let running = id(&create(&s, "still-running", once.clone(), now).await);
    let mut connector = tests::connector_task("issues", "daily-digest", &[], &[]);
    let mut skipped = tests::connector_task("issues", "skipped-digest", &[], &[]);
    for task in [&mut connector, &mut skipped] {
        task.spec.schedule = Schedule::Cron {
            cron: format!("0 {} * * *", h.hour()),
            timezone: "UTC".into(),
            until: None,
        };
        refresh_due(None, task, now);
        assert_eq!(task.due, Some(h), "a connector task is due at its first fire");
        s.insert(task).await;
    }
    let item =
        s.t.item_at(shared::adapters::keys::Key::task("ws_1", lost.as_str()))
            .await
            .unwrap();
    assert_eq!(
        item["due"],
        occurrence_key(h),
        "a created reminder is due at its first occurrence"
    );

    // The daily reminder's schedule is lost; the others' messages come or not.
    s.t.scheduler_delete(lost.as_str()).await;
    assert_eq!(deliver(&s, &ran, h, true).await, Disposition::Ran(RunStatus::Succeeded));
    assert!(matches!(
        deliver(&s, &skipped.task_id, h, false).await,
        Disposition::Skipped(_)
    ));
    let checked_at = h + CATCH_UP + Duration::minutes(MARGIN_MINUTES) + Duration::minutes(1);
    // One run stopped after its claim (its message then died); one still runs.
    claim(&s, &crashed, h, h + Duration::minutes(15)).await;
    claim(&s, &running, h, checked_at + Duration::hours(1)).await;

    // Before the cutoff passes the occurrences, nothing is judged. The
    // check runs as the worker does, every request under its role.
    let r = s.t.reconciler_as_worker();
    let early = s.t.run_overdue_check(&r, h + CATCH_UP).await;
    assert_eq!(early, 0);

    let settings = CheckSettings {
        catch_up: CATCH_UP,
        retention: Duration::days(90),
        write: true,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    // A dry run names them and writes nothing.
    let dry = check(
        &s.store(),
        CheckSettings {
            write: false,
            ..settings
        },
        checked_at,
        deadline,
    )
    .await
    .expect("the dry run");
    let expected = {
        let mut e = vec![
            (lost.to_string(), h, "never_delivered"),
            (undelivered.to_string(), h, "never_delivered"),
            (crashed.to_string(), h, "never_finished"),
            (connector.task_id.to_string(), h, "never_delivered"),
        ];
        e.sort();
        e
    };
    assert_eq!(found(&dry.missed), expected);
    assert_eq!(
        s.run_record(&undelivered, &occurrence_key(h)).await,
        None,
        "a dry run writes nothing"
    );

    // The scheduled check, as the worker takes it from its queue.
    let summary = s.t.run_overdue_check(&r, checked_at).await;
    assert_eq!(summary, expected.len(), "each missed occurrence counted");
    for (task_id, _, reason) in &expected {
        let record = s
            .run_record(&TaskId::parse(task_id).unwrap(), &occurrence_key(h))
            .await
            .unwrap_or_else(|| panic!("{task_id}'s missed occurrence is recorded"));
        assert_eq!(record["status"], "skipped");
        assert!(
            record["reason"]
                .as_str()
                .unwrap()
                .starts_with(&reason.replace('_', " ")),
            "{record}"
        );
    }
    // The missed one-time reminders are finished; the daily one runs on.
    for task in [&undelivered, &crashed] {
        let item =
            s.t.item_at(shared::adapters::keys::Key::task("ws_1", task.as_str()))
                .await
                .unwrap();
        assert_eq!(item["state"], "completed", "{item}");
    }
    let item =
        s.t.item_at(shared::adapters::keys::Key::task("ws_1", lost.as_str()))
            .await
            .unwrap();
    assert_eq!(item["state"], "scheduled");
    assert_eq!(
        item["due"],
        occurrence_key(h + Duration::days(1)),
        "due moves to the next day"
    );
    // The running one keeps its due: its settle is still to come.
    let item =
        s.t.item_at(shared::adapters::keys::Key::task("ws_1", running.as_str()))
            .await
            .unwrap();
    assert_eq!(item["due"], occurrence_key(h));
    assert_eq!(s.run_record(&running, &occurrence_key(h)).await, None);

    // Reported once: the next check finds nothing new.
    let again = s.t.run_overdue_check(&r, checked_at + Duration::minutes(15)).await;
    assert_eq!(again, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_written_before_due_times_is_adopted_by_the_daily_pass() {
    let s = RunStack::start().await.unwrap();
    let now = Utc::now();
    let at = (now + Duration::hours(2)).duration_trunc(Duration::seconds(1)).unwrap();
    // As an earlier version stored it: no due time.
    let task = tests::reminder(at);
    assert_eq!(task.due, None);
    s.insert(&task).await;
    let r = s.t.reconciler();
    let settings = CheckSettings {
        catch_up: CATCH_UP,
        retention: Duration::days(90),
        write: true,
    };
    let later = at + CATCH_UP + Duration::minutes(MARGIN_MINUTES + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let unseen = check(
        &s.store(),
        CheckSettings {
            write: false,
            ..settings
        },
        later,
        deadline,
    )
    .await
    .unwrap();
    assert!(unseen.missed.is_empty(), "without a due time the check cannot see it");
    s.t.run_daily_pass(&r, now).await;
    assert_eq!(s.task_item(&task).await["due"], occurrence_key(at));
    let seen = check(&s.store(), settings, later, deadline).await.unwrap();
    assert_eq!(
        found(&seen.missed),
        vec![(task.task_id.to_string(), at, "never_delivered")]
    );
}

/// A reminder that ends on a date (`until`) is finished by its last
/// occurrence whatever became of it (SPEC §3): skipped late at the door,
/// skipped with the worker off, or never delivered and recorded by the
/// check. Each completes it through the one rule a settle uses
/// (`settlement::completion`), which frees its place; an occurrence before
/// the last does not.
#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_until_a_date_completes_on_its_last_occurrence_however_it_was_missed() {
    let s = RunStack::start().await.unwrap();
    let now = Utc::now();
    let h = (now + Duration::minutes(65))
        .duration_trunc(Duration::hours(1))
        .unwrap();
    let ending = |last: chrono::NaiveDate| json!({"daily": {"time": format!("{:02}:00", h.hour()), "timezone": "UTC"}, "until": last.to_string()});
    let today = h.date_naive();
    let late = id(&create(&s, "late", ending(today), now).await);
    let off = id(&create(&s, "worker-off", ending(today), now).await);
    let lost = id(&create(&s, "never-delivered", ending(today), now).await);
    let runs_on = id(&create(&s, "one-more-day", ending(today + Duration::days(1)), now).await);

    let after_window = h + CATCH_UP + Duration::minutes(1);
    let late_body = |task_id: &TaskId| {
        json!({
            "task_id": task_id.as_str(), "workspace": "ws_1",
            "scheduled_time": occurrence_key(h), "execution_id": format!("e-{}", task_id.as_str()), "attempt": "1",
        })
        .to_string()
    };
    for task in [&late, &runs_on] {
        let answer = s
            .runner_on(s.store(), run_settings(true))
            .deliver(
                "m-late",
                &late_body(task),
                after_window,
                after_window + Duration::minutes(5),
            )
            .await
            .expect("the delivery answers");
        assert_eq!(
            answer,
            Disposition::Skipped(shared::domain::run::door::SkipReason::Missed),
            "delivered after the catch-up window"
        );
    }
    assert!(matches!(
        deliver(&s, &off, h, false).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::WorkerDisabled)
    ));
    let r = s.t.reconciler();
    let checked_at = h + CATCH_UP + Duration::minutes(MARGIN_MINUTES) + Duration::minutes(1);
    let summary = s.t.run_overdue_check(&r, checked_at).await;
    assert_eq!(summary, 1, "the never-delivered one alone is missed");

    let state = |task: &TaskId| {
        let key = shared::adapters::keys::Key::task("ws_1", task.as_str());
        let t = &s.t;
        async move { t.item_at(key).await.unwrap() }
    };
    for task in [&late, &off, &lost] {
        let item = state(task).await;
        assert_eq!(item["state"], "completed", "{item}");
        assert!(item.get("ttl").is_some(), "a finished reminder expires: {item}");
        let record = s
            .run_record(task, &occurrence_key(h))
            .await
            .expect("its skip is recorded");
        assert_eq!(record["status"], "skipped");
    }
    let item = state(&runs_on).await;
    assert_eq!(item["state"], "scheduled", "its last occurrence is tomorrow: {item}");

    // Its place is free: the owner's list holds the one still scheduled.
    let listed =
        s.t.schedules_app()
            .handle(json!({"op": "list", "principal": owner("usr_1")}), checked_at)
            .await
            .expect("the list answers");
    let states = tests::listed_states(&listed);
    assert!(
        states.get(runs_on.as_str()).map(String::as_str) == Some("scheduled"),
        "{listed}"
    );
    for task in [&late, &off, &lost] {
        assert!(
            states.get(task.as_str()).map(String::as_str) != Some("scheduled"),
            "{listed}"
        );
        // What its owner reads back: finished, nothing more to run.
        let got =
            s.t.schedules_app()
                .handle(
                    json!({"op": "get", "principal": owner("usr_1"), "task_id": task.as_str()}),
                    checked_at,
                )
                .await
                .expect("the get answers");
        assert_eq!(got["task"]["state"], "completed", "{got}");
        assert_eq!(got["task"]["next_run_at"], Value::Null, "{got}");
    }
}

/// The check at scale (SPEC §14; ARCHITECTURE, "The missed-occurrence
/// check"): many tasks over every shard of both families, all due at one
/// hour and all run but two, a reminder in the last shard and a connector
/// task, whose schedules were lost. One period (the scheduled check and the
/// shards' checks it queues, each as the worker takes it) finds both, and
/// every shard's check ends within the period (going on where it ran out
/// of time, `CHECK_HOPS`) with no backlog left. CI runs 320 tasks (ten a
/// shard); `OVERDUE_SCALE_TASKS=20000` the scale the issue names (docs/testing.md,
///: about four minutes here).
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_schedule_is_found_within_one_period_among_many_tasks() {
    use shared::adapters::dynamo::{task_item, to_item};
    use shared::adapters::keys::{Key, SchedulableKey};
    use shared::domain::run::definition::REMINDER_SHARDS;
    let n: usize = std::env::var("OVERDUE_SCALE_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(320);
    let s = RunStack::start().await.unwrap();
    let now = Utc::now();
    let h = (now - Duration::hours(2)).duration_trunc(Duration::hours(1)).unwrap();
    let daily = Schedule::Cron {
        cron: format!("0 {} * * *", h.hour()),
        timezone: "UTC".into(),
        until: None,
    };
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let mut task = if i % 2 == 0 {
            let mut task = tests::reminder(h);
            task.task_id = TaskId::for_reminder("ws_1", "usr_123", &format!("scale-{i}"));
            task
        } else {
            tests::connector_task("issues", &format!("digest-{i}"), &[], &[])
        };
        task.spec.schedule = daily.clone();
        task.due = Some(h);
        tasks.push(task);
    }
    let shard = |t: &shared::domain::task::Task| SchedulableKey::shard_of(t.task_id.as_str());
    let lost_reminder = tasks
        .iter()
        .position(|t| t.task_id.is_reminder() && shard(t) == REMINDER_SHARDS - 1)
        .expect("a reminder in the last shard");
    let lost_connector = tasks.iter().position(|t| !t.task_id.is_reminder()).unwrap();
    for family_is_reminder in [true, false] {
        let shards: std::collections::BTreeSet<u8> = tasks
            .iter()
            .filter(|t| t.task_id.is_reminder() == family_is_reminder)
            .map(shard)
            .collect();
        assert_eq!(shards.len(), usize::from(REMINDER_SHARDS), "every shard of the family");
    }
    let mut items: Vec<_> = tasks.iter().map(|t| task_item(t).unwrap()).collect();
    for (i, task) in tasks.iter().enumerate() {
        if i != lost_reminder && i != lost_connector {
            let record = json!({"task_id": task.task_id.as_str(), "scheduled_time": occurrence_key(h)});
            items.push(to_item(&record, &Key::run(task.task_id.as_str(), &occurrence_key(h)), "run").unwrap());
        }
    }
    let loading = std::time::Instant::now();
    s.t.put_items(items).await;
    println!(
        "loaded {n} tasks and their records in {:.0} s",
        loading.elapsed().as_secs_f64()
    );

    let r = s.t.reconciler();
    let checking = std::time::Instant::now();
    r.work(r#"{"type": "overdue.check"}"#, now)
        .await
        .expect("the check runs");
    // One period: the shards' checks, and those that go on where they ran
    // out of time, until the queue is empty.
    let mut missed = 0;
    let mut judged = 0;
    let mut went_on = 0;
    let mut last: std::collections::BTreeMap<String, shared::app::reconcile::CheckFigures> = Default::default();
    loop {
        let work = s.t.take_work().await;
        if work.is_empty() {
            break;
        }
        for (group, body) in work {
            let summary = r.work(&body, now).await.expect("a shard's check runs");
            missed += summary.overdue.unwrap();
            let figures = summary.overdue_check.expect("a shard's figures");
            went_on += usize::from(figures.unfinished);
            last.insert(group, figures);
            judged += 1;
        }
    }
    println!(
        "checked {n} tasks in {judged} shard checks ({went_on} went on where they stopped) in {:.0} s",
        checking.elapsed().as_secs_f64()
    );
    assert_eq!(
        last.len(),
        2 * usize::from(REMINDER_SHARDS),
        "every shard of both families"
    );
    for (group, figures) in &last {
        assert!(!figures.unfinished, "{group}: finished within the period");
        assert_eq!(figures.backlog_seconds, 0, "{group}: no backlog left");
    }
    assert_eq!(missed, 2, "the two lost schedules, and no occurrence that ran");
    for i in [lost_reminder, lost_connector] {
        let record = s
            .run_record(&tasks[i].task_id, &occurrence_key(h))
            .await
            .expect("the lost occurrence is recorded");
        assert_eq!(record["status"], "skipped");
        assert!(
            record["reason"].as_str().unwrap().starts_with("never delivered"),
            "{record}"
        );
    }
}

/// Refuses the unclaimed record of one task, as DynamoDB refuses a write
/// that would take an item past 400 KB.
struct RefusedFor(String);

impl<P: RunStore> tests::intercept::RunStoreHook<P> for RefusedFor {
    async fn record_unclaimed(
        &self,
        inner: &P,
        record: &shared::domain::run::occurrence::RunRecord,
        prune: &[String],
    ) -> Result<shared::ports::Unclaimed, shared::ports::StoreError> {
        if record.task_id == self.0 {
            return Err(shared::ports::StoreError::Rejected {
                operation: "TransactWriteItems",
                source: "Item size to update has exceeded the maximum allowed size (injected)".into(),
            });
        }
        inner.record_unclaimed(record, prune).await
    }
}

/// A shard's check never stops at one task: a task it cannot judge (its
/// record refused) is named and counted, every other task of the shard is
/// judged, the check finishes and keeps its cursor; the next check tries
/// that task again.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_the_check_cannot_judge_is_counted_and_the_rest_of_its_shard_judged() {
    use shared::app::overdue::check_shard;
    use shared::ports::Family;
    let s = RunStack::start().await.unwrap();
    let h = (Utc::now() - Duration::hours(3))
        .duration_trunc(Duration::seconds(1))
        .unwrap();
    // Three one-time reminders at `h` in one shard (their ids' first digit), none delivered.
    let mut tasks = Vec::new();
    for n in 1..=3u32 {
        let mut task = tests::reminder(h);
        task.task_id = TaskId::parse(&format!("rem_a{n:031x}")).unwrap();
        refresh_due(None, &mut task, h - Duration::hours(1));
        assert_eq!(task.due, Some(h));
        s.insert(&task).await;
        tasks.push(task);
    }
    let shard = shared::adapters::keys::SchedulableKey::shard_of(tasks[0].task_id.as_str());
    let refused = tasks[1].task_id.to_string();
    let store = tests::intercept::Intercepted::new(s.store(), RefusedFor(refused.clone()));
    let settings = CheckSettings {
        catch_up: CATCH_UP,
        retention: Duration::days(90),
        write: true,
    };
    let checked_at = h + CATCH_UP + Duration::minutes(MARGIN_MINUTES + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let checked = check_shard(&store, settings, Family::Reminders, shard, checked_at, deadline)
        .await
        .expect("one task never stops its shard's check");
    assert!(checked.complete, "{checked:?}");
    assert_eq!(checked.unjudged.len(), 1, "{checked:?}");
    assert_eq!(checked.unjudged[0].task_id, refused);
    assert!(
        checked.unjudged[0].error.contains("refused the request as invalid"),
        "{checked:?}"
    );
    let mut judged: Vec<String> = checked.missed.iter().map(|m| m.task_id.clone()).collect();
    judged.sort();
    assert_eq!(judged, [tasks[0].task_id.to_string(), tasks[2].task_id.to_string()]);
    assert!(s.run_record(&tasks[1].task_id, &occurrence_key(h)).await.is_none());
    // Not refused any more, the next check judges it.
    let again = check_shard(&s.store(), settings, Family::Reminders, shard, checked_at, deadline)
        .await
        .unwrap();
    assert_eq!(found(&again.missed), [(refused, h, "never_delivered")]);
    assert!(again.unjudged.is_empty());
}

/// A rate's delivery may come up to half a period late (Scheduler keeps its
/// phase only roughly), so the index sorts a rate by when the check can
/// first judge it (`overdue::judgeable_at`): inside that slack the check
/// reads nothing and `OverdueBacklogSeconds` stays at zero, and an entry
/// the last release wrote (sorted by `due` alone) is read, left alone and
/// counted from the same instant, then judged and rewritten once it can be.
#[tokio::test(flavor = "multi_thread")]
async fn a_rate_inside_its_slack_is_no_backlog_whatever_release_wrote_its_entry() {
    use shared::adapters::keys::{Key, SchedulableKey};
    use shared::app::overdue::check_shard;
    use shared::domain::operations::overdue::judgeable_at;
    use shared::domain::schedule::RateUnit;
    use shared::ports::Family;
    let s = RunStack::start().await.unwrap();
    let d = (Utc::now() - Duration::hours(6))
        .duration_trunc(Duration::seconds(1))
        .unwrap();
    let mut task = tests::connector_task("issues", "weekly_summary", &["list_issues"], &[]);
    task.spec.schedule = Schedule::Rate {
        every: 4,
        unit: RateUnit::Hours,
    };
    refresh_due(None, &mut task, d - Duration::hours(4));
    assert_eq!(task.due, Some(d));
    assert_eq!(judgeable_at(&task), Some(d + Duration::hours(2)));
    s.insert(&task).await;
    let shard = SchedulableKey::shard_of(task.task_id.as_str());
    let settings = CheckSettings {
        catch_up: CATCH_UP,
        retention: Duration::days(90),
        write: true,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let margin = CATCH_UP + Duration::minutes(MARGIN_MINUTES);
    // A minute before the slack ends at the cutoff.
    let inside = d + Duration::hours(2) + margin - Duration::minutes(1);
    let store = s.reconcile_store();
    let checked = check_shard(&store, settings, Family::Connectors, shard, inside, deadline)
        .await
        .unwrap();
    assert_eq!((checked.tasks, checked.missed.len()), (0, 0), "{checked:?}");
    assert!(checked.backlog.is_zero(), "{checked:?}");

    // The entry as the last release wrote it: sorted by `due`.
    let key = Key::task("ws_1", task.task_id.as_str()).to_map();
    let sk = || s.t.item_at(Key::task("ws_1", task.task_id.as_str()));
    s.t.dynamo
        .update_item()
        .table_name(&s.t.stack.names.table)
        .set_key(Some(key))
        .update_expression("SET gsi3sk = :old")
        .expression_attribute_values(
            ":old",
            aws_sdk_dynamodb::types::AttributeValue::S(SchedulableKey::sort(Some(d), task.task_id.as_str())),
        )
        .send()
        .await
        .unwrap();
    let checked = check_shard(&store, settings, Family::Connectors, shard, inside, deadline)
        .await
        .unwrap();
    assert_eq!((checked.tasks, checked.missed.len()), (1, 0), "{checked:?}");
    assert!(
        checked.backlog.is_zero(),
        "counted from when it can be judged: {checked:?}"
    );

    // Past the slack: the occurrence nobody delivered is judged, and the
    // entry rewritten in this release's order.
    let past = inside + Duration::minutes(2);
    let checked = check_shard(&store, settings, Family::Connectors, shard, past, deadline)
        .await
        .unwrap();
    assert_eq!(
        found(&checked.missed),
        [(task.task_id.to_string(), d, "never_delivered")]
    );
    assert!(checked.backlog.is_zero(), "{checked:?}");
    let item = sk().await.unwrap();
    let next = d + Duration::hours(4);
    assert_eq!(
        item["gsi3sk"],
        SchedulableKey::sort(Some(next + Duration::hours(2)), task.task_id.as_str())
    );
}
