//! Nothing a task accumulates outlives its window (SPEC §7): every write
//! that adds or ends a claim prunes the task's dead ones beside it, so a
//! task whose runs stop settling (its workspace's month spent, the worker
//! off, deliveries late, attempts crashed, nobody deciding its approvals)
//! keeps the claims of its catch-up window and a bounded number waiting
//! for a person, and runs again at its next occurrence once the cause is
//! gone. Through the real runner and the admin function against moto, on a
//! virtual clock: each delivery is handed the time Scheduler would deliver
//! it at.

use chrono::{DateTime, Duration, DurationRound, Utc};

use local::converse::Reply;
use local::mcp_fixture::{annotated_tool, tool};
use serde_json::{Value, json};
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::gate::{CallApproval, CallDecision, GatedCall, Target};
use shared::domain::run::occurrence::{MAX_AWAITING, occurrence_key};
use shared::domain::task::Task;
use shared::domain::task::budget::{self, BudgetLevel};
use shared::domain::task::claim::{Claim, RunStatus};
use shared::ports::{CallApprovals, ClaimAnswer, ClaimRequest, Park, Release, RunStore, Settled, TakeOver};
use tests::{RunStack, TestRunner, deadline, run_message, run_settings};

/// The test task's rate (`tests::connector_task`): every five minutes.
const EVERY: Duration = Duration::minutes(5);

/// The claims a task item may hold beside those waiting for a person: its
/// catch-up window's (an hour, kept 70 minutes by
/// `occurrence::claim_retention`) at one every five minutes, and the one
/// being written.
const WINDOW: usize = 70 / 5 + 1;

fn admin() -> Value {
    json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]})
}

/// Delivers `task`'s occurrence at `at` as Scheduler would at `now`.
async fn deliver_at(runner: &TestRunner, task: &Task, at: DateTime<Utc>, now: DateTime<Utc>) -> Disposition {
    let execution = format!("e-{}", at.timestamp());
    runner
        .deliver("m1", &run_message(task, at, &execution), now, deadline())
        .await
        .expect("the delivery answers")
}

/// The task item's claims, and the item's size as JSON.
async fn claims_of(s: &RunStack, task: &Task) -> (serde_json::Map<String, Value>, usize) {
    let item = s.task_item(task).await;
    let claims = item["claims"].as_object().cloned().unwrap_or_default();
    (claims, item.to_string().len())
}

