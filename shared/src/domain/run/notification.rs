//! The notification of a finished run: EventBridge detail type
//! `Scheduled run finished` on `EVENT_BUS_NAME` (SPEC §7.7).
//!
//! Invariants: content-free (ids and status only: no title, instruction,
//! output or error text); sent after accounting; exactly one per run, also
//! when the message is redelivered; none for a skipped occurrence.
//!
//! The runner does not send it: the settle writes the run record, and the
//! table's stream carries that write to the bus through an EventBridge Pipe
//! (`RunFinishedPipe` in `template.yaml`: a filter on run records that
//! succeeded or failed, an input template that keeps these five fields).
//! The event is an outbox of the settle transaction: it exists exactly when
//! the accounting does, and a run's bookkeeping is two requests.

use serde::{Deserialize, Serialize};

use crate::domain::task::claim::RunStatus;

pub const DETAIL_TYPE: &str = "Scheduled run finished";
pub const SOURCE: &str = "scheduled-agent-tasks.runner";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFinished {
    pub workspace: String,
    pub task_id: String,
    pub run_id: String,
    pub scheduled_time: String,
    pub status: RunStatus,
}

impl RunFinished {
    /// Whether an outcome is notified at all (the pipe's filter).
    pub fn is_sent_for(status: RunStatus) -> bool {
        matches!(status, RunStatus::Succeeded | RunStatus::Failed)
    }
}
