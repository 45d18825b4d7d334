//! 5-field Unix cron, as a connector declares it, converted exactly to an
//! EventBridge Scheduler `cron(...)` expression (6 fields, `?` rules,
//! day-of-week 1-7 = SUN-SAT), and evaluated to fire times.
//!
//! Invariants: a declaration converts only if EventBridge fires at exactly
//! the times Unix cron would. As in Vixie cron, when the day-of-month or the
//! day-of-week field starts with `*` a day must match both; otherwise either.
//! EventBridge can restrict only one of the two (the other is `?`), so an
//! expression whose days need both is refused rather than approximated.
//! Nicknames (`@daily`), `L`, `W` and `#` are refused.

use std::collections::BTreeSet;

use super::calendar::{month_name, weekday_name};
use chrono::{Datelike, NaiveDateTime, Timelike};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    #[error("a cron expression has 5 fields (minute hour day-of-month month day-of-week), this one has {0}")]
    FieldCount(usize),
    #[error("{field}: `{text}` is not a value, range, list or step of this field ({min}-{max})")]
    Field {
        field: &'static str,
        text: String,
        min: u8,
        max: u8,
    },
    #[error(
        "day-of-month and day-of-week are both restricted: Unix cron fires when either matches, \
         which EventBridge cannot express; restrict only one of them"
    )]
    DomAndDow,
    #[error("`{0}` is not supported: use the 5 numeric or named fields")]
    Unsupported(String),
}

/// Which days fire: every day, or those of a day-of-month set, or those of
/// a day-of-week set (0 = Sunday). Never both: EventBridge cannot say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Days {
    Every,
    OfMonth(BTreeSet<u8>),
    OfWeek(BTreeSet<u8>),
}

/// A parsed Unix cron expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    pub minutes: BTreeSet<u8>,
    pub hours: BTreeSet<u8>,
    pub days: Days,
    pub months: BTreeSet<u8>,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

struct Spec {
    name: &'static str,
    min: u8,
    max: u8,
    names: &'static [&'static str],
    names_from: u8,
}

const MINUTE: Spec = Spec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    names_from: 0,
};
const HOUR: Spec = Spec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    names_from: 0,
};
const DAY_OF_MONTH: Spec = Spec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    names_from: 0,
};
const MONTH: Spec = Spec {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTHS,
    names_from: 1,
};
/// 0 to 7: 7 is Sunday too.
const DAY_OF_WEEK: Spec = Spec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &DAYS,
    names_from: 0,
};

/// A number as cron writes it: decimal digits only (Rust's `u8::parse`
/// also takes a leading `+`, which no cron does).
fn number(text: &str) -> Option<u8> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn value(spec: &Spec, text: &str) -> Option<u8> {
    if let Some(v) = number(text) {
        return (spec.min..=spec.max).contains(&v).then_some(v);
    }
    let upper = text.to_ascii_uppercase();
    spec.names
        .iter()
        .position(|n| *n == upper)
        .map(|i| i as u8 + spec.names_from)
}

/// A field's values, and whether it was written starting with `*`.
fn field(spec: &Spec, text: &str) -> Result<(bool, BTreeSet<u8>), CronError> {
    let bad = || CronError::Field {
        field: spec.name,
        text: text.to_owned(),
        min: spec.min,
        max: spec.max,
    };
    let mut set = BTreeSet::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(number(s).filter(|s| *s > 0).ok_or_else(bad)?)),
            None => (part, None),
        };
        let (lo, hi) = if range == "*" {
            (spec.min, spec.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (value(spec, a).ok_or_else(bad)?, value(spec, b).ok_or_else(bad)?);
            if a > b {
                return Err(bad());
            }
            (a, b)
        } else {
            let a = value(spec, range).ok_or_else(bad)?;
            // `a/n` means from a to the end, every n.
            (a, if step.is_some() { spec.max } else { a })
        };
        let step = step.unwrap_or(1);
        set.extend((lo..=hi).step_by(step as usize));
    }
    Ok((text.starts_with('*'), set))
}

fn all(spec: &Spec, text: &str) -> Result<BTreeSet<u8>, CronError> {
    field(spec, text).map(|(_, set)| set)
}

