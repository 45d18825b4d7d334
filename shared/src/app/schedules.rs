//! The schedules use case (SPEC §11): a reminder's owner, through the chat
//! backend or app, lists, reads, creates, updates, pauses, resumes and
//! cancels their own reminders, daily and weekly ones included, and reads
//! their run history. Never offered to a model: `create` stays its only tool.
//!
//! Invariants:
//! - Scopes are exact strings: `schedule.read` for `list`, `get`, `runs`,
//!   `run` (one run with its output, as the notification names it);
//!   `schedule.write` for the writes. Writes need both feature flags, reads
//!   `AGENT_SCHEDULE_API_ENABLED`.
//! - A principal sees only reminders it owns in its workspace: anything
//!   else (another principal's reminder, a connector task, another
//!   workspace's task, no task) is the same `not_found`.
//! - Create is `app::create`'s path (one validation, one order of writes,
//!   the cap); update, pause, resume and cancel are conditional on the
//!   version read, and every refusal leaves nothing behind.
//! - The Scheduler schedule follows every change, in the order that makes
//!   a crash between the two writes harmless: a schedule that must stop
//!   firing stops after the task says so (pause: the door skips a paused
//!   task meanwhile), one that must fire again or elsewhere is put first
//!   (resume, update: a retry finds the version unchanged and finishes);
//!   cancel deletes the schedule first (a crash leaves a reminder that
//!   never fires, which is what cancelling asked for). A write that loses
//!   its version race puts the schedule back in step with the task as it is.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::app::change::{self, Changed, Edits, OwnRequests, SharedRequest, SurfaceError, Target, commit_with};
use crate::app::create::{Answer, CreateReminder, CreateSettings};
use crate::app::run_now::{self, Requested};
use crate::domain::operations::history::{self, RunView};
use crate::domain::reminder::{
    CreateRequest, ListCursor, Principal, Rejection, Surface, UpdateInput, WRITE_SCOPE, check_id,
};
use crate::domain::schedule::format_utc;
use crate::domain::schedule::recurrence::ScheduleView;
use crate::domain::task::edit::{self, Actor, Edit, EditRefusal};
use crate::domain::task::explain::{self, Reader};
use crate::domain::task::idempotency::{IdempotencyRecord, Replay};
use crate::domain::task::{Provenance, Task, TaskId, TaskKind, TaskState};
use crate::ports::{ReminderStore, RunQueue, Schedules, StateFilter, TaskCatalog, TaskStore};

pub const READ_SCOPE: &str = "schedule.read";
/// Next run instants `get` shows.
pub const NEXT_RUNS: usize = 5;
pub const DEFAULT_PAGE: usize = 50;
pub const MAX_PAGE: usize = 100;

/// A list's page size as asked (`limit`: 1 to [`MAX_PAGE`], default
/// [`DEFAULT_PAGE`]), for the owner's list and the admin's alike; the
/// error is the `invalid_request`'s message.
pub fn page_limit(limit: Option<u64>) -> Result<usize, String> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE as u64).contains(&n) => Ok(n as usize),
        Some(n) => Err(format!("limit {n} is not between 1 and {MAX_PAGE}")),
    }
}

/// A client error: an `ok: false` answer with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the principal does not hold the `{0}` scope")]
    Forbidden(&'static str),
    #[error("no reminder {0} of this principal")]
    NotFound(String),
    #[error("the reminder changed since version {expected} (now {current}): read it again")]
    VersionConflict { expected: u64, current: u64 },
    #[error(transparent)]
    Reminder(#[from] Rejection),
}

impl Refusal {
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::Forbidden(_) | Refusal::Reminder(Rejection::ScopeDenied) => "forbidden",
            Refusal::NotFound(_) => "not_found",
            Refusal::VersionConflict { .. } => "version_conflict",
            Refusal::Reminder(r) => r.code(),
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Refusal::Reminder(Rejection::InvalidRequest(message.into()))
    }
}

