//! Skip next (SPEC §8, §11): a recurring task's owner (a reminder) or a
//! workspace admin (a connector task) skips exactly its next occurrence;
//! `unskip` takes it back before it comes. The door records that
//! occurrence `skipped` with the reason in words when it comes, and the
//! one after it runs.
//!
//! Invariants: a skip names one instant, the next fire time of the task's
//! schedule after the request as Scheduler fires it (a local time DST
//! skips, or a day a month lacks, is never "the next one"); a change of
//! the schedule (an owner's update, an approved release) moves a skip that
//! has not come yet to the new schedule's next fire time after the change,
//! and forgets one whose time has passed ([`carry`]), so it is always
//! exactly the next one. A one-time task has no "next one": cancel or
//! pause it. Called by `app::schedules`, `app::admin`, `app::change` and
//! the door.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::schedule::Schedule;
use crate::domain::schedule::format_utc;
use crate::domain::schedule::preview::next_fire;

/// The occurrence a task skips, and who asked when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkipNext {
    pub occurrence: DateTime<Utc>,
    pub by: String,
    pub at: DateTime<Utc>,
}

/// Why a skip is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkipError {
    #[error("a one-time task has no next run to skip: cancel or pause it instead")]
    OneTime,
    #[error("it has no further run to skip")]
    NoNextRun,
    #[error("a rate schedule has no fixed times: its next run cannot be named to skip it")]
    Rate,
}

/// The next fire time of `schedule` after `now`, the one a skip names.
fn next_of(schedule: &Schedule, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    next_fire(schedule, now).ok().flatten()
}

/// The skip of a task on `schedule` (skipping `current` now) once `by`
/// asks at `now` to skip its next occurrence. Asking again while that
/// occurrence is still the next one changes nothing.
pub fn skip_next(
    schedule: &Schedule,
    current: Option<&SkipNext>,
    by: &str,
    now: DateTime<Utc>,
) -> Result<SkipNext, SkipError> {
    match schedule {
        Schedule::At { .. } => return Err(SkipError::OneTime),
        Schedule::Rate { .. } => return Err(SkipError::Rate),
        Schedule::Cron { .. } | Schedule::Calendar { .. } => {}
    }
    let occurrence = next_of(schedule, now).ok_or(SkipError::NoNextRun)?;
    Ok(match current {
        Some(current) if current.occurrence == occurrence => current.clone(),
        _ => SkipNext {
            occurrence,
            by: by.to_owned(),
            at: now,
        },
    })
}

/// The skip still to come at `now`, if any (one whose time passed is spent).
pub fn pending(skip: Option<&SkipNext>, now: DateTime<Utc>) -> Option<&SkipNext> {
    skip.filter(|s| s.occurrence > now)
}

/// The skip a task keeps when its schedule goes from `before` to `after`
/// at `now`: unchanged while the schedule is, even once its time passed
/// (Scheduler fires anywhere in the minute and a message can wait in the
/// queue: the skipped occurrence's delivery can come after an edit made
/// after its time, and must still find the skip); moved to the new
/// schedule's next fire time when it changed and the skip has not come
/// yet; none when it changed after the skip's time (the door then skips
/// the old occurrence as no longer one of the schedule's).
pub fn carry(before: &Schedule, after: &Schedule, skip: Option<&SkipNext>, now: DateTime<Utc>) -> Option<SkipNext> {
    let skip = skip?.clone();
    if before == after {
        return Some(skip);
    }
    if skip.occurrence <= now {
        return None;
    }
    match after {
        // A one-time task has no "next one" to skip, a rate no nameable one.
        Schedule::At { .. } | Schedule::Rate { .. } => None,
        _ => next_of(after, now).map(|occurrence| SkipNext { occurrence, ..skip }),
    }
}

/// Whether this occurrence is the skipped one.
pub fn skips(skip: Option<&SkipNext>, scheduled: DateTime<Utc>) -> bool {
    skip.is_some_and(|s| s.occurrence == scheduled)
}

