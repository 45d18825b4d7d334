//! Writes the upgrade fixture: the table and the Scheduler group as one
//! release's own code leaves them. Not a test of this release: it is
//! compiled into the suite of a worktree of the release named in
//! `infra/scripts/upgrade-fixture.sh`, which runs it with
//! `UPGRADE_FIXTURE_OUT` set and keeps the JSON in
//! `tests/upgrade/<release>.json`, read by `tests/tests/suite/upgrade.rs`.
//! It uses only what that release's harness offers, through its real
//! create, schedules, reconcile, admin and runner code:
//!
//! - `chat`: a one-time reminder a chat backend created, due in a day;
//! - `daily`: a person's daily reminder that ran once (its run record,
//!   its settled claim, its month's budget and the person's account);
//! - `paused`: a weekly reminder its owner paused;
//! - `skipping`: a daily reminder whose next occurrence its owner skipped;
//! - `monthly`: a monthly reminder on the 31st;
//! - `cancelled`: a one-time reminder its owner cancelled;
//! - `connector`: a connector's prompt installed, reconciled and approved.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{Duration, DurationRound, Timelike, Utc};
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Map, Value, json};
use shared::domain::claim::RunStatus;
use shared::domain::task::TaskId;
use shared::ports::TaskStore;
use tests::{RunStack, admin_principal, create_request, installed, owner, schedules_create};

fn dynamo_json(value: &AttributeValue) -> Value {
    match value {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        AttributeValue::L(v) => json!({"L": v.iter().map(dynamo_json).collect::<Vec<_>>()}),
        AttributeValue::M(m) => {
            json!({"M": m.iter().map(|(k, v)| (k.clone(), dynamo_json(v))).collect::<Map<_, _>>()})
        }
        other => panic!("an attribute the fixture does not keep: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn write_the_upgrade_fixture() {
    let Ok(out) = std::env::var("UPGRADE_FIXTURE_OUT") else {
        return;
    };
    let s = RunStack::start().await.unwrap();
    let now = Utc::now();
    let mut names = Map::new();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let made = |answer: Value| -> String {
        assert_eq!(answer["ok"], true, "{answer}");
        answer["task"]["task_id"].as_str().unwrap().to_owned()
    };

    // A chat backend's one-time reminder, due in a day.
    let chat = s
        .t
        .create_app()
        .handle(create_request("upgrade-chat", now, Duration::days(1)), now)
        .await
        .unwrap()
        .to_json();
    names.insert("chat".into(), json!(made(chat)));

    // A daily reminder at the last whole minute, which then runs once.
    let at = now.duration_trunc(Duration::minutes(1)).unwrap() - Duration::minutes(1);
    let time = format!("{:02}:{:02}", at.hour(), at.minute());
    let daily = app
        .handle(
            schedules_create(&me, "upgrade-daily", "Stand-up notes", json!({"daily": {"time": time, "timezone": "UTC"}})),
            now - Duration::minutes(2),
        )
        .await
        .unwrap();
    let daily_id = made(daily);
    let task = s
        .store()
        .task("ws_1", &TaskId::parse(&daily_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    s.run_to(&task, at, RunStatus::Succeeded).await;
    names.insert("daily".into(), json!(daily_id));
    names.insert("daily_ran_at".into(), json!(shared::domain::occurrence::occurrence_key(at)));

    let weekly = json!({"weekly": {"days": ["MON", "THU"], "time": "07:30", "timezone": "America/New_York"}});
    let paused = made(app.handle(schedules_create(&me, "upgrade-paused", "Timesheet", weekly), now).await.unwrap());
    let answer = app
        .handle(json!({"op": "pause", "principal": me, "task_id": paused, "expected_version": 1}), now)
        .await
        .unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    names.insert("paused".into(), json!(paused));

    let evening = json!({"daily": {"time": "19:00", "timezone": "Europe/Berlin"}});
    let skipping = made(app.handle(schedules_create(&me, "upgrade-skip", "Water the plants", evening), now).await.unwrap());
    let answer = app
        .handle(json!({"op": "skip_next", "principal": me, "task_id": skipping, "expected_version": 1}), now)
        .await
        .unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    names.insert("skipping".into(), json!(skipping));

    let monthly = json!({"monthly": {"day": 31, "time": "09:00", "timezone": "Europe/Berlin"}});
    let monthly = made(app.handle(schedules_create(&me, "upgrade-monthly", "Pay rent", monthly), now).await.unwrap());
    names.insert("monthly".into(), json!(monthly));

    let once = json!({"at": (now + Duration::days(2)).to_rfc3339()});
    let cancelled = made(app.handle(schedules_create(&me, "upgrade-cancel", "Dentist", once), now).await.unwrap());
    let answer = app
        .handle(json!({"op": "cancel", "principal": me, "task_id": cancelled, "expected_version": 1}), now)
        .await
        .unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    names.insert("cancelled".into(), json!(cancelled));

    // A connector's standing work, installed, reconciled and approved.
    let marker = json!({"version": 1,
        "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
        "tools": ["list_issues"],
        "limits": {"max_turns": 8, "max_tool_calls": 10, "max_output_tokens": 2000, "timeout_seconds": 120},
        "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}});
    let server = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("weekly_summary", marker, &[], "Summarise the week's issues.")],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    s.t.reconciler()
        .apply(&installed("ins_1", "issues", &server.url(), "workspace"), now)
        .await
        .unwrap();
    let connector = TaskId::for_connector("ws_1", "issues", "weekly_summary");
    let approved = s
        .t
        .admin()
        .handle(
            json!({"op": "approve", "principal": admin_principal(), "task_id": connector, "expected_version": 1}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(approved["ok"], true, "{approved}");
    names.insert("connector".into(), json!(connector.as_str()));

    let dynamodb = aws_sdk_dynamodb::Client::new(&s.t.aws.sdk);
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(&s.t.stack.names.table)
            .set_exclusive_start_key(start)
            .send()
            .await
            .unwrap();
        for item in page.items() {
            items.push(Value::Object(
                item.iter().map(|(k, v)| (k.clone(), dynamo_json(v))).collect(),
            ));
        }
        start = page.last_evaluated_key().cloned();
        if start.is_none() {
            break;
        }
    }
    items.sort_by_key(|item| (item["pk"].to_string(), item["sk"].to_string()));
    let mut schedules = Vec::new();
    for name in s.t.schedule_names().await {
        let got = s.t.schedule(&name).await;
        let target = got.target().unwrap();
        schedules.push(json!({
            "name": name,
            "expression": got.schedule_expression(),
            "timezone": got.schedule_expression_timezone(),
            "state": got.state().map(|s| s.as_str()),
            "start_date": got.start_date().map(|d| d.to_string()),
            "end_date": got.end_date().map(|d| d.to_string()),
            "action_after_completion": got.action_after_completion().map(|a| a.as_str()),
            "description": got.description(),
            "flexible_window": got.flexible_time_window().map(|w| w.mode().as_str()),
            "input": target.input(),
        }));
    }
    let fixture = json!({
        "release": std::env::var("UPGRADE_FIXTURE_RELEASE").unwrap_or_default(),
        "written_at": now.to_rfc3339(),
        "tasks": names,
        "items": items,
        "schedules": schedules,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&fixture).unwrap() + "\n").unwrap();
}
