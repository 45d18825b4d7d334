//! Run now (SPEC §8, §11): one extra occurrence of a recurring reminder
//! (asked by its owner) or of an approved connector task (asked by a
//! workspace admin), now, outside the schedule, exactly once per
//! idempotency key, through the same door, claim, budget and settle as any
//! occurrence.
//!
//! Invariants:
//! - The occurrence is recorded on the task when it is requested (the
//!   task's `run_now`, keyed by its occurrence key), in the same write as
//!   the key's idempotency record, before its message is sent: the door
//!   accepts it as one of the task's own, and a replay of the key sends
//!   the message again (the claim makes the second a duplicate).
//! - Its instant is a whole second at or after the request that is no
//!   occurrence of the schedule and no occurrence the task knows (a claim
//!   or another run now): never one occurrence for two runs.
//! - A change of the schedule, or of the task out of `scheduled` (paused,
//!   held, cancelled, completed), forgets the recorded ones ([`carry`]): a
//!   stale run now is skipped like any other (`rescheduled`, or the pause's
//!   or tombstone's reason). Recorded ones older than [`KEEP`] are pruned
//!   when another is recorded: the door has missed them long before.
//!
//! Called by `app::run_now` (owner and admin) and the door.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::schedule::preview::next_fire;
use crate::domain::schedule::{Schedule, format_utc};

/// An occurrence's key within its task (`occurrence::occurrence_key`).
fn occurrence_key(at: DateTime<Utc>) -> String {
    format_utc(at)
}

/// Whether the schedule fires at `at` (a rate has no fixed times).
fn fires_at(schedule: &Schedule, at: DateTime<Utc>) -> bool {
    match schedule {
        Schedule::At { at: once } => *once == at,
        Schedule::Rate { .. } => false,
        Schedule::Cron { .. } | Schedule::Calendar { .. } => {
            matches!(next_fire(schedule, at - Duration::seconds(1)), Ok(Some(next)) if next == at)
        }
    }
}

/// How long a recorded run now is kept: longer than any catch-up window
/// (at most six hours), after which the door skips its delivery as missed.
pub const KEEP: Duration = Duration::days(1);

/// The most run-now occurrences a task holds within [`KEEP`]: a caller
/// cannot grow a task item without bound.
pub const MAX_RECORDED: usize = 24;

/// One requested run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunNow {
    /// The idempotency key it was requested with.
    pub key: String,
    /// Who asked.
    pub by: String,
    pub requested_at: DateTime<Utc>,
}

/// Why a run now is refused before the door is asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunNowError {
    #[error("a one-time reminder runs at its time: move it with update to run it sooner")]
    OneTime,
    #[error("{MAX_RECORDED} runs were asked for within a day; wait for them to run")]
    TooMany,
}

/// The instant of a run now requested at `now`: the whole second at or
/// after it that is no fire time of `schedule` and not `taken` (an
/// occurrence key the task already knows).
pub fn occurrence(schedule: &Schedule, taken: impl Fn(&str) -> bool, now: DateTime<Utc>) -> DateTime<Utc> {
    let whole = now.trunc_subsecs(0);
    let mut at = if whole < now {
        whole + Duration::seconds(1)
    } else {
        whole
    };
    while taken(&occurrence_key(at)) || fires_at(schedule, at) {
        at += Duration::seconds(1);
    }
    at
}

/// Records a run now at `at`, after pruning those older than [`KEEP`].
pub fn record(
    recorded: &BTreeMap<String, RunNow>,
    at: DateTime<Utc>,
    run: RunNow,
    now: DateTime<Utc>,
) -> Result<BTreeMap<String, RunNow>, RunNowError> {
    let mut kept: BTreeMap<String, RunNow> = recorded
        .iter()
        .filter(|(_, r)| now - r.requested_at <= KEEP)
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    if kept.len() >= MAX_RECORDED {
        return Err(RunNowError::TooMany);
    }
    kept.insert(occurrence_key(at), run);
    Ok(kept)
}

/// Whether `scheduled` is a run now the task recorded.
pub fn is_recorded(recorded: &BTreeMap<String, RunNow>, scheduled: DateTime<Utc>) -> bool {
    recorded.contains_key(&occurrence_key(scheduled))
}

/// The run-now occurrences a task keeps across a change: none once its
/// schedule changed or it is no longer scheduled (`still_runs`).
pub fn carry(
    before: &Schedule,
    after: &Schedule,
    still_runs: bool,
    recorded: &BTreeMap<String, RunNow>,
) -> BTreeMap<String, RunNow> {
    if before == after && still_runs {
        recorded.clone()
    } else {
        BTreeMap::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn utc(h: u32, m: u32, s: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 5, 3, h, m, s).unwrap()
    }

    fn daily_at_nine() -> Schedule {
        Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        }
    }

    fn run(key: &str, at: DateTime<Utc>) -> RunNow {
        RunNow {
            key: key.into(),
            by: "usr_1".into(),
            requested_at: at,
        }
    }

    #[test]
    fn the_instant_is_a_free_whole_second_never_a_fire_time() {
        let schedule = daily_at_nine();
        let nothing = |_: &str| false;
        assert_eq!(
            occurrence(&schedule, nothing, utc(10, 0, 0) + Duration::milliseconds(250)),
            utc(10, 0, 1),
            "rounded up, never early"
        );
        assert_eq!(
            occurrence(&schedule, nothing, utc(9, 0, 0)),
            utc(9, 0, 1),
            "09:00:00 is the schedule's own occurrence"
        );
        let taken = [occurrence_key(utc(10, 0, 0)), occurrence_key(utc(10, 0, 1))];
        assert_eq!(
            occurrence(&schedule, |k| taken.iter().any(|t| t == k), utc(10, 0, 0)),
            utc(10, 0, 2)
        );
    }

    #[test]
    fn recorded_runs_are_pruned_bounded_and_forgotten_on_a_move_or_a_pause() {
        let now = utc(12, 0, 0);
        let old = BTreeMap::from([(occurrence_key(utc(1, 0, 0) - KEEP), run("k0", utc(1, 0, 0) - KEEP))]);
        let recorded = record(&old, utc(12, 0, 1), run("k1", now), now).unwrap();
        assert_eq!(recorded.len(), 1, "the one older than a day is pruned");
        assert!(is_recorded(&recorded, utc(12, 0, 1)));
        assert!(!is_recorded(&recorded, utc(12, 0, 2)));
        let mut full = BTreeMap::new();
        for i in 0..MAX_RECORDED {
            full.insert(occurrence_key(utc(11, 0, i as u32)), run("k", utc(11, 0, 0)));
        }
        assert_eq!(
            record(&full, utc(12, 0, 1), run("k", now), now),
            Err(RunNowError::TooMany)
        );
        let moved = Schedule::Cron {
            cron: "0 10 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        };
        assert_eq!(carry(&daily_at_nine(), &daily_at_nine(), true, &recorded), recorded);
        assert!(carry(&daily_at_nine(), &moved, true, &recorded).is_empty(), "moved");
        assert!(
            carry(&daily_at_nine(), &daily_at_nine(), false, &recorded).is_empty(),
            "paused or cancelled"
        );
    }
}
