//! A recurring reminder (SPEC §11): `daily` at a local time, `weekly` on
//! some days, `monthly` on a day of the month (a number or the last) or on
//! the nth or last weekday, or `yearly` on a day of a month, in an IANA
//! zone, until a local date when one is given. "Every day at 7pm in
//! Berlin", "the first Monday of every month", "every 29 February".
//!
//! Invariants: a daily or weekly recurrence is stored as the task's
//! `Schedule::Cron` with a canonical Unix cron (`M H * * *`, or
//! `M H * * d,d` with 0 = Sunday) in its zone, a monthly or yearly one as
//! `Schedule::Calendar`, each with its `until`; so the Scheduler expression
//! (one per kind, `L`, `#` and `EndDate` included), the fire-time preview
//! and Scheduler's DST rule are those of `schedule` (one evaluator, not
//! two); and it reads back from that schedule exactly ([`Recurrence::of`]).
//! A local time that a DST change skips or repeats, and a month that lacks
//! the day (the 31st in April, 29 February outside leap years), are found
//! by the same preview and said in words. Called by `reminder` (create and
//! update) and the schedules use case.

use std::collections::BTreeSet;
use std::str::FromStr;

use crate::domain::schedule::zone::Zone;
use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{Value, json};

use crate::domain::schedule::Schedule;
use crate::domain::schedule::calendar::{self, Calendar, MonthDay, month_name, weekday_name};
use crate::domain::schedule::preview::{dst_changes, missing_day};

/// Days as the schedules surface spells them, Monday first.
pub const DAYS: [&str; 7] = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];

/// Which days a recurrence fires on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Daily,
    /// Indexes into [`DAYS`] (0 = Monday).
    Weekly(BTreeSet<u8>),
    Monthly(MonthDay),
    /// A day of one month, every year.
    Yearly {
        month: u8,
        day: u8,
    },
}

/// A recurrence: which days, the local time, the zone, and the last local
/// date it runs on, inclusive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recurrence {
    pub rule: Rule,
    pub hour: u8,
    pub minute: u8,
    pub timezone: String,
    pub until: Option<NaiveDate>,
}

/// Why a `daily`, `weekly`, `monthly`, `yearly` or `until` value is
/// refused (`invalid_schedule`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RecurrenceError(pub String);

fn refuse<T>(message: impl Into<String>) -> Result<T, RecurrenceError> {
    Err(RecurrenceError(message.into()))
}

/// `HH:MM`, two digits each, 00:00 to 23:59.
fn parse_time(text: &str) -> Result<(u8, u8), RecurrenceError> {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        bytes[range.clone()]
            .iter()
            .all(u8::is_ascii_digit)
            .then(|| text[range].parse::<u8>().ok())
            .flatten()
    };
    if bytes.len() == 5
        && bytes[2] == b':'
        && let (Some(h), Some(m)) = (digits(0..2), digits(3..5))
        && h < 24
        && m < 60
    {
        return Ok((h, m));
    }
    refuse(format!("time `{text}` is not a local time `HH:MM` (00:00 to 23:59)"))
}

fn parse_zone(text: &str) -> Result<String, RecurrenceError> {
    match Zone::from_str(text) {
        Ok(_) if !text.is_empty() => Ok(text.to_owned()),
        _ => refuse(format!(
            "timezone `{text}` is not an IANA time zone (e.g. `Europe/Berlin`)"
        )),
    }
}

/// The latest `until`: Scheduler refuses an end date far out (a
/// `9999-12-31` would fail create and update as an internal error, which a
/// caller retries forever), and no reminder needs one past this century.
pub const LATEST_UNTIL: (i32, u32, u32) = (2099, 12, 31);

/// `YYYY-MM-DD`, a date that exists, at most [`LATEST_UNTIL`]: the last
/// local day a recurring reminder runs on.
pub fn parse_until(value: &Value) -> Result<NaiveDate, RecurrenceError> {
    let text = value.as_str().unwrap_or_default();
    let bytes = text.as_bytes();
    let shaped = bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes
            .iter()
            .enumerate()
            .all(|(i, b)| i == 4 || i == 7 || b.is_ascii_digit());
    let (y, m, d) = LATEST_UNTIL;
    let latest = NaiveDate::from_ymd_opt(y, m, d).unwrap_or(NaiveDate::MAX);
    match NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        Ok(date) if shaped && date > latest => {
            refuse(format!("until `{text}` is after {latest}, the latest it may be"))
        }
        Ok(date) if shaped => Ok(date),
        _ => refuse(format!(
            "until `{}` is not a local date `YYYY-MM-DD`",
            value.as_str().map_or_else(|| value.to_string(), str::to_owned)
        )),
    }
}

