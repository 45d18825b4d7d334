//! The fixtures in `infra/events/` are what docs/integrating.md tells people to send:
//! they must stay valid requests with the answers docs/integrating.md promises.

use chrono::{TimeZone, Utc};
use serde_json::Value;
use tests::{TestStack, code};

fn fixture(name: &str) -> Value {
    let path = local::moto::repo_root().join("infra/events").join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture")).expect("fixture is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_event_fixtures_answer_as_documented() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    // The fixtures are dated: answer them as of the day they were written.
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let answer = |name: &'static str| {
        let app = &app;
        async move { app.handle(fixture(name), now).await.unwrap().to_json() }
    };
    assert_eq!(answer("describe.json").await["descriptor"]["name"], "schedule.create");
    let created = answer("create-reminder.json").await;
    assert_eq!(code(&created), "ok", "{created}");
    assert_eq!(created["task"]["at"], "2027-06-24T17:00:00Z");
    assert_eq!(code(&answer("create-naive-instant.json").await), "naive_instant");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_reconcile_admin_and_runner_fixtures_are_what_the_functions_take() {
    let webhook =
        std::fs::read(local::moto::repo_root().join("infra/events/webhook-connector-installed.json")).unwrap();
    let event = shared::domain::connector::webhook::Event::parse(&webhook).unwrap();
    assert_eq!(event.install_id(), "ins_1");

    let batch = fixture("runner-sqs-batch.json");
    let body = batch["Records"][0]["body"].as_str().unwrap();
    let message: shared::domain::run::occurrence::RunMessage = serde_json::from_str(body).unwrap();
    assert!(shared::domain::task::TaskId::parse(&message.task_id).is_some());
    assert!(message.scheduled().is_some());

    assert_eq!(fixture("reconcile-all.json")["op"], "reconcile_all");

    // The admin fixtures name a task that does not exist here: they parse,
    // pass the scope check and answer not_found.
    let t = TestStack::start().await.unwrap();
    for name in [
        "admin-get.json",
        "admin-approve.json",
        "admin-pause.json",
        "admin-skip-next.json",
        "admin-unskip.json",
        "admin-run-now.json",
    ] {
        let answer = t.admin().handle(fixture(name), Utc::now()).await.unwrap();
        assert_eq!(answer["error"]["code"], "not_found", "{name}: {answer}");
    }
    // The workspace's budget: none, then set from version 0, then read back.
    let none = t
        .admin()
        .handle(fixture("admin-workspace.json"), Utc::now())
        .await
        .unwrap();
    assert_eq!(none["workspace"]["version"], 0, "{none}");
    assert_eq!(none["workspace"]["budget"], serde_json::Value::Null, "{none}");
    let set = t
        .admin()
        .handle(fixture("admin-set-budget.json"), Utc::now())
        .await
        .unwrap();
    assert_eq!(set["ok"], true, "{set}");
    assert_eq!(
        (
            set["workspace"]["budget"]["max_usd_per_month"].as_f64(),
            set["workspace"]["version"].as_u64()
        ),
        (Some(50.0), Some(1)),
        "{set}"
    );
    let again = t
        .admin()
        .handle(fixture("admin-set-budget.json"), Utc::now())
        .await
        .unwrap();
    assert_eq!(again["error"]["code"], "version_conflict", "{again}");
    // Gated calls' requests: none yet; deciding one that does not exist is not_found.
    let approvals = t
        .admin()
        .handle(fixture("admin-approvals.json"), Utc::now())
        .await
        .unwrap();
    assert_eq!(
        (approvals["approvals"].clone(), approvals["cursor"].clone()),
        (serde_json::json!([]), serde_json::Value::Null),
        "{approvals}"
    );
    for name in ["admin-approve-call.json", "admin-deny-call.json"] {
        let answer = t.admin().handle(fixture(name), Utc::now()).await.unwrap();
        assert_eq!(answer["error"]["code"], "not_found", "{name}: {answer}");
    }
    let listed = t.admin().handle(fixture("admin-list.json"), Utc::now()).await.unwrap();
    assert_eq!(
        (listed["tasks"].clone(), listed["cursor"].clone()),
        (serde_json::json!([]), serde_json::Value::Null),
        "{listed}"
    );
}

