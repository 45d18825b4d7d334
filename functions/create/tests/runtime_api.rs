//! The real `create` binary under a Lambda Runtime API emulator, against
//! moto, with nothing but its SPEC §9 variables and the SDK's endpoint
//! variables: the way `cargo lambda watch` or Lambda itself would run it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use local::runtime::{FunctionProcess, Outcome, RuntimeApi};
use local::{LocalAws, Stack, StackNames};
use serde_json::{Value, json};

const BINARY: &str = env!("CARGO_BIN_EXE_create");
/// SPEC §9's example ceilings, as `SCHEDULE_CEILINGS` holds them.
fn ceilings() -> String {
    serde_json::to_string(&shared::domain::limits::EXAMPLE_CEILINGS).expect("ceilings as JSON")
}

fn function_env(aws: &LocalAws, stack: &Stack) -> Vec<(String, String)> {
    let mut env = aws.sdk_env();
    env.extend(stack.function_env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.push(("AGENT_SCHEDULE_API_ENABLED".into(), "true".into()));
    env.push(("AGENT_SCHEDULE_WORKER_ENABLED".into(), "true".into()));
    env.push(("SCHEDULE_CEILINGS".into(), ceilings()));
    env
}

fn log_path(name: &str) -> std::path::PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    dir.join(format!("{name}-{}.log", uuid::Uuid::new_v4().simple()))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_serves_describe_and_create_under_the_runtime_api() {
    let aws = LocalAws::start().await.unwrap();
    let stack = Stack::create(&aws.sdk, StackNames::unique("rt")).await.unwrap();
    let api = RuntimeApi::start("create", Duration::from_secs(30)).await.unwrap();
    let log = log_path("create");
    let _function = FunctionProcess::spawn(
        Path::new(BINARY),
        &api,
        "create",
        &function_env(&aws, &stack),
        Some(&log),
    )
    .unwrap();

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

    let logs = std::fs::read_to_string(&log).unwrap();
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
    let mut env = function_env(&aws, &stack);
    for (name, value) in env.iter_mut() {
        if name == "TABLE_NAME" {
            *value = "no-such-table".into();
        }
    }
    let api = RuntimeApi::start("create", Duration::from_secs(30)).await.unwrap();
    let _function =
        FunctionProcess::spawn(Path::new(BINARY), &api, "create", &env, Some(&log_path("create-fail"))).unwrap();
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

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_variable_fails_the_start_and_names_itself() {
    let aws = LocalAws::start().await.unwrap();
    let stack = Stack::create(&aws.sdk, StackNames::unique("rt")).await.unwrap();
    let env: Vec<_> = function_env(&aws, &stack)
        .into_iter()
        .filter(|(k, _)| k != "SCHEDULE_CEILINGS")
        .collect();
    let api = RuntimeApi::start("create", Duration::from_secs(30)).await.unwrap();
    let log = log_path("create-init");
    let mut function = FunctionProcess::spawn(Path::new(BINARY), &api, "create", &env, Some(&log)).unwrap();
    let status = function.wait_exit(Duration::from_secs(30)).await.unwrap();
    assert!(!status.success());
    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(logs.contains("SCHEDULE_CEILINGS"), "{logs}");
}
