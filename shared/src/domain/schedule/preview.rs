//! Next fire times of a schedule, in its zone, as EventBridge Scheduler will
//! fire them, with a word wherever DST skips or repeats a local time, and
//! wherever a month lacks the day a schedule names (the 31st in April, 29
//! February outside leap years). Admins see this before they approve (admin
//! `get`); owners read its words in `get`'s explanation.
//!
//! It evaluates the EventBridge expression the task is scheduled with (not
//! the declared Unix cron or the owner's rule), with Scheduler's documented
//! DST rule: a local time that does not exist (spring forward) is skipped;
//! one that happens twice (fall back) fires once, at the first. Nothing
//! fires at or after the expression's `EndDate`.
//!
//! [`EbCron::parse`] is also the project's check of a cron expression
//! before it reaches Scheduler (moto takes any text): six fields, the year
//! `*`, exactly one of day-of-month and day-of-week `?`, day-of-week 1-7
//! from Sunday, `L` alone in day-of-month (the last day), `D#n` (n 1-5) or
//! `DL` alone in day-of-week (`#` and `L` never in a list); `W` and names
//! are refused (the project writes neither).

use std::collections::BTreeSet;
use std::str::FromStr;

use crate::domain::schedule::zone::Zone;
use chrono::Datelike;
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use serde::Serialize;

use super::calendar::days_in_month;
use super::{Expression, RateUnit, Schedule};

/// One entry of a preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fire {
    /// When it fires; `None` for a local time DST skips or a day its month
    /// does not have.
    pub at: Option<DateTime<Utc>>,
    /// The local wall-clock time in the schedule's zone
    /// (`YYYY-MM-DDTHH:MM:SS`); for a day its month does not have, that
    /// day as the schedule names it (`2027-04-31T09:00:00`).
    pub local: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Fire {
    /// Whether this entry is a day its month does not have.
    pub fn is_missing_day(&self) -> bool {
        self.at.is_none() && NaiveDateTime::parse_from_str(&self.local, "%Y-%m-%dT%H:%M:%S").is_err()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewError {
    #[error("`{0}` is not an EventBridge expression this preview reads")]
    Expression(String),
    #[error("`{0}` is not an IANA time zone")]
    Zone(String),
}

/// Which days an EventBridge cron fires on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Days {
    /// Day-of-week `?`: these days of the month.
    OfMonth(BTreeSet<u32>),
    /// Day-of-month `L`: the month's last day.
    LastOfMonth,
    /// Day-of-month `?`: these weekdays (1 = Sunday).
    OfWeek(BTreeSet<u32>),
    /// `D#n`: the nth weekday D of the month.
    NthWeekday { weekday: u32, nth: u32 },
    /// `DL`: the last weekday D of the month.
    LastWeekday(u32),
}

/// An EventBridge `cron(min hour dom month dow year)` as sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EbCron {
    minutes: BTreeSet<u32>,
    hours: BTreeSet<u32>,
    days: Days,
    months: BTreeSet<u32>,
}

fn eb_field(text: &str, min: u32, max: u32) -> Option<BTreeSet<u32>> {
    let number = |t: &str| {
        (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
            .then(|| t.parse::<u32>().ok())
            .flatten()
    };
    let mut set = BTreeSet::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, number(s).filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => {
                    let a = number(r)?;
                    (a, if part.contains('/') { max } else { a })
                }
            },
        };
        if lo < min || hi > max || lo > hi {
            return None;
        }
        set.extend((lo..=hi).step_by(step as usize));
    }
    Some(set)
}

/// A weekday of Scheduler's day-of-week field, 1 (Sunday) to 7.
fn weekday(text: &str) -> Option<u32> {
    let day: u32 = (text.len() == 1).then(|| text.parse().ok()).flatten()?;
    (1..=7).contains(&day).then_some(day)
}

