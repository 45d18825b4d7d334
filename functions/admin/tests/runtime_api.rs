//! The real `admin` binary under a Lambda Runtime API emulator, against moto:
//! list, get and approve a task reconcile created from the MCP fixture.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::runtime::Launch;
use serde_json::{Value, json};
use tests::{TestStack, admin_principal, installed};

const BINARY: &str = env!("CARGO_BIN_EXE_admin");

/// The admin binary on `t`'s stack under its template's environment.
async fn start_admin(t: &TestStack) -> local::runtime::Function {
    Launch::new("admin", &t.aws, &t.stack)
        .unwrap()
        .timeout(Duration::from_secs(30))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap()
}

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

    let api = start_admin(&t).await;

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

/// The admin's SPEC §15 operations through the binary under its role: the
/// workspace's budget read and set, a gated call's request listed and
/// denied (the request decided, the record skipped, the claim finished and
/// the account charged in one transaction), another approved (a
/// `ConditionCheck` that its occurrence still awaits, then its resume sent
/// to the runs queue). The occurrences are parked by the real runner.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_sets_the_budget_and_decides_gated_calls() {
    use local::converse::Reply;
    use local::mcp_fixture::annotated_tool;
    let s = tests::RunStack::start().await.unwrap();
    let gated = annotated_tool("delete_issue", json!({"destructiveHint": true}));
    let (issues, task) = s.triage(vec![gated], &["delete_issue"], &[]).await;
    let api = start_admin(&s.t).await;
    let principal = json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]});

    let read = api
        .invoke_ok(&json!({"op": "workspace", "principal": principal}))
        .await
        .unwrap();
    assert_eq!(read["workspace"]["version"], 0, "{read}");
    let set = api
        .invoke_ok(&json!({"op": "set_budget", "principal": principal,
                           "budget": {"max_usd_per_month": 10.0}, "expected_version": 0}))
        .await
        .unwrap();
    assert_eq!(set["workspace"]["budget"]["max_usd_per_month"], 10.0, "{set}");

    // Two occurrences wait at the gated call.
    let first = Utc::now() - chrono::Duration::minutes(10);
    let second = Utc::now() - chrono::Duration::minutes(5);
    for at in [first, second] {
        s.model
            .script([Reply::tool("issues__delete_issue", json!({"id": 7}), 1000, 50)])
            .await;
        assert_eq!(
            s.deliver_once(&task, at).await,
            shared::app::run::Disposition::AwaitingApproval
        );
    }
    let listed = api
        .invoke_ok(&json!({"op": "approvals", "principal": principal, "task_id": task.task_id}))
        .await
        .unwrap();
    let requests = listed["approvals"].as_array().unwrap().clone();
    assert_eq!(requests.len(), 2, "{listed}");
    let of = |at: chrono::DateTime<Utc>| {
        let run = shared::domain::run::occurrence::run_id(task.task_id.as_str(), at);
        requests.iter().find(|r| r["run_id"] == run.as_str()).unwrap().clone()
    };
    let (denied, approved) = (of(first), of(second));

    let answer = api
        .invoke_ok(
            &json!({"op": "deny_call", "principal": principal, "request_id": denied["request_id"],
                           "expected_version": denied["version"], "note": "no"}),
        )
        .await
        .unwrap();
    assert_eq!(answer["approval"]["state"], "denied", "{answer}");
    let record = s
        .run_record(&task.task_id, &shared::domain::run::occurrence::occurrence_key(first))
        .await
        .unwrap();
    assert_eq!(
        (record["status"].as_str(), record["reason"].as_str()),
        (Some("skipped"), Some("denied"))
    );

    let answer = api
        .invoke_ok(
            &json!({"op": "approve_call", "principal": principal, "request_id": approved["request_id"],
                           "expected_version": approved["version"]}),
        )
        .await
        .unwrap();
    assert_eq!(answer["approval"]["state"], "approved", "{answer}");
    let resumes = s.t.take_run_messages().await;
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    let resume: Value = serde_json::from_str(&resumes[0]).unwrap();
    assert_eq!(resume["resume"], approved["request_id"], "{resume}");
    assert!(
        issues.state().read().await.calls.is_empty(),
        "nothing called by a decision"
    );
}
