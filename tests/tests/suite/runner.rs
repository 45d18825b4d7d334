//! The runner against moto, the Converse stand-in and real MCP servers on
//! loopback: the door, one effective run per occurrence, the procedure, the
//! agent loop's bounds, accounting and notification.

use chrono::{Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::Task;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::hold::HoldReason;
use shared::domain::task::install::{InstallScope, InstallStatus};
use shared::domain::task::overrides::Overrides;
use shared::ports::RunStore;
use tests::intercept::{Intercepted, RunStoreHook};
use tests::{RunStack, connector_task, deadline, install, reminder, run_message, run_settings};

async fn fixture() -> McpFixture {
    McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1}),
            &[("repo", true)],
            "Summarise this week's issues in {{repo}}.",
        )],
        tools: vec![tool("list_issues"), tool("post_summary"), tool("delete_repo")],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// The fixture server, installed in ws_1 as the workspace connector `ins_1`.
async fn installed_fixture(s: &RunStack) -> McpFixture {
    let fixture = fixture().await;
    s.store()
        .put_install(&install("ins_1", "issues", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    fixture
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_runs_once_with_no_tools_is_accounted_and_notified() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    s.model
        .script([Reply::text("Time to call mom about Sunday!", 1000, 100)])
        .await;
    let runner = s.runner();
    let before = runner.store().requests();

    let got = runner
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(
        runner.store().requests() - before,
        4,
        "the task read, the workspace's limit, the claim (with the workspace's reservation), settle"
    );

    let requests = s.model.requests().await;
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0, tests::MODEL);
    assert!(
        requests[0].1.get("toolConfig").is_none(),
        "a reminder is offered no tools"
    );

    let occurrence = occurrence_key(at);
    let record = s.run_record(&task.task_id, &occurrence).await.expect("run record");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["attempts"], 1);
    assert_eq!(record["usage"]["input_tokens"], 1000);
    assert_eq!(record["usage"]["output_tokens"], 100);
    let cost = 1000.0 * 3.0 / 1e6 + 100.0 * 15.0 / 1e6;
    assert!((record["cost_usd"].as_f64().unwrap() - cost).abs() < 1e-12);
    assert_eq!(record["output"], "Time to call mom about Sunday!");
    assert!(record["ttl"].as_i64().unwrap() > Utc::now().timestamp());

    let item = s.task_item(&task).await;
    assert_eq!(item["state"], "completed", "a one-time task is done after its run");
    assert_eq!(item["claims"][&occurrence]["status"], "succeeded");
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_123"),
            &at.format("%Y-%m").to_string(),
        )
        .await
        .expect("account charge");
    assert_eq!(account["runs"], 1);
    assert!((account["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-12);

    let events = s.events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["detail-type"], "Scheduled run finished");
    assert_eq!(
        events[0]["detail"],
        json!({"workspace": "ws_1", "task_id": task.task_id, "run_id": format!("{}@{occurrence}", task.task_id),
               "scheduled_time": occurrence, "status": "succeeded"})
    );

    // A duplicate delivery: one request, nothing else.
    let before = runner.store().requests();
    let again = runner
        .deliver("m2", &run_message(&task, at, "e2"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(again, Disposition::Duplicate);
    assert_eq!(runner.store().requests() - before, 1);
    assert_eq!(s.model.requests().await.len(), 1);
    assert!(s.events().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn twenty_concurrent_deliveries_make_one_run_one_charge_one_event() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let runner = s.runner();
    let body = run_message(&task, at, "e1");
    let deliveries = (0..20).map(|i| {
        runner.deliver(
            Box::leak(format!("m{i}").into_boxed_str()),
            &body,
            Utc::now(),
            deadline(),
        )
    });
    let outcomes = futures::future::join_all(deliveries).await;
    let ran = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(Disposition::Ran(RunStatus::Succeeded))))
        .count();
    assert_eq!(ran, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Ok(Disposition::Ran(_) | Disposition::Busy | Disposition::Duplicate))),
        "{outcomes:?}"
    );
    // The ones told to come back later find it finished.
    for _ in 0..19 {
        let again = runner.deliver("late", &body, Utc::now(), deadline()).await.unwrap();
        assert_eq!(again, Disposition::Duplicate);
    }
    assert_eq!(s.model.requests().await.len(), 1, "one model call");
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_123"),
            &at.format("%Y-%m").to_string(),
        )
        .await
        .unwrap();
    assert_eq!(account["runs"], 1, "one charge");
    assert_eq!(s.events().await.len(), 1, "one event");
}

/// The process dies at the first settle: after the model call and before
/// the record (`after_the_write: false`), or right after the settle
/// transaction, before its answer (`true`). The settle never answers; the
/// delivery is given up on as a dead process's is (`tests::crashes`).
struct CrashAtSettle {
    crashed: std::sync::atomic::AtomicBool,
    after_the_write: bool,
}

impl CrashAtSettle {
    fn new(
        inner: shared::adapters::dynamo::DynamoStore,
        after_the_write: bool,
    ) -> Intercepted<shared::adapters::dynamo::DynamoStore, Self> {
        Intercepted::new(
            inner,
            Self {
                crashed: Default::default(),
                after_the_write,
            },
        )
    }
}

