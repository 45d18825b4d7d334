//! The missed-occurrence check (SPEC §14): an occurrence that was due and
//! has no outcome some minutes after its catch-up window (Scheduler never
//! delivered it, its message went to a dead-letter queue, its schedule was
//! lost) is noticed, recorded `skipped` in words, and counted once.
//!
//! A task that should fire carries `due`: the first of its occurrences that
//! the check has not accounted for yet. Its index entry sorts by it
//! (`adapters::keys`), so the check reads only the tasks whose `due` lies
//! before the [`cutoff`], a bounded page per shard, never a scan. A change
//! that moves the schedule or starts or stops firing sets `due` again
//! ([`refresh_due`]); the check moves it past what it accounted for.
//!
//! Which times are occurrences follows the schedule exactly for a one-time
//! task and a cron. A rate has no fixed phase (Scheduler starts it when the
//! schedule is put), so its next occurrence is expected within one period
//! of the last outcome, and a missing one is named at the time it was
//! expected by.

use chrono::{DateTime, Duration, SubsecRound, Utc};

use crate::domain::schedule::preview::next_fire;
use crate::domain::schedule::{RateUnit, Schedule};
use crate::domain::task::Task;
use crate::domain::task::claim::{Claim, RunStatus};

/// How long after its catch-up window an occurrence may still lack an
/// outcome before it is reported: a run claimed at the window's last
/// moment settles well within it (the runner's timeout is 15 minutes).
pub const MARGIN_MINUTES: i64 = 20;

/// At most this many occurrences of one task are judged by one check; the
/// rest wait for the next (a rate of one minute missed for hours).
pub const MAX_OCCURRENCES_PER_TASK: usize = 60;

/// The execution id a check's record carries: no Scheduler execution ran it.
pub const CHECK_EXECUTION_ID: &str = "overdue-check";

/// Occurrences scheduled before this instant are judged: later ones may
/// still be delivered, claimed or running.
pub fn cutoff(now: DateTime<Utc>, catch_up: Duration) -> DateTime<Utc> {
    now - catch_up - Duration::minutes(MARGIN_MINUTES)
}

fn period(every: u32, unit: RateUnit) -> Duration {
    let every = i64::from(every.max(1));
    match unit {
        RateUnit::Minutes => Duration::minutes(every),
        RateUnit::Hours => Duration::hours(every),
        RateUnit::Days => Duration::days(every),
    }
}

/// How late a rate's outcome may come and still answer its expectation:
/// Scheduler keeps a rate's phase only roughly (a re-put restarts it).
fn rate_slack(period: Duration) -> Duration {
    period / 2
}

/// When the check can first judge `task`'s `due`: at it, or for a rate once
/// its slack has passed too. The schedulable index sorts by it, so the
/// check reads a task only once it can judge it, and a backlog's age counts
/// from it (a weekly rate delivered on time is no backlog for half a week).
pub fn judgeable_at(task: &Task) -> Option<DateTime<Utc>> {
    let due = task.due?;
    Some(match &task.spec.schedule {
        Schedule::Rate { every, unit } => due + rate_slack(period(*every, *unit)),
        _ => due,
    })
}

/// The first occurrence at or after `from` of a task that should fire
/// (`None`: it should not, or it has none left).
pub fn first_due(task: &Task, from: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if !task.should_fire() {
        return None;
    }
    match &task.spec.schedule {
        Schedule::At { at } => (*at >= from).then_some(*at),
        Schedule::Rate { every, unit } => Some((from + period(*every, *unit)).trunc_subsecs(0)),
        // Past any local time DST skips or day a month lacks; nothing after
        // an `until`.
        Schedule::Cron { .. } | Schedule::Calendar { .. } => {
            next_fire(&task.spec.schedule, from - Duration::seconds(1)).ok()?
        }
    }
}

