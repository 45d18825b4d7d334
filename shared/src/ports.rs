//! Ports: what the use cases need from the world, as traits. The adapters in
//! `adapters/` implement them on DynamoDB and EventBridge Scheduler; tests run
//! the use cases on those same adapters against a local AWS.
//!
//! Invariant: a failed DynamoDB condition comes back as a domain outcome
//! (e.g. [`Inserted::KeyTaken`]), never as an error string to parse.

use std::future::Future;

use chrono::{DateTime, Utc};

use crate::domain::reminder;
use crate::domain::run::definition::{ScheduleDefinition, ScheduleStatus};
use crate::domain::run::pace::Slots;
use crate::domain::task::idempotency::IdempotencyRecord;
use crate::domain::task::{Task, TaskId};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Where the use cases take the time from. No module of `app/` reads the
/// wall clock: a caller hands in the `now` a request is handled at and,
/// where time passes during the work (a run's model and tool calls, its
/// waits), a clock; tests and the simulation hand in their own, so no
/// outcome depends on the date a test runs.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock: the one the functions hand in.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// The store failed: the call may be retried.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("DynamoDB {operation} failed")]
    Request {
        operation: &'static str,
        #[source]
        source: BoxError,
    },
    /// The store refused the request as invalid (an item too large, a
    /// malformed value): sending it again fails the same way.
    #[error("DynamoDB {operation} refused the request as invalid")]
    Rejected {
        operation: &'static str,
        #[source]
        source: BoxError,
    },
    #[error("stored {what} cannot be read")]
    Corrupt {
        what: String,
        #[source]
        source: BoxError,
    },
}

/// The outcome of inserting a new task with its idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    Created,
    /// The idempotency key (or the task it derives) is already taken.
    KeyTaken,
}

/// The outcome of inserting a reminder with its idempotency record and its
/// owner's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReminderInserted {
    Created,
    /// The idempotency key (or the task it derives) is already taken.
    KeyTaken,
    /// The owner's reminders changed since they were counted: count again.
    OwnerMoved,
}

/// A principal's reminders: those its owner item lists, read consistently,
/// and those the owner index shows besides (the create function's, which
/// are not listed): what the cap of SPEC §11 counts.
#[derive(Debug, Clone, Default)]
pub struct OwnerReminders {
    /// The owner item's version (0: no item yet). A capped insert is
    /// conditional on it, so two creates never both take the last place.
    pub version: u64,
    /// The listed ids and their tasks (`None`: no such task any more).
    pub tasks: Vec<(TaskId, Option<Task>)>,
}

impl OwnerReminders {
    /// Reminders that count against the cap (`reminder::takes_a_place`).
    pub fn active(&self) -> usize {
        self.tasks
            .iter()
            .filter(|(_, t)| t.as_ref().is_some_and(|t| reminder::takes_a_place(t.state())))
            .count()
    }

    /// The ids worth listing (`reminder::stays_listed`).
    pub fn kept(&self) -> Vec<TaskId> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.as_ref().is_some_and(|t| reminder::stays_listed(t.state())))
            .map(|(id, _)| id.clone())
            .collect()
    }
}

