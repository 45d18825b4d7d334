//! The admin's overrides of a task: a pause and a tombstone, with who set them.
//!
//! Invariants: only the admin function writes these; reconcile never does, and
//! a tombstoned (`deleted`) task is never re-created or re-enabled by the
//! runtime. Stored as the top-level `override` map (the file is named
//! `overrides` because `override` is a Rust keyword).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
}

impl Overrides {
    /// Whether any override is set; an unset override is not stored.
    pub fn is_set(&self) -> bool {
        self.paused || self.deleted
    }
}
