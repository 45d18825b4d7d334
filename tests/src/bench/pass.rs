//! The daily pass per invocation (SPEC §13; ARCHITECTURE, "At internet
//! scale"): each page message of the pass is one invocation of the
//! reconcile worker, so its requests and time are what one invocation
//! costs, and the number of invocations is what the pass takes.
//!
//! - The installs' chain at 1,000 installed installs: every page, to the
//!   end, through the real `Reconciler::work` (each page one query of
//!   `gsi1` and a message per install, then the next page's message).
//! - The reminders' pass over 20,000 reminders: a few pages of one shard
//!   of `gsi3`, each worked twice: first with the schedules missing (every
//!   reminder put back: the repair), then again with them in step (the
//!   daily steady state: a schedule read each). The whole pass is not run
//!   (20,000 schedules on moto would take the bench's time); its
//!   invocation count is the shards' page counts, from the seeded ids.
//!
//! Counts come from the adapters' counters (`DynamoStore::requests`,
//! `EventBridgeSchedules::requests`) and the messages found queued after
//! each invocation; times are the wall time of the invocation on moto
//! (debug build, loopback), so read them as relative, not as AWS latency.

use std::collections::HashMap;
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use chrono::{DateTime, Duration, Utc};
use serde::Serialize;
use shared::adapters::dynamo::task_item;
use shared::adapters::keys::SchedulableKey;
use shared::app::reconcile::{PASS_PAGE, Pass, Work};
use shared::domain::run::definition::REMINDER_SHARDS;
use shared::domain::task::TaskId;
use shared::domain::task::install::InstallScope;

use crate::{TestReconciler, TestStack, install, reminder};

/// The installs the installs' chain is measured at.
pub const INSTALLS: usize = 1_000;
/// The reminders the reminders' pass is measured over.
pub const REMINDERS: usize = 20_000;
/// Pages of the reminders' pass measured (each twice: repair, in step).
pub const REMINDER_PAGES: usize = 3;

/// One kind of pass invocation, per invocation.
#[derive(Debug, Clone, Serialize)]
pub struct PassRow {
    pub pass: String,
    /// Items in the table the pass reads.
    pub items: usize,
    /// Invocations measured.
    pub measured: usize,
    /// Invocations the whole pass takes (measured, or counted from the
    /// seeded items where the pass is not run whole).
    pub invocations: usize,
    /// Per invocation, the mean over those measured.
    pub dynamodb: f64,
    pub scheduler: f64,
    pub sqs_messages: f64,
    pub ms_mean: f64,
    pub ms_max: f64,
    pub note: String,
}

/// An item's size by DynamoDB's sizing rules (attribute names and values;
/// a number as one byte per two significant digits plus one; lists and
/// maps 3 bytes plus one per element): what its writes are charged by.
pub fn item_bytes(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(name, value)| name.len() + value_bytes(value)).sum()
}

fn value_bytes(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => {
            let digits = n.trim_start_matches('-').replace('.', "");
            let significant = digits.trim_start_matches('0').trim_end_matches('0').len().max(1);
            significant.div_ceil(2) + 1
        }
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::L(list) => 3 + list.iter().map(|v| 1 + value_bytes(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value_bytes(v)).sum::<usize>(),
        AttributeValue::Ss(set) => set.iter().map(String::len).sum(),
        AttributeValue::Ns(set) => set.iter().map(|n| value_bytes(&AttributeValue::N(n.clone()))).sum(),
        _ => 0,
    }
}

/// What one invocation did.
struct Invocation {
    dynamodb: u64,
    scheduler: u64,
    queued: Vec<(String, String)>,
    ms: f64,
}

