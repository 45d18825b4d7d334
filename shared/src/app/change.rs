//! One path for changing an existing task: an admin's operations, a
//! reminder owner's update, pause, resume and cancel, and reconcile's
//! planned changes (a new task is inserted, not changed). The caller has read
//! the task at the version it was shown and applied a typed edit
//! (`domain::task::overrides::OverrideEdit`, `domain::reminder`'s checked update,
//! `domain::connector::approval`) into a `domain::task::edit::Decision`;
//! [`commit`] does the rest, the same way for all:
//!
//! 1. the new version and time; a skip of the next occurrence moved to
//!    the new schedule's next one, or forgotten once spent
//!    (`domain::task::skip::carry`); recorded run-now occurrences forgotten
//!    when the schedule changed or the task stopped running
//!    (`domain::task::run_now::carry`);
//! 2. the order of the two writes (`domain::run::definition::Order`):
//!    a schedule that must fire again, elsewhere or never is put first;
//! 3. the task written conditionally on the version read, exactly the
//!    attributes the edit changed (`Write::change`; the store derives them
//!    from the task as read and as edited), with an idempotency record when
//!    the caller has one;
//! 4. a schedule that must stop firing is put after the write, re-read and
//!    put again while the task moves on ([`put_in_step`]), so an
//!    owner's pause racing an admin's resume ends in step;
//! 5. a lost race puts the schedule back as the task now is;
//! 6. a reminder that this change finished (cancelled) expires
//!    `RETENTION_DAYS` from now, and so does the record of the key it was
//!    created with (SPEC §3); a restored one expires no more.

use chrono::{DateTime, Duration, Utc};

use crate::app::create::CreateError;
use crate::domain::connector::reconcile::Write;
use crate::domain::reminder::Principal;
use crate::domain::run::definition::{Order, ScheduleDefinition};
use crate::domain::task::edit::{Decision, Edit};
use crate::domain::task::idempotency::IdempotencyRecord;
use crate::domain::task::{Provenance, Task};
use crate::domain::{task::run_now, task::skip};
use crate::ports::{
    QueueError, ReminderStore, ScheduleError, Schedules, StoreError, TaskCatalog, TaskStore, UpdateWritten, Versioned,
};

/// What every edit of an existing task names, on both surfaces
/// (`app::admin`, `app::schedules`): who asks, the task, and the version
/// they read. Each request variant that edits carries it flattened, so the
/// wire keeps its fields and every edit's use case takes the one type.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Target {
    pub principal: Principal,
    pub task_id: String,
    pub expected_version: u64,
}

/// An internal failure of a request to either surface (`app::admin`,
/// `app::schedules`): the function errors and the caller retries.
#[derive(Debug, thiserror::Error)]
pub enum SurfaceError {
    #[error(transparent)]
    Create(#[from] CreateError),
    #[error(transparent)]
    Step(#[from] StepError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<StoreError> for SurfaceError {
    fn from(e: StoreError) -> Self {
        SurfaceError::Step(e.into())
    }
}

impl From<ScheduleError> for SurfaceError {
    fn from(e: ScheduleError) -> Self {
        SurfaceError::Step(e.into())
    }
}

/// The requests the owner and an admin make with the same fields,
/// declared once for both surfaces' requests ([`Request`]).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SharedRequest {
    /// A paused task runs again (`domain::task::edit`).
    Resume {
        #[serde(flatten)]
        target: Target,
    },
    /// The next occurrence is skipped (`domain::task::skip`).
    SkipNext {
        #[serde(flatten)]
        target: Target,
    },
    /// Takes a skip back before its occurrence comes.
    Unskip {
        #[serde(flatten)]
        target: Target,
    },
    /// One extra occurrence now (`app::run_now`), exactly once per key.
    RunNow {
        #[serde(flatten)]
        target: Target,
        idempotency_key: String,
    },
}

/// A surface that takes the shared requests: its edit step, which applies
/// `domain::task::edit`'s rules for its actor, and its run now.
pub trait Edits {
    type Outcome;

    fn edit(&self, target: &Target, edit: Edit, now: DateTime<Utc>) -> impl Future<Output = Self::Outcome> + Send;