pub trait TaskStore: Send + Sync {
    /// The record of a principal's key, within its workspace (a principal
    /// id is unique only there).
    fn idempotency_record(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send;

    /// The record of the key a finished reminder was created with expires
    /// at `ttl` (Unix seconds) with it.
    fn expire_idempotency(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
        ttl: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    fn task(&self, workspace: &str, task_id: &TaskId) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send;

    /// Writes a new task and its idempotency record atomically: both or neither.
    /// With `owner` (what a capped create counted), the reminder is also
    /// listed on its owner's item in the same transaction, conditional on
    /// the owner item's version, which keeps only `owner.kept()` besides
    /// the new id.
    fn insert_with_idempotency(
        &self,
        task: &Task,
        record: &IdempotencyRecord,
        owner: Option<&OwnerReminders>,
    ) -> impl Future<Output = Result<ReminderInserted, StoreError>> + Send;

    /// The principal's listed reminders, read consistently.
    fn owner_reminders(
        &self,
        workspace: &str,
        principal: &str,
    ) -> impl Future<Output = Result<OwnerReminders, StoreError>> + Send;
}

/// The scheduler failed: the call may be retried.
#[derive(Debug, thiserror::Error)]
#[error("EventBridge Scheduler {operation} failed for schedule {name}")]
pub struct ScheduleError {
    pub operation: &'static str,
    pub name: String,
    #[source]
    pub source: BoxError,
}

pub trait Schedules: Send + Sync {
    /// Creates the schedule, or brings an existing one of that name in step:
    /// safe to repeat, last writer wins. A `retired` definition deletes
    /// it: a finished one-time task or a finished or cancelled reminder
    /// never gets its schedule back.
    fn put(&self, schedule: &ScheduleDefinition) -> impl Future<Output = Result<(), ScheduleError>> + Send;
    /// The schedule of that name as Scheduler holds it, `None` if there is none.
    fn status(&self, name: &str) -> impl Future<Output = Result<Option<ScheduleStatus>, ScheduleError>> + Send;
    /// Deletes the schedule of that name; one already gone is not an error.
    fn delete(&self, name: &str) -> impl Future<Output = Result<(), ScheduleError>> + Send;
}

// ---- The runner's ports ----------------------------------------------------

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::domain::run::agent::{Message, ModelReply, ModelRequest};
use crate::domain::run::occurrence::RunRecord;
use crate::domain::task::claim::Claim;
use crate::domain::task::install::Install;

/// A claim on one occurrence, written on its task item.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub workspace: &'a str,
    pub task_id: &'a TaskId,
    /// The occurrence key (`occurrence::occurrence_key`).
    pub occurrence: &'a str,
    /// The budget period (`budget::period`).
    pub period: &'a str,
    pub claim: &'a Claim,
    pub now: DateTime<Utc>,
    /// A reminder's person's monthly cap (`PERSON_MONTHLY_USD`): the claim
    /// checks their month's charges are below it.
    pub person_cap_usd: Option<f64>,
    /// The approved request a resume message names (`RunMessage::resume`):
    /// a `TakeOver::Approved` takes only a claim awaiting this request.
    pub resume: Option<&'a str>,
    /// How long a dead claim is kept (`occurrence::claim_retention`): the
    /// claim's write prunes older ones beside it (`occurrence::prunable`).
    pub keep_claims: chrono::Duration,
}

/// The answer to a claim: the task as it is now (claimed), or as it was
/// when the claim was refused (`None`: no such task).
#[derive(Debug, Clone)]
pub enum ClaimAnswer {
    Claimed(Box<Task>),
    Refused(Option<Box<Task>>),
    /// The task's side would have taken the claim; a month above it is
    /// spent (its workspace's, `budget::WorkspaceBudget`, or its person's
    /// cap): nothing written. The task as read, which budget, and its limit.
    BudgetReached(Box<Task>, crate::domain::task::budget::BudgetLevel, f64),
}

/// Everything a finished or skipped claimed occurrence writes, atomically.
#[derive(Debug, Clone)]
pub struct Settlement<'a> {
    pub task: &'a Task,
    pub occurrence: &'a str,
    /// Fences the write: only the execution holding the claim settles it.
    pub execution_id: &'a str,
    pub period: &'a str,
    /// Released from the period budget...
    pub reserved_usd: f64,
    /// ...and replaced by the actual cost, also charged to this account.
    pub account: Option<&'a crate::domain::task::budget::Account>,
    pub record: &'a RunRecord,
    /// What the occurrence holds of its workspace's month
    /// (`Claim::workspace_usd`): the workspace's side moves by the record's
    /// cost less this.
    pub workspace_held_usd: f64,
    /// Completes a one-time task (`domain::run::settlement::plan`).
    pub complete: Option<crate::domain::run::settlement::Completion>,
    /// Finished claims old enough to forget.
    pub prune: Vec<String>,
}

/// A claimed occurrence given back unrecorded (the model stayed throttled,
/// or the pace had no slot, before any tool call), atomically: the
/// reservation released and the claim removed; what its attempts committed (crashed attempts' reservations,
/// what this one spent) stays on the claim, marked released, for the
/// occurrence's one record to carry.
#[derive(Debug, Clone)]
pub struct Release<'a> {
    pub task: &'a Task,
    pub occurrence: &'a str,
    /// Fences the write, as for a settle.
    pub execution_id: &'a str,
    pub period: &'a str,
    pub reserved_usd: f64,
    /// What stays committed: crashed attempts' reservations and what this
    /// attempt spent. Zero, the claim goes whole.
    pub carried_usd: f64,
    /// What the occurrence holds of its workspace's month: the workspace's
    /// side moves by what is carried less this, and then holds what is
    /// carried.
    pub workspace_held_usd: f64,
}