impl Cron {
    pub fn parse(text: &str) -> Result<Self, CronError> {
        let text = text.trim();
        // Nicknames and Quartz's `?`, `#` have no Unix meaning; `L` and `W`
        // are no values of any field and fail below as such.
        if text.starts_with('@') || text.contains(['#', '?']) {
            return Err(CronError::Unsupported(text.to_owned()));
        }
        let fields: Vec<&str> = text.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount(fields.len()));
        }
        let minutes = all(&MINUTE, fields[0])?;
        let hours = all(&HOUR, fields[1])?;
        let (dom_star, dom) = field(&DAY_OF_MONTH, fields[2])?;
        let months = all(&MONTH, fields[3])?;
        let (dow_star, dow) = field(&DAY_OF_WEEK, fields[4])?;
        // 7 is Sunday too.
        let dow: BTreeSet<u8> = dow.into_iter().map(|d| d % 7).collect();
        let (dom_full, dow_full) = (dom.len() == 31, dow.len() == 7);
        let days = if dom_star || dow_star {
            // A day must match both fields.
            match (dom_full, dow_full) {
                (true, true) => Days::Every,
                (false, true) => Days::OfMonth(dom),
                (true, false) => Days::OfWeek(dow),
                (false, false) => return Err(CronError::DomAndDow),
            }
        } else if dom_full || dow_full {
            // Either field matching is enough, and one matches every day.
            Days::Every
        } else {
            return Err(CronError::DomAndDow);
        };
        Ok(Self {
            minutes,
            hours,
            days,
            months,
        })
    }

    /// Whether the expression fires at this local wall-clock minute.
    pub fn matches(&self, local: NaiveDateTime) -> bool {
        self.minutes.contains(&(local.minute() as u8))
            && self.hours.contains(&(local.hour() as u8))
            && self.fires_on(local.date())
    }

    /// Whether any minute of this local day fires.
    pub fn fires_on(&self, date: chrono::NaiveDate) -> bool {
        self.months.contains(&(date.month() as u8))
            && match &self.days {
                Days::Every => true,
                Days::OfMonth(days) => days.contains(&(date.day() as u8)),
                Days::OfWeek(days) => days.contains(&(date.weekday().num_days_from_sunday() as u8)),
            }
    }

    /// The EventBridge Scheduler expression: `cron(min hour dom month dow *)`.
    pub fn to_eventbridge(&self) -> String {
        let full = |set: &BTreeSet<u8>, min: u8, max: u8| set.len() == usize::from(max - min + 1);
        let list = |set: &BTreeSet<u8>, min: u8, max: u8, shift: u8| {
            if full(set, min, max) {
                "*".to_owned()
            } else {
                compress(set, shift)
            }
        };
        let (dom, dow) = match &self.days {
            Days::Every => ("*".to_owned(), "?".to_owned()),
            Days::OfMonth(d) => (list(d, 1, 31, 0), "?".to_owned()),
            Days::OfWeek(w) => ("?".to_owned(), list(w, 0, 6, 1)),
        };
        format!(
            "cron({} {} {} {} {} *)",
            list(&self.minutes, 0, 59, 0),
            list(&self.hours, 0, 23, 0),
            dom,
            list(&self.months, 1, 12, 0),
            dow
        )
    }
}

/// Day names for words, 0 = Sunday as cron counts.
/// `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Runs of consecutive values as `first to last` (three or more) or
/// single names, in order.
fn runs_in_words(set: &BTreeSet<u8>, name: impl Fn(u8) -> String) -> String {
    let values: Vec<u8> = set.iter().copied().collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        if j >= i + 2 {
            parts.push(format!("{} to {}", name(values[i]), name(values[j])));
        } else {
            parts.extend((i..=j).map(|k| name(values[k])));
        }
        i = j + 1;
    }
    and_list(&parts)
}

/// The step of a set that starts at `min` and runs to the field's end in
/// equal steps that divide its length (`*/15` of minutes: 15), if it is one.
fn even_step(set: &BTreeSet<u8>, min: u8, len: u8) -> Option<u8> {
    let values: Vec<u8> = set.iter().copied().collect();
    let step = match values.as_slice() {
        [first, second, ..] if *first == min => second - first,
        _ => return None,
    };
    let even = step > 0
        && len.is_multiple_of(step)
        && values.len() == usize::from(len / step)
        && values.windows(2).all(|w| w[1] - w[0] == step);
    even.then_some(step)
}

