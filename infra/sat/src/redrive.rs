//! `sat redrive`: every dead-letter queue's messages, each to where it
//! belongs (`template.yaml` says which DLQ takes what):
//!
//! | DLQ | what lands there | where it goes |
//! |---|---|---|
//! | `SchedulerDeadLetterQueue` | deliveries Scheduler could not make: a task's run message, the daily pass's input (`{"type": "reconcile.all"}`, `{"op": "reconcile_all"}` from older stacks), the missed-occurrence check's (`{"type": "overdue.check"}`) | the runs queue; the pass and the check to the reconcile queue, in the groups their schedules send them |
//! | `RunsDeadLetterQueue` | run messages received 100 times | the runs queue |
//! | `ReconcileDeadLetterQueue` | reconcile work that failed five times | the reconcile queue, in its install's message group |
//! | `RunFinishedQueueDeadLetterQueue` | notifications the platform did not take, events the rule could not deliver | `RunFinishedQueue` |
//! | `RunFinishedDeadLetterQueue` | the pipe's: stream records that never became events | left: its runbook re-sends their events by hand |
//!
//! SQS's own redrive returns messages only to a queue whose redrive policy
//! names the DLQ, which the Scheduler DLQ is not; this does the same for
//! all of them (the logic of `infra/python/redrive_scheduler_dlq.py`).
//! It is at-least-once: a message is held again just before its copy is
//! sent (a batch can outlast the hold it was received with) and deleted
//! only after, so no message is lost and no other receive takes it
//! meanwhile; a failure between the send and the delete leaves it in the
//! DLQ, and the next redrive sends it again. The runner's claim absorbs a
//! duplicate run (an occurrence past its catch-up window is recorded as a
//! `missed` skip, the honest outcome); a notification may arrive twice. A
//! failure makes everything received and not moved visible again at once.
//! Anything that is not what its DLQ takes is left there and said.
//! `--dry-run` lists without moving (what it received is made visible
//! again at once).

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::Value;
use shared::app::reconcile::{Pass, Work};
use shared::domain::run::occurrence::RunMessage;

use crate::aws::{Queues, Received};
use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// How long a received message stays invisible while it is moved.
const HOLD_SECONDS: i32 = 120;
/// The daily schedule's message group on the reconcile queue (`template.yaml`).
const DAILY_GROUP: &str = "reconcile-all";
/// The missed-occurrence check's message group (`template.yaml`).
const OVERDUE_GROUP: &str = "overdue-check";

#[derive(Debug, Clone, clap::Args)]
pub struct RedriveArgs {
    /// List what would move where, moving nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// At most this many messages from each DLQ.
    #[arg(long, default_value_t = 10_000)]
    pub max: usize,
}

/// Where a message goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Destination {
    /// A standard queue, by output.
    Queue(&'static str),
    /// The reconcile FIFO queue, in a group.
    Fifo { group: String },
    /// Nowhere: why.
    Left(String),
}

/// One message and where it went (or would go).
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub from: &'static str,
    pub message_id: String,
    /// What it is, in words.
    pub what: String,
    /// The output naming the queue it went to; absent when left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<&'static str>,
    /// Why it was left in its DLQ.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left: Option<String>,
    /// What the sender said when it dead-lettered it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Per DLQ: how many moved and how many were left.