impl EbCron {
    /// Reads a `cron(...)` expression under Scheduler's rules (module doc);
    /// `None` for anything else.
    pub fn parse(expression: &str) -> Option<Self> {
        let inner = expression.strip_prefix("cron(")?.strip_suffix(')')?;
        let f: Vec<&str> = inner.split(' ').collect();
        if f.len() != 6 || f[5] != "*" {
            return None;
        }
        let days = match (f[2], f[4]) {
            ("?", "?") => return None,
            ("L", "?") => Days::LastOfMonth,
            (dom, "?") => Days::OfMonth(eb_field(dom, 1, 31)?),
            ("?", dow) => match (dow.split_once('#'), dow.strip_suffix('L')) {
                (Some((day, nth)), None) => {
                    let nth = weekday(nth).filter(|n| *n <= 5)?;
                    Days::NthWeekday {
                        weekday: weekday(day)?,
                        nth,
                    }
                }
                (None, Some(day)) => Days::LastWeekday(weekday(day)?),
                (None, None) => Days::OfWeek(eb_field(dow, 1, 7)?),
                (Some(_), Some(_)) => return None,
            },
            _ => return None,
        };
        Some(Self {
            minutes: eb_field(f[0], 0, 59)?,
            hours: eb_field(f[1], 0, 23)?,
            days,
            months: eb_field(f[3], 1, 12)?,
        })
    }

    /// Whether any time of this local day fires.
    pub fn fires_on(&self, date: NaiveDate) -> bool {
        let last = days_in_month(date.year(), date.month());
        let weekday = date.weekday().num_days_from_sunday() + 1;
        self.months.contains(&date.month())
            && match &self.days {
                Days::OfMonth(days) => days.contains(&date.day()),
                Days::LastOfMonth => date.day() == last,
                Days::OfWeek(days) => days.contains(&weekday),
                Days::NthWeekday { weekday: w, nth } => weekday == *w && (date.day() - 1) / 7 + 1 == *nth,
                Days::LastWeekday(w) => weekday == *w && date.day() + 7 > last,
            }
    }

    /// The days of the month of `date` that the expression names and the
    /// month does not have, listed on the month's last day (`date`); none
    /// for an expression that fires every day.
    fn missing_after(&self, date: NaiveDate) -> Vec<u32> {
        let last = days_in_month(date.year(), date.month());
        match &self.days {
            Days::OfMonth(days) if days.len() < 31 && date.day() == last && self.months.contains(&date.month()) => {
                days.range(last + 1..).copied().collect()
            }
            _ => Vec::new(),
        }
    }

    /// The local times of a day, in order: (hour, minute).
    pub fn times(&self) -> Vec<(u32, u32)> {
        self.hours
            .iter()
            .flat_map(|h| self.minutes.iter().map(move |m| (*h, *m)))
            .collect()
    }
}

