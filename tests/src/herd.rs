//! The herd: thousands of connector tasks due in the same minute against a
//! model quota counted per minute (`infra/scripts/herd.sh`, and a small
//! fixed slice in `tests/suite/herd.rs`).
//!
//! What runs is the real runner use case (`app::run::Runner::deliver`) on
//! the real adapters: DynamoDB, SQS and the account through moto (behind
//! `moto_serial.py`, as the stack runs it), `prompts/get` on the project's
//! rmcp fixture server, `Converse` on the strict stand-in throttling above
//! R requests per minute, the runner pacing its model requests at P a
//! minute (`domain::run::pace`, its slots on the table; P = R unless told, 0 for
//! no pace). `concurrency` pollers each take a batch of
//! `batch` records, deliver them concurrently and acknowledge or return
//! them as the runner's handler does (a returned record's visibility
//! shortened as `app::run::Disposition::comes_back` says through the real
//! `adapters::redelivery::Returns`), like Lambda's SQS poller under
//! `ScalingConfig.MaximumConcurrency` (the template: 20 pollers of 5).
//!
//! **The clock is compressed** by `compression` (simulated seconds per real
//! second; 60 by default: a minute of model quota passes in one real
//! second). Compressed: the stand-in's quota window (60 s / compression),
//! the pace's window (the same), SQS's clock (moved forward so a returned record's 30-600 s visibility
//! passes in 30-600 / compression real seconds), the catch-up window the
//! door applies (3600 s / compression) and the time a run may wait for the
//! model (its 60 s limit / compression, after the runner's 10 s settle
//! reserve, which stays real). Not compressed: the runner's backoff between
//! throttled calls (200 ms doubling to 4 s, constants of the runner), so a
//! run retries fewer times per simulated minute than on AWS; the figures
//! err on the slow side. Times are reported real and simulated.
//!
//! Every task's prompt offers no tools, so a run is one model request and
//! the ideal drain time is exactly N / R minutes. Every `duplicate_every`-th
//! occurrence is delivered twice (Scheduler delivers at least once).
//!
//! **Two tenants** (`reminders` > 0): beside the herd of workspace `ws_1`,
//! another workspace, `ws_2`, has that many one-time reminders due at the
//! same instant, their messages sent after all of the herd's (last in a
//! queue that hands out in order). Each must run within its catch-up
//! window (the reminders' lane of the pace, `domain::run::pace`); the ideal
//! drain is then (N + reminders) / R.
//!
//! Checked from the table and the stand-in afterwards, not from what the
//! pollers saw: every task has one run record, succeeded; none failed; no
//! task got two model answers (a run run twice); each task's committed
//! budget is its run's cost and the account was charged once per run;
//! every run started within the catch-up window; no claim is left running.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration as StdDuration, Instant};

use aws_sdk_sqs::types::{MessageSystemAttributeName, SendMessageBatchRequestEntry};
use chrono::{DateTime, Duration, SubsecRound, Utc};
use local::converse::Window;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::adapters::redelivery::Returns;
use shared::app::run::{Disposition, RunSettings, SETTLE_RESERVE_SECONDS};
use shared::domain::run::pace::Pace;
use shared::domain::run::redelivery::return_delay;
use shared::domain::task::install::InstallScope;
use tokio::sync::Mutex;

use crate::{RunStack, connector_task, install, run_message};

/// The catch-up window the template deploys with, in simulated seconds.
pub const CATCH_UP_SECONDS: i64 = 3600;
/// How long an idle poller waits before it polls again (real time): short
/// against a compressed minute, long enough to leave the CPU to the runs.
const IDLE_POLL: StdDuration = StdDuration::from_millis(200);
/// How often (real time) a line of progress goes to stderr.
const PROGRESS_EVERY: StdDuration = StdDuration::from_secs(30);
/// The template's runner timeout, in simulated seconds.
pub const INVOCATION_SECONDS: i64 = 360;

#[derive(Debug, Clone)]
pub struct HerdConfig {
    /// Connector tasks, all due at the same instant.
    pub tasks: usize,
    /// The model quota: requests per (simulated) minute.
    pub rpm: usize,
    /// Simulated seconds per real second.
    pub compression: u32,
    /// Pollers at once (`MaximumConcurrency`).
    pub concurrency: usize,
    /// Records per invocation (`BatchSize`).
    pub batch: usize,
    /// Every n-th occurrence is delivered twice; 0 for none.
    pub duplicate_every: usize,
    /// The runner's model pace, requests per (simulated) minute; `None`:
    /// at the quota, `Some(0)`: no pace.
    pub pace: Option<usize>,
    /// Another workspace's one-time reminders due at the same instant.
    pub reminders: usize,
}