/// Works one page message as the FIFO worker would, and collects what it
/// queued.
async fn invoke(t: &TestStack, r: &TestReconciler, body: &str, now: DateTime<Utc>) -> anyhow::Result<Invocation> {
    let (dynamodb, scheduler) = (r.store().requests(), r.schedules().requests());
    let started = Instant::now();
    r.work(body, now).await?;
    let ms = started.elapsed().as_secs_f64() * 1e3;
    let (dynamodb, scheduler) = (r.store().requests() - dynamodb, r.schedules().requests() - scheduler);
    Ok(Invocation {
        dynamodb,
        scheduler,
        queued: t.take_work().await,
        ms,
    })
}

fn row(pass: &str, items: usize, invocations: usize, measured: &[Invocation], note: String) -> PassRow {
    let n = measured.len().max(1) as f64;
    let mean = |f: &dyn Fn(&Invocation) -> f64| measured.iter().map(f).sum::<f64>() / n;
    PassRow {
        pass: pass.to_owned(),
        items,
        measured: measured.len(),
        invocations,
        dynamodb: mean(&|i| i.dynamodb as f64),
        scheduler: mean(&|i| i.scheduler as f64),
        sqs_messages: mean(&|i| i.queued.len() as f64),
        ms_mean: mean(&|i| i.ms),
        ms_max: measured.iter().map(|i| i.ms).fold(0.0, f64::max),
        note,
    }
}

fn body(pass: Pass) -> String {
    serde_json::to_string(&Work::Pass(pass)).unwrap_or_default()
}

/// The next page message an invocation queued, if any.
fn next_page(queued: &[(String, String)], kind: &str) -> Option<String> {
    queued
        .iter()
        .find(|(_, body)| body.contains(&format!("\"{kind}\"")))
        .map(|(_, body)| body.clone())
}

/// The installs' chain at [`INSTALLS`] installed installs, every page.
async fn installs_chain() -> anyhow::Result<PassRow> {
    let t = TestStack::start().await?;
    let store = t.admin_store();
    for i in 0..INSTALLS {
        let mut one = install(
            &format!("ins_{i:05}"),
            "issues",
            "https://issues.example.com/mcp",
            InstallScope::Workspace,
        );
        one.workspace = format!("ws_{:03}", i % 200);
        store.put_install(&one).await?;
    }
    let r = t.reconciler();
    t.take_work().await;
    let now = Utc::now();
    let pass = now.timestamp_millis();
    let mut measured = Vec::new();
    let mut page = Some(body(Pass::Installs { pass, after: None }));
    let mut queued_installs = 0;
    while let Some(current) = page.take() {
        let done = invoke(&t, &r, &current, now).await?;
        queued_installs += done
            .queued
            .iter()
            .filter(|(_, b)| b.contains("\"reconcile.install\""))
            .count();
        page = next_page(&done.queued, "reconcile.installs");
        measured.push(done);
        anyhow::ensure!(measured.len() <= INSTALLS, "the installs' chain does not end");
    }
    anyhow::ensure!(
        queued_installs == INSTALLS,
        "the chain queued {queued_installs} install passes for {INSTALLS} installs"
    );
    let last_empty = measured.last().is_some_and(|i| i.queued.is_empty());
    let invocations = measured.len();
    Ok(row(
        "installs page (gsi1, a message per install)",
        INSTALLS,
        invocations,
        &measured,
        format!(
            "the whole chain: {invocations} invocations for {INSTALLS} installs in pages of {PASS_PAGE}{}",
            if last_empty {
                " (the last page read nothing: a full page always names a next one)"
            } else {
                ""
            }
        ),
    ))
}

