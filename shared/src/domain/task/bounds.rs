//! The order on approved bounds (SPEC §6): what "widens" means. A declared
//! change widens the bounds when it adds a tool or a need, raises a limit or
//! a budget, or makes the schedule fire more often; anything else narrows.
//!
//! "Fires more often" has two measures, both year-independent: how many
//! times a schedule fires in one Gregorian cycle (400 years, after which
//! dates and weekdays repeat exactly), and the shortest time between two
//! fires. DST is ignored: it moves fires, not their number; so is a
//! reminder's `until` (connector schedules have none).

use std::collections::BTreeSet;
use std::fmt;

use chrono::{Datelike, NaiveDate};

use crate::domain::schedule::cron::Cron;
use crate::domain::schedule::preview::EbCron;
use crate::domain::schedule::{RateUnit, Schedule};
use crate::domain::task::Spec;

/// Days in one Gregorian cycle: 400 years, a whole number of weeks.
const CYCLE_DAYS: u64 = 146_097;
/// Years in one Gregorian cycle.
const CYCLE_YEARS: u64 = 400;
/// The longest time between two fires of a calendar schedule (29 February
/// across a century that is not a leap year): scanning this far past the
/// cycle's end sees the gap across its boundary.
const LONGEST_CALENDAR_GAP_DAYS: u64 = 8 * 366;

/// One difference between approved and declared bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Difference {
    pub what: String,
    pub from: String,
    pub to: String,
    pub widens: bool,
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.widens { "raised" } else { "lowered" };
        write!(f, "{} {verb} from {} to {}", self.what, self.from, self.to)
    }
}

fn rate_minutes(every: u32, unit: RateUnit) -> u64 {
    u64::from(every)
        * match unit {
            RateUnit::Minutes => 1,
            RateUnit::Hours => 60,
            RateUnit::Days => 1440,
        }
}

/// The days of the cycle (and a little past its end), in order.
fn cycle_days(extra: u64) -> impl Iterator<Item = NaiveDate> {
    (1..=CYCLE_DAYS + extra).filter_map(|d| i32::try_from(d).ok().and_then(NaiveDate::from_num_days_from_ce_opt))
}

/// How often a schedule fires in one Gregorian cycle: the exact measure of
/// "fires more often", the same whatever year it is.
pub fn fires_per_cycle(schedule: &Schedule) -> u64 {
    match schedule {
        Schedule::At { .. } => 1,
        Schedule::Rate { every, unit } => CYCLE_DAYS * 1440 / rate_minutes(*every, *unit).max(1),
        Schedule::Cron { cron, .. } => match Cron::parse(cron) {
            Ok(cron) => {
                let per_day = (cron.hours.len() * cron.minutes.len()) as u64;
                cycle_days(0).filter(|date| cron.fires_on(*date)).count() as u64 * per_day
            }
            Err(_) => u64::MAX,
        },
        Schedule::Calendar { calendar, .. } => match EbCron::parse(&calendar.to_eventbridge()) {
            Some(cron) => cycle_days(0).filter(|date| cron.fires_on(*date)).count() as u64 * cron.times().len() as u64,
            None => u64::MAX,
        },
    }
}

/// How often a schedule fires in a year, on average over the cycle (rounded
/// down): for people; [`fires_per_cycle`] is the exact measure.
pub fn fires_per_year(schedule: &Schedule) -> u64 {
    match schedule {
        Schedule::At { .. } => 1,
        other => fires_per_cycle(other) / CYCLE_YEARS,
    }
}

