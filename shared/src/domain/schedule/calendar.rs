//! A reminder's monthly or yearly rule (SPEC §11), as Scheduler's cron
//! names it: a day of the month (`15`, `31`), the month's last day (`L`),
//! the nth weekday (`2#1`: the first Monday) or the last one (`6L`: the
//! last Friday), in every month or in one month of the year, at a local
//! time. "On the 31st" fires in the months that have one; a yearly 29
//! February fires in leap years.
//!
//! Invariants: a rule is checked before it is stored ([`Calendar::check`]):
//! a day, month, weekday, nth, hour or minute out of range is refused, and
//! so is a yearly day no year has (30 February, 31 April); every checked
//! rule is exactly one Scheduler expression ([`Calendar::to_eventbridge`]),
//! which `schedule::preview` evaluates. Weekdays count from Monday = 0, as
//! the schedules surface does; Scheduler's day-of-week counts from
//! Sunday = 1. Called by `schedule` (the expression) and `recurrence` (the
//! owner's input and view).

use chrono::{Datelike, NaiveDate};
use serde::{Deserialize, Serialize};

/// Which day of a month a monthly or yearly rule fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MonthDay {
    /// This day of the month (1-31); a month without it has no run.
    Day(u8),
    /// The month's last day.
    Last,
    /// The `nth` (1-4) `weekday` (0 = Monday) of the month.
    Nth { weekday: u8, nth: u8 },
    /// The last `weekday` (0 = Monday) of the month.
    LastWeekday { weekday: u8 },
}

/// A monthly (`month: None`) or yearly rule at a local time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Calendar {
    /// `None`: every month; `Some(1..=12)`: that month of every year.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub month: Option<u8>,
    pub day: MonthDay,
    pub hour: u8,
    pub minute: u8,
}

/// The most days each month has (February: 29, in a leap year).
pub const MONTH_DAYS: [u8; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

/// Scheduler's day-of-week of a weekday counted from Monday = 0: Sunday = 1.
pub fn scheduler_weekday(weekday: u8) -> u8 {
    (weekday + 1) % 7 + 1
}

/// The number of days of a month.
pub fn days_in_month(year: i32, month: u32) -> u32 {
    let next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    };
    next.and_then(|n| n.pred_opt()).map_or(28, |d| d.day())
}

impl Calendar {
    /// Why the rule cannot be a schedule, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.hour > 23 || self.minute > 59 {
            return Err(format!("{:02}:{:02} is no time of day", self.hour, self.minute));
        }
        match self.day {
            MonthDay::Day(day) if !(1..=31).contains(&day) => return Err(format!("day {day} is not 1 to 31")),
            MonthDay::Nth { nth, .. } if !(1..=4).contains(&nth) => {
                return Err(format!("nth {nth} is not 1 to 4 (or `last`)"));
            }
            MonthDay::Nth { weekday, .. } | MonthDay::LastWeekday { weekday } if weekday > 6 => {
                return Err(format!("weekday {weekday} is not MON to SUN"));
            }
            _ => {}
        }
        if let Some(month) = self.month {
            if !(1..=12).contains(&month) {
                return Err(format!("month {month} is not 1 to 12"));
            }
            match self.day {
                MonthDay::Day(day) if day > MONTH_DAYS[usize::from(month - 1)] => {
                    return Err(format!(
                        "month {month} never has a day {day}: this reminder would never run"
                    ));
                }
                MonthDay::Day(_) => {}
                _ => return Err("a yearly reminder is on a day of its month (1-31)".to_owned()),
            }
        }
        Ok(())
    }

    /// The Scheduler expression: `cron(min hour dom month dow *)`, with `?`
    /// in the day field the rule does not use, `L` for the last day, `D#n`
    /// for the nth weekday and `DL` for the last one.
    pub fn to_eventbridge(&self) -> String {
        let (dom, dow) = match self.day {
            MonthDay::Day(day) => (day.to_string(), "?".to_owned()),
            MonthDay::Last => ("L".to_owned(), "?".to_owned()),
            MonthDay::Nth { weekday, nth } => ("?".to_owned(), format!("{}#{nth}", scheduler_weekday(weekday))),
            MonthDay::LastWeekday { weekday } => ("?".to_owned(), format!("{}L", scheduler_weekday(weekday))),
        };
        let month = self.month.map_or_else(|| "*".to_owned(), |m| m.to_string());
        format!("cron({} {} {dom} {month} {dow} *)", self.minute, self.hour)
    }
}

const DAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const ORDINALS: [&str; 4] = ["first", "second", "third", "fourth"];

/// A weekday's name, Monday 0 to Sunday 6 (clamped): the one spelling every
/// schedule in words uses.
pub(in crate::domain) fn weekday_name(weekday: u8) -> &'static str {
    DAY_NAMES[usize::from(weekday).min(6)]
}