impl Cron {
    /// When it fires, in words a person reads ("at 09:00 on Monday to
    /// Friday", "every 15 minutes"), 24-hour local times; a day of the
    /// month that some months lack is said to be skipped there.
    pub fn in_words(&self) -> String {
        let months = if self.months.len() == 12 {
            String::new()
        } else {
            format!(", in {}", runs_in_words(&self.months, |m| month_name(m).to_owned()))
        };
        format!("{}, {}{months}", self.times_in_words(), self.days_in_words())
    }

    /// The times of day it fires at, in words.
    fn times_in_words(&self) -> String {
        let all_hours = self.hours.len() == 24;
        if all_hours && let Some(step) = even_step(&self.minutes, 0, 60) {
            if step == 1 {
                "every minute".to_owned()
            } else {
                format!("every {step} minutes")
            }
        } else if all_hours && self.minutes.len() == 1 {
            let minute = self.minutes.first().copied().unwrap_or_default();
            format!("every hour at minute {minute}")
        } else if self.minutes.len() == 1
            && let Some(step) = even_step(&self.hours, 0, 24)
        {
            let minute = self.minutes.first().copied().unwrap_or_default();
            format!("every {step} hours at minute {minute}, from 00:{minute:02}")
        } else if self.hours.len() * self.minutes.len() <= 8 {
            let times: Vec<String> = self
                .hours
                .iter()
                .flat_map(|h| self.minutes.iter().map(move |m| format!("{h:02}:{m:02}")))
                .collect();
            format!("at {}", and_list(&times))
        } else {
            let minutes: Vec<String> = self.minutes.iter().map(u8::to_string).collect();
            let hours: Vec<String> = self.hours.iter().map(|h| format!("{h:02}")).collect();
            format!("at minutes {} of hours {}", and_list(&minutes), and_list(&hours))
        }
    }

    /// The days it fires on, in words; a day of the month that some of its
    /// months lack is said to be skipped there.
    fn days_in_words(&self) -> String {
        match &self.days {
            Days::Every => "every day".to_owned(),
            Days::OfWeek(days) => format!("on {}", runs_in_words(days, |d| weekday_name((d + 6) % 7).to_owned())),
            Days::OfMonth(days) => {
                let listed = runs_in_words(days, |d| d.to_string());
                let plural = if days.len() == 1 { "day" } else { "days" };
                let mut text = format!("on {plural} {listed} of the month");
                // A month without the day does not fire on it (SPEC §11's
                // missing-day rule, as EventBridge fires).
                if let Some(last) = days.last().filter(|d| **d >= 29) {
                    let lacking: Vec<u8> = self
                        .months
                        .iter()
                        .copied()
                        .filter(|m| month_length(*m) < *last)
                        .collect();
                    if !lacking.is_empty() {
                        let names: Vec<String> = lacking.iter().map(|m| month_name(*m).to_owned()).collect();
                        text.push_str(&format!(
                            " (day {last} is skipped in {}, which {} fewer days)",
                            and_list(&names),
                            if lacking.len() == 1 { "has" } else { "have" }
                        ));
                    }
                }
                text
            }
        }
    }
}