/// An internal failure: the function errors and the caller retries.
pub type SchedulesError = SurfaceError;

/// An owner's request, as the handler decodes it from the invoke payload
/// (`functions/schedules`): the operation named by `op`, with its fields;
/// the edits both surfaces share are declared once
/// (`change::SharedRequest`).
pub type Request = change::Request<Own>;

/// The owner's own operations.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Own {
    List {
        principal: Principal,
        #[serde(default)]
        state: Option<String>,
        #[serde(default)]
        limit: Option<u64>,
        #[serde(default)]
        cursor: Option<String>,
    },
    Get {
        principal: Principal,
        task_id: String,
    },
    Runs {
        principal: Principal,
        task_id: String,
        #[serde(default)]
        limit: Option<u64>,
    },
    /// One run, by the id the `Scheduled run finished` event names (SPEC §12).
    Run {
        principal: Principal,
        task_id: String,
        run_id: String,
    },
    Create(Box<CreateRequest>),
    Update {
        #[serde(flatten)]
        target: Target,
        idempotency_key: String,
        input: Box<UpdateInput>,
    },
    Pause {
        #[serde(flatten)]
        target: Target,
    },
    Cancel {
        #[serde(flatten)]
        target: Target,
    },
}

impl OwnRequests for Own {
    const OPS: &'static [&'static str] = &Op::NAMES;

    fn principal(&self) -> &Principal {
        match self {
            Own::Create(create) => &create.principal,
            Own::List { principal, .. }
            | Own::Get { principal, .. }
            | Own::Runs { principal, .. }
            | Own::Run { principal, .. } => principal,
            Own::Update { target, .. } | Own::Pause { target } | Own::Cancel { target } => &target.principal,
        }
    }
}

impl Request {
    /// The operation's name, as `op` spells it.
    pub fn op(&self) -> Op {
        match self {
            Request::Shared(SharedRequest::Resume { .. }) => Op::Resume,
            Request::Shared(SharedRequest::SkipNext { .. }) => Op::SkipNext,
            Request::Shared(SharedRequest::Unskip { .. }) => Op::Unskip,
            Request::Shared(SharedRequest::RunNow { .. }) => Op::RunNow,
            Request::Own(Own::List { .. }) => Op::List,
            Request::Own(Own::Get { .. }) => Op::Get,
            Request::Own(Own::Runs { .. }) => Op::Runs,
            Request::Own(Own::Run { .. }) => Op::Run,
            Request::Own(Own::Create(_)) => Op::Create,
            Request::Own(Own::Update { .. }) => Op::Update,
            Request::Own(Own::Pause { .. }) => Op::Pause,
            Request::Own(Own::Cancel { .. }) => Op::Cancel,
        }
    }
}

/// An owner's operation, by the name a request gives it (`op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    List,
    Get,
    Runs,
    Run,
    Create,
    Update,
    Pause,
    Resume,
    Cancel,
    SkipNext,
    Unskip,
    RunNow,
}

impl Op {
    pub const ALL: [Op; 12] = [
        Op::List,
        Op::Get,
        Op::Runs,
        Op::Run,
        Op::Create,
        Op::Update,
        Op::Pause,
        Op::Resume,
        Op::Cancel,
        Op::SkipNext,
        Op::Unskip,
        Op::RunNow,
    ];

    /// Their names, as `op` spells them.
    pub const NAMES: [&'static str; 12] = {
        let mut names = [""; 12];
        let mut i = 0;
        while i < names.len() {
            names[i] = Op::ALL[i].name();
            i += 1;
        }
        names
    };