/// A month's name, 1 to 12 (clamped).
pub(in crate::domain) fn month_name(month: u8) -> &'static str {
    MONTH_NAMES[usize::from(month.clamp(1, 12) - 1)]
}

/// "first" to "fourth", for 1 to 4 (clamped).
pub(in crate::domain) fn ordinal(nth: u8) -> &'static str {
    ORDINALS[usize::from(nth.clamp(1, 4) - 1)]
}

impl Calendar {
    /// When it fires, in words ("at 09:00, on the first Monday of every
    /// month"), a 24-hour local time; a day some months lack is said to be
    /// skipped there.
    pub fn in_words(&self) -> String {
        let at = format!("at {:02}:{:02}", self.hour, self.minute);
        match (self.month, self.day) {
            (Some(month), MonthDay::Day(day)) => {
                let name = month_name(month);
                let leap = if month == 2 && day == 29 {
                    " (leap years only)"
                } else {
                    ""
                };
                format!("{at}, every year on {day} {name}{leap}")
            }
            (_, MonthDay::Day(day)) if day >= 29 => {
                format!("{at}, on day {day} of every month (skipped in the months without one)")
            }
            (_, MonthDay::Day(day)) => format!("{at}, on day {day} of every month"),
            (_, MonthDay::Last) => format!("{at}, on the last day of every month"),
            (_, MonthDay::Nth { weekday: w, nth }) => {
                format!("{at}, on the {} {} of every month", ordinal(nth), weekday_name(w))
            }
            (_, MonthDay::LastWeekday { weekday: w }) => {
                format!("{at}, on the last {} of every month", weekday_name(w))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn monthly(day: MonthDay) -> Calendar {
        Calendar {
            month: None,
            day,
            hour: 9,
            minute: 5,
        }
    }

    #[test]
    fn each_rule_is_one_scheduler_expression() {
        let cases = [
            (monthly(MonthDay::Day(31)), "cron(5 9 31 * ? *)"),
            (monthly(MonthDay::Last), "cron(5 9 L * ? *)"),
            (monthly(MonthDay::Nth { weekday: 0, nth: 1 }), "cron(5 9 ? * 2#1 *)"),
            (monthly(MonthDay::Nth { weekday: 6, nth: 4 }), "cron(5 9 ? * 1#4 *)"),
            (monthly(MonthDay::LastWeekday { weekday: 4 }), "cron(5 9 ? * 6L *)"),
            (
                Calendar {
                    month: Some(2),
                    ..monthly(MonthDay::Day(29))
                },
                "cron(5 9 29 2 ? *)",
            ),
        ];
        for (rule, want) in cases {
            assert_eq!(rule.check(), Ok(()), "{rule:?}");
            assert_eq!(rule.to_eventbridge(), want);
        }
        assert_eq!(
            monthly(MonthDay::Nth { weekday: 0, nth: 1 }).in_words(),
            "at 09:05, on the first Monday of every month"
        );
        assert_eq!(
            Calendar {
                month: Some(2),
                ..monthly(MonthDay::Day(29))
            }
            .in_words(),
            "at 09:05, every year on 29 February (leap years only)"
        );
        assert_eq!(
            (0..7).map(scheduler_weekday).collect::<Vec<_>>(),
            vec![2, 3, 4, 5, 6, 7, 1],
            "MON..SUN as Scheduler numbers them"
        );
    }

    #[test]
    fn a_rule_that_cannot_fire_or_is_out_of_range_is_refused() {
        let yearly = |month, day| Calendar {
            month: Some(month),
            ..monthly(MonthDay::Day(day))
        };
        for bad in [
            yearly(2, 30),
            yearly(2, 31),
            yearly(4, 31),
            yearly(6, 31),
            yearly(9, 31),
            yearly(11, 31),
            yearly(13, 1),
            yearly(0, 1),
            monthly(MonthDay::Day(0)),
            monthly(MonthDay::Day(32)),
            monthly(MonthDay::Nth { weekday: 0, nth: 5 }),
            monthly(MonthDay::Nth { weekday: 0, nth: 0 }),
            monthly(MonthDay::Nth { weekday: 7, nth: 1 }),
            monthly(MonthDay::LastWeekday { weekday: 7 }),
            Calendar {
                hour: 24,
                ..monthly(MonthDay::Last)
            },
            Calendar {
                month: Some(1),
                ..monthly(MonthDay::Last)
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
        assert_eq!(yearly(2, 29).check(), Ok(()));
        assert_eq!(yearly(12, 31).check(), Ok(()));
        assert_eq!(days_in_month(2028, 2), 29);
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2027, 12), 31);
    }
}