impl HerdConfig {
    /// The runner's pace in requests per simulated minute; 0 for none.
    pub fn pace_rpm(&self) -> usize {
        self.pace.unwrap_or(self.rpm)
    }
}

impl Default for HerdConfig {
    fn default() -> Self {
        Self {
            tasks: 2000,
            rpm: 200,
            compression: 60,
            concurrency: 20,
            batch: 5,
            duplicate_every: 10,
            pace: None,
            reminders: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct HerdReport {
    pub config: Option<HerdConfig>,
    /// From the first delivery to the last settle, real.
    pub drain_real: StdDuration,
    pub succeeded: usize,
    /// Failed runs by reason.
    pub failed: BTreeMap<String, usize>,
    /// Skipped occurrences by reason (`missed` among them).
    pub skipped: BTreeMap<String, usize>,
    /// Tasks with no run record at the end.
    pub unrecorded: usize,
    /// Deliveries returned to the queue (throttled before any tool, turned
    /// away by the pace, busy, errors).
    pub returned: usize,
    /// Of those, turned away by the pace before any model call.
    pub paced: usize,
    /// Of those, returned by a delivery error.
    pub errors: usize,
    /// Duplicate deliveries sent, and absorbed (acknowledged doing nothing).
    pub duplicates_sent: usize,
    pub duplicates_absorbed: usize,
    /// Tasks that got more than one model answer.
    pub run_twice: usize,
    /// Model requests answered, and throttled.
    pub model_answered: usize,
    pub model_throttled: usize,
    /// Tasks whose committed budget is not their run's cost, and the
    /// account's charges against the runs recorded.
    pub misaccounted: usize,
    pub account_runs: i64,
    pub account_spent: f64,
    pub runs_cost: f64,
    /// Claims still `running` at the end.
    pub claims_left: usize,
    /// The latest start after the scheduled time, simulated seconds.
    pub latest_start_sim: f64,
    /// Of those, the other workspace's reminders: succeeded, and the
    /// latest start among them.
    pub reminders_succeeded: usize,
    pub reminders_latest_start_sim: f64,
}

impl HerdReport {
    fn config(&self) -> HerdConfig {
        self.config.clone().unwrap_or_default()
    }

    /// Simulated minutes from the due instant to the last settle.
    pub fn drain_sim_minutes(&self) -> f64 {
        self.drain_real.as_secs_f64() * f64::from(self.config().compression) / 60.0
    }

    /// (N + reminders) / R: the model quota's floor on the drain, in minutes.
    pub fn ideal_minutes(&self) -> f64 {
        let c = self.config();
        (c.tasks + c.reminders) as f64 / c.rpm.max(1) as f64
    }

    /// The drain over the ideal.
    pub fn drain_ratio(&self) -> f64 {
        self.drain_sim_minutes() / self.ideal_minutes().max(f64::MIN_POSITIVE)
    }

    /// Throttled model requests per answered one.
    pub fn throttled_per_answer(&self) -> f64 {
        self.model_throttled as f64 / self.model_answered.max(1) as f64
    }

    pub fn missed(&self) -> usize {
        self.skipped.get("missed").copied().unwrap_or_default() + self.unrecorded
    }

    /// What must hold; empty when all does.
    pub fn violations(&self) -> Vec<String> {
        let c = self.config();
        let mut out = Vec::new();
        let all = c.tasks + c.reminders;
        if self.succeeded != all {
            out.push(format!("{} of {all} runs succeeded", self.succeeded));
        }
        if self.reminders_succeeded != c.reminders {
            out.push(format!(
                "{} of the other workspace's {} reminders succeeded",
                self.reminders_succeeded, c.reminders
            ));
        }
        if !self.failed.is_empty() {
            out.push(format!("runs failed: {:?}", self.failed));
        }
        if !self.skipped.is_empty() {
            out.push(format!("occurrences skipped: {:?}", self.skipped));
        }
        if self.missed() > 0 {
            out.push(format!("{} occurrences missed", self.missed()));
        }
        if self.run_twice > 0 {
            out.push(format!("{} tasks ran twice", self.run_twice));
        }
        if self.model_answered != self.succeeded {
            out.push(format!(
                "{} model answers for {} runs of one request each",
                self.model_answered, self.succeeded
            ));
        }
        if c.pace_rpm() > 0 && self.model_throttled > self.model_answered {
            out.push(format!(
                "{} throttled model requests for {} answered: more than one each, under a pace",
                self.model_throttled, self.model_answered
            ));
        }
        if self.duplicates_absorbed < self.duplicates_sent {
            out.push(format!(
                "{} of {} duplicate deliveries absorbed",
                self.duplicates_absorbed, self.duplicates_sent
            ));
        }
        if self.misaccounted > 0 {
            out.push(format!(
                "{} tasks' budgets differ from their runs' cost",
                self.misaccounted
            ));
        }
        let recorded_runs = (self.succeeded + self.failed.values().sum::<usize>()) as i64;
        if self.account_runs != recorded_runs || (self.account_spent - self.runs_cost).abs() > 1e-6 {
            out.push(format!(
                "the account was charged {} runs, ${:.6}, for {} runs costing ${:.6}",
                self.account_runs, self.account_spent, recorded_runs, self.runs_cost
            ));
        }
        if self.claims_left > 0 {
            out.push(format!("{} claims left running", self.claims_left));
        }
        if self.latest_start_sim > CATCH_UP_SECONDS as f64 {
            out.push(format!(
                "a run started {:.0} s (simulated) after its time, past the catch-up window",
                self.latest_start_sim
            ));
        }
        out
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let c = self.config();
        let failed: usize = self.failed.values().sum();
        let by = |m: &BTreeMap<String, usize>| {
            if m.is_empty() {
                "-".to_owned()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let rows = [
            ("tasks due at one instant", c.tasks.to_string()),
            ("another workspace's reminders, same instant", c.reminders.to_string()),
            ("model quota R (requests per minute)", c.rpm.to_string()),
            (
                "runner's model pace (requests per minute)",
                match c.pace_rpm() {
                    0 => "none".to_owned(),
                    p => p.to_string(),
                },
            ),
            (
                "clock compression",
                format!(
                    "{}x (a simulated minute = {:.2} s real)",
                    c.compression,
                    60.0 / f64::from(c.compression)
                ),
            ),
            ("pollers x batch", format!("{} x {}", c.concurrency, c.batch)),
            (
                "drain time, simulated (real)",
                format!(
                    "{:.1} min ({:.1} s)",
                    self.drain_sim_minutes(),
                    self.drain_real.as_secs_f64()
                ),
            ),
            ("ideal (N + reminders) / R", format!("{:.1} min", self.ideal_minutes())),
            ("drain / ideal", format!("{:.2}", self.drain_ratio())),
            (
                "latest start after due, simulated",
                format!(
                    "{:.1} min (catch-up {} min)",
                    self.latest_start_sim / 60.0,
                    CATCH_UP_SECONDS / 60
                ),
            ),
            (
                "reminders' latest start after due, simulated",
                format!("{:.1} min", self.reminders_latest_start_sim / 60.0),
            ),
            ("runs succeeded", self.succeeded.to_string()),
            ("reminders succeeded", self.reminders_succeeded.to_string()),
            ("runs failed", format!("{failed} ({})", by(&self.failed))),
            ("occurrences skipped", by(&self.skipped)),
            (
                "returned and retried",
                format!(
                    "{} ({} by the pace, {} by errors)",
                    self.returned, self.paced, self.errors
                ),
            ),
            (
                "model requests answered / throttled",
                format!("{} / {}", self.model_answered, self.model_throttled),
            ),
            (
                "throttled per answered request",
                format!("{:.3}", self.throttled_per_answer()),
            ),
            (
                "duplicates absorbed",
                format!("{} of {} sent", self.duplicates_absorbed, self.duplicates_sent),
            ),
            ("runs run twice (must be 0)", self.run_twice.to_string()),
            ("occurrences missed (must be 0)", self.missed().to_string()),
            ("misaccounted tasks (must be 0)", self.misaccounted.to_string()),
        ];
        let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or_default();
        let mut out = String::new();
        for (k, v) in rows {
            out.push_str(&format!("| {k:<width$} | {v} |\n"));
        }
        out
    }
}

/// What the pollers saw.
#[derive(Default)]
struct Seen {
    returned: usize,
    paced: usize,
    errors: usize,
    duplicates: usize,
    settled: usize,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// Runs the herd and reports; the caller checks [`HerdReport::violations`].
pub async fn run(config: HerdConfig) -> anyhow::Result<HerdReport> {
    anyhow::ensure!(config.tasks > 0 && config.rpm > 0, "tasks and rpm must be positive");
    anyhow::ensure!(config.compression >= 1, "compression must be at least 1");
    let compression = f64::from(config.compression);
    let s = RunStack::start().await?;
    let prompts = (0..config.tasks)
        .map(|i| {
            let name = format!("herd_{i:05}");
            let template = format!("Summarise the open issues ({name}).");
            scheduled_prompt(&name, json!({"version": 1}), &[], &template)
        })
        .collect();
    let fixture = McpFixture::start(FixtureState {
        prompts,
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await?;
    let store = s.store();
    store
        .put_install(&install("ins_1", "issues", &fixture.url(), InstallScope::Workspace))
        .await?;
    let due: DateTime<Utc> = Utc::now().trunc_subsecs(0);
    let mut tasks: Vec<_> = (0..config.tasks)
        .map(|i| connector_task("issues", &format!("herd_{i:05}"), &[], &[]))
        .collect();
    tasks.extend((0..config.reminders).map(|i| other_workspaces_reminder(i, due)));
    {
        use futures::StreamExt;
        let results: Vec<_> = futures::stream::iter(tasks.iter().map(|t| store.insert_task(t)))
            .buffer_unordered(8)
            .collect()
            .await;
        for r in results {
            r?;
        }
    }

    let catch_up = Duration::milliseconds((CATCH_UP_SECONDS as f64 * 1000.0 / compression) as i64);
    let window = StdDuration::from_secs_f64(60.0 / compression);
    let runner = Arc::new(s.runner_on(
        s.store(),
        RunSettings {
            catch_up,
            pace: Pace::new(u32::try_from(config.pace_rpm())?, window),
            ..crate::run_settings(true)
        },
    ));
    s.model.throttle(Some((config.rpm, Window::Every(window)))).await;

    // Scheduler delivers every occurrence (some twice) at the due instant.
    let sqs = aws_sdk_sqs::Client::new(&s.t.aws.sdk);
    let queue_url = s.t.stack.runs_queue_url.clone();
    let queue_arn = s.t.stack.runs_queue_arn.clone();
    let mut bodies = Vec::new();
    let mut duplicates_sent = 0;
    for (i, task) in tasks.iter().enumerate() {
        bodies.push(run_message(task, due, &uuid::Uuid::new_v4().to_string()));
        if config.duplicate_every > 0 && i % config.duplicate_every == 0 {
            duplicates_sent += 1;
            bodies.push(run_message(task, due, &uuid::Uuid::new_v4().to_string()));
        }
    }
    for chunk in bodies.chunks(10) {
        let entries = chunk
            .iter()
            .enumerate()
            .map(|(i, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let out = sqs
            .send_message_batch()
            .queue_url(&queue_url)
            .set_entries(Some(entries))
            .send()
            .await?;
        anyhow::ensure!(out.failed().is_empty(), "send failed: {:?}", out.failed());
    }

    // SQS's clock runs `compression` times as fast as the wall's.
    let started = Instant::now();
    let done = Arc::new(AtomicBool::new(false));
    let endpoint = s.t.aws.moto.endpoint();
    let settled = Arc::new(AtomicUsize::new(0));
    let clock = {
        let done = done.clone();
        let settled = settled.clone();
        let tasks = config.tasks + config.reminders;
        tokio::spawn(async move {
            let mut advanced = 0u64;
            let mut reported = Instant::now();
            while !done.load(Ordering::Relaxed) {
                tokio::time::sleep(StdDuration::from_millis(100)).await;
                if reported.elapsed() >= PROGRESS_EVERY {
                    reported = Instant::now();
                    eprintln!(
                        "herd: {:.0} s real ({:.1} min simulated), {} of {tasks} occurrences settled",
                        started.elapsed().as_secs_f64(),
                        started.elapsed().as_secs_f64() * compression / 60.0,
                        settled.load(Ordering::Relaxed)
                    );
                }
                let target = (started.elapsed().as_secs_f64() * (compression - 1.0)) as u64;
                if target > advanced {
                    let step = u32::try_from(target - advanced).unwrap_or(u32::MAX);
                    let endpoint = endpoint.clone();
                    let moved = tokio::task::spawn_blocking(move || local::moto::advance_sqs_clock(&endpoint, step))
                        .await
                        .map_err(anyhow::Error::from)
                        .and_then(|r| r);
                    if moved.is_ok() {
                        advanced = target;
                    }
                }
            }
        })
    };

    let seen = Arc::new(Mutex::new(Seen::default()));
    let settled_needed = config.tasks + config.reminders;
    let limit = StdDuration::from_secs_f64(2.0 * CATCH_UP_SECONDS as f64 / compression + 30.0);
    let returns = Returns::from_sdk(&s.t.aws.sdk);
    let invocation = Duration::seconds(SETTLE_RESERVE_SECONDS)
        + Duration::milliseconds((INVOCATION_SECONDS as f64 * 1000.0 / compression) as i64);
    let pollers = (0..config.concurrency).map(|_| {
        let (sqs, queue_url, queue_arn, runner, seen, returns, settled) = (
            sqs.clone(),
            queue_url.clone(),
            queue_arn.clone(),
            runner.clone(),
            seen.clone(),
            returns.clone(),
            settled.clone(),
        );
        let batch = i32::try_from(config.batch.clamp(1, 10)).unwrap_or(10);
        async move {
            let mut idle_since: Option<Instant> = None;
            while started.elapsed() < limit {
                let got = sqs
                    .receive_message()
                    .queue_url(&queue_url)
                    .max_number_of_messages(batch)
                    .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
                    .send()
                    .await?;
                if got.messages().is_empty() {
                    // Done once every occurrence settled and the queue stayed
                    // empty for the longest return (the duplicates it may hold).
                    let idle = *idle_since.get_or_insert_with(Instant::now);
                    let longest = StdDuration::from_secs_f64(
                        f64::from(shared::domain::run::redelivery::LONGEST_RETURN_SECONDS) / compression + 1.0,
                    );
                    if settled.load(Ordering::Relaxed) >= settled_needed && idle.elapsed() > longest {
                        return anyhow::Ok(());
                    }
                    tokio::time::sleep(IDLE_POLL).await;
                    continue;
                }
                idle_since = None;
                let deliveries = got.messages().iter().map(|m| {
                    let runner = runner.clone();
                    async move {
                        let id = m.message_id().unwrap_or_default();
                        let now = Utc::now();
                        let answer = runner
                            .deliver(id, m.body().unwrap_or_default(), now, now + invocation)
                            .await;
                        (m, answer)
                    }
                });
                for (m, answer) in futures::future::join_all(deliveries).await {
                    let handle = m.receipt_handle().unwrap_or_default();
                    {
                        let mut seen = seen.lock().await;
                        match &answer {
                            Ok(Disposition::Paced(_)) => {
                                seen.returned += 1;
                                seen.paced += 1;
                            }
                            Ok(Disposition::Ran(_) | Disposition::Skipped(_)) => {
                                let now = Instant::now();
                                seen.first.get_or_insert(now);
                                seen.last = Some(now);
                                seen.settled += 1;
                                settled.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(Disposition::Duplicate) => seen.duplicates += 1,
                            Ok(Disposition::Malformed(_) | Disposition::NotYet | Disposition::AwaitingApproval) => {}
                            Ok(Disposition::Busy | Disposition::ReturnToQueue) => seen.returned += 1,
                            Err(_) => {
                                seen.returned += 1;
                                seen.errors += 1;
                            }
                        }
                    }
                    let receives = m
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .and_then(|n| n.parse::<u32>().ok())
                        .unwrap_or(1);
                    // As the runner's handler decides, on SQS's compressed
                    // clock: the pace's room is real time, SQS's simulated.
                    let back = match &answer {
                        Ok(disposition) => {
                            let now = Utc::now();
                            let compressed = match disposition {
                                Disposition::Paced(room_at) => {
                                    let real = (*room_at - now).num_milliseconds() as f64;
                                    Disposition::Paced(now + Duration::milliseconds((real * compression) as i64))
                                }
                                other => other.clone(),
                            };
                            compressed.comes_back(receives, now, fastrand::f64())
                        }
                        Err(_) => Some(return_delay(receives, fastrand::f64())),
                    };
                    if let Some(seconds) = back {
                        // Best effort, as in the runner's handler: a refused
                        // shortening leaves the record to the queue's timeout.
                        let _ = returns.return_after(&queue_arn, handle, seconds).await;
                    } else {
                        sqs.delete_message()
                            .queue_url(&queue_url)
                            .receipt_handle(handle)
                            .send()
                            .await?;
                    }
                }
            }
            anyhow::Ok(())
        }
    });
    let results = futures::future::join_all(pollers).await;
    done.store(true, Ordering::Relaxed);
    let _ = clock.await;
    for r in results {
        r?;
    }

    // What holds, read from the table and the stand-in.
    let seen = seen.lock().await;
    let mut report = HerdReport {
        config: Some(config.clone()),
        drain_real: seen.last.map(|l| l - started).unwrap_or_default(),
        returned: seen.returned,
        errors: seen.errors,
        duplicates_sent,
        duplicates_absorbed: seen.duplicates,
        model_throttled: s.model.faulted().await,
        ..Default::default()
    };
    let answered = s.model.requests().await;
    report.model_answered = answered.len();
    let mut answers: BTreeMap<String, usize> = BTreeMap::new();
    for (_, request) in &answered {
        let text = request["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        let prompt = text
            .split('(')
            .nth(1)
            .and_then(|t| t.split(')').next())
            .unwrap_or_default();
        *answers.entry(prompt.to_owned()).or_default() += 1;
    }
    report.run_twice = answers.values().filter(|n| **n > 1).count();

    let items = s.t.scan_all().await?;
    let occurrence = shared::domain::run::occurrence::occurrence_key(due);
    let period = shared::domain::task::budget::period(due);
    let mut runs: BTreeMap<String, Value> = BTreeMap::new();
    for item in items.iter().filter(|i| i["entity"] == "run") {
        runs.insert(item["task_id"].as_str().unwrap_or_default().to_owned(), item.clone());
    }
    for task in &tasks {
        let Some(run) = runs.get(task.task_id.as_str()) else {
            report.unrecorded += 1;
            continue;
        };
        let reason = run["reason"].as_str().unwrap_or("-").to_owned();
        let cost = run["cost_usd"].as_f64().unwrap_or_default();
        let reminder = task.kind == shared::domain::task::TaskKind::Reminder;
        match run["status"].as_str().unwrap_or_default() {
            "succeeded" => {
                report.succeeded += 1;
                report.reminders_succeeded += usize::from(reminder);
            }
            "failed" => *report.failed.entry(reason).or_default() += 1,
            _ => *report.skipped.entry(reason).or_default() += 1,
        }
        report.runs_cost += cost;
        if let Some(started_at) = run["started_at"]
            .as_str()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        {
            let late = (started_at.with_timezone(&Utc) - due).as_seconds_f64() * compression;
            report.latest_start_sim = report.latest_start_sim.max(late);
            if reminder {
                report.reminders_latest_start_sim = report.reminders_latest_start_sim.max(late);
            }
        }
        let item = items
            .iter()
            .find(|i| i["entity"] == "task" && i["task_id"] == task.task_id.as_str());
        let used = item
            .and_then(|i| i["budget_used"][&period].as_f64())
            .unwrap_or_default();
        if (used - cost).abs() > 1e-9 {
            report.misaccounted += 1;
        }
        if item.is_some_and(|i| i["claims"][&occurrence]["status"] == "running") {
            report.claims_left += 1;
        }
    }
    // Every account charged: the herd's install's and the reminders' owner's.
    for account in items.iter().filter(|i| i["entity"] == "account") {
        report.account_runs += account["runs"].as_i64().unwrap_or_default();
        report.account_spent += account["spent_usd"].as_f64().unwrap_or_default();
    }
    Ok(report)
}

/// The other workspace's `i`-th one-time reminder, due at `due`; its
/// instruction names it, as the herd's prompts do, to count its answers.
fn other_workspaces_reminder(i: usize, due: DateTime<Utc>) -> shared::domain::task::Task {
    use shared::domain::task::{Provenance, TaskId};
    let mut task = crate::reminder(due);
    task.task_id = TaskId::for_reminder("ws_2", "usr_b", &format!("herd-{i:05}"));
    task.workspace = "ws_2".into();
    task.provenance = Provenance::User {
        principal: "usr_b".into(),
    };
    task.instruction = Some(format!("Remind me of the stand-up (reminder_{i:05})."));
    task
}
