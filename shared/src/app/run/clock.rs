//! A delivery's time: the `now` its caller handed in, moved on by what the
//! runner's [`Clock`] says has passed since. Every read of the time during
//! a run (its wall time left, a pace slot, a settle's retry, a record's
//! `finished_at`) is this one, so a delivery handled at any `now` (a test's
//! fixture date, the simulation's virtual time) runs as one handled on
//! the wall clock does.

use chrono::{DateTime, Duration, Utc};

use crate::ports::Clock;

pub(crate) struct RunClock<'a> {
    /// The `now` the delivery was handed.
    at: DateTime<Utc>,
    /// The runner's clock when the delivery began.
    started: DateTime<Utc>,
    clock: &'a dyn Clock,
}

impl<'a> RunClock<'a> {
    pub(crate) fn new(at: DateTime<Utc>, clock: &'a dyn Clock) -> Self {
        Self {
            at,
            started: clock.now(),
            clock,
        }
    }

    /// The instant the delivery was handled at.
    pub(crate) fn handled_at(&self) -> DateTime<Utc> {
        self.at
    }

    /// The delivery's `now`, moved on by the time passed since; never before
    /// it (a wall clock set back does not move a run back).
    pub(crate) fn now(&self) -> DateTime<Utc> {
        self.at + (self.clock.now() - self.started).max(Duration::zero())
    }

    /// The invocation's `deadline`, an instant of the runner's clock (the
    /// Lambda context's), as an instant of the delivery's time: as far
    /// after the delivery's `now` as it was after the clock when the
    /// delivery began. The same instant when the two are one clock, as in
    /// production.
    pub(crate) fn deadline(&self, deadline: DateTime<Utc>) -> DateTime<Utc> {
        self.at + (deadline - self.started)
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    struct Manual(Mutex<DateTime<Utc>>);

    impl Clock for Manual {
        fn now(&self) -> DateTime<Utc> {
            *self.0.lock().unwrap()
        }
    }

    #[test]
    fn a_delivery_s_time_is_its_now_moved_on_by_what_passed() {
        let wall: DateTime<Utc> = "2031-05-01T00:00:00Z".parse().unwrap();
        let clock = Manual(Mutex::new(wall));
        let handed: DateTime<Utc> = "2026-12-05T18:00:05Z".parse().unwrap();
        let run = RunClock::new(handed, &clock);
        assert_eq!(run.now(), handed, "the wall's date is not the run's");
        *clock.0.lock().unwrap() = wall + Duration::seconds(7);
        assert_eq!(run.now(), handed + Duration::seconds(7));
        assert_eq!(run.handled_at(), handed);
        // The invocation's deadline, read on the runner's clock, is as far
        // after the delivery's now.
        assert_eq!(run.deadline(wall + Duration::minutes(5)), handed + Duration::minutes(5));
        // A wall clock set back moves nothing back.
        *clock.0.lock().unwrap() = wall - Duration::hours(1);
        assert_eq!(run.now(), handed);
    }
}
