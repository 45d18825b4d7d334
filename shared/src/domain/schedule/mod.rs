//! When a task fires: a one-time instant, a cron in an IANA time zone, or a
//! fixed rate, and the exact instants a caller may give.
//!
//! Invariants: a one-time instant is always held in UTC, to the whole second,
//! and was given with an explicit offset; nothing here guesses a zone. The
//! EventBridge Scheduler expression of a one-time schedule is `at(...)` in UTC.
//! A recurring reminder may end on a local date (`until`, inclusive, in its
//! zone): its expression then carries Scheduler's `EndDate`, the first
//! instant of the day after, and nothing fires at or after it.
//! Called by `reminder` (create) and by the Scheduler adapter.

use std::str::FromStr;

use crate::domain::schedule::zone::Zone;
use chrono::{
    DateTime, Datelike, Duration, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, SecondsFormat, TimeZone,
    Timelike, Utc,
};
use serde::{Deserialize, Serialize};

pub mod calendar;
pub mod cron;
pub mod preview;
pub mod recurrence;
pub mod zone;

use calendar::Calendar;

/// How far ahead a one-time instant may lie (SPEC §4 rule 3).
pub const MAX_DAYS_AHEAD: i64 = 366;

/// The approved schedule of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Schedule {
    /// Fires once, at this instant (UTC, whole seconds).
    At { at: DateTime<Utc> },
    /// A 5-field Unix cron read in an IANA time zone, as a connector
    /// declares it (or a daily or weekly reminder's canonical one), until a
    /// local date when one is set (reminders only).
    Cron {
        cron: String,
        timezone: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<NaiveDate>,
    },
    /// Every `every` units.
    Rate { every: u32, unit: RateUnit },
    /// A reminder's monthly or yearly rule (`schedule::calendar`) in an
    /// IANA time zone, until a local date when one is set.
    Calendar {
        calendar: Calendar,
        timezone: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until: Option<NaiveDate>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RateUnit {
    Minutes,
    Hours,
    Days,
}

/// A schedule as EventBridge Scheduler takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expression {
    pub expression: String,
    pub timezone: String,
    /// Scheduler's `EndDate`: nothing fires at or after it.
    pub end_date: Option<DateTime<Utc>>,
}

impl Expression {
    /// An expression with no end.
    pub fn new(expression: impl Into<String>, timezone: impl Into<String>) -> Self {
        Self {
            expression: expression.into(),
            timezone: timezone.into(),
            end_date: None,
        }
    }
}

/// The first instant of the day after `until` in `timezone`: Scheduler's
/// `EndDate` for a schedule that runs until that local date, inclusive. A
/// midnight that DST skips starts the day at the first local time that
/// exists; one that happens twice, at the first.
pub fn end_of_local_day(until: NaiveDate, timezone: &str) -> DateTime<Utc> {
    let zone = Zone::from_str(timezone).unwrap_or(Zone::utc());
    let next = until.succ_opt().unwrap_or(until);
    (0..=24 * 60)
        .find_map(|minute| {
            let local = next.and_hms_opt(0, 0, 0)? + Duration::minutes(minute);
            match zone.from_local_datetime(&local) {
                LocalResult::Single(t) | LocalResult::Ambiguous(t, _) => Some(t.with_timezone(&Utc)),
                LocalResult::None => None,
            }
        })
        .unwrap_or_else(|| next.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc())
}

impl Schedule {
    pub fn is_one_time(&self) -> bool {
        matches!(self, Schedule::At { .. })
    }

    /// The zone its times are read in (UTC for a one-time instant or a rate).
    pub fn timezone(&self) -> &str {
        match self {
            Schedule::Cron { timezone, .. } | Schedule::Calendar { timezone, .. } => timezone,
            Schedule::At { .. } | Schedule::Rate { .. } => "UTC",
        }
    }

    /// The local date a recurring reminder runs until, inclusive.
    pub fn until(&self) -> Option<NaiveDate> {
        match self {
            Schedule::Cron { until, .. } | Schedule::Calendar { until, .. } => *until,
            Schedule::At { .. } | Schedule::Rate { .. } => None,
        }
    }