/// What `RunStore::record_unclaimed` came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Unclaimed {
    /// Recorded, or nothing to record (a record, or a finished claim, is there).
    Done,
    /// Another execution holds the occurrence's claim under a live lease:
    /// nothing recorded; its run records the outcome, or, should it have
    /// died, its claim is dead once the lease runs out and a skip then
    /// pays for it. A delivery answers busy and comes back.
    Live,
    /// The occurrence holds a claim no execution holds any more: the task
    /// as it was, for the skip to pay what that claim committed.
    Dead(Box<Task>),
}

/// The claim a take-over takes (`RunStore::take_over`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeOver {
    /// A running claim whose lease expired: a crash, paid for.
    Crashed,
    /// A claim released before it ran (`RunStatus::Released`).
    Released,
    /// A claim awaiting an approval (`RunStatus::AwaitingApproval`) whose
    /// request an admin approved: the re-run that carries the approved call.
    Approved,
}

/// A run stopped at a gated tool call (`domain::run::gate`): released as
/// [`Release`] says, but kept as `awaiting_approval` whatever it carries,
/// with the occurrence's record saying so and the request put, in one
/// transaction.
#[derive(Debug, Clone)]
pub struct Park<'a> {
    pub release: Release<'a>,
    pub record: &'a RunRecord,
    pub approval: &'a crate::domain::run::gate::CallApproval,
    /// Dead claims removed beside it (`occurrence::prunable`).
    pub prune: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    Done,
    /// Another execution took the claim over: it records the outcome.
    LostClaim,
    /// A release found no claim at all: one this execution's own earlier
    /// release removed (its answer lost), so the occurrence has not run and
    /// the message must come back, never be acknowledged.
    ClaimGone,
}