impl RunStoreHook<shared::adapters::dynamo::DynamoStore> for CrashAtSettle {
    async fn settle(
        &self,
        inner: &shared::adapters::dynamo::DynamoStore,
        s: &shared::ports::Settlement<'_>,
    ) -> Result<shared::ports::Settled, shared::ports::StoreError> {
        if !self.crashed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            if self.after_the_write {
                inner.settle(s).await?;
            }
            return std::future::pending().await;
        }
        inner.settle(s).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_before_the_record_is_taken_over_after_the_lease_and_runs_once() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let crashing = s.runner_on(CrashAtSettle::new(s.store(), false), run_settings(true));
    let body = run_message(&task, at, "e1");
    let now = Utc::now();
    let short_deadline = now + Duration::seconds(20);
    assert!(
        tests::crashes(crashing.deliver("m1", &body, now, short_deadline)).await,
        "the process dies at its settle"
    );
    let occurrence = occurrence_key(at);
    assert!(s.run_record(&task.task_id, &occurrence).await.is_none());

    // Redelivered while the lease lives: retry later.
    assert_eq!(
        crashing
            .deliver("m1", &body, now + Duration::seconds(1), deadline())
            .await
            .unwrap(),
        Disposition::Busy
    );
    // Redelivered after the lease: taken over, run, recorded once.
    let later = short_deadline + Duration::seconds(shared::app::run::LEASE_MARGIN_SECONDS + 1);
    let got = crashing
        .deliver("m1", &run_message(&task, at, "e2"), later, later + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let record = s.run_record(&task.task_id, &occurrence).await.unwrap();
    assert_eq!(record["attempts"], 2);
    assert_eq!(record["execution_id"], "e2");
    assert_eq!(
        s.model.requests().await.len(),
        2,
        "the model ran in both attempts; only one is recorded"
    );
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_123"),
            &at.format("%Y-%m").to_string(),
        )
        .await
        .unwrap();
    assert_eq!(account["runs"], 1);
    assert_eq!(s.events().await.len(), 1);
    assert_eq!(
        crashing.deliver("m1", &body, later, later).await.unwrap(),
        Disposition::Duplicate
    );
}

/// The occurrence's first delivery (message `m1`, execution `e1`), its
/// model call made, dies at its settle; answers when it began and its
/// deadline (its lease runs out `LEASE_MARGIN_SECONDS` after it).
async fn crash_at_settle(
    s: &RunStack,
    task: &Task,
    at: chrono::DateTime<Utc>,
) -> (chrono::DateTime<Utc>, chrono::DateTime<Utc>) {
    let crashing = s.runner_on(CrashAtSettle::new(s.store(), false), run_settings(true));
    let now = Utc::now();
    let short = now + Duration::seconds(20);
    assert!(tests::crashes(crashing.deliver("m1", &run_message(task, at, "e1"), now, short)).await);
    (now, short)
}

/// The leak found on simulation seeds 52001 and 52002: an attempt taken
/// over after a crash, then given back (the model unavailable before any
/// tool call). The crashed attempt's reservation is committed at the
/// take-over; the release keeps it on the claim, `released`, and the
/// occurrence's one record carries it, so the period budget is its records'
/// costs and the account is charged what the record says, once.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_taken_over_then_given_back_is_carried_into_the_occurrences_one_record() {
    use shared::domain::task::budget::{Account, period};
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    s.insert(&task).await;
    let reserve = 0.25;
    let at = Utc::now() - Duration::seconds(5);
    let (key, month) = (occurrence_key(at), period(at));
    let budget_used = |item: &Value| item["budget_used"][month.as_str()].as_f64().unwrap_or_default();

    // 1. The first attempt dies at its settle, its model call made (and no
    // tool call: after one, the occurrence fails when the model is away).
    s.model.script([Reply::text("Nothing to summarise.", 1000, 10)]).await;
    let (_, short) = crash_at_settle(&s, &task, at).await;
    // 2. After its lease, taken over while the model is unavailable: given back.
    let later = short + Duration::seconds(shared::app::run::LEASE_MARGIN_SECONDS + 1);
    s.model.fault(Some(local::converse::Fault::ServiceUnavailable)).await;
    let give_up = Utc::now() + Duration::seconds(shared::app::run::SETTLE_RESERVE_SECONDS + 3);
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e1"), later, give_up)
        .await
        .unwrap();
    assert_eq!(got, Disposition::ReturnToQueue);
    let item = s.task_item(&task).await;
    assert_eq!(item["claims"][&key]["status"], "released", "{item}");
    assert_eq!(item["claims"][&key]["crashed_usd"].as_f64(), Some(reserve));
    assert!(
        (budget_used(&item) - reserve).abs() < 1e-9,
        "the crash stays committed, the release's own reservation returned: {item}"
    );
    let account = Account::Install("acct_ins_1".into());
    let charged = |a: Option<Value>| a.map_or(0.0, |a| a["spent_usd"].as_f64().unwrap_or_default());
    assert_eq!(
        charged(s.account(&account, &month).await),
        0.0,
        "the release charges nothing: the settle charges what the record says"
    );
    assert!(s.run_record(&task.task_id, &key).await.is_none());

    // 3. The model back, the returned message runs and settles once.
    s.model.fault(None).await;
    let again = later + Duration::seconds(60);
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e1"), again, again + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let record = s.run_record(&task.task_id, &key).await.unwrap();
    let cost = record["cost_usd"].as_f64().unwrap();
    assert!(cost > reserve, "the record carries the crash: {record}");
    assert_eq!(record["attempts"], 1, "attempts count since the release");
    let item = s.task_item(&task).await;
    assert!(
        (budget_used(&item) - cost).abs() < 1e-9,
        "budget_used {} is the record's cost {cost}",
        budget_used(&item)
    );
    let account = s.account(&account, &month).await;
    assert_eq!(account.as_ref().map(|a| a["runs"].clone()), Some(json!(1)));
    assert!(
        (charged(account) - cost).abs() < 1e-9,
        "the account is charged the record's cost"
    );
    assert_eq!(s.events().await.len(), 1, "one outcome, one event");
}

