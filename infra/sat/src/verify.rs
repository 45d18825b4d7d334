//! `sat verify`: the deploy check (run after `sam deploy`). It walks one
//! reminder through the live stack end to end and says what it verified:
//!
//! 1. **create**: `lambda:InvokeFunction` of `CreateFunctionArn` with a
//!    reminder due in two minutes (`--due-in`), as a chat backend calls it;
//!    the answer must be `ok` with a scheduled task;
//! 2. **run**: Scheduler fires its `at(...)` schedule into the runs queue,
//!    the runner runs it on the model and settles it: its run record
//!    (read through the shared adapter) must say `succeeded`;
//! 3. **bus**: the table's stream and the pipe put its content-free
//!    `Scheduled run finished` event on the stack's bus: `verify` reads
//!    it through a subscription of its own (a temporary queue and a rule
//!    matching only this task's events, removed afterwards), so a
//!    backend consuming `RunFinishedQueue` takes nothing from it;
//! 4. **queue**: `RunFinishedRule` brings the event to
//!    `RunFinishedQueue`. `verify` takes its own event off the queue and
//!    gives every other message back at once (visibility 0); if a backend
//!    consuming the queue took it first, the step says `not seen`, which
//!    does not fail the check (the bus step proved the event).
//!
//! 5. **pass**: a chain of `--probe-hops` (20) messages through the
//!    reconcile queue, each queued by the reconcile function's invocation
//!    of the one before, as the daily pass's pages travel
//!    (`reconcile.probe`, each hop recorded in the table): past Lambda's
//!    recursive loop detection, which stops such a chain near 16 hops
//!    unless the function sets `RecursiveLoop: Allow`;
//! 6. **traces**: the reminder's spans, which create and the runner sent
//!    to the CloudWatch OTLP endpoint signed with their own roles, found
//!    in the `aws/spans` log group, where Transaction Search keeps every
//!    span it accepted (`off` when the stack's `Traces` is disabled).
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
use shared::app::reconcile::MAX_PROBE_HOPS;
use shared::domain::run::occurrence::RunRecord;
use shared::domain::task::TaskId;
use shared::domain::task::claim::RunStatus;
use shared::ports::ReminderStore;

use crate::aws::{Queues, Subscription};
use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// The principal whose reminder the check creates.
pub const PRINCIPAL: &str = "sat-verify";

#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// When the reminder is due, from now (Scheduler fires `at()` schedules
    /// to the minute; locally, seconds do).
    #[arg(long, default_value = "2m", value_parser = crate::args::duration)]
    pub due_in: Duration,
    /// How long to wait, after it is due, for its run and its notification;
    /// and then for the probe chain's end and the run's spans.
    #[arg(long, default_value = "5m", value_parser = crate::args::duration)]
    pub wait: Duration,
    /// The workspace of the check's reminder.
    #[arg(long, default_value = PRINCIPAL)]
    pub workspace: String,
    /// How long the probe chain through the reconcile queue is: past
    /// Lambda's recursive loop detection (about 16 hops) by default.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u8).range(1..=i64::from(MAX_PROBE_HOPS)))]
    pub probe_hops: u8,
}

/// The log group where Transaction Search keeps every span it accepted.
pub const SPANS_LOG_GROUP: &str = "aws/spans";

/// One verified (or failed) step.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub step: &'static str,
    /// `verified`, `failed`, `not seen` (the queue's event, which a
    /// consumer of the queue may have taken first) or `off` (traces, when
    /// the stack sends none).
    pub verdict: &'static str,
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
        verdict: if ok { "verified" } else { "failed" },
        detail,
        at: render::utc(Utc::now()),
    }
}

/// Prints a step as it is seen, for a person waiting on it.
fn say(progress: bool, text: &str) {
    if progress {
        eprintln!("sat verify: {}", crate::render::terminal_safe(text));
    }
}