pub trait RunStore: Send + Sync {
    /// Claims a fresh occurrence and reserves its budget in one write.
    fn claim(&self, request: &ClaimRequest<'_>) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send;
    /// Takes over a claim no execution holds: a running one whose lease
    /// expired (its reservation committed as a crash), or a released one
    /// (what it carries kept); either way the new attempt reserves again,
    /// within the period budget for a released one.
    fn take_over(
        &self,
        request: &ClaimRequest<'_>,
        from: TakeOver,
    ) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send;
    fn install(
        &self,
        workspace: &str,
        install_id: &str,
    ) -> impl Future<Output = Result<Option<Install>, StoreError>> + Send;
    fn settle(&self, settlement: &Settlement<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send;
    /// Gives a claimed occurrence back, fenced on the execution id; a lost
    /// claim is [`Settled::LostClaim`].
    fn release(&self, release: &Release<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send;
    /// Parks a claimed occurrence at a gated call ([`Park`]), fenced on the
    /// execution id as a release is.
    fn park(&self, park: &Park<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send;
    /// The approval requests of `run_id` (`domain::run::gate`), strongly
    /// read by their key prefix (`gate::run_requests`), never the rest of
    /// the workspace's; with `named`, a request of the run an earlier
    /// release asked (its id unprefixed) is read by its id as well.
    fn run_approvals(
        &self,
        workspace: &str,
        run_id: &str,
        named: Option<&str>,
    ) -> impl Future<Output = Result<Vec<crate::domain::run::gate::CallApproval>, StoreError>> + Send;
    /// Uses an approved request for its one call, by `execution_id` at
    /// `now`: `false` when it is used already or no longer approved.
    fn use_approval(
        &self,
        approval: &crate::domain::run::gate::CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Keeps what the approved call answered (capped) on its request, so a
    /// later attempt of the occurrence reads it instead of calling again.
    fn keep_call_result(
        &self,
        approval: &crate::domain::run::gate::CallApproval,
        result: &str,
        is_error: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The occurrence's journal (`domain::run::journal`), strongly read:
    /// the calls it made, by position, and the outcome an attempt journaled
    /// when its settle failed.
    fn journal(
        &self,
        task_id: &str,
        occurrence: &str,
    ) -> impl Future<Output = Result<crate::domain::run::journal::Journal, StoreError>> + Send;
    /// Journals a call its occurrence made, before the model sees the
    /// answer; the position already journaled (a call of an earlier
    /// attempt's) leaves that entry as it was.
    fn journal_call(
        &self,
        call: &crate::domain::run::journal::JournaledCall,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Journals the outcome an attempt is settling (after its settle failed
    /// once), so a later attempt settles it instead of running again.
    fn journal_outcome(
        &self,
        outcome: &crate::domain::run::journal::JournaledOutcome,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Marks `workspace`'s `month` reached at `budget_usd`, once: the mark's
    /// insert is the month's one `Workspace budget reached` event (SPEC §15).
    fn mark_budget_reached(
        &self,
        workspace: &str,
        month: &str,
        budget_usd: f64,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records an outcome that held no claim (a skip before or instead of a
    /// claim), and takes the occurrence's claim, finished, with it: a later
    /// delivery of it is a duplicate. Never overwrites an existing record,
    /// and writes none while the occurrence has a claim on its task (a run
    /// of it, still running or settled, records its own outcome: a live
    /// one is answered [`Unclaimed::Live`]). A claim no execution holds any
    /// more (`Claim::is_dead`) is answered
    /// [`Unclaimed::Dead`] with the task as it was: what it committed is
    /// the skip's to pay ([`RunStore::record_over_dead`]).
    /// The claims `prune` (`occurrence::prunable`) are removed beside it.
    fn record_unclaimed(
        &self,
        record: &RunRecord,
        prune: &[String],
    ) -> impl Future<Output = Result<Unclaimed, StoreError>> + Send;
    /// Records a skip over a dead claim, which `record` (its cost what the
    /// claim committed) pays for: the record, the claim finished as the
    /// skip's, fenced on the claim being still `dead` as read, and the
    /// account charged `record.cost_usd` for `period`, in one transaction.
    /// Nothing when the record exists or the claim moved on. The claims
    /// `prune` are removed beside it.
    fn record_over_dead(
        &self,
        record: &RunRecord,
        dead: &crate::domain::task::claim::Claim,
        account: Option<&crate::domain::task::budget::Account>,
        period: &str,
        prune: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The task as it is now (a strongly consistent read): what a skip that
    /// held no claim and read nothing before decides its completion from
    /// (`app::run::record_skip`).
    fn current_task(
        &self,
        workspace: &str,
        task_id: &crate::domain::task::TaskId,
    ) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send;
    /// Completes a task whose occurrence at `completion.at` was skipped by
    /// `execution_id` without running and finishes it (SPEC §3,
    /// `settlement::completion`): if its schedule is still the one the
    /// completion was decided on (a one-time task's instant, a recurring
    /// one's whole schedule), it is neither paused, tombstoned nor
    /// completed, and the occurrence's claim is that skip's
    /// (`record_unclaimed`); otherwise nothing. `completion.record`, the
    /// key it was created with, expires with it.
    fn complete_unclaimed(
        &self,
        workspace: &str,
        task_id: &crate::domain::task::TaskId,
        execution_id: &str,
        completion: &crate::domain::run::settlement::Completion,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Keeps a message that is not a run message, for an operator to read.
    fn record_malformed(
        &self,
        message_id: &str,
        body: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Books the next slot of `model_id`'s pace (`pace::Slots::book`) when
    /// it comes from `now_ms` to `latest_ms`: one conditional write.
    fn pace_book(
        &self,
        model_id: &str,
        now_ms: i64,
        latest_ms: i64,
    ) -> impl Future<Output = Result<PaceAnswer, StoreError>> + Send;
    /// Starts the pace again at `now_ms` when nothing is booked ahead
    /// (`pace::Slots::start`; `gap_ms` when there is no pace item yet).
    fn pace_start(
        &self,
        model_id: &str,
        now_ms: i64,
        gap_ms: i64,
    ) -> impl Future<Output = Result<PaceAnswer, StoreError>> + Send;
    /// Sets the pace's gap to `gap_ms` (changed at `now_ms`) if gap and
    /// change are still as `seen`; `false` when they moved on.
    fn pace_gap(
        &self,
        model_id: &str,
        seen: &Slots,
        gap_ms: i64,
        now_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Moves the pace's next free slot on by `charge_ms` (the tokens a call
    /// counted, `Pace::token_charge_ms`): from where it is when booked
    /// ahead of `now_ms`, from `now_ms` when idle. Best effort: `false` when
    /// another write came between.
    fn pace_charge(
        &self,
        model_id: &str,
        now_ms: i64,
        charge_ms: i64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// What a write on a model pace's item came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PaceAnswer {
    /// A slot taken (`Slots::taken_ms`); the slots after it.
    Taken(Slots),
    /// The condition failed; the item as it was (`None`: no item yet).
    Refused(Option<Slots>),
}

/// What kind of failure a model call had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelErrorKind {
    /// Load (`ThrottlingException`, `ServiceUnavailableException`,
    /// `ModelNotReadyException`, `ServiceQuotaExceededException`): retried,
    /// then the run goes back to the
    /// queue or fails as `model throttled`; it slows the model pace.
    Throttled,
    /// For now, not for good: a server error (`InternalServerException`, a
    /// 5xx), no answer (a connection reset, a timeout), or access a fresh
    /// account is still being given (`AccessDeniedException` while its
    /// model subscription completes, minutes). Retried and returned as
    /// load is, without slowing the pace.
    Unavailable,
    /// Anything else: the run fails with the message.
    Other,
}

impl ModelErrorKind {
    /// Whether the call may answer if asked again later: the run retries
    /// it, and goes back to the queue rather than fail.
    pub fn is_load(self) -> bool {
        matches!(self, ModelErrorKind::Throttled | ModelErrorKind::Unavailable)
    }
}

/// The model failed to answer.
#[derive(Debug, thiserror::Error)]
#[error("the model call failed: {message}")]
pub struct ModelError {
    pub kind: ModelErrorKind,
    /// The provider's error code (`ThrottlingException`, ...), when it gave one.
    pub code: Option<String>,
    pub message: String,
    #[source]
    pub source: Option<BoxError>,
}

pub trait Model: Send + Sync {
    fn converse(
        &self,
        model_id: &str,
        request: &ModelRequest,
    ) -> impl Future<Output = Result<ModelReply, ModelError>> + Send;
}

/// An MCP failure: the JSON-RPC error code when the server answered with one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MCP {operation} failed{}: {message}", code.map(|c| format!(" ({c})")).unwrap_or_default())]
pub struct McpError {
    pub operation: &'static str,
    pub code: Option<i64>,
    pub message: String,
}

/// A tool as its server lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// Annotated `destructiveHint: true` without `readOnlyHint: true`
    /// (`gate::annotated_destructive`): gated in a scheduled run.
    pub destructive: bool,
}

/// A tool's answer: text, JSON and image blocks (see `agent::tool_result`).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub content: Vec<crate::domain::run::agent::Block>,
    pub is_error: bool,
}

/// What a `tools/call` names in its `_meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallMeta<'a> {
    pub run_id: &'a str,
    pub call_key: &'a str,
}

pub trait McpSession: Send + Sync {
    /// `prompts/get` with the approved argument values.
    fn get_prompt(
        &self,
        name: &str,
        arguments: &BTreeMap<String, String>,
    ) -> impl Future<Output = Result<Vec<Message>, McpError>> + Send;
    /// `tools/list`, all pages within the adapter's read bound. With
    /// `approved`, only the listed tools it names, filtered while reading so
    /// a tool's place in the list does not decide whether it is kept.
    fn list_tools(
        &self,
        approved: Option<&BTreeSet<String>>,
    ) -> impl Future<Output = Result<Vec<ServerTool>, McpError>> + Send;
    /// The full `prompts/list`, all pages, with each prompt's marker.
    fn list_prompts(
        &self,
    ) -> impl Future<Output = Result<Vec<crate::domain::connector::reconcile::ListedPrompt>, McpError>> + Send;
    /// `tools/call`, its `_meta` carrying the run id (the same on every
    /// attempt of one occurrence) and the call's key (the same for the same
    /// call on every attempt, `domain::run::journal::call_key`), so a
    /// server can refuse to repeat a side effect after a crash.
    fn call_tool(
        &self,
        name: &str,
        input: Value,
        meta: CallMeta<'_>,
    ) -> impl Future<Output = Result<ToolOutput, McpError>> + Send;
}

pub trait Connectors: Send + Sync {
    type Session: McpSession;
    fn connect(&self, install: &Install) -> impl Future<Output = Result<Self::Session, McpError>> + Send;
}

// ---- Reconcile and admin ------------------------------------------------------

use crate::domain::connector::reconcile::Write;

/// The outcome of a write conditional on the version read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioned {
    Written,
    /// Someone wrote the task since it was read: re-read and decide again.
    Conflict,
}

/// A workspace's budget (`domain::task::budget::WorkspaceBudget`), as an
/// admin reads and sets it.
pub trait WorkspaceBudgets: Send + Sync {
    /// Its limit and version, and what `period` of it holds.
    fn workspace_budget(
        &self,
        workspace: &str,
        period: &str,
    ) -> impl Future<Output = Result<crate::domain::task::budget::WorkspaceBudget, StoreError>> + Send;
    /// Sets its limit (`None`: none) if its version is `expected` (0: never
    /// set): the budget after, with `period`'s commitments, or the version
    /// it has.
    fn set_workspace_budget(
        &self,
        workspace: &str,
        limit: Option<f64>,
        expected: u64,
        by: &str,
        now: DateTime<Utc>,
        period: &str,
    ) -> impl Future<Output = Result<Result<crate::domain::task::budget::WorkspaceBudget, u64>, StoreError>> + Send;
}

/// Approval requests of gated tool calls (SPEC §15), as admins list and
/// decide them and the periodic check expires them.
pub trait CallApprovals: Send + Sync {
    /// A page of the workspace's requests (of one task when `task_id` is
    /// given), at most `limit`, after `after` (a request id); the last
    /// request id when more may follow.
    fn approvals_page(
        &self,
        workspace: &str,
        task_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<crate::domain::run::gate::CallApproval>, Option<String>), StoreError>> + Send;
    fn approval(
        &self,
        workspace: &str,
        request_id: &str,
    ) -> impl Future<Output = Result<Option<crate::domain::run::gate::CallApproval>, StoreError>> + Send;
    /// Writes an approved request if it is still at `expected` version and
    /// its occurrence still awaits: `false` when either moved.
    fn approve_call(
        &self,
        decided: &crate::domain::run::gate::CallApproval,
        expected: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Ends the occurrence a request held ([`EndAwaiting`]), if the request is
    /// still at `expected` and the occurrence still awaits it: the request
    /// decided, the record skipped and paying what the claim carries, the
    /// claim finished, the account charged, in one transaction. `false`
    /// when the request or the claim moved.
    fn end_awaiting(
        &self,
        ended: &EndAwaiting<'_>,
        expected: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Writes a request as decided alone, if still at `expected` (its
    /// occurrence already ended or ran): it leaves the expiry index.
    fn close_request(
        &self,
        decided: &crate::domain::run::gate::CallApproval,
        expected: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Requests of one expiry shard (`gate::expiry_shard`; `None`: the
    /// last release's one partition) whose expiry passed before `before`
    /// that still hold an occurrence (open, or approved and not used),
    /// earliest first, after the request `after` (the last of the page
    /// before).
    fn lapsed_approvals(
        &self,
        shard: Option<u8>,
        before: DateTime<Utc>,
        after: Option<&crate::domain::run::gate::CallApproval>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<crate::domain::run::gate::CallApproval>, StoreError>> + Send;
}

/// An occurrence ended by its request's denial or expiry.
#[derive(Debug, Clone)]
pub struct EndAwaiting<'a> {
    pub approval: &'a crate::domain::run::gate::CallApproval,
    pub task: &'a Task,
    pub record: &'a RunRecord,
    /// The claim as read (awaiting the request, or, for an expiry, a
    /// resumed run's claim no execution holds): the write is fenced on it,
    /// and the record's cost is what it committed.
    pub claim: &'a crate::domain::task::claim::Claim,
    pub account: Option<&'a crate::domain::task::budget::Account>,
    pub period: &'a str,
    /// Dead claims removed beside it (`occurrence::prunable`).
    pub prune: Vec<String>,
}

pub trait TaskCatalog: Send + Sync {
    /// The workspace's tasks (all kinds).
    fn workspace_tasks(&self, workspace: &str) -> impl Future<Output = Result<Vec<Task>, StoreError>> + Send;
    /// The workspace's connector tasks, none of its reminders: what one
    /// install's reconcile and a rebind read (a reminder is never declared,
    /// bound or counted against the workspace's connector tasks), so their
    /// reads grow with the workspace's connector tasks alone.
    fn connector_tasks(&self, workspace: &str) -> impl Future<Output = Result<Vec<Task>, StoreError>> + Send;
    /// A page of at most `limit` of the workspace's tasks (all kinds), in
    /// task id order, after the task `after`; the page's last task id when
    /// more may follow. One query, whatever the workspace holds.
    fn workspace_tasks_page(
        &self,
        workspace: &str,
        after: Option<&str>,
        limit: usize,
    ) -> impl Future<Output = Result<(Vec<Task>, Option<String>), StoreError>> + Send;
    fn workspace_installs(&self, workspace: &str) -> impl Future<Output = Result<Vec<Install>, StoreError>> + Send;
    fn install(
        &self,
        workspace: &str,
        install_id: &str,
    ) -> impl Future<Output = Result<Option<Install>, StoreError>> + Send;
    fn put_install(&self, install: &Install) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A page of at most `limit` installed connectors of every workspace
    /// (the daily pass), after `after`, as (workspace, install id) cursors.
    /// Read from an index: may lag a write by a moment, which a daily pass
    /// does not mind.
    fn installed_page(
        &self,
        after: Option<&Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Cursor>, StoreError>> + Send;
    /// The workspace a task id belongs to, whichever it is (admin tells a
    /// task of another workspace from a missing one). Read from an index.
    fn task_workspace(&self, task_id: &TaskId) -> impl Future<Output = Result<Option<String>, StoreError>> + Send;
    /// Writes a planned task: created if new, else updated in the attributes
    /// reconcile and admin own, conditional on the version it was read at.
    fn write_task(&self, write: &Write) -> impl Future<Output = Result<Versioned, StoreError>> + Send;
    /// A page of at most `limit` reminders that can still run (`scheduled`
    /// or `paused`) of one shard of the schedulable-reminder index, after
    /// `after` (the daily pass repairs their schedules a page at a time).
    fn schedulable_page(
        &self,
        shard: u8,
        after: Option<&Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Task>, StoreError>> + Send;
    /// Whether a webhook id was already recorded.
    fn seen_delivery(&self, webhook_id: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Records a webhook id as delivered; one already recorded stays as it
    /// was (the first record's time is kept).
    fn record_delivery(
        &self,
        webhook_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Records the hop a probe chain reached (`app::reconcile::Pass::Probe`);
    /// the record is kept a day.
    fn record_probe(
        &self,
        probe: &str,
        hop: u8,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// The hop a probe chain last recorded, if it recorded one.
    fn probe_reached(&self, probe: &str) -> impl Future<Output = Result<Option<u8>, StoreError>> + Send;
}

/// The two families of the schedulable index (`gsi3`), each in
/// [`crate::domain::run::definition::REMINDER_SHARDS`] shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// Reminders that can still run, `scheduled` or `paused`.
    Reminders,
    /// Connector tasks that fire (they have a `due`).
    Connectors,
}

impl Family {
    pub const ALL: [Family; 2] = [Family::Reminders, Family::Connectors];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Reminders => "reminders",
            Family::Connectors => "connectors",
        }
    }
}

/// The missed-occurrence check's reads and writes (SPEC §14,
/// `domain::operations::overdue`): tasks by due time, their recorded occurrences, and
/// `due` moved on without a new version (an owner's or admin's
/// `expected_version` never moves for it).
pub trait DueIndex: Send + Sync {
    /// A page of at most `limit` tasks of one shard of `family` whose `due`
    /// lies before `before`, earliest first, after `after`.
    fn due_page(
        &self,
        family: Family,
        shard: u8,
        before: DateTime<Utc>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<Page<Task>, StoreError>> + Send;
    /// The scheduled times of the task's run records in `[from, before)`.
    fn recorded_times(
        &self,
        task_id: &TaskId,
        from: DateTime<Utc>,
        before: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<DateTime<Utc>>, StoreError>> + Send;
    /// Sets the task's `due` (and its index entry) to `to`, if it is still
    /// the `due` the task was read with; `false` if it moved meanwhile.
    fn move_due(&self, task: &Task, to: Option<DateTime<Utc>>)
    -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Where the check of one shard of `family` stopped last (`None`: at
    /// the start of the index).
    fn check_cursor(
        &self,
        family: Family,
        shard: u8,
    ) -> impl Future<Output = Result<Option<Cursor>, StoreError>> + Send;
    /// Keeps where the check of the shard stopped; `None` starts the next
    /// one at the start of the index.
    fn save_check_cursor(
        &self,
        family: Family,
        shard: u8,
        cursor: Option<&Cursor>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// A page of the table's task items that have no `due` (written by a
    /// release before due times, or before the schedulable index), at most
    /// `limit` items read: a `Scan`, run once by an operator after an
    /// upgrade (`sat upgrade`), never by a pass (SPEC §13).
    fn undue_page(
        &self,
        after: Option<&TableCursor>,
        limit: usize,
    ) -> impl Future<Output = Result<ScanPage, StoreError>> + Send;
}

/// Where a scan of the table goes on: the table key of the last item read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TableCursor {
    pub pk: String,
    pub sk: String,
}

/// One page of a scan, and where the next one starts (`None`: the last).
#[derive(Debug, Clone, PartialEq)]
pub struct ScanPage {
    pub items: Vec<Task>,
    pub next: Option<TableCursor>,
}

/// Where a page of a pass continues: after this item, named by its
/// workspace and id (an install id, or a task id), and its place in an
/// index sorted by something else (a task's `due`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Cursor {
    pub workspace: String,
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sort: Option<String>,
}

/// One page of a pass, and where the next one starts (`None`: the last).
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<Cursor>,
}

#[derive(Debug, thiserror::Error)]
#[error("SQS {operation} failed")]
pub struct QueueError {
    pub operation: &'static str,
    #[source]
    pub source: BoxError,
}

/// The reconcile work queue (SQS FIFO): one message group per install, so
/// work for one install runs one at a time and in order.
pub trait WorkQueue: Send + Sync {
    fn enqueue(&self, group: &str, dedup_id: &str, body: &str) -> impl Future<Output = Result<(), QueueError>> + Send;
}

/// The runs queue (SQS standard), for an occurrence sent outside the
/// schedule: a run now (`domain::task::run_now`), in the message shape Scheduler
/// delivers (`domain::run::occurrence::RunMessage`).
pub trait RunQueue: Send + Sync {
    fn send_run(
        &self,
        message: &crate::domain::run::occurrence::RunMessage,
    ) -> impl Future<Output = Result<(), QueueError>> + Send;
}

// ---- The owner's schedules (SPEC §11) ----------------------------------------

/// Where a page of an owner's reminders starts: after this task, in the
/// owner's newest-first order. Opaque to callers (`domain::reminder::ListCursor`).
pub use crate::domain::reminder::ListCursor;

/// A page of an owner's reminders.
#[derive(Debug, Clone)]
pub struct OwnedPage {
    pub tasks: Vec<Task>,
    pub next: Option<ListCursor>,
}

/// Which of an owner's reminders a page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    /// Every state but `deleted`.
    NotDeleted,
    Only(crate::domain::task::TaskState),
}

/// The outcome of a versioned update written with an idempotency record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateWritten {
    Written,
    /// The task moved since it was read.
    VersionMoved,
    /// The idempotency key was taken meanwhile: read its record.
    KeyTaken,
}

pub trait ReminderStore: Send + Sync {
    /// A page of the principal's reminders, newest first.
    fn owned(
        &self,
        workspace: &str,
        principal: &str,
        filter: StateFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> impl Future<Output = Result<OwnedPage, StoreError>> + Send;
    /// The latest run records of a task, newest first.
    fn runs(&self, task_id: &TaskId, limit: usize) -> impl Future<Output = Result<Vec<RunRecord>, StoreError>> + Send;
    /// The run record of one occurrence (its scheduled time, as the run
    /// record's key spells it), read consistently.
    fn run(
        &self,
        task_id: &TaskId,
        occurrence: &str,
    ) -> impl Future<Output = Result<Option<RunRecord>, StoreError>> + Send;
    /// A versioned task write (as `TaskCatalog::write_task`) and an
    /// idempotency record, in one transaction.
    fn write_with_idempotency(
        &self,
        write: &Write,
        record: &IdempotencyRecord,
    ) -> impl Future<Output = Result<UpdateWritten, StoreError>> + Send;
}