    fn run_now(&self, target: &Target, key: &str, now: DateTime<Utc>) -> impl Future<Output = Self::Outcome> + Send;
}

impl SharedRequest {
    /// The `op`s that name them.
    pub const OPS: [&'static str; 4] = ["resume", "skip_next", "unskip", "run_now"];

    pub fn target(&self) -> &Target {
        match self {
            SharedRequest::Resume { target }
            | SharedRequest::SkipNext { target }
            | SharedRequest::Unskip { target }
            | SharedRequest::RunNow { target, .. } => target,
        }
    }

    /// The request, made on `surface`.
    pub async fn make<E: Edits>(self, surface: &E, now: DateTime<Utc>) -> E::Outcome {
        match self {
            SharedRequest::Resume { target } => surface.edit(&target, Edit::Resume, now).await,
            SharedRequest::SkipNext { target } => surface.edit(&target, Edit::SkipNext, now).await,
            SharedRequest::Unskip { target } => surface.edit(&target, Edit::Unskip, now).await,
            SharedRequest::RunNow {
                target,
                idempotency_key,
            } => surface.run_now(&target, &idempotency_key, now).await,
        }
    }
}

/// A surface's own requests (`app::admin::Own`, `app::schedules::Own`),
/// tagged by `op` as the shared ones are.
pub trait OwnRequests: serde::de::DeserializeOwned {
    /// Every `op` the surface takes, the shared ones included: the list an
    /// unknown `op`'s error gives.
    const OPS: &'static [&'static str];

    fn principal(&self) -> &Principal;
}

/// A request to the owner's or an admin's surface: a shared one or one of
/// the surface's own, chosen by its `op`. An unknown `op` is refused with
/// every `op` the surface takes; a known one with its own fields' error.
#[derive(Debug, Clone, PartialEq)]
pub enum Request<Own> {
    Shared(SharedRequest),
    Own(Own),
}

impl<Own: OwnRequests> Request<Own> {
    pub fn principal(&self) -> &Principal {
        match self {
            Request::Shared(shared) => &shared.target().principal,
            Request::Own(own) => own.principal(),
        }
    }
}

impl<'de, Own: OwnRequests> serde::Deserialize<'de> for Request<Own> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        match value.get("op").and_then(serde_json::Value::as_str) {
            Some(op) if SharedRequest::OPS.contains(&op) => serde_json::from_value(value).map(Request::Shared),
            Some(op) if !Own::OPS.contains(&op) => return Err(D::Error::unknown_variant(op, Own::OPS)),
            _ => serde_json::from_value(value).map(Request::Own),
        }
        .map_err(D::Error::custom)
    }
}

/// For each surface's tests: every `op` it lists decodes as its own or a
/// shared request, and an unknown one is refused naming them all.
#[cfg(test)]
pub(crate) fn assert_every_op_decodes<Own: OwnRequests + std::fmt::Debug>() {
    for op in Own::OPS {
        let error = serde_json::from_value::<Request<Own>>(serde_json::json!({ "op": op }))
            .expect_err("no fields")
            .to_string();
        assert!(!error.contains("unknown variant"), "{op}: {error}");
    }
    for op in SharedRequest::OPS {
        assert!(Own::OPS.contains(&op), "{op} is shared");
    }
    let error = serde_json::from_value::<Request<Own>>(serde_json::json!({ "op": "bogus" }))
        .expect_err("unknown")
        .to_string();
    assert!(error.starts_with("unknown variant `bogus`, expected one of"), "{error}");
    assert!(Own::OPS.iter().all(|op| error.contains(&format!("`{op}`"))), "{error}");
    let missing = serde_json::from_value::<Request<Own>>(serde_json::json!({}))
        .expect_err("no op")
        .to_string();
    assert!(missing.contains("missing field `op`"), "{missing}");
}

#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("task {0} has a schedule EventBridge cannot take: {1}")]
    Unschedulable(String, String),
}

/// Puts re-read rounds after a write before leaving the rest to the writer
/// that keeps changing the task (it runs this too).
const STEP_ROUNDS: usize = 8;

/// Puts `written`'s schedule, then re-reads the task and puts again while
/// the task moved on: two writers whose task writes are ordered by their
/// versions may have their schedule puts land in the other order, and the
/// last one to put always confirms, by a read after its put, that it put
/// the latest version. So the schedule ends in step with the task's final
/// state, whatever the interleaving.
pub async fn put_in_step<S: TaskStore, G: Schedules>(
    store: &S,
    schedules: &G,
    written: &Task,
) -> Result<(), StepError> {
    let mut task = written.clone();
    for _ in 0..STEP_ROUNDS {
        let definition = ScheduleDefinition::for_task(&task)
            .map_err(|e| StepError::Unschedulable(task.task_id.to_string(), e.to_string()))?;
        schedules.put(&definition).await?;
        match store.task(&task.workspace, &task.task_id).await? {
            Some(fresh) if fresh.version != task.version => task = fresh,
            _ => return Ok(()),
        }
    }
    tracing::info!(task_id = %task.task_id, "the task kept changing; its latest writer puts its schedule");
    Ok(())
}

/// How a change ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Changed {
    /// Written: the task as it now is.
    Written(Box<Task>),
    /// The task moved since it was read; its version now (0: it is gone).
    VersionMoved { current: u64 },
    /// The idempotency key was taken meanwhile: read its record.
    KeyTaken,
}