/// The create request a chat backend would send (SPEC §4).
fn create_request(workspace: &str, key: &str, due: DateTime<Utc>, now: DateTime<Utc>) -> Value {
    json!({
        "op": "create",
        "principal": {"id": PRINCIPAL, "workspace": workspace, "scopes": ["schedule.write"]},
        "idempotency_key": key,
        "agent": {"id": "sat", "version": "1", "policy_profile": "standard",
                  "limits": {"max_turns": 1, "max_tool_calls": 0, "max_output_tokens": 200, "timeout_seconds": 60}},
        "approval": {"id": "sat-verify", "approved_at": shared::domain::schedule::format_utc(now)},
        "input": {"title": "Deployment check",
                  "instruction": "This is a deployment check of the scheduled tasks system: reply with the single word ok.",
                  "at": shared::domain::schedule::format_utc(due)}
    })
}

pub async fn run(args: &VerifyArgs, resources: &Resources, progress: bool) -> Result<VerifyReport, SatError> {
    // Every output the walk needs, before anything is made.
    for output in [
        "CreateFunctionArn",
        "TasksTableName",
        "RunFinishedQueueUrl",
        "ReconcileQueueUrl",
    ] {
        resources.output(output)?;
    }
    let bus = resources.output("EventBusName")?;
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

    // Its id derives from the create call: subscribe to its events first.
    let key = format!("sat-verify-{}", uuid::Uuid::new_v4().simple());
    let expected = TaskId::for_reminder(&args.workspace, PRINCIPAL, &key);
    let subscription = Subscription::create(&resources.sdk, bus, expected.as_str()).await?;
    // The probe chain runs while the reminder waits for its time.
    let probe = format!("sat-verify-{}", uuid::Uuid::new_v4().simple());
    send_probe(resources, &probe, args.probe_hops).await?;
    say(
        progress,
        &format!(
            "sent a chain of {} messages through the reconcile queue (probe {probe})",
            args.probe_hops
        ),
    );
    let result = walk(args, resources, &mut report, &key, due, now, &subscription, progress).await;
    subscription.remove().await;
    result?;
    let deadline = tokio::time::Instant::now() + args.wait;
    say(progress, "waiting for the probe chain's last hop");
    report
        .steps
        .push(pass_step(resources, &probe, args.probe_hops, deadline).await?);
    if let Some(task_id) = report.task_id.clone() {
        say(progress, &format!("looking for {task_id}'s spans in {SPANS_LOG_GROUP}"));
        report
            .steps
            .push(traces_step(resources, &task_id, now, deadline).await?);
    }
    report.verified = report.steps.len() == 6 && report.steps.iter().all(passes);
    Ok(report)
}

/// Whether a step lets the check pass: verified, the queue's copy taken by
/// its consumer first, or traces the stack does not send.
fn passes(step: &Step) -> bool {
    matches!(
        (step.step, step.verdict),
        (_, "verified") | ("queue", "not seen") | ("traces", "off")
    )
}

/// Sends the probe chain's first message to the reconcile queue
/// (`reconcile.probe`, `app::reconcile::Pass::Probe`).
async fn send_probe(resources: &Resources, probe: &str, hops: u8) -> Result<(), SatError> {
    let body = json!({"type": "reconcile.probe", "probe": probe, "hop": 1, "hops": hops}).to_string();
    let group = format!("probe/{probe}");
    Queues::new(&resources.sdk)
        .send(resources.output("ReconcileQueueUrl")?, &body, Some((&group, probe)))
        .await
}

