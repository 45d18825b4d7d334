//! Exactly once in the world (SPEC §7, "A call made is made once"): every
//! tool call an occurrence makes is journaled before the model sees its
//! answer, and no later attempt of the occurrence (an approval's resume, a
//! take-over after a crash, a settle that ran out of time) makes it again.
//! Through the real runner and admin use cases against moto, MCP fixtures
//! on loopback and the Converse stand-in as a model that calls each offered
//! tool it has not seen called (`Reply::EachToolOnce`): what it is shown of
//! the run decides whether it asks for a call again.

use chrono::{DateTime, Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, annotated_tool, tool};
use serde_json::{Value, json};
use shared::app::run::Disposition;
use shared::domain::run::journal::CALL_KEY_META;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::Task;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;
use shared::ports::{RunStore, Settled, Settlement, StoreError};
use tests::intercept::{Intercepted, RunStoreHook};
use tests::{RunStack, crashes, deadline, install, run_message, run_settings};

fn admin() -> Value {
    json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]})
}

async fn calls(server: &McpFixture) -> Vec<String> {
    server
        .state()
        .read()
        .await
        .calls
        .iter()
        .map(|(name, _)| name.clone())
        .collect()
}

/// The `_meta` of each call the server got, in order.
async fn metas(server: &McpFixture) -> Vec<Value> {
    server
        .state()
        .read()
        .await
        .call_metas
        .iter()
        .map(|m| m.clone().unwrap_or_default())
        .collect()
}

async fn record(s: &RunStack, task: &Task, at: DateTime<Utc>) -> Value {
    s.run_record(&task.task_id, &occurrence_key(at))
        .await
        .expect("a run record")
}

/// Approves the workspace's one open request; the resume message it sends.
async fn approve_the_one_request(s: &RunStack) -> (Value, String) {
    let listed =
        s.t.admin()
            .handle(json!({"op": "approvals", "principal": admin()}), Utc::now())
            .await
            .unwrap();
    let request = listed["approvals"][0].clone();
    let approved =
        s.t.admin()
            .handle(
                json!({"op": "approve_call", "principal": admin(),
                   "request_id": request["request_id"], "expected_version": request["version"]}),
                Utc::now(),
            )
            .await
            .unwrap();
    assert_eq!(approved["approval"]["state"], "approved", "{approved}");
    let mut resumes = s.t.take_run_messages().await;
    assert_eq!(resumes.len(), 1, "{resumes:?}");
    (request, resumes.remove(0))
}

/// `close_issue` (no annotation, an additive call) and `post_summary`
/// (destructive: gated) on the issues server, both offered, in that order.
async fn close_then_post(s: &RunStack) -> (McpFixture, Task) {
    let tools = vec![
        tool("close_issue"),
        annotated_tool("post_summary", json!({"destructiveHint": true})),
    ];
    s.triage(tools, &["close_issue", "post_summary"], &[]).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approvals_resume_never_makes_the_calls_made_before_the_wait_again() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = close_then_post(&s).await;
    let at = Utc::now() - Duration::seconds(5);
    // Turn 1 closes the issue, turn 2 asks to post: it waits.
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    assert_eq!(s.deliver_once(&task, at).await, Disposition::AwaitingApproval);
    assert_eq!(calls(&issues).await, ["close_issue"]);

    let (request, resume) = approve_the_one_request(&s).await;
    assert_eq!(request["tool"], "post_summary", "{request}");
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    let got = s.runner().deliver("m2", &resume, Utc::now(), deadline()).await.unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(
        calls(&issues).await,
        ["close_issue", "post_summary"],
        "each call made once: the resume read the journal back"
    );
    let settled = record(&s, &task, at).await;
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert_eq!(settled["usage"]["tool_calls"], 2, "{settled}");
    // The resume's first model request shows both calls and their answers.
    let asked = s.model.requests().await;
    let resumed = asked[2].1["messages"].to_string();
    assert!(
        resumed.contains("close_issue done") && resumed.contains("post_summary done"),
        "{resumed}"
    );
    // Redelivered, the resume does nothing more.
    let again = s.runner().deliver("m3", &resume, Utc::now(), deadline()).await.unwrap();
    assert_eq!(again, Disposition::Duplicate);
    assert_eq!(calls(&issues).await.len(), 2);
}

/// Crashes when a call's journal write is sent: the call was made, its
/// entry never written (the one window a journal cannot close).
struct CrashAtJournal;

