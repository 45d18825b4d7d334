//! The real `create` binary under a Lambda Runtime API emulator, against
//! moto, with nothing but its SPEC §9 variables and the SDK's endpoint
//! variables: the way `cargo lambda watch` or Lambda itself would run it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use local::runtime::{Function, Launch, Outcome};
use local::{LocalAws, Stack, StackNames};
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_create");

/// create as the template configures it on `stack`, logging to a file.
fn launch(aws: &LocalAws, stack: &Stack) -> Launch {
    Launch::new("create", aws, stack)
        .unwrap()
        .timeout(std::time::Duration::from_secs(30))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
}

async fn start(launch: Launch) -> Function {
    launch.start(Path::new(BINARY)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_serves_describe_and_create_under_the_runtime_api() {
    let aws = LocalAws::start().await.unwrap();
    let stack = Stack::create(&aws.sdk, StackNames::unique("rt")).await.unwrap();
    let api = start(launch(&aws, &stack)).await;

    let describe = api.invoke_ok(&json!({"op": "describe"})).await.unwrap();
    assert_eq!(describe["descriptor"]["name"], "schedule.create");

    let at = (chrono::Utc::now() + chrono::Duration::hours(2))
        .with_timezone(&chrono::FixedOffset::east_opt(-5 * 3600).unwrap());
    let request = json!({
        "op": "create",
        "principal": {"id": "usr_123", "workspace": "ws_1", "scopes": ["schedule.write"]},
        "idempotency_key": "call_7f3a",
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard", "limits": {"max_turns": 60}},
        "approval": {"id": "apr_9", "approved_at": chrono::Utc::now().to_rfc3339()},
        "input": {"title": "Call mom", "instruction": "Remind me to call mom about Sunday.", "at": at.to_rfc3339()}
    });
    let created = api.invoke_ok(&request).await.unwrap();
    assert_eq!(created["ok"], true, "{created}");
    assert_eq!(created["replayed"], false);
    assert_eq!(created["task"]["limits"]["max_turns"], 10, "capped by the ceiling");
    let replayed = api.invoke_ok(&request).await.unwrap();
    assert_eq!(replayed["replayed"], true);

    let task_id = created["task"]["task_id"].as_str().unwrap();
    let item = aws_sdk_dynamodb::Client::new(&aws.sdk)
        .get_item()
        .table_name(&stack.names.table)
        .set_key(Some(shared::adapters::keys::Key::task("ws_1", task_id).to_map()))
        .send()
        .await
        .unwrap()
        .item
        .map(local::item_json)
        .expect("the task item");
    assert_eq!(item["state"], "scheduled");
    let schedule = aws_sdk_scheduler::Client::new(&aws.sdk)
        .get_schedule()
        .group_name(&stack.names.schedule_group)
        .name(task_id)
        .send()
        .await
        .unwrap();
    assert_eq!(schedule.schedule_expression_timezone(), Some("UTC"));

    let refused = api.invoke_ok(&json!({"op": "create", "garbage": true})).await.unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request");

    // The caller's bytes, a key repeated: refused, not resolved to one value.
    let mut twice = request.clone();
    twice["idempotency_key"] = json!("call_twice");
    let text = twice
        .to_string()
        .replacen("\"at\":", "\"at\":\"2027-01-01T00:00:00Z\",\"at\":", 1);
    match api.invoke_text(&text).await.unwrap() {
        Outcome::Response(answer) => assert_eq!(answer["error"]["code"], "invalid_request", "{answer}"),
        Outcome::Error(error) => panic!("a refusal is an answer: {error}"),
    }

    let logs = api.logs().unwrap();
    assert!(
        logs.lines().any(|l| serde_json::from_str::<Value>(l).is_ok()),
        "JSON log lines: {logs}"
    );
    assert!(!logs.contains("call mom about Sunday"), "no instruction text in logs");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_internal_failure_is_a_function_error() {
    let aws = LocalAws::start().await.unwrap();
    let stack = Stack::create(&aws.sdk, StackNames::unique("rt")).await.unwrap();
    let api = start(launch(&aws, &stack).set("TABLE_NAME", "no-such-table")).await;
    let request = json!({
        "op": "create",
        "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.write"]},
        "idempotency_key": "k",
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard"},
        "approval": {"id": "apr_9", "approved_at": "2026-11-30T10:00:00Z"},
        "input": {"title": "t", "instruction": "i", "at": (chrono::Utc::now() + chrono::Duration::hours(1)).to_rfc3339()}
    });
    match api.invoke(&request).await.unwrap() {
        Outcome::Error(error) => assert!(error.to_string().contains("DynamoDB"), "{error}"),
        Outcome::Response(answer) => panic!("expected a function error, got {answer}"),
    }
}

/// The log lines of a start that fails under what `change` does to the
/// function's environment.
async fn failed_start(change: impl FnOnce(Launch) -> Launch) -> String {
    let aws = LocalAws::start().await.unwrap();
    let stack = Stack::create(&aws.sdk, StackNames::unique("rt")).await.unwrap();
    let mut function = start(change(launch(&aws, &stack))).await;
    let status = function
        .process
        .wait_exit(std::time::Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!status.success());
    function.logs().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_partitions_file_it_cannot_write_fails_the_start_and_says_so() {
    let unwritable = format!("/nonexistent-{}/endpoint-partitions.json", std::process::id());
    let logs = failed_start(|launch| launch.set("SMITHY_CLIENT_SDK_CUSTOM_PARTITION", unwritable)).await;
    assert!(
        logs.contains("endpoint partitions could not be written")
            && logs.contains("SMITHY_CLIENT_SDK_CUSTOM_PARTITION"),
        "{logs}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_variable_fails_the_start_and_names_itself() {
    let logs = failed_start(|launch| launch.unset("SCHEDULE_CEILINGS")).await;
    assert!(logs.contains("SCHEDULE_CEILINGS"), "{logs}");
}
