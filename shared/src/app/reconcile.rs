//! The reconcile use case (SPEC §6): a webhook event or a scheduled pass
//! brings one install's tasks in step with what its server declares.
//!
//! Work for one install is serialised by the caller (the FIFO queue's message
//! group); writes are conditional on the version read all the same, since an
//! admin may write concurrently: a conflict re-reads and plans again. A
//! failure to read the server changes nothing (withdrawal is decided only
//! from a `prompts/list` that answered). Each written task's Scheduler
//! schedule is put in step with its approved schedule and state, from a read
//! after the write ([`put_in_step`]), so racing writers converge on the
//! task's latest version. Only a workspace install's server is read; an
//! install event whose URL or credential breaks the deployment's
//! [`InstallRules`] is refused at intake (400) and again here. The daily
//! pass (and the pass at deploy) only queues work: pages of installs and
//! of the reminders that can still run, each one message that reads one
//! page through an index and queues the next (SPEC §13).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use crate::app::overdue::{CheckSettings, adopt, check_shard};

use crate::domain::connector::reconcile::{self, ServerView, Write};
use crate::domain::task::edit::Decision;
use crate::domain::task::install::{Install, InstallStatus, Stamp};
use crate::domain::task::limits::Ceilings;
use crate::domain::task::{Provenance, Task, TaskId};
use serde::{Deserialize, Serialize};

use crate::app::change::{StepError, put_in_step};
use crate::app::mcp_step;
pub use crate::domain::connector::webhook::InstallRules;
use crate::domain::connector::webhook::{Event, InstallRef, WebhookError, WebhookSecret};
use crate::domain::run::definition::ScheduleDefinition;
use crate::domain::task::{TaskKind, TaskState};
use crate::ports::{
    Connectors, Cursor, DueIndex, McpError, McpSession, QueueError, ReminderStore, RunStore, ScheduleError, Schedules,
    StoreError, TaskCatalog, TaskStore, Versioned, WorkQueue,
};
use crate::trace::{Tracer, key};

/// A reconcile work item on the FIFO queue: a platform event, or a pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Work {
    Event(Stamped),
    Pass(Pass),
}

/// A platform event as queued, with its place in its install's order
/// (SPEC §6, `install::Stamp`): when it happened (the body's
/// `occurred_at`, or when its `webhook-id` was first seen) and that id. A
/// lifecycle event that comes before the last one applied to its install
/// (a platform retry of `connector.installed` after the uninstall) is
/// recorded on the install and ignored. Items queued by the release before
/// carry the webhook's send time and no id, and are ordered by that time;
/// items older still carry nothing and apply as they come.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamped {
    #[serde(flatten)]
    pub event: Event,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<String>,
}

impl Stamped {
    pub fn new(event: Event, event_at: Option<DateTime<Utc>>) -> Self {
        Self {
            event,
            event_at,
            webhook_id: None,
        }
    }

    /// The event at `at`, delivered under `webhook_id`.
    pub fn delivered(event: Event, at: DateTime<Utc>, webhook_id: &str) -> Self {
        Self {
            event,
            event_at: Some(at),
            webhook_id: Some(webhook_id.to_owned()),
        }
    }

    /// Its place in its install's order, when it has one.
    pub fn stamp(&self) -> Option<Stamp> {
        self.event_at.map(|at| Stamp {
            at,
            id: self.webhook_id.clone().unwrap_or_default(),
        })
    }
}

