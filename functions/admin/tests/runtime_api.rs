//! The real `admin` binary under a Lambda Runtime API emulator, against moto:
//! list, get and approve a task reconcile created from the MCP fixture.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::runtime::Launch;
use serde_json::json;
use tests::{TestStack, admin_principal, installed};

const BINARY: &str = env!("CARGO_BIN_EXE_admin");

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_lists_explains_and_approves() {
    let t = TestStack::start().await.unwrap();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1, "schedule": {"cron": "30 2 * * *", "timezone": "America/New_York"},
                   "tools": ["list_issues"], "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[("repo", true)],
            "Summarise {{repo}}.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    t.reconciler()
        .apply(&installed("ins_1", "issues", &fixture.url(), "workspace"), Utc::now())
        .await
        .unwrap();

    let api = Launch::new("admin", &t.aws, &t.stack)
        .unwrap()
        .timeout(Duration::from_secs(30))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();

    let listed = api
        .invoke_ok(&json!({"op": "list", "principal": admin_principal()}))
        .await
        .unwrap();
    let task = &listed["tasks"][0];
    assert_eq!(task["state"], "held");
    let task_id = task["task_id"].as_str().unwrap();
    let got = api
        .invoke_ok(&json!({"op": "get", "principal": admin_principal(), "task_id": task_id}))
        .await
        .unwrap();
    assert_eq!(got["version"], 1);
    let fires = got["next_fires"].as_array().unwrap();
    assert_eq!(fires.len(), 5);
    let approved = api
        .invoke_ok(
            &json!({"op": "approve", "principal": admin_principal(), "task_id": task_id, "expected_version": 1,
                           "arguments": {"repo": "acme/web"}}),
        )
        .await
        .unwrap();
    assert_eq!(approved["ok"], true, "{approved}");
    assert!(
        approved["explanation"].as_str().unwrap().starts_with("runs next at"),
        "{approved}"
    );
    let stale = api
        .invoke_ok(&json!({"op": "pause", "principal": admin_principal(), "task_id": task_id, "expected_version": 1}))
        .await
        .unwrap();
    assert_eq!(stale["error"]["code"], "version_conflict");
    let state = t.schedule(task_id).await.state().map(|s| s.as_str().to_owned());
    assert_eq!(state.as_deref(), Some("ENABLED"));
}