fn object<'a>(
    value: &'a Value,
    what: &str,
    allowed: &[&str],
) -> Result<&'a serde_json::Map<String, Value>, RecurrenceError> {
    let Some(map) = value.as_object() else {
        return refuse(format!("`{what}` must be an object"));
    };
    if let Some(unknown) = map.keys().find(|k| !allowed.contains(&k.as_str())) {
        return refuse(format!("`{what}` has no field `{unknown}`"));
    }
    Ok(map)
}

fn text_field<'a>(map: &'a serde_json::Map<String, Value>, what: &str, name: &str) -> Result<&'a str, RecurrenceError> {
    match map.get(name).and_then(Value::as_str) {
        Some(text) => Ok(text),
        None => refuse(format!("`{what}.{name}` must be a string")),
    }
}

/// A whole number in `range`, or `last` where `last` is allowed.
fn ordinal(
    map: &serde_json::Map<String, Value>,
    what: &str,
    name: &str,
    range: std::ops::RangeInclusive<u8>,
    last: bool,
) -> Result<Option<u8>, RecurrenceError> {
    match map.get(name) {
        Some(Value::String(text)) if last && text == "last" => Ok(None),
        Some(value) => match value.as_u64().and_then(|n| u8::try_from(n).ok()) {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => refuse(format!(
                "`{what}.{name}` must be {} to {}{}",
                range.start(),
                range.end(),
                if last { " or \"last\"" } else { "" }
            )),
        },
        None => refuse(format!("`{what}.{name}` is missing")),
    }
}

fn weekday(map: &serde_json::Map<String, Value>, what: &str) -> Result<u8, RecurrenceError> {
    let day = map.get("weekday").and_then(Value::as_str).unwrap_or_default();
    match DAYS.iter().position(|d| *d == day) {
        Some(index) => Ok(index as u8),
        None => refuse(format!("`{what}.weekday` must be one of {}", DAYS.join(", "))),
    }
}

impl Recurrence {
    fn at(rule: Rule, map: &serde_json::Map<String, Value>, what: &str) -> Result<Self, RecurrenceError> {
        let (hour, minute) = parse_time(text_field(map, what, "time")?)?;
        let timezone = parse_zone(text_field(map, what, "timezone")?)?;
        Ok(Self {
            rule,
            hour,
            minute,
            timezone,
            until: None,
        })
    }

    /// `{"time": "HH:MM", "timezone": "<IANA>"}`.
    pub fn daily(value: &Value) -> Result<Self, RecurrenceError> {
        let map = object(value, "daily", &["time", "timezone"])?;
        Self::at(Rule::Daily, map, "daily")
    }

    /// `{"days": ["MON", ...], "time": "HH:MM", "timezone": "<IANA>"}`: days
    /// from MON..SUN, each at most once, at least one.
    pub fn weekly(value: &Value) -> Result<Self, RecurrenceError> {
        let map = object(value, "weekly", &["days", "time", "timezone"])?;
        let Some(list) = map.get("days").and_then(Value::as_array) else {
            return refuse("`weekly.days` must be a list of days, MON to SUN");
        };
        if list.is_empty() {
            return refuse("`weekly.days` must name at least one day");
        }
        let mut days = BTreeSet::new();
        for day in list {
            let Some(index) = day.as_str().and_then(|d| DAYS.iter().position(|n| *n == d)) else {
                return refuse(format!("`{day}` is not one of {}", DAYS.join(", ")));
            };
            if !days.insert(index as u8) {
                return refuse(format!("{day} is named twice in `weekly.days`"));
            }
        }
        Self::at(Rule::Weekly(days), map, "weekly")
    }

