//! One path for changing an existing task: an admin's operations, a
//! reminder owner's update, pause, resume and cancel, and reconcile's
//! planned changes (a new task is inserted, not changed). The caller has read
//! the task at the version it was shown and applied a typed edit
//! (`domain::task::overrides::OverrideEdit`, `domain::reminder`'s checked update,
//! `domain::connector::approval`); [`commit`] does the rest, the same way for all:
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

use crate::domain::connector::reconcile::Write;
use crate::domain::run::definition::{Order, ScheduleDefinition};
use crate::domain::task::idempotency::IdempotencyRecord;
use crate::domain::task::{Provenance, Task};
use crate::domain::{task::run_now, task::skip};
use crate::ports::{
    ReminderStore, ScheduleError, Schedules, StoreError, TaskCatalog, TaskStore, UpdateWritten, Versioned,
};

/// A schedule put that could not be brought in step.
/// What every edit of an existing task names, on both surfaces
/// (`app::admin`, `app::schedules`): who asks, the task, and the version
/// they read. Each request variant that edits carries it flattened, so the
/// wire keeps its fields and every edit's use case takes the one type.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
pub struct Target {
    pub principal: crate::domain::reminder::Principal,
    pub task_id: String,
    pub expected_version: u64,
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

/// Writes `after`, the caller's edit of `before` (read at the version the
/// caller checked), and keeps its Scheduler schedule in step; see the
/// module doc for the steps. `Err(current)`: the task moved since it was
/// read, and this is its version now (0: it is gone).
pub async fn commit<S, G>(
    store: &S,
    schedules: &G,
    before: &Task,
    after: Task,
    now: DateTime<Utc>,
    retention: Duration,
) -> Result<Result<Task, u64>, StepError>
where
    S: TaskStore + TaskCatalog + ReminderStore,
    G: Schedules,
{
    Ok(
        match commit_with(store, schedules, before, after, now, retention, None).await? {
            Changed::Written(task) => Ok(*task),
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
    if order == Order::ScheduleFirst {
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
        if order == Order::TaskFirst {
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
    if order == Order::ScheduleFirst {
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
