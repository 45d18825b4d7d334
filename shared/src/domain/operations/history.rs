//! Run history: what a reminder's owner (the schedules function's `runs`)
//! and a workspace admin (admin `runs`) read of past occurrences, newest
//! first, from the run ledger, with why a run was skipped or failed in words.
//!
//! Invariant: a view carries the outcome, its reason and cost, never the
//! task's instruction; the run's output only for whom it belongs to (the
//! reminder's owner; an admin for a connector task's run, SPEC §8, §12).
//! Called by `app::schedules` and `app::admin`.

use crate::domain::run::occurrence::RunRecord;
use crate::domain::schedule::format_utc;
use crate::domain::task::claim::RunStatus;

/// Runs a `runs` request lists when it names no limit, and at most.
pub const DEFAULT_RUNS: usize = 10;
pub const MAX_RUNS: usize = 50;

/// The `limit` of a `runs` request: 1 to [`MAX_RUNS`], default [`DEFAULT_RUNS`].
pub fn runs_limit(limit: Option<u64>) -> Result<usize, String> {
    match limit {
        None => Ok(DEFAULT_RUNS),
        Some(n) if (1..=MAX_RUNS as u64).contains(&n) => Ok(n as usize),
        Some(n) => Err(format!("limit {n} is not between 1 and {MAX_RUNS}")),
    }
}

/// The stored reason (`domain::run::door::SkipReason::describe`, or a failure's
/// message) as a sentence a person reads.
pub fn in_words(record: &RunRecord) -> String {
    let reason = record.reason.as_deref().unwrap_or_default();
    match record.status {
        RunStatus::Succeeded => "ran and finished".to_owned(),
        RunStatus::Running => "is running".to_owned(),
        RunStatus::Released => "went back to the queue to run again".to_owned(),
        RunStatus::AwaitingApproval => format!(
            "waits for a workspace admin to approve a tool call (request {})",
            record.request_id.as_deref().unwrap_or("unknown")
        ),
        RunStatus::Failed => format!("failed: {reason}"),
        RunStatus::Skipped => {
            let why = match reason {
                "worker disabled" => "scheduled runs were switched off for the deployment".to_owned(),
                "missed" => "it was delivered later than the catch-up window after its time".to_owned(),
                "missing" => "the task no longer existed".to_owned(),
                "deleted" => "it was cancelled".to_owned(),
                "paused" => "it was paused".to_owned(),
                "uninstalled" => "its connector was not installed".to_owned(),
                "completed" => "it had already run".to_owned(),
                "rescheduled" => "it was moved to another time since this run was planned".to_owned(),
                "budget exhausted" => "its budget for the month was used up".to_owned(),
                "skipped by its owner" => "its owner skipped this one; the next one runs".to_owned(),
                "skipped by an admin" => "a workspace admin skipped this one; the next one runs".to_owned(),
                "denied" => "a workspace admin denied the tool call it asked to make".to_owned(),
                "expired" => "the tool call it asked to make was not approved in time".to_owned(),
                held if held.starts_with("held: ") => format!("it was held ({})", &held["held: ".len()..]),
                other => other.to_owned(),
            };
            format!("skipped: {why}")
        }
    }
}

/// One run as `runs` and `run` show it; `output` (what a succeeded run
/// wrote: the reminder's message) only `with_output`, for whom it belongs
/// to: the reminder's owner, or an admin reading a connector task's run.
pub fn view(record: &RunRecord, with_output: bool) -> RunView {
    let output = (with_output && record.status == RunStatus::Succeeded)
        .then(|| record.output.clone())
        .flatten();
    RunView {
        run_id: record.run_id.clone(),
        scheduled_time: record.scheduled_time.clone(),
        output,
        status: record.status,
        reason: record.reason.clone(),
        explanation: in_words(record),
        finished_at: format_utc(record.finished_at),
        cost_usd: record.cost_usd,
    }
}

/// One run as its reader sees it (SPEC §11's run).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RunView {
    pub run_id: String,
    pub scheduled_time: String,
    pub status: RunStatus,
    pub reason: Option<String>,
    /// The outcome in words a person reads.
    pub explanation: String,
    pub finished_at: String,
    pub cost_usd: f64,
    /// What a succeeded run wrote, for whom it belongs to; else `None`.
    pub output: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::run::occurrence::Usage;
    use chrono::{TimeZone, Utc};

    fn record(status: RunStatus, reason: Option<&str>) -> RunRecord {
        let t = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 5).unwrap();
        RunRecord {
            run_id: "r".into(),
            task_id: "rem_1".into(),
            workspace: "ws_1".into(),
            scheduled_time: "2026-12-24T18:00:00Z".into(),
            status,
            reason: reason.map(str::to_owned),
            attempts: 1,
            usage: Usage::default(),
            cost_usd: 0.01,
            output: Some("the reminder text".into()),
            model_id: None,
            execution_id: None,
            started_at: t,
            finished_at: t,
            ttl: 0,
            notes: Vec::new(),
            request_id: None,
        }
    }

    #[test]
    fn reasons_read_as_words_and_no_output_is_shown() {
        let cases = [
            (RunStatus::Skipped, Some("paused"), "skipped: it was paused"),
            (
                RunStatus::Skipped,
                Some("missed"),
                "skipped: it was delivered later than the catch-up window after its time",
            ),
            (
                RunStatus::Skipped,
                Some("held: withdrawn"),
                "skipped: it was held (withdrawn)",
            ),
            (
                RunStatus::Failed,
                Some("turn limit of 4 reached"),
                "failed: turn limit of 4 reached",
            ),
            (RunStatus::Succeeded, None, "ran and finished"),
        ];
        for (status, reason, words) in cases {
            let r = record(status, reason);
            assert_eq!(in_words(&r), words);
            let v = view(&r, false);
            assert_eq!(v.output, None, "no output unless it is the reader's");
            let own = view(&r, true);
            if status == RunStatus::Succeeded {
                assert_eq!(own.output.as_deref(), Some("the reminder text"));
            } else {
                assert_eq!(own.output, None, "a run that did not succeed has no output");
            }
            assert_eq!(own.run_id, "r");
            assert_eq!(v.finished_at, "2026-12-24T18:00:05Z");
        }
        assert_eq!(runs_limit(None), Ok(10));
        assert_eq!(runs_limit(Some(50)), Ok(50));
        assert!(runs_limit(Some(0)).is_err() && runs_limit(Some(51)).is_err());
    }
}