/// Sets `after.due` for a task as written by a change of `before` (`None`:
/// a new task) at `now`: kept while the task fires on the same schedule,
/// the first occurrence from `now` when it starts firing or moves, none when
/// it stops.
pub fn refresh_due(before: Option<&Task>, after: &mut Task, now: DateTime<Utc>) {
    let same = before.is_some_and(|b| b.should_fire() && b.spec.schedule == after.spec.schedule && b.due.is_some());
    if !after.should_fire() {
        after.due = None;
    } else if !same {
        after.due = first_due(after, now);
    }
}

/// What the check decided for one task.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// The occurrences with no outcome: each is recorded skipped and counted.
    pub missed: Vec<DateTime<Utc>>,
    /// The occurrence with no outcome that its owner (or an admin) asked to
    /// skip (`skip_next`): recorded skipped for that reason, as the runner
    /// would have, and not counted.
    pub skipped: Option<DateTime<Utc>>,
    /// The task's `due` after this check (`None`: nothing left to expect).
    pub due: Option<DateTime<Utc>>,
}

/// One occurrence's trace in the table: its run record, or its claim.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Trace<'a> {
    Recorded,
    Claimed(&'a Claim),
    None,
}

/// Judges `task`'s occurrences from its `due` up to `cutoff`. `trace` says
/// what the table holds for an occurrence; `recorded` lists the run
/// records' times in `[due - period, cutoff)` for a rate (ignored
/// otherwise). A running claim whose lease has not run out stops the
/// judgement there: its settle is still to come.
pub fn judge<'a>(
    task: &'a Task,
    cutoff: DateTime<Utc>,
    now: DateTime<Utc>,
    recorded: &[DateTime<Utc>],
    trace: impl Fn(DateTime<Utc>) -> Trace<'a>,
) -> Judgement {
    let Some(due) = task.due else {
        return Judgement {
            missed: Vec::new(),
            skipped: None,
            due: None,
        };
    };
    if !task.should_fire() {
        // Stopped firing by a path that did not refresh `due`: nothing is expected.
        return Judgement {
            missed: Vec::new(),
            skipped: None,
            due: None,
        };
    }
    if let Schedule::Rate { every, unit } = &task.spec.schedule {
        return judge_rate(due, period(*every, *unit), cutoff, recorded);
    }
    let mut missed = Vec::new();
    let mut skipped = None;
    let mut next = Some(due);
    let mut judged = 0;
    while let Some(at) = next {
        if at >= cutoff || judged == MAX_OCCURRENCES_PER_TASK {
            break;
        }
        match trace(at) {
            Trace::Recorded => {}
            Trace::None if crate::domain::task::skip::skips(task.skip_next.as_ref(), at) => skipped = Some(at),
            Trace::Claimed(claim) if claim.status == RunStatus::Running && claim.lease_until >= now.timestamp() => {
                break;
            }
            // A finished claim whose record is not there yet (or pruned) ran.
            Trace::Claimed(claim) if claim.status.is_finished() => {}
            Trace::Claimed(_) | Trace::None => missed.push(at),
        }
        judged += 1;
        next = first_due(task, at + Duration::seconds(1));
    }
    Judgement {
        missed,
        skipped,
        due: next,
    }
}

