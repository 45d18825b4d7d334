//! DynamoDB requests per operation, read from the store adapter's own
//! counter (`DynamoStore::requests`), with the library use cases wired in
//! process as the functions wire them, against moto, the Converse stand-in
//! and the rmcp fixture server on loopback.

use crate::AdminFunction as tests_admin;
use chrono::{Duration, Utc};
use local::mcp_fixture::{FixturePrompt, FixtureState, McpFixture, scheduled_prompt, tool};
use serde::Serialize;
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::Admin;
use shared::app::run::Disposition;
use shared::domain::payload::Payload;
use shared::domain::task::TaskId;
use shared::domain::task::install::InstallScope;
use shared::domain::task::overrides::Overrides;

use crate::{
    ENABLED, RunStack, admin_principal, connector_task, create_request, event, install, installed, reminder,
    run_message, run_settings,
};

/// One operation's count.
#[derive(Debug, Clone, Serialize)]
pub struct Requests {
    pub operation: String,
    pub dynamodb: u64,
    /// What the operation was seen to do (its outcome), so a count is read
    /// beside what it bought.
    pub outcome: String,
}

fn row(operation: &str, dynamodb: u64, outcome: impl Into<String>) -> Requests {
    Requests {
        operation: operation.to_owned(),
        dynamodb,
        outcome: outcome.into(),
    }
}

fn deadline() -> chrono::DateTime<Utc> {
    Utc::now() + Duration::minutes(5)
}

