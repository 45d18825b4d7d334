//! See `super`: attacks on what a run may do and spend, whatever a server
//! or a crash does (SPEC §7 "A re-run is visible to the server", "A crash
//! is paid for", "What a server sends is bounded", "Ceilings bind at run
//! time").

use chrono::{DateTime, Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::{MAX_TEXT_CHARS, MAX_TOOLS, MAX_TOOLS_READ};
use shared::app::run::Disposition;
use shared::domain::run::agent::RUN_ID_META;
use shared::domain::run::occurrence::{occurrence_key, run_id};
use shared::domain::schedule::{RateUnit, Schedule};
use shared::domain::task::Task;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;
use shared::domain::task::limits::{Ceilings, Limits};
use shared::ports::{RunStore, Settled, Settlement, StoreError};
use tests::intercept::{Intercepted, RunStoreHook};
use tests::{RunStack, connector_task, deadline, install, run_message, run_settings};

const KB: usize = 1024;
const MB: usize = 1024 * 1024;

/// Settles that fail while `fails` says so: a process that dies before its
/// record, or a record that cannot be written.
struct FailingSettle {
    fails: fn(&Settlement<'_>) -> bool,
    rejects: bool,
}

impl RunStoreHook<DynamoStore> for FailingSettle {
    async fn settle(&self, inner: &DynamoStore, s: &Settlement<'_>) -> Result<Settled, StoreError> {
        if (self.fails)(s) {
            // A record the store refuses (as DynamoDB refuses an item over
            // 400 KB) when it has an output; otherwise the process dies at
            // its settle: it never answers (see `crashes`).
            if s.record.output.is_some() && self.rejects {
                return Err(StoreError::Rejected {
                    operation: "TransactWriteItems",
                    source: "injected: the settle failed".into(),
                });
            }
            return std::future::pending().await;
        }
        inner.settle(s).await
    }
}

/// The fixture as `issues` (install `ins_1`), with `state` for its tools.
async fn server(s: &RunStack, state: FixtureState) -> McpFixture {
    let mut state = state;
    if state.prompts.is_empty() {
        state.prompts = vec![scheduled_prompt(
            "weekly",
            json!({"version": 1}),
            &[],
            "Do the weekly work.",
        )];
    }
    let fixture = McpFixture::start(state).await.unwrap();
    s.store()
        .put_install(&install("ins_1", "issues", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    fixture
}

fn month(at: DateTime<Utc>) -> String {
    at.format("%Y-%m").to_string()
}

fn approx(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_a_side_effect_is_paid_for_and_the_rerun_carries_the_same_run_id() {
    let s = RunStack::start().await.unwrap();
    let fixture = server(
        &s,
        FixtureState {
            tools: vec![tool("post_summary")],
            ..Default::default()
        },
    )
    .await;
    let task = connector_task("issues", "weekly", &["post_summary"], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    let reply = || {
        [
            Reply::tool("issues__post_summary", json!({"text": "summary"}), 1000, 100),
            Reply::text("Posted.", 1000, 100),
        ]
    };
    s.model.script(reply().into_iter().chain(reply())).await;

    // The first attempt posts, then dies before its settle.
    let crashing = s.runner_on(
        Intercepted::new(
            s.store(),
            FailingSettle {
                fails: |_| true,
                rejects: false,
            },
        ),
        run_settings(true),
    );
    let first_deadline = deadline();
    assert!(tests::crashes(crashing.deliver("m1", &run_message(&task, at, "e1"), Utc::now(), first_deadline)).await);
    let reserve = 0.25;
    let item = s.task_item(&task).await;
    assert!(approx(item["budget_used"][month(at)].as_f64().unwrap(), reserve));

    // After its lease, a redelivery takes it over and runs it again.
    let later = first_deadline + Duration::minutes(2);
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e2"), later, deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let state = fixture.state().read().await;
    assert_eq!(state.calls.len(), 2, "the side effect was tried twice");
    let want = json!(run_id(task.task_id.as_str(), at));
    let seen: Vec<Option<&serde_json::Value>> = state
        .call_metas
        .iter()
        .map(|m| m.as_ref().and_then(|m| m.get(RUN_ID_META)))
        .collect();
    assert_eq!(seen, vec![Some(&want), Some(&want)], "with one run id");
    drop(state);

    let actual = 1000.0 * 2.0 * 3.0 / 1e6 + 100.0 * 2.0 * 15.0 / 1e6;
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["attempts"], 2);
    assert!(
        approx(record["cost_usd"].as_f64().unwrap(), actual + reserve),
        "{record}"
    );
    let item = s.task_item(&task).await;
    assert!(
        approx(item["budget_used"][month(at)].as_f64().unwrap(), actual + reserve),
        "the crashed reservation is spent, the second settled to its cost: {item}"
    );
    assert_eq!(item["claims"][occurrence_key(at)]["status"], "succeeded");
    let account = s
        .account(
            &shared::domain::task::budget::Account::Install("acct_ins_1".into()),
            &month(at),
        )
        .await
        .unwrap();
    assert!(
        approx(account["spent_usd"].as_f64().unwrap(), actual + reserve),
        "{account}"
    );
    assert_eq!(account["runs"], 1);
    assert_eq!(s.events().await.len(), 1, "one settled run, one event");
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_server_answers_are_bounded_before_the_model_and_the_record() {
    let s = RunStack::start().await.unwrap();
    // 10,000 tools, the approved ones first and far past the cap (within
    // the read bound): the approved filter is applied while reading.
    let mut tools = vec![tool("dump")];
    tools.extend((0..10_000).map(|i| tool(&format!("t{i}"))));
    let huge = "x".repeat(MB);
    let fixture = server(
        &s,
        FixtureState {
            tools,
            tool_answers: [(
                "dump".to_owned(),
                CallToolResult::success(vec![ContentBlock::text(huge.clone())]),
            )]
            .into(),
            ..Default::default()
        },
    )
    .await;
    let task = connector_task("issues", "weekly", &["dump", "t9999"], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    s.model
        .script([
            Reply::tool("issues__dump", json!({}), 100, 10),
            Reply::text(&"y".repeat(MB), 100, 10),
        ])
        .await;
    let got = s.deliver_once(&task, at).await;
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(fixture.state().read().await.calls.len(), 1);
    let requests = s.model.requests().await;
    let offered: Vec<&str> = requests[0].1["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        offered,
        vec!["issues__dump", "issues__t9999"],
        "t9999 is past the first {MAX_TOOLS} tools yet approved and within {MAX_TOOLS_READ} read"
    );
    let result = requests[1].1["messages"][2]["content"][0]["toolResult"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(result.chars().count(), MAX_TEXT_CHARS, "the 1 MB result is cut");
    assert!(requests[1].1.to_string().len() < 100 * KB);
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert!(record.to_string().len() < 16 * KB, "the record is small");
    assert!(s.task_item(&task).await.to_string().len() < 16 * KB);
    assert!(s.model.refused().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_tool_listed_on_a_late_page_past_the_cap_is_offered() {
    let s = RunStack::start().await.unwrap();
    // 300 tools over pages of 40; the approved `late` is the 300th, past
    // the first MAX_TOOLS, and the unapproved ones are not offered.
    let mut tools: Vec<_> = (0..299).map(|i| tool(&format!("t{i}"))).collect();
    tools.push(tool("late"));
    assert!(tools.len() > MAX_TOOLS);
    let _fixture = server(
        &s,
        FixtureState {
            tools,
            page_size: 40,
            ..Default::default()
        },
    )
    .await;
    let task = connector_task("issues", "weekly", &["t1", "late"], &[]);
    s.store().insert_task(&task).await.unwrap();
    let at = Utc::now() - Duration::seconds(5);
    s.model.script([Reply::text("done", 10, 10)]).await;
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let requests = s.model.requests().await;
    let offered: Vec<&str> = requests[0].1["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, vec!["issues__t1", "issues__late"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_megabyte_error_from_a_server_is_cut_and_the_run_still_settles() {
    let s = RunStack::start().await.unwrap();
    // The server's error names its missing argument: a megabyte of name.
    let name = "a".repeat(MB);
    let prompts = vec![scheduled_prompt("weekly", json!({"version": 1}), &[(&name, true)], "x")];
    let _fixture = server(
        &s,
        FixtureState {
            prompts,
            ..Default::default()
        },
    )
    .await;
    let task = connector_task("issues", "weekly", &[], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    let record = s.run_to(&task, at, RunStatus::Failed).await;
    let reason = record["reason"].as_str().unwrap();
    assert!(reason.contains("-32602"), "{reason}");
    assert!(reason.chars().count() <= shared::domain::run::occurrence::MAX_REASON_CHARS);
    let item = s.task_item(&task).await;
    assert_eq!(
        item["claims"][occurrence_key(at)]["status"],
        "failed",
        "not left running"
    );
    assert!(
        approx(item["budget_used"][month(at)].as_f64().unwrap(), 0.0),
        "nothing held"
    );
    assert!(s.model.requests().await.is_empty(), "the model never saw it");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lowered_ceiling_brakes_an_approved_task_at_its_next_run() {
    let s = RunStack::start().await.unwrap();
    let fixture = server(
        &s,
        FixtureState {
            tools: vec![tool("post_summary")],
            ..Default::default()
        },
    )
    .await;
    let task = connector_task("issues", "weekly", &["post_summary"], &[]);
    assert_eq!(task.spec.limits.max_tool_calls, 3, "approved for three calls");
    s.insert(&task).await;
    let spec_before = s.task_item(&task).await["spec"].clone();
    s.model
        .script([
            Reply::tool("issues__post_summary", json!({}), 100, 10),
            Reply::tool("issues__post_summary", json!({}), 100, 10),
            Reply::text("done", 100, 10),
        ])
        .await;
    let mut settings = run_settings(true);
    settings.ceilings = Ceilings::new(Limits {
        max_tool_calls: 1,
        ..tests::CEILINGS
    })
    .unwrap();
    let at = Utc::now() - Duration::seconds(5);
    let got = s
        .runner_on(s.store(), settings)
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Failed));
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["reason"], "tool call limit of 1 reached");
    assert_eq!(
        fixture.state().read().await.calls.len(),
        1,
        "the second call never happened"
    );
    assert_eq!(
        s.task_item(&task).await["spec"],
        spec_before,
        "the approval is untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_settle_that_keeps_failing_leaves_no_claim_running_and_no_reservation_held() {
    let s = RunStack::start().await.unwrap();
    let _fixture = server(&s, FixtureState::default()).await;
    let task = connector_task("issues", "weekly", &[], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    s.model.script([Reply::text("the digest", 1000, 100)]).await;
    // Every settle with the run's output fails (a record that cannot be written).
    let runner = s.runner_on(
        Intercepted::new(
            s.store(),
            FailingSettle {
                fails: |s| s.record.output.is_some(),
                rejects: true,
            },
        ),
        run_settings(true),
    );
    let got = runner
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Failed));
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert!(record.get("output").is_none());
    assert!(
        record["reason"].as_str().unwrap().contains("could not be recorded"),
        "{record}"
    );
    let cost = 1000.0 * 3.0 / 1e6 + 100.0 * 15.0 / 1e6;
    let item = s.task_item(&task).await;
    assert_eq!(item["claims"][occurrence_key(at)]["status"], "failed");
    assert!(
        approx(item["budget_used"][month(at)].as_f64().unwrap(), cost),
        "settled to the cost, the reservation released: {item}"
    );
    let account = s
        .account(
            &shared::domain::task::budget::Account::Install("acct_ins_1".into()),
            &month(at),
        )
        .await
        .unwrap();
    assert!(approx(account["spent_usd"].as_f64().unwrap(), cost));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_minute_task_over_thirty_days_keeps_its_item_small() {
    let s = RunStack::start().await.unwrap();
    let _fixture = server(&s, FixtureState::default()).await;
    let mut task: Task = connector_task("issues", "weekly", &[], &[]);
    task.spec.schedule = Schedule::Rate {
        every: 1,
        unit: RateUnit::Minutes,
    };
    task.spec.budget = None;
    s.insert(&task).await;
    // Thirty days of a rate(1 minute) task, compressed: an occurrence every
    // twelve hours, some crashing before their settle (left running, never
    // delivered again), then eighty minutes of every minute at the end.
    let start = Utc::now() + Duration::days(1);
    let mut occurrences: Vec<DateTime<Utc>> = (0..60).map(|i| start + Duration::hours(12 * i)).collect();
    let end = start + Duration::days(30);
    occurrences.extend((0..80).map(|m| end + Duration::minutes(m)));
    let last = end + Duration::minutes(79);
    let crash = s.runner_on(
        Intercepted::new(
            s.store(),
            FailingSettle {
                fails: |_| true,
                rejects: false,
            },
        ),
        run_settings(true),
    );
    let runner = s.runner();
    for (i, at) in occurrences.iter().enumerate() {
        let body = run_message(&task, *at, &format!("e{i}"));
        let now = *at + Duration::seconds(1);
        if i % 10 == 5 {
            assert!(tests::crashes(crash.deliver("m", &body, now, deadline())).await);
        } else {
            let got = runner.deliver("m", &body, now, deadline()).await.unwrap();
            assert_eq!(got, Disposition::Ran(RunStatus::Succeeded), "occurrence {i}");
        }
    }
    let item = s.task_item(&task).await;
    let claims = item["claims"].as_object().unwrap();
    let retention = shared::domain::run::occurrence::claim_retention(Duration::seconds(3600));
    let window = (retention.num_minutes() + 2) as usize;
    assert!(claims.len() <= window, "{} claims kept, at most {window}", claims.len());
    let retained = |occurrence: &String| {
        let t = DateTime::parse_from_rfc3339(occurrence).unwrap().with_timezone(&Utc);
        last + Duration::seconds(1) - t <= retention
    };
    assert!(
        claims
            .iter()
            .all(|(occurrence, c)| c["status"] != "running" || retained(occurrence)),
        "crashed claims past the window are pruned: {claims:?}"
    );
    assert!(claims.keys().all(retained), "only the window's claims are kept");
    let size = item.to_string().len();
    assert!(size < 100 * KB, "the task item is {size} bytes");
}

/// A need bound to the declaring install itself (stored before the rule, and
/// before a reconcile pass could hold the task) lends nothing at run time:
/// the model is offered the approved tools only, never the rest of the
/// declaring server's.
#[tokio::test(flavor = "multi_thread")]
async fn a_stored_binding_to_the_declaring_install_offers_no_unapproved_tool() {
    let s = RunStack::start().await.unwrap();
    let _fixture = server(
        &s,
        FixtureState {
            tools: vec![tool("post_summary"), tool("delete_repo")],
            ..Default::default()
        },
    )
    .await;
    let mut task = connector_task("issues", "weekly", &["post_summary"], &[]);
    task.spec.needs = [("summary_channel".to_owned(), "a channel".to_owned())].into();
    task.spec.bindings = [("summary_channel".to_owned(), Some("ins_1".to_owned()))].into();
    s.insert(&task).await;
    s.model.script([Reply::text("done", 100, 10)]).await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s.deliver_once(&task, at).await;
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let requests = s.model.requests().await;
    let offered: Vec<String> = requests[0].1["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["toolSpec"]["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(offered, vec!["issues__post_summary".to_owned()]);
}