    /// Scheduler's `EndDate` of a schedule with an `until`.
    pub fn end_date(&self) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Cron {
                timezone,
                until: Some(until),
                ..
            }
            | Schedule::Calendar {
                timezone,
                until: Some(until),
                ..
            } => Some(end_of_local_day(*until, timezone)),
            _ => None,
        }
    }

    /// Whether the schedule has an end: a one-time instant or an `until`.
    pub fn ends(&self) -> bool {
        self.is_one_time() || self.until().is_some()
    }

    /// Whether it fires no more after `now`: a one-time instant that
    /// passed, or a schedule whose `until` leaves no fire after `now`.
    pub fn is_over(&self, now: DateTime<Utc>) -> bool {
        match self {
            Schedule::At { at } => *at <= now,
            other if other.until().is_some() => matches!(preview::next_fire(other, now), Ok(None)),
            _ => false,
        }
    }

    /// The EventBridge Scheduler expression and zone this schedule runs on.
    pub fn expression(&self) -> Result<Expression, cron::CronError> {
        Ok(match self {
            Schedule::At { at } => at_expression(*at),
            Schedule::Cron { cron, timezone, .. } => Expression {
                expression: cron::Cron::parse(cron)?.to_eventbridge(),
                timezone: timezone.clone(),
                end_date: self.end_date(),
            },
            Schedule::Calendar { calendar, timezone, .. } => Expression {
                expression: calendar.to_eventbridge(),
                timezone: timezone.clone(),
                end_date: self.end_date(),
            },
            Schedule::Rate { every, unit } => {
                let unit = match (unit, *every == 1) {
                    (RateUnit::Minutes, true) => "minute",
                    (RateUnit::Minutes, false) => "minutes",
                    (RateUnit::Hours, true) => "hour",
                    (RateUnit::Hours, false) => "hours",
                    (RateUnit::Days, true) => "day",
                    (RateUnit::Days, false) => "days",
                };
                Expression::new(format!("rate({every} {unit})"), "UTC")
            }
        })
    }
}

impl Schedule {
    /// When it fires, in words: "once at <UTC>", a cron's times and days
    /// in its zone (`cron::Cron::in_words`), a reminder's monthly or yearly
    /// rule (`calendar::Calendar::in_words`), "every 2 hours"; with the
    /// last day it runs when it has an `until`.
    pub fn in_words(&self) -> String {
        let until = self
            .until()
            .map(|u| format!(", until {}", u.format("%Y-%m-%d")))
            .unwrap_or_default();
        match self {
            Schedule::At { at } => format!("once, at {}", format_utc(*at)),
            Schedule::Cron { cron, timezone, .. } => match cron::Cron::parse(cron) {
                Ok(parsed) => format!("{} ({timezone}){until}", parsed.in_words()),
                Err(e) => format!("`{cron}` in {timezone}, which does not convert: {e}"),
            },
            Schedule::Calendar { calendar, timezone, .. } => format!("{} ({timezone}){until}", calendar.in_words()),
            Schedule::Rate { every: 1, unit } => match unit {
                RateUnit::Minutes => "every minute".to_owned(),
                RateUnit::Hours => "every hour".to_owned(),
                RateUnit::Days => "every day".to_owned(),
            },
            Schedule::Rate { every, unit } => format!("every {every} {unit:?}").to_lowercase(),
        }
    }
}

/// The Scheduler expression of a one-time schedule: `at(yyyy-mm-ddThh:mm:ss)`
/// read in UTC.
pub fn at_expression(at: DateTime<Utc>) -> Expression {
    Expression::new(format!("at({})", at.format("%Y-%m-%dT%H:%M:%S")), "UTC")
}

