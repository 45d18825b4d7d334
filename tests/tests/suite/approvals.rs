//! Gated tool calls in unattended runs (SPEC §15, `domain::run::gate`): a
//! tool its server annotates `destructiveHint: true` (not `readOnlyHint`),
//! or an admin named in `ask_first`, is never called without an approval
//! of exactly that call. Through the real runner and admin use cases
//! against moto, the MCP fixture on loopback and the Converse stand-in:
//! the occurrence waits `awaiting_approval`, an approval resumes it and the
//! call is made once with its arguments (under redeliveries and a crash
//! too), a changed argument asks again, a denial and an expiry end it.

use chrono::{DateTime, Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{McpFixture, annotated_tool, tool};
use serde_json::{Value, json};
use shared::adapters::dynamo::DynamoStore;
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::gate::CallApproval;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::Task;
use shared::domain::task::claim::RunStatus;
use shared::ports::{RunStore, StoreError};
use tests::intercept::{Intercepted, RunStoreHook};
use tests::{RunStack, crashes, deadline, run_settings};

fn admin() -> Value {
    json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]})
}

/// The issues server installed in ws_1 (`delete_issue` annotated
/// destructive; `archive_issue` destructive but read-only, so not gated;
/// `list_issues` plain) and its approved task offered all three, the
/// admin's `ask_first` as given, stored.
async fn issues_task(s: &RunStack, ask_first: &[&str]) -> (McpFixture, Task) {
    let tools = vec![
        tool("list_issues"),
        annotated_tool("delete_issue", json!({"destructiveHint": true})),
        annotated_tool("archive_issue", json!({"destructiveHint": true, "readOnlyHint": true})),
    ];
    s.triage(tools, &["list_issues", "delete_issue", "archive_issue"], ask_first)
        .await
}

async fn admin_op(s: &RunStack, request: Value) -> Value {
    s.t.admin().handle(request, Utc::now()).await.unwrap()
}

/// The workspace's requests, as `approvals` lists them.
async fn approvals(s: &RunStack) -> Vec<Value> {
    let answer = admin_op(s, json!({"op": "approvals", "principal": admin()})).await;
    assert_eq!(answer["ok"], true, "{answer}");
    answer["approvals"].as_array().cloned().unwrap_or_default()
}

async fn decide(s: &RunStack, op: &str, request_id: &str, version: u64) -> Value {
    admin_op(
        s,
        json!({"op": op, "principal": admin(), "request_id": request_id, "expected_version": version}),
    )
    .await
}

async fn record(s: &RunStack, task: &Task, at: DateTime<Utc>) -> Value {
    s.run_record(&task.task_id, &occurrence_key(at))
        .await
        .expect("a run record")
}

async fn calls(issues: &McpFixture) -> Vec<(String, Value)> {
    issues.state().read().await.calls.clone()
}

/// Delivers `body` once through the real runner.
async fn deliver(s: &RunStack, body: &str) -> Disposition {
    s.runner()
        .deliver("m2", body, Utc::now(), deadline())
        .await
        .expect("the delivery answers")
}

