//! `sat describe` as an operator runs it against the local stack: the
//! tasks the real runner ran or skipped, read back through the stack's
//! environment file.

use chrono::{Duration, Utc};
use local::converse::Reply;
use shared::domain::schedule::Schedule;
use shared::domain::task::hold::HoldReason;
use tests::{RunStack, connector_task, deadline, run_message};

use crate::{EnvFile, sat, sat_with};

#[tokio::test(flavor = "multi_thread")]
async fn a_task_reads_at_a_glance_with_its_runs_and_reasons() {
    let s = RunStack::start().await.unwrap();
    let env = EnvFile::write(&s.t.aws, &s.t.stack, &[]);

    // A reminder that ran: completed, its run succeeded at a cost.
    s.model.script([Reply::text("Time to call mom!", 1000, 100)]).await;
    let (reminder, at) = s.due_reminder().await;
    s.deliver_once(&reminder, at).await;

    // A connector task held for approval, at 02:30 in Berlin (a time DST
    // skips and repeats), with an occurrence delivered two days late.
    let now = Utc::now();
    let mut held = connector_task("issues", "weekly_summary", &["list_issues"], &[]);
    held.spec.schedule = Schedule::Cron {
        cron: "30 2 * * *".into(),
        timezone: "Europe/Berlin".into(),
        until: None,
    };
    held.hold.place(HoldReason::AwaitingApproval, now, "new declaration");
    s.insert(&held).await;
    let occurrence = shared::domain::schedule::preview::next_fires(&held.spec.schedule, now - Duration::days(2), 1)
        .unwrap()[0]
        .at
        .unwrap();
    s.runner()
        .deliver("m2", &run_message(&held, occurrence, "e2"), Utc::now(), deadline())
        .await
        .unwrap();

    let ran = sat_with(env.path(), &["describe", reminder.task_id.as_str()]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    let text = &ran.stdout;
    assert!(text.contains("state       completed"), "{text}");
    assert!(text.contains("succeeded"), "{text}");
    assert!(
        text.contains("none, as a finished task has none"),
        "the schedule deleted itself: {text}"
    );
    // An admin's view: never the reminder's text.
    assert!(!text.contains("Call mom") && !text.contains("call mom"), "{text}");

    let ran = sat_with(env.path(), &["describe", held.task_id.as_str(), "--workspace", "ws_1"]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    let text = &ran.stdout;
    assert!(
        text.contains("waits for an admin to approve it before its first run"),
        "{text}"
    );
    assert!(text.contains("at 02:30, every day (Europe/Berlin)"), "{text}");
    assert!(
        text.contains("does not exist as clocks go forward"),
        "the DST skip: {text}"
    );
    assert!(
        text.contains("happens twice as clocks go back"),
        "the DST repeat: {text}"
    );
    assert!(
        text.contains("skipped: it was delivered later than"),
        "the skip's reason in words: {text}"
    );
    assert!(text.contains("at most USD 5.00 a month"), "{text}");
    assert!(text.contains("missing: the task has no Scheduler schedule"), "{text}");

    let report = sat_with(env.path(), &["--json", "describe", held.task_id.as_str()])
        .await
        .json();
    assert_eq!(report["workspace"], "ws_1");
    assert_eq!(report["state"], "held");
    assert_eq!(report["hold"][0]["reason"], "awaiting_approval");
    assert_eq!(report["runs"][0]["status"], "skipped");
    assert_eq!(
        report["runs"][0]["explanation"],
        "skipped: it was delivered later than the catch-up window after its time"
    );
    assert_eq!(
        report["runs"][0]["scheduled_time"],
        shared::domain::schedule::format_utc(occurrence)
    );
    assert_eq!(report["missed"], 1, "the late delivery counts as missed");
    assert_eq!(report["scheduler"]["exists"], false);
    assert_eq!(report["cost"]["ceiling"]["runs_per_month"], 31);
    assert_eq!(report["next_fires"].as_array().unwrap().len(), 5);
    assert_eq!(report["dst"].as_array().unwrap().len(), 2, "{}", report["dst"]);
    let reminder = sat_with(env.path(), &["--json", "describe", reminder.task_id.as_str()])
        .await
        .json();
    assert!(reminder["title"].is_null());
    assert_eq!(reminder["runs"][0]["status"], "succeeded");
    assert!(
        reminder["runs"][0]["output"].is_null(),
        "an admin never reads a reminder's output"
    );
    let cost = reminder["runs"][0]["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0);
    // The workspace's budget: none set, the reminder's cost committed;
    // then set below that cost, and reached.
    assert_eq!(reminder["workspace_budget"]["budget"], serde_json::Value::Null);
    assert!((reminder["workspace_budget"]["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-9);
    let set = serde_json::json!({"op": "set_budget",
        "principal": {"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]},
        "budget": {"max_usd_per_month": cost / 2.0}, "expected_version": 0});
    assert_eq!(s.t.admin().handle(set, Utc::now()).await.unwrap()["ok"], true);
    let ran = sat_with(env.path(), &["describe", held.task_id.as_str()]).await;
    let text = &ran.stdout;
    assert!(text.contains("workspace   budget USD 0.00 a month"), "{text}");
    assert!(
        text.contains("REACHED, every occurrence of the workspace skips `budget_reached`"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_task_or_stack_is_a_clear_error() {
    let s = tests::TestStack::start().await.unwrap();
    let env = EnvFile::write(&s.aws, &s.stack, &[]);
    let id = shared::domain::task::TaskId::for_connector("ws_1", "issues", "nothing");
    let ran = sat_with(env.path(), &["describe", id.as_str()]).await;
    assert_eq!(ran.status, 1, "{ran:?}");
    assert!(ran.stderr.contains(&format!("no task {}", id.as_str())), "{ran:?}");
    let ran = sat_with(env.path(), &["describe", "not-a-task"]).await;
    assert_eq!(ran.status, 1);
    assert!(ran.stderr.contains("rem_ or con_"), "{ran:?}");

    // No stack named at all.
    let ran = sat(&["describe", id.as_str()]).await;
    assert_eq!(ran.status, 1);
    assert!(
        ran.stderr.contains("--stack") && ran.stderr.contains("--env-file"),
        "{ran:?}"
    );
    // A file that is no local stack's environment.
    let missing = std::env::temp_dir().join("sat-no-such.env");
    let ran = sat(&["--env-file", missing.to_str().unwrap(), "describe", id.as_str()]).await;
    assert_eq!(ran.status, 1);
    assert!(ran.stderr.contains("sat-no-such.env"), "{ran:?}");
    // A stack without its outputs: the output is named.
    let bare = std::env::temp_dir().join(format!("sat-{}.env", uuid::Uuid::new_v4().simple()));
    std::fs::write(&bare, format!("AWS_ENDPOINT_URL='{}'\n", s.aws.moto.endpoint())).unwrap();
    let ran = sat(&["--env-file", bare.to_str().unwrap(), "describe", id.as_str()]).await;
    let _ = std::fs::remove_file(&bare);
    assert_eq!(ran.status, 1);
    assert!(ran.stderr.contains("TasksTableName"), "{ran:?}");
}

/// Text a connector server wrote (here its prompt's name, shown as the
/// task's provenance) cannot act on the operator's terminal: escape
/// sequences and bidirectional overrides are printed as escapes.
#[tokio::test(flavor = "multi_thread")]
async fn a_servers_text_cannot_act_on_the_operators_terminal() {
    let s = RunStack::start().await.unwrap();
    let env = EnvFile::write(&s.t.aws, &s.t.stack, &[]);
    let hostile = "digest\u{1b}]52;c;Y3VybA==\u{7}\r\u{1b}[2Kaccepted \u{202E}detpecca";
    let mut held = connector_task("issues", hostile, &["list_issues"], &[]);
    held.hold.place(HoldReason::AwaitingApproval, Utc::now(), hostile);
    s.insert(&held).await;
    let ran = sat_with(env.path(), &["describe", held.task_id.as_str(), "--workspace", "ws_1"]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    let text = &ran.stdout;
    assert!(
        text.contains("digest\\u{1b}]52;c;"),
        "the name is shown, escaped: {text}"
    );
    assert!(
        !text.contains('\u{1b}') && !text.contains('\u{7}') && !text.contains('\r') && !text.contains('\u{202E}'),
        "{text:?}"
    );
}

/// A gated tool call waiting for an admin (SPEC §15), as an operator reads
/// it: the request, its tool, exact arguments, state and version, the
/// fields `approve_call` takes; once decided, no longer listed.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_waiting_for_an_admin_is_listed_with_what_decides_it() {
    let s = RunStack::start().await.unwrap();
    let env = EnvFile::write(&s.t.aws, &s.t.stack, &[]);
    let gated = local::mcp_fixture::annotated_tool("delete_issue", serde_json::json!({"destructiveHint": true}));
    let (_issues, task) = s.triage(vec![gated], &["delete_issue"], &[]).await;
    s.model
        .script([Reply::tool(
            "issues__delete_issue",
            serde_json::json!({"id": 7}),
            1000,
            50,
        )])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    assert_eq!(
        s.deliver_once(&task, at).await,
        shared::app::run::Disposition::AwaitingApproval
    );

    let ran = sat_with(env.path(), &["describe", task.task_id.as_str()]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    let text = &ran.stdout;
    assert!(text.contains("Tool calls waiting (1)"), "{text}");
    assert!(text.contains("delete_issue on issues"), "{text}");
    assert!(text.contains(r#"{"id":7}"#), "the exact arguments: {text}");
    let report = sat_with(env.path(), &["--json", "describe", task.task_id.as_str()])
        .await
        .json();
    let waiting = &report["approvals"][0];
    assert_eq!(waiting["state"], "open", "{report}");
    assert_eq!(waiting["arguments"], serde_json::json!({"id": 7}));
    assert_eq!(waiting["version"], 1);
    assert_eq!(report["runs"][0]["status"], "awaiting_approval", "{report}");

    let deny = serde_json::json!({"op": "deny_call",
        "principal": {"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]},
        "request_id": waiting["request_id"], "expected_version": 1});
    assert_eq!(s.t.admin().handle(deny, Utc::now()).await.unwrap()["ok"], true);
    let report = sat_with(env.path(), &["--json", "describe", task.task_id.as_str()])
        .await
        .json();
    assert_eq!(report["approvals"], serde_json::json!([]), "decided: {report}");
    assert_eq!(
        report["runs"][0]["explanation"],
        "skipped: a workspace admin denied the tool call it asked to make"
    );
}