fn unschedulable(task: &Task, error: impl std::fmt::Display) -> StepError {
    StepError::Unschedulable(task.task_id.to_string(), error.to_string())
}

/// A decided edit of `before` (read at the version the caller checked):
/// nothing written when it changes nothing, else the edited task written
/// and its Scheduler schedule kept in step; see the module doc for the
/// steps. The task as it now is, or `Err(current)`: the task moved since
/// it was read, and this is its version now (0: it is gone).
pub async fn commit<S, G>(
    store: &S,
    schedules: &G,
    before: &Task,
    decision: Decision,
    now: DateTime<Utc>,
    retention: Duration,
) -> Result<Result<Task, u64>, StepError>
where
    S: TaskStore + TaskCatalog + ReminderStore,
    G: Schedules,
{
    let Decision::Write(after) = decision else {
        return Ok(Ok(before.clone()));
    };
    Ok(
        match commit_with(store, schedules, before, *after, now, retention, None).await? {
            Changed::Written(task) => {
                tracing::info!(task_id = %task.task_id, version = task.version, state = task.state().as_str(), "change written");
                Ok(*task)
            }
            Changed::VersionMoved { current } => Err(current),
            // Only a change with an idempotency record can find its key taken.
            Changed::KeyTaken => Err(0),
        },
    )
}

/// The edited task as it is written: the next version, stamped `now`; a
/// skip of the next occurrence kept the next one across a move, a run now
/// dropped once stale (the task moved or stopped running); the expiry a
/// finished reminder takes.
fn stamp(before: &Task, after: &mut Task, now: DateTime<Utc>, retention: Duration) {
    after.version = before.version + 1;
    after.updated_at = now;
    after.skip_next = skip::carry(
        &before.spec.schedule,
        &after.spec.schedule,
        after.skip_next.as_ref(),
        now,
    );
    after.run_now = run_now::carry(
        &before.spec.schedule,
        &after.spec.schedule,
        after.should_fire(),
        &after.run_now,
    );
    after.ttl = after.expiry_after_change(now, retention);
}

/// [`commit`], with an idempotency record written in the same transaction
/// (`None`: without one).
pub async fn commit_with<S, G>(
    store: &S,
    schedules: &G,
    before: &Task,
    mut after: Task,
    now: DateTime<Utc>,
    retention: Duration,
    record: Option<&IdempotencyRecord>,
) -> Result<Changed, StepError>
where
    S: TaskStore + TaskCatalog + ReminderStore,
    G: Schedules,
{
    stamp(before, &mut after, now, retention);
    let order = Order::of(before, &after).map_err(|e| unschedulable(&after, e))?;
    // A schedule the change leaves as it was is not put again: a put costs a
    // request and starts a `rate()` schedule's phase again.
    let unchanged = matches!(
        (ScheduleDefinition::for_task(before), ScheduleDefinition::for_task(&after)),
        (Ok(was), Ok(is)) if was == is
    );
    if order == Order::ScheduleFirst && !unchanged {
        let definition = ScheduleDefinition::for_task(&after).map_err(|e| unschedulable(&after, e))?;
        schedules.put(&definition).await?;
    }
    let write = Write::change(before, after, Vec::new());
    let written = match record {
        None => match store.write_task(&write).await? {
            Versioned::Written => UpdateWritten::Written,
            Versioned::Conflict => UpdateWritten::VersionMoved,
        },
        Some(record) => store.write_with_idempotency(&write, record).await?,
    };
    let after = write.task;
    if written == UpdateWritten::Written {
        if order == Order::TaskFirst && !unchanged {
            Box::pin(put_in_step(store, schedules, &after)).await?;
        }
        if after.ttl.is_some() && before.ttl.is_none() {
            // The reminder finished: the record of the key it was created
            // with expires with it.
            if let Some(key) = &after.created_with {
                store
                    .expire_idempotency(&after.workspace, owner_of(&after), key, after.ttl.unwrap_or_default())
                    .await?;
            }
        }
        return Ok(Changed::Written(Box::new(after)));
    }
    let current = store.task(&before.workspace, &before.task_id).await?;
    if order == Order::ScheduleFirst && !unchanged {
        // This change's put may have landed after the winner's: put back
        // what the task now is.
        match &current {
            Some(task) => Box::pin(put_in_step(store, schedules, task)).await?,
            None => schedules.delete(before.task_id.as_str()).await?,
        }
    }
    Ok(match written {
        UpdateWritten::KeyTaken => Changed::KeyTaken,
        _ => Changed::VersionMoved {
            current: current.map_or(0, |t| t.version),
        },
    })
}

fn owner_of(task: &Task) -> &str {
    match &task.provenance {
        Provenance::User { principal } => principal,
        Provenance::Connector { install_id, .. } => install_id,
    }
}