fn wall(local: NaiveDateTime) -> String {
    local.format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// The next `count` entries after `after`: fires, and the local times DST
/// skips and the days a month lacks among them (which count too, so a
/// preview never hides them).
pub fn next_fires(schedule: &Schedule, after: DateTime<Utc>, count: usize) -> Result<Vec<Fire>, PreviewError> {
    let expression = schedule
        .expression()
        .map_err(|e| PreviewError::Expression(e.to_string()))?;
    match schedule {
        Schedule::At { at } => Ok((*at > after)
            .then(|| Fire {
                at: Some(*at),
                local: wall(at.naive_utc()),
                note: None,
            })
            .into_iter()
            .collect()),
        Schedule::Rate { every, unit } => {
            let step = match unit {
                RateUnit::Minutes => Duration::minutes(i64::from(*every)),
                RateUnit::Hours => Duration::hours(i64::from(*every)),
                RateUnit::Days => Duration::days(i64::from(*every)),
            };
            Ok((1..=count as i32)
                .map(|k| {
                    let at = after + step * k;
                    Fire {
                        at: Some(at),
                        local: wall(at.naive_utc()),
                        note: None,
                    }
                })
                .collect())
        }
        Schedule::Cron { .. } | Schedule::Calendar { .. } => cron_fires(&expression, after, count),
    }
}

/// The next instant the schedule fires after `after`, past any skipped
/// local time or missing day; `None` when it fires no more.
pub fn next_fire(schedule: &Schedule, after: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, PreviewError> {
    match schedule {
        Schedule::Cron { .. } | Schedule::Calendar { .. } => {
            let expression = schedule
                .expression()
                .map_err(|e| PreviewError::Expression(e.to_string()))?;
            next_cron_fire(&expression, after)
        }
        other => Ok(next_fires(other, after, 1)?.first().and_then(|f| f.at)),
    }
}

/// The next `count` instants it fires at after `after`, however far apart
/// (a yearly 29 February fires every four years, once in eight across a
/// century that is no leap year).
pub fn upcoming(schedule: &Schedule, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
    let mut out: Vec<DateTime<Utc>> = Vec::new();
    while out.len() < count {
        match next_fire(schedule, out.last().copied().unwrap_or(after)) {
            Ok(Some(at)) => out.push(at),
            _ => break,
        }
    }
    out
}

/// The next instant an EventBridge cron expression fires after `after`,
/// before its `EndDate`.
pub fn next_cron_fire(expression: &Expression, after: DateTime<Utc>) -> Result<Option<DateTime<Utc>>, PreviewError> {
    Ok(walk(expression, after, 1, false)?.first().and_then(|f| f.at))
}

/// Evaluates an EventBridge cron expression in its zone.
pub fn cron_fires(expression: &Expression, after: DateTime<Utc>, count: usize) -> Result<Vec<Fire>, PreviewError> {
    walk(expression, after, count, true)
}

/// The next `count` entries of an EventBridge cron expression in its zone:
/// fires, and with `notes` the skipped local times and missing days too.
fn walk(expression: &Expression, after: DateTime<Utc>, count: usize, notes: bool) -> Result<Vec<Fire>, PreviewError> {
    let cron =
        EbCron::parse(&expression.expression).ok_or_else(|| PreviewError::Expression(expression.expression.clone()))?;
    let zone = Zone::from_str(&expression.timezone).map_err(|_| PreviewError::Zone(expression.timezone.clone()))?;
    let after_local = after.with_timezone(&zone).naive_local();
    let end = expression.end_date;
    let end_local = end.map(|e| e.with_timezone(&zone).naive_local());
    // Whether an entry at this local time (and instant, if it has one) is
    // before the end.
    let before_end = |local: NaiveDateTime, at: Option<DateTime<Utc>>| match (end, at) {
        (None, _) => true,
        (Some(end), Some(at)) => at < end,
        (Some(_), None) => end_local.is_some_and(|e| local < e),
    };
    let times = cron.times();
    let mut out = Vec::new();
    let mut date = after_local.date();
    // A cron that fires at all fires within eight years (Feb 29 included).
    let last = date + Duration::days(366 * 8);
    while out.len() < count && date <= last && end_local.is_none_or(|e| date <= e.date()) {
        if cron.fires_on(date) {
            for &(hour, minute) in &times {
                let Some(local) = date.and_hms_opt(hour, minute, 0) else {
                    continue;
                };
                let fire = fire_at(&zone, local);
                // Skipped times are listed by their local day; fires by instant.
                let later = match fire.at {
                    Some(at) => at > after,
                    None => local > after_local,
                };
                if later && (notes || fire.at.is_some()) && before_end(local, fire.at) && out.len() < count {
                    out.push(fire);
                }
            }
        }
        // Days the month lacks: one entry each, at the day's first time,
        // listed after the month's last day.
        if let Some(&(hour, minute)) = times.first() {
            for day in cron.missing_after(date) {
                let Some(local) = date.and_hms_opt(hour, minute, 0) else {
                    continue;
                };
                if notes && local > after_local && before_end(local, None) && out.len() < count {
                    out.push(Fire {
                        at: None,
                        local: format!("{}-{day:02}T{hour:02}:{minute:02}:00", date.format("%Y-%m")),
                        note: Some(format!("{} has no day {day}; no run this month", date.format("%B %Y"))),
                    });
                }
            }
        }
        date += Duration::days(1);
    }
    Ok(out)
}

/// A local time of a cron's as Scheduler fires it in `zone`: once, the
/// first of two that DST repeats, and none that DST skips (named).
fn fire_at(zone: &Zone, local: NaiveDateTime) -> Fire {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => Fire {
            at: Some(t.with_timezone(&Utc)),
            local: wall(local),
            note: None,
        },
        LocalResult::Ambiguous(first, _) => Fire {
            at: Some(first.with_timezone(&Utc)),
            local: wall(local),
            note: Some(format!(
                "{} happens twice as clocks go back; it fires once, the first time",
                local.format("%H:%M")
            )),
        },
        LocalResult::None => Fire {
            at: None,
            local: wall(local),
            note: Some(format!(
                "{} does not exist as clocks go forward; this run is skipped",
                local.format("%Y-%m-%d %H:%M")
            )),
        },
    }
}

/// The most fires [`dst_changes`] reads: a year of a cron firing every
/// five minutes, nearly.
const MAX_FIRES_READ: usize = 100_000;

/// The first local time of the coming year (366 days after `now`) that a
/// DST change skips, and the first it repeats, among the schedule's fires,
/// as Scheduler fires them: at most one of each, the skip first. Only a
/// cron has a zone; a one-time or rate schedule has none.
pub fn dst_changes(schedule: &Schedule, now: DateTime<Utc>) -> Vec<Fire> {
    if !matches!(schedule, Schedule::Cron { .. } | Schedule::Calendar { .. }) {
        return Vec::new();
    }
    let horizon = now + Duration::days(366);
    let fires = next_fires(schedule, now, MAX_FIRES_READ).unwrap_or_default();
    let within = fires.into_iter().take_while(|f| f.at.is_none_or(|at| at <= horizon));
    let (mut skip, mut repeat) = (None, None);
    for fire in within.filter(|f| f.note.is_some() && !f.is_missing_day()) {
        match fire.at {
            None if skip.is_none() => skip = Some(fire),
            Some(_) if repeat.is_none() => repeat = Some(fire),
            _ => {}
        }
        if skip.is_some() && repeat.is_some() {
            break;
        }
    }
    skip.into_iter().chain(repeat).collect()
}

/// The first day of the coming year (366 days after `now`) that a month
/// lacks among the schedule's days (the 31st in April, 29 February outside
/// leap years), as Scheduler skips it: `get` names it as it names a DST skip.
pub fn missing_day(schedule: &Schedule, now: DateTime<Utc>) -> Option<Fire> {
    if !matches!(schedule, Schedule::Cron { .. } | Schedule::Calendar { .. }) {
        return None;
    }
    let horizon = now + Duration::days(366);
    let horizon_local = wall(horizon.naive_utc());
    next_fires(schedule, now, MAX_FIRES_READ)
        .unwrap_or_default()
        .into_iter()
        .take_while(|f| f.at.is_none_or(|at| at <= horizon))
        .find(|f| f.is_missing_day() && f.local <= horizon_local)
}

/// The instants only (what a test compares with another evaluator).
pub fn instants(fires: &[Fire]) -> Vec<DateTime<Utc>> {
    fires.iter().filter_map(|f| f.at).collect()
}

/// Whether `scheduled` is an occurrence of `schedule` as it now is: a
/// one-time task's instant, a cron's fire time in its zone (Scheduler's DST
/// rule included). A rate has no fixed phase to check against: any time is
/// one of its occurrences.
pub fn is_occurrence(schedule: &Schedule, scheduled: DateTime<Utc>) -> bool {
    match schedule {
        Schedule::At { at } => *at == scheduled,
        Schedule::Rate { .. } => true,
        // The first fire after the instant before it, past any local time
        // DST skips or day a month lacks.
        Schedule::Cron { .. } | Schedule::Calendar { .. } => next_fire(schedule, scheduled - Duration::seconds(1))
            .map(|next| next == Some(scheduled))
            // An expression that cannot be read could not have been scheduled.
            .unwrap_or(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::calendar::{Calendar, MonthDay};
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn cron(c: &str, tz: &str) -> Schedule {
        Schedule::Cron {
            cron: c.into(),
            timezone: tz.into(),
            until: None,
        }
    }

    fn calendar(month: Option<u8>, day: MonthDay, tz: &str, until: Option<NaiveDate>) -> Schedule {
        Schedule::Calendar {
            calendar: Calendar {
                month,
                day,
                hour: 9,
                minute: 0,
            },
            timezone: tz.into(),
            until,
        }
    }

    #[test]
    fn a_missing_day_is_named_in_its_place_and_never_fires() {
        // The 31st: February, April and June have none.
        let fires = next_fires(
            &calendar(None, MonthDay::Day(31), "UTC", None),
            utc(2027, 1, 15, 0, 0),
            6,
        )
        .unwrap();
        let seen: Vec<(&str, Option<DateTime<Utc>>)> = fires.iter().map(|f| (f.local.as_str(), f.at)).collect();
        assert_eq!(
            seen,
            vec![
                ("2027-01-31T09:00:00", Some(utc(2027, 1, 31, 9, 0))),
                ("2027-02-31T09:00:00", None),
                ("2027-03-31T09:00:00", Some(utc(2027, 3, 31, 9, 0))),
                ("2027-04-31T09:00:00", None),
                ("2027-05-31T09:00:00", Some(utc(2027, 5, 31, 9, 0))),
                ("2027-06-31T09:00:00", None),
            ]
        );
        assert_eq!(
            fires[1].note.as_deref(),
            Some("February 2027 has no day 31; no run this month")
        );
        assert_eq!(
            fires[3].note.as_deref(),
            Some("April 2027 has no day 31; no run this month")
        );
        // A list names each day a month lacks: the 29th to 31st in February.
        let late = next_fires(&cron("0 9 29-31 2 *", "UTC"), utc(2027, 1, 1, 0, 0), 3).unwrap();
        let days: Vec<&str> = late.iter().map(|f| f.local.as_str()).collect();
        assert_eq!(
            days,
            vec!["2027-02-29T09:00:00", "2027-02-30T09:00:00", "2027-02-31T09:00:00"]
        );
        // What the door and a count of runs read: instants only.
        assert_eq!(
            upcoming(
                &calendar(None, MonthDay::Day(31), "UTC", None),
                utc(2027, 1, 31, 9, 0),
                3
            ),
            vec![utc(2027, 3, 31, 9, 0), utc(2027, 5, 31, 9, 0), utc(2027, 7, 31, 9, 0)]
        );
        // A connector's day-of-month list is read the same way; every day is no list.
        let every_day = next_fires(&cron("0 9 * * *", "UTC"), utc(2027, 2, 27, 0, 0), 3).unwrap();
        assert!(every_day.iter().all(|f| f.at.is_some()), "{every_day:?}");
    }

    #[test]
    fn last_days_nth_and_last_weekdays_and_29_february() {
        let last = upcoming(&calendar(None, MonthDay::Last, "UTC", None), utc(2027, 1, 1, 0, 0), 3);
        assert_eq!(
            last,
            vec![utc(2027, 1, 31, 9, 0), utc(2027, 2, 28, 9, 0), utc(2027, 3, 31, 9, 0)]
        );
        let leap = upcoming(&calendar(None, MonthDay::Last, "UTC", None), utc(2028, 2, 1, 0, 0), 1);
        assert_eq!(leap, vec![utc(2028, 2, 29, 9, 0)]);
        // The first Monday of 2027's first months: 4 January, 1 February, 1 March.
        let first_monday = upcoming(
            &calendar(None, MonthDay::Nth { weekday: 0, nth: 1 }, "UTC", None),
            utc(2027, 1, 1, 0, 0),
            3,
        );
        assert_eq!(
            first_monday,
            vec![utc(2027, 1, 4, 9, 0), utc(2027, 2, 1, 9, 0), utc(2027, 3, 1, 9, 0)]
        );
        // The last Friday: 29 January, 26 February, 26 March 2027.
        let last_friday = upcoming(
            &calendar(None, MonthDay::LastWeekday { weekday: 4 }, "UTC", None),
            utc(2027, 1, 1, 0, 0),
            3,
        );
        assert_eq!(
            last_friday,
            vec![utc(2027, 1, 29, 9, 0), utc(2027, 2, 26, 9, 0), utc(2027, 3, 26, 9, 0)]
        );
        // 29 February: 2028, 2032, ...; 2100 is no leap year: 2096, then 2104.
        let leap_day = calendar(Some(2), MonthDay::Day(29), "Europe/Berlin", None);
        assert_eq!(
            upcoming(&leap_day, utc(2027, 1, 1, 0, 0), 2),
            vec![utc(2028, 2, 29, 8, 0), utc(2032, 2, 29, 8, 0)]
        );
        assert_eq!(
            upcoming(&leap_day, utc(2096, 3, 1, 0, 0), 1),
            vec![utc(2104, 2, 29, 8, 0)]
        );
        let notes = next_fires(&leap_day, utc(2027, 1, 1, 0, 0), 2).unwrap();
        assert_eq!(notes[0].at, None);
        assert_eq!(
            notes[0].note.as_deref(),
            Some("February 2027 has no day 29; no run this month")
        );
        assert_eq!(notes[1].at, Some(utc(2028, 2, 29, 8, 0)));
    }

    #[test]
    fn nothing_fires_at_or_after_the_end_date() {
        let until = NaiveDate::from_ymd_opt(2027, 3, 3).unwrap();
        let daily = Schedule::Cron {
            cron: "0 23 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: Some(until),
        };
        let expression = daily.expression().unwrap();
        assert_eq!(expression.end_date, Some(utc(2027, 3, 3, 23, 0)), "midnight in Berlin");
        assert_eq!(
            upcoming(&daily, utc(2027, 3, 1, 0, 0), 10),
            vec![utc(2027, 3, 1, 22, 0), utc(2027, 3, 2, 22, 0), utc(2027, 3, 3, 22, 0)],
            "the last one is on the until date, 23:00 local"
        );
        assert_eq!(next_fire(&daily, utc(2027, 3, 3, 22, 0)), Ok(None));
        assert!(daily.is_over(utc(2027, 3, 3, 22, 0)));
        assert!(!daily.is_over(utc(2027, 3, 3, 21, 59)));
        // A missing day after the end is not named.
        let monthly = calendar(None, MonthDay::Day(31), "UTC", NaiveDate::from_ymd_opt(2027, 4, 30));
        let fires = next_fires(&monthly, utc(2027, 3, 1, 0, 0), 5).unwrap();
        assert_eq!(instants(&fires), vec![utc(2027, 3, 31, 9, 0)]);
        assert_eq!(fires.len(), 2, "April's missing 31st, then nothing: {fires:?}");
    }

    #[test]
    fn schedulers_cron_rules_are_checked_strictly() {
        for good in [
            "cron(0 9 L * ? *)",
            "cron(0 9 ? * 2#1 *)",
            "cron(0 9 ? * 6L *)",
            "cron(0 9 29 2 ? *)",
            "cron(0,30 9-17 ? * 2-6 *)",
            "cron(5 4 * * ? *)",
            "cron(0 9 ? * 1#5 *)",
        ] {
            assert!(EbCron::parse(good).is_some(), "{good}");
        }
        for bad in [
            "cron(0 9 * * * *)",
            "cron(0 9 ? * ? *)",
            "cron(0 9 1 * 2 *)",
            "cron(0 9 L,15 * ? *)",
            "cron(0 9 L-2 * ? *)",
            "cron(0 9 LW * ? *)",
            "cron(0 9 15W * ? *)",
            "cron(0 9 ? * 3#1,6#3 *)",
            "cron(0 9 ? * 2#1,3 *)",
            "cron(0 9 ? * 2L,3 *)",
            "cron(0 9 ? * 2#6 *)",
            "cron(0 9 ? * 8#1 *)",
            "cron(0 9 ? * 0 *)",
            "cron(0 9 ? * L *)",
            "cron(0 9 ? * MON *)",
            "cron(0 9 ? * 2#1L *)",
            "cron(0 9 * * ?)",
            "cron(0 9 * * ? 2027)",
            "cron(0 24 * * ? *)",
            "cron(0 9 32 * ? *)",
            "cron(0  9 * * ? *)",
            "rate(1 day)",
        ] {
            assert!(EbCron::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn dst_gaps_are_skipped_and_said() {
        // New York springs forward on 2026-03-08 at 02:00.
        let fires = next_fires(&cron("30 2 * * *", "America/New_York"), utc(2026, 3, 7, 0, 0), 3).unwrap();
        assert_eq!(fires[0].at, Some(utc(2026, 3, 7, 7, 30)));
        assert_eq!(fires[1].at, None);
        assert!(
            fires[1]
                .note
                .as_deref()
                .unwrap()
                .contains("2026-03-08 02:30 does not exist")
        );
        assert_eq!(fires[2].at, Some(utc(2026, 3, 9, 6, 30)));
        // Lord Howe springs forward half an hour on 2026-10-04 at 02:00.
        let fires = next_fires(&cron("15 2 * * *", "Australia/Lord_Howe"), utc(2026, 10, 2, 0, 0), 3).unwrap();
        assert_eq!(
            instants(&fires),
            vec![utc(2026, 10, 2, 15, 45), utc(2026, 10, 4, 15, 15)]
        );
    }

    #[test]
    fn the_year_s_first_dst_skip_and_repeat_are_found() {
        // Berlin: forward on 2027-03-28 (02:00 -> 03:00), back on 2027-10-31
        // (03:00 -> 02:00); 02:30 is skipped, then repeated.
        let now = utc(2026, 12, 1, 0, 0);
        let changes = dst_changes(&cron("30 2 * * *", "Europe/Berlin"), now);
        assert_eq!(changes.len(), 2, "{changes:?}");
        assert_eq!(changes[0].at, None);
        assert_eq!(changes[0].local, "2027-03-28T02:30:00");
        assert_eq!(changes[1].at, Some(utc(2027, 10, 31, 0, 30)));
        // 09:00 is never skipped nor repeated; a rate has no zone.
        assert!(dst_changes(&cron("0 9 * * MON-FRI", "Europe/Berlin"), now).is_empty());
        let rate = Schedule::Rate {
            every: 1,
            unit: RateUnit::Hours,
        };
        assert!(dst_changes(&rate, now).is_empty());
        // An October-only schedule meets the repeat and no skip.
        let october = dst_changes(&cron("30 2 * 10 *", "Europe/Berlin"), now);
        assert_eq!(october.len(), 1, "{october:?}");
        assert_eq!(october[0].at, Some(utc(2027, 10, 31, 0, 30)));
    }

    #[test]
    fn dst_overlaps_fire_once_at_the_first() {
        // New York falls back on 2026-11-01 at 02:00.
        let fires = next_fires(&cron("30 1 * * *", "America/New_York"), utc(2026, 10, 31, 0, 0), 3).unwrap();
        assert_eq!(
            instants(&fires),
            vec![
                utc(2026, 10, 31, 5, 30),
                utc(2026, 11, 1, 5, 30),
                utc(2026, 11, 2, 6, 30)
            ]
        );
        assert!(fires[1].note.as_deref().unwrap().contains("twice"));
        // Berlin falls back on 2026-10-25 at 03:00.
        let fires = next_fires(&cron("30 2 * * *", "Europe/Berlin"), utc(2026, 10, 24, 12, 0), 1).unwrap();
        assert_eq!(instants(&fires), vec![utc(2026, 10, 25, 0, 30)]);
        // Lord Howe falls back half an hour on 2026-04-05 at 02:00.
        let fires = next_fires(&cron("45 1 * * *", "Australia/Lord_Howe"), utc(2026, 4, 3, 0, 0), 3).unwrap();
        assert_eq!(
            instants(&fires),
            vec![
                utc(2026, 4, 3, 14, 45),
                utc(2026, 4, 4, 14, 45),
                utc(2026, 4, 5, 15, 15)
            ]
        );
    }

    // The oracle: croner evaluates the declared Unix cron on local times,
    // and Scheduler's DST rule maps them to instants (`fuzzing`'s, which the
    // fuzz targets use too).
    use crate::fuzzing::oracle;

    fn arb_list(min: u8, max: u8) -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_owned()),
            (min..=max).prop_map(|v| v.to_string()),
            (min..=max, min..=max).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
            proptest::collection::btree_set(min..=max, 1..4).prop_map(|s| s
                .iter()
                .map(u8::to_string)
                .collect::<Vec<_>>()
                .join(",")),
            (1u8..=(max - min).max(1)).prop_map(|s| format!("*/{s}")),
        ]
    }

    fn arb_cron() -> impl Strategy<Value = String> {
        let days = prop_oneof![
            Just(("*".to_owned(), "*".to_owned())),
            // Only one day field restricted: what EventBridge can express.
            (1u8..=28, 1u8..=28).prop_map(|(a, b)| (format!("{}-{}", a.min(b), a.max(b)), "*".to_owned())),
            proptest::collection::btree_set(0u8..=6, 1..4).prop_map(|s| (
                "*".to_owned(),
                s.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
            )),
            Just(("*".to_owned(), "MON-FRI".to_owned())),
        ];
        (
            arb_list(0, 59),
            prop_oneof![arb_list(0, 23), Just("1-3".to_owned()), Just("2".to_owned())],
            days,
        )
            .prop_map(|(m, h, (dom, dow))| format!("{m} {h} {dom} * {dow}"))
    }

    fn arb_zone() -> impl Strategy<Value = &'static str> {
        prop_oneof![
            Just("America/New_York"),
            Just("Europe/Berlin"),
            Just("Australia/Lord_Howe")
        ]
    }

    /// Instants around the transitions of 2026 and 2027 in the three zones,
    /// and anywhere in those years.
    fn arb_after() -> impl Strategy<Value = DateTime<Utc>> {
        let transitions = [
            utc(2026, 3, 7, 0, 0),
            utc(2026, 3, 28, 12, 0),
            utc(2026, 4, 4, 0, 0),
            utc(2026, 10, 3, 0, 0),
            utc(2026, 10, 24, 12, 0),
            utc(2026, 10, 31, 12, 0),
            utc(2027, 3, 13, 12, 0),
            utc(2027, 11, 6, 12, 0),
        ];
        prop_oneof![
            (0usize..transitions.len(), 0i64..(36 * 60)).prop_map(move |(i, m)| transitions[i] + Duration::minutes(m)),
            (0i64..(2 * 365 * 24 * 60)).prop_map(|m| utc(2026, 1, 1, 0, 0) + Duration::minutes(m)),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// The EventBridge expression fires exactly when the declared Unix
        /// cron does, DST gaps and overlaps included.
        #[test]
        fn eventbridge_fires_as_the_unix_cron_declares(unix in arb_cron(), zone in arb_zone(), after in arb_after()) {
            let schedule = cron(&unix, zone);
            let ours = instants(&next_fires(&schedule, after, 40).unwrap());
            let theirs = oracle(&unix, Zone::from_str(zone).unwrap(), after, ours.len());
            prop_assert_eq!(ours, theirs, "{} in {}", unix, zone);
        }
    }
}
