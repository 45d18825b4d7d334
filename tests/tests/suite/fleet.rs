//! A fleet at production size (SPEC §13): the daily pass and the pass at
//! deploy only queue work, and each page message reads one page through an
//! index, never the table, so no invocation's work grows with the table.

use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use chrono::{Duration, Utc};
use shared::adapters::dynamo::task_item;
use shared::app::reconcile::PASS_PAGE;
use shared::domain::task::TaskId;
use tests::{TestStack, reminder};

/// Reminders as create stores them, written straight to the table (their
/// schedules are missing: the pass puts back what it reads).
async fn seed_reminders(t: &TestStack, n: usize) {
    let dynamo = aws_sdk_dynamodb::Client::new(&t.aws.sdk);
    let at = Utc::now() + Duration::days(2);
    let items: Vec<WriteRequest> = (0..n)
        .map(|i| {
            let mut task = reminder(at);
            task.task_id = TaskId::for_reminder("ws_fleet", &format!("usr_{}", i % 97), &format!("k{i}"));
            task.workspace = "ws_fleet".into();
            // Due at its instant, as create sets it.
            shared::domain::operations::overdue::refresh_due(None, &mut task, Utc::now());
            let put = PutRequest::builder()
                .set_item(Some(task_item(&task).unwrap()))
                .build()
                .unwrap();
            WriteRequest::builder().put_request(put).build()
        })
        .collect();
    for chunk in items.chunks(25) {
        let out = dynamo
            .batch_write_item()
            .request_items(&t.stack.names.table, chunk.to_vec())
            .send()
            .await
            .unwrap();
        assert!(out.unprocessed_items().is_none_or(|u| u.is_empty()));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn one_pass_invocation_reads_one_page_whatever_the_table_holds() {
    const N: usize = 5_000;
    let t = TestStack::start().await.unwrap();
    seed_reminders(&t, N).await;
    let r = t.reconciler();
    t.take_work().await;
    let now = Utc::now();

    // The daily pass (and the pass at deploy) only queues its first pages.
    let (dynamo, scheduler) = (r.store().requests(), r.schedules().requests());
    assert_eq!(r.reconcile_all(now).await.unwrap(), 1 + 16);
    assert_eq!(
        r.store().requests(),
        dynamo,
        "no DynamoDB request, whatever the table holds"
    );
    assert_eq!(r.schedules().requests(), scheduler);
    let first = t.take_work().await;
    assert_eq!(first.len(), 1 + 16, "the installs' first page and each shard's");

    // A page of reminders: one query of one shard through the index, and
    // for each of at most PASS_PAGE reminders a schedule read, a put and
    // the task's read after it; then its next page is queued.
    let reminders = first
        .iter()
        .find(|(_, body)| body.contains("reconcile.reminders") && body.contains("\"shard\":0"))
        .unwrap();
    assert_eq!(
        reminders.0, "pass/reminders/00",
        "each shard's pages in their own group"
    );
    let (dynamo, scheduler) = (r.store().requests(), r.schedules().requests());
    r.work(&reminders.1, now).await.unwrap();
    let read = r.store().requests() - dynamo;
    let scheduled = r.schedules().requests() - scheduler;
    assert_eq!(
        read,
        1 + PASS_PAGE as u64,
        "one page query, one read per schedule put back: bounded by the page, not by {N}"
    );
    assert!(scheduled <= 3 * PASS_PAGE as u64, "{scheduled} Scheduler calls");
    let next = t.take_work().await;
    assert_eq!(next.len(), 1);
    assert!(
        next[0].1.contains("\"after\""),
        "shard 0 holds more than a page: {next:?}"
    );
    let shard: u8 = serde_json::from_str::<serde_json::Value>(&next[0].1).unwrap()["shard"]
        .as_u64()
        .unwrap() as u8;
    assert_eq!(shard, 0);

    // The installs' page is one query, whatever the table holds.
    let installs = first
        .iter()
        .find(|(_, body)| body.contains("reconcile.installs"))
        .unwrap();
    let dynamo = r.store().requests();
    r.work(&installs.1, now).await.unwrap();
    assert_eq!(r.store().requests() - dynamo, 1);
}

fn marker() -> serde_json::Value {
    serde_json::json!({"version": 1,
        "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
        "tools": ["list_issues"],
        "limits": {"max_turns": 4, "max_tool_calls": 4, "max_output_tokens": 1000, "timeout_seconds": 60},
        "budget": {"max_usd_per_run": 0.1, "max_usd_per_month": 2.0}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_declaring_too_many_and_too_large_prompts_is_bounded_and_told_why() {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
    use shared::domain::connector::reconcile::{MAX_REFUSAL_CHARS, MAX_SCHEDULED_PROMPTS};
    let t = TestStack::start().await.unwrap();
    let mut prompts: Vec<_> = (0..150)
        .map(|i| scheduled_prompt(&format!("p{i:03}"), marker(), &[], "Report."))
        .collect();
    let mut huge = marker();
    huge["needs"] = serde_json::json!([{"id": "channel", "description": "x".repeat(500_000)}]);
    prompts.push(scheduled_prompt("a_huge", huge, &[], "Huge."));
    prompts.push(scheduled_prompt(&"n".repeat(200), marker(), &[], "Long."));
    let fixture = McpFixture::start(FixtureState {
        prompts,
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    let summary = t
        .reconciler()
        .apply(
            &tests::installed("ins_1", "issues", &fixture.url(), "workspace"),
            Utc::now(),
        )
        .await
        .unwrap();

    // By name: `a_huge` (refused: too large) and `nnn…` (refused: a name
    // over 128 characters) are the first two marked prompts, p000..p097 the
    // next 98, and the rest (p098..p149) are past the bound: refused and
    // named on the install.
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), MAX_SCHEDULED_PROMPTS - 2);
    assert!(tasks.iter().all(|t| t["title"].as_str().unwrap() < "p098"));
    let install = t
        .item_at(shared::adapters::keys::Key::install("ws_1", "ins_1"))
        .await
        .unwrap();
    let errors = install["declaration_errors"].as_object().unwrap();
    assert!(
        errors["a_huge"].as_str().unwrap().contains("at most 16384"),
        "{}",
        errors["a_huge"]
    );
    assert!(
        errors["p149"]
            .as_str()
            .unwrap()
            .contains("more than 100 scheduled prompts")
    );
    let long = format!("{}…", "n".repeat(127));
    assert!(
        errors[&long].as_str().unwrap().contains("longer than 128"),
        "{errors:?}"
    );
    assert_eq!(errors.len(), 150 + 2 - (MAX_SCHEDULED_PROMPTS - 2));
    assert_eq!(summary.refused.len(), errors.len());
    assert!(errors.iter().all(|(name, reason)| {
        name.chars().count() <= 128 && reason.as_str().unwrap().chars().count() <= MAX_REFUSAL_CHARS
    }));
    let size = serde_json::to_string(&install).unwrap().len();
    assert!(size < 64 * 1024, "the install item stays far from 400 KB: {size} bytes");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declaration_may_name_any_tool_of_the_full_tools_list() {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
    let t = TestStack::start().await.unwrap();
    let mut late = marker();
    late["tools"] = serde_json::json!(["t149"]);
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("late_tool", late, &[], "Use the last tool.")],
        tools: (0..150).map(|i| tool(&format!("t{i:03}"))).collect(),
        page_size: 40,
        ..Default::default()
    })
    .await
    .unwrap();
    let summary = t
        .reconciler()
        .apply(
            &tests::installed("ins_1", "issues", &fixture.url(), "workspace"),
            Utc::now(),
        )
        .await
        .unwrap();
    assert!(summary.refused.is_empty(), "{:?}", summary.refused);
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["spec"]["tools"], serde_json::json!(["t149"]));
}
