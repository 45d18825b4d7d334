//! The run use case (SPEC §7): one runs-queue message becomes at most one
//! effective run of its occurrence, whatever Scheduler and SQS redeliver.
//! [`Runner::deliver`] reads as these steps, each a named function with the
//! port calls it makes named beside it, one at a time, so a crash can fall
//! between any two of them:
//!
//! 1. **Door** before any read: worker flag, lateness (`domain::run::door`, no
//!    I/O). A skip is recorded (`skip_unclaimed`: `RunStore::record_unclaimed`).
//! 2. **Claim** (`claim`: `RunStore::claim`): the task read, then one
//!    transaction claims the occurrence (a lease until the function's
//!    deadline) and reserves the run's maximum against the task's period
//!    budget and its workspace's month; the claimed task is the one read.
//!    Refused, the old task says why (`refused`): finished (a duplicate:
//!    acknowledged, nothing else), running under a live lease (retry later),
//!    running under an expired lease (take over: `RunStore::take_over`),
//!    missing, or over budget (the door speaks first, after an install
//!    read); refused by the workspace's spent month, it is skipped
//!    `budget_reached` (`budget_reached`).
//! 3. **Door** again with the task (`install_of`: `RunStore::install`, the
//!    install of a connector task).
//! 4. **Procedure** (`procedure`): a reminder's instruction, or on the
//!    connector's server `Connectors::connect`, `McpSession::get_prompt`
//!    with the approved arguments at every run, and `McpSession::list_tools`
//!    (then, per bound need, `RunStore::install`, connect, `list_tools`).
//!    Any MCP error fails the run; it never withdraws the task.
//! 5. **Agent loop** (`agent_loop`): each model call (`model_call`:
//!    `Model::converse`; with a model pace, at a slot the fleet booked
//!    with `RunStore::pace_book`, `domain::run::pace`; retried while throttled)
//!    and each tool call
//!    (`tool_call`: `McpSession::call_tool`) is one step; what is offered,
//!    whether a call is allowed and when the loop stops are decided by
//!    `domain::run::agent_loop`.
//! 6. **Settle** (`settle`: `RunStore::settle`): one transaction writes the
//!    run record, finishes the claim, settles the budget to the actual cost
//!    and charges the account; it is fenced on this execution still holding
//!    the claim. A run the model kept throttled, or the pace had no slot
//!    for in its time, before any tool call is released instead (`release`:
//!    `RunStore::release`: reservation returned, claim removed, or kept as
//!    `released` carrying what earlier attempts committed) and its message
//!    goes back to the queue.
//! 7. **Notify**: the settle's run record is the outbox. The table's stream
//!    carries a succeeded or failed record to the bus through an EventBridge
//!    Pipe (`domain::run::notification`): after accounting by construction, one
//!    event per settled run, none for a skip, and nothing for a duplicate
//!    delivery or a crash after the settle to get wrong.
//!
//! A run's limits are its spec's bounded by the current `SCHEDULE_CEILINGS`;
//! a taken-over occurrence pays for the crashed attempt's reservation. The
//! run record is made in one place (`RunRecord::new`), for a skip before the
//! claim and for a settle.
//!
//! DynamoDB requests: 3 for a run (the task read, claim, settle; a
//! connector task adds its install read; with a model pace, one pace write
//! per model call, and one more after a throttle or to start or ease the
//! pace), 1 for a duplicate (the task read tells it: no write), 1 for a
//! skip at the first door (2 for a one-time reminder: its completion), 3
//! for a skip after the claim.

mod agent;
mod claim;
mod clock;
mod procedure;
mod settle;

pub use procedure::{FirstRequest, first_request};
pub(crate) use settle::{Kept, record_skip};

use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};

use crate::domain::run::agent_loop::Ended;
use crate::domain::run::door::{Facts, SkipReason, TaskFacts, Verdict, verdict};
use crate::domain::run::journal::Journal;
use crate::domain::run::occurrence::{Delivery, Outcome, RunMessage};
use crate::domain::run::pace::Pace;
use crate::domain::task::budget::Prices;
use crate::domain::task::claim::RunStatus;
use crate::domain::task::limits::Ceilings;
use crate::ports::{Clock, Connectors, Model, RunStore, StoreError, SystemClock};
use crate::trace::{self, Tracer, key};

use claim::Claiming;
use clock::RunClock;

