//! A claim: one occurrence's entry on its task item (`claims.<occurrence>`),
//! the lease while it runs, then its outcome, and the [`RunStatus`] that the
//! claim and the run record both carry.
//!
//! It sits below `task` (a task item holds its claims) and `occurrence`
//! (which claims, reads and prunes them) and names neither.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Succeeded,
    Failed,
    Skipped,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Skipped => "skipped",
        }
    }
}

/// One occurrence's claim, kept on its task item under `claims.<occurrence>`:
/// the lease while it runs, then its outcome, so duplicates are recognised
/// by the same request that would have claimed them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub status: RunStatus,
    /// Unix seconds; a running claim past its lease may be taken over.
    pub lease_until: i64,
    pub execution_id: String,
    pub attempts: u32,
    pub started_at: DateTime<Utc>,
    /// What crashed attempts reserved and may have spent (SPEC §7 "A crash
    /// is paid for"): committed to the period budget when the attempt is
    /// taken over, charged to the account when the occurrence settles.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crashed_usd: f64,
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}