    /// The operation a request's `op` names, if any.
    pub fn named(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Op::List => "list",
            Op::Get => "get",
            Op::Runs => "runs",
            Op::Run => "run",
            Op::Create => "create",
            Op::Update => "update",
            Op::Pause => "pause",
            Op::Resume => "resume",
            Op::Cancel => "cancel",
            Op::SkipNext => "skip_next",
            Op::Unskip => "unskip",
            Op::RunNow => "run_now",
        }
    }

    /// The scope it needs.
    pub fn scope(self) -> &'static str {
        if self.writes() { WRITE_SCOPE } else { READ_SCOPE }
    }

    /// Whether it writes (and so needs both feature flags).
    pub fn writes(self) -> bool {
        match self {
            Op::List | Op::Get | Op::Runs | Op::Run => false,
            Op::Create | Op::Update | Op::Pause | Op::Resume | Op::Cancel | Op::SkipNext | Op::Unskip | Op::RunNow => {
                true
            }
        }
    }
}

/// What schedules needs besides its ports.
#[derive(Debug, Clone)]
pub struct SchedulesSettings {
    pub create: CreateSettings,
    /// `MAX_ACTIVE_REMINDERS`.
    pub max_active: usize,
    /// `RETENTION_DAYS`: a finished reminder, its runs and its records
    /// expire this long after it finished.
    pub retention: chrono::Duration,
}

pub struct OwnerSchedules<S, G, Q> {
    create: CreateReminder<S, G>,
    /// Where a run now's message goes (the runs queue).
    queue: Q,
    settings: SchedulesSettings,
}

type Outcome = Result<Result<OwnerAnswer, Refusal>, SchedulesError>;

/// A reminder as `list` and the writes answer it (SPEC §11's summary).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub task_id: TaskId,
    pub title: String,
    pub schedule: ScheduleView,
    pub state: TaskState,
    /// UTC RFC 3339, while it is scheduled.
    pub next_run_at: Option<String>,
    pub version: u64,
}

/// A reminder as `get` shows it: its summary, instruction, next runs and
/// why it runs or does not, in words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Detail {
    #[serde(flatten)]
    pub summary: Summary,
    pub instruction: Option<String>,
    pub next_runs: Vec<String>,
    pub explanation: String,
}

/// What an owner's request answers; the handler encodes it after `"ok": true`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum OwnerAnswer {
    /// `list`: a page, newest first, and where the next one starts.
    Page {
        tasks: Vec<Summary>,
        cursor: Option<String>,
    },
    /// `get`.
    Detail { task: Box<Detail> },
    /// `create`, `update`, `pause`, `resume`, `cancel`: the reminder as it
    /// now is (`replayed` for the writes that take an idempotency key).
    Written {
        #[serde(skip_serializing_if = "Option::is_none")]
        replayed: Option<bool>,
        task: Summary,
    },
    /// `run_now`: the extra occurrence's run id (as its `Scheduled run
    /// finished` event will name it) and the reminder as it now is.
    RunNow {
        run_id: String,
        replayed: bool,
        task: Summary,
    },
    /// `runs`, newest first.
    Runs { runs: Vec<RunView> },
    /// `run`.
    Run { run: RunView },
}

impl<S: TaskStore + TaskCatalog + ReminderStore, G: Schedules, Q: RunQueue> OwnerSchedules<S, G, Q> {
    pub fn new(store: S, schedules: G, queue: Q, settings: SchedulesSettings) -> Self {
        Self {
            create: CreateReminder::new(store, schedules, settings.create.clone()),
            queue,
            settings,
        }
    }

    pub fn store(&self) -> &S {
        self.create.store()
    }

    fn schedules(&self) -> &G {
        self.create.schedules()
    }

    /// Whether `op` is switched on: writes need both feature flags, reads
    /// (and a name that is no operation) `AGENT_SCHEDULE_API_ENABLED`.
    /// Asked before the payload is decoded, so a disabled surface says so
    /// whatever it is sent.
    pub fn gate(&self, op: Option<Op>) -> Result<(), Refusal> {
        let flags = self.settings.create.flags;
        let enabled = if op.is_some_and(Op::writes) {
            flags.create_enabled()
        } else {
            flags.api_enabled
        };
        if enabled {
            Ok(())
        } else {
            Err(Refusal::Reminder(Rejection::FeatureDisabled))
        }
    }