/// Reminders as create stores them, written straight to the table, their
/// schedules missing; answers the items per `gsi3` shard and the size of
/// one task item.
async fn seed_reminders(t: &TestStack, n: usize) -> anyhow::Result<(Vec<usize>, usize)> {
    let dynamo = aws_sdk_dynamodb::Client::new(&t.aws.sdk);
    let at = Utc::now() + Duration::days(2);
    let mut shards = vec![0; usize::from(REMINDER_SHARDS)];
    let mut bytes = 0;
    let mut batch = Vec::with_capacity(25);
    for i in 0..n {
        let workspace = format!("ws_{:03}", i % 200);
        let principal = format!("usr_{}", i % 997);
        let mut task = reminder(at);
        task.task_id = TaskId::for_reminder(&workspace, &principal, &format!("k{i}"));
        task.workspace = workspace;
        task.provenance = shared::domain::task::Provenance::User { principal };
        // Due at its instant, as create sets it.
        shared::domain::operations::overdue::refresh_due(None, &mut task, Utc::now());
        shards[usize::from(SchedulableKey::shard_of(task.task_id.as_str()))] += 1;
        let item = task_item(&task)?;
        bytes = bytes.max(item_bytes(&item));
        batch.push(
            WriteRequest::builder()
                .put_request(PutRequest::builder().set_item(Some(item)).build()?)
                .build(),
        );
        if batch.len() == 25 || i + 1 == n {
            let out = dynamo
                .batch_write_item()
                .request_items(&t.stack.names.table, std::mem::take(&mut batch))
                .send()
                .await?;
            anyhow::ensure!(
                out.unprocessed_items().is_none_or(|u| u.is_empty()),
                "moto left items unprocessed"
            );
        }
    }
    Ok((shards, bytes))
}

/// A few pages of the reminders' pass over [`REMINDERS`], each worked with
/// the schedules missing and again in step.
async fn reminders_pages() -> anyhow::Result<Vec<PassRow>> {
    let t = TestStack::start().await?;
    let (shards, bytes) = seed_reminders(&t, REMINDERS).await?;
    // A full page always names a next page, so a shard of n items takes
    // n / 100 + 1 page messages (rounded down; an empty shard one).
    let invocations: usize = shards.iter().map(|n| n / PASS_PAGE + 1).sum();
    let r = t.reconciler();
    t.take_work().await;
    let now = Utc::now();
    let pass = now.timestamp_millis();
    let (mut repair, mut in_step) = (Vec::new(), Vec::new());
    let mut page = Some(body(Pass::Reminders {
        pass,
        shard: 0,
        after: None,
    }));
    for _ in 0..REMINDER_PAGES {
        let Some(current) = page.take() else { break };
        let first = invoke(&t, &r, &current, now).await?;
        let again = invoke(&t, &r, &current, now).await?;
        anyhow::ensure!(
            again.scheduler <= PASS_PAGE as u64,
            "a page in step put schedules back: {} Scheduler requests",
            again.scheduler
        );
        page = next_page(&first.queued, "reconcile.reminders");
        repair.push(first);
        in_step.push(again);
    }
    let spread = format!(
        "{} to {} reminders a shard",
        shards.iter().min().unwrap_or(&0),
        shards.iter().max().unwrap_or(&0)
    );
    Ok(vec![
        row(
            "reminders page, schedules in step (the daily case)",
            REMINDERS,
            invocations,
            &in_step,
            format!(
                "a query of one gsi3 shard and a GetSchedule per reminder; the whole pass: {invocations} invocations \
                 (16 shards, {spread}, pages of {PASS_PAGE}), counted, not run; a reminder item is {bytes} bytes"
            ),
        ),
        row(
            "reminders page, schedules missing (the repair)",
            REMINDERS,
            invocations,
            &repair,
            "each reminder's schedule read, put back (CreateSchedule) and its task read again".to_owned(),
        ),
    ])
}

/// Every pass row, in the order of docs/benchmarks.md's table.
pub async fn measure() -> anyhow::Result<Vec<PassRow>> {
    eprintln!("bench: the installs' chain at {INSTALLS} installs ...");
    let mut rows = vec![installs_chain().await?];
    eprintln!("bench: {REMINDER_PAGES} pages of the reminders' pass over {REMINDERS} reminders (seeding) ...");
    rows.extend(reminders_pages().await?);
    Ok(rows)
}
