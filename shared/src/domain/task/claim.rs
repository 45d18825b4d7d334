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
    /// A claim only, never a record: the run went back to the queue before
    /// it called a tool (throttled, or no slot of the model pace), and what
    /// its attempts committed to the period budget (`Claim::crashed_usd`)
    /// waits on the claim for the occurrence's one record.
    Released,
    /// A claim and a record: the run stopped at a gated tool call
    /// (`domain::run::gate`) and waits for an admin's decision, carrying
    /// what it spent in `crashed_usd` as a released claim does. An approval
    /// resumes it (a take-over, `TakeOver::Approved`); a denial or an
    /// expiry ends it skipped. Never pruned, never dead.
    AwaitingApproval,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Skipped => "skipped",
            RunStatus::Released => "released",
            RunStatus::AwaitingApproval => "awaiting_approval",
        }
    }

    /// An outcome: the occurrence's record says it, and a later delivery is
    /// a duplicate.
    pub fn is_finished(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Skipped)
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
    /// is paid for"), and what a released attempt spent: committed to the
    /// period budget when the attempt is taken over or released, carried
    /// by the claim across releases, and charged to the account and written
    /// into the cost of the occurrence's record when it settles.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub crashed_usd: f64,
    /// What this occurrence holds of its workspace's month
    /// (`budget::WorkspaceBudget`) beyond its record: every reservation an
    /// attempt made there, and what a release carries. The workspace's
    /// side of a settle, a release or a skip paying a dead claim moves by
    /// the difference between what the occurrence comes to and this. A
    /// claim written before workspaces were budgeted holds nothing there.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub workspace_usd: f64,
    /// The approval request this occurrence waits for (`awaiting_approval`),
    /// or that its run resumed from (`domain::run::gate`): only that
    /// request's resume takes an awaiting claim over, and a claim that
    /// carries one is kept past the catch-up window until it finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl Claim {
    /// Whether no execution holds this claim at `now` (Unix seconds): a
    /// released one, or a running one whose lease ran out (a crash). What
    /// it committed is the next attempt's, or a skip's, to pay.
    pub fn is_dead(&self, now: i64) -> bool {
        match self.status {
            RunStatus::Released => true,
            RunStatus::Running => self.lease_until < now,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Skipped | RunStatus::AwaitingApproval => false,
        }
    }

    /// The claim a take-over of this crashed one writes (SPEC §7 "A crash is
    /// paid for"): `fresh`'s lease and execution, one more attempt, and the
    /// crashed attempt's reservation kept committed: `reservation` more in
    /// `crashed_usd`, and `workspace` (the new attempt's
    /// `budget::workspace_reservation`) more in what the workspace holds.
    pub fn after_crash(&self, fresh: &Claim, reservation: f64, workspace: f64) -> Claim {
        Claim {
            status: RunStatus::Running,
            lease_until: fresh.lease_until,
            execution_id: fresh.execution_id.clone(),
            attempts: self.attempts + 1,
            started_at: self.started_at,
            crashed_usd: self.crashed_usd + reservation,
            workspace_usd: self.workspace_usd + workspace,
            request_id: self.request_id.clone(),
        }
    }

    /// The claim a take-over of this released one writes: `fresh` as a new
    /// claim, carrying what the released one carries, and its reservation
    /// held in the workspace besides what the released one held there.
    pub fn after_release(&self, fresh: &Claim, reservation: f64) -> Claim {
        Claim {
            status: RunStatus::Running,
            attempts: 1,
            crashed_usd: self.crashed_usd,
            workspace_usd: self.workspace_usd + reservation,
            request_id: self.request_id.clone(),
            ..fresh.clone()
        }
    }

    /// What this claim holds of its task's period budget beyond any record,
    /// with `reservation` the task's per-run reservation: a running claim
    /// its reservation and what crashed attempts committed, a released one
    /// what it carries, a finished one nothing (its record's cost says it).
    /// The budget invariant: `budget_used` of a period is its records'
    /// costs plus this over its claims.
    pub fn committed(&self, reservation: f64) -> f64 {
        match self.status {
            RunStatus::Running => reservation + self.crashed_usd,
            RunStatus::Released | RunStatus::AwaitingApproval => self.crashed_usd,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Skipped => 0.0,
        }
    }
}

fn is_zero(v: &f64) -> bool {
    *v == 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(execution_id: &str, lease_until: i64) -> Claim {
        Claim {
            status: RunStatus::Running,
            lease_until,
            execution_id: execution_id.into(),
            attempts: 1,
            started_at: DateTime::from_timestamp(1_000, 0).unwrap(),
            crashed_usd: 0.0,
            workspace_usd: 0.25,
            request_id: None,
        }
    }

    /// A crash is paid for at both levels: the task's (`crashed_usd`) and
    /// the workspace's (`workspace_usd`) each hold one more reservation.
    #[test]
    fn a_take_over_after_a_crash_holds_both_reservations_at_both_levels() {
        let fresh = running("e2", 9_000);
        let taken = running("e1", 2_000).after_crash(&fresh, 0.25, 0.25);
        assert_eq!(
            (taken.execution_id.as_str(), taken.lease_until, taken.attempts),
            ("e2", 9_000, 2)
        );
        assert_eq!(
            taken.started_at,
            running("e1", 0).started_at,
            "the occurrence's start stays"
        );
        assert_eq!((taken.crashed_usd, taken.workspace_usd), (0.25, 0.5));
        assert_eq!(
            taken.committed(0.25),
            0.5,
            "the task's side holds what the workspace's does"
        );
    }

    /// A released claim carries what it committed; the new claim adds its
    /// own reservation at both levels and counts its attempts afresh.
    #[test]
    fn a_take_over_of_a_released_claim_carries_what_it_committed() {
        let released = Claim {
            status: RunStatus::Released,
            crashed_usd: 0.1,
            workspace_usd: 0.1,
            attempts: 3,
            ..running("e1", 2_000)
        };
        let mut fresh = running("e2", 9_000);
        fresh.started_at = DateTime::from_timestamp(5_000, 0).unwrap();
        let taken = released.after_release(&fresh, 0.25);
        assert_eq!(taken.status, RunStatus::Running);
        assert_eq!((taken.attempts, taken.started_at), (1, fresh.started_at));
        assert_eq!((taken.crashed_usd, taken.workspace_usd), (0.1, 0.35));
        assert_eq!(taken.committed(0.25), 0.35);
    }

    /// A claim written before workspaces were budgeted reads as holding
    /// nothing there.
    #[test]
    fn a_claim_of_the_last_release_holds_nothing_in_its_workspace() {
        let old: Claim = serde_json::from_value(serde_json::json!({
            "status": "running", "lease_until": 5, "execution_id": "e1", "attempts": 1,
            "started_at": "2026-12-01T00:00:00Z", "crashed_usd": 0.25
        }))
        .unwrap();
        assert_eq!(old.workspace_usd, 0.0);
        let written = serde_json::to_value(running("e1", 5)).unwrap();
        assert_eq!(written["workspace_usd"], 0.25);
    }
}