impl<P: RunStore> RunStoreHook<P> for CrashAtJournal {
    async fn journal_call(
        &self,
        _inner: &P,
        _call: &shared::domain::run::journal::JournaledCall,
    ) -> Result<(), StoreError> {
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_a_call_and_its_journal_sends_the_same_key_again() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = s.triage(vec![tool("close_issue")], &["close_issue"], &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    s.model.script([Reply::EachToolOnce]).await;
    let crashing = s.runner_on(Intercepted::new(s.store(), CrashAtJournal), run_settings(true));
    let body = run_message(&task, at, "e1");
    assert!(crashes(crashing.deliver("m1", &body, Utc::now(), deadline())).await);
    assert_eq!(calls(&issues).await, ["close_issue"]);

    // Past the lease, the take-over's model asks for the same call at the
    // same place: it carries the same key, which a server can refuse.
    let past = s.lease_of(&task, at).await + Duration::seconds(1);
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    let got = s.runner().deliver("m2", &body, past, deadline()).await.unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let metas = metas(&issues).await;
    assert_eq!(metas.len(), 2, "{metas:?}");
    let key = metas[0][CALL_KEY_META].as_str().expect("a call key");
    assert!(key.starts_with("ck_"), "{key}");
    assert_eq!(metas[1][CALL_KEY_META], key, "the same call, the same key: {metas:?}");
    assert_eq!(metas[0]["ai.nimblebrain/run-id"], metas[1]["ai.nimblebrain/run-id"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_after_a_call_was_journaled_reads_it_back_and_never_calls_it_again() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = s
        .triage(
            vec![tool("close_issue"), tool("label_issue")],
            &["close_issue", "label_issue"],
            &[],
        )
        .await;
    let at = Utc::now() - Duration::seconds(5);
    // The first attempt closes the issue, then its model hangs: it is
    // killed there, the call journaled, before its next model call.
    s.model.script([Reply::EachToolOnce, Reply::Stall]).await;
    let body = run_message(&task, at, "e1");
    assert!(crashes(s.runner().deliver("m1", &body, Utc::now(), deadline())).await);
    assert_eq!(calls(&issues).await, ["close_issue"]);

    let past = s.lease_of(&task, at).await + Duration::seconds(1);
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    let got = s.runner().deliver("m2", &body, past, deadline()).await.unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(
        calls(&issues).await,
        ["close_issue", "label_issue"],
        "the journaled call is not made again"
    );
    let settled = record(&s, &task, at).await;
    assert_eq!(
        (settled["attempts"].as_u64(), settled["usage"]["tool_calls"].as_u64()),
        (Some(2), Some(2)),
        "{settled}"
    );
}

/// The settle fails for now, every time: the invocation runs out of time.
struct SettleFails;

impl<P: RunStore> RunStoreHook<P> for SettleFails {
    async fn settle(&self, _inner: &P, _s: &Settlement<'_>) -> Result<Settled, StoreError> {
        Err(StoreError::Request {
            operation: "TransactWriteItems",
            source: "TransactionConflict (injected)".into(),
        })
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_settle_that_runs_out_of_time_is_settled_by_the_next_attempt_without_running_again() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = s.triage(vec![tool("close_issue")], &["close_issue"], &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    let failing = s.runner_on(Intercepted::new(s.store(), SettleFails), run_settings(true));
    let body = run_message(&task, at, "e1");
    // An invocation with 14 s left: the run ends within its 4 s, the
    // settle is sent again until its give-up margin, then the message goes back.
    let short = Utc::now() + Duration::seconds(14);
    let failed = failing.deliver("m1", &body, Utc::now(), short).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(calls(&issues).await, ["close_issue"]);
    let model_calls = s.model.requests().await.len();
    assert_eq!(model_calls, 2);

    let past = s.lease_of(&task, at).await + Duration::seconds(1);
    let got = s.runner().deliver("m2", &body, past, deadline()).await.unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(calls(&issues).await, ["close_issue"], "no call made again");
    assert_eq!(
        s.model.requests().await.len(),
        model_calls,
        "the model is not asked again"
    );
    let settled = record(&s, &task, at).await;
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert_eq!(settled["usage"]["tool_calls"], 1, "{settled}");
    // Paid once: the crashed attempt's reservation, which its spend fits in.
    let reservation = task.spec.budget.unwrap().max_usd_per_run;
    let cost = settled["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0 && cost <= reservation + 1e-9, "{cost} for {settled}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_asked_on_the_second_install_of_a_server_reaches_that_install() {
    let s = RunStack::start().await.unwrap();
    let chat = || FixtureState {
        tools: vec![annotated_tool("post", json!({"destructiveHint": true}))],
        ..Default::default()
    };
    let first = McpFixture::start(chat()).await.unwrap();
    let second = McpFixture::start(chat()).await.unwrap();
    for (id, server) in [("ins_2", &first), ("ins_3", &second)] {
        s.store()
            .put_install(&install(id, "chat", &server.url(), InstallScope::Workspace))
            .await
            .unwrap();
    }
    let (issues, mut task) = s.triage(vec![tool("close_issue")], &["close_issue"], &[]).await;
    task.spec.bindings = [
        ("announce".to_owned(), Some("ins_2".to_owned())),
        ("report".to_owned(), Some("ins_3".to_owned())),
    ]
    .into_iter()
    .collect();
    s.t.put_items(vec![shared::adapters::dynamo::task_item(&task).unwrap()])
        .await;
    // The second install's `post` is offered under the hashed name (the
    // plain one is the first's, and sorts first).
    let second_post = shared::domain::run::agent::hashed_name("chat", "post");
    assert!(second_post.as_str() > "chat__post");
    let at = Utc::now() - Duration::seconds(5);
    s.model
        .script([Reply::tool(&second_post, json!({"text": "weekly report"}), 1000, 40)])
        .await;
    assert_eq!(s.deliver_once(&task, at).await, Disposition::AwaitingApproval);

    let (request, resume) = approve_the_one_request(&s).await;
    assert_eq!(request["install"], "ins_3", "the approver sees the install: {request}");
    s.model.script([Reply::text("Posted.", 1200, 10)]).await;
    let got = s.runner().deliver("m2", &resume, Utc::now(), deadline()).await.unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(calls(&second).await, ["post"], "the install it was asked on");
    assert!(calls(&first).await.is_empty(), "never the other install of the server");
    assert!(calls(&issues).await.is_empty());
}