/// Runs the occurrence at `at` up to its gated call of `delete_issue`
/// with `arguments`: it waits. Answers the request's id.
async fn park(s: &RunStack, task: &Task, at: DateTime<Utc>, arguments: Value) -> String {
    s.model
        .script([Reply::tool("issues__delete_issue", arguments, 1000, 50)])
        .await;
    assert_eq!(s.deliver_once(task, at).await, Disposition::AwaitingApproval);
    let parked = record(s, task, at).await;
    assert_eq!(parked["status"], "awaiting_approval", "{parked}");
    parked["request_id"]
        .as_str()
        .expect("the record names its request")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gated_call_waits_and_once_approved_is_made_once_with_its_arguments() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let request_id = park(&s, &task, at, json!({"id": 7})).await;
    assert!(calls(&issues).await.is_empty(), "never called unapproved");
    let parked = record(&s, &task, at).await;
    assert!(parked["cost_usd"].as_f64().unwrap() > 0.0, "what it spent: {parked}");
    // A redelivery of the occurrence's own message does nothing while it waits.
    assert_eq!(s.deliver_once(&task, at).await, Disposition::Duplicate);
    assert!(calls(&issues).await.is_empty());

    // One content-free event: the ids and the tool.
    let waiting: Vec<Value> = s
        .events()
        .await
        .into_iter()
        .filter(|e| e["detail-type"] == "Tool call awaiting approval")
        .collect();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(
        waiting[0]["detail"],
        json!({"workspace": "ws_1", "task_id": task.task_id, "run_id": parked["run_id"],
               "request_id": request_id, "tool": "delete_issue"})
    );

    // The admin reads the exact arguments, and approves at its version.
    let listed = approvals(&s).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["arguments"], json!({"id": 7}));
    assert_eq!(
        (listed[0]["state"].as_str(), listed[0]["version"].as_u64()),
        (Some("open"), Some(1))
    );
    let stale = decide(&s, "approve_call", &request_id, 2).await;
    assert_eq!(stale["error"]["code"], "version_conflict", "{stale}");
    let approved = decide(&s, "approve_call", &request_id, 1).await;
    assert_eq!(approved["approval"]["state"], "approved", "{approved}");
    let resumes = s.t.take_run_messages().await;
    assert_eq!(resumes.len(), 1, "one resume: {resumes:?}");

    // The re-run carries the approved call: made once, before its first
    // model call, which reads its answer; the model asking it again in the
    // run is answered with what it answered, not a second call.
    s.model
        .script([
            Reply::tool("issues__delete_issue", json!({"id": 7}), 1000, 50),
            Reply::text("Deleted issue 7.", 1200, 20),
        ])
        .await;
    assert_eq!(deliver(&s, &resumes[0]).await, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(
        calls(&issues).await,
        vec![("delete_issue".to_owned(), json!({"id": 7}))]
    );
    let asked = s.model.requests().await;
    let carried = &asked[asked.len() - 2].1;
    let messages = carried["messages"].as_array().unwrap();
    assert_eq!(
        messages[messages.len() - 2]["content"][0]["toolUse"]["input"],
        json!({"id": 7}),
        "the conversation goes on from the approved call"
    );
    let last = &asked[asked.len() - 1].1["messages"];
    let answered = last[last.as_array().unwrap().len() - 1].to_string();
    assert!(
        answered.contains("delete_issue done") && !answered.contains("refused"),
        "asked again, the call is answered with what it answered: {answered}"
    );
    let settled = record(&s, &task, at).await;
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert!(
        settled["cost_usd"].as_f64().unwrap() > parked["cost_usd"].as_f64().unwrap(),
        "both attempts' cost: {settled}"
    );
    // The resume redelivered, and the approval decided again: nothing more.
    assert_eq!(deliver(&s, &resumes[0]).await, Disposition::Duplicate);
    assert_eq!(calls(&issues).await.len(), 1);
    let used = approvals(&s).await[0].clone();
    assert_eq!(used["version"], 3, "approved, then used: {used}");
    assert!(used["used_at"].is_string(), "{used}");
    let again = decide(&s, "approve_call", &request_id, 3).await;
    assert_eq!(again["error"]["code"], "invalid_request", "{again}");
    let finished: Vec<Value> = s
        .events()
        .await
        .into_iter()
        .filter(|e| e["detail-type"] == "Scheduled run finished")
        .collect();
    assert_eq!(finished.len(), 1, "one finished event: {finished:?}");
    assert_eq!(finished[0]["detail"]["status"], "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_changed_argument_asks_again_and_a_denial_ends_the_occurrence_skipped() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let first = park(&s, &task, at, json!({"id": 7})).await;
    assert_eq!(decide(&s, "approve_call", &first, 1).await["ok"], true);
    let resume = s.t.take_run_messages().await.pop().expect("a resume");
    // The re-run makes the approved call, then its model asks for another
    // issue: that one asks again.
    s.model
        .script([Reply::tool("issues__delete_issue", json!({"id": 8}), 1000, 50)])
        .await;
    assert_eq!(deliver(&s, &resume).await, Disposition::AwaitingApproval);
    let approved_only = vec![("delete_issue".to_owned(), json!({"id": 7}))];
    assert_eq!(
        calls(&issues).await,
        approved_only,
        "an approval never serves other arguments"
    );
    let second = record(&s, &task, at).await["request_id"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    // The first request's resume, delivered again (a duplicate, or a second
    // approval's), takes over nothing: the occurrence waits on the second.
    assert_eq!(deliver(&s, &resume).await, Disposition::Duplicate);
    assert_eq!(calls(&issues).await, approved_only);
    assert_eq!(record(&s, &task, at).await["request_id"], second.as_str());

    let denied = admin_op(
        &s,
        json!({"op": "deny_call", "principal": admin(), "request_id": second,
               "expected_version": 1, "note": "not that one"}),
    )
    .await;
    assert_eq!(denied["approval"]["state"], "denied", "{denied}");
    let ended = record(&s, &task, at).await;
    assert_eq!(ended["status"], "skipped", "{ended}");
    assert_eq!(ended["reason"], SkipReason::Denied.describe());
    assert!(ended["cost_usd"].as_f64().unwrap() > 0.0, "it pays what it spent");
    // Whatever comes after: nothing runs.
    assert_eq!(deliver(&s, &resume).await, Disposition::Duplicate);
    assert_eq!(s.deliver_once(&task, at).await, Disposition::Duplicate);
    assert_eq!(calls(&issues).await, approved_only);
    let late = decide(&s, "approve_call", &second, 2).await;
    assert_eq!(late["error"]["code"], "invalid_request", "{late}");
    assert!(late["error"]["message"].as_str().unwrap().contains("denied"), "{late}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_request_ends_its_occurrence_and_can_no_longer_be_approved() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let request_id = park(&s, &task, at, json!({"id": 7})).await;
    let store = s.store();
    let later = Utc::now() + Duration::hours(25);
    assert_eq!(
        shared::app::approvals::expire_lapsed(&store, Utc::now(), Duration::days(30), tests::far_deadline())
            .await
            .unwrap()
            .ended,
        0,
        "nothing lapsed yet"
    );
    // The missed-occurrence check's period, as the reconcile worker takes
    // it from its schedule, ends what lapsed before it queues its shards.
    s.t.reconciler()
        .work(r#"{"type": "overdue.check"}"#, later)
        .await
        .expect("the check's period runs");
    assert_eq!(
        shared::app::approvals::expire_lapsed(&store, later, Duration::days(30), tests::far_deadline())
            .await
            .unwrap()
            .ended,
        0,
        "ended once"
    );
    let ended = record(&s, &task, at).await;
    assert_eq!(ended["status"], "skipped", "{ended}");
    assert_eq!(ended["reason"], SkipReason::Expired.describe());
    let listed = approvals(&s).await;
    assert_eq!(listed[0]["state"], "expired", "{listed:?}");
    let late = decide(&s, "approve_call", &request_id, listed[0]["version"].as_u64().unwrap()).await;
    assert_eq!(late["error"]["code"], "invalid_request", "{late}");
    assert!(s.t.take_run_messages().await.is_empty(), "no resume");
    assert!(calls(&issues).await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn ask_first_gates_an_unannotated_tool_and_read_only_ungates_a_destructive_hint() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &["list_issues"]).await;
    let at = Utc::now() - Duration::seconds(5);
    // Read-only wins over the destructive hint: called at once.
    s.model
        .script([
            Reply::tool("issues__archive_issue", json!({"id": 1}), 1000, 50),
            Reply::tool("issues__list_issues", json!({}), 1000, 50),
        ])
        .await;
    assert_eq!(s.deliver_once(&task, at).await, Disposition::AwaitingApproval);
    assert_eq!(
        calls(&issues).await,
        vec![("archive_issue".to_owned(), json!({"id": 1}))],
        "the admin's ask_first gates list_issues"
    );
    let listed = approvals(&s).await;
    assert_eq!(listed[0]["tool"], "list_issues", "{listed:?}");
}

/// Crashes the first use of an approval just after its write: the process
/// is gone before the call is made.
struct CrashAfterUse(std::sync::atomic::AtomicBool);

impl RunStoreHook<DynamoStore> for CrashAfterUse {
    async fn use_approval(
        &self,
        inner: &DynamoStore,
        approval: &CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let used = inner.use_approval(approval, execution_id, now).await?;
        if !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return std::future::pending().await;
        }
        Ok(used)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_used_by_a_crashed_attempt_is_never_made_again() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let request_id = park(&s, &task, at, json!({"id": 7})).await;
    assert_eq!(decide(&s, "approve_call", &request_id, 1).await["ok"], true);
    let resume = s.t.take_run_messages().await.pop().expect("a resume");

    let crashing = s.runner_on(
        Intercepted::new(s.store(), CrashAfterUse(Default::default())),
        run_settings(true),
    );
    // The approved call comes first: the attempt dies right after using it.
    assert!(crashes(crashing.deliver("m2", &resume, Utc::now(), deadline())).await);
    // SQS hands the resume to another invocation once the lease is gone.
    s.model
        .script([Reply::text("It may have been deleted.", 1200, 20)])
        .await;
    let after = deadline() + Duration::minutes(2);
    let taken = s
        .runner()
        .deliver("m2", &resume, after, after + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(taken, Disposition::Ran(RunStatus::Succeeded));
    assert!(
        calls(&issues).await.is_empty(),
        "used once, by the crashed attempt: never made again"
    );
    // The model read that the call was already made.
    let asked = s.model.requests().await;
    let last = &asked.last().expect("a request").1;
    assert!(last.to_string().contains("already made once"), "{last}");
    let settled = record(&s, &task, at).await;
    assert_eq!(
        settled["usage"]["tool_calls"], 0,
        "the take-over made no call: {settled}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_meeting_a_spent_workspace_month_ends_the_occurrence_skipped_and_paid() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let request_id = park(&s, &task, at, json!({"id": 7})).await;
    let spent = record(&s, &task, at).await["cost_usd"].as_f64().unwrap();
    // The workspace's month is spent while the call waits.
    let set = admin_op(
        &s,
        json!({"op": "set_budget", "principal": admin(), "budget": {"max_usd_per_month": 0.0}, "expected_version": 0}),
    )
    .await;
    assert_eq!(set["workspace"]["reached"], true, "{set}");
    assert_eq!(decide(&s, "approve_call", &request_id, 1).await["ok"], true);
    let resume = s.t.take_run_messages().await.pop().expect("a resume");
    assert_eq!(
        deliver(&s, &resume).await,
        Disposition::Skipped(SkipReason::BudgetReached(
            shared::domain::task::budget::BudgetLevel::Workspace
        ))
    );
    assert!(calls(&issues).await.is_empty(), "a refused resume calls nothing");
    let ended = record(&s, &task, at).await;
    assert_eq!(ended["status"], "skipped", "{ended}");
    assert!(
        ended["reason"].as_str().unwrap().starts_with("budget reached"),
        "{ended}"
    );
    assert!(
        (ended["cost_usd"].as_f64().unwrap() - spent).abs() < 1e-9,
        "it pays what the parked run spent: {ended}"
    );
    let account = shared::domain::task::budget::Account::Install("acct_ins_1".into());
    let charged = s
        .account(&account, &shared::domain::task::budget::period(at))
        .await
        .expect("the account is charged");
    assert!(
        (charged["spent_usd"].as_f64().unwrap() - spent).abs() < 1e-9,
        "{charged}"
    );
    // Redelivered, nothing more; at its expiry the unused approval closes.
    assert_eq!(deliver(&s, &resume).await, Disposition::Duplicate);
    let later = Utc::now() + Duration::hours(25);
    shared::app::approvals::expire_lapsed(&s.store(), later, Duration::days(30), tests::far_deadline())
        .await
        .unwrap();
    assert_eq!(approvals(&s).await[0]["state"], "expired");
    assert_eq!(
        record(&s, &task, at).await["reason"],
        ended["reason"],
        "the outcome stays"
    );
}

/// `approve`'s `ask_first`, read back through the admin's `get`, gates the
/// next run's call of that tool, which the server does not annotate.
#[tokio::test(flavor = "multi_thread")]
async fn an_admins_ask_first_is_read_back_and_gates_the_next_run() {
    let s = RunStack::start().await.unwrap();
    let (issues, task) = issues_task(&s, &[]).await;
    let got = admin_op(&s, json!({"op": "get", "principal": admin(), "task_id": task.task_id})).await;
    let approved = admin_op(
        &s,
        json!({"op": "approve", "principal": admin(), "task_id": task.task_id,
               "expected_version": got["version"], "ask_first": ["list_issues"]}),
    )
    .await;
    assert_eq!(approved["ok"], true, "{approved}");
    let got = admin_op(&s, json!({"op": "get", "principal": admin(), "task_id": task.task_id})).await;
    assert_eq!(got["task"]["approval"]["ask_first"], json!(["list_issues"]), "{got}");
    assert_eq!(got["task"]["approval"]["by"], "adm_1");
    // A re-approval that names none keeps it.
    let again = admin_op(
        &s,
        json!({"op": "approve", "principal": admin(), "task_id": task.task_id, "expected_version": got["version"]}),
    )
    .await;
    assert_eq!(again["ok"], true, "{again}");
    let got = admin_op(&s, json!({"op": "get", "principal": admin(), "task_id": task.task_id})).await;
    assert_eq!(got["task"]["approval"]["ask_first"], json!(["list_issues"]), "{got}");

    let at = Utc::now() - Duration::seconds(5);
    s.model
        .script([Reply::tool("issues__list_issues", json!({}), 1000, 50)])
        .await;
    assert_eq!(s.deliver_once(&task, at).await, Disposition::AwaitingApproval);
    assert!(calls(&issues).await.is_empty());
    assert_eq!(approvals(&s).await[0]["tool"], "list_issues");
}

/// A run's requests are read by their key prefix: one request at a
/// workspace whose earlier runs asked 400 times (1.6 MB of arguments, more
/// than a page), where reading the workspace's partition takes pages. A
/// request the last release asked (an id with no run prefix) is read by
/// its id when the resume names it, and only for its own run.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_reads_its_own_requests_by_key_whatever_its_workspace_asked_before() {
    use shared::adapters::dynamo::to_item;
    use shared::adapters::keys::Key;
    use shared::domain::run::gate;
    use shared::ports::CallApprovals;

    let s = RunStack::start().await.unwrap();
    let (_issues, task) = issues_task(&s, &[]).await;
    let at = Utc::now() - Duration::seconds(5);
    let request_id = park(&s, &task, at, json!({"id": 7})).await;
    let run_id = record(&s, &task, at).await["run_id"].as_str().unwrap().to_owned();
    let store = s.store();
    let own = store.approval("ws_1", &request_id).await.unwrap().expect("the request");
    assert!(request_id.starts_with(&gate::run_requests(&run_id)), "{request_id}");

    let as_item = |approval: &CallApproval| {
        to_item(approval, &Key::approval("ws_1", &approval.request_id), "call_approval").unwrap()
    };
    let mut earlier: Vec<_> = (0..400)
        .map(|i| {
            let run = format!("{}@earlier-{i}", task.task_id);
            let mut other = own.clone();
            other.request_id = gate::request_id(&run, own.target(), "h");
            other.run_id = run;
            other.arguments = json!({"body": "x".repeat(4000)}).to_string();
            as_item(&other)
        })
        .collect();
    let legacy = |id: &str, run: &str| {
        let mut old = own.clone();
        old.request_id = id.to_owned();
        old.run_id = run.to_owned();
        old
    };
    let (mine, theirs) = ("apr_0123456789abcdef01234567", "apr_76543210fedcba9876543210");
    earlier.push(as_item(&legacy(mine, &run_id)));
    earlier.push(as_item(&legacy(theirs, "tsk_other@2026-01-01T00:00:00Z")));
    s.t.put_items(earlier).await;

    let ids = |found: Vec<CallApproval>| found.into_iter().map(|r| r.request_id).collect::<Vec<_>>();
    let before = store.requests();
    let found = store.run_approvals("ws_1", &run_id, None).await.unwrap();
    assert_eq!(store.requests() - before, 1, "one query, whatever the workspace asked");
    assert_eq!(ids(found), std::slice::from_ref(&request_id));
    let named = store.run_approvals("ws_1", &run_id, Some(mine)).await.unwrap();
    assert_eq!(ids(named), [request_id.clone(), mine.to_owned()]);
    let not_its = store.run_approvals("ws_1", &run_id, Some(theirs)).await.unwrap();
    assert_eq!(ids(not_its), [request_id], "another run's request is never this run's");
}