#[derive(Debug, Clone, Serialize)]
pub struct QueueCount {
    pub dlq: &'static str,
    pub moved: usize,
    pub left: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct RedriveReport {
    pub dry_run: bool,
    pub queues: Vec<QueueCount>,
    pub messages: Vec<Moved>,
}

/// A run message, in words; `None` if the body is none.
fn run_message(body: &str) -> Option<String> {
    RunMessage::parse(body)
        .ok()
        .map(|d| format!("run of {} at {}", d.task_id.as_str(), d.message.scheduled_time))
}

/// The daily pass's input, in either form a stack has sent it.
fn daily_pass(body: &str) -> bool {
    match serde_json::from_str::<Value>(body) {
        Ok(value) => value == serde_json::json!({"type": "reconcile.all"}) || value["op"] == "reconcile_all",
        Err(_) => false,
    }
}

/// A message of Scheduler's or the runs queue's DLQ: a run message goes
/// back to the runs queue, the daily pass and a missed-occurrence check
/// (Scheduler's) to the reconcile queue in their groups.
fn scheduled(dlq: &'static str, body: &str) -> (String, Destination) {
    let from_scheduler = dlq == "SchedulerDeadLetterQueueUrl";
    if let Some(what) = run_message(body) {
        (what, Destination::Queue("RunsQueueUrl"))
    } else if from_scheduler && daily_pass(body) {
        (
            "the daily reconcile pass".to_owned(),
            Destination::Fifo {
                group: DAILY_GROUP.to_owned(),
            },
        )
    } else if from_scheduler && matches!(serde_json::from_str::<Work>(body), Ok(Work::Pass(Pass::Overdue))) {
        (
            "a missed-occurrence check".to_owned(),
            Destination::Fifo {
                group: OVERDUE_GROUP.to_owned(),
            },
        )
    } else {
        (
            "not a run message".to_owned(),
            Destination::Left("neither a run message nor the daily pass: read it and decide".into()),
        )
    }
}

/// A message of the reconcile queue's DLQ: reconcile work goes back in its
/// own message group (or the group its work names).
fn reconcile_work(message: &Received) -> (String, Destination) {
    let work = match serde_json::from_str::<Work>(&message.body) {
        Ok(work) => work,
        Err(e) => {
            return (
                "not reconcile work".to_owned(),
                Destination::Left(format!("not a reconcile work item: {e}")),
            );
        }
    };
    let what = match &work {
        Work::Event(event) => format!(
            "reconcile event for install {} of {}",
            event.install_id(),
            event.workspace()
        ),
        Work::Pass(Pass::Install { workspace, install }) => {
            format!("reconcile pass of install {} of {workspace}", install.id)
        }
        Work::Pass(Pass::OverdueShard { family, shard, .. }) => {
            format!("the missed-occurrence check of {} shard {shard:02}", family.as_str())
        }
        Work::Pass(_) => "a page of the daily pass".to_owned(),
    };
    let group = message.group.clone().unwrap_or_else(|| match &work {
        Work::Event(event) => shared::app::reconcile::group(event.workspace(), event.install_id()),
        Work::Pass(Pass::Install { workspace, install }) => shared::app::reconcile::group(workspace, &install.id),
        Work::Pass(Pass::OverdueShard { family, shard, .. }) => {
            format!("overdue/{}/{shard:02}", family.as_str())
        }
        Work::Pass(_) => "pass".to_owned(),
    });
    (what, Destination::Fifo { group })
}

/// Where a message of `dlq` belongs, and what it is.
fn route(dlq: &'static str, message: &Received) -> (String, Destination) {
    let body = message.body.as_str();
    match dlq {
        "SchedulerDeadLetterQueueUrl" | "RunsDeadLetterQueueUrl" => scheduled(dlq, body),
        "ReconcileDeadLetterQueueUrl" => reconcile_work(message),
        "RunFinishedQueueDeadLetterQueueUrl" => match serde_json::from_str::<Value>(body) {
            Ok(event) if event["detail-type"] == "Scheduled run finished" => (
                format!(
                    "notification of run {} ({})",
                    event["detail"]["run_id"].as_str().unwrap_or("?"),
                    event["detail"]["status"].as_str().unwrap_or("?")
                ),
                Destination::Queue("RunFinishedQueueUrl"),
            ),
            _ => (
                "not a run notification".to_owned(),
                Destination::Left("not a `Scheduled run finished` event".into()),
            ),
        },
        _ => (
            "stream records the notification pipe could not deliver".to_owned(),
            Destination::Left(
                "re-send their events from the run records settled in that window (infra/OPERATIONS.md, RunFinishedDeadLetterAlarm)"
                    .into(),
            ),
        ),
    }
}

/// The DLQs, in the order they are worked.
const DLQS: [&str; 5] = [
    "SchedulerDeadLetterQueueUrl",
    "RunsDeadLetterQueueUrl",
    "ReconcileDeadLetterQueueUrl",
    "RunFinishedQueueDeadLetterQueueUrl",
    "RunFinishedDeadLetterQueueUrl",
];

pub async fn run(args: &RedriveArgs, resources: &Resources) -> Result<RedriveReport, SatError> {
    let queues = Queues::new(&resources.sdk);
    let mut report = RedriveReport {
        dry_run: args.dry_run,
        queues: Vec::new(),
        messages: Vec::new(),
    };
    for dlq in DLQS {
        let url = resources.output(dlq)?;
        let mut count = QueueCount { dlq, moved: 0, left: 0 };
        // Received and not deleted: made visible again when the queue is
        // done, or at once when the redrive fails.
        let mut kept: Vec<String> = Vec::new();
        let moved = redrive_queue(&queues, resources, args, dlq, url, &mut count, &mut report, &mut kept).await;
        for handle in &kept {
            if let Err(e) = queues.release(url, handle).await
                && moved.is_ok()
            {
                return Err(e);
            }
        }
        moved?;
        report.queues.push(count);
    }
    Ok(report)
}

/// One DLQ's messages, each held again before its copy is sent (a batch
/// can outlast the hold it was received with), deleted once sent. What is
/// received and not moved goes to `kept`, the rest of a batch too when a
/// step fails, so the caller makes it visible again at once.
#[allow(clippy::too_many_arguments)]
async fn redrive_queue(
    queues: &Queues,
    resources: &Resources,
    args: &RedriveArgs,
    dlq: &'static str,
    url: &str,
    count: &mut QueueCount,
    report: &mut RedriveReport,
    kept: &mut Vec<String>,
) -> Result<(), SatError> {
    let mut seen = BTreeSet::new();
    while seen.len() < args.max {
        let batch = queues.receive(url, HOLD_SECONDS, 0).await?;
        if batch.is_empty() || batch.iter().all(|m| seen.contains(&m.message_id)) {
            kept.extend(batch.into_iter().map(|m| m.receipt_handle));
            return Ok(());
        }
        let mut batch = batch.into_iter();
        while let Some(message) = batch.next() {
            if !seen.insert(message.message_id.clone()) || seen.len() > args.max {
                kept.push(message.receipt_handle.clone());
                continue;
            }
            let handle = message.receipt_handle.clone();
            match move_one(queues, resources, args, dlq, url, &message).await {
                Ok((entry, moved)) => {
                    if moved {
                        count.moved += 1;
                    } else {
                        count.left += usize::from(entry.left.is_some());
                        count.moved += usize::from(entry.to.is_some());
                        kept.push(handle);
                    }
                    report.messages.push(entry);
                }
                Err(e) => {
                    kept.push(handle);
                    kept.extend(batch.map(|m| m.receipt_handle));
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// One message: where it goes, and whether it was moved (sent, then
/// deleted). A dry run, a message left, or one whose hold ran out before
/// its copy was sent is not moved.
async fn move_one(
    queues: &Queues,
    resources: &Resources,
    args: &RedriveArgs,
    dlq: &'static str,
    url: &str,
    message: &Received,
) -> Result<(Moved, bool), SatError> {
    let (what, destination) = route(dlq, message);
    let mut entry = Moved {
        from: dlq,
        message_id: message.message_id.clone(),
        what,
        to: None,
        left: None,
        error: message.error.clone(),
    };
    let (output, body, group) = match destination {
        Destination::Left(why) => {
            entry.left = Some(why);
            return Ok((entry, false));
        }
        Destination::Queue(output) => (output, message.body.clone(), None),
        Destination::Fifo { group } => {
            let body = if daily_pass(&message.body) {
                r#"{"type": "reconcile.all"}"#.to_owned()
            } else {
                message.body.clone()
            };
            ("ReconcileQueueUrl", body, Some(group))
        }
    };
    entry.to = Some(output);
    if args.dry_run {
        return Ok((entry, false));
    }
    // Held again before the send: a copy is sent only while no other
    // receive can take the message.
    if queues.hold(url, &message.receipt_handle, HOLD_SECONDS).await.is_err() {
        entry.to = None;
        entry.left = Some("its hold ran out before it was sent: run sat redrive again".into());
        return Ok((entry, false));
    }
    // A fresh deduplication id on the FIFO queue: the original may still be
    // inside its five-minute window.
    let dedup = format!("redrive-{}", message.message_id);
    let fifo = group.as_deref().map(|group| (group, dedup.as_str()));
    queues.send(resources.output(output)?, &body, fifo).await?;
    queues.delete(url, &message.receipt_handle).await?;
    Ok((entry, true))
}

impl Report for RedriveReport {
    fn human(&self) -> String {
        let mut text = String::new();
        let verb = if self.dry_run { "would move" } else { "moved" };
        let mut counts = render::table(&["dead-letter queue (output)", verb, "left"]);
        for q in &self.queues {
            counts.add_row(vec![q.dlq.to_owned(), q.moved.to_string(), q.left.to_string()]);
        }
        text.push_str(&format!("{counts}\n"));
        if !self.messages.is_empty() {
            let mut table = render::table(&["from", "message", "to", "why left / sender's error"]);
            for m in &self.messages {
                table.add_row(vec![
                    m.from.trim_end_matches("Url").to_owned(),
                    format!("{} ({})", m.what, m.message_id),
                    m.to.map_or_else(|| "left".to_owned(), |t| t.trim_end_matches("Url").to_owned()),
                    m.left.clone().or_else(|| m.error.clone()).unwrap_or_default(),
                ]);
            }
            text.push_str(&format!("{table}\n"));
        }
        let moved: usize = self.queues.iter().map(|q| q.moved).sum();
        let left: usize = self.queues.iter().map(|q| q.left).sum();
        text.push_str(&if self.dry_run {
            format!("Dry run: {moved} would move, {left} would be left; nothing was moved.\n")
        } else {
            format!("{moved} moved, {left} left.\n")
        });
        text
    }

    fn findings(&self) -> bool {
        self.queues.iter().any(|q| q.left > 0)
    }
}