/// What the runner reads besides its ports.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub worker_enabled: bool,
    /// `CATCH_UP_SECONDS`: deliveries later than this after their scheduled
    /// time are skipped as missed.
    pub catch_up: Duration,
    pub model_id: String,
    pub prices: Prices,
    /// `SCHEDULE_CEILINGS` as the runner reads it now: a run's limits are
    /// its spec's, bounded by these.
    pub ceilings: Ceilings,
    /// `RETENTION_DAYS`: run records, and a completed reminder, expire this
    /// long after they finish.
    pub retention: Duration,
    /// `MODEL_REQUESTS_PER_MINUTE`: the fleet's pace of model requests
    /// (`domain::run::pace`); `None`, each run only backs off when throttled.
    pub pace: Option<Pace>,
    /// `PERSON_MONTHLY_USD`: a person's monthly cap on their own reminders'
    /// cost, in each workspace; `None`, none.
    pub person_monthly_usd: Option<f64>,
    /// `APPROVAL_HOURS`: how long a gated call's request waits for an
    /// approver (`domain::run::gate`).
    pub approval_hours: i64,
}

/// Kept past the function's deadline on a lease, so a slow settle after the
/// deadline is not mistaken for a crash.
pub const LEASE_MARGIN_SECONDS: i64 = 30;
/// Left for the settle at the end of an invocation.
pub const SETTLE_RESERVE_SECONDS: i64 = 10;

/// What became of one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    Ran(RunStatus),
    Skipped(SkipReason),
    /// A delivery of an occurrence that already finished (or that another
    /// execution took over): nothing done.
    Duplicate,
    /// Not a run message: recorded for an operator and acknowledged.
    Malformed(String),
    /// Another execution is running this occurrence: deliver again later.
    Busy,
    /// The model was throttled before the run called any tool: the claim
    /// and the reservation are released, nothing is recorded, and the
    /// message goes back to the queue to run again within the catch-up window.
    ReturnToQueue,
    /// As [`Disposition::ReturnToQueue`], for a run the model pace had no
    /// slot for within its time: it goes back until the pace has room, from
    /// this instant (`redelivery::paced_return`).
    Paced(DateTime<Utc>),
    /// A delivery of an occurrence not due yet (`door::not_yet`): nothing
    /// claimed, nothing recorded, acknowledged; the occurrence's own
    /// delivery runs it.
    NotYet,
    /// The run stopped at a gated tool call: the occurrence waits for an
    /// approver (`domain::run::gate`); acknowledged, an approval sends it again.
    AwaitingApproval,
}

impl Disposition {
    /// Whether the message goes back to the queue, and after how many
    /// seconds, on its `receive_count`-th receive at `now`: busy or
    /// throttled, after the growing return (`redelivery::return_delay`);
    /// paced, when the pace has room (`redelivery::paced_return`); anything
    /// else is acknowledged (`None`). `jitter` in `[0, 1)` spreads returns.
    pub fn comes_back(&self, receive_count: u32, now: DateTime<Utc>, jitter: f64) -> Option<i32> {
        use crate::domain::run::redelivery::{paced_return, return_delay};
        match self {
            Disposition::Busy | Disposition::ReturnToQueue => Some(return_delay(receive_count, jitter)),
            Disposition::Paced(room_at) => {
                // Rounded up: a return never comes back before the room.
                let room_in = (*room_at - now).num_milliseconds().saturating_add(999) / 1000;
                Some(paced_return(receive_count, room_in, jitter))
            }
            Disposition::Ran(_)
            | Disposition::Skipped(_)
            | Disposition::Duplicate
            | Disposition::Malformed(_)
            | Disposition::NotYet
            | Disposition::AwaitingApproval => None,
        }
    }
}

/// The first wait after a throttled model call; it doubles up to
/// [`THROTTLE_BACKOFF_CAP_MS`], each wait jittered (half fixed, half random).
pub const THROTTLE_BACKOFF_MS: u64 = 200;
pub const THROTTLE_BACKOFF_CAP_MS: u64 = 4000;

/// The wait before retry `attempt` (0-based) of a throttled call.
fn backoff(attempt: u32) -> StdDuration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = THROTTLE_BACKOFF_MS
        .saturating_mul(1 << attempt.min(10))
        .min(THROTTLE_BACKOFF_CAP_MS);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let random = hasher.finish() % (ceiling / 2 + 1);
    StdDuration::from_millis(ceiling / 2 + random)
}

/// A transient failure: the message is returned to the queue.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The log line of a delivery more than two minutes early (`door::not_yet`).
const NOT_YET: &str = "a delivery of an occurrence not due yet: not run, nothing claimed or recorded";