    /// `{"day": 1-31 | "last", "time", "timezone"}` or `{"weekday":
    /// "MON".."SUN", "nth": 1-4 | "last", "time", "timezone"}`.
    pub fn monthly(value: &Value) -> Result<Self, RecurrenceError> {
        let map = object(value, "monthly", &["day", "weekday", "nth", "time", "timezone"])?;
        let day = match (
            map.contains_key("day"),
            map.contains_key("weekday") || map.contains_key("nth"),
        ) {
            (true, false) => match ordinal(map, "monthly", "day", 1..=31, true)? {
                Some(day) => MonthDay::Day(day),
                None => MonthDay::Last,
            },
            (false, true) => {
                let weekday = weekday(map, "monthly")?;
                match ordinal(map, "monthly", "nth", 1..=4, true)? {
                    Some(nth) => MonthDay::Nth { weekday, nth },
                    None => MonthDay::LastWeekday { weekday },
                }
            }
            _ => return refuse("`monthly` takes either `day`, or `weekday` with `nth`"),
        };
        Self::at(Rule::Monthly(day), map, "monthly")
    }

    /// `{"month": 1-12, "day": 1-31, "time", "timezone"}`: a day the month
    /// has in some year (29 February is; 31 April is not).
    pub fn yearly(value: &Value) -> Result<Self, RecurrenceError> {
        let map = object(value, "yearly", &["month", "day", "time", "timezone"])?;
        let month = ordinal(map, "yearly", "month", 1..=12, false)?.unwrap_or(1);
        let day = ordinal(map, "yearly", "day", 1..=31, false)?.unwrap_or(1);
        let recurrence = Self::at(Rule::Yearly { month, day }, map, "yearly")?;
        if let Err(why) = recurrence.calendar().map_or(Ok(()), |c| c.check()) {
            return refuse(format!("`yearly`: {why}"));
        }
        Ok(recurrence)
    }

    /// The monthly or yearly rule as `schedule::calendar` holds it.
    fn calendar(&self) -> Option<Calendar> {
        let (month, day) = match &self.rule {
            Rule::Monthly(day) => (None, *day),
            Rule::Yearly { month, day } => (Some(*month), MonthDay::Day(*day)),
            Rule::Daily | Rule::Weekly(_) => return None,
        };
        Some(Calendar {
            month,
            day,
            hour: self.hour,
            minute: self.minute,
        })
    }

    /// The task schedule: a canonical Unix cron (daily, weekly) or a
    /// calendar rule (monthly, yearly) in the zone, with the `until`.
    pub fn to_schedule(&self) -> Schedule {
        if let Some(calendar) = self.calendar() {
            return Schedule::Calendar {
                calendar,
                timezone: self.timezone.clone(),
                until: self.until,
            };
        }
        let dow = match &self.rule {
            // Unix cron counts from Sunday = 0; ours from Monday = 0.
            Rule::Weekly(days) => {
                let mut unix: Vec<u8> = days.iter().map(|d| (d + 1) % 7).collect();
                unix.sort_unstable();
                unix.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
            }
            _ => "*".to_owned(),
        };
        Schedule::Cron {
            cron: format!("{} {} * * {dow}", self.minute, self.hour),
            timezone: self.timezone.clone(),
            until: self.until,
        }
    }

    /// Reads a recurrence back from a schedule [`Self::to_schedule`] wrote.
    pub fn of(schedule: &Schedule) -> Option<Self> {
        let recurrence = match schedule {
            Schedule::Calendar {
                calendar,
                timezone,
                until,
            } => Self {
                rule: match (calendar.month, calendar.day) {
                    (None, day) => Rule::Monthly(day),
                    (Some(month), MonthDay::Day(day)) => Rule::Yearly { month, day },
                    (Some(_), _) => return None,
                },
                hour: calendar.hour,
                minute: calendar.minute,
                timezone: timezone.clone(),
                until: *until,
            },
            Schedule::Cron { cron, timezone, until } => {
                let fields: Vec<&str> = cron.split(' ').collect();
                let [minute, hour, "*", "*", dow] = fields.as_slice() else {
                    return None;
                };
                let rule = match *dow {
                    "*" => Rule::Daily,
                    list => Rule::Weekly(
                        list.split(',')
                            .map(|d| d.parse::<u8>().ok().filter(|d| *d < 7).map(|d| (d + 6) % 7))
                            .collect::<Option<BTreeSet<u8>>>()?,
                    ),
                };
                Self {
                    rule,
                    hour: hour.parse().ok()?,
                    minute: minute.parse().ok()?,
                    timezone: timezone.clone(),
                    until: *until,
                }
            }
            Schedule::At { .. } | Schedule::Rate { .. } => return None,
        };
        (recurrence.to_schedule() == *schedule).then_some(recurrence)
    }

