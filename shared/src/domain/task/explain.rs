//! Whether and when a task runs next, and why, in words: the one
//! explanation the owner's answers and the admin's carry, worded for who
//! reads it ([`Reader`]).
//!
//! Invariants: it reads the task's derived state (`Task::state`), so it
//! says what the door will do; the occurrence skipped next is not named as
//! the next run; an admin reading a reminder learns its state and times,
//! never its title or instruction (SPEC §8); who paused or cancelled is the
//! one who set that flag, whoever edited the overrides since.

use chrono::{DateTime, Utc};

use crate::domain::schedule::preview::upcoming;
use crate::domain::schedule::recurrence::Recurrence;
use crate::domain::schedule::{Schedule, format_utc};
use crate::domain::task::bounds::compare;
use crate::domain::task::hold::HoldReason;
use crate::domain::task::overrides::Overrides;
use crate::domain::task::skip;
use crate::domain::task::{Task, TaskState};

/// Who reads the explanation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader<'a> {
    /// The reminder's owner, by principal id: "you" for their own acts.
    Owner(&'a str),
    /// A workspace admin: acts named by principal id.
    Admin,
}

/// The task's next `count` run instants while it is scheduled, the
/// occurrence skipped next left out.
pub fn next_runs(task: &Task, now: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
    if task.state() != TaskState::Scheduled {
        return Vec::new();
    }
    let skipped = skip::pending(task.skip_next.as_ref(), now).map(|s| s.occurrence);
    upcoming(&task.spec.schedule, now, count + 1)
        .into_iter()
        .filter(|at| Some(*at) != skipped)
        .take(count)
        .collect()
}

/// Whether and when `task` runs next, and why, for `reader`.
pub fn explain(task: &Task, reader: Reader<'_>, now: DateTime<Utc>) -> String {
    let mut text = standing(task, reader, now);
    let open = !matches!(task.state(), TaskState::Deleted | TaskState::Completed);
    if let Some(skipped) = skip::pending(task.skip_next.as_ref(), now)
        && open
    {
        let who = match reader {
            Reader::Owner(id) if skipped.by == id => "you",
            Reader::Owner(_) => "an admin",
            Reader::Admin => skipped.by.as_str(),
        };
        text.push_str("; ");
        text.push_str(&skip::describe(skipped, who));
    }
    match reader {
        Reader::Owner(_) => {
            // DST skips and repeats of a daily or weekly one in the coming year.
            if let Some(recurrence) = Recurrence::of(&task.spec.schedule)
                && open
            {
                for note in recurrence.notes(now) {
                    text.push_str("; ");
                    text.push_str(&note);
                }
            }
        }
        Reader::Admin => {
            let widened: Vec<String> = task
                .pending
                .iter()
                .flat_map(|p| compare(&task.spec, &p.spec))
                .filter(|d| d.widens)
                .map(|d| d.to_string())
                .collect();
            if !widened.is_empty() {
                text.push_str("; a release waits for an admin to approve: ");
                text.push_str(&widened.join("; "));
            }
        }
    }
    text
}

/// Who set `overrides`' latest flag, and when, as `reader` names them.
fn who(overrides: &Overrides, reader: Reader<'_>) -> String {
    match reader {
        Reader::Owner(id) => {
            let by = match overrides.by.as_deref() {
                Some(by) if by == id => "you",
                Some(_) => "a workspace admin",
                None => "an admin",
            };
            let on = overrides
                .at
                .map(|t| format!(" on {}", t.format("%Y-%m-%d")))
                .unwrap_or_default();
            format!("{by}{on}")
        }
        Reader::Admin => format!(
            "{} on {}",
            overrides.by.as_deref().unwrap_or("an admin"),
            overrides
                .at
                .map(|t| t.format("%Y-%m-%d").to_string())
                .unwrap_or_default()
        ),
    }
}

/// The task's state in words: the first part of the explanation.
fn standing(task: &Task, reader: Reader<'_>, now: DateTime<Utc>) -> String {
    let overrides = task.overrides.clone().unwrap_or_default();
    let owner = matches!(reader, Reader::Owner(_));
    let completed_at = || task.completed_at.map(format_utc).unwrap_or_default();
    match task.state() {
        TaskState::Deleted if owner => format!("never runs: cancelled by {}", who(&overrides, reader)),
        TaskState::Deleted => format!("never runs: deleted by {}", who(&overrides, reader)),
        TaskState::Completed if !owner => format!("completed on {}", completed_at()),
        TaskState::Completed => match task.spec.schedule.until() {
            Some(until) => format!(
                "finished on {}: it ran until {}, its last day",
                completed_at(),
                until.format("%Y-%m-%d")
            ),
            None => format!("ran on {}; a one-time reminder runs once", completed_at()),
        },
        TaskState::Paused => paused(task, &overrides, reader, now),
        TaskState::Held if owner => {
            let reasons: Vec<&str> = task.hold.entries().map(|(r, _)| r.as_str()).collect();
            format!("does not run: held ({})", reasons.join(", "))
        }
        TaskState::Held if task.hold.has(HoldReason::AwaitingApproval) => {
            "waits for an admin to approve it before its first run".to_owned()
        }
        TaskState::Held => {
            let reasons: Vec<String> = task
                .hold
                .entries()
                .map(|(r, e)| format!("{} ({})", r.as_str(), e.detail))
                .collect();
            format!("skipped: held, {}", reasons.join("; "))
        }
        TaskState::Scheduled => {
            let next = next_runs(task, now, 1).into_iter().next().map(format_utc);
            match (next, reader, Recurrence::of(&task.spec.schedule)) {
                (Some(next), Reader::Owner(_), Some(recurrence)) => {
                    format!("runs {}; next at {next}", recurrence.describe())
                }
                (Some(next), Reader::Owner(_), None) => format!("runs once, at {next}"),
                (None, Reader::Owner(_), _) => "has no further run".to_owned(),
                (Some(next), Reader::Admin, _) => format!("runs next at {next}"),
                (None, Reader::Admin, _) => "has no further fire time".to_owned(),
            }
        }
    }
}

