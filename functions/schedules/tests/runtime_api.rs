//! The real `schedules` binary under a Lambda Runtime API emulator, against
//! moto, with nothing but its SPEC §9 variables and the SDK's endpoint
//! variables: an owner creates a daily reminder, lists it, moves it and
//! cancels it; a payload with a repeated key, sent as bytes, is refused.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use local::runtime::{Launch, Outcome};
use serde_json::json;
use tests::{TestStack, owner, schedules_create};

const BINARY: &str = env!("CARGO_BIN_EXE_schedules");

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_serves_an_owner_s_reminders() {
    let t = TestStack::start().await.unwrap();
    let api = Launch::new("schedules", &t.aws, &t.stack)
        .unwrap()
        .set("MAX_ACTIVE_REMINDERS", "5")
        .timeout(Duration::from_secs(30))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();

    let me = owner("usr_1");
    let daily = json!({"daily": {"time": "19:00", "timezone": "Europe/Berlin"}});
    let created = api
        .invoke_ok(&schedules_create(&me, "k1", "Stretch", daily))
        .await
        .unwrap();
    assert_eq!(created["ok"], true, "{created}");
    let task = &created["task"];
    let id = task["task_id"].as_str().unwrap();
    assert_eq!(t.schedule(id).await.schedule_expression(), Some("cron(0 19 * * ? *)"));
    let listed = api.invoke_ok(&json!({"op": "list", "principal": me})).await.unwrap();
    assert_eq!(listed["tasks"][0]["task_id"], id);
    let moved = api
        .invoke_ok(
            &json!({"op": "update", "principal": me, "task_id": id, "expected_version": 1,
                           "idempotency_key": "u1",
                           "input": {"daily": {"time": "20:00", "timezone": "Europe/Berlin"}}}),
        )
        .await
        .unwrap();
    assert_eq!(moved["task"]["schedule"]["daily"]["time"], "20:00", "{moved}");
    assert_eq!(t.schedule(id).await.schedule_expression(), Some("cron(0 20 * * ? *)"));
    let cancelled = api
        .invoke_ok(&json!({"op": "cancel", "principal": me, "task_id": id, "expected_version": 2}))
        .await
        .unwrap();
    assert_eq!(cancelled["task"]["state"], "deleted");
    assert_eq!(t.schedule_names().await, Vec::<String>::new());

    // The bytes as a caller sent them: the repeated key reaches the function.
    let text = r#"{"op": "list", "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.read"]},
                   "principal": {"id": "usr_2", "workspace": "ws_1", "scopes": ["schedule.read"]}}"#;
    match api.invoke_text(text).await.unwrap() {
        Outcome::Response(answer) => assert_eq!(answer["error"]["code"], "invalid_request", "{answer}"),
        Outcome::Error(error) => panic!("a refusal is an answer, not a function error: {error}"),
    }
}