impl std::ops::Deref for Stamped {
    type Target = Event;
    fn deref(&self) -> &Event {
        &self.event
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Pass {
    /// Reconcile one install.
    #[serde(rename = "reconcile.install")]
    Install { workspace: String, install: InstallRef },
    /// Start the daily pass (daily, at deploy, by an operator): queue its
    /// first page of installs and of reminders.
    #[serde(rename = "reconcile.all")]
    All,
    /// One page of installed connectors: queue a pass for each, then the
    /// next page.
    #[serde(rename = "reconcile.installs")]
    Installs {
        /// When the pass started (Unix milliseconds): its pages' dedup ids.
        pass: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Cursor>,
    },
    /// One page of one shard of the reminders that can still run: put
    /// back each schedule that is out of step, then queue the shard's next
    /// page (each shard in its own message group).
    #[serde(rename = "reconcile.reminders")]
    Reminders {
        pass: i64,
        shard: u8,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        after: Option<Cursor>,
    },
    /// The missed-occurrence check (SPEC §14, `app::overdue`), on its own
    /// schedule: queues one [`Pass::OverdueShard`] per family and shard.
    #[serde(rename = "overdue.check")]
    Overdue,
    /// The check of one shard of one family (`app::overdue::check_shard`),
    /// in a message group of its own, so the shards are checked side by side.
    #[serde(rename = "overdue.shard")]
    OverdueShard {
        family: crate::ports::Family,
        shard: u8,
        /// When the check that queued it started (Unix milliseconds): its
        /// deduplication id.
        check: i64,
        /// How many times this shard's check went on where it stopped in
        /// this period (at most [`CHECK_HOPS`]).
        #[serde(default, skip_serializing_if = "is_zero")]
        hop: u8,
    },
    /// A chain of `hops` messages through this queue, as the pass's pages
    /// travel, each queued by the invocation of the one before and each
    /// recording how far the chain came (`TaskCatalog::record_probe`): `sat
    /// verify` sends one on a deployed stack to see a chain longer than
    /// Lambda's recursive loop detection lets through unless the function
    /// allows recursion (about 16 hops).
    #[serde(rename = "reconcile.probe")]
    Probe {
        /// Its id: 1 to [`MAX_PROBE_ID`] ASCII letters, digits and `-`.
        probe: String,
        /// This message's hop, from 1.
        hop: u8,
        /// The chain's length, at most [`MAX_PROBE_HOPS`].
        hops: u8,
    },
}

/// The longest probe chain a probe message may ask for.
pub const MAX_PROBE_HOPS: u8 = 40;
/// The longest probe id.
pub const MAX_PROBE_ID: usize = 64;

/// Whether a probe message is one the worker follows: a bounded id and
/// chain, and a hop within it.
pub fn probe_is_valid(probe: &str, hop: u8, hops: u8) -> bool {
    (1..=MAX_PROBE_ID).contains(&probe.len())
        && probe.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && (1..=MAX_PROBE_HOPS).contains(&hops)
        && (1..=hops).contains(&hop)
}

/// How many times a shard's check that ran out of time goes on at once
/// (queues itself again from where it stopped) within one period, before
/// it waits for the next: well under Lambda's recursive loop detection
/// (about 16 hops of one chain), and each period starts a chain of its own.
pub const CHECK_HOPS: u8 = 8;

fn is_zero(n: &u8) -> bool {
    *n == 0
}

/// The most items one pass message reads (SPEC §13: at most 100).
pub const PASS_PAGE: usize = 100;
/// The FIFO message group of the daily pass's pages.
const PASS_GROUP: &str = "pass";

/// The FIFO message group of an install's work.
pub fn group(workspace: &str, install_id: &str) -> String {
    format!("{workspace}/{install_id}")
}

/// The answer to a webhook delivery (SPEC §6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookAnswer {
    /// 202: queued.
    Accepted,
    /// 200: this id was delivered before; nothing more happens.
    Duplicate,
    /// 401: bad or missing signature; nothing happens.
    Unauthorized(WebhookError),
    /// 400: the body is not an event; nothing happens.
    Malformed(String),
}

impl WebhookAnswer {
    pub fn status(&self) -> u16 {
        match self {
            WebhookAnswer::Accepted => 202,
            WebhookAnswer::Duplicate => 200,
            WebhookAnswer::Unauthorized(_) => 401,
            WebhookAnswer::Malformed(_) => 400,
        }
    }
}

/// A webhook delivery's headers, as received.
#[derive(Debug, Clone, Default)]
pub struct Delivery<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub body: &'a [u8],
}

impl From<StepError> for ReconcileError {
    fn from(e: StepError) -> Self {
        match e {
            StepError::Store(e) => ReconcileError::Store(e),
            StepError::Schedule(e) => ReconcileError::Schedule(e),
            StepError::Unschedulable(id, why) => ReconcileError::Unschedulable(id, why),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

/// Takes in one webhook: authenticate, parse, check what an install names
/// against the deployment's rules, drop a repeated id, queue. The queue's
/// deduplication id is the webhook id, so a delivery retried after a
/// failure between queueing and recording the id queues once.
pub async fn intake<S: TaskCatalog, Q: WorkQueue>(
    store: &S,
    queue: &Q,
    secret: &WebhookSecret,
    rules: &InstallRules,
    delivery: &Delivery<'_>,
    now: DateTime<Utc>,
) -> Result<WebhookAnswer, IntakeError> {
    if let Err(e) = secret.verify(delivery.id, delivery.timestamp, delivery.signature, delivery.body, now) {
        tracing::warn!(reason = %e, "webhook refused");
        return Ok(WebhookAnswer::Unauthorized(e));
    }
    let event = match Event::parse(delivery.body) {
        Ok(event) => event,
        Err(reason) => return Ok(WebhookAnswer::Malformed(reason)),
    };
    if let Err(reason) = event.admissible(rules) {
        tracing::warn!(
            workspace = event.workspace(),
            install = event.install_id(),
            reason = %reason,
            "webhook refused: the install names what this deployment does not allow"
        );
        return Ok(WebhookAnswer::Malformed(reason));
    }
    let occurred_at = match crate::domain::connector::webhook::occurred_at(delivery.body) {
        Ok(occurred_at) => occurred_at,
        Err(reason) => return Ok(WebhookAnswer::Malformed(reason)),
    };
    let id = delivery.id.unwrap_or_default();
    if store.seen_delivery(id).await? {
        return Ok(WebhookAnswer::Duplicate);
    }
    // When the change happened; without it, now: the first time this id
    // is seen (a retry of it is a duplicate above).
    let stamped = Stamped::delivered(event.clone(), occurred_at.unwrap_or(now), id);
    let body = serde_json::to_string(&Work::Event(stamped)).unwrap_or_default();
    queue
        .enqueue(&group(event.workspace(), event.install_id()), id, &body)
        .await?;
    store.record_delivery(id, now).await?;
    tracing::info!(
        webhook_id = id,
        workspace = event.workspace(),
        install = event.install_id(),
        "webhook queued"
    );
    Ok(WebhookAnswer::Accepted)
}

/// Conflicting writes are re-planned this many times before the pass fails
/// (and its message comes back).
const ATTEMPTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("reading the server of install {install}: {source}")]
    Mcp {
        install: String,
        #[source]
        source: McpError,
    },
    #[error("install {0}'s tasks kept changing under reconcile")]
    Contended(String),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("not a reconcile work item: {0}")]
    Malformed(String),
    #[error("task {0} has a schedule EventBridge cannot take: {1}")]
    Unschedulable(String, String),
}