impl Disposition {
    /// The delivery's outcome as a code, for its span.
    pub fn code(&self) -> String {
        match self {
            Disposition::Ran(status) => format!("ran:{}", status.as_str()),
            Disposition::Skipped(reason) => format!("skipped:{}", reason.code()),
            Disposition::Duplicate => "duplicate".into(),
            Disposition::Malformed(_) => "malformed".into(),
            Disposition::Busy => "busy".into(),
            Disposition::ReturnToQueue => "returned".into(),
            Disposition::Paced(_) => "paced".into(),
            Disposition::NotYet => "not_yet".into(),
            Disposition::AwaitingApproval => "awaiting_approval".into(),
        }
    }
}

pub struct Runner<S, M, C> {
    store: S,
    model: M,
    connectors: C,
    settings: RunSettings,
    tracer: Tracer,
    /// What a delivery's time moves on by while it runs ([`RunClock`]):
    /// the wall clock unless [`Runner::with_clock`] hands in another.
    clock: std::sync::Arc<dyn Clock>,
    /// Each pace lane's next free slot as this process last saw it (ms; 0
    /// for never), by `agent::lane_index`: which write a booking tries
    /// first (`pace::first_try`), and whether it needs one (`pace::seen_full`).
    pace_seen: [std::sync::atomic::AtomicI64; 2],
    /// The same for workspaces' credits (`domain::run::pace`, "Workspaces'
    /// shares"), by item id; bounded (`agent::SHARES_SEEN`).
    shares_seen: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

/// The delivery's ids on its log span and its trace span.
fn label(span: &tracing::Span, trace: &trace::Span, occ: &Delivery) {
    span.record("task_id", occ.task_id.as_str());
    span.record("workspace", occ.message.workspace.as_str());
    span.record("occurrence", occ.key.as_str());
    trace.set(key::TASK_ID, occ.task_id.to_string());
    trace.set(key::WORKSPACE, occ.message.workspace.clone());
    trace.set(key::OCCURRENCE, occ.key.clone());
}

impl<S: RunStore, M: Model, C: Connectors> crate::trace::Traced for Runner<S, M, C> {
    fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    fn tracer_mut(&mut self) -> &mut Tracer {
        &mut self.tracer
    }
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    pub fn new(store: S, model: M, connectors: C, settings: RunSettings) -> Self {
        Self {
            store,
            model,
            connectors,
            settings,
            tracer: Tracer::off(),
            clock: std::sync::Arc::new(SystemClock),
            pace_seen: [
                std::sync::atomic::AtomicI64::new(0),
                std::sync::atomic::AtomicI64::new(0),
            ],
            shares_seen: std::sync::Mutex::default(),
        }
    }

    /// The clock a delivery's time moves on by while it runs (a test's or
    /// the simulation's virtual one).
    #[must_use]
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn connectors(&self) -> &C {
        &self.connectors
    }