/// The schedules fixtures walk one reminder's life in docs/integrating.md's order:
/// each answers as documented, against the versions the previous one left.
#[tokio::test(flavor = "multi_thread")]
async fn the_schedules_fixtures_walk_a_daily_reminder_through_its_life() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let mut answers = Vec::new();
    for name in [
        "schedules-create-daily.json",
        "schedules-create-weekly.json",
        "schedules-list.json",
        "schedules-get.json",
        "schedules-update.json",
        "schedules-pause.json",
        "schedules-resume.json",
        "schedules-cancel.json",
        "schedules-runs.json",
    ] {
        let answer = app.handle(fixture(name), now).await.unwrap();
        assert_eq!(code(&answer), "ok", "{name}: {answer}");
        answers.push(answer);
    }
    let daily = &answers[0]["task"];
    assert_eq!(
        daily["task_id"],
        fixture("schedules-get.json")["task_id"],
        "the fixtures name the task the create fixture makes"
    );
    assert_eq!(answers[2]["tasks"].as_array().unwrap().len(), 2);
    assert_eq!(answers[4]["task"]["schedule"]["daily"]["time"], "20:00");
    assert_eq!(answers[5]["task"]["state"], "paused");
    assert_eq!(answers[6]["task"]["state"], "scheduled");
    assert_eq!(answers[7]["task"]["state"], "deleted");
    assert_eq!(answers[8]["runs"], serde_json::json!([]));
    // `run` parses and finds the owner's reminder; it has no run at that time.
    let run = app.handle(fixture("schedules-run.json"), now).await.unwrap();
    assert_eq!(run["error"]["code"], "not_found", "{run}");
    assert!(run["error"]["message"].as_str().unwrap().contains("no run"), "{run}");
    let admin = t.admin().handle(fixture("admin-runs.json"), Utc::now()).await.unwrap();
    assert_eq!(admin["error"]["code"], "not_found", "{admin}");
}

/// The recurring kinds' fixtures: each creates what docs/integrating.md shows.
#[tokio::test(flavor = "multi_thread")]
async fn the_monthly_yearly_and_until_fixtures_create_what_the_readme_shows() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    for (name, schedule, next) in [
        (
            "schedules-create-monthly.json",
            serde_json::json!({"monthly": {"day": 31, "time": "09:00", "timezone": "Europe/Berlin"}}),
            "2026-12-31T08:00:00Z",
        ),
        (
            "schedules-create-monthly-weekday.json",
            serde_json::json!({"monthly": {"weekday": "MON", "nth": 1, "time": "12:30", "timezone": "America/New_York"}}),
            "2026-12-07T17:30:00Z",
        ),
        (
            "schedules-create-yearly.json",
            serde_json::json!({"yearly": {"month": 2, "day": 29, "time": "08:00", "timezone": "Europe/London"}}),
            "2028-02-29T08:00:00Z",
        ),
        (
            "schedules-create-until.json",
            serde_json::json!({"daily": {"time": "08:00", "timezone": "Europe/Berlin"}, "until": "2026-12-09"}),
            "2026-12-01T07:00:00Z",
        ),
    ] {
        let answer = app.handle(fixture(name), now).await.unwrap();
        assert_eq!(code(&answer), "ok", "{name}: {answer}");
        assert_eq!(answer["task"]["schedule"], schedule, "{name}");
        assert_eq!(answer["task"]["next_run_at"], next, "{name}");
    }
}

/// The skip and run-now fixtures, after the daily reminder's create and
/// update: the next run is skipped, then taken back, and one runs now.
#[tokio::test(flavor = "multi_thread")]
async fn the_skip_fixtures_skip_the_next_run_and_take_it_back() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap();
    let mut answers = Vec::new();
    for name in [
        "schedules-create-daily.json",
        "schedules-update.json",
        "schedules-skip-next.json",
        "schedules-unskip.json",
        "schedules-run-now.json",
    ] {
        let answer = app.handle(fixture(name), now).await.unwrap();
        assert_eq!(code(&answer), "ok", "{name}: {answer}");
        answers.push(answer);
    }
    // Daily at 20:00 in Berlin: the 30th's run is skipped, then runs again.
    assert_eq!(answers[2]["task"]["next_run_at"], "2026-12-01T19:00:00Z");
    assert_eq!(answers[3]["task"]["next_run_at"], "2026-11-30T19:00:00Z");
    assert_eq!(answers[3]["task"]["version"], 4);
    assert_eq!(answers[4]["replayed"], false);
    assert_eq!(
        answers[4]["run_id"],
        format!(
            "{}@2026-11-30T12:00:00Z",
            answers[0]["task"]["task_id"].as_str().unwrap()
        )
    );
    assert_eq!(t.take_run_messages().await.len(), 1, "its message is on the runs queue");
}