    /// Answers one decoded request at `now`: a typed answer, or a refusal
    /// (an `ok: false` answer); internal failures are errors (the caller
    /// retries).
    pub async fn answer(&self, request: Request, now: DateTime<Utc>) -> Outcome {
        if let Err(refusal) = self.gate(Some(request.op())) {
            return Ok(Err(refusal));
        }
        let outcome = self.dispatch(request, now).await?;
        if let Err(refusal) = &outcome {
            tracing::info!(code = refusal.code(), "schedules request refused");
        }
        Ok(outcome)
    }

    async fn dispatch(&self, request: Request, now: DateTime<Utc>) -> Outcome {
        let principal = request.principal().clone();
        let scope = request.op().scope();
        if !principal.holds(scope) {
            return Ok(Err(Refusal::Forbidden(scope)));
        }
        // Ids become parts of keys: `#` could reach another owner's partition.
        for (field, value) in [
            ("principal.id", &principal.id),
            ("principal.workspace", &principal.workspace),
        ] {
            if let Err(rejection) = check_id(field, value) {
                return Ok(Err(rejection.into()));
            }
        }
        let own = match request {
            Request::Shared(shared) => return shared.make(self, now).await,
            Request::Own(own) => own,
        };
        match own {
            Own::List {
                state, limit, cursor, ..
            } => self.list(&principal, state, limit, cursor, now).await,
            Own::Get { task_id, .. } => self.get(&principal, &task_id, now).await,
            Own::Runs { task_id, limit, .. } => self.runs(&principal, &task_id, limit).await,
            Own::Run { task_id, run_id, .. } => self.run(&principal, &task_id, &run_id).await,
            Own::Create(request) => self.create(*request, now).await,
            Own::Update {
                target,
                idempotency_key,
                input,
            } => self.update(&target, &idempotency_key, *input, now).await,
            Own::Pause { target } => self.edit(&target, Edit::Pause { note: None }, now).await,
            Own::Cancel { target } => self.edit(&target, Edit::Cancel { note: None }, now).await,
        }
    }