/// What a pass did, for logs and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// change kind -> count
    pub changes: BTreeMap<String, u32>,
    /// The missed-occurrence check's finding: how many occurrences it
    /// reported (`None`: this work was no check).
    pub overdue: Option<usize>,
    /// prompt -> why its declaration was refused
    pub refused: BTreeMap<String, String>,
    pub tasks_written: u32,
    /// One shard's missed-occurrence check: whether its deadline came
    /// first, and the age of the backlog it left (`None`: no check).
    pub overdue_check: Option<CheckFigures>,
    /// The check period's expiry of lapsed approval requests: the age in
    /// seconds of the oldest it left lapsed (`None`: no expiry ran, or it
    /// could not read them).
    pub approvals_backlog: Option<i64>,
}

/// What one shard's missed-occurrence check reports for its metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckFigures {
    pub unfinished: bool,
    pub backlog_seconds: i64,
    /// Tasks the check could not judge (`overdue::Checked::unjudged`).
    pub unjudged: usize,
}

impl Summary {
    fn count(&mut self, writes: &[Write]) {
        for write in writes {
            self.tasks_written += 1;
            for change in &write.changes {
                *self.changes.entry(change.kind()).or_default() += 1;
            }
        }
    }
}

pub struct Reconciler<S, G, C, Q> {
    store: S,
    schedules: G,
    connectors: C,
    queue: Q,
    ceilings: Ceilings,
    rules: InstallRules,
    overdue: CheckSettings,
    tracer: Tracer,
}

/// A work item's kind, for its span's name.
fn work_kind(work: &Work) -> &'static str {
    match work {
        Work::Event(Stamped {
            event: Event::Installed { .. },
            ..
        }) => "connector.installed",
        Work::Event(Stamped {
            event: Event::Connected { .. },
            ..
        }) => "connector.connected",
        Work::Event(Stamped {
            event: Event::Uninstalled { .. },
            ..
        }) => "connector.uninstalled",
        Work::Event(Stamped {
            event: Event::ListChanged { .. },
            ..
        }) => "prompts.list_changed",
        Work::Pass(Pass::Install { .. }) => "install",
        Work::Pass(Pass::All) => "all",
        Work::Pass(Pass::Installs { .. }) => "installs page",
        Work::Pass(Pass::Reminders { .. }) => "reminders page",
        Work::Pass(Pass::Overdue) => "overdue check",
        Work::Pass(Pass::OverdueShard { .. }) => "overdue shard",
        Work::Pass(Pass::Probe { .. }) => "probe",
    }
}

/// `error.type` of a failed work item: its error's kind.
fn error_type(error: &ReconcileError) -> &'static str {
    match error {
        ReconcileError::Store(_) => "store_error",
        ReconcileError::Schedule(_) => "schedule_error",
        ReconcileError::Mcp { .. } => "mcp_error",
        ReconcileError::Contended(_) => "contended",
        ReconcileError::Queue(_) => "queue_error",
        ReconcileError::Malformed(_) => "malformed",
        ReconcileError::Unschedulable(..) => "unschedulable",
    }
}

/// How long one missed-occurrence check may take: within a work item's
/// deadline ([`MESSAGE_SECONDS`]), so it ends by itself.
pub const CHECK_SECONDS: u64 = 25;

/// The most one work item may take in the worker: a server that hangs
/// fails its own work at this deadline (every MCP request has its own, and
/// so has a whole list read), never the invocation.
pub const MESSAGE_SECONDS: u64 = 40;
const _: () = assert!(CHECK_SECONDS < MESSAGE_SECONDS);
/// Kept back at the end of a worker invocation to answer its batch.
pub const ANSWER_RESERVE_MS: u64 = 2_000;
/// The work queue's batch size (template.yaml, the worker's `Work` event).
/// The worker works a batch's message groups side by side, so the longest
/// a batch can take is one group holding all of it, every message to its
/// deadline: the worker's timeout is at least [`worker_seconds_needed`]
/// (a test reads the template), so no message is handed back unworked for
/// lack of time, and a hand-back, which SQS counts toward
/// `maxReceiveCount`, only ever follows a failure of its own install.
pub const BATCH_SIZE: u64 = 10;

/// The least timeout the worker needs for [`BATCH_SIZE`] messages of one
/// group, each to its deadline, and its answer.
pub const fn worker_seconds_needed() -> u64 {
    BATCH_SIZE * MESSAGE_SECONDS + ANSWER_RESERVE_MS.div_ceil(1000)
}

impl<
    S: TaskCatalog + TaskStore + ReminderStore + DueIndex + RunStore + crate::ports::CallApprovals,
    G: Schedules,
    C: Connectors,
    Q: WorkQueue,
> crate::trace::Traced for Reconciler<S, G, C, Q>
{
    fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    fn tracer_mut(&mut self) -> &mut Tracer {
        &mut self.tracer
    }
}

