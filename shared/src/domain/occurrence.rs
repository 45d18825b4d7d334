//! An occurrence is one firing of a task: (task, scheduled time). The run
//! ledger keeps one record per occurrence, and the runner claims it so that
//! exactly one run happens whatever Scheduler and SQS redeliver.
//!
//! This module owns the wire shape of the runs-queue message (SPEC §7): the
//! input every Scheduler schedule carries, with Scheduler's context attributes
//! filled in at delivery. Invariant: the message names the task and its
//! workspace only; no title, instruction or other content travels on the queue.

use serde::{Deserialize, Serialize};

use super::task::TaskId;

/// The runs-queue message, as Scheduler delivers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMessage {
    pub task_id: String,
    pub workspace: String,
    /// `<aws.scheduler.scheduled-time>`: the occurrence's identity with the task.
    pub scheduled_time: String,
    /// `<aws.scheduler.execution-id>`: changes on every Scheduler retry.
    pub execution_id: String,
    /// `<aws.scheduler.attempt-number>`.
    pub attempt: String,
}

/// The schedule input with Scheduler's context-attribute placeholders, which
/// Scheduler replaces at each delivery.
pub fn schedule_input(task_id: &TaskId, workspace: &str) -> String {
    serde_json::json!({
        "task_id": task_id.as_str(),
        "workspace": workspace,
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "execution_id": "<aws.scheduler.execution-id>",
        "attempt": "<aws.scheduler.attempt-number>",
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_input_filled_in_by_scheduler_is_a_run_message() {
        let id = TaskId::for_reminder("ws_1", "usr_1", "k");
        let filled = schedule_input(&id, "ws_1")
            .replace("<aws.scheduler.scheduled-time>", "2026-12-24T18:00:00Z")
            .replace("<aws.scheduler.execution-id>", "exec-1")
            .replace("<aws.scheduler.attempt-number>", "1");
        let message: RunMessage = serde_json::from_str(&filled).unwrap();
        assert_eq!(message.task_id, id.as_str());
        assert_eq!(message.workspace, "ws_1");
        assert_eq!(message.scheduled_time, "2026-12-24T18:00:00Z");
        assert_eq!(message.execution_id, "exec-1");
        assert_eq!(message.attempt, "1");
    }
}
