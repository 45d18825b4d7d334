//! `sat verify`: the deploy check (run after `sam deploy`). It walks one
//! reminder through the live stack end to end and says what it verified:
//!
//! 1. **create**: `lambda:InvokeFunction` of `CreateFunctionArn` with a
//!    reminder due in two minutes (`--due-in`), as a chat backend calls it;
//!    the answer must be `ok` with a scheduled task;
//! 2. **run**: Scheduler fires its `at(...)` schedule into the runs queue,
//!    the runner runs it on the model and settles it: its run record
//!    (read through the shared adapter) must say `succeeded`;
//! 3. **notification**: the table's stream, the pipe, the bus and
//!    `RunFinishedRule` bring its content-free `Scheduled run finished`
//!    event to `RunFinishedQueue`. `verify` takes its own event off the
//!    queue and gives every other message back at once (visibility 0),
//!    so a backend consuming the queue loses nothing; if that backend
//!    takes the event first, this step cannot see it and says so.
//!
//! The reminder belongs to principal `sat-verify` in workspace
//! `sat-verify` (`--workspace`); it completes after its run and expires
//! with `RETENTION_DAYS` like any reminder. Its one model call is charged
//! to that principal's account.

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use serde::Serialize;
use serde_json::{Value, json};
use shared::adapters::dynamo::DynamoStore;
use shared::domain::claim::RunStatus;
use shared::domain::task::TaskId;
use shared::ports::ReminderStore;

use crate::aws::Queues;
use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// The principal whose reminder the check creates.
pub const PRINCIPAL: &str = "sat-verify";

#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// When the reminder is due, from now (Scheduler fires `at()` schedules
    /// to the minute; locally, seconds do).
    #[arg(long, default_value = "2m", value_parser = crate::duration)]
    pub due_in: Duration,
    /// How long to wait, after it is due, for its run and its notification.
    #[arg(long, default_value = "5m", value_parser = crate::duration)]
    pub wait: Duration,
    /// The workspace of the check's reminder.
    #[arg(long, default_value = PRINCIPAL)]
    pub workspace: String,
}

/// One verified (or failed) step.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub step: &'static str,
    pub ok: bool,
    /// What was seen, in words.
    pub detail: String,
    /// When it was seen (UTC).
    pub at: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifyReport {
    pub stack: String,
    pub task_id: Option<String>,
    pub due_at: String,
    pub steps: Vec<Step>,
    /// Every step verified.
    pub verified: bool,
}

fn step(step: &'static str, ok: bool, detail: String) -> Step {
    Step {
        step,
        ok,
        detail,
        at: render::utc(Utc::now()),
    }
}

/// Prints a step as it is seen, for a person waiting on it.
fn say(progress: bool, text: &str) {
    if progress {
        eprintln!("sat verify: {text}");
    }
}

/// The create request a chat backend would send (SPEC §4).
fn create_request(workspace: &str, due: DateTime<Utc>, now: DateTime<Utc>) -> Value {
    json!({
        "op": "create",
        "principal": {"id": PRINCIPAL, "workspace": workspace, "scopes": ["schedule.write"]},
        "idempotency_key": format!("sat-verify-{}", uuid::Uuid::new_v4().simple()),
        "agent": {"id": "sat", "version": "1", "policy_profile": "standard",
                  "limits": {"max_turns": 1, "max_tool_calls": 0, "max_output_tokens": 200, "timeout_seconds": 60}},
        "approval": {"id": "sat-verify", "approved_at": shared::domain::schedule::format_utc(now)},
        "input": {"title": "Deployment check",
                  "instruction": "This is a deployment check of the scheduled tasks system: reply with the single word ok.",
                  "at": shared::domain::schedule::format_utc(due)}
    })
}