impl<
    S: TaskCatalog + TaskStore + ReminderStore + DueIndex + RunStore + crate::ports::CallApprovals,
    G: Schedules,
    C: Connectors,
    Q: WorkQueue,
> Reconciler<S, G, C, Q>
{
    pub fn new(store: S, schedules: G, connectors: C, queue: Q, ceilings: Ceilings, rules: InstallRules) -> Self {
        Self {
            store,
            schedules,
            connectors,
            queue,
            ceilings,
            rules,
            overdue: CheckSettings {
                catch_up: Duration::seconds(crate::config::DEFAULT_CATCH_UP_SECONDS),
                retention: Duration::days(crate::config::DEFAULT_RETENTION_DAYS),
                write: true,
            },
            tracer: Tracer::off(),
        }
    }

    /// The missed-occurrence check's window and its records' retention.
    pub fn with_overdue(mut self, catch_up: Duration, retention: Duration) -> Self {
        self.overdue.catch_up = catch_up;
        self.overdue.retention = retention;
        self
    }

    pub fn connectors(&self) -> &C {
        &self.connectors
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn queue(&self) -> &Q {
        &self.queue
    }

    pub fn schedules(&self) -> &G {
        &self.schedules
    }

    /// Does one work item from the queue, the root of its trace
    /// (`reconcile <kind>`): what it wrote and refused as counts on it.
    pub async fn work(&self, body: &str, now: DateTime<Utc>) -> Result<Summary, ReconcileError> {
        let work: Work = match serde_json::from_str(body) {
            Ok(work) => work,
            Err(e) => {
                let span = self.tracer.reconcile("work");
                span.fail("malformed");
                span.end();
                return Err(ReconcileError::Malformed(e.to_string()));
            }
        };
        let span = self.tracer.reconcile(work_kind(&work));
        let named = match &work {
            Work::Event(event) => Some((event.workspace().to_owned(), event.install_id().to_owned())),
            Work::Pass(Pass::Install { workspace, install }) => Some((workspace.clone(), install.id.clone())),
            Work::Pass(_) => None,
        };
        if let Some((workspace, install_id)) = named {
            span.set(key::WORKSPACE, workspace);
            span.set(key::INSTALL_ID, install_id);
        }
        let worked = span.run(Box::pin(self.work_on(work, now))).await;
        match &worked {
            Ok(summary) => {
                span.set(key::TASKS_WRITTEN, i64::from(summary.tasks_written));
                span.set(key::DECLARATIONS_REFUSED, summary.refused.len() as i64);
                if let Some(missed) = summary.overdue {
                    span.set(key::OCCURRENCES_OVERDUE, missed as i64);
                }
            }
            Err(error) => span.fail(error_type(error)),
        }
        span.end();
        worked
    }

    async fn work_on(&self, work: Work, now: DateTime<Utc>) -> Result<Summary, ReconcileError> {
        match work {
            Work::Event(stamped) => self.apply_stamped(&stamped, now).await,
            Work::Pass(Pass::Install { workspace, install }) => {
                Box::pin(self.reconcile_install(&workspace, &install.id, now)).await
            }
            Work::Pass(Pass::All) => {
                self.queue_pass(now).await?;
                Ok(Summary::default())
            }
            Work::Pass(Pass::Installs { pass, after }) => {
                self.installs_page(pass, after.as_ref()).await?;
                Ok(Summary::default())
            }
            Work::Pass(Pass::Reminders { pass, shard, after }) => {
                self.reminders_page(pass, shard, after.as_ref(), now).await?;
                Ok(Summary::default())
            }
            Work::Pass(Pass::Overdue) => {
                self.queue_overdue_shards(now).await?;
                // Gated calls' requests that lapsed end their occurrences
                // (SPEC §15) with each period of the check; a failure waits
                // for the next period and never holds the check's shards.
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(CHECK_SECONDS);
                let approvals_backlog = match crate::app::approvals::expire_lapsed(
                    &self.store,
                    now,
                    self.overdue.retention,
                    deadline,
                )
                .await
                {
                    Ok(expiry) => {
                        if expiry.ended > 0 {
                            tracing::info!(
                                expired = expiry.ended,
                                "occurrences whose approval requests lapsed ended expired"
                            );
                        }
                        Some(expiry.backlog_seconds)
                    }
                    Err(error) => {
                        tracing::warn!(error = %crate::error_chain(&error), "lapsed approval requests were not read; the next period tries again");
                        None
                    }
                };
                Ok(Summary {
                    approvals_backlog,
                    ..Summary::default()
                })
            }
            Work::Pass(Pass::OverdueShard {
                family,
                shard,
                check,
                hop,
            }) => self.check_overdue_shard(family, shard, check, hop, now).await,
            Work::Pass(Pass::Probe { probe, hop, hops }) => {
                self.probe(&probe, hop, hops, now).await?;
                Ok(Summary::default())
            }
        }
    }

    /// One hop of a probe chain: records how far it came, then queues the
    /// next hop until the chain is as long as it asked. A probe out of its
    /// bounds is dropped, said in the log.
    async fn probe(&self, probe: &str, hop: u8, hops: u8, now: DateTime<Utc>) -> Result<(), ReconcileError> {
        if !probe_is_valid(probe, hop, hops) {
            tracing::warn!(hop, hops, "a probe out of its bounds: dropped");
            return Ok(());
        }
        self.store.record_probe(probe, hop, now).await?;
        if hop < hops {
            self.enqueue_pass(&Pass::Probe {
                probe: probe.to_owned(),
                hop: hop + 1,
                hops,
            })
            .await?;
        }
        tracing::info!(hop, hops, "a probe's hop");
        Ok(())
    }

    /// The missed-occurrence check's period: one message a shard of each
    /// family, each its own invocation.
    async fn queue_overdue_shards(&self, now: DateTime<Utc>) -> Result<(), ReconcileError> {
        let check = now.timestamp_millis();
        for family in crate::ports::Family::ALL {
            for shard in 0..crate::domain::run::definition::REMINDER_SHARDS {
                self.enqueue_pass(&Pass::OverdueShard {
                    family,
                    shard,
                    check,
                    hop: 0,
                })
                .await?;
            }
        }
        Ok(())
    }

    /// One shard's missed-occurrence check, within its invocation's time;
    /// out of time, it goes on from its cursor now, a few times a period,
    /// rather than a whole period later.
    async fn check_overdue_shard(
        &self,
        family: crate::ports::Family,
        shard: u8,
        check: i64,
        hop: u8,
        now: DateTime<Utc>,
    ) -> Result<Summary, ReconcileError> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(CHECK_SECONDS);
        let checked = check_shard(&self.store, self.overdue, family, shard, now, deadline).await?;
        if !checked.complete && hop < CHECK_HOPS {
            self.enqueue_pass(&Pass::OverdueShard {
                family,
                shard,
                check,
                hop: hop + 1,
            })
            .await?;
        }
        tracing::info!(
            family = family.as_str(),
            shard,
            tasks = checked.tasks,
            missed = checked.missed.len(),
            complete = checked.complete,
            backlog_seconds = checked.backlog.num_seconds(),
            unjudged = checked.unjudged.len(),
            "missed-occurrence check"
        );
        Ok(Summary {
            overdue: Some(checked.missed.len()),
            overdue_check: Some(CheckFigures {
                unfinished: !checked.complete,
                backlog_seconds: checked.backlog.num_seconds(),
                unjudged: checked.unjudged.len(),
            }),
            ..Summary::default()
        })
    }

    /// The daily pass, at deploy too: it only queues its first pages
    /// (SPEC §13), so its work does not grow with the table; each page is
    /// one message (`Pass::Installs`, `Pass::Reminders`) that reads at most
    /// [`PASS_PAGE`] items through an index and queues the next.
    pub async fn reconcile_all(&self, now: DateTime<Utc>) -> Result<usize, ReconcileError> {
        let span = self.tracer.reconcile("all");
        let queued = span.run(self.queue_pass(now)).await;
        if let Err(error) = &queued {
            span.fail(error_type(error));
        }
        span.end();
        queued
    }

    async fn queue_pass(&self, now: DateTime<Utc>) -> Result<usize, ReconcileError> {
        let pass = now.timestamp_millis();
        self.enqueue_pass(&Pass::Installs { pass, after: None }).await?;
        // Each shard's pages run in their own message group: in parallel
        // across the worker's concurrency, in order within a shard.
        for shard in 0..crate::domain::run::definition::REMINDER_SHARDS {
            self.enqueue_pass(&Pass::Reminders {
                pass,
                shard,
                after: None,
            })
            .await?;
        }
        tracing::info!("queued the daily pass's first pages");
        Ok(1 + usize::from(crate::domain::run::definition::REMINDER_SHARDS))
    }

    /// Queues a page of the pass. Its dedup id names the pass and the page
    /// (hashed: SQS takes at most 128 characters), so a page message worked
    /// twice (a redelivery) queues its next page once.
    async fn enqueue_pass(&self, page: &Pass) -> Result<(), QueueError> {
        use sha2::{Digest, Sha256};
        let body = serde_json::to_string(&Work::Pass(page.clone())).unwrap_or_default();
        let dedup = hex::encode(Sha256::digest(body.as_bytes()));
        let group = match page {
            Pass::Reminders { shard, .. } => format!("{PASS_GROUP}/reminders/{shard:02}"),
            Pass::OverdueShard { family, shard, .. } => format!("overdue/{}/{shard:02}", family.as_str()),
            Pass::Probe { probe, .. } => format!("probe/{probe}"),
            _ => PASS_GROUP.to_owned(),
        };
        self.queue.enqueue(&group, &dedup, &body).await
    }

    /// Records on its install why a work item failed (its server hung,
    /// refused or could not be read), so an operator reads it there and no
    /// other install's record changes; nothing for work that names no
    /// install.
    pub async fn record_failure(&self, body: &str, reason: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        let named = match serde_json::from_str::<Work>(body) {
            Ok(Work::Event(stamped)) => Some((stamped.workspace().to_owned(), stamped.install_id().to_owned())),
            Ok(Work::Pass(Pass::Install { workspace, install })) => Some((workspace, install.id)),
            _ => None,
        };
        let Some((workspace, install_id)) = named else {
            return Ok(());
        };
        if let Some(mut install) = TaskCatalog::install(&self.store, &workspace, &install_id).await? {
            install.last_error = Some(crate::domain::run::occurrence::cap_reason(&format!(
                "{}: {reason}",
                crate::domain::schedule::format_utc(now)
            )));
            self.store.put_install(&install).await?;
        }
        Ok(())
    }

    /// One page of installed connectors: a pass for each, in its install's
    /// group, then the next page. Returns how many were queued.
    pub async fn installs_page(&self, pass: i64, after: Option<&Cursor>) -> Result<usize, ReconcileError> {
        let page = self.store.installed_page(after, PASS_PAGE).await?;
        for cursor in &page.items {
            let install = Pass::Install {
                workspace: cursor.workspace.clone(),
                install: InstallRef { id: cursor.id.clone() },
            };
            let body = serde_json::to_string(&Work::Pass(install)).unwrap_or_default();
            let group = group(&cursor.workspace, &cursor.id);
            let dedup = format!("pass-{pass}-{group}");
            self.queue.enqueue(&group, &dedup, &body).await?;
        }
        if let Some(next) = page.next {
            self.enqueue_pass(&Pass::Installs {
                pass,
                after: Some(next),
            })
            .await?;
        }
        tracing::info!(
            installs = page.items.len(),
            "queued a reconcile pass for a page of installs"
        );
        Ok(page.items.len())
    }

    /// One page of one shard of the reminders that can still run: puts
    /// back the schedule of each whose Scheduler schedule is missing or
    /// differs from its task (expression, zone or state), from a fresh read
    /// of the task, then queues the next page. A one-time schedule whose
    /// instant passed, or one whose `until` leaves no fire, deleted itself
    /// after firing: left alone. Returns how many were put back.
    pub async fn reminders_page(
        &self,
        pass: i64,
        shard: u8,
        after: Option<&Cursor>,
        now: DateTime<Utc>,
    ) -> Result<usize, ReconcileError> {
        let page = self.store.schedulable_page(shard, after, PASS_PAGE).await?;
        let mut repaired = 0;
        for task in &page.items {
            // A reminder written before it had a due time gets one.
            adopt(&self.store, task, now).await?;
            // A schedule with no fire left deleted itself after its last one.
            let passed = task.spec.schedule.is_over(now);
            if task.kind != TaskKind::Reminder
                || passed
                || matches!(task.state(), TaskState::Deleted | TaskState::Completed)
            {
                continue;
            }
            let definition = ScheduleDefinition::for_task(task)
                .map_err(|e| ReconcileError::Unschedulable(task.task_id.to_string(), e.to_string()))?;
            let current = self.schedules.status(&definition.name).await?;
            if current.as_ref().is_some_and(|c| definition.matches(c)) {
                continue;
            }
            tracing::info!(task_id = %task.task_id, missing = current.is_none(), "reminder schedule out of step");
            Box::pin(put_in_step(&self.store, &self.schedules, task)).await?;
            repaired += 1;
        }
        if let Some(next) = page.next {
            self.enqueue_pass(&Pass::Reminders {
                pass,
                shard,
                after: Some(next),
            })
            .await?;
        }
        if repaired > 0 {
            tracing::warn!(repaired, shard, "reminder schedules were out of step and were put back");
        }
        Ok(repaired)
    }

    /// Applies one platform event as queued: a lifecycle event
    /// (`connector.installed`, `connector.uninstalled`) that comes before the
    /// last one applied to its install is stale: recorded on the install
    /// and ignored; an applied one leaves its place on the install, and an
    /// uninstall of an install not seen yet leaves a tombstone
    /// (`Install::tombstone`) that its earlier install respects.
    pub async fn apply_stamped(&self, stamped: &Stamped, now: DateTime<Utc>) -> Result<Summary, ReconcileError> {
        let lifecycle = matches!(stamped.event, Event::Installed { .. } | Event::Uninstalled { .. });
        let Some(stamp) = stamped.stamp().filter(|_| lifecycle) else {
            return self.apply(&stamped.event, now).await;
        };
        let (workspace, install_id) = (stamped.workspace(), stamped.install_id());
        let known = TaskCatalog::install(&self.store, workspace, install_id).await?;
        if let Some(mut known) = known.filter(|k| stamp.is_stale(k.lifecycle().as_ref())) {
            let what = match stamped.event {
                Event::Installed { .. } => "connector.installed",
                _ => "connector.uninstalled",
            };
            let last = known
                .lifecycle_at
                .map(crate::domain::schedule::format_utc)
                .unwrap_or_default();
            tracing::warn!(event = what, occurred_at = %stamp.at, last = %last, "a stale lifecycle event is ignored");
            known.last_error = Some(format!(
                "{} ignored a stale {what} of {} (the install's last lifecycle event was of {last})",
                crate::domain::schedule::format_utc(now),
                crate::domain::schedule::format_utc(stamp.at),
            ));
            self.store.put_install(&known).await?;
            let mut summary = Summary::default();
            summary.changes.insert("stale_event_ignored".to_owned(), 1);
            return Ok(summary);
        }
        let summary = self.apply(&stamped.event, now).await?;
        // The applied event's place, for a later-arriving earlier one to be
        // told stale; an uninstall of an unknown install leaves a tombstone.
        match TaskCatalog::install(&self.store, workspace, install_id).await? {
            Some(mut applied) if applied.lifecycle().is_none_or(|last| last < stamp) => {
                applied.stamp(&stamp);
                self.store.put_install(&applied).await?;
            }
            Some(_) => {}
            None if matches!(stamped.event, Event::Uninstalled { .. }) => {
                tracing::info!("an uninstall of an install not seen yet leaves a tombstone");
                self.store
                    .put_install(&Install::tombstone(workspace, install_id, &stamp, now))
                    .await?;
            }
            None => {}
        }
        Ok(summary)
    }

    /// Applies one platform event.
    #[tracing::instrument(skip_all, fields(workspace = event.workspace(), install = event.install_id()))]
    pub async fn apply(&self, event: &Event, now: DateTime<Utc>) -> Result<Summary, ReconcileError> {
        match event {
            Event::Installed { workspace, install } => {
                // Checked at intake; checked again, since a queued item is
                // not a proof of where it came from.
                if let Err(reason) = event.admissible(&self.rules) {
                    tracing::warn!(reason = %reason, "install refused: nothing recorded");
                    return Ok(Summary::default());
                }
                // An install id names one server for good: re-declaring it as
                // another would run the approved tasks of the first on the
                // second's URL, with no approval.
                let known = TaskCatalog::install(&self.store, workspace, &install.id).await?;
                // An uninstall's tombstone names no server yet.
                if let Some(known) = &known
                    && !known.is_tombstone()
                    && known.server != install.server
                {
                    tracing::warn!(
                        known = %known.server,
                        declared = %install.server,
                        "install refused: an install id cannot change its server; nothing recorded"
                    );
                    return Ok(Summary::default());
                }
                let record = Install {
                    install_id: install.id.clone(),
                    workspace: workspace.clone(),
                    server: install.server.clone(),
                    url: install.url.clone(),
                    scope: install.scope,
                    account: install.account.clone(),
                    credential_secret_arn: install.credential_secret_arn.clone(),
                    status: InstallStatus::Installed,
                    updated_at: now,
                    declaration_errors: BTreeMap::new(),
                    last_error: None,
                    lifecycle_at: known.as_ref().and_then(|k| k.lifecycle_at),
                    lifecycle_id: known.and_then(|k| k.lifecycle_id),
                };
                self.store.put_install(&record).await?;
                let mut summary = Box::pin(self.rebind(workspace, now)).await?;
                let pass = Box::pin(self.reconcile_install(workspace, &install.id, now)).await?;
                merge(&mut summary, pass);
                Ok(summary)
            }
            Event::Connected { workspace, install } | Event::ListChanged { workspace, install } => {
                Box::pin(self.reconcile_install(workspace, &install.id, now)).await
            }
            Event::Uninstalled { workspace, install } => Box::pin(self.uninstall(workspace, install, now)).await,
        }
    }

    async fn uninstall(
        &self,
        workspace: &str,
        install: &InstallRef,
        now: DateTime<Utc>,
    ) -> Result<Summary, ReconcileError> {
        if let Some(mut record) = TaskCatalog::install(&self.store, workspace, &install.id).await? {
            record.status = InstallStatus::Uninstalled;
            record.updated_at = now;
            self.store.put_install(&record).await?;
        }
        // Its own tasks stay as they are: the door skips their runs.
        Box::pin(self.rebind(workspace, now)).await
    }

    /// Places or lifts `need_unbound` on the workspace's tasks after an
    /// install came or went.
    async fn rebind(&self, workspace: &str, now: DateTime<Utc>) -> Result<Summary, ReconcileError> {
        let mut summary = Summary::default();
        for _ in 0..ATTEMPTS {
            let installs = self.installs(workspace).await?;
            let tasks = self.store.connector_tasks(workspace).await?;
            let writes = reconcile::rebind(&tasks, &installs, now);
            if self.write_all(&writes, &mut summary).await? {
                return Ok(summary);
            }
        }
        Err(ReconcileError::Contended(workspace.to_owned()))
    }

    async fn installs(&self, workspace: &str) -> Result<BTreeMap<String, Install>, StoreError> {
        Ok(self
            .store
            .workspace_installs(workspace)
            .await?
            .into_iter()
            .map(|i| (i.install_id.clone(), i))
            .collect())
    }

    /// Writes every planned task and puts its schedule; `false` if one write
    /// met a newer version (the caller re-plans).
    async fn write_all(&self, writes: &[Write], summary: &mut Summary) -> Result<bool, ReconcileError> {
        for write in writes {
            match write.before.as_deref() {
                // A change: the one path every writer takes (app::change),
                // the schedule in its declared order, put back on a lost race.
                Some(before) => {
                    // Reconcile writes connector tasks only, which never
                    // expire: no retention applies.
                    let now = write.task.updated_at;
                    let written = Box::pin(crate::app::change::commit(
                        &self.store,
                        &self.schedules,
                        before,
                        Decision::Write(Box::new(write.task.clone())),
                        now,
                        chrono::Duration::zero(),
                    ))
                    .await?;
                    if written.is_err() {
                        return Ok(false);
                    }
                }
                // A new task: inserted, then its schedule put.
                None => {
                    if self.store.write_task(write).await? == Versioned::Conflict {
                        return Ok(false);
                    }
                    Box::pin(put_in_step(&self.store, &self.schedules, &write.task)).await?;
                }
            }
            summary.count(std::slice::from_ref(write));
        }
        Ok(true)
    }

    /// Puts back the schedule of every task of this install that the pass
    /// did not write and whose schedule is missing or out of step, from a
    /// fresh read: a schedule update that failed after its task's write (by
    /// reconcile or admin) is repaired by the next pass, at the latest the
    /// daily one. One in step is left alone: a put would cost a write per
    /// task a day and start a `rate()` schedule's phase again.
    async fn repair_schedules(
        &self,
        workspace: &str,
        install_id: &str,
        written: &[Write],
        now: DateTime<Utc>,
    ) -> Result<(), ReconcileError> {
        let written: BTreeSet<&TaskId> = written.iter().map(|w| &w.task.task_id).collect();
        let tasks = self.store.connector_tasks(workspace).await?;
        let own = tasks.iter().filter(|t| {
            !written.contains(&t.task_id)
                && matches!(&t.provenance, Provenance::Connector { install_id: owner, .. } if owner == install_id)
        });
        for task in own {
            self.sync_schedule(task).await?;
            // A task written before it had a due time gets one.
            adopt(&self.store, task, now).await?;
        }
        Ok(())
    }

    async fn sync_schedule(&self, task: &Task) -> Result<(), ReconcileError> {
        let definition = ScheduleDefinition::for_task(task)
            .map_err(|e| ReconcileError::Unschedulable(task.task_id.to_string(), e.to_string()))?;
        let current = self.schedules.status(&definition.name).await?;
        if current.as_ref().is_some_and(|c| definition.matches(c)) {
            return Ok(());
        }
        tracing::info!(task_id = %task.task_id, missing = current.is_none(), "connector schedule out of step: put back");
        self.schedules.put(&definition).await?;
        Ok(())
    }

    /// What an install's server declares: its prompts and its tools' names,
    /// each MCP step traced.
    async fn read_server(
        &self,
        install: &Install,
    ) -> Result<(Vec<reconcile::ListedPrompt>, BTreeSet<String>), ReconcileError> {
        let mcp = |source| ReconcileError::Mcp {
            install: install.install_id.clone(),
            source,
        };
        let step = |method| self.tracer.mcp(method, None);
        let session = mcp_step(step("initialize"), self.connectors.connect(install))
            .await
            .map_err(mcp)?;
        let prompts = mcp_step(step("prompts/list"), session.list_prompts())
            .await
            .map_err(mcp)?;
        let tools: BTreeSet<String> = mcp_step(step("tools/list"), session.list_tools(None))
            .await
            .map_err(mcp)?
            .into_iter()
            .map(|t| t.name)
            .collect();
        Ok((prompts, tools))
    }

    /// One install's pass: read its server, plan, write. Callers box it:
    /// with the MCP session's futures inside, it is too large to nest on a
    /// thread's stack unboxed in a debug build.
    #[tracing::instrument(skip_all, fields(workspace, install = install_id))]
    pub async fn reconcile_install(
        &self,
        workspace: &str,
        install_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Summary, ReconcileError> {
        let Some(install) = TaskCatalog::install(&self.store, workspace, install_id).await? else {
            tracing::info!("unknown install: nothing to reconcile");
            return Ok(Summary::default());
        };
        if install.status != InstallStatus::Installed {
            tracing::info!("uninstalled: nothing to reconcile");
            return Ok(Summary::default());
        }
        if !install.may_own_tasks() {
            // SPEC §5: a personal install's prompts are never reconciled
            // into tasks, and its server is not even read.
            tracing::info!("personal install: its prompts are never reconciled");
            return Ok(Summary::default());
        }
        let (prompts, tools) = self.read_server(&install).await?;

        let mut summary = Summary::default();
        for _ in 0..ATTEMPTS {
            let installs = self.installs(workspace).await?;
            let every = self.store.connector_tasks(workspace).await?;
            let room = reconcile::workspace_room(&every, &install.server);
            let stored: Vec<Task> = every
                .into_iter()
                .filter(|t| matches!(&t.provenance, Provenance::Connector { server, .. } if *server == install.server))
                .collect();
            let view = ServerView {
                install: &install,
                prompts: &prompts,
                tools: &tools,
                room,
            };
            let plan = reconcile::plan(&view, &stored, &installs, &self.ceilings, now);
            if !self.write_all(&plan.writes, &mut summary).await? {
                continue;
            }
            Box::pin(self.repair_schedules(workspace, install_id, &plan.writes, now)).await?;
            if plan.refused != install.declaration_errors || install.last_error.is_some() {
                for (prompt, reason) in &plan.refused {
                    tracing::warn!(prompt = %prompt, reason = %reason, "declaration refused");
                }
                let mut updated = install.clone();
                updated.declaration_errors = plan.refused.clone();
                updated.last_error = None;
                self.store.put_install(&updated).await?;
            }
            summary.refused = plan.refused;
            tracing::info!(tasks_written = summary.tasks_written, changes = ?summary.changes, "reconciled");
            return Ok(summary);
        }
        Err(ReconcileError::Contended(install_id.to_owned()))
    }
}

fn merge(into: &mut Summary, other: Summary) {
    for (k, v) in other.changes {
        *into.changes.entry(k).or_default() += v;
    }
    into.refused.extend(other.refused);
    into.tasks_written += other.tasks_written;
}
