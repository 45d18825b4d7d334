//! The notification a finished run sends: EventBridge detail type
//! `Scheduled run finished` on `EVENT_BUS_NAME` (SPEC §7.7).
//!
//! Invariants: content-free (ids and status only: no title, instruction,
//! output or error text); sent after accounting; exactly one per run, also
//! when the message is redelivered; none for a skipped occurrence.

use serde::{Deserialize, Serialize};

use super::occurrence::RunStatus;

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
    /// Whether an outcome sends a notification at all.
    pub fn is_sent_for(status: RunStatus) -> bool {
        matches!(status, RunStatus::Succeeded | RunStatus::Failed)
    }
}
