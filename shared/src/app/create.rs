//! The create use case (SPEC §4): a chat backend's Lambda invoke becomes a
//! reminder task and its one-time Scheduler schedule, or a typed refusal.
//!
//! Order of writes, chosen so that a crash at any point converges when the
//! caller retries with the same key (rule 5):
//! 1. read the principal's idempotency record: a hit replays or conflicts and
//!    writes nothing;
//! 2. put the schedule, named by the task id, which derives from (workspace,
//!    principal, key): a retry finds and overwrites the same schedule, so a
//!    crash here leaves at most one schedule that the retry adopts;
//! 3. write the task and the idempotency record in one transaction.
//!
//! A task therefore never exists without its schedule. A schedule without a
//! task exists only between a crash in 2-3 and the caller's retry; should the
//! caller never retry, it fires once, the runner's door skips it as `missing`,
//! and Scheduler deletes it after that delivery.
//!
//! The schedules function (SPEC §11) creates through the same path, with
//! its own surface (`daily` and `weekly` too) and the cap on active
//! reminders: the owner's reminders are counted from their owner item (read
//! consistently) and the owner index, and the transaction of step 3 also
//! lists the new reminder on the owner item, conditional on the version
//! counted, so two creates never both take the last place; the loser counts
//! again and, refused, deletes the schedule it put. Create's own reminders
//! (the model's tool, §4, which has no `too_many_active`) count through the
//! owner index; create writes no owner item.
//!
//! Two concurrent calls with one key and different inputs both put the
//! schedule before their transaction; the loser of the transaction puts the
//! winner's schedule back before answering `idempotency_conflict`. The
//! loser's put happens before its failed transaction, which happens after the
//! winner's put, so the repair is the last write.

use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Flags;
use crate::domain::payload::Payload;
use crate::domain::reminder::descriptor::tool_descriptor;
use crate::domain::reminder::{CreateRequest, Rejection, Surface};
use crate::domain::run::definition::ScheduleDefinition;
use crate::domain::schedule::{Schedule, format_utc};
use crate::domain::task::idempotency::{IdempotencyRecord, Replay};
use crate::domain::task::limits::Ceilings;
use crate::domain::task::{Task, TaskId};
use crate::ports::{ReminderInserted, ScheduleError, Schedules, StoreError, TaskStore};
use crate::trace::{Tracer, key};

/// How often a capped create counts again after the owner's reminders moved.
const OWNER_RETRIES: usize = 5;

/// An internal failure: the function errors and the caller retries with the
/// same key (rule 8).
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("idempotency record for task {0} has no task")]
    Dangling(TaskId),
    #[error("task {0}'s schedule cannot be expressed: {1}")]
    Unschedulable(TaskId, String),
    #[error("the reminders of principal {0} kept changing while a create counted them")]
    OwnerBusy(String),
}

/// The invoke payload, by `op`.
#[derive(Debug, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Create(Box<CreateRequest>),
    Describe,
}

/// A successful or refused answer; encoded by [`Answer::to_json`].
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Created { task: Box<Task>, replayed: bool },
    Descriptor(Value),
    Rejected(Rejection),
}

impl Answer {
    /// The response shape of SPEC §4.
    pub fn to_json(&self) -> Value {
        match self {
            Answer::Created { task, replayed } => json!({
                "ok": true,
                "replayed": replayed,
                "task": task_view(task),
            }),
            Answer::Descriptor(descriptor) => json!({"ok": true, "descriptor": descriptor}),
            Answer::Rejected(rejection) => json!({
                "ok": false,
                "error": {"code": rejection.code(), "message": rejection.to_string()},
            }),
        }
    }
}

/// What the chat backend learns of the task: no instruction echoed back.
fn task_view(task: &Task) -> Value {
    let at = match &task.spec.schedule {
        Schedule::At { at } => Some(format_utc(*at)),
        Schedule::Cron { .. } | Schedule::Rate { .. } | Schedule::Calendar { .. } => None,
    };
    json!({
        "task_id": task.task_id,
        "workspace": task.workspace,
        "kind": task.kind,
        "title": task.title,
        "at": at,
        "state": task.state().as_str(),
        "limits": task.spec.limits,
        "created_at": format_utc(task.created_at),
    })
}