/// The shortest time between two fires, in minutes: the other measure of
/// "fires more often" (fewer fires a year can still come closer together).
/// Local wall-clock time; DST is ignored as in [`fires_per_cycle`].
pub fn shortest_gap_minutes(schedule: &Schedule) -> u64 {
    match schedule {
        Schedule::At { .. } => u64::MAX,
        Schedule::Rate { every, unit } => rate_minutes(*every, *unit),
        Schedule::Cron { cron, .. } => match Cron::parse(cron) {
            Ok(cron) => {
                let times = cron
                    .hours
                    .iter()
                    .flat_map(|h| cron.minutes.iter().map(move |m| u64::from(*h) * 60 + u64::from(*m)))
                    .collect();
                gap_minutes(times, |date| cron.fires_on(date))
            }
            Err(_) => 0,
        },
        Schedule::Calendar { calendar, .. } => match EbCron::parse(&calendar.to_eventbridge()) {
            Some(cron) => {
                let times = cron
                    .times()
                    .into_iter()
                    .map(|(h, m)| u64::from(h) * 60 + u64::from(m))
                    .collect();
                gap_minutes(times, |date| cron.fires_on(date))
            }
            None => 0,
        },
    }
}

/// The shortest gap between two fires of a schedule that fires at `times`
/// (minutes of the day) on the days `fires_on` names.
fn gap_minutes(times: BTreeSet<u64>, fires_on: impl Fn(NaiveDate) -> bool) -> u64 {
    let times: Vec<u64> = times.into_iter().collect();
    let (Some(first), Some(last)) = (times.first(), times.last()) else {
        return u64::MAX;
    };
    let within_a_day = times.windows(2).map(|w| w[1] - w[0]).min().unwrap_or(u64::MAX);
    let days: Vec<u64> = cycle_days(LONGEST_CALENDAR_GAP_DAYS)
        .filter(|date| fires_on(*date))
        .map(|date| date.num_days_from_ce() as u64)
        .collect();
    let across_days = days
        .windows(2)
        .map(|w| (w[1] - w[0]) * 1440 + first - last)
        .min()
        .unwrap_or(u64::MAX);
    within_a_day.min(across_days)
}

/// Whether `new` fires more often than `old`: more fires in a cycle, or two
/// fires closer together than any two of `old`.
pub fn fires_more_often(old: &Schedule, new: &Schedule) -> bool {
    fires_per_cycle(new) > fires_per_cycle(old) || shortest_gap_minutes(new) < shortest_gap_minutes(old)
}

fn describe_schedule(schedule: &Schedule) -> String {
    match schedule {
        Schedule::At { at } => format!("once at {}", crate::domain::schedule::format_utc(*at)),
        Schedule::Cron { cron, timezone, .. } => format!("`{cron}` in {timezone}"),
        Schedule::Calendar { calendar, timezone, .. } => format!("`{}` in {timezone}", calendar.to_eventbridge()),
        Schedule::Rate { every, unit } => format!("every {every} {unit:?}").to_lowercase(),
    }
}