/// Step 5: the probe chain's last hop recorded, waited for until `deadline`.
async fn pass_step(
    resources: &Resources,
    probe: &str,
    hops: u8,
    deadline: tokio::time::Instant,
) -> Result<Step, SatError> {
    use shared::ports::TaskCatalog;
    let store = DynamoStore::from_sdk(&resources.sdk, resources.output("TasksTableName")?);
    let reached = loop {
        let reached = store.probe_reached(probe).await?;
        if reached >= Some(hops) || tokio::time::Instant::now() >= deadline {
            break reached;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    };
    Ok(match reached {
        Some(hop) if hop >= hops => step(
            "pass",
            true,
            format!(
                "a chain of {hops} messages through the reconcile queue, each queued by the reconcile function's \
                 invocation of the one before, came to its end (probe {probe})"
            ),
        ),
        Some(hop) => step(
            "pass",
            false,
            format!(
                "the chain of {hops} messages stopped at hop {hop} (probe {probe}): Lambda's recursive loop \
                 detection stops such a chain near 16 hops unless the reconcile function allows recursion \
                 (`aws lambda get-function-recursion-config`, the template's RecursiveLoop: Allow); \
                 its next message is in ReconcileDeadLetterQueue"
            ),
        ),
        None => step(
            "pass",
            false,
            format!(
                "no hop of the probe chain ran (probe {probe}): check the reconcile queue's event source \
                 mapping and the reconcile function's logs"
            ),
        ),
    })
}

/// Step 6: the reminder's spans in [`SPANS_LOG_GROUP`], sent since `since`,
/// waited for until `deadline`; `off` when the stack sends no traces.
async fn traces_step(
    resources: &Resources,
    task_id: &str,
    since: DateTime<Utc>,
    deadline: tokio::time::Instant,
) -> Result<Step, SatError> {
    if !resources.traces {
        return Ok(Step {
            step: "traces",
            verdict: "off",
            detail: "the stack sends no traces (its Traces parameter is disabled)".to_owned(),
            at: render::utc(Utc::now()),
        });
    }
    let logs = aws_sdk_cloudwatchlogs::Client::new(&resources.sdk);
    loop {
        let found = logs
            .filter_log_events()
            .log_group_name(SPANS_LOG_GROUP)
            .start_time(since.timestamp_millis())
            .filter_pattern(format!("\"{task_id}\""))
            .send()
            .await;
        let events = match found {
            Ok(found) => found.events.unwrap_or_default(),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                return Ok(step(
                    "traces",
                    false,
                    format!(
                        "no {SPANS_LOG_GROUP} log group: Transaction Search is not on in this account and region, \
                         so the OTLP endpoint keeps no spans (docs/deploying.md, \"Traces\")"
                    ),
                ));
            }
            Err(e) => {
                return Err(SatError::aws(
                    format!("reading the spans (logs:FilterLogEvents on {SPANS_LOG_GROUP})"),
                    e,
                ));
            }
        };
        let spans = spans_of(&events, task_id);
        if spans.delivered || tokio::time::Instant::now() >= deadline {
            return Ok(spans.step(task_id));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// What the spans of the check's reminder showed.
#[derive(Debug, Default)]
struct Spans {
    count: usize,
    /// Their resources' `service.name`s (the functions' names).
    services: std::collections::BTreeSet<String>,
    /// The runner's delivery of its run is among them (`deliver`, with the
    /// task's id: `trace::Tracer::delivery`).
    delivered: bool,
}

fn spans_of(events: &[aws_sdk_cloudwatchlogs::types::FilteredLogEvent], task_id: &str) -> Spans {
    let mut spans = Spans::default();
    for event in events {
        let Ok(span) = serde_json::from_str::<Value>(event.message().unwrap_or_default()) else {
            continue;
        };
        spans.count += 1;
        if let Some(service) = span["resource"]["attributes"]["service.name"].as_str() {
            spans.services.insert(service.to_owned());
        }
        spans.delivered |= span["name"] == "deliver" && span["attributes"][shared::trace::key::TASK_ID] == task_id;
    }
    spans
}

impl Spans {
    /// Verified when the runner's delivery of the run is there: its role's
    /// export was accepted, signed as `xray`.
    fn step(&self, task_id: &str) -> Step {
        let services = self.services.iter().cloned().collect::<Vec<_>>().join(", ");
        if self.delivered {
            step(
                "traces",
                true,
                format!(
                    "{} span(s) of {task_id} in {SPANS_LOG_GROUP}, from {services}: the endpoint accepted \
                     the functions' signed exports",
                    self.count
                ),
            )
        } else {
            step(
                "traces",
                false,
                format!(
                    "no span of the runner's for {task_id} in {SPANS_LOG_GROUP} ({} span(s){}): look in the \
                     runner's log for \"the traces endpoint refused\" (xray:PutSpans and xray:PutSpansForIndexing \
                     on its role, Transaction Search on)",
                    self.count,
                    if services.is_empty() {
                        String::new()
                    } else {
                        format!(" from {services}")
                    }
                ),
            )
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn walk(
    args: &VerifyArgs,
    resources: &Resources,
    report: &mut VerifyReport,
    key: &str,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    subscription: &Subscription,
    progress: bool,
) -> Result<(), SatError> {
    // 1. create, as a chat backend does.
    let Some(task_id) = create(args, resources, report, key, due, now, progress).await? else {
        return Ok(());
    };
    // 2. its run record, once Scheduler fired it and the runner settled it.
    let deadline = tokio::time::Instant::now() + args.due_in + args.wait;
    let Some(record) = settled(args, resources, report, &task_id, deadline, progress).await? else {
        return Ok(());
    };
    // 3. its event on the bus, through the subscription; 4. on RunFinishedQueue.
    say(progress, "waiting for its event on the bus and on RunFinishedQueue");
    let queue_url = resources.output("RunFinishedQueueUrl")?;
    let (on_bus, on_queue) = events(resources, subscription, queue_url, &task_id, deadline).await?;
    report
        .steps
        .extend(event_steps(&record, on_bus.as_ref(), on_queue.as_ref()));
    Ok(())
}

/// Step 1: the reminder created through the create function, as a chat
/// backend creates one; its task id when create answered ok.
async fn create(
    args: &VerifyArgs,
    resources: &Resources,
    report: &mut VerifyReport,
    key: &str,
    due: DateTime<Utc>,
    now: DateTime<Utc>,
    progress: bool,
) -> Result<Option<TaskId>, SatError> {
    let create_function = resources.output("CreateFunctionArn")?;
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
        &create_request(&args.workspace, key, due, now),
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
        return Ok(None);
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
    Ok(Some(task_id))
}

/// Step 2: the run record the runner settled, waited for until `deadline`;
/// the record when the run succeeded.
async fn settled(
    args: &VerifyArgs,
    resources: &Resources,
    report: &mut VerifyReport,
    task_id: &TaskId,
    deadline: tokio::time::Instant,
    progress: bool,
) -> Result<Option<RunRecord>, SatError> {
    say(progress, &format!("waiting for {}'s run record", task_id.as_str()));
    let store = DynamoStore::from_sdk(&resources.sdk, resources.output("TasksTableName")?);
    let record = loop {
        let runs = store.runs(task_id, 1).await?;
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
        return Ok(None);
    };
    let ran = record.status == RunStatus::Succeeded;
    report.steps.push(step(
        "run",
        ran,
        format!(
            "run {} {} at {} (scheduled {}), {} attempt(s), {} input and {} output tokens, USD {:.6}{}",
            record.run_id,
            shared::domain::operations::history::in_words(&record),
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
    Ok(ran.then_some(record))
}

/// Steps 3 and 4, watched together: the run's event on the bus (through
/// the subscription) and on RunFinishedQueue, each until `deadline`; once
/// the bus has it, the queue has 30 s more to show it. Another task's
/// message on the queue is the platform's and goes back at once.
async fn events(
    resources: &Resources,
    subscription: &Subscription,
    queue_url: &str,
    task_id: &TaskId,
    deadline: tokio::time::Instant,
) -> Result<(Option<Value>, Option<Value>), SatError> {
    let queues = Queues::new(&resources.sdk);
    let ours = |body: &str| {
        let event: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        (event["detail"]["task_id"] == task_id.as_str()).then_some(event)
    };
    let (mut on_bus, mut on_queue) = (None, None);
    let mut queue_deadline = deadline;
    loop {
        if on_bus.is_none() {
            for message in queues.receive(&subscription.queue_url, 30, 1).await? {
                if let Some(event) = ours(&message.body) {
                    on_bus = Some(event);
                    queue_deadline = queue_deadline.min(tokio::time::Instant::now() + Duration::from_secs(30));
                }
            }
        }
        if on_queue.is_none() {
            for message in queues.receive(queue_url, 30, 1).await? {
                match ours(&message.body) {
                    Some(event) => {
                        queues.delete(queue_url, &message.receipt_handle).await?;
                        on_queue = Some(event);
                    }
                    None => queues.release(queue_url, &message.receipt_handle).await?,
                }
            }
        }
        let now = tokio::time::Instant::now();
        if (on_bus.is_some() && on_queue.is_some()) || now >= deadline || (on_bus.is_some() && now >= queue_deadline) {
            return Ok((on_bus, on_queue));
        }
    }
}

/// An event as a step says it: whether it is the run's and carries ids and
/// status only, and what it showed.
fn described(event: &Value, place: &str, record: &RunRecord) -> (bool, String) {
    let detail = &event["detail"];
    let content_free = detail.as_object().is_some_and(|d| {
        d.keys()
            .all(|k| ["workspace", "task_id", "run_id", "scheduled_time", "status"].contains(&k.as_str()))
    });
    let ok = content_free && detail["run_id"] == record.run_id.as_str();
    let text = format!(
        "`{}` event from {} {place}: run {} {}{}",
        event["detail-type"].as_str().unwrap_or("?"),
        event["source"].as_str().unwrap_or("?"),
        detail["run_id"].as_str().unwrap_or("?"),
        detail["status"].as_str().unwrap_or("?"),
        if content_free {
            ", ids and status only"
        } else {
            "; it carries more than ids and status"
        }
    );
    (ok, text)
}

/// Steps 3 and 4 from what was seen.
fn event_steps(record: &RunRecord, on_bus: Option<&Value>, on_queue: Option<&Value>) -> [Step; 2] {
    let bus = match on_bus {
        Some(event) => {
            let (ok, text) = described(event, "on the bus", record);
            step("bus", ok, text)
        }
        None => step(
            "bus",
            false,
            "no event for it on the bus: check the notification pipe (RunFinishedPipe, RunFinishedDeadLetterAlarm)"
                .to_owned(),
        ),
    };
    let queue = match (on_queue, on_bus) {
        (Some(event), _) => {
            let (ok, text) = described(event, "on RunFinishedQueue", record);
            step("queue", ok, text)
        }
        (None, Some(_)) => Step {
            step: "queue",
            verdict: "not seen",
            detail: "not seen on RunFinishedQueue: a consumer of the queue (the platform's backend) took it first, \
                     or RunFinishedRule did not deliver it (RunFinishedQueueDeadLetterAlarm)"
                .to_owned(),
            at: render::utc(Utc::now()),
        },
        (None, None) => step("queue", false, "no event for it on RunFinishedQueue either".to_owned()),
    };
    [bus, queue]
}

impl Report for VerifyReport {
    fn human(&self) -> String {
        let mut table = render::table(&["step", "", "what was seen", "at (UTC)"]);
        for s in &self.steps {
            table.add_row(vec![
                s.step.to_owned(),
                s.verdict.to_owned(),
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
            "Verified end to end: create, schedule, run, record, notification, a chain past loop detection, traces.\n"
        } else {
            "NOT verified: see the failed step.\n"
        });
        if self.steps.iter().any(|s| s.verdict == "off") {
            text.push_str("(The stack sends no traces: nothing to find in aws/spans.)\n");
        }
        if self.steps.iter().any(|s| s.verdict == "not seen") {
            text.push_str("(Its event reached the bus; RunFinishedQueue's copy was not seen, as said above.)\n");
        }
        text
    }

    fn findings(&self) -> bool {
        !self.verified
    }
}
