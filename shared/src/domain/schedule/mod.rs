//! When a task fires: a one-time instant, a cron in an IANA time zone, or a
//! fixed rate, and the exact instants a caller may give.
//!
//! Invariants: a one-time instant is always held in UTC, to the whole second,
//! and was given with an explicit offset; nothing here guesses a zone. The
//! EventBridge Scheduler expression of a one-time schedule is `at(...)` in UTC.
//! Called by `reminder` (create) and by the Scheduler adapter.

use chrono::{DateTime, Datelike, Duration, FixedOffset, NaiveDate, NaiveDateTime, SecondsFormat, Timelike, Utc};
use serde::{Deserialize, Serialize};

pub mod cron;
pub mod preview;

/// How far ahead a one-time instant may lie (SPEC §4 rule 3).
pub const MAX_DAYS_AHEAD: i64 = 366;

/// The approved schedule of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Schedule {
    /// Fires once, at this instant (UTC, whole seconds).
    At { at: DateTime<Utc> },
    /// A 5-field Unix cron read in an IANA time zone, as a connector declares it.
    Cron { cron: String, timezone: String },
    /// Every `every` units.
    Rate { every: u32, unit: RateUnit },
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
}

impl Schedule {
    pub fn is_one_time(&self) -> bool {
        matches!(self, Schedule::At { .. })
    }

    /// The EventBridge Scheduler expression and zone this schedule runs on.
    pub fn expression(&self) -> Result<Expression, cron::CronError> {
        Ok(match self {
            Schedule::At { at } => at_expression(*at),
            Schedule::Cron { cron, timezone } => Expression {
                expression: cron::Cron::parse(cron)?.to_eventbridge(),
                timezone: timezone.clone(),
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
                Expression {
                    expression: format!("rate({every} {unit})"),
                    timezone: "UTC".to_owned(),
                }
            }
        })
    }
}

impl Schedule {
    /// When it fires, in words: "once at <UTC>", a cron's times and days
    /// in its zone (`cron::Cron::in_words`), "every 2 hours".
    pub fn in_words(&self) -> String {
        match self {
            Schedule::At { at } => format!("once, at {}", format_utc(*at)),
            Schedule::Cron { cron, timezone } => match cron::Cron::parse(cron) {
                Ok(parsed) => format!("{} ({timezone})", parsed.in_words()),
                Err(e) => format!("`{cron}` in {timezone}, which does not convert: {e}"),
            },
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
    Expression {
        expression: format!("at({})", at.format("%Y-%m-%dT%H:%M:%S")),
        timezone: "UTC".to_owned(),
    }
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
    fn at_expression_is_utc_whole_seconds() {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        assert_eq!(
            at_expression(at),
            Expression {
                expression: "at(2026-12-24T18:00:00)".into(),
                timezone: "UTC".into()
            }
        );
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
