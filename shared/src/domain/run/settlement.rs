//! The settlement plan: everything a settle of a claimed occurrence decides
//! besides the run record itself, in one pure function ([`plan`]) that
//! `app::run` calls and `adapters::runs` only sends.
//!
//! Invariants (SPEC §3, §7):
//! - A one-time task completes only on its own occurrence (the instant it
//!   is scheduled at now: a moved reminder's old occurrence never completes
//!   it), only when it is not tombstoned, and only with an outcome that
//!   finishes it: a run (succeeded or failed) or a skip other than a pause,
//!   a move or a tombstone (`SkipReason::completes_one_time`). The store
//!   fences the completion on the task still being so when it writes.
//! - A recurring reminder with an `until` completes the same way on its
//!   last occurrence (one of its schedule's, with none after it), fenced on
//!   its whole schedule being unchanged.
//! - A completed reminder expires `RETENTION_DAYS` after it finished, and
//!   so does the record of the key it was created with; a connector task
//!   never expires.
//! - The account is charged for a run, and for a skip only when a crashed
//!   attempt's reservation is being paid for.
//! - Dead claims older than the retention of claims are pruned
//!   (`occurrence::prunable`).

use chrono::{DateTime, Duration, Utc};

use super::door::SkipReason;
use super::occurrence::{occurrence_key, prunable};
use crate::domain::schedule::Schedule;
use crate::domain::schedule::preview::is_occurrence;
use crate::domain::schedule::preview::next_fire;
use crate::domain::task::claim::RunStatus;
use crate::domain::task::{Provenance, Task, TaskKind};

/// A task completed by this outcome: a one-time task, or a recurring one
/// on the last occurrence before its `until`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    /// The task's instant, which the store checks is still the task's
    /// (a recurring task's last occurrence).
    pub at: DateTime<Utc>,
    /// A recurring task that ended (`until`): its schedule, which the store
    /// checks is still the task's; `None` for a one-time task (fenced on `at`).
    pub schedule: Option<Schedule>,
    /// Unix seconds the task expires at (a reminder), if it does.
    pub expires: Option<i64>,
    /// The create idempotency record that expires with it: (workspace,
    /// principal, key).
    pub record: Option<(String, String, String)>,
}

/// What a settle writes besides the run record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub complete: Option<Completion>,
    /// Whether the account is charged (and counts a run).
    pub charge_account: bool,
    /// Dead claims to forget.
    pub prune: Vec<String>,
}

/// What the settle knows.
#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    /// The task as the claim returned it.
    pub task: &'a Task,
    pub scheduled: DateTime<Utc>,
    pub status: RunStatus,
    /// Why it was skipped, when it was.
    pub skip: Option<&'a SkipReason>,
    /// What crashed attempts reserved, paid for by this settle.
    pub crashed_usd: f64,
    pub finished: DateTime<Utc>,
    /// How long a dead claim is kept (`occurrence::claim_retention`).
    pub keep_claims: Duration,
    /// `RETENTION_DAYS`.
    pub retention: Duration,
}

pub fn plan(facts: &Facts<'_>) -> Plan {
    Plan {
        complete: completion(
            facts.task,
            facts.scheduled,
            facts.status,
            facts.skip,
            facts.finished,
            facts.retention,
        ),
        charge_account: facts.status != RunStatus::Skipped || facts.crashed_usd > 0.0,
        prune: prunable(
            facts.task,
            &occurrence_key(facts.scheduled),
            facts.finished,
            facts.keep_claims,
        ),
    }
}

/// Whether this outcome of `task`'s occurrence at `scheduled` completes
/// it (the module's first two invariants), and how the store fences and
/// expires the completion. The one rule, for a settle and for a skip that
/// held no claim (`app::run::record_skip`) alike.
pub fn completion(
    task: &Task,
    scheduled: DateTime<Utc>,
    status: RunStatus,
    skip: Option<&SkipReason>,
    finished: DateTime<Utc>,
    retention: Duration,
) -> Option<Completion> {
    let finishes = match status {
        RunStatus::Skipped => skip.is_some_and(SkipReason::completes_one_time),
        RunStatus::Running | RunStatus::Released | RunStatus::AwaitingApproval => false,
        RunStatus::Succeeded | RunStatus::Failed => true,
    };
    let tombstoned = task.overrides.as_ref().is_some_and(|o| o.deleted);
    let open = finishes && !tombstoned && task.completed_at.is_none();
    let fence = match &task.spec.schedule {
        Schedule::At { at } if *at == scheduled && open => None,
        ended if open && ended.until().is_some() && is_last_occurrence(ended, scheduled) => Some(ended.clone()),
        _ => return None,
    };
    let reminder = task.kind == TaskKind::Reminder;
    Some(Completion {
        at: scheduled,
        schedule: fence,
        expires: reminder.then(|| (finished + retention).timestamp()),
        record: match (&task.provenance, &task.created_with) {
            (Provenance::User { principal }, Some(key)) if reminder => {
                Some((task.workspace.clone(), principal.clone(), key.clone()))
            }
            _ => None,
        },
    })
}