/// A paused task: who paused it (whoever edited the overrides since), the
/// admin's note to admins, and to the owner whether its time has passed,
/// so that it can no longer be resumed.
fn paused(task: &Task, overrides: &Overrides, reader: Reader<'_>, now: DateTime<Utc>) -> String {
    let pause = Overrides {
        by: overrides.pauser().map(str::to_owned).or(overrides.by.clone()),
        ..overrides.clone()
    };
    if reader == Reader::Admin {
        let note = overrides.note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
        return format!("skipped: paused by {}{note}", who(&pause, reader));
    }
    let mut text = format!("does not run: paused by {}", who(&pause, reader));
    if let Schedule::At { at } = task.spec.schedule
        && at <= now
    {
        text.push_str(&format!(
            "; its time {} has passed, so it cannot be resumed: move it with update",
            format_utc(at)
        ));
    }
    if let Some(until) = task.spec.schedule.until()
        && task.spec.schedule.is_over(now)
    {
        text.push_str(&format!(
            "; its last day, {}, has passed, so it cannot be resumed: move it with update",
            until.format("%Y-%m-%d")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::tests_fixture;
    use chrono::TimeZone;

    fn at(d: u32, h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, d, h, 0, 0).unwrap()
    }

    fn paused_by(task: &mut Task, by: &str) {
        task.overrides = Some(Overrides {
            paused: true,
            paused_by: Some(by.into()),
            by: Some(by.into()),
            at: Some(at(9, 8)),
            note: Some("quiet week".into()),
            ..Overrides::default()
        });
    }

    #[test]
    fn each_reader_reads_the_same_state_in_their_words() {
        let now = at(10, 12);
        let daily = Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        };
        let mut task = tests_fixture(daily);
        let owner = Reader::Owner("usr_1");
        assert_eq!(
            explain(&task, owner, now),
            "runs every day at 09:00 UTC; next at 2026-06-11T09:00:00Z"
        );
        assert_eq!(explain(&task, Reader::Admin, now), "runs next at 2026-06-11T09:00:00Z");
        paused_by(&mut task, "usr_1");
        assert_eq!(explain(&task, owner, now), "does not run: paused by you on 2026-06-09");
        assert_eq!(
            explain(&task, Reader::Admin, now),
            "skipped: paused by usr_1 on 2026-06-09 (quiet week)"
        );
        paused_by(&mut task, "u_admin");
        assert_eq!(
            explain(&task, owner, now),
            "does not run: paused by a workspace admin on 2026-06-09"
        );
    }

    #[test]
    fn the_owner_learns_a_passed_time_cannot_be_resumed() {
        let mut task = tests_fixture(Schedule::At { at: at(10, 11) });
        paused_by(&mut task, "usr_1");
        assert_eq!(
            explain(&task, Reader::Owner("usr_1"), at(10, 12)),
            "does not run: paused by you on 2026-06-09; its time 2026-06-10T11:00:00Z has passed, \
             so it cannot be resumed: move it with update"
        );
    }

    #[test]
    fn the_skipped_occurrence_is_not_the_next_run() {
        let now = at(10, 12);
        let mut task = tests_fixture(Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        });
        task.skip_next = Some(skip::skip_next(&task.spec.schedule, None, "usr_1", now).unwrap());
        assert_eq!(next_runs(&task, now, 1), vec![at(12, 9)]);
        let owner = explain(&task, Reader::Owner("usr_1"), now);
        assert!(
            owner.starts_with("runs every day at 09:00 UTC; next at 2026-06-12T09:00:00Z; "),
            "{owner}"
        );
        assert!(owner.contains("you"), "{owner}");
        let admin = explain(&task, Reader::Admin, now);
        assert!(admin.starts_with("runs next at 2026-06-12T09:00:00Z; "), "{admin}");
        assert!(admin.contains("usr_1"), "{admin}");
    }
}