fn judge_rate(due: DateTime<Utc>, period: Duration, cutoff: DateTime<Utc>, recorded: &[DateTime<Utc>]) -> Judgement {
    let mut recorded: Vec<DateTime<Utc>> = recorded.to_vec();
    recorded.sort();
    // An outcome up to half a period late still answers the expectation.
    let slack = rate_slack(period);
    let mut expected_by = due;
    let mut missed = Vec::new();
    let mut records = recorded.into_iter().peekable();
    while expected_by + slack < cutoff && missed.len() < MAX_OCCURRENCES_PER_TASK {
        let mut latest = None;
        while let Some(at) = records.next_if(|at| *at <= expected_by + slack) {
            latest = Some(at);
        }
        match latest {
            Some(at) if at > expected_by - period => expected_by = at + period,
            _ => {
                missed.push(expected_by);
                expected_by += period;
            }
        }
    }
    Judgement {
        missed,
        skipped: None,
        due: Some(expected_by),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::overrides::Overrides;
    use crate::domain::task::tests_support::{connector_task, reminder_task};
    use chrono::TimeZone;

    fn t(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 24, h, m, 0).unwrap()
    }

    fn cron_task(cron: &str) -> Task {
        let mut task = connector_task(t(0, 0));
        task.spec.schedule = Schedule::Cron {
            cron: cron.into(),
            timezone: "UTC".into(),
            until: None,
        };
        task
    }

    fn running(lease_until: i64) -> Claim {
        Claim {
            status: RunStatus::Running,
            lease_until,
            execution_id: "e".into(),
            attempts: 1,
            started_at: t(0, 0),
            crashed_usd: 0.0,
            workspace_usd: 0.0,
            request_id: None,
        }
    }

    #[test]
    fn a_rate_is_judgeable_half_a_period_after_its_due_and_anything_else_at_it() {
        let mut task = cron_task("0 9 * * *");
        assert_eq!(judgeable_at(&task), None, "no due, nothing to judge");
        task.due = Some(t(9, 0));
        assert_eq!(judgeable_at(&task), Some(t(9, 0)));
        task.spec.schedule = Schedule::Rate {
            every: 4,
            unit: RateUnit::Hours,
        };
        assert_eq!(judgeable_at(&task), Some(t(11, 0)));
        // Judged before then, nothing is missed and `due` stays: the
        // index's order and the judgement agree.
        let judged = judge(&task, t(11, 0), t(12, 0), &[], |_| Trace::None);
        assert_eq!((judged.missed.len(), judged.due), (0, Some(t(9, 0))));
        let judged = judge(&task, t(11, 1), t(12, 0), &[], |_| Trace::None);
        assert_eq!(judged.missed, vec![t(9, 0)]);
    }

    #[test]
    fn a_one_time_reminder_is_due_at_its_instant_and_nothing_after() {
        let mut task = reminder_task(t(18, 0));
        refresh_due(None, &mut task, t(9, 0));
        assert_eq!(task.due, Some(t(18, 0)));
        let judged = judge(&task, t(19, 0), t(20, 0), &[], |_| Trace::None);
        assert_eq!(judged.missed, vec![t(18, 0)]);
        assert_eq!(judged.due, None);
        let judged = judge(&task, t(19, 0), t(20, 0), &[], |_| Trace::Recorded);
        assert!(judged.missed.is_empty());
        assert_eq!(judged.due, None);
        // Not yet past the cutoff: nothing judged, `due` stays.
        let judged = judge(&task, t(17, 0), t(18, 0), &[], |_| Trace::None);
        assert_eq!((judged.missed.len(), judged.due), (0, Some(t(18, 0))));
    }

    #[test]
    fn a_cron_is_judged_occurrence_by_occurrence_up_to_the_cutoff() {
        let mut task = cron_task("0 * * * *");
        refresh_due(None, &mut task, t(9, 30));
        assert_eq!(task.due, Some(t(10, 0)));
        let judged = judge(&task, t(13, 0), t(14, 0), &[], |at| {
            if at == t(11, 0) { Trace::None } else { Trace::Recorded }
        });
        assert_eq!(judged.missed, vec![t(11, 0)]);
        assert_eq!(judged.due, Some(t(13, 0)));
    }

    #[test]
    fn an_occurrence_its_owner_skipped_is_not_missed_when_nobody_delivers_it() {
        let mut task = cron_task("0 * * * *");
        refresh_due(None, &mut task, t(9, 30));
        task.skip_next = Some(crate::domain::task::skip::SkipNext {
            occurrence: t(11, 0),
            by: "usr_1".into(),
            at: t(9, 40),
        });
        let judged = judge(&task, t(13, 0), t(14, 0), &[], |at| {
            if at == t(10, 0) { Trace::Recorded } else { Trace::None }
        });
        assert_eq!(judged.missed, vec![t(12, 0)]);
        assert_eq!(judged.skipped, Some(t(11, 0)));
        assert_eq!(judged.due, Some(t(13, 0)));
        // Delivered, it has its record: nothing more to write.
        let judged = judge(&task, t(13, 0), t(14, 0), &[], |_| Trace::Recorded);
        assert_eq!((judged.missed.len(), judged.skipped), (0, None));
    }

    #[test]
    fn a_live_claim_stops_the_judgement_and_a_dead_one_is_missed() {
        let mut task = reminder_task(t(18, 0));
        task.due = Some(t(18, 0));
        let live = running(t(21, 0).timestamp());
        let judged = judge(&task, t(19, 0), t(20, 0), &[], |_| Trace::Claimed(&live));
        assert_eq!((judged.missed.len(), judged.due), (0, Some(t(18, 0))));
        let dead = running(t(18, 5).timestamp());
        let judged = judge(&task, t(19, 0), t(20, 0), &[], |_| Trace::Claimed(&dead));
        assert_eq!(judged.missed, vec![t(18, 0)]);
        let mut done = dead.clone();
        done.status = RunStatus::Skipped;
        let judged = judge(&task, t(19, 0), t(20, 0), &[], |_| Trace::Claimed(&done));
        assert!(judged.missed.is_empty());
    }

    #[test]
    fn a_task_that_stops_firing_expects_nothing() {
        let mut task = reminder_task(t(18, 0));
        refresh_due(None, &mut task, t(9, 0));
        let before = task.clone();
        task.overrides = Some(Overrides {
            paused: true,
            ..Overrides::default()
        });
        refresh_due(Some(&before), &mut task, t(10, 0));
        assert_eq!(task.due, None);
        // Even if a path stopped it without refreshing, the check expects nothing.
        let mut stale = task.clone();
        stale.due = Some(t(18, 0));
        assert!(
            judge(&stale, t(19, 0), t(20, 0), &[], |_| Trace::None)
                .missed
                .is_empty()
        );
    }

    #[test]
    fn a_moved_schedule_is_due_from_the_change_an_unmoved_one_keeps_its_due() {
        let mut task = reminder_task(t(18, 0));
        refresh_due(None, &mut task, t(9, 0));
        let before = task.clone();
        let mut retitled = task.clone();
        retitled.title = "Call dad".into();
        refresh_due(Some(&before), &mut retitled, t(10, 0));
        assert_eq!(retitled.due, Some(t(18, 0)));
        let mut moved = task.clone();
        moved.spec.schedule = Schedule::At { at: t(20, 0) };
        refresh_due(Some(&before), &mut moved, t(10, 0));
        assert_eq!(moved.due, Some(t(20, 0)));
    }

    #[test]
    fn a_rate_expects_one_outcome_per_period_and_names_the_gap() {
        let mut task = connector_task(t(0, 0));
        task.spec.schedule = Schedule::Rate {
            every: 1,
            unit: RateUnit::Hours,
        };
        refresh_due(None, &mut task, t(9, 0));
        assert_eq!(task.due, Some(t(10, 0)));
        let period = Duration::hours(1);
        // Runs at 9:40 and 10:41 (a little late), then nothing: the one
        // expected by 11:41 is missed; 12:41's may still come by 13:11.
        let runs = [t(9, 40), t(10, 41)];
        let judged = judge(&task, t(13, 0), t(14, 0), &runs, |_| Trace::None);
        assert_eq!(judged.missed, vec![t(11, 41)]);
        assert_eq!(judged.due, Some(t(12, 41)));
        // Every period has its run: nothing missed; due moves one period
        // past each run it accounted for, and 12:25's waits for the next
        // check (its half-period slack reaches the cutoff).
        let runs = [t(9, 40), t(10, 35), t(11, 30), t(12, 25)];
        let judged = judge_rate(t(10, 0), period, t(13, 0), &runs);
        assert!(judged.missed.is_empty());
        assert_eq!(judged.due, Some(t(12, 30)));
        let judged = judge_rate(t(12, 30), period, t(13, 50), &runs);
        assert_eq!((judged.missed.len(), judged.due), (0, Some(t(13, 25))));
    }

    #[test]
    fn the_cutoff_lies_past_the_catch_up_window_and_the_margin() {
        assert_eq!(cutoff(t(12, 0), Duration::hours(1)), t(10, 40));
    }
}