/// The most days a month has (February: 29, in a leap year).
fn month_length(month: u8) -> u8 {
    match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `1,2,3,5` as `1-3,5`, each value shifted (day-of-week 0-6 to 1-7).
fn compress(set: &BTreeSet<u8>, shift: u8) -> String {
    let values: Vec<u8> = set.iter().map(|v| v + shift).collect();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < values.len() {
        let mut j = i;
        while j + 1 < values.len() && values[j + 1] == values[j] + 1 {
            j += 1;
        }
        parts.push(if j > i + 1 {
            format!("{}-{}", values[i], values[j])
        } else if j == i + 1 {
            format!("{},{}", values[i], values[j])
        } else {
            values[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_follow_the_question_mark_and_day_of_week_rules() {
        let cases = [
            ("0 9 * * MON-FRI", "cron(0 9 ? * 2-6 *)"),
            ("0 9 * * 1-5", "cron(0 9 ? * 2-6 *)"),
            ("30 2 * * *", "cron(30 2 * * ? *)"),
            ("*/15 * * * *", "cron(0,15,30,45 * * * ? *)"),
            ("0 0 1 * *", "cron(0 0 1 * ? *)"),
            ("0 12 1,15 JAN,jul *", "cron(0 12 1,15 1,7 ? *)"),
            ("5 4 * * 0", "cron(5 4 ? * 1 *)"),
            ("5 4 * * 7", "cron(5 4 ? * 1 *)"),
            ("5 4 * * sun,sat", "cron(5 4 ? * 1,7 *)"),
            ("0 22 * * 1-5/2", "cron(0 22 ? * 2,4,6 *)"),
            ("0 0-23/6 * * *", "cron(0 0,6,12,18 * * ? *)"),
            (
                "0 8 */2 * *",
                "cron(0 8 1,3,5,7,9,11,13,15,17,19,21,23,25,27,29,31 * ? *)",
            ),
            ("0 8 */2 * MON", "error"),
            ("0 8 1-31 * 1", "cron(0 8 * * ? *)"),
            ("0 8 * * 0-7", "cron(0 8 * * ? *)"),
        ];
        for (unix, want) in cases {
            let got = Cron::parse(unix)
                .map(|c| c.to_eventbridge())
                .unwrap_or_else(|_| "error".to_owned());
            assert_eq!(got, want, "{unix}");
        }
    }

    #[test]
    fn what_does_not_convert_is_refused_with_a_reason() {
        assert_eq!(Cron::parse("0 9 1 * MON"), Err(CronError::DomAndDow));
        assert_eq!(Cron::parse("0 9 * *"), Err(CronError::FieldCount(4)));
        assert_eq!(Cron::parse("0 9 * * * 2027"), Err(CronError::FieldCount(6)));
        assert!(matches!(Cron::parse("@daily"), Err(CronError::Unsupported(_))));
        assert!(Cron::parse("0 9 L * ?").is_err());
        assert!(Cron::parse("0 9 ? * 2#1").is_err());
        assert!(matches!(
            Cron::parse("60 9 * * *"),
            Err(CronError::Field { field: "minute", .. })
        ));
        assert!(matches!(
            Cron::parse("0 24 * * *"),
            Err(CronError::Field { field: "hour", .. })
        ));
        assert!(matches!(
            Cron::parse("0 9 0 * *"),
            Err(CronError::Field {
                field: "day-of-month",
                ..
            })
        ));
        assert!(matches!(
            Cron::parse("0 9 * 13 *"),
            Err(CronError::Field { field: "month", .. })
        ));
        assert!(matches!(
            Cron::parse("0 9 * * FRI-MON"),
            Err(CronError::Field {
                field: "day-of-week",
                ..
            })
        ));
        assert!(matches!(Cron::parse("0 9 * * */0"), Err(CronError::Field { .. })));
        // Found by the `cron` fuzz target: a `+` sign is no cron syntax.
        for signed in ["*/+15 * * * *", "+5 9 * * *", "0 9 * * +1-5", "0 9 1-+5 * *"] {
            assert!(matches!(Cron::parse(signed), Err(CronError::Field { .. })), "{signed}");
        }
    }

    #[test]
    fn schedules_read_as_words() {
        let cases = [
            ("0 9 * * MON-FRI", "at 09:00, on Monday to Friday"),
            ("*/15 * * * *", "every 15 minutes, every day"),
            ("* * * * *", "every minute, every day"),
            ("5 * * * *", "every hour at minute 5, every day"),
            ("0 */6 * * *", "every 6 hours at minute 0, from 00:00, every day"),
            ("0 9,17 * * 1", "at 09:00 and 17:00, on Monday"),
            ("30 2 1 * *", "at 02:30, on day 1 of the month"),
            (
                "0 8 1,15 JAN,JUL *",
                "at 08:00, on days 1 and 15 of the month, in January and July",
            ),
            ("0 8 * 3-5 SAT,SUN", "at 08:00, on Sunday and Saturday, in March to May"),
            (
                "0 9 31 * *",
                "at 09:00, on day 31 of the month (day 31 is skipped in February, April, June, September and November, which have fewer days)",
            ),
            ("0 9 30 1 *", "at 09:00, on day 30 of the month, in January"),
            (
                "0,30 8-17 * * *",
                "at minutes 0 and 30 of hours 08, 09, 10, 11, 12, 13, 14, 15, 16 and 17, every day",
            ),
        ];
        for (cron, words) in cases {
            assert_eq!(Cron::parse(cron).unwrap().in_words(), words, "{cron}");
        }
    }
}