/// A declaration with a required argument, as a connector server releases it.
fn weekly(max_turns: u32) -> FixturePrompt {
    scheduled_prompt(
        "weekly_summary",
        json!({"version": 1,
               "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
               "tools": ["list_issues"],
               "limits": {"max_turns": max_turns, "max_tool_calls": 10, "max_output_tokens": 2000, "timeout_seconds": 120},
               "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
        &[("repo", true)],
        "Summarise the week's issues in {{repo}}.",
    )
}

/// Every operation's count, in the order of docs/benchmarks.md's table.
pub async fn measure() -> anyhow::Result<Vec<Requests>> {
    let s = RunStack::start().await?;
    let mut rows = Vec::new();

    // create, and the same request again (the idempotent replay).
    let create = s.t.create_app();
    let request = create_request("bench-create", Utc::now(), Duration::hours(1));
    for operation in ["create", "create replay"] {
        let before = create.store().requests();
        let answer = create.handle(Payload::from_value(request.clone()), Utc::now()).await?;
        anyhow::ensure!(answer.to_json()["ok"] == true, "create refused: {}", answer.to_json());
        rows.push(row(operation, create.store().requests() - before, "ok"));
    }

    // The runner: a reminder's run and its duplicate delivery.
    let runner = s.runner();
    let at = Utc::now() - Duration::seconds(5);
    let task = reminder(at);
    s.store().insert_task(&task).await?;
    for (operation, execution) in [("run (reminder)", "e1"), ("duplicate delivery", "e2")] {
        let before = runner.store().requests();
        let got = runner
            .deliver("m", &run_message(&task, at, execution), Utc::now(), deadline())
            .await?;
        rows.push(row(operation, runner.store().requests() - before, format!("{got:?}")));
    }

    // A connector task's run: its install is read too.
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![weekly(8)],
        tools: vec![tool("list_issues"), tool("post_summary")],
        ..Default::default()
    })
    .await?;
    s.store()
        .put_install(&install("ins_run", "tracker", &fixture.url(), InstallScope::Workspace))
        .await?;
    // Its own server name: the reconcile passes below own `issues`' tasks.
    let mut connector = connector_task("tracker", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    connector.provenance = shared::domain::task::Provenance::Connector {
        install_id: "ins_run".into(),
        server: "tracker".into(),
        prompt: "weekly_summary".into(),
    };
    s.store().insert_task(&connector).await?;
    let before = runner.store().requests();
    let got = runner
        .deliver("m", &run_message(&connector, at, "e3"), Utc::now(), deadline())
        .await?;
    rows.push(row(
        "run (connector task)",
        runner.store().requests() - before,
        format!("{got:?}"),
    ));

    // Skips at the first door (before any read) ...
    let off = s.runner_on(s.store(), run_settings(false));
    let other = reminder(at - Duration::seconds(1));
    s.store().insert_task(&other).await?;
    let got = off
        .deliver("m", &run_message(&other, at, "e4"), Utc::now(), deadline())
        .await?;
    rows.push(row(
        "skip at the first door (worker off)",
        off.store().requests(),
        format!("{got:?}"),
    ));
    let late = Utc::now() - Duration::hours(2);
    let missed = reminder(late);
    s.store().insert_task(&missed).await?;
    let before = runner.store().requests();
    let got = runner
        .deliver("m", &run_message(&missed, late, "e5"), Utc::now(), deadline())
        .await?;
    rows.push(row(
        "skip at the first door (missed)",
        runner.store().requests() - before,
        format!("{got:?}"),
    ));

    // ... and at the door after the claim.
    let paused_at = at - Duration::seconds(2);
    let mut paused = reminder(paused_at);
    paused.overrides = Some(Overrides {
        paused: true,
        ..Default::default()
    });
    s.store().insert_task(&paused).await?;
    let before = runner.store().requests();
    let got = runner
        .deliver("m", &run_message(&paused, paused_at, "e6"), Utc::now(), deadline())
        .await?;
    rows.push(row(
        "skip after the claim (paused)",
        runner.store().requests() - before,
        format!("{got:?}"),
    ));
    anyhow::ensure!(
        matches!(got, Disposition::Skipped(_)),
        "the paused task was not skipped: {got:?}"
    );

    // Reconcile passes of one install, then admin on the task it made.
    let t = &s.t;
    let issues = McpFixture::start(FixtureState {
        prompts: vec![weekly(8)],
        tools: vec![tool("list_issues"), tool("post_summary")],
        ..Default::default()
    })
    .await?;
    let reconciler = t.reconciler();
    let pass = |operation: &'static str, summary: shared::app::reconcile::Summary, requests: u64| {
        row(
            operation,
            requests,
            format!("{} task writes {:?}", summary.tasks_written, summary.changes),
        )
    };
    let before = reconciler.store().requests();
    let summary = reconciler
        .apply(&installed("ins_1", "issues", &issues.url(), "workspace"), Utc::now())
        .await?;
    rows.push(pass(
        "reconcile pass, install (task created)",
        summary,
        reconciler.store().requests() - before,
    ));
    let list_changed = event("prompts.list_changed", "ins_1");
    let before = reconciler.store().requests();
    let summary = reconciler.apply(&list_changed, Utc::now()).await?;
    anyhow::ensure!(summary.tasks_written == 0, "an unchanged pass wrote: {summary:?}");
    rows.push(pass(
        "reconcile pass, unchanged",
        summary,
        reconciler.store().requests() - before,
    ));
    issues.state().write().await.prompts = vec![weekly(4)];
    let before = reconciler.store().requests();
    let summary = reconciler.apply(&list_changed, Utc::now()).await?;
    rows.push(pass(
        "reconcile pass, changed (a narrowing release)",
        summary,
        reconciler.store().requests() - before,
    ));

    let store = t.admin_store();
    let admin = tests_admin(Admin::new(
        store.clone(),
        EventBridgeSchedules::from_sdk(&t.aws.sdk, t.create_config(ENABLED).target),
        t.runs_queue(),
        crate::admin_settings(),
    ));
    let task_id = TaskId::for_connector("ws_1", "issues", "weekly_summary");
    let version = || async {
        t.item_at(Key::task("ws_1", task_id.as_str()))
            .await
            .and_then(|item| item["version"].as_u64())
            .unwrap_or_default()
    };
    let ops: [(&str, Value, bool); 8] = [
        ("list", json!({}), false),
        ("get", json!({}), false),
        ("approve", json!({"arguments": {"repo": "acme/web"}}), true),
        ("pause", json!({"note": "quiet week"}), true),
        ("resume", json!({}), true),
        ("runs", json!({}), false),
        ("delete", json!({}), true),
        ("restore", json!({}), true),
    ];
    for (op, extra, versioned) in ops {
        let mut request = json!({"op": op, "principal": admin_principal(), "task_id": task_id});
        if versioned {
            request["expected_version"] = json!(version().await);
        }
        if let (Some(request), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
            request.extend(extra.clone());
        }
        let before = store.requests();
        let answer = admin.handle(request, Utc::now()).await?;
        let outcome = if answer["ok"] == true {
            "ok".to_owned()
        } else {
            crate::code(&answer)
        };
        rows.push(row(&format!("admin {op}"), store.requests() - before, outcome));
    }
    drop(fixture);
    Ok(rows)
}