/// The first occurrence of a run of `n`, ending an hour before now: every
/// delivery of the test is in the past of the wall clock.
fn first_of(n: i64) -> DateTime<Utc> {
    let start = Utc::now() - EVERY * i32::try_from(n + 12).unwrap();
    start.duration_trunc(EVERY).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_skips_of_every_kind_leave_a_window_of_claims_and_a_raise_runs_the_next_occurrence() {
    let s = RunStack::start().await.unwrap();
    let (_issues, task) = s
        .issues_task("weekly_summary", vec![tool("list_issues")], &["list_issues"], &[])
        .await;
    let runner = s.runner();
    let (crashed, late, off, spent) = (10, 300, 300, 400);
    let mut at = first_of(crashed + late + off + spent);
    let mut largest = 0;
    let mut bounded = |phase: &str, (claims, size): (serde_json::Map<String, Value>, usize)| {
        assert!(
            claims.len() <= WINDOW,
            "after {phase}: {} claims on the task item, at most {WINDOW}: {:?}",
            claims.len(),
            claims.keys().collect::<Vec<_>>()
        );
        largest = largest.max(size);
    };

    // Attempts that claimed and crashed, each found dead two hours later by
    // its next delivery: skipped missed, paying what the claim committed.
    for _ in 0..crashed {
        claimed(&s, &task, at, "crashed", at + Duration::minutes(1)).await;
        assert_eq!(
            deliver_at(&runner, &task, at, at + Duration::hours(2)).await,
            Disposition::Skipped(SkipReason::Missed)
        );
        at += EVERY;
    }
    bounded("crashed attempts paid by skips", claims_of(&s, &task).await);
    // Deliveries past the catch-up window (an outage of the runner).
    for _ in 0..late {
        assert_eq!(
            deliver_at(&runner, &task, at, at + Duration::hours(2)).await,
            Disposition::Skipped(SkipReason::Missed)
        );
        bounded("late deliveries", claims_of(&s, &task).await);
        at += EVERY;
    }
    // The worker switched off.
    let off_runner = s.runner_on(s.store(), run_settings(false));
    for _ in 0..off {
        assert_eq!(
            deliver_at(&off_runner, &task, at, at + Duration::seconds(5)).await,
            Disposition::Skipped(SkipReason::WorkerDisabled)
        );
        at += EVERY;
    }
    bounded("the worker off", claims_of(&s, &task).await);
    // The workspace's month spent: every claim refused at its budget.
    let set = json!({"op": "set_budget", "principal": admin(),
                     "budget": {"max_usd_per_month": 0.0}, "expected_version": 0});
    let answer = s.t.admin().handle(set, Utc::now()).await.unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    for i in 0..spent {
        assert_eq!(
            deliver_at(&runner, &task, at, at + Duration::seconds(5)).await,
            Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace))
        );
        if i % 50 == 0 {
            bounded("a spent month", claims_of(&s, &task).await);
        }
        at += EVERY;
    }
    bounded("a spent month", claims_of(&s, &task).await);
    assert!(
        s.model.requests().await.is_empty(),
        "no model call while nothing could run"
    );

    // The cause gone, the next occurrence runs.
    let raise = json!({"op": "set_budget", "principal": admin(),
                       "budget": {"max_usd_per_month": 50.0}, "expected_version": 1});
    let answer = s.t.admin().handle(raise, Utc::now()).await.unwrap();
    assert_eq!(answer["workspace"]["reached"], false, "{answer}");
    s.model.script([Reply::text("done", 1000, 100)]).await;
    assert_eq!(
        deliver_at(&runner, &task, at, at + Duration::seconds(5)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    bounded("the run after the raise", claims_of(&s, &task).await);
    eprintln!(
        "{} occurrences skipped; the task item was at most {largest} bytes as JSON",
        crashed + late + off + spent
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_bound_of_occurrences_waiting_for_an_admin_the_next_is_skipped_before_the_model() {
    let s = RunStack::start().await.unwrap();
    let tools = vec![
        tool("list_issues"),
        annotated_tool("delete_issue", json!({"destructiveHint": true})),
    ];
    let (issues, task) = s.triage(tools, &["list_issues", "delete_issue"], &[]).await;
    let runner = s.runner();
    let waiting = i64::try_from(MAX_AWAITING).unwrap();
    let mut at = first_of(waiting + 40);
    for i in 0..MAX_AWAITING {
        s.model
            .script([Reply::tool("issues__delete_issue", json!({"id": i}), 1000, 50)])
            .await;
        assert_eq!(
            deliver_at(&runner, &task, at, at + Duration::seconds(5)).await,
            Disposition::AwaitingApproval
        );
        at += EVERY;
    }
    let asked = s.model.requests().await.len();
    // Nobody decides: every later occurrence is skipped at the door, its
    // model never called, and the item keeps its window besides the waiting.
    for _ in 0..40 {
        assert_eq!(
            deliver_at(&runner, &task, at, at + Duration::seconds(5)).await,
            Disposition::Skipped(SkipReason::AwaitingApprovalLimit)
        );
        at += EVERY;
    }
    assert_eq!(s.model.requests().await.len(), asked, "no model call past the bound");
    let (claims, _) = claims_of(&s, &task).await;
    let awaiting = claims.values().filter(|c| c["status"] == "awaiting_approval").count();
    assert_eq!(awaiting, MAX_AWAITING);
    assert!(claims.len() <= MAX_AWAITING + WINDOW, "{} claims", claims.len());
    let record = s.run_record(&task.task_id, &occurrence_key(at - EVERY)).await.unwrap();
    assert_eq!(
        record["reason"],
        SkipReason::AwaitingApprovalLimit.describe(),
        "{record}"
    );

    // The requests lapse and the check ends them: the next occurrence runs.
    let later = at + Duration::hours(25);
    let ended = shared::app::approvals::expire_lapsed(&s.store(), later, Duration::days(30), tests::far_deadline())
        .await
        .unwrap();
    assert_eq!(ended.ended, MAX_AWAITING);
    assert_eq!(ended.backlog_seconds, 0, "nothing left lapsed");
    s.model.script([Reply::text("nothing to delete", 1000, 50)]).await;
    let next = later.duration_trunc(EVERY).unwrap();
    assert_eq!(
        deliver_at(&runner, &task, next, next + Duration::seconds(5)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    let (claims, _) = claims_of(&s, &task).await;
    assert!(
        claims.len() <= WINDOW,
        "the ended occurrences' claims pruned beside the run: {:?}",
        claims.keys().collect::<Vec<_>>()
    );
    assert!(issues.state().read().await.calls.is_empty(), "no gated call made");
}

/// Claims `task`'s occurrence at `at` through the store as `execution`
/// would, its lease until `lease_until`: the task as claimed.
async fn claimed(s: &RunStack, task: &Task, at: DateTime<Utc>, execution: &str, lease_until: DateTime<Utc>) -> Task {
    let (key, period) = (occurrence_key(at), budget::period(at));
    let claim = Claim {
        status: RunStatus::Running,
        lease_until: lease_until.timestamp(),
        execution_id: execution.to_owned(),
        attempts: 1,
        started_at: at,
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    let request = ClaimRequest {
        workspace: &task.workspace,
        task_id: &task.task_id,
        occurrence: &key,
        period: &period,
        claim: &claim,
        now: at,
        person_cap_usd: None,
        resume: None,
        keep_claims: Duration::minutes(70),
    };
    match s.store().claim(&request).await.unwrap() {
        ClaimAnswer::Claimed(task) => *task,
        other => panic!("the occurrence at {key} is not claimed: {other:?}"),
    }
}

/// Parks `task`'s occurrence at `at` through the store as a run stopped at
/// a gated call would (claimed, then kept waiting with its request put),
/// carrying `spent`: the request.
async fn parked(s: &RunStack, task: &Task, at: DateTime<Utc>, spent: f64) -> CallApproval {
    let store = s.store();
    let key = occurrence_key(at);
    let period = budget::period(at);
    let execution = format!("e-{}", at.timestamp());
    let claimed = claimed(s, task, at, &execution, at + Duration::minutes(5)).await;
    let run_id = shared::domain::run::occurrence::run_id(task.task_id.as_str(), at);
    let arguments = json!({"id": at.timestamp()});
    let call = GatedCall {
        workspace: &task.workspace,
        task_id: task.task_id.as_str(),
        run_id: &run_id,
        scheduled_time: &key,
        target: Target {
            install: "ins_1",
            server: "issues",
            tool: "delete_issue",
        },
        arguments: &arguments,
    };
    let approval = CallApproval::ask(&call, at, 24, Duration::days(30)).unwrap();
    let delivery = shared::domain::run::occurrence::RunMessage::parse(&run_message(task, at, &execution)).unwrap();
    let mut record = shared::domain::run::occurrence::RunRecord::new(
        &delivery,
        &shared::domain::run::occurrence::Outcome {
            status: RunStatus::AwaitingApproval,
            ..shared::domain::run::occurrence::Outcome::skipped("awaiting approval".into())
        },
        1,
        spent,
        "",
        at,
        at,
        Duration::days(30),
    );
    record.request_id = Some(approval.request_id.clone());
    let park = Park {
        release: Release {
            task: &claimed,
            occurrence: &key,
            execution_id: &execution,
            period: &period,
            reserved_usd: 0.25,
            carried_usd: spent,
            workspace_held_usd: 0.25,
        },
        record: &record,
        approval: &approval,
        prune: Vec::new(),
    };
    assert_eq!(store.park(&park).await.unwrap(), Settled::Done);
    approval
}

/// Approves `approval` and takes its occurrence over as its resumed run
/// would, holding a lease until `lease_until`.
async fn resumed(s: &RunStack, task: &Task, approval: &CallApproval, lease_until: DateTime<Utc>) {
    let store = s.store();
    let approved = approval
        .decide(
            CallDecision::Approve,
            "adm_1",
            None,
            approval.version,
            approval.requested_at,
        )
        .unwrap();
    assert!(store.approve_call(&approved, approval.version).await.unwrap());
    let at = shared::domain::schedule::parse_instant(&approval.scheduled_time).unwrap();
    let period = budget::period(at);
    let claim = Claim {
        status: RunStatus::Running,
        lease_until: lease_until.timestamp(),
        execution_id: format!("approval-{}", approval.request_id),
        attempts: 1,
        started_at: at,
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: Some(approval.request_id.clone()),
    };
    let request = ClaimRequest {
        workspace: &task.workspace,
        task_id: &task.task_id,
        occurrence: &approval.scheduled_time,
        period: &period,
        claim: &claim,
        now: approval.requested_at,
        person_cap_usd: None,
        resume: Some(&approval.request_id),
        keep_claims: Duration::minutes(70),
    };
    let answer = store.take_over(&request, TakeOver::Approved).await.unwrap();
    assert!(matches!(answer, ClaimAnswer::Claimed(_)), "{answer:?}");
}

/// A connector task of the issues server whose month is large enough for
/// every claim of a test, stored.
async fn roomy_task(s: &RunStack) -> (local::mcp_fixture::McpFixture, Task) {
    let (issues, mut task) = s
        .issues_task("weekly_summary", vec![tool("list_issues")], &["list_issues"], &[])
        .await;
    task.spec.budget = Some(shared::domain::task::budget::Budget {
        max_usd_per_run: 0.25,
        max_usd_per_month: 1000.0,
    });
    task.task_id = shared::domain::task::TaskId::for_connector("ws_1", "issues", "daily_digest");
    s.insert(&task).await;
    (issues, task)
}

#[tokio::test(flavor = "multi_thread")]
async fn expiry_goes_past_requests_it_must_leave_ends_dead_resumed_runs_and_measures_what_it_left() {
    let s = RunStack::start().await.unwrap();
    let (_issues, task) = roomy_task(&s).await;
    // More requests than a page that a resumed run holds under a live
    // lease, expiring first; then requests nobody decided, and resumed
    // runs that died (their message lost), expiring after them.
    let blocked = shared::app::approvals::EXPIRE_PER_PAGE + 10;
    let mut at = first_of(i64::try_from(blocked).unwrap() + 30);
    let later = Utc::now() + Duration::hours(25);
    let mut held = Vec::new();
    for _ in 0..blocked {
        let approval = parked(&s, &task, at, 0.05).await;
        resumed(&s, &task, &approval, later + Duration::hours(1)).await;
        held.push(approval);
        at += EVERY;
    }
    for _ in 0..20 {
        parked(&s, &task, at, 0.05).await;
        at += EVERY;
    }
    for _ in 0..5 {
        let approval = parked(&s, &task, at, 0.05).await;
        resumed(&s, &task, &approval, at + Duration::minutes(10)).await;
        at += EVERY;
    }

    let store = s.store();
    let pass = shared::app::approvals::expire_lapsed(&store, later, Duration::days(30), tests::far_deadline())
        .await
        .unwrap();
    assert_eq!(
        pass.ended, 25,
        "the undecided and the dead, past {blocked} it must leave"
    );
    let oldest = (later - held[0].expires_at).num_seconds();
    assert_eq!(pass.backlog_seconds, oldest, "the oldest request left lapsed");
    // A dead resumed run ends expired, paying what it committed: the
    // reservation its attempt held and what the parked attempt spent.
    let dead = s.run_record(&task.task_id, &occurrence_key(at - EVERY)).await.unwrap();
    assert_eq!(dead["status"], "skipped", "{dead}");
    assert_eq!(dead["reason"], SkipReason::Expired.describe(), "{dead}");
    assert!((dead["cost_usd"].as_f64().unwrap() - 0.30).abs() < 1e-9, "{dead}");
    let undecided = s
        .run_record(&task.task_id, &occurrence_key(at - EVERY * 6))
        .await
        .unwrap();
    assert_eq!(undecided["reason"], SkipReason::Expired.describe(), "{undecided}");

    // The held runs' leases run out: the next period ends them too.
    let after = later + Duration::hours(2);
    let pass = shared::app::approvals::expire_lapsed(&store, after, Duration::days(30), tests::far_deadline())
        .await
        .unwrap();
    assert_eq!(pass.ended, blocked);
    assert_eq!(pass.backlog_seconds, 0, "nothing left lapsed");
    let (claims, _) = claims_of(&s, &task).await;
    assert!(
        claims.values().all(|c| c["status"] == "skipped"),
        "every occurrence ended"
    );
}

/// Requests holding occurrences spread over the expiry index's shards,
/// never one partition; one the last release left in its single
/// partition is expired too; a check whose time is up ends nothing more
/// and says what it left, which the next period ends.
#[tokio::test(flavor = "multi_thread")]
async fn expiry_reads_every_shard_and_the_last_releases_partition_within_its_deadline() {
    use shared::adapters::keys::{APPROVALS_HOLDING, Key, approvals_holding};
    let s = RunStack::start().await.unwrap();
    let (_issues, task) = roomy_task(&s).await;
    let mut at = first_of(40);
    let mut requests = Vec::new();
    for _ in 0..24 {
        requests.push(parked(&s, &task, at, 0.05).await);
        at += EVERY;
    }
    let partitions: std::collections::BTreeSet<String> =
        s.t.items_of("call_approval")
            .await
            .iter()
            .map(|item| item["gsi3pk"].as_str().unwrap().to_owned())
            .collect();
    assert!(partitions.len() > 4, "{partitions:?}");
    let shards: std::collections::BTreeSet<String> = (0..shared::domain::run::gate::EXPIRY_SHARDS)
        .map(|shard| approvals_holding(Some(shard)))
        .collect();
    assert!(partitions.is_subset(&shards), "{partitions:?}");
    // The oldest as the last release wrote it: in the one partition.
    let first = &requests[0];
    let key = Key::approval(&first.workspace, &first.request_id);
    let mut item = s.t.raw_item(&key.pk, &key.sk).await.expect("the request's item");
    item.insert(
        "gsi3pk".to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S(APPROVALS_HOLDING.to_owned()),
    );
    s.t.put_items(vec![item]).await;

    let store = s.store();
    let later = Utc::now() + Duration::hours(25);
    let spent = shared::app::approvals::expire_lapsed(&store, later, Duration::days(30), std::time::Instant::now())
        .await
        .unwrap();
    assert_eq!(spent.ended, 0, "no time left: nothing ended");
    assert_eq!(
        spent.backlog_seconds,
        (later - first.expires_at).num_seconds(),
        "the oldest, in the last release's partition"
    );
    let pass = shared::app::approvals::expire_lapsed(&store, later, Duration::days(30), tests::far_deadline())
        .await
        .unwrap();
    assert_eq!((pass.ended, pass.backlog_seconds), (24, 0));
    let first_record = s.run_record(&task.task_id, &first.scheduled_time).await.unwrap();
    assert_eq!(first_record["reason"], SkipReason::Expired.describe(), "{first_record}");
}

/// The local stack expires what DynamoDB's TTL would (moto never does): a
/// settled reminder's run record stays through its retention and leaves
/// after it; what never had a TTL stays.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_record_leaves_the_table_once_its_retention_has_passed() {
    let s = RunStack::start().await.unwrap();
    let endpoint = s.t.aws.moto.endpoint();
    let (task, at) = s.due_reminder().await;
    s.model.script([Reply::text("done", 1000, 100)]).await;
    let record = s.run_to(&task, at, RunStatus::Succeeded).await;
    let ttl = record["ttl"].as_i64().expect("a run record carries a TTL");
    let retention = Duration::days(shared::config::DEFAULT_RETENTION_DAYS);
    assert!(ttl >= (at + retention).timestamp(), "{record}");
    assert_eq!(
        local::moto::expire_ttl(&endpoint, &s.t.stack.names.table, ttl - 1).unwrap(),
        0,
        "not before its time"
    );
    assert!(s.run_record(&task.task_id, &occurrence_key(at)).await.is_some());
    let deleted = local::moto::expire_ttl(&endpoint, &s.t.stack.names.table, ttl + 1).unwrap();
    assert!(deleted >= 1, "the record at least");
    assert!(s.run_record(&task.task_id, &occurrence_key(at)).await.is_none(), "gone");
    assert_eq!(
        local::moto::expire_ttl(&endpoint, &s.t.stack.names.table, ttl + 1).unwrap(),
        0,
        "once"
    );
}

/// A workspace's budget item keeps what its months held for a year, and
/// at most two years of months: 30 months of one reminder each leave the
/// last 12 at least and never more than 24.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspaces_budget_item_keeps_at_most_two_years_of_months() {
    use chrono::Datelike;
    let s = RunStack::start().await.unwrap();
    let runner = s.runner();
    let start = (Utc::now() - Duration::days(31 * 31)).date_naive().with_day(1).unwrap();
    let mut periods = Vec::new();
    for month in 0..30 {
        let at = start
            .checked_add_months(chrono::Months::new(month))
            .unwrap()
            .and_hms_opt(9, 0, 0)
            .unwrap()
            .and_utc();
        let mut reminder = tests::reminder(at);
        reminder.task_id = shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", &format!("m{month}"));
        s.insert(&reminder).await;
        s.model.script([Reply::text("done", 1000, 100)]).await;
        assert_eq!(
            deliver_at(&runner, &reminder, at, at + Duration::seconds(5)).await,
            Disposition::Ran(RunStatus::Succeeded)
        );
        periods.push(budget::period(at));
    }
    let key = shared::adapters::keys::Key::workspace_budget("ws_1");
    let item = s.t.item(&key.pk, &key.sk).await.expect("the workspace's budget item");
    let held: Vec<&str> = item
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("committed#"))
        .collect();
    assert!(held.len() <= 24, "{} months held: {held:?}", held.len());
    for period in &periods[periods.len() - 12..] {
        assert!(held.contains(&period.as_str()), "{period} kept: {held:?}");
    }
    assert!(!held.contains(&periods[0].as_str()), "the first month left: {held:?}");
}

/// A year of a workspace (`tests::year`, shortened: the hourly task a
/// day a month, a quarter hour of the minute task a month; the full year
/// is `infra/scripts/year.sh`): minute, hourly, daily, monthly and weekly
/// tasks, a reminder a month, the month spent at its start and raised on
/// its sixth day, the worker off for ten days, an outage's late
/// deliveries, a gated call nobody decides each week, a second install
/// come and uninstalled, expiry daily and TTL weekly. Every delivery
/// answers what its causes say, so each task runs again on the first day
/// its cause is gone; no item nears 64 KB; each kind of item is held at
/// every sweep to what the retention keeps; the approvals' backlog ends at
/// zero.
#[tokio::test(flavor = "multi_thread")]
async fn a_year_of_a_workspace_keeps_every_item_and_the_table_bounded() {
    let report = tests::year::run(tests::year::YearConfig::SHORT).await.unwrap();
    eprintln!("{}", report.table());
    assert!(report.largest_item < 64 * 1024, "{}", report.table());
    assert_eq!(report.backlog_seconds, 0);
    assert!(report.expired >= 20, "undecided requests ended: {}", report.table());
    let ran = |task: &str| {
        report
            .deliveries
            .get(task)
            .and_then(|a| a.get("ran: succeeded"))
            .copied()
            .unwrap_or(0)
    };
    for task in [
        "minutely",
        "hourly",
        "daily",
        "monthly",
        "tracker_daily",
        "one-time reminder",
    ] {
        assert!(ran(task) > 0, "{task} ran: {}", report.table());
    }
    let written: usize = report.deliveries.values().flat_map(|a| a.values()).sum();
    assert!(
        report.most_items < written,
        "the table holds what the retention keeps, not what the year wrote: {}",
        report.table()
    );
}