/// The other leak of the unseen seeds: a crash, then the message back
/// past the catch-up window. The skip takes the dead claim over and pays
/// what it committed: its record's cost is the crashed reservation, and the
/// account is charged it, so nothing committed is left unrecorded.
#[tokio::test(flavor = "multi_thread")]
async fn a_skip_past_the_window_pays_for_the_crashed_claim_it_finds() {
    use shared::domain::task::budget::{Account, period};
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    s.insert(&task).await;
    let reserve = 0.25;
    // Due almost an hour ago: the first delivery is just inside the window.
    let at = Utc::now() - Duration::seconds(3590);
    let (key, month) = (occurrence_key(at), period(at));
    let (now, _) = crash_at_settle(&s, &task, at).await;
    // Back after the queue's visibility: past the window, and past the lease.
    let later = now + Duration::seconds(2160);
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e1"), later, later + Duration::minutes(6))
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::Missed));
    let record = s.run_record(&task.task_id, &key).await.unwrap();
    assert_eq!(record["status"], "skipped");
    assert_eq!(
        record["cost_usd"].as_f64(),
        Some(reserve),
        "the crash's reservation: {record}"
    );
    let item = s.task_item(&task).await;
    assert_eq!(item["claims"][&key]["status"], "skipped");
    assert_eq!(item["budget_used"][month.as_str()].as_f64(), Some(reserve));
    let account = s.account(&Account::Install("acct_ins_1".into()), &month).await.unwrap();
    assert_eq!(account["spent_usd"].as_f64(), Some(reserve));
    assert_eq!(account["runs"], 1);
    assert!(s.events().await.is_empty(), "a skip sends no event");
}

/// A take-over reserves again, and that reservation must fit the month as
/// a claim's must: a crashed run whose task has no room for another attempt
/// is skipped for its budget when its message comes back, paying what the
/// crash committed, never running past the monthly budget.
#[tokio::test(flavor = "multi_thread")]
async fn a_take_over_past_the_monthly_budget_is_skipped_and_pays_for_the_crash() {
    use shared::domain::task::budget::{Account, Budget, period};
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    // Room for one reservation of 0.25 in the month, not two.
    task.spec.budget = Some(Budget {
        max_usd_per_run: 0.25,
        max_usd_per_month: 0.40,
    });
    s.insert(&task).await;
    let reserve = 0.25;
    let at = Utc::now() - Duration::seconds(5);
    let (key, month) = (occurrence_key(at), period(at));
    let (_, short) = crash_at_settle(&s, &task, at).await;
    let requests = s.model.requests().await.len();
    // After the lease, within the window: no room for a second attempt.
    let later = short + Duration::seconds(shared::app::run::LEASE_MARGIN_SECONDS + 1);
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e2"), later, later + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::BudgetExhausted), "{got:?}");
    assert_eq!(s.model.requests().await.len(), requests, "nothing ran again");
    let record = s.run_record(&task.task_id, &key).await.unwrap();
    assert_eq!(record["status"], "skipped");
    assert_eq!(
        record["cost_usd"].as_f64(),
        Some(reserve),
        "the crash's reservation: {record}"
    );
    let item = s.task_item(&task).await;
    assert_eq!(item["budget_used"][month.as_str()].as_f64(), Some(reserve), "{item}");
    let account = s.account(&Account::Install("acct_ins_1".into()), &month).await.unwrap();
    assert_eq!(account["spent_usd"].as_f64(), Some(reserve));
}