/// Whether `scheduled` is an occurrence of `schedule` with none after it.
fn is_last_occurrence(schedule: &Schedule, scheduled: DateTime<Utc>) -> bool {
    is_occurrence(schedule, scheduled) && matches!(next_fire(schedule, scheduled), Ok(None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::overrides::Overrides;
    use crate::domain::task::tests_support::reminder_task;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap()
    }

    fn facts<'a>(
        task: &'a Task,
        scheduled: DateTime<Utc>,
        status: RunStatus,
        skip: Option<&'a SkipReason>,
    ) -> Facts<'a> {
        Facts {
            task,
            scheduled,
            status,
            skip,
            crashed_usd: 0.0,
            finished: t0() + Duration::seconds(30),
            keep_claims: Duration::minutes(70),
            retention: Duration::days(90),
        }
    }

    #[test]
    fn which_outcomes_complete_a_one_time_reminder() {
        let mut task = reminder_task(t0());
        task.created_with = Some("k1".into());
        let moved = reminder_task(t0() + Duration::hours(2));
        let mut tombstoned = reminder_task(t0());
        tombstoned.overrides = Some(Overrides {
            deleted: true,
            ..Overrides::default()
        });
        let (missed, paused, rescheduled, budget) = (
            SkipReason::Missed,
            SkipReason::Paused,
            SkipReason::Rescheduled,
            SkipReason::BudgetExhausted,
        );
        let cases: [(&Task, RunStatus, Option<&SkipReason>, bool); 9] = [
            (&task, RunStatus::Succeeded, None, true),
            (&task, RunStatus::Failed, None, true),
            (&task, RunStatus::Skipped, Some(&missed), true),
            (&task, RunStatus::Skipped, Some(&budget), true),
            (&task, RunStatus::Skipped, Some(&paused), false),
            (&task, RunStatus::Skipped, Some(&rescheduled), false),
            (&moved, RunStatus::Succeeded, None, false),
            (&tombstoned, RunStatus::Succeeded, None, false),
            (&task, RunStatus::Running, None, false),
        ];
        for (i, (task, status, skip, completes)) in cases.into_iter().enumerate() {
            let plan = plan(&facts(task, t0(), status, skip));
            assert_eq!(plan.complete.is_some(), completes, "case {i}");
        }
        let completion = plan(&facts(&task, t0(), RunStatus::Succeeded, None)).complete.unwrap();
        assert_eq!(completion.at, t0(), "fenced on the instant the task still has");
        assert_eq!(
            completion.expires,
            Some((t0() + Duration::seconds(30) + Duration::days(90)).timestamp())
        );
        assert_eq!(completion.record, Some(("ws_1".into(), "usr_1".into(), "k1".into())));
    }

    #[test]
    fn a_recurring_task_never_completes_and_a_skip_charges_only_a_crash() {
        let mut daily = reminder_task(t0());
        daily.spec.schedule = Schedule::Cron {
            cron: "0 19 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        let ran = plan(&facts(&daily, t0(), RunStatus::Succeeded, None));
        assert_eq!(ran.complete, None);
        assert!(ran.charge_account);
        let skipped = plan(&facts(&daily, t0(), RunStatus::Skipped, Some(&SkipReason::Paused)));
        assert!(!skipped.charge_account);
        let crashed = Facts {
            crashed_usd: 0.02,
            ..facts(&daily, t0(), RunStatus::Skipped, Some(&SkipReason::Paused))
        };
        assert!(
            plan(&crashed).charge_account,
            "a crashed attempt's reservation is paid for"
        );
    }

    #[test]
    fn a_recurring_reminder_completes_on_the_last_occurrence_before_its_until() {
        let mut daily = reminder_task(t0());
        daily.created_with = Some("k1".into());
        // t0 is 19:00 in Berlin on 2026-12-24.
        let last_day = chrono::NaiveDate::from_ymd_opt(2026, 12, 25).unwrap();
        daily.spec.schedule = Schedule::Cron {
            cron: "0 19 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: Some(last_day),
        };
        let last = t0() + Duration::days(1);
        let missed = SkipReason::Missed;
        let paused = SkipReason::Paused;
        assert_eq!(
            plan(&facts(&daily, t0(), RunStatus::Succeeded, None)).complete,
            None,
            "one more is to come"
        );
        let completion = plan(&facts(&daily, last, RunStatus::Succeeded, None)).complete.unwrap();
        assert_eq!(completion.at, last);
        assert_eq!(
            completion.schedule.as_ref(),
            Some(&daily.spec.schedule),
            "fenced on the schedule"
        );
        assert_eq!(completion.record, Some(("ws_1".into(), "usr_1".into(), "k1".into())));
        assert!(
            plan(&facts(&daily, last, RunStatus::Skipped, Some(&missed)))
                .complete
                .is_some()
        );
        assert!(
            plan(&facts(&daily, last, RunStatus::Skipped, Some(&paused)))
                .complete
                .is_none()
        );
        assert!(
            plan(&facts(&daily, last + Duration::minutes(1), RunStatus::Succeeded, None))
                .complete
                .is_none(),
            "not one of its occurrences (an extra run)"
        );
        let mut endless = daily.clone();
        endless.spec.schedule = Schedule::Cron {
            cron: "0 19 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        assert!(
            plan(&facts(&endless, last, RunStatus::Succeeded, None))
                .complete
                .is_none()
        );
        let one_time = plan(&facts(&reminder_task(t0()), t0(), RunStatus::Succeeded, None))
            .complete
            .unwrap();
        assert_eq!(one_time.schedule, None, "a one-time task is fenced on its instant");
    }
}