    /// Handles one runs-queue message at `now`, in an invocation that must
    /// end by `deadline`: the steps of the module doc, in order, in the
    /// delivery's span (the root of its trace, `crate::trace`).
    pub async fn deliver(
        &self,
        message_id: &str,
        body: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<Disposition, RunError> {
        let span = self.tracer.delivery(message_id);
        let delivered = span.run(self.deliver_in(&span, message_id, body, now, deadline)).await;
        match &delivered {
            Ok(disposition) => span.set(key::OUTCOME, disposition.code()),
            Err(RunError::Store(_)) => span.fail("store_error"),
        }
        span.end();
        delivered
    }

    #[tracing::instrument(skip_all, fields(message_id, task_id, workspace, occurrence))]
    async fn deliver_in(
        &self,
        trace: &trace::Span,
        message_id: &str,
        body: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<Disposition, RunError> {
        let span = tracing::Span::current();
        span.record("message_id", message_id);
        let occ = match RunMessage::parse(body) {
            Ok(occ) => occ,
            Err(reason) => return self.record_malformed(message_id, body, reason, now).await,
        };
        label(&span, trace, &occ);
        // Every later read of the time is this delivery's `now`, moved on;
        // the invocation's deadline as far after it (the claim's lease
        // keeps the deadline as the invocation's clock reads it).
        let clock = RunClock::new(now, &*self.clock);
        let run_deadline = clock.deadline(deadline);

        // 0. Not due yet: nothing written.
        if crate::domain::run::door::not_yet(occ.scheduled, now) {
            tracing::warn!(scheduled_time = %occ.key, "{NOT_YET}");
            return Ok(Disposition::NotYet);
        }
        // 1. Door, before any read.
        if let Verdict::Skip(reason) = verdict(&self.facts(&occ, now, TaskFacts::Unknown)) {
            return self.skip_unclaimed(&occ, reason, now, 0, None).await;
        }
        // 2. Claim: also the task read.
        let claimed = match self.claim(&occ, now, deadline).await? {
            Claiming::Held(claimed) => claimed,
            Claiming::Answered(disposition) => return Ok(disposition),
        };
        self.run_claimed(&occ, &claimed, &clock, (now, run_deadline)).await
    }

    /// Steps 3 to 7 of an occurrence this execution claimed: an earlier
    /// attempt's journal read (the outcome it was settling settled, nothing
    /// run again), the door with the task and its install, the run, its
    /// settle (or release, or park).
    async fn run_claimed(
        &self,
        occ: &Delivery,
        claimed: &claim::Claimed,
        clock: &RunClock<'_>,
        (now, run_deadline): (DateTime<Utc>, DateTime<Utc>),
    ) -> Result<Disposition, RunError> {
        // An earlier attempt's journal: the calls it made, and the outcome
        // it was settling when its time ran out (settled now, nothing run).
        let journal = self.journal_of(occ, claimed).await?;
        // 3. Door again, with the task and its install.
        let install = self.install_of(&claimed.task).await?;
        if let Some(settling) = &journal.outcome {
            tracing::info!(
                "an earlier attempt's settle ran out of time: its journaled outcome is settled, nothing runs again"
            );
            let outcome = settling.settled_again();
            let recorded = self
                .settle(occ, claimed, install.as_ref(), &outcome, None, (clock, run_deadline))
                .await?;
            return Ok(recorded.map_or(Disposition::Duplicate, Disposition::Ran));
        }
        let task = TaskFacts::Present {
            task: &claimed.task,
            install: install.as_ref(),
        };
        let door = verdict(&self.facts(occ, now, task));
        let outcome = match &door {
            Verdict::Skip(reason) => {
                tracing::info!(reason = reason.code(), "skipped at the door");
                Outcome::skipped(reason.describe())
            }
            // 4. and 5. The procedure and the agent loop.
            Verdict::Run => match self
                .run_agent(&claimed.task, install.as_ref(), occ, (clock, &journal), run_deadline)
                .await
            {
                Ended::Run(outcome) => *outcome,
                Ended::Requeue(requeue) => return self.release(occ, claimed, requeue).await,
                Ended::Awaiting(parked) => return self.park(occ, claimed, *parked, clock).await,
            },
        };
        // 6. Settle; 7. its record is the notification's outbox.
        let Some(recorded) = self
            .settle(
                occ,
                claimed,
                install.as_ref(),
                &outcome,
                door.skip(),
                (clock, run_deadline),
            )
            .await?
        else {
            return Ok(Disposition::Duplicate);
        };
        Ok(match door {
            Verdict::Skip(reason) if recorded == RunStatus::Skipped => Disposition::Skipped(reason),
            _ => Disposition::Ran(recorded),
        })
    }

    /// The occurrence's journal (`RunStore::journal`) when an earlier
    /// attempt may have written one: a take-over, a resume, a claim that
    /// carries what released attempts spent. A first claim reads none.
    async fn journal_of(&self, occ: &Delivery, claimed: &claim::Claimed) -> Result<Journal, RunError> {
        if claimed.attempts <= 1 && occ.message.resume.is_none() && claimed.crashed <= 0.0 {
            return Ok(Journal::default());
        }
        Ok(self.store.journal(occ.task_id.as_str(), &occ.key).await?)
    }

    /// What the door reads of this delivery. An approval's resume of an
    /// occurrence (`RunMessage::resume`) is within its window for as long
    /// as its requests could wait (`gate::MAX_ASKS` of `APPROVAL_HOURS`):
    /// it claims nothing unless its occurrence awaits that approved request
    /// (`claim`).
    fn facts<'a>(&self, occ: &Delivery, now: DateTime<Utc>, task: TaskFacts<'a>) -> Facts<'a> {
        // Each request of an occurrence waits at most `APPROVAL_HOURS`.
        let asks = i64::try_from(crate::domain::run::gate::MAX_ASKS).unwrap_or(i64::MAX);
        let catch_up = match occ.message.resume {
            Some(_) => self.settings.catch_up + Duration::hours(self.settings.approval_hours.max(1) * (asks + 1)),
            None => self.settings.catch_up,
        };
        Facts {
            worker_enabled: self.settings.worker_enabled,
            scheduled: occ.scheduled,
            now,
            catch_up,
            task,
        }
    }
}