fn list(set: &BTreeSet<String>) -> String {
    if set.is_empty() {
        "none".into()
    } else {
        set.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

/// Every difference between approved bounds `old` and declared bounds `new`.
pub fn compare(old: &Spec, new: &Spec) -> Vec<Difference> {
    let mut out = Vec::new();
    let mut push = |what: &str, from: String, to: String, widens: bool| {
        out.push(Difference {
            what: what.into(),
            from,
            to,
            widens,
        });
    };
    if old.tools != new.tools {
        push(
            "tools",
            list(&old.tools),
            list(&new.tools),
            !new.tools.is_subset(&old.tools),
        );
    }
    let (o, n) = (old.limits, new.limits);
    for (what, a, b) in [
        ("max_turns", o.max_turns, n.max_turns),
        ("max_tool_calls", o.max_tool_calls, n.max_tool_calls),
        ("max_output_tokens", o.max_output_tokens, n.max_output_tokens),
        ("timeout_seconds", o.timeout_seconds, n.timeout_seconds),
    ] {
        if a != b {
            push(what, a.to_string(), b.to_string(), b > a);
        }
    }
    let (ob, nb) = (old.budget.unwrap_or_default(), new.budget.unwrap_or_default());
    for (what, a, b) in [
        ("budget per run", ob.max_usd_per_run, nb.max_usd_per_run),
        ("budget per month", ob.max_usd_per_month, nb.max_usd_per_month),
    ] {
        if a != b {
            push(what, format!("${a:.2}"), format!("${b:.2}"), b > a);
        }
    }
    let (old_needs, new_needs): (BTreeSet<String>, BTreeSet<String>) =
        (old.needs.keys().cloned().collect(), new.needs.keys().cloned().collect());
    if old_needs != new_needs {
        push(
            "needs",
            list(&old_needs),
            list(&new_needs),
            !new_needs.is_subset(&old_needs),
        );
    }
    if old.schedule != new.schedule {
        let widens = fires_more_often(&old.schedule, &new.schedule);
        push(
            "schedule",
            describe_schedule(&old.schedule),
            describe_schedule(&new.schedule),
            widens,
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cron(expression: &str) -> Schedule {
        Schedule::Cron {
            cron: expression.into(),
            timezone: "UTC".into(),
            until: None,
        }
    }

    #[test]
    fn frequency_orders_schedules() {
        assert!(fires_per_year(&cron("0 9 * * MON-FRI")) < fires_per_year(&cron("0 9 * * *")));
        assert_eq!(fires_per_year(&cron("0 9 * * *")), 365);
        assert_eq!(
            fires_per_year(&Schedule::Rate {
                every: 1,
                unit: RateUnit::Days
            }),
            365
        );
        assert!(
            fires_per_year(&Schedule::Rate {
                every: 5,
                unit: RateUnit::Minutes
            }) > fires_per_year(&cron("0 * * * *"))
        );
    }

    #[test]
    fn fires_bunched_closer_together_are_more_often_even_with_fewer_a_year() {
        let daily = cron("0 9 * * *");
        let bunched = cron("*/2 9 1 * *");
        assert!(fires_per_year(&bunched) < fires_per_year(&daily));
        assert_eq!(shortest_gap_minutes(&daily), 1440);
        assert_eq!(shortest_gap_minutes(&bunched), 2);
        assert!(fires_more_often(&daily, &bunched));
        assert!(!fires_more_often(&daily, &cron("0 9 * * MON")), "weekly is a narrowing");
        assert!(!fires_more_often(&cron("0 9,17 * * *"), &daily));
        assert!(fires_more_often(&daily, &cron("0 9,17 * * *")));
        assert_eq!(shortest_gap_minutes(&cron("0 23 * * *")), 1440, "across midnight");
        assert_eq!(shortest_gap_minutes(&cron("0 9 1 1 *")), 365 * 1440, "once a year");
        assert_eq!(shortest_gap_minutes(&cron("30 8,9 * * *")), 60);
        assert_eq!(
            shortest_gap_minutes(&Schedule::Rate {
                every: 3,
                unit: RateUnit::Hours
            }),
            180
        );
    }

    fn spec(schedule: Schedule, tools: &[&str], limits: [u32; 4], budget: (f64, f64)) -> Spec {
        Spec {
            schedule,
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            limits: crate::domain::task::limits::Limits {
                max_turns: limits[0],
                max_tool_calls: limits[1],
                max_output_tokens: limits[2],
                timeout_seconds: limits[3],
            },
            budget: Some(crate::domain::task::budget::Budget {
                max_usd_per_run: budget.0,
                max_usd_per_month: budget.1,
            }),
            arguments: Default::default(),
            needs: Default::default(),
            bindings: Default::default(),
            agent: None,
            scopes: BTreeSet::new(),
        }
    }

    fn arb_rate() -> impl Strategy<Value = Schedule> {
        (
            1u32..500,
            prop_oneof![Just(RateUnit::Minutes), Just(RateUnit::Hours), Just(RateUnit::Days)],
        )
            .prop_map(|(every, unit)| Schedule::Rate { every, unit })
    }

    fn arb_cron() -> impl Strategy<Value = Schedule> {
        (
            0u8..60,
            proptest::collection::btree_set(0u8..24, 1..4),
            prop_oneof![
                Just("*".to_owned()),
                Just("MON-FRI".to_owned()),
                Just("MON".to_owned()),
                Just("SAT,SUN".to_owned())
            ],
        )
            .prop_map(|(minute, hours, days)| {
                let hours = hours.iter().map(u8::to_string).collect::<Vec<_>>().join(",");
                cron(&format!("{minute} {hours} * * {days}"))
            })
    }

    proptest! {
        /// Equal bounds differ in nothing, and no schedule fires more
        /// often than itself.
        #[test]
        fn equal_bounds_neither_widen_nor_narrow(schedule in arb_rate(), limits in proptest::array::uniform4(0u32..10_000)) {
            let s = spec(schedule.clone(), &["a"], limits, (1.0, 10.0));
            prop_assert!(compare(&s, &s).is_empty());
            prop_assert!(!fires_more_often(&schedule, &schedule));
        }

        /// A limit or budget widens exactly when it is raised; a change
        /// and its reverse are the same differences with `widens` flipped.
        #[test]
        fn raising_widens_and_lowering_narrows(
            a in proptest::array::uniform4(0u32..10_000),
            b in proptest::array::uniform4(0u32..10_000),
            run in (0u32..100, 0u32..100),
        ) {
            let daily = Schedule::Rate { every: 1, unit: RateUnit::Days };
            let old = spec(daily.clone(), &["a"], a, (f64::from(run.0), 100.0));
            let new = spec(daily, &["a"], b, (f64::from(run.1), 100.0));
            let forward = compare(&old, &new);
            let raised = a.iter().zip(&b).any(|(x, y)| y > x) || run.1 > run.0;
            prop_assert_eq!(forward.iter().any(|d| d.widens), raised);
            let backward = compare(&new, &old);
            prop_assert_eq!(forward.len(), backward.len());
            for (f, r) in forward.iter().zip(&backward) {
                prop_assert_eq!(&f.what, &r.what);
                prop_assert_eq!(f.widens, !r.widens);
            }
        }

        /// Tools widen exactly when the new set is not within the old one.
        #[test]
        fn tools_widen_when_one_is_added(old in proptest::collection::btree_set("[a-d]", 0..4), new in proptest::collection::btree_set("[a-d]", 0..4)) {
            let daily = Schedule::Rate { every: 1, unit: RateUnit::Days };
            let (o_tools, n_tools): (Vec<&str>, Vec<&str>) =
                (old.iter().map(String::as_str).collect(), new.iter().map(String::as_str).collect());
            let o = spec(daily.clone(), &o_tools, [1, 1, 1, 1], (1.0, 1.0));
            let n = spec(daily, &n_tools, [1, 1, 1, 1], (1.0, 1.0));
            prop_assert_eq!(compare(&o, &n).iter().any(|d| d.widens), !new.is_subset(&old));
        }

        /// A rate slowed down by a whole factor never fires more often; sped
        /// up, it does.
        #[test]
        fn a_slower_rate_narrows(every in 1u32..500, factor in 2u32..10) {
            let fast = Schedule::Rate { every, unit: RateUnit::Minutes };
            let slow = Schedule::Rate { every: every * factor, unit: RateUnit::Minutes };
            prop_assert!(!fires_more_often(&fast, &slow));
            prop_assert!(fires_more_often(&slow, &fast));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// A cron schedule never fires more often than itself; one more
        /// hour a day fires more often, one hour fewer does not.
        #[test]
        fn one_more_hour_a_day_fires_more_often(schedule in arb_cron()) {
            prop_assert!(!fires_more_often(&schedule, &schedule));
            let Schedule::Cron { cron: expression, .. } = &schedule else { unreachable!() };
            let parsed = Cron::parse(expression).unwrap();
            let spare = (0u8..24).find(|h| !parsed.hours.contains(h)).unwrap();
            let mut fields: Vec<String> = expression.split(' ').map(str::to_owned).collect();
            let wider = format!("{},{spare}", fields[1]);
            fields[1] = wider;
            let more = cron(&fields.join(" "));
            prop_assert!(fires_more_often(&schedule, &more));
            prop_assert!(!fires_more_often(&more, &schedule));
        }
    }
}