    pub fn time(&self) -> String {
        format!("{:02}:{:02}", self.hour, self.minute)
    }

    /// The view as JSON (an idempotency fingerprint's canonical form).
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.view()).unwrap_or_default()
    }

    /// As the summary shows it: `{"daily": {...}}`, `{"weekly": {...}}`,
    /// `{"monthly": {...}}` or `{"yearly": {...}}`, with `"until"` beside
    /// it when one is set.
    pub fn view(&self) -> ScheduleView {
        let (time, timezone) = (self.time(), self.timezone.clone());
        let rule = match &self.rule {
            Rule::Daily => json!({"daily": {"time": time, "timezone": timezone}}),
            Rule::Weekly(days) => json!({"weekly": {
                "days": days.iter().map(|d| DAYS[usize::from(*d)]).collect::<Vec<_>>(),
                "time": time, "timezone": timezone}}),
            Rule::Monthly(MonthDay::Day(day)) => json!({"monthly": {"day": day, "time": time, "timezone": timezone}}),
            Rule::Monthly(MonthDay::Last) => json!({"monthly": {"day": "last", "time": time, "timezone": timezone}}),
            Rule::Monthly(MonthDay::Nth { weekday, nth }) => json!({"monthly": {
                "weekday": DAYS[usize::from(*weekday)], "nth": nth, "time": time, "timezone": timezone}}),
            Rule::Monthly(MonthDay::LastWeekday { weekday }) => json!({"monthly": {
                "weekday": DAYS[usize::from(*weekday)], "nth": "last", "time": time, "timezone": timezone}}),
            Rule::Yearly { month, day } => json!({"yearly": {
                "month": month, "day": day, "time": time, "timezone": timezone}}),
        };
        ScheduleView::Recurring {
            rule,
            until: self.until.map(|u| u.format("%Y-%m-%d").to_string()),
        }
    }

    /// The rhythm in words: "every day at 19:00 Europe/Berlin", "on the
    /// first Monday of every month at ...", with "until ..." when set.
    pub fn describe(&self) -> String {
        let at = format!("at {} {}", self.time(), self.timezone);
        let mut text = match &self.rule {
            Rule::Daily => format!("every day {at}"),
            Rule::Weekly(days) => format!(
                "every {} {at}",
                days.iter()
                    .map(|d| DAYS[usize::from(*d)])
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Rule::Monthly(MonthDay::Day(day)) => format!("on day {day} of every month {at}"),
            Rule::Monthly(MonthDay::Last) => format!("on the last day of every month {at}"),
            Rule::Monthly(MonthDay::Nth { weekday, nth }) => format!(
                "on the {} {} of every month {at}",
                calendar::ordinal(*nth),
                weekday_name(*weekday)
            ),
            Rule::Monthly(MonthDay::LastWeekday { weekday }) => {
                format!("on the last {} of every month {at}", weekday_name(*weekday))
            }
            Rule::Yearly { month, day } => format!("every year on {day} {} {at}", month_name(*month)),
        };
        if let Some(until) = self.until {
            text.push_str(&format!(", until {}", until.format("%Y-%m-%d")));
        }
        text
    }

    /// Words for what the coming year holds that a person would not
    /// expect, as Scheduler fires it: the next month without the reminder's
    /// day (`preview::missing_day`), and the first local time a DST change
    /// skips and the first it repeats (`preview::dst_changes`).
    pub fn notes(&self, now: DateTime<Utc>) -> Vec<String> {
        let schedule = self.to_schedule();
        let missing = missing_day(&schedule, now).and_then(|fire| {
            let note = fire.note?;
            Some(format!(
                "{}: that month's reminder is skipped",
                note.split(';').next().unwrap_or_default()
            ))
        });
        let dst = dst_changes(&schedule, now).into_iter().map(|fire| {
            let day = fire.local.get(..10).unwrap_or_default().to_owned();
            if fire.at.is_none() {
                format!(
                    "on {day}, {} does not exist in {} as clocks go forward: that day's reminder is skipped",
                    self.time(),
                    self.timezone
                )
            } else {
                format!(
                    "on {day}, {} happens twice in {} as clocks go back: the reminder runs once, the first time",
                    self.time(),
                    self.timezone
                )
            }
        });
        missing.into_iter().chain(dst).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::preview::next_fires;
    use chrono::Duration;
    use chrono::TimeZone;
    use serde_json::json;

    fn code(value: Value, weekly: bool) -> Result<Recurrence, RecurrenceError> {
        if weekly {
            Recurrence::weekly(&value)
        } else {
            Recurrence::daily(&value)
        }
    }

    #[test]
    fn daily_and_weekly_become_canonical_crons_and_read_back() {
        let daily = Recurrence::daily(&json!({"time": "19:05", "timezone": "Europe/Berlin"})).unwrap();
        assert_eq!(
            daily.to_schedule(),
            Schedule::Cron {
                cron: "5 19 * * *".into(),
                timezone: "Europe/Berlin".into(),
                until: None
            }
        );
        assert_eq!(
            daily.to_schedule().expression().unwrap().expression,
            "cron(5 19 * * ? *)"
        );
        let weekly = Recurrence::weekly(&json!({"days": ["SUN", "MON", "WED"], "time": "07:30",
                                                 "timezone": "America/New_York"}))
        .unwrap();
        assert_eq!(
            weekly.to_schedule(),
            Schedule::Cron {
                cron: "30 7 * * 0,1,3".into(),
                timezone: "America/New_York".into(),
                until: None
            }
        );
        assert_eq!(
            weekly.to_schedule().expression().unwrap().expression,
            "cron(30 7 ? * 1,2,4 *)"
        );
        for r in [&daily, &weekly] {
            assert_eq!(Recurrence::of(&r.to_schedule()).as_ref(), Some(r));
        }
        assert_eq!(
            weekly.to_json(),
            json!({"weekly": {"days": ["MON", "WED", "SUN"], "time": "07:30", "timezone": "America/New_York"}})
        );
        assert_eq!(
            Recurrence::of(&Schedule::Cron {
                cron: "0 9 * * MON-FRI".into(),
                timezone: "UTC".into(),
                until: None
            }),
            None,
            "a connector's cron is not a reminder's recurrence"
        );
    }

    #[test]
    fn bad_times_zones_and_days_are_refused() {
        let bad = [
            (json!({"time": "7:00", "timezone": "UTC"}), false),
            (json!({"time": "24:00", "timezone": "UTC"}), false),
            (json!({"time": "12:60", "timezone": "UTC"}), false),
            (json!({"time": "+1:00", "timezone": "UTC"}), false),
            (json!({"time": 1900, "timezone": "UTC"}), false),
            (json!({"time": "19:00", "timezone": "Mars/Olympus"}), false),
            (json!({"time": "19:00", "timezone": "europe/berlin"}), false),
            (json!({"time": "19:00"}), false),
            (json!({"time": "19:00", "timezone": "UTC", "days": ["MON"]}), false),
            (json!("19:00"), false),
            (json!({"days": [], "time": "19:00", "timezone": "UTC"}), true),
            (
                json!({"days": ["MON", "MON"], "time": "19:00", "timezone": "UTC"}),
                true,
            ),
            (json!({"days": ["mon"], "time": "19:00", "timezone": "UTC"}), true),
            (json!({"days": ["FUNDAY"], "time": "19:00", "timezone": "UTC"}), true),
            (json!({"days": "MON", "time": "19:00", "timezone": "UTC"}), true),
            (json!({"time": "19:00", "timezone": "UTC"}), true),
        ];
        for (value, weekly) in bad {
            assert!(code(value.clone(), weekly).is_err(), "{value}");
        }
        assert!(code(json!({"time": "00:00", "timezone": "UTC"}), false).is_ok());
        assert!(code(json!({"days": DAYS, "time": "23:59", "timezone": "Asia/Kolkata"}), true).is_ok());
    }

    #[test]
    fn dst_skips_and_repeats_are_said() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        // New York springs forward on 2027-03-14 at 02:00 and falls back on 2027-11-07.
        let gap = Recurrence::daily(&json!({"time": "02:30", "timezone": "America/New_York"})).unwrap();
        let notes = gap.notes(now);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("2027-03-14") && notes[0].contains("skipped"),
            "{notes:?}"
        );
        let twice = Recurrence::daily(&json!({"time": "01:30", "timezone": "America/New_York"})).unwrap();
        let notes = twice.notes(now);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("2027-11-07") && notes[0].contains("twice"),
            "{notes:?}"
        );
        let calm = Recurrence::daily(&json!({"time": "19:00", "timezone": "America/New_York"})).unwrap();
        assert!(calm.notes(now).is_empty());
        let utc = Recurrence::daily(&json!({"time": "02:30", "timezone": "UTC"})).unwrap();
        assert!(utc.notes(now).is_empty());
    }

    #[test]
    fn monthly_and_yearly_inputs_are_read_strictly() {
        let ok = [
            (
                json!({"day": 31, "time": "09:00", "timezone": "UTC"}),
                "cron(0 9 31 * ? *)",
            ),
            (
                json!({"day": "last", "time": "09:00", "timezone": "UTC"}),
                "cron(0 9 L * ? *)",
            ),
            (
                json!({"weekday": "MON", "nth": 1, "time": "09:00", "timezone": "UTC"}),
                "cron(0 9 ? * 2#1 *)",
            ),
            (
                json!({"weekday": "FRI", "nth": "last", "time": "17:30", "timezone": "Europe/Berlin"}),
                "cron(30 17 ? * 6L *)",
            ),
        ];
        for (value, want) in ok {
            let monthly = Recurrence::monthly(&value).unwrap();
            let schedule = monthly.to_schedule();
            assert_eq!(schedule.expression().unwrap().expression, want, "{value}");
            assert_eq!(Recurrence::of(&schedule).as_ref(), Some(&monthly));
            // The view reads back as the same input.
            let view = monthly.to_json();
            assert_eq!(Recurrence::monthly(&view["monthly"]).unwrap(), monthly, "{view}");
        }
        let leap = Recurrence::yearly(&json!({"month": 2, "day": 29, "time": "08:00", "timezone": "UTC"})).unwrap();
        assert_eq!(
            leap.to_schedule().expression().unwrap().expression,
            "cron(0 8 29 2 ? *)"
        );
        assert_eq!(
            leap.to_json(),
            json!({"yearly": {"month": 2, "day": 29, "time": "08:00", "timezone": "UTC"}})
        );
        assert_eq!(leap.describe(), "every year on 29 February at 08:00 UTC");
        let bad_monthly = [
            json!({"day": 0, "time": "09:00", "timezone": "UTC"}),
            json!({"day": 32, "time": "09:00", "timezone": "UTC"}),
            json!({"day": "31", "time": "09:00", "timezone": "UTC"}),
            json!({"day": 31.0, "time": "09:00", "timezone": "UTC"}),
            json!({"day": "first", "time": "09:00", "timezone": "UTC"}),
            json!({"day": 1, "weekday": "MON", "nth": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"weekday": "MON", "time": "09:00", "timezone": "UTC"}),
            json!({"nth": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"weekday": "mon", "nth": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"weekday": "MON", "nth": 5, "time": "09:00", "timezone": "UTC"}),
            json!({"weekday": "MON", "nth": 0, "time": "09:00", "timezone": "UTC"}),
            json!({"day": 1, "time": "9:00", "timezone": "UTC"}),
            json!({"day": 1, "time": "09:00", "timezone": "Moon/Base"}),
            json!({"day": 1, "time": "09:00", "timezone": "UTC", "month": 2}),
            json!({"time": "09:00", "timezone": "UTC"}),
        ];
        for value in bad_monthly {
            assert!(Recurrence::monthly(&value).is_err(), "{value}");
        }
        let bad_yearly = [
            json!({"month": 2, "day": 30, "time": "09:00", "timezone": "UTC"}),
            json!({"month": 4, "day": 31, "time": "09:00", "timezone": "UTC"}),
            json!({"month": 13, "day": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"month": 0, "day": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"month": "FEB", "day": 1, "time": "09:00", "timezone": "UTC"}),
            json!({"month": 2, "day": "last", "time": "09:00", "timezone": "UTC"}),
            json!({"month": 2, "time": "09:00", "timezone": "UTC"}),
            json!({"month": 2, "day": 1, "weekday": "MON", "time": "09:00", "timezone": "UTC"}),
        ];
        for value in bad_yearly {
            assert!(Recurrence::yearly(&value).is_err(), "{value}");
        }
        for (text, ok) in [
            ("2027-01-31", true),
            ("2028-02-29", true),
            ("2027-02-29", false),
            ("2027-1-31", false),
            ("2027-01-31T00:00:00Z", false),
            ("+2027-01-31", false),
            ("31.01.2027", false),
            ("", false),
            ("2099-12-31", true),
            ("2100-01-01", false),
            ("9999-12-31", false),
        ] {
            assert_eq!(parse_until(&json!(text)).is_ok(), ok, "{text}");
        }
        assert!(parse_until(&json!(20270131)).is_err());
    }

    #[test]
    fn until_is_kept_beside_the_rule_and_said() {
        let mut daily = Recurrence::daily(&json!({"time": "07:00", "timezone": "Europe/Berlin"})).unwrap();
        daily.until = NaiveDate::from_ymd_opt(2027, 1, 31);
        let schedule = daily.to_schedule();
        assert_eq!(
            schedule,
            Schedule::Cron {
                cron: "0 7 * * *".into(),
                timezone: "Europe/Berlin".into(),
                until: NaiveDate::from_ymd_opt(2027, 1, 31)
            }
        );
        assert_eq!(Recurrence::of(&schedule).as_ref(), Some(&daily));
        assert_eq!(
            serde_json::to_value(ScheduleView::of(&schedule)).unwrap(),
            json!({"daily": {"time": "07:00", "timezone": "Europe/Berlin"}, "until": "2027-01-31"})
        );
        assert_eq!(daily.describe(), "every day at 07:00 Europe/Berlin, until 2027-01-31");
        let expression = schedule.expression().unwrap();
        assert_eq!(expression.expression, "cron(0 7 * * ? *)");
        assert_eq!(
            expression.end_date,
            Some(Utc.with_ymd_and_hms(2027, 1, 31, 23, 0, 0).unwrap()),
            "the first instant of 1 February in Berlin"
        );
        // Without one, the view and its fingerprint are what they were.
        daily.until = None;
        assert_eq!(
            daily.to_json(),
            json!({"daily": {"time": "07:00", "timezone": "Europe/Berlin"}})
        );
    }

    #[test]
    fn a_month_without_the_day_is_said_as_a_dst_skip_is() {
        let now = Utc.with_ymd_and_hms(2027, 1, 10, 0, 0, 0).unwrap();
        let monthly = Recurrence::monthly(&json!({"day": 31, "time": "09:00", "timezone": "UTC"})).unwrap();
        assert_eq!(
            monthly.notes(now),
            vec!["February 2027 has no day 31: that month's reminder is skipped".to_owned()]
        );
        let leap = Recurrence::yearly(&json!({"month": 2, "day": 29, "time": "09:00", "timezone": "UTC"})).unwrap();
        assert_eq!(
            leap.notes(now),
            vec!["February 2027 has no day 29: that month's reminder is skipped".to_owned()]
        );
        let first = Recurrence::monthly(&json!({"day": 1, "time": "09:00", "timezone": "UTC"})).unwrap();
        assert!(first.notes(now).is_empty());
        // Both kinds at once: the 31st at 02:30 in New York.
        let both = Recurrence::monthly(&json!({"day": 31, "time": "02:30", "timezone": "America/New_York"})).unwrap();
        let march = Utc.with_ymd_and_hms(2030, 3, 1, 0, 0, 0).unwrap();
        let notes = both.notes(march);
        assert_eq!(notes.len(), 1, "March 31st 2030 is no DST day: {notes:?}");
        assert!(notes[0].starts_with("April 2030 has no day 31"), "{notes:?}");
    }

    use crate::fuzzing::calendar_reference as reference;

    fn arb_rule() -> impl Strategy<Value = Rule> {
        prop_oneof![
            Just(Rule::Daily),
            proptest::collection::btree_set(0u8..7, 1..4).prop_map(Rule::Weekly),
            (1u8..=31).prop_map(|d| Rule::Monthly(MonthDay::Day(d))),
            (28u8..=31).prop_map(|d| Rule::Monthly(MonthDay::Day(d))),
            Just(Rule::Monthly(MonthDay::Last)),
            (0u8..7, 1u8..=4).prop_map(|(weekday, nth)| Rule::Monthly(MonthDay::Nth { weekday, nth })),
            (0u8..7).prop_map(|weekday| Rule::Monthly(MonthDay::LastWeekday { weekday })),
            (1u8..=12, 1u8..=31)
                .prop_filter("a day the month has", |(m, d)| {
                    *d <= crate::domain::schedule::calendar::MONTH_DAYS[usize::from(*m - 1)]
                })
                .prop_map(|(month, day)| Rule::Yearly { month, day }),
            Just(Rule::Yearly { month: 2, day: 29 }),
        ]
    }

    fn arb_recurrence() -> impl Strategy<Value = Recurrence> {
        let zones = prop_oneof![
            Just("UTC"),
            Just("Europe/Berlin"),
            Just("America/New_York"),
            Just("Australia/Lord_Howe"),
            Just("America/Santiago"),
            Just("Asia/Kolkata"),
        ];
        // Night hours (where DST moves clocks) as often as any other.
        let hours = prop_oneof![0u8..24, 0u8..4];
        (arb_rule(), hours, prop_oneof![0u8..60, Just(0u8), Just(30u8)], zones).prop_map(
            |(rule, hour, minute, zone)| Recurrence {
                rule,
                hour,
                minute,
                timezone: zone.to_owned(),
                until: None,
            },
        )
    }

    /// Any instant of one whole Gregorian cycle, 2000 to 2400.
    fn arb_instant() -> impl Strategy<Value = DateTime<Utc>> {
        (0i64..(146_097 * 1440)).prop_map(|m| Utc.with_ymd_and_hms(2000, 1, 1, 0, 0, 0).unwrap() + Duration::minutes(m))
    }

    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Every kind, as stored and put to Scheduler, fires exactly when
        /// the calendar says it should, DST and missing days included, and
        /// never after its `until`; anywhere in 400 years.
        #[test]
        fn every_kind_fires_as_the_calendar_says(
            mut r in arb_recurrence(),
            after in arb_instant(),
            until_days in proptest::option::of(0i64..3000),
        ) {
            r.until = until_days.map(|d| after.date_naive() + Duration::days(d));
            let schedule = r.to_schedule();
            let expression = schedule.expression().unwrap();
            prop_assert!(
                crate::domain::schedule::preview::EbCron::parse(&expression.expression).is_some(),
                "{} is no expression Scheduler takes", expression.expression
            );
            let read = Recurrence::of(&schedule);
            prop_assert_eq!(read.as_ref(), Some(&r));
            let ours = crate::domain::schedule::preview::upcoming(&schedule, after, 6);
            let theirs = reference(&r, after, 6);
            prop_assert_eq!(&ours, &theirs, "{:?} -> {}", r, expression.expression);
            for at in &ours {
                prop_assert!(crate::domain::schedule::preview::is_occurrence(&schedule, *at));
                prop_assert!(!crate::domain::schedule::preview::is_occurrence(&schedule, *at + Duration::minutes(1)));
            }
            // Between two runs, every month skipped lacks the day, and is named.
            if let (Rule::Monthly(MonthDay::Day(day)), [first, .., last]) = (&r.rule, ours.as_slice()) {
                let fires = next_fires(&schedule, *first - Duration::seconds(1), 400).unwrap();
                let named: BTreeSet<String> = fires
                    .iter()
                    .filter(|f| f.at.is_none() && f.note.as_deref().is_some_and(|n| n.contains("has no day")))
                    .filter(|f| f.local.as_str() < last.format("%Y-%m").to_string().as_str())
                    .map(|f| f.local[..7].to_owned())
                    .collect();
                let zone = Zone::from_str(&r.timezone).unwrap();
                let (mut y, mut m) = {
                    use chrono::Datelike;
                    let d = first.with_timezone(&zone).date_naive();
                    (d.year(), d.month())
                };
                let last_month = last.with_timezone(&zone).format("%Y-%m").to_string();
                let mut lacking = BTreeSet::new();
                loop {
                    (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                    let month = format!("{y:04}-{m:02}");
                    if month >= last_month { break; }
                    if crate::domain::schedule::calendar::days_in_month(y, m) < u32::from(*day) {
                        lacking.insert(month);
                    }
                }
                prop_assert_eq!(named, lacking);
            }
        }
    }
}

/// A reminder's schedule as its owner reads it (SPEC §11): `{"at": <UTC>}`,
/// `{"daily": {...}}`, `{"weekly": {...}}`, `{"monthly": {...}}` or
/// `{"yearly": {...}}` with `"until"` beside it when one is set; any other
/// schedule as it is stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum ScheduleView {
    At {
        at: String,
    },
    Recurring {
        #[serde(flatten)]
        rule: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        until: Option<String>,
    },
    Other(Schedule),
}

impl ScheduleView {
    pub fn of(schedule: &Schedule) -> Self {
        match schedule {
            Schedule::At { at } => ScheduleView::At {
                at: crate::domain::schedule::format_utc(*at),
            },
            other => Recurrence::of(other).map_or_else(|| ScheduleView::Other(other.clone()), |r| r.view()),
        }
    }
}