    /// `get`: the reminder with its instruction, next runs and explanation.
    async fn get(&self, principal: &Principal, task_id: &str, now: DateTime<Utc>) -> Outcome {
        let task = match self.owned(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        Ok(Ok(OwnerAnswer::Detail {
            task: Box::new(Detail {
                summary: summary(&task, now),
                instruction: task.instruction.clone(),
                next_runs: next_runs(&task, now, NEXT_RUNS),
                explanation: explain::explain(&task, Reader::Owner(&principal.id), now),
            }),
        }))
    }

    /// `runs`: the reminder's latest run records, newest first.
    async fn runs(&self, principal: &Principal, task_id: &str, limit: Option<u64>) -> Outcome {
        let limit = match history::runs_limit(limit) {
            Ok(limit) => limit,
            Err(message) => return Ok(Err(Refusal::invalid(message))),
        };
        let task = match self.owned(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let runs = self.store().runs(&task.task_id, limit).await?;
        Ok(Ok(OwnerAnswer::Runs {
            runs: runs.iter().map(|r| history::view(r, true)).collect(),
        }))
    }

    /// `run`: one run, by the id the `Scheduled run finished` event names.
    async fn run(&self, principal: &Principal, task_id: &str, run_id: &str) -> Outcome {
        let task = match self.owned(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let not_found = || Refusal::NotFound(format!("{task_id}: no run {run_id}"));
        let Some(occurrence) = crate::domain::run::occurrence::occurrence_of_run(run_id, task.task_id.as_str()) else {
            return Ok(Err(not_found()));
        };
        Ok(match self.store().run(&task.task_id, occurrence).await? {
            Some(record) => Ok(OwnerAnswer::Run {
                run: history::view(&record, true),
            }),
            None => Err(not_found()),
        })
    }

    /// `create`: create's path, with the owner's cap.
    async fn create(&self, request: CreateRequest, now: DateTime<Utc>) -> Outcome {
        let answer = self
            .create
            .create_as(request, Surface::App, Some(self.settings.max_active), now)
            .await?;
        Ok(match answer {
            Answer::Created { task, replayed } => Ok(OwnerAnswer::Written {
                replayed: Some(replayed),
                task: summary(&task, now),
            }),
            Answer::Rejected(rejection) => Err(rejection.into()),
            Answer::Descriptor(_) => Err(Refusal::invalid("unknown op")),
        })
    }

    /// The principal's own reminder, or `not_found` for anything else.
    async fn owned(&self, principal: &Principal, task_id: &str) -> Result<Result<Task, Refusal>, SchedulesError> {
        let not_found = || Refusal::NotFound(task_id.to_owned());
        let Some(id) = TaskId::parse(task_id) else {
            return Ok(Err(not_found()));
        };
        let task = self.store().task(&principal.workspace, &id).await?;
        Ok(match task {
            Some(task) if owns(principal, &task) => Ok(task),
            _ => Err(not_found()),
        })
    }

    async fn list(
        &self,
        principal: &Principal,
        state: Option<String>,
        limit: Option<u64>,
        cursor: Option<String>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let filter = match state.as_deref() {
            None => StateFilter::NotDeleted,
            Some(text) => match [
                TaskState::Scheduled,
                TaskState::Paused,
                TaskState::Held,
                TaskState::Completed,
                TaskState::Deleted,
            ]
            .into_iter()
            .find(|s| s.as_str() == text)
            {
                Some(state) => StateFilter::Only(state),
                None => return Ok(Err(Refusal::invalid(format!("`{text}` is not a task state")))),
            },
        };
        let limit = match page_limit(limit) {
            Ok(limit) => limit,
            Err(message) => return Ok(Err(Refusal::invalid(message))),
        };
        let after = match cursor.as_deref().map(ListCursor::decode).transpose() {
            Ok(after) => after,
            Err(rejection) => return Ok(Err(rejection.into())),
        };
        let page = self
            .store()
            .owned(&principal.workspace, &principal.id, filter, limit, after.as_ref())
            .await?;
        let tasks = page
            .tasks
            .iter()
            .filter(|t| owns(principal, t))
            .map(|t| summary(t, now))
            .collect();
        Ok(Ok(OwnerAnswer::Page {
            tasks,
            cursor: page.next.map(|c| c.encode()),
        }))
    }

    async fn update(&self, target: &Target, key: &str, input: UpdateInput, now: DateTime<Utc>) -> Outcome {
        let (principal, task_id, expected_version) = (&target.principal, &target.task_id, target.expected_version);
        let checked = match input.check() {
            Ok(checked) => checked,
            Err(rejection) => return Ok(Err(rejection.into())),
        };
        if let Err(rejection) = check_id("idempotency_key", key) {
            return Ok(Err(rejection.into()));
        }
        let Some(id) = TaskId::parse(task_id) else {
            return Ok(Err(Refusal::NotFound(task_id.to_owned())));
        };
        let fingerprint = checked.fingerprint(principal, &id, expected_version);
        if let Some(record) = self
            .store()
            .idempotency_record(&principal.workspace, &principal.id, key)
            .await?
        {
            return self.replay(principal, &record, &fingerprint, now).await;
        }
        let task = match self.editable(target).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Err(refusal) = still_open(&task) {
            return Ok(Err(refusal));
        }
        let mut updated = task.clone();
        if let Err(rejection) = checked.apply(&mut updated, now) {
            return Ok(Err(rejection.into()));
        }
        let record = IdempotencyRecord {
            principal: principal.id.clone(),
            key: key.to_owned(),
            fingerprint: fingerprint.clone(),
            task_id: id,
            workspace: principal.workspace.clone(),
            created_at: now,
            ttl: Some((now + self.settings.retention).timestamp()),
            occurrence: None,
        };
        let changed = commit_with(
            self.store(),
            self.schedules(),
            &task,
            updated,
            now,
            self.settings.retention,
            Some(&record),
        )
        .await?;
        self.updated(target, key, &fingerprint, changed, now).await
    }

    /// An update's write as its answer: the reminder written, a version
    /// conflict, or, when another request took the key first, that
    /// request's answer replayed.
    async fn updated(
        &self,
        target: &Target,
        key: &str,
        fingerprint: &crate::domain::task::idempotency::Fingerprint,
        changed: Changed,
        now: DateTime<Utc>,
    ) -> Outcome {
        let principal = &target.principal;
        match changed {
            Changed::Written(updated) => {
                tracing::info!(task_id = %updated.task_id, version = updated.version, "reminder updated");
                Ok(Ok(OwnerAnswer::Written {
                    replayed: Some(false),
                    task: summary(&updated, now),
                }))
            }
            Changed::VersionMoved { current } => Ok(Err(Refusal::VersionConflict {
                expected: target.expected_version,
                current,
            })),
            Changed::KeyTaken => match self
                .store()
                .idempotency_record(&principal.workspace, &principal.id, key)
                .await?
            {
                Some(winner) => self.replay(principal, &winner, fingerprint, now).await,
                None => Ok(Err(Refusal::Reminder(Rejection::IdempotencyConflict))),
            },
        }
    }

    /// The principal's own reminder at the version the caller read.
    async fn editable(&self, target: &Target) -> Result<Result<Task, Refusal>, SchedulesError> {
        let task = match self.owned(&target.principal, &target.task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if task.version != target.expected_version {
            return Ok(Err(Refusal::VersionConflict {
                expected: target.expected_version,
                current: task.version,
            }));
        }
        Ok(Ok(task))
    }

    async fn replay(
        &self,
        principal: &Principal,
        record: &IdempotencyRecord,
        fingerprint: &crate::domain::task::idempotency::Fingerprint,
        now: DateTime<Utc>,
    ) -> Outcome {
        match record.replay(fingerprint) {
            Replay::Conflict => Ok(Err(Refusal::Reminder(Rejection::IdempotencyConflict))),
            Replay::Same(task_id) => match self.owned(principal, task_id.as_str()).await? {
                Ok(task) => Ok(Ok(OwnerAnswer::Written {
                    replayed: Some(true),
                    task: summary(&task, now),
                })),
                Err(refusal) => Ok(Err(refusal)),
            },
        }
    }
}

/// An edit's refusal as the owner's answer names it: a passed time is the
/// schedule's error, as create's and update's are.
fn owners_refusal(refusal: EditRefusal) -> Refusal {
    match refusal {
        EditRefusal::InstantPassed(e) => Rejection::Instant(e).into(),
        EditRefusal::UntilPassed { .. } => Rejection::InvalidSchedule(refusal.to_string()).into(),
        other => Refusal::invalid(other.to_string()),
    }
}

/// Whether the principal owns the task: a reminder of this principal in
/// its workspace.
fn owns(principal: &Principal, task: &Task) -> bool {
    task.kind == TaskKind::Reminder
        && task.workspace == principal.workspace
        && matches!(&task.provenance, Provenance::User { principal: p } if *p == principal.id)
}

/// A cancelled or finished reminder is not changed any more.
fn still_open(task: &Task) -> Result<(), Refusal> {
    match task.state() {
        TaskState::Deleted => Err(Refusal::invalid("the reminder was cancelled")),
        TaskState::Completed => Err(Refusal::invalid("the reminder already ran; create a new one")),
        _ => Ok(()),
    }
}

/// The reminder as it now is, as a write answers it.
fn unchanged(task: &Task, now: DateTime<Utc>) -> OwnerAnswer {
    OwnerAnswer::Written {
        replayed: None,
        task: summary(task, now),
    }
}

/// The next instants it runs at, while it is scheduled, as the answers
/// spell them.
fn next_runs(task: &Task, now: DateTime<Utc>, count: usize) -> Vec<String> {
    explain::next_runs(task, now, count)
        .into_iter()
        .map(format_utc)
        .collect()
}

/// A reminder as `list` and the writes answer it.
pub fn summary(task: &Task, now: DateTime<Utc>) -> Summary {
    Summary {
        task_id: task.task_id.clone(),
        title: task.title.clone(),
        schedule: ScheduleView::of(&task.spec.schedule),
        state: task.state(),
        next_run_at: next_runs(task, now, 1).into_iter().next(),
        version: task.version,
    }
}

impl<S: TaskStore + TaskCatalog + ReminderStore, G: Schedules, Q: RunQueue> Edits for OwnerSchedules<S, G, Q> {
    type Outcome = Outcome;

    /// A pause, resume, cancel, skip next or unskip: the owner's rules are
    /// `domain::task::edit`'s.
    async fn edit(&self, target: &Target, edit: Edit, now: DateTime<Utc>) -> Outcome {
        let (principal, expected_version) = (&target.principal, target.expected_version);
        let task = match self.editable(target).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let decision = match edit::decide(&edit, Actor::Owner(&principal.id), &task, now) {
            Ok(decision) => decision,
            Err(refusal) => return Ok(Err(owners_refusal(refusal))),
        };
        match change::commit(
            self.store(),
            self.schedules(),
            &task,
            decision,
            now,
            self.settings.retention,
        )
        .await?
        {
            Ok(task) => Ok(Ok(unchanged(&task, now))),
            Err(current) => Ok(Err(Refusal::VersionConflict {
                expected: expected_version,
                current,
            })),
        }
    }

    /// One extra occurrence of a recurring reminder now (`app::run_now`).
    async fn run_now(&self, target: &Target, key: &str, now: DateTime<Utc>) -> Outcome {
        let (principal, task_id, expected_version) = (&target.principal, &target.task_id, target.expected_version);
        if let Err(rejection) = check_id("idempotency_key", key) {
            return Ok(Err(rejection.into()));
        }
        let task = match self.owned(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        // A key already used answers what it answered first, whatever the
        // reminder became since (`run_now::request` replays it): only a new
        // key is refused for a one-time reminder.
        if task.spec.schedule.is_one_time()
            && self
                .store()
                .idempotency_record(&principal.workspace, &principal.id, key)
                .await?
                .is_none()
        {
            return Ok(Err(Refusal::invalid(
                "run_now is for recurring reminders: a one-time reminder runs at its time (move it with update)",
            )));
        }
        let ask = run_now::Ask {
            principal,
            task: &task,
            install: None,
            key,
            expected_version,
        };
        let requested = run_now::request(
            (self.store(), self.schedules(), &self.queue),
            ask,
            now,
            self.settings.retention,
        )
        .await?;
        Ok(match requested {
            Requested::Sent { run_id, task, replayed } => Ok(OwnerAnswer::RunNow {
                run_id,
                replayed,
                task: summary(&task, now),
            }),
            Requested::Refused(why) => Err(Refusal::invalid(format!("run_now refused: {why}"))),
            Requested::VersionMoved { current } => Err(Refusal::VersionConflict {
                expected: expected_version,
                current,
            }),
            Requested::Conflict => Err(Refusal::Reminder(Rejection::IdempotencyConflict)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_a_request_variant_and_the_writes_are_the_edits() {
        for op in Op::ALL {
            assert_eq!(Op::named(op.name()), Some(op));
        }
        change::assert_every_op_decodes::<Own>();
        assert_eq!(Op::named("delete"), None);
        let writes: Vec<&str> = Op::ALL.into_iter().filter(|op| op.writes()).map(Op::name).collect();
        assert_eq!(
            writes,
            [
                "create",
                "update",
                "pause",
                "resume",
                "cancel",
                "skip_next",
                "unskip",
                "run_now"
            ]
        );
    }
}