/// The skip in words, for an explanation.
pub fn describe(skip: &SkipNext, who: &str) -> String {
    format!(
        "the run at {} is skipped ({who} skipped it)",
        format_utc(skip.occurrence)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone};

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn daily(hour: u8, minute: u8, zone: &str) -> Schedule {
        Schedule::Cron {
            cron: format!("{minute} {hour} * * *"),
            timezone: zone.into(),
            until: None,
        }
    }

    #[test]
    fn the_next_one_is_skipped_across_a_dst_gap() {
        // New York springs forward on 2027-03-14: 02:30 does not exist.
        let schedule = daily(2, 30, "America/New_York");
        let now = utc(2027, 3, 13, 17, 0);
        let skip = skip_next(&schedule, None, "usr_1", now).unwrap();
        assert_eq!(skip.occurrence, utc(2027, 3, 15, 6, 30), "the 14th has no 02:30");
        assert!(skips(Some(&skip), utc(2027, 3, 15, 6, 30)));
        assert!(!skips(Some(&skip), utc(2027, 3, 16, 6, 30)), "the one after runs");
        assert_eq!(
            skip_next(&schedule, Some(&skip), "adm_1", now + Duration::hours(1)),
            Ok(skip.clone()),
            "asking again keeps it"
        );
        assert_eq!(pending(Some(&skip), now), Some(&skip));
        assert_eq!(pending(Some(&skip), utc(2027, 3, 15, 6, 30)), None, "spent");
        let once = Schedule::At {
            at: utc(2027, 3, 20, 0, 0),
        };
        assert_eq!(skip_next(&once, None, "usr_1", now), Err(SkipError::OneTime));
        let rate = Schedule::Rate {
            every: 1,
            unit: crate::domain::schedule::RateUnit::Days,
        };
        assert_eq!(skip_next(&rate, None, "adm_1", now), Err(SkipError::Rate));
        let ended = Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: chrono::NaiveDate::from_ymd_opt(2027, 3, 13),
        };
        assert_eq!(skip_next(&ended, None, "usr_1", now), Err(SkipError::NoNextRun));
    }

    #[test]
    fn a_change_of_schedule_moves_the_skip_to_the_new_next_one() {
        let (before, after) = (daily(7, 0, "UTC"), daily(8, 0, "UTC"));
        let now = utc(2027, 5, 3, 12, 0);
        let skip = skip_next(&before, None, "usr_1", now).unwrap();
        assert_eq!(skip.occurrence, utc(2027, 5, 4, 7, 0));
        let carried = carry(&before, &after, Some(&skip), now + Duration::hours(1)).unwrap();
        assert_eq!(carried.occurrence, utc(2027, 5, 4, 8, 0));
        assert_eq!(carried.by, "usr_1");
        assert_eq!(carry(&before, &before, Some(&skip), now), Some(skip.clone()));
        // An edit that keeps the schedule, made after the skipped time but
        // before its delivery came (Scheduler fires within the minute, a
        // message waits in the queue): the skip stays for the door.
        let late_edit = utc(2027, 5, 4, 7, 0) + Duration::seconds(20);
        assert_eq!(carry(&before, &before, Some(&skip), late_edit), Some(skip.clone()));
        assert!(skips(
            carry(&before, &before, Some(&skip), late_edit).as_ref(),
            utc(2027, 5, 4, 7, 0)
        ));
        assert_eq!(pending(Some(&skip), late_edit), None, "spent, as a person reads it");
        assert_eq!(
            carry(&before, &after, Some(&skip), utc(2027, 5, 4, 7, 0)),
            None,
            "its time passed"
        );
        assert_eq!(carry(&before, &after, None, now), None);
        let once = Schedule::At {
            at: utc(2027, 5, 4, 7, 0),
        };
        assert_eq!(
            carry(&before, &once, Some(&skip), now),
            None,
            "a one-time task skips nothing"
        );
    }
}
