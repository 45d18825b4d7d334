//! A task's Scheduler schedule as the system wants it to be, built in one
//! place ([`ScheduleDefinition::for_task`]) for every writer: create,
//! schedules, reconcile, admin and the daily pass. `ports::Schedules` puts
//! it; the scheduler adapter maps it onto the SDK.
//!
//! Invariants: one schedule per task, named by the task id; enabled exactly
//! when the task should fire; its input is the runs-queue message template
//! (`occurrence::schedule_input`) and its description content-free (the
//! kind and the id, never the title); a completed one-time task's schedule
//! is retired and never written again.

use super::occurrence::schedule_input;
use crate::domain::schedule::Expression;
use crate::domain::schedule::cron::CronError;
use crate::domain::task::{Task, TaskKind, TaskState};

/// One task's Scheduler schedule, as the system wants it to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleDefinition {
    /// The task id: one schedule per task, found again by name.
    pub name: String,
    pub expression: Expression,
    /// The schedule has a last delivery (a one-time instant, or an
    /// `EndDate` from a reminder's `until`): it deletes itself after it
    /// (`ActionAfterCompletion=DELETE`), holding no place in the account's
    /// schedule quota once it is done.
    pub ends: bool,
    pub enabled: bool,
    /// The runs-queue message template (see `domain::run::occurrence`).
    pub input: String,
    /// Content-free: the kind and the task id, never the title.
    pub description: String,
    /// A task that has no schedule any more, whoever writes (admin,
    /// reconcile's repair, the owner): a one-time task that has run (its
    /// schedule deleted itself after its one delivery,
    /// `ActionAfterCompletion=DELETE`, and a new `at()` in the past would be
    /// a schedule for nothing), and a reminder that is completed or
    /// cancelled (it holds no place in the account's schedule quota). `put`
    /// deletes it (a missing one stays missing).
    pub retired: bool,
}

impl ScheduleDefinition {
    /// The schedule a task's approved spec runs on, enabled exactly when the
    /// task should fire.
    pub fn for_task(task: &Task) -> Result<Self, CronError> {
        let expression = task.spec.schedule.expression()?;
        Ok(Self {
            name: task.task_id.to_string(),
            expression,
            ends: task.spec.schedule.ends(),
            enabled: task.should_fire(),
            input: schedule_input(&task.task_id, &task.workspace),
            description: match task.kind {
                TaskKind::Reminder => format!("reminder {}", task.task_id),
                TaskKind::Connector => format!("connector task {}", task.task_id),
            },
            retired: (task.spec.schedule.is_one_time() && task.completed_at.is_some())
                || (task.kind == TaskKind::Reminder
                    && matches!(task.state(), TaskState::Completed | TaskState::Deleted)),
        })
    }

    /// Whether Scheduler's schedule is this definition's (expression, zone, state).
    pub fn matches(&self, status: &ScheduleStatus) -> bool {
        self.expression == status.expression && self.enabled == status.enabled
    }
}

/// The shards of the index of reminders that can still run (the daily
/// pass reads them one page at a time; `adapters::keys` names them).
pub const REMINDER_SHARDS: u8 = 16;

/// In which order a change of a task writes the task item and puts its
/// schedule, so that a crash between the two writes is harmless and a lost
/// version race can be undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// The schedule must fire again, fire elsewhere, or go for good: put it
    /// first. A crash before the task write leaves a schedule whose
    /// deliveries the door judges by the task as it still is (a moved
    /// occurrence is `rescheduled`), and the retry finds the version
    /// unchanged and finishes; a lost race puts it back as the task now is.
    ScheduleFirst,
    /// The schedule must stop firing (or stays as it is): the task says so
    /// first, and the door skips its deliveries until the put lands.
    TaskFirst,
}

impl Order {
    pub fn of(before: &Task, after: &Task) -> Result<Self, CronError> {
        let (old, new) = (
            ScheduleDefinition::for_task(before)?,
            ScheduleDefinition::for_task(after)?,
        );
        Ok(if new != old && (new.enabled || new.retired) {
            Order::ScheduleFirst
        } else {
            Order::TaskFirst
        })
    }
}

/// What Scheduler holds for a schedule (the daily pass compares it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleStatus {
    pub expression: Expression,
    pub enabled: bool,
}