/// A principal id is unique only within its workspace: the same id's
/// reminders in two workspaces are two people's, charged to two accounts.
#[tokio::test(flavor = "multi_thread")]
async fn one_principal_id_in_two_workspaces_is_charged_to_two_accounts() {
    use shared::domain::task::budget::{account_of_principal, period};
    use shared::domain::task::{Provenance, TaskId};
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() - Duration::seconds(5);
    for workspace in ["ws_1", "ws_2"] {
        let mut task = reminder(at);
        task.workspace = workspace.into();
        task.task_id = TaskId::for_reminder(workspace, "usr_7", "k1");
        task.provenance = Provenance::User {
            principal: "usr_7".into(),
        };
        s.insert(&task).await;
        s.run_to(&task, at, RunStatus::Succeeded).await;
    }
    for workspace in ["ws_1", "ws_2"] {
        let account = s
            .account(&account_of_principal(workspace, "usr_7"), &period(at))
            .await
            .unwrap_or_else(|| panic!("{workspace}'s usr_7 is charged"));
        assert_eq!(account["runs"], 1, "{workspace}: {account}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_skip_reason_is_recorded_and_sends_no_event() {
    let s = RunStack::start().await.unwrap();
    let fixture = installed_fixture(&s).await;
    let runner = s.runner();
    let now = Utc::now();
    let at = now - Duration::seconds(5);

    let mut cases: Vec<(Task, chrono::DateTime<Utc>, &str)> = Vec::new();
    let missed = reminder(now - Duration::hours(2));
    cases.push((missed.clone(), now - Duration::hours(2), "missed"));
    let mut deleted = reminder(at);
    deleted.task_id = shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", "deleted");
    deleted.overrides = Some(Overrides {
        deleted: true,
        ..Default::default()
    });
    cases.push((deleted, at, "deleted"));
    let mut paused = reminder(at);
    paused.task_id = shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", "paused");
    paused.overrides = Some(Overrides {
        paused: true,
        note: Some("holiday".into()),
        ..Default::default()
    });
    cases.push((paused, at, "paused"));
    let mut held = connector_task("issues", "held", &["list_issues"], &[("repo", "acme/web")]);
    held.hold.place(HoldReason::AwaitingApproval, now, "new declaration");
    cases.push((held, at, "held: awaiting_approval"));
    let mut uninstalled = connector_task("other", "weekly_summary", &[], &[("repo", "acme/web")]);
    uninstalled.provenance = shared::domain::task::Provenance::Connector {
        install_id: "ins_gone".into(),
        server: "other".into(),
        prompt: "weekly_summary".into(),
    };
    let mut gone = install("ins_gone", "other", &fixture.url(), InstallScope::Workspace);
    gone.status = InstallStatus::Uninstalled;
    s.store().put_install(&gone).await.unwrap();
    cases.push((uninstalled, at, "uninstalled"));
    let mut broke = connector_task("issues", "expensive", &[], &[("repo", "acme/web")]);
    broke.budget_used.insert(at.format("%Y-%m").to_string(), 4.9);
    cases.push((broke, at, "budget exhausted"));

    for (task, scheduled, reason) in &cases {
        s.insert(task).await;
        let got = runner
            .deliver("m", &run_message(task, *scheduled, "e"), now, deadline())
            .await
            .unwrap();
        assert!(matches!(got, Disposition::Skipped(_)), "{reason}: {got:?}");
        let record = s
            .run_record(&task.task_id, &occurrence_key(*scheduled))
            .await
            .expect(reason);
        assert_eq!(record["status"], "skipped", "{reason}");
        assert_eq!(record["reason"], *reason);
    }
    // No task at all.
    let ghost = reminder(at - Duration::seconds(1));
    let got = runner
        .deliver("m", &run_message(&ghost, at, "e"), now, deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::Missing));
    assert_eq!(
        s.run_record(&ghost.task_id, &occurrence_key(at)).await.unwrap()["reason"],
        "missing"
    );

    assert!(s.model.requests().await.is_empty(), "nothing ran");
    assert!(s.events().await.is_empty(), "skips send no event");
    // A reservation released: the paused task's budget is untouched.
    let broke_item = s.task_item(&cases[5].0).await;
    assert_eq!(broke_item["budget_used"][at.format("%Y-%m").to_string()], 4.9);
}

#[tokio::test(flavor = "multi_thread")]
async fn worker_flag_off_skips_with_no_claim_then_completes_the_one_time_reminder() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let runner = s.runner_on(s.store(), run_settings(false));
    let got = runner
        .deliver("m", &run_message(&task, at, "e"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::WorkerDisabled));
    assert_eq!(
        runner.store().requests(),
        3,
        "the task read (its dead claims pruned beside the skip's, and whether the skip finishes it: \
         settlement::completion), the skip record with its finished claim, the reminder's completion"
    );
    assert_eq!(
        s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap()["reason"],
        "worker disabled"
    );
    assert_eq!(
        s.task_item(&task).await["state"],
        "completed",
        "its only occurrence was skipped: the reminder is finished (SPEC section 3)"
    );
    // A recurring task's skip is the one request.
    let recurring = tests::connector_task("issues", "weekly", &[], &[]);
    s.insert(&recurring).await;
    let runner = s.runner_on(s.store(), run_settings(false));
    let got = runner
        .deliver("m", &run_message(&recurring, at, "e"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::WorkerDisabled));
    assert_eq!(runner.store().requests(), 2, "the task read and the skip record");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_task_gets_its_prompt_and_only_its_approved_tools() {
    let s = RunStack::start().await.unwrap();
    let fixture = installed_fixture(&s).await;
    let task = connector_task(
        "issues",
        "weekly_summary",
        &["list_issues", "post_summary"],
        &[("repo", "acme/web")],
    );
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({"text": "open"}), 500, 50),
            Reply::tool("issues__delete_repo", json!({}), 600, 50),
            Reply::tool("search__everything", json!({}), 700, 50),
            Reply::text("Posted the summary.", 800, 40),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s.deliver_once(&task, at).await;
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let state = fixture.state().read().await;
    assert_eq!(
        state.prompt_gets,
        vec![(
            "weekly_summary".to_owned(),
            [("repo".to_owned(), "acme/web".to_owned())].into()
        )]
    );
    assert_eq!(state.calls.len(), 1, "only the approved tool ran: {:?}", state.calls);
    assert_eq!(state.calls[0].0, "list_issues");

    let requests = s.model.requests().await;
    let offered: Vec<&str> = requests[0].1["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, vec!["issues__list_issues", "issues__post_summary"]);
    let first = requests[0].1["messages"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(first, "Summarise this week's issues in acme/web.");

    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["usage"]["tool_calls"], 1);
    assert_eq!(record["usage"]["refused_tool_calls"], 2);
    assert_eq!(record["usage"]["turns"], 4);
    let period = at.format("%Y-%m").to_string();
    let cost = record["cost_usd"].as_f64().unwrap();
    let item = s.task_item(&task).await;
    assert!(
        (item["budget_used"][&period].as_f64().unwrap() - cost).abs() < 1e-12,
        "the reservation settled to the cost"
    );
    let account = s
        .account(
            &shared::domain::task::budget::Account::Install("acct_ins_1".into()),
            &period,
        )
        .await
        .unwrap();
    assert!(
        (account["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-12,
        "charged to the install's account"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_required_argument_fails_the_run_and_holds_nothing() {
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let task = connector_task("issues", "weekly_summary", &["list_issues"], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    let record = s.run_to(&task, at, RunStatus::Failed).await;
    let reason = record["reason"].as_str().unwrap();
    assert!(reason.contains("-32602") && reason.contains("repo"), "{reason}");
    let item = s.task_item(&task).await;
    assert!(item.get("hold").is_none(), "a run-time -32602 is never a withdrawal");
    assert_eq!(item["state"], "scheduled");
    assert!(s.model.requests().await.is_empty());
    assert_eq!(
        s.events().await[0]["detail"]["status"],
        "failed",
        "a failed run is notified"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_setup_slow_under_load_gives_the_run_back_within_its_time_limit() {
    let s = RunStack::start().await.unwrap();
    let fixture = installed_fixture(&s).await;
    fixture.state().write().await.get_prompt_delay = Some(std::time::Duration::from_secs(20));
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.limits.timeout_seconds = 1;
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    let started = std::time::Instant::now();
    let got = s.deliver_once(&task, at).await;
    assert_eq!(
        got,
        Disposition::ReturnToQueue,
        "slow before any model call is load: the run goes back, as a throttled model call's does"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "bounded by the run, not the MCP request timeout"
    );
    let key = occurrence_key(at);
    assert_eq!(s.run_record(&task.task_id, &key).await, None, "nothing recorded");
    assert!(
        s.task_item(&task).await["claims"].get(&key).is_none(),
        "the claim is released: the next delivery runs it"
    );
    assert!(s.model.requests().await.is_empty());
    // Once the server answers in time, the returned occurrence runs.
    fixture.state().write().await.get_prompt_delay = None;
    s.run_to(&task, at, RunStatus::Succeeded).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_per_run_budget_stops_the_loop() {
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.budget = Some(shared::domain::task::budget::Budget {
        max_usd_per_run: 0.01,
        max_usd_per_month: 5.0,
    });
    s.insert(&task).await;
    // 3000 input tokens cost $0.009: the next turn cannot be paid for.
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({}), 3000, 10),
            Reply::text("never", 10, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let record = s.run_to(&task, at, RunStatus::Failed).await;
    assert!(
        record["reason"].as_str().unwrap().contains("per-run budget"),
        "{record}"
    );
    assert!(record["cost_usd"].as_f64().unwrap() <= 0.01);
    assert_eq!(
        s.model.requests().await.len(),
        1,
        "the loop stopped before an unaffordable call"
    );
}

/// The first call is charged for its input too: a per-run budget that would
/// pay for a few output tokens but not for the prompt makes no call at all.
#[tokio::test(flavor = "multi_thread")]
async fn a_per_run_budget_the_first_input_exceeds_makes_no_model_call() {
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.budget = Some(shared::domain::task::budget::Budget {
        max_usd_per_run: 0.000_1,
        max_usd_per_month: 5.0,
    });
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    let record = s.run_to(&task, at, RunStatus::Failed).await;
    assert!(
        record["reason"].as_str().unwrap().contains("per-run budget"),
        "{record}"
    );
    assert_eq!(record["cost_usd"], 0.0);
    assert!(s.model.requests().await.is_empty(), "no model call");
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_stop_the_loop_and_unpriced_models_never_run() {
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() - Duration::seconds(5);
    let mut task = reminder(at);
    task.spec.limits.max_turns = 1;
    s.insert(&task).await;
    s.model
        .script([Reply::Stop {
            reason: "max_tokens".into(),
            text: "cut".into(),
            input_tokens: 10,
            output_tokens: 2000,
        }])
        .await;
    let record = s.run_to(&task, at, RunStatus::Failed).await;
    assert!(
        record["reason"].as_str().unwrap().contains("output token limit"),
        "{record}"
    );

    let other_at = at + Duration::seconds(1);
    let other = reminder(other_at);
    s.insert(&other).await;
    let mut settings = run_settings(true);
    settings.model_id = "unpriced.model".into();
    let got = s
        .runner_on(s.store(), settings)
        .deliver("m", &run_message(&other, other_at, "e"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Failed));
    let record = s.run_record(&other.task_id, &occurrence_key(other_at)).await.unwrap();
    assert!(record["reason"].as_str().unwrap().contains("no price"), "{record}");
    assert_eq!(
        s.model.requests().await.len(),
        1,
        "the unpriced run never called the model"
    );
}

/// A connector run's DynamoDB requests, counted by the store's own counter
/// (ARCHITECTURE.md states them): the claim (which is also the task read),
/// the declaring install's read, one read per bound install, and the
/// settle. No more: the connector's credential is read from Secrets
/// Manager, not the table.
#[tokio::test(flavor = "multi_thread")]
async fn a_connector_run_reads_its_install_and_each_bound_install_once() {
    let s = RunStack::start().await.unwrap();
    let issues = McpFixture::start(FixtureState {
        prompts: ["weekly_summary", "daily_digest"]
            .map(|name| scheduled_prompt(name, json!({"version": 1}), &[], "Summarise."))
            .into(),
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    let chat = McpFixture::start(FixtureState {
        tools: vec![tool("post_message")],
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&install("ins_1", "issues", &issues.url(), InstallScope::Workspace))
        .await
        .unwrap();
    s.store()
        .put_install(&install("ins_chat", "chat", &chat.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let unbound = connector_task("issues", "weekly_summary", &["list_issues"], &[]);
    let mut bound = connector_task("issues", "daily_digest", &["list_issues"], &[]);
    bound.spec.bindings = [("summary_channel".to_owned(), Some("ins_chat".to_owned()))].into();
    s.insert(&unbound).await;
    s.insert(&bound).await;
    s.model
        .script([Reply::text("done", 100, 10), Reply::text("done", 100, 10)])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let runner = s.runner();
    let mut counted = Vec::new();
    for task in [&unbound, &bound] {
        let before = runner.store().requests();
        let got = runner
            .deliver("m1", &run_message(task, at, "e1"), Utc::now(), deadline())
            .await
            .unwrap();
        assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
        counted.push(runner.store().requests() - before);
    }
    assert_eq!(counted[0], 5, "task read, limit read, claim, install read, settle");
    assert_eq!(
        counted[1], 6,
        "task read, limit read, claim, install read, one bound install read, settle"
    );
    assert_eq!(s.model.requests().await.len(), 2);
    let offered = &s.model.requests().await[1].1["toolConfig"]["tools"];
    assert_eq!(
        offered.as_array().map(Vec::len),
        Some(2),
        "the bound install's tool too: {offered}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_message_is_recorded_and_acknowledged() {
    let s = RunStack::start().await.unwrap();
    let runner = s.runner();
    for body in [
        "not json",
        r#"{"task_id": "x"}"#,
        r#"{"task_id": "rem_0123456789abcdef0123456789abcdef", "workspace": "ws_1", "scheduled_time": "yesterday", "execution_id": "e", "attempt": "1"}"#,
    ] {
        let got = runner.deliver("bad-1", body, Utc::now(), deadline()).await.unwrap();
        assert!(matches!(got, Disposition::Malformed(_)), "{body}: {got:?}");
    }
    let kept: Vec<Value> = s.t.items_of("malformed").await;
    assert_eq!(kept.len(), 1, "one message id, kept once");
    assert!(kept[0]["reason"].as_str().unwrap().contains("yesterday"));
}

/// The event is the settle's outbox: a process that dies right after the
/// settle has nothing left to send, and no redelivery sends a second one.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_right_after_the_settle_still_notifies_once() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let runner = s.runner_on(CrashAtSettle::new(s.store(), true), run_settings(true));
    let body = run_message(&task, at, "e1");
    assert!(
        tests::crashes(runner.deliver("m1", &body, Utc::now(), deadline())).await,
        "the process dies before the settle's answer"
    );
    assert_eq!(
        s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap()["status"],
        "succeeded"
    );

    // Redeliveries, at once and later: duplicates, one request each.
    let before = runner.store().inner.requests();
    let outcomes = futures::future::join_all((0..5).map(|i| {
        runner.deliver(
            Box::leak(format!("m{i}").into_boxed_str()),
            &body,
            Utc::now(),
            deadline(),
        )
    }))
    .await;
    assert!(
        outcomes.iter().all(|o| matches!(o, Ok(Disposition::Duplicate))),
        "{outcomes:?}"
    );
    assert_eq!(runner.store().inner.requests() - before, 5);
    let events = s.events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["detail"]["status"], "succeeded");
    assert_eq!(s.model.requests().await.len(), 1, "the run itself never repeated");
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_123"),
            &at.format("%Y-%m").to_string(),
        )
        .await
        .unwrap();
    assert_eq!(account["runs"], 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn bound_workspace_connectors_lend_their_tools_and_credentials_come_from_secrets_manager() {
    let s = RunStack::start().await.unwrap();
    let declaring = fixture().await;
    let chat = McpFixture::start(FixtureState {
        tools: vec![tool("post_message")],
        ..Default::default()
    })
    .await
    .unwrap();
    let personal = McpFixture::start(FixtureState {
        tools: vec![tool("read_my_mail")],
        ..Default::default()
    })
    .await
    .unwrap();

    let secret = aws_sdk_secretsmanager::Client::new(&s.t.aws.sdk)
        .create_secret()
        .name(s.t.stack.connector_secret_name("ws_1", "ins_1"))
        .secret_string("s3cr3t-token")
        .send()
        .await
        .unwrap();
    let mut issues = install("ins_1", "issues", &declaring.url(), InstallScope::Workspace);
    issues.credential_secret_arn = secret.arn().map(str::to_owned);
    s.store().put_install(&issues).await.unwrap();
    s.store()
        .put_install(&install("ins_chat", "chat", &chat.url(), InstallScope::Workspace))
        .await
        .unwrap();
    s.store()
        .put_install(&install("ins_mine", "mail", &personal.url(), InstallScope::Personal))
        .await
        .unwrap();

    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.bindings = [
        ("summary_channel".to_owned(), Some("ins_chat".to_owned())),
        ("inbox".to_owned(), Some("ins_mine".to_owned())),
        ("archive".to_owned(), None),
    ]
    .into();
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("chat__post_message", json!({"text": "summary"}), 100, 10),
            Reply::tool("mail__read_my_mail", json!({}), 100, 10),
            Reply::text("done", 100, 10),
            Reply::text("done again", 100, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let runner = s.runner();
    let got = runner
        .deliver("m", &run_message(&task, at, "e"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let offered: Vec<String> = s.model.requests().await[0].1["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        offered,
        vec!["issues__list_issues", "chat__post_message"],
        "no personal connector's tools"
    );
    assert_eq!(chat.state().read().await.calls.len(), 1);
    assert!(personal.state().read().await.calls.is_empty());
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["usage"]["refused_tool_calls"], 1);

    let auth = declaring.state().read().await.authorizations.clone();
    assert!(
        !auth.is_empty() && auth.iter().all(|a| a == "Bearer s3cr3t-token"),
        "{auth:?}"
    );
    assert!(
        chat.state().read().await.authorizations.is_empty(),
        "no credential, no header"
    );

    // The next occurrence in the same warm process reuses the credential.
    let earlier = at - Duration::minutes(1);
    let got = runner
        .deliver("m2", &run_message(&task, earlier, "e2"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(
        runner.connectors().secret_reads(),
        1,
        "one Secrets Manager read for two runs"
    );
    let auth = declaring.state().read().await.authorizations.clone();
    assert!(auth.iter().all(|a| a == "Bearer s3cr3t-token"), "{auth:?}");
}

/// An admin skips the next occurrence of an approved connector task (SPEC
/// §8): that one is recorded `skipped` ("skipped by an admin"), the one
/// after runs; unskip takes a skip back; a reminder's and a rate task's
/// next run are not the admin's to skip.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_skips_and_unskips_the_next_run_of_a_connector_task() {
    let s = RunStack::start().await.unwrap();
    let _fixture = installed_fixture(&s).await;
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.schedule = shared::domain::schedule::Schedule::Cron {
        cron: "0 9 * * *".into(),
        timezone: "UTC".into(),
        until: None,
    };
    s.insert(&task).await;
    let admin = s.t.admin();
    let at = |d: u32| chrono::TimeZone::with_ymd_and_hms(&Utc, 2027, 5, d, 9, 0, 0).unwrap();
    let now = at(3) + Duration::hours(3);
    let request = |op: &str, version: u64| json!({"op": op, "principal": tests::admin_principal(), "task_id": task.task_id, "expected_version": version});
    let skipped = admin.handle(request("skip_next", 1), now).await.unwrap();
    assert_eq!(skipped["ok"], true, "{skipped}");
    assert!(
        skipped["explanation"]
            .as_str()
            .unwrap()
            .contains("runs next at 2027-05-05T09:00:00Z; the run at 2027-05-04T09:00:00Z is skipped"),
        "{skipped}"
    );
    let got = admin
        .handle(
            json!({"op": "get", "principal": tests::admin_principal(), "task_id": task.task_id}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(got["next_fires"][0]["at"], Value::Null);
    assert!(got["next_fires"][0]["note"].as_str().unwrap().starts_with("skipped by"));
    assert_eq!(got["next_fires"][1]["at"], "2027-05-05T09:00:00Z");

    let stored = shared::ports::TaskStore::task(&s.store(), "ws_1", &task.task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        s.deliver_once(&stored, at(4)).await,
        Disposition::Skipped(SkipReason::SkippedByAdmin)
    );
    let record = s.run_record(&task.task_id, &occurrence_key(at(4))).await.unwrap();
    assert_eq!(record["reason"], "skipped by an admin");
    s.model.script([Reply::text("Summary posted.", 100, 10)]).await;
    assert_eq!(
        s.deliver_once(&stored, at(5)).await,
        Disposition::Ran(RunStatus::Succeeded),
        "the one after runs"
    );

    // Unskip before it comes: it runs.
    let later = at(5) + Duration::hours(3);
    let skipped = admin.handle(request("skip_next", 2), later).await.unwrap();
    assert_eq!(skipped["task"]["version"], 3, "{skipped}");
    let unskipped = admin.handle(request("unskip", 3), later).await.unwrap();
    assert_eq!(unskipped["task"]["version"], 4, "{unskipped}");
    let nothing = admin.handle(request("unskip", 4), later).await.unwrap();
    assert_eq!(nothing["task"]["version"], 4, "nothing to take back: no write");
    let stored = shared::ports::TaskStore::task(&s.store(), "ws_1", &task.task_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.skip_next, None);
    s.model.script([Reply::text("Summary posted.", 100, 10)]).await;
    assert_eq!(
        s.deliver_once(&stored, at(6)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );

    // Not the admin's: a reminder's runs; not nameable: a rate's next one.
    let reminder = reminder(Utc::now() + Duration::hours(1));
    s.insert(&reminder).await;
    let refused = admin
        .handle(
            json!({"op": "skip_next", "principal": tests::admin_principal(), "task_id": reminder.task_id, "expected_version": 1}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    let rate = connector_task("issues", "sweep", &[], &[]);
    s.insert(&rate).await;
    let refused = admin
        .handle(
            json!({"op": "skip_next", "principal": tests::admin_principal(), "task_id": rate.task_id, "expected_version": 1}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
}

/// An admin's run now of an approved connector task (SPEC §8): one extra
/// occurrence through the door, the claim, the budget and the settle, its
/// prompt fetched and its run recorded and notified; twice with one key is
/// one run; a held task is refused with the door's reason; over budget, the
/// occurrence is recorded `budget_exhausted` like any other.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_runs_a_connector_task_now_exactly_once_per_key_within_its_budget() {
    let s = RunStack::start().await.unwrap();
    let fixture = installed_fixture(&s).await;
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    task.spec.schedule = shared::domain::schedule::Schedule::Cron {
        cron: "0 9 * * MON".into(),
        timezone: "Europe/Berlin".into(),
        until: None,
    };
    s.insert(&task).await;
    let admin = s.t.admin();
    let request = |key: &str, version: u64| {
        json!({"op": "run_now", "principal": tests::admin_principal(), "task_id": task.task_id,
               "expected_version": version, "idempotency_key": key})
    };
    let now = Utc::now();
    let first = admin.handle(request("run_1", 1), now).await.unwrap();
    assert_eq!(first["ok"], true, "{first}");
    let again = admin.handle(request("run_1", 1), now).await.unwrap();
    assert_eq!(again["replayed"], true);
    assert_eq!(again["run_id"], first["run_id"]);
    let bodies = s.t.take_run_messages().await;
    assert_eq!(bodies.len(), 2, "sent, then sent again by the replay");
    s.model.script([Reply::text("Posted the summary.", 400, 40)]).await;
    let runner = s.runner();
    let mut got = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        got.push(
            runner
                .deliver(&format!("m{i}"), body, now + Duration::seconds(2), deadline())
                .await
                .unwrap(),
        );
    }
    assert_eq!(
        got,
        vec![Disposition::Ran(RunStatus::Succeeded), Disposition::Duplicate]
    );
    assert_eq!(
        fixture.state().read().await.prompt_gets.len(),
        1,
        "one prompts/get: one run"
    );
    let occurrence = first["run_id"].as_str().unwrap().split_once('@').unwrap().1.to_owned();
    let record = s.run_record(&task.task_id, &occurrence).await.unwrap();
    assert_eq!(record["status"], "succeeded");
    let runs = admin
        .handle(
            json!({"op": "runs", "principal": tests::admin_principal(), "task_id": task.task_id}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(runs["runs"][0]["output"], "Posted the summary.");
    assert_eq!(
        s.events()
            .await
            .iter()
            .filter(|e| e["detail"]["run_id"] == first["run_id"])
            .count(),
        1
    );

    // Over its monthly budget: asked, then skipped at the claim like any run.
    let period = shared::domain::task::budget::period(now);
    let mut broke = connector_task("issues", "expensive", &[], &[("repo", "acme/web")]);
    broke.spec.schedule = task.spec.schedule.clone();
    broke.budget_used.insert(period, 5.0);
    s.insert(&broke).await;
    let asked = admin
        .handle(
            json!({"op": "run_now", "principal": tests::admin_principal(), "task_id": broke.task_id,
                   "expected_version": 1, "idempotency_key": "run_2"}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(asked["ok"], true, "{asked}");
    let body = s.t.take_run_messages().await.remove(0);
    assert_eq!(
        runner
            .deliver("m-b", &body, now + Duration::seconds(2), deadline())
            .await
            .unwrap(),
        Disposition::Skipped(SkipReason::BudgetExhausted)
    );

    // Held (awaiting approval): refused with the door's reason, nothing sent.
    let mut held = connector_task("issues", "held", &[], &[]);
    held.spec.schedule = task.spec.schedule.clone();
    held.hold.place(HoldReason::AwaitingApproval, now, "new");
    s.insert(&held).await;
    let refused = admin
        .handle(
            json!({"op": "run_now", "principal": tests::admin_principal(), "task_id": held.task_id,
                   "expected_version": 1, "idempotency_key": "run_3"}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("held: awaiting_approval"),
        "{refused}"
    );
    assert!(s.t.take_run_messages().await.is_empty());
    // A reminder's runs are its owner's.
    let reminder = reminder(now + Duration::hours(1));
    s.insert(&reminder).await;
    let refused = admin
        .handle(
            json!({"op": "run_now", "principal": tests::admin_principal(), "task_id": reminder.task_id,
                   "expected_version": 1, "idempotency_key": "run_4"}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
}

/// A delivery of an occurrence more than two minutes ahead (sent by hand,
/// or redriven, never by Scheduler) is acknowledged as not due yet: not
/// run, no claim, no record, nothing charged, the model never asked; the
/// occurrence's own delivery at its time runs it. Even with the worker
/// off, it records nothing (a skip would take the occurrence).
#[tokio::test(flavor = "multi_thread")]
async fn a_delivery_of_an_occurrence_not_due_yet_runs_nothing_and_takes_nothing() {
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() + Duration::hours(2);
    let task = reminder(at);
    s.insert(&task).await;
    let before = s.task_item(&task).await;
    for runner in [s.runner(), s.runner_on(s.store(), run_settings(false))] {
        let got = runner
            .deliver("early", &run_message(&task, at, "forged"), Utc::now(), deadline())
            .await
            .unwrap();
        assert_eq!(got, Disposition::NotYet);
        assert!(got.comes_back(1, Utc::now(), 0.5).is_none(), "acknowledged");
    }
    assert_eq!(s.task_item(&task).await, before, "no claim, nothing charged");
    assert!(s.run_record(&task.task_id, &occurrence_key(at)).await.is_none());
    assert!(s.model.requests().await.is_empty());
    // Two minutes ahead is clock drift, not early.
    let drift = Utc::now() + Duration::seconds(shared::domain::run::door::EARLY_SECONDS - 10);
    let mut near = reminder(drift);
    near.task_id = shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", "near");
    s.insert(&near).await;
    let got = s
        .runner()
        .deliver("near", &run_message(&near, drift, "e1"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    // Its own delivery, at its time, runs it.
    let got = s
        .runner()
        .deliver(
            "on-time",
            &run_message(&task, at, "e1"),
            at + Duration::seconds(3),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
}

/// A settle that collides with other writes (here: the store fails it for
/// now three times, as a transaction cancelled by writes of the account
/// from other runs would, after the adapter's own retries) is sent again
/// within the invocation's time: recorded once, the model and the tool
/// asked once, never run again by a take-over.
#[tokio::test(flavor = "multi_thread")]
async fn a_settle_that_keeps_colliding_is_sent_again_in_time_and_the_run_is_not_repeated() {
    struct Colliding(std::sync::atomic::AtomicU32);
    impl RunStoreHook<shared::adapters::dynamo::DynamoStore> for Colliding {
        async fn settle(
            &self,
            inner: &shared::adapters::dynamo::DynamoStore,
            s: &shared::ports::Settlement<'_>,
        ) -> Result<shared::ports::Settled, shared::ports::StoreError> {
            if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 {
                return Err(shared::ports::StoreError::Request {
                    operation: "TransactWriteItems",
                    source: "TransactionCanceledException: [TransactionConflict] (injected)".into(),
                });
            }
            inner.settle(s).await
        }
    }
    let s = RunStack::start().await.unwrap();
    let fixture = installed_fixture(&s).await;
    let task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", "acme/web")]);
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({}), 100, 10),
            Reply::text("done", 100, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let runner = s.runner_on(
        Intercepted::new(s.store(), Colliding(Default::default())),
        run_settings(true),
    );
    let got = runner
        .deliver(
            "m1",
            &run_message(&task, at, "e1"),
            Utc::now(),
            Utc::now() + Duration::seconds(60),
        )
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["attempts"], 1, "{record}");
    assert_eq!(s.model.requests().await.len(), 2, "one run: a tool turn and an answer");
    assert_eq!(fixture.state().read().await.calls.len(), 1, "the tool called once");
}
