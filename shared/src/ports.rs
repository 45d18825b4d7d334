//! Ports: what the use cases need from the world, as traits. The adapters in
//! `adapters/` implement them on DynamoDB and EventBridge Scheduler; tests run
//! the use cases on those same adapters against a local AWS.
//!
//! Invariant: a failed DynamoDB condition comes back as a domain outcome
//! (e.g. [`Inserted::KeyTaken`]), never as an error string to parse.

use std::future::Future;

use chrono::{DateTime, Utc};

use crate::domain::idempotency::IdempotencyRecord;
use crate::domain::occurrence::schedule_input;
use crate::domain::schedule::{Expression, at_expression};
use crate::domain::task::{Task, TaskId, TaskKind};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The store failed: the call may be retried.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("DynamoDB {operation} failed")]
    Request {
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

pub trait TaskStore: Send + Sync {
    fn idempotency_record(
        &self,
        principal: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send;

    fn task(&self, workspace: &str, task_id: &TaskId) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send;

    /// Writes a new task and its idempotency record atomically: both or neither.
    fn insert_with_idempotency(
        &self,
        task: &Task,
        record: &IdempotencyRecord,
    ) -> impl Future<Output = Result<Inserted, StoreError>> + Send;
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

/// One task's Scheduler schedule, as the system wants it to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleDefinition {
    /// The task id: one schedule per task, found again by name.
    pub name: String,
    pub expression: Expression,
    /// One-time schedules delete themselves after their one delivery.
    pub one_time: bool,
    pub enabled: bool,
    /// The runs-queue message template (see `domain::occurrence`).
    pub input: String,
    /// Content-free: the kind and the task id, never the title.
    pub description: String,
}

impl ScheduleDefinition {
    /// The schedule of a one-time task firing at `at`.
    pub fn one_time(task: &Task, at: DateTime<Utc>) -> Self {
        let kind = match task.kind {
            TaskKind::Reminder => "reminder",
            TaskKind::Connector => "connector task",
        };
        Self {
            name: task.task_id.to_string(),
            expression: at_expression(at),
            one_time: true,
            enabled: task.should_fire(),
            input: schedule_input(&task.task_id, &task.workspace),
            description: format!("{kind} {}", task.task_id),
        }
    }
}

pub trait Schedules: Send + Sync {
    /// Creates the schedule, or brings an existing one of that name in step:
    /// safe to repeat, last writer wins.
    fn put(&self, schedule: &ScheduleDefinition) -> impl Future<Output = Result<(), ScheduleError>> + Send;
}
