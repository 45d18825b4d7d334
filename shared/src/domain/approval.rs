//! An approval is the record that a person agreed to a task's bounds: the chat
//! user who approved a reminder's concrete call, or the workspace admin who
//! approved a connector's declared bounds.
//!
//! Invariant: no task runs without one. A reminder carries the chat backend's
//! approval id and time; create refuses a request without it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The approval's id in the system that asked the person.
    pub id: String,
    pub approved_at: DateTime<Utc>,
    /// Who approved, when it was not the task's own principal (an admin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}
