//! The cost ceiling of a task's bounds (SPEC §8): what its schedule can cost
//! in a month, so an admin sees what a widening costs before approving it.
//! The most fires in any UTC calendar month of the next year (the budget's
//! period, `budget::period`), times `max_usd_per_run`, capped by
//! `max_usd_per_month`. Called by `app::admin`'s `get`.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use serde::Serialize;

use super::budget::Budget;
use crate::domain::schedule::preview::next_fires;
use crate::domain::schedule::{RateUnit, Schedule};

/// Fires read for one month of a cron: a minute's cron fires 44,640 times
/// in 31 days.
const MAX_FIRES_A_MONTH: usize = 44_640;

/// What a task's bounds can cost in a month.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostCeiling {
    /// The most runs in one month of the next year.
    pub runs_per_month: u64,
    pub usd_per_run: f64,
    /// At most this a month: the runs at the per-run maximum, capped by the
    /// monthly budget.
    pub usd_per_month: f64,
    /// Whether the monthly budget is what caps it.
    pub capped_by_monthly_budget: bool,
    /// The same in words.
    pub words: String,
}

/// The most fires of `schedule` in one UTC calendar month of the twelve
/// starting with `now`'s.
pub fn most_fires_a_month(schedule: &Schedule, now: DateTime<Utc>) -> u64 {
    match schedule {
        Schedule::At { at } => u64::from(*at > now),
        Schedule::Rate { every, unit } => {
            let step = match unit {
                RateUnit::Minutes => 60,
                RateUnit::Hours => 3_600,
                RateUnit::Days => 86_400,
            } * u64::from((*every).max(1));
            (31 * 86_400_u64).div_ceil(step)
        }
        Schedule::Cron { .. } | Schedule::Calendar { .. } => {
            let mut most = 0;
            let mut start = Utc
                .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
                .single()
                .unwrap_or(now);
            for _ in 0..12 {
                let end = next_month(start);
                let from = start.max(now) - Duration::seconds(1);
                let fires = next_fires(schedule, from, MAX_FIRES_A_MONTH).unwrap_or_default();
                let count = fires.iter().filter_map(|f| f.at).filter(|at| *at < end).count() as u64;
                most = most.max(count);
                start = end;
            }
            most
        }
    }
}

fn next_month(start: DateTime<Utc>) -> DateTime<Utc> {
    let (year, month) = if start.month() == 12 {
        (start.year() + 1, 1)
    } else {
        (start.year(), start.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0).single().unwrap_or(start)
}

/// The ceiling of a schedule under a budget, as `get` shows it.
pub fn cost_ceiling(schedule: &Schedule, budget: Budget, now: DateTime<Utc>) -> CostCeiling {
    let runs = most_fires_a_month(schedule, now);
    let uncapped = runs as f64 * budget.max_usd_per_run;
    let capped = uncapped > budget.max_usd_per_month;
    let usd = uncapped.min(budget.max_usd_per_month);
    let plural = if runs == 1 { "run" } else { "runs" };
    let mut words = format!(
        "at most USD {usd:.2} a month: up to {runs} {plural} at USD {:.2}",
        budget.max_usd_per_run
    );
    if capped {
        words.push_str(", capped by the monthly budget");
    }
    CostCeiling {
        runs_per_month: runs,
        usd_per_run: budget.max_usd_per_run,
        usd_per_month: usd,
        capped_by_monthly_budget: capped,
        words,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
    }

    fn cron(expr: &str, zone: &str) -> Schedule {
        Schedule::Cron {
            cron: expr.into(),
            timezone: zone.into(),
            until: None,
        }
    }

    #[test]
    fn a_ceiling_is_the_busiest_month_times_the_run_capped_by_the_month() {
        let budget = Budget {
            max_usd_per_run: 0.25,
            max_usd_per_month: 5.0,
        };
        // Weekdays at 09:00: 23 in the busiest month of the next year.
        let weekdays = cost_ceiling(&cron("0 9 * * MON-FRI", "Europe/Berlin"), budget, now());
        assert_eq!(weekdays.runs_per_month, 23);
        assert_eq!(weekdays.usd_per_month, 5.0);
        assert_eq!(
            weekdays.words,
            "at most USD 5.00 a month: up to 23 runs at USD 0.25, capped by the monthly budget"
        );
        let weekly = cost_ceiling(&cron("0 9 * * MON", "UTC"), budget, now());
        assert_eq!(weekly.runs_per_month, 5);
        assert_eq!(weekly.words, "at most USD 1.25 a month: up to 5 runs at USD 0.25");
        let hourly = Schedule::Rate {
            every: 1,
            unit: RateUnit::Hours,
        };
        assert_eq!(most_fires_a_month(&hourly, now()), 31 * 24);
        let once = Schedule::At {
            at: now() + Duration::days(3),
        };
        assert_eq!(
            cost_ceiling(&once, budget, now()).words,
            "at most USD 0.25 a month: up to 1 run at USD 0.25"
        );
        // The 31st: seven months of the year have one.
        assert_eq!(most_fires_a_month(&cron("0 8 31 * *", "UTC"), now()), 1);
    }

    #[test]
    fn monthly_kinds_and_until_count_as_they_fire() {
        use crate::domain::schedule::calendar::{Calendar, MonthDay};
        let budget = Budget {
            max_usd_per_run: 0.25,
            max_usd_per_month: 5.0,
        };
        let first_monday = Schedule::Calendar {
            calendar: Calendar {
                month: None,
                day: MonthDay::Nth { weekday: 0, nth: 1 },
                hour: 9,
                minute: 0,
            },
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        assert_eq!(
            cost_ceiling(&first_monday, budget, now()).words,
            "at most USD 0.25 a month: up to 1 run at USD 0.25"
        );
        // Daily, until ten days from now: ten runs at most in any month.
        let until = Schedule::Cron {
            cron: "0 13 * * *".into(),
            timezone: "UTC".into(),
            until: Some(now().date_naive() + Duration::days(9)),
        };
        assert_eq!(most_fires_a_month(&until, now()), 10);
    }
}