/// Formats an instant the way every response and key of the system does:
/// RFC 3339, UTC, `Z`, whole seconds.
pub fn format_utc(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Why a given instant is refused. Each maps to one error code of SPEC §4.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InstantError {
    #[error("`{0}` has no UTC offset: give an instant with `Z` or `±hh:mm`")]
    Naive(String),
    #[error("`{0}` is not an RFC 3339 / ISO 8601 instant with an offset")]
    Invalid(String),
    #[error("{at} is not after now ({now})")]
    InPast { at: String, now: String },
    #[error("{at} is more than {MAX_DAYS_AHEAD} days ahead")]
    TooFar { at: String },
}

/// Offset forms accepted besides RFC 3339 itself: ISO 8601 without seconds,
/// and basic offsets (`+0100`).
const OFFSET_FORMATS: [&str; 4] = [
    "%Y-%m-%dT%H:%M%:z",
    "%Y-%m-%dT%H:%M%z",
    "%Y-%m-%dT%H:%M:%S%.f%z",
    "%Y-%m-%d %H:%M%:z",
];

/// Forms of a date and time with no offset: refused as naive, not as garbage,
/// so the model knows to ask for the zone rather than to rephrase.
const NAIVE_FORMATS: [&str; 4] = [
    "%Y-%m-%dT%H:%M:%S%.f",
    "%Y-%m-%dT%H:%M",
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%d %H:%M",
];

/// RFC 3339 and ISO 8601's extended form write the year in four digits.
/// chrono's `%Y` also reads signed and shorter years (`-026-12-24`), which
/// no caller means and which the instant's own rendering does not read back.
fn has_four_digit_year(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() > 4 && bytes[..4].iter().all(u8::is_ascii_digit) && bytes[4] == b'-'
}

fn parse_with_offset(text: &str) -> Option<DateTime<FixedOffset>> {
    if !has_four_digit_year(text) {
        return None;
    }
    DateTime::parse_from_rfc3339(text).ok().or_else(|| {
        OFFSET_FORMATS
            .iter()
            .find_map(|f| DateTime::parse_from_str(text, f).ok())
    })
}

fn is_naive(text: &str) -> bool {
    has_four_digit_year(text)
        && (NAIVE_FORMATS
            .iter()
            .any(|f| NaiveDateTime::parse_from_str(text, f).is_ok())
            || NaiveDate::parse_from_str(text, "%Y-%m-%d").is_ok())
}

/// Parses an instant that carries an offset; `None` for anything else,
/// and for an instant whose UTC year RFC 3339 cannot write (before 0000 or
/// after 9999: `0000-01-01T09:00+20:30` is in year -1 in UTC).
pub fn parse_instant(text: &str) -> Option<DateTime<Utc>> {
    parse_with_offset(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| (0..=9999).contains(&t.year()))
}

/// Parses one exact instant with an offset, telling a naive date-time (the
/// caller must ask for the zone) from text that is no instant at all.
pub fn parse_instant_or_refuse(text: &str) -> Result<DateTime<Utc>, InstantError> {
    parse_instant(text).ok_or_else(|| {
        if is_naive(text.trim()) {
            InstantError::Naive(text.to_owned())
        } else {
            InstantError::Invalid(text.to_owned())
        }
    })
}

/// Checks that a one-time instant lies after `now` and at most
/// [`MAX_DAYS_AHEAD`] days ahead, and brings it to a whole second.
///
/// A sub-second instant is rounded up to the next whole second: Scheduler
/// fires on whole seconds, and a reminder must never fire early.
pub fn check_window(exact: DateTime<Utc>, now: DateTime<Utc>) -> Result<DateTime<Utc>, InstantError> {
    if exact <= now {
        return Err(InstantError::InPast {
            at: format_utc(exact),
            now: format_utc(now),
        });
    }
    if exact > now + Duration::days(MAX_DAYS_AHEAD) {
        return Err(InstantError::TooFar { at: format_utc(exact) });
    }
    let whole = exact.with_nanosecond(0).unwrap_or(exact);
    Ok(if whole < exact {
        whole + Duration::seconds(1)
    } else {
        whole
    })
}

/// Parses and window-checks a one-time instant, as create accepts it.
pub fn parse_future_instant(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, InstantError> {
    check_window(parse_instant_or_refuse(text)?, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
    }

    /// Found by the `instant` fuzz target: an offset can carry an instant
    /// written in year 0000 (or 9999) out of the years RFC 3339 writes, and
    /// its rendering would not read back.
    #[test]
    fn an_instant_outside_the_years_rfc_3339_writes_is_not_an_instant() {
        for text in [
            "0000-1-1T9:0+2030",
            "0000-01-01T09:00:00+20:30",
            "9999-12-31T23:00:00-02:00",
        ] {
            assert_eq!(parse_instant(text), None, "{text}");
            assert!(
                matches!(parse_instant_or_refuse(text), Err(InstantError::Invalid(_))),
                "{text}"
            );
        }
        let first = parse_instant("0000-01-01T09:00:00+09:00").unwrap();
        assert_eq!(parse_instant(&first.to_rfc3339()), Some(first));
        assert!(parse_instant("9999-12-31T23:00:00+01:00").is_some());
    }

    #[test]
    fn accepted_forms_resolve_to_the_same_instant() {
        let want = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        for text in [
            "2026-12-24T19:00:00+01:00",
            "2026-12-24T18:00:00Z",
            "2026-12-24T18:00:00z",
            "2026-12-24t18:00:00Z",
            "2026-12-24 18:00:00Z",
            "2026-12-24T13:00:00-05:00",
            "2026-12-24T19:00+01:00",
            "2026-12-24T19:00:00+0100",
            " 2026-12-24T18:00:00Z ",
        ] {
            assert_eq!(parse_future_instant(text, now()), Ok(want), "{text}");
        }
    }

    #[test]
    fn refusals_carry_the_right_reason() {
        let naive = [
            "2026-12-24T19:00:00",
            "2026-12-24T19:00",
            "2026-12-24 19:00:00.5",
            "2026-12-24",
        ];
        for text in naive {
            assert!(
                matches!(parse_future_instant(text, now()), Err(InstantError::Naive(_))),
                "{text}"
            );
        }
        let invalid = [
            "",
            "tomorrow at 7pm",
            "2026-13-24T19:00:00Z",
            "2026-12-24T25:00:00Z",
            "1735066800",
            "19:00+01:00",
            "2026-02-30T10:00:00Z",
            // Found by the `instant` fuzz target: `%Y` read a signed,
            // three-digit year, whose UTC rendering did not parse back.
            "-026-12-24T18:00+0101",
            "+2026-12-24T18:00:00Z",
            "02026-12-24T18:00:00Z",
            "226-12-24T18:00+01:00",
            "-026-12-24T18:00",
        ];
        for text in invalid {
            assert!(
                matches!(parse_future_instant(text, now()), Err(InstantError::Invalid(_))),
                "{text}"
            );
        }
        for text in [
            "2026-11-30T10:00:00Z",
            "2026-11-30T09:59:59Z",
            "2020-01-01T00:00:00+02:00",
        ] {
            assert!(
                matches!(parse_future_instant(text, now()), Err(InstantError::InPast { .. })),
                "{text}"
            );
        }
        assert!(matches!(
            parse_future_instant("2027-12-02T10:00:01Z", now()),
            Err(InstantError::TooFar { .. })
        ));
        assert!(
            parse_future_instant("2027-12-01T10:00:00Z", now()).is_ok(),
            "366 days ahead is allowed"
        );
    }

    #[test]
    fn sub_second_instants_round_up_never_early() {
        let got = parse_future_instant("2026-12-24T18:00:00.001Z", now()).unwrap();
        assert_eq!(got, Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 1).unwrap());
        // A leap second (chrono reads `:60` at any minute) fires at the
        // second after it, never at the one before.
        let got = parse_future_instant("2026-12-24T18:00:60.021Z", now()).unwrap();
        assert_eq!(got, Utc.with_ymd_and_hms(2026, 12, 24, 18, 1, 0).unwrap());
    }

    #[test]
    fn an_until_ends_at_the_first_instant_of_the_next_local_day() {
        let date = |y, m, d| NaiveDate::from_ymd_opt(y, m, d).unwrap();
        assert_eq!(
            end_of_local_day(date(2027, 1, 31), "Europe/Berlin"),
            Utc.with_ymd_and_hms(2027, 1, 31, 23, 0, 0).unwrap()
        );
        assert_eq!(
            end_of_local_day(date(2027, 6, 30), "America/New_York"),
            Utc.with_ymd_and_hms(2027, 7, 1, 4, 0, 0).unwrap()
        );
        // Santiago springs forward at midnight on 2026-09-06: the day starts
        // at 01:00 (-03), the instant midnight (-04) would have been.
        assert_eq!(
            end_of_local_day(date(2026, 9, 5), "America/Santiago"),
            Utc.with_ymd_and_hms(2026, 9, 6, 4, 0, 0).unwrap()
        );
        // Santiago falls back at midnight on 2026-04-05 (23:00 to 24:00 of
        // the 4th happens twice): the 5th starts once, at 00:00 (-04).
        assert_eq!(
            end_of_local_day(date(2026, 4, 4), "America/Santiago"),
            Utc.with_ymd_and_hms(2026, 4, 5, 4, 0, 0).unwrap()
        );
        let daily = Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: Some(date(2027, 1, 31)),
        };
        assert!(daily.ends() && !daily.is_one_time());
        assert!(daily.is_over(Utc.with_ymd_and_hms(2027, 1, 31, 9, 0, 0).unwrap()));
        assert!(!daily.is_over(Utc.with_ymd_and_hms(2027, 1, 31, 8, 59, 0).unwrap()));
    }

    #[test]
    fn at_expression_is_utc_whole_seconds() {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        assert_eq!(at_expression(at), Expression::new("at(2026-12-24T18:00:00)", "UTC"));
        assert_eq!(format_utc(at), "2026-12-24T18:00:00Z");
    }

    proptest! {
        /// Any instant in the window, written with any whole-minute offset,
        /// parses back to itself.
        #[test]
        fn offset_instants_round_trip(secs in 1i64..(366 * 86_400), offset_min in -840i32..=840) {
            let at = now() + Duration::seconds(secs);
            let offset = FixedOffset::east_opt(offset_min * 60).unwrap();
            let text = at.with_timezone(&offset).to_rfc3339();
            prop_assert_eq!(parse_future_instant(&text, now()), Ok(at));
        }

        /// The same instant without its offset is always refused as naive.
        #[test]
        fn dropping_the_offset_makes_it_naive(secs in 1i64..(366 * 86_400)) {
            let at = now() + Duration::seconds(secs);
            let text = at.format("%Y-%m-%dT%H:%M:%S").to_string();
            prop_assert!(matches!(parse_future_instant(&text, now()), Err(InstantError::Naive(_))));
        }

        /// Whatever the text, parsing answers; an accepted instant is in the
        /// window and on a whole second.
        #[test]
        fn arbitrary_text_never_panics(text in "\\PC{0,40}") {
            if let Ok(at) = parse_future_instant(&text, now()) {
                prop_assert!(at > now());
                prop_assert!(at <= now() + Duration::days(MAX_DAYS_AHEAD) + Duration::seconds(1));
                prop_assert_eq!(at.nanosecond(), 0);
            }
        }
    }

    #[test]
    fn every_kind_of_schedule_reads_as_words() {
        let at = DateTime::parse_from_rfc3339("2026-12-24T18:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(Schedule::At { at }.in_words(), "once, at 2026-12-24T18:00:00Z");
        let cron = Schedule::Cron {
            cron: "0 9 * * MON-FRI".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        assert_eq!(cron.in_words(), "at 09:00, on Monday to Friday (Europe/Berlin)");
        let hourly = Schedule::Rate {
            every: 1,
            unit: RateUnit::Hours,
        };
        assert_eq!(hourly.in_words(), "every hour");
        let five = Schedule::Rate {
            every: 5,
            unit: RateUnit::Minutes,
        };
        assert_eq!(five.in_words(), "every 5 minutes");
    }
}