/// What create needs besides its ports.
#[derive(Debug, Clone)]
pub struct CreateSettings {
    pub flags: Flags,
    pub ceilings: Ceilings,
}

pub struct CreateReminder<S, G> {
    store: S,
    schedules: G,
    settings: CreateSettings,
    tracer: Tracer,
}

impl<S: TaskStore, G: Schedules> crate::trace::Traced for CreateReminder<S, G> {
    fn tracer(&self) -> &Tracer {
        &self.tracer
    }

    fn tracer_mut(&mut self) -> &mut Tracer {
        &mut self.tracer
    }
}

impl<S: TaskStore, G: Schedules> CreateReminder<S, G> {
    pub fn new(store: S, schedules: G, settings: CreateSettings) -> Self {
        Self {
            store,
            schedules,
            settings,
            tracer: Tracer::off(),
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn schedules(&self) -> &G {
        &self.schedules
    }

    /// Answers one invoke payload at `now`: a value, or the caller's text
    /// decoded strictly (a repeated key is `invalid_request`). The call is
    /// the root of a trace (`create`), its outcome a code on it.
    pub async fn handle(&self, payload: impl Into<Payload>, now: DateTime<Utc>) -> Result<Answer, CreateError> {
        let span = self.tracer.create();
        let answered = span.run(self.answer(payload.into(), now)).await;
        match &answered {
            Ok(Answer::Created { task, replayed }) => {
                span.set(key::TASK_ID, task.task_id.to_string());
                span.set(key::WORKSPACE, task.workspace.clone());
                span.set(key::OUTCOME, if *replayed { "replayed" } else { "created" });
            }
            Ok(Answer::Descriptor(_)) => span.set(key::OUTCOME, "described"),
            Ok(Answer::Rejected(rejection)) => span.set(key::OUTCOME, format!("rejected:{}", rejection.code())),
            Err(_) => span.fail("internal"),
        }
        span.end();
        answered
    }

    async fn answer(&self, payload: Payload, now: DateTime<Utc>) -> Result<Answer, CreateError> {
        if !self.settings.flags.create_enabled() {
            return Ok(Answer::Rejected(Rejection::FeatureDisabled));
        }
        if let Some(key) = payload.duplicate_key {
            return Ok(rejected(duplicate_key(&key)));
        }
        let request = match serde_json::from_value::<Request>(payload.value) {
            Ok(request) => request,
            Err(e) => {
                return Ok(Answer::Rejected(Rejection::InvalidRequest(format!(
                    "malformed request: {e}"
                ))));
            }
        };
        match request {
            Request::Describe => Ok(Answer::Descriptor(tool_descriptor())),
            Request::Create(request) => self.create(*request, now).await,
        }
    }

    async fn create(&self, request: CreateRequest, now: DateTime<Utc>) -> Result<Answer, CreateError> {
        self.create_as(request, Surface::Tool, None, now).await
    }

    /// Creates a reminder through `surface`; with `cap`, refuses one more
    /// than `cap` scheduled or paused reminders of the principal.
    #[tracing::instrument(skip_all, fields(workspace = %request.principal.workspace, task_id))]
    pub async fn create_as(
        &self,
        request: CreateRequest,
        surface: Surface,
        cap: Option<usize>,
        now: DateTime<Utc>,
    ) -> Result<Answer, CreateError> {
        let checked = match request.check(surface) {
            Ok(checked) => checked,
            Err(rejection) => return Ok(rejected(rejection)),
        };
        tracing::Span::current().record("task_id", checked.task_id().as_str());
        let (workspace, principal, key) = (
            checked.principal().workspace.clone(),
            checked.principal().id.clone(),
            checked.idempotency_key().to_owned(),
        );
        if let Some(record) = self.store.idempotency_record(&workspace, &principal, &key).await? {
            return self
                .replay(record.replay(checked.fingerprint()), &record.workspace)
                .await;
        }
        let (task, record) = match checked.into_task(now, &self.settings.ceilings) {
            Ok(built) => built,
            Err(rejection) => return Ok(rejected(rejection)),
        };
        let inserted = match self.insert(&task, &record, &principal, cap).await? {
            Ok(inserted) => inserted,
            Err(answer) => return Ok(answer),
        };
        match inserted {
            ReminderInserted::Created | ReminderInserted::OwnerMoved => {
                tracing::info!("reminder created");
                Ok(Answer::Created {
                    task: Box::new(task),
                    replayed: false,
                })
            }
            ReminderInserted::KeyTaken => {
                let winner = self
                    .store
                    .idempotency_record(&workspace, &principal, &key)
                    .await?
                    .ok_or_else(|| CreateError::Dangling(task.task_id.clone()))?;
                let replay = winner.replay(&record.fingerprint);
                if replay == Replay::Conflict {
                    // Our put may have overwritten the winner's schedule.
                    let winner_task = self.load(&winner.workspace, &winner.task_id).await?;
                    self.schedules.put(&schedule_of(&winner_task)?).await?;
                }
                self.replay(replay, &winner.workspace).await
            }
        }
    }

    /// Steps 2 and 3 of the order of writes: the schedule put, then the task
    /// and its key's record in one transaction, with the owner's item when
    /// `cap` counts their reminders (read again, up to `OWNER_RETRIES`
    /// times, while other writes move it). A cap reached meanwhile is the
    /// answer, with the schedule taken back: no residue.
    async fn insert(
        &self,
        task: &Task,
        record: &IdempotencyRecord,
        principal: &str,
        cap: Option<usize>,
    ) -> Result<Result<ReminderInserted, Answer>, CreateError> {
        let mut owner = None;
        if let Some(max) = cap {
            let counted = self.store.owner_reminders(&task.workspace, principal).await?;
            if counted.active() >= max {
                return Ok(Err(rejected(Rejection::TooManyActive { max })));
            }
            owner = Some(counted);
        }
        self.schedules.put(&schedule_of(task)?).await?;
        let mut attempts = 0;
        loop {
            match self.store.insert_with_idempotency(task, record, owner.as_ref()).await? {
                ReminderInserted::OwnerMoved if attempts < OWNER_RETRIES => {
                    attempts += 1;
                    let counted = self.store.owner_reminders(&task.workspace, principal).await?;
                    if let Some(max) = cap.filter(|max| counted.active() >= *max) {
                        // The last place went to another create: no residue.
                        self.schedules.delete(task.task_id.as_str()).await?;
                        return Ok(Err(rejected(Rejection::TooManyActive { max })));
                    }
                    owner = Some(counted);
                }
                ReminderInserted::OwnerMoved => {
                    self.schedules.delete(task.task_id.as_str()).await?;
                    return Err(CreateError::OwnerBusy(principal.to_owned()));
                }
                other => return Ok(Ok(other)),
            }
        }
    }

    async fn replay(&self, replay: Replay, workspace: &str) -> Result<Answer, CreateError> {
        match replay {
            Replay::Same(task_id) => {
                let task = self.load(workspace, &task_id).await?;
                tracing::info!("replayed");
                Ok(Answer::Created {
                    task: Box::new(task),
                    replayed: true,
                })
            }
            Replay::Conflict => Ok(rejected(Rejection::IdempotencyConflict)),
        }
    }

    async fn load(&self, workspace: &str, task_id: &TaskId) -> Result<Task, CreateError> {
        self.store
            .task(workspace, task_id)
            .await?
            .ok_or_else(|| CreateError::Dangling(task_id.clone()))
    }
}

fn rejected(rejection: Rejection) -> Answer {
    tracing::info!(code = rejection.code(), "create refused");
    Answer::Rejected(rejection)
}

/// A reminder's schedule: `at(...)` for a one-time reminder, `cron(...)` in
/// its zone for a daily or weekly one.
pub(crate) fn schedule_of(task: &Task) -> Result<ScheduleDefinition, CreateError> {
    ScheduleDefinition::for_task(task).map_err(|e| CreateError::Unschedulable(task.task_id.clone(), e.to_string()))
}

/// A payload that repeats a key: what runs could differ from what was shown.
pub fn duplicate_key(key: &str) -> Rejection {
    Rejection::InvalidRequest(format!(
        "malformed request: the key `{key}` appears more than once; each key must appear once"
    ))
}