pub async fn run(args: &VerifyArgs, resources: &Resources, progress: bool) -> Result<VerifyReport, SatError> {
    let create_function = resources.output("CreateFunctionArn")?;
    let table = resources.output("TasksTableName")?;
    let queue_url = resources.output("RunFinishedQueueUrl")?;
    let now = Utc::now();
    let due = (now
        + chrono::Duration::from_std(args.due_in).map_err(|_| SatError::Usage("--due-in is too long".into()))?)
    .trunc_subsecs(0);
    let mut report = VerifyReport {
        stack: resources.source.to_string(),
        task_id: None,
        due_at: render::utc(due),
        steps: Vec::new(),
        verified: false,
    };

    // 1. create, as a chat backend does.
    say(
        progress,
        &format!(
            "creating a reminder due at {} through {create_function}",
            render::utc(due)
        ),
    );
    let invoked = crate::aws::invoke(
        &resources.sdk,
        resources.lambda_endpoint.as_deref(),
        create_function,
        &create_request(&args.workspace, due, now),
    )
    .await?;
    let task_id = match (&invoked.function_error, invoked.payload["ok"].as_bool()) {
        (None, Some(true)) => invoked.payload["task"]["task_id"].as_str().map(str::to_owned),
        _ => None,
    };
    let Some(task_id) = task_id.and_then(|id| TaskId::parse(&id)) else {
        let why = match &invoked.function_error {
            Some(kind) => format!("the function failed ({kind}): {}", invoked.payload),
            None => format!("create answered {}", invoked.payload),
        };
        report.steps.push(step("create", false, why));
        return Ok(report);
    };
    report.task_id = Some(task_id.as_str().to_owned());
    report.steps.push(step(
        "create",
        true,
        format!(
            "create answered ok: task {} {}, due at {}",
            task_id.as_str(),
            invoked.payload["task"]["state"].as_str().unwrap_or("?"),
            invoked.payload["task"]["at"].as_str().unwrap_or("?")
        ),
    ));

    // 2. its run record, once Scheduler fired it and the runner settled it.
    let deadline = tokio::time::Instant::now() + args.due_in + args.wait;
    say(progress, &format!("waiting for {}'s run record", task_id.as_str()));
    let store = DynamoStore::from_sdk(&resources.sdk, table);
    let record = loop {
        let runs = store.runs(&task_id, 1).await?;
        if let Some(record) = runs.into_iter().find(|r| r.status != RunStatus::Running) {
            break Some(record);
        }
        if tokio::time::Instant::now() >= deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    let Some(record) = record else {
        report.steps.push(step(
            "run",
            false,
            format!(
                "no run record within {} of its time: check the schedule in the group (sat describe {}), the runs queue and the runner's logs",
                humantime::format_duration(args.wait),
                task_id.as_str()
            ),
        ));
        return Ok(report);
    };
    let ran = record.status == RunStatus::Succeeded;
    report.steps.push(step(
        "run",
        ran,
        format!(
            "run {} {} at {} (scheduled {}), {} attempt(s), {} input and {} output tokens, USD {:.6}{}",
            record.run_id,
            shared::domain::history::in_words(&record),
            render::utc(record.finished_at),
            record.scheduled_time,
            record.attempts,
            record.usage.input_tokens,
            record.usage.output_tokens,
            record.cost_usd,
            record
                .model_id
                .as_deref()
                .map(|m| format!(" on {m}"))
                .unwrap_or_default()
        ),
    ));
    if !ran {
        return Ok(report);
    }

    // 3. its notification on RunFinishedQueue.
    say(progress, "waiting for its event on RunFinishedQueue");
    let queues = Queues::new(&resources.sdk);
    let notified = loop {
        let mut found = None;
        for message in queues.receive(queue_url, 30, 2).await? {
            let event: Value = serde_json::from_str(&message.body).unwrap_or(Value::Null);
            if event["detail"]["task_id"] == task_id.as_str() {
                queues.delete(queue_url, &message.receipt_handle).await?;
                found = Some(event);
            } else {
                // The platform's: back at once.
                queues.release(queue_url, &message.receipt_handle).await?;
            }
        }
        if found.is_some() || tokio::time::Instant::now() >= deadline {
            break found;
        }
    };
    match notified {
        Some(event) => {
            let detail = &event["detail"];
            let content_free = detail.as_object().is_some_and(|d| {
                d.keys().all(|k| ["workspace", "task_id", "run_id", "scheduled_time", "status"].contains(&k.as_str()))
            });
            report.steps.push(step(
                "notification",
                content_free && detail["run_id"] == record.run_id.as_str(),
                format!(
                    "`{}` event from {} on RunFinishedQueue: run {} {}{}",
                    event["detail-type"].as_str().unwrap_or("?"),
                    event["source"].as_str().unwrap_or("?"),
                    detail["run_id"].as_str().unwrap_or("?"),
                    detail["status"].as_str().unwrap_or("?"),
                    if content_free {
                        ", ids and status only"
                    } else {
                        "; it carries more than ids and status"
                    }
                ),
            ));
        }
        None => report.steps.push(step(
            "notification",
            false,
            "no event for it on RunFinishedQueue: check the pipe (RunFinishedDeadLetterAlarm), the rule and the queue; \
             a backend consuming the queue may have taken it first"
                .to_owned(),
        )),
    }
    report.verified = report.steps.len() == 3 && report.steps.iter().all(|s| s.ok);
    Ok(report)
}

impl Report for VerifyReport {
    fn human(&self) -> String {
        let mut table = render::table(&["step", "", "what was seen", "at (UTC)"]);
        for s in &self.steps {
            table.add_row(vec![
                s.step.to_owned(),
                if s.ok { "ok" } else { "FAILED" }.to_owned(),
                s.detail.clone(),
                s.at.clone(),
            ]);
        }
        let mut text = render::fields(&[
            ("stack", self.stack.clone()),
            (
                "reminder",
                self.task_id.clone().unwrap_or_else(|| "(none created)".into()),
            ),
            ("due at", self.due_at.clone()),
        ]);
        text.push_str(&format!("{table}\n"));
        text.push_str(if self.verified {
            "Verified end to end: create, schedule, run, record, notification.\n"
        } else {
            "NOT verified: see the failed step.\n"
        });
        text
    }

    fn findings(&self) -> bool {
        !self.verified
    }
}
