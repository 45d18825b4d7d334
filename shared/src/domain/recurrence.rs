//! A recurring reminder: `daily` at a local time, or `weekly` on some days at
//! a local time, in an IANA zone (SPEC §11). "Every day at 7pm in Berlin".
//!
//! Invariants: a recurrence is stored as the task's `Schedule::Cron` with a
//! canonical Unix cron (`M H * * *`, or `M H * * d,d` with 0 = Sunday) in its
//! zone, so the Scheduler expression, the fire-time preview and Scheduler's
//! DST rule are those of `schedule` (one evaluator, not two); and it reads
//! back from that cron exactly ([`Recurrence::of`]). A local time that a DST
//! change skips or repeats is found by the same preview and said in words.
//! Called by `reminder` (create and update) and the schedules use case.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde_json::Value;

use super::schedule::Schedule;

/// Days as the schedules surface spells them, Monday first.
pub const DAYS: [&str; 7] = ["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];

/// A recurrence: which days (`None`: every day), the local time and the zone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recurrence {
    /// Indexes into [`DAYS`] (0 = Monday); `None` for a daily reminder.
    pub days: Option<BTreeSet<u8>>,
    pub hour: u8,
    pub minute: u8,
    pub timezone: String,
}

/// Why a `daily` or `weekly` value is refused (`invalid_schedule`).
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
    match Tz::from_str(text) {
        Ok(_) if !text.is_empty() => Ok(text.to_owned()),
        _ => refuse(format!(
            "timezone `{text}` is not an IANA time zone (e.g. `Europe/Berlin`)"
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

impl Recurrence {
    /// `{"time": "HH:MM", "timezone": "<IANA>"}`.
    pub fn daily(value: &Value) -> Result<Self, RecurrenceError> {
        let map = object(value, "daily", &["time", "timezone"])?;
        let (hour, minute) = parse_time(text_field(map, "daily", "time")?)?;
        let timezone = parse_zone(text_field(map, "daily", "timezone")?)?;
        Ok(Self {
            days: None,
            hour,
            minute,
            timezone,
        })
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
        let (hour, minute) = parse_time(text_field(map, "weekly", "time")?)?;
        let timezone = parse_zone(text_field(map, "weekly", "timezone")?)?;
        Ok(Self {
            days: Some(days),
            hour,
            minute,
            timezone,
        })
    }

    /// The task schedule: a canonical Unix cron in the zone.
    pub fn to_schedule(&self) -> Schedule {
        let dow = match &self.days {
            None => "*".to_owned(),
            // Unix cron counts from Sunday = 0; ours from Monday = 0.
            Some(days) => {
                let mut unix: Vec<u8> = days.iter().map(|d| (d + 1) % 7).collect();
                unix.sort_unstable();
                unix.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
            }
        };
        Schedule::Cron {
            cron: format!("{} {} * * {dow}", self.minute, self.hour),
            timezone: self.timezone.clone(),
        }
    }

    /// Reads a recurrence back from a schedule [`Self::to_schedule`] wrote.
    pub fn of(schedule: &Schedule) -> Option<Self> {
        let Schedule::Cron { cron, timezone } = schedule else {
            return None;
        };
        let fields: Vec<&str> = cron.split(' ').collect();
        let [minute, hour, "*", "*", dow] = fields.as_slice() else {
            return None;
        };
        let days = match *dow {
            "*" => None,
            list => Some(
                list.split(',')
                    .map(|d| d.parse::<u8>().ok().filter(|d| *d < 7).map(|d| (d + 6) % 7))
                    .collect::<Option<BTreeSet<u8>>>()?,
            ),
        };
        let recurrence = Self {
            days,
            hour: hour.parse().ok()?,
            minute: minute.parse().ok()?,
            timezone: timezone.clone(),
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

    /// As the summary shows it: `{"daily": {...}}` or `{"weekly": {...}}`.
    pub fn view(&self) -> ScheduleView {
        match &self.days {
            None => ScheduleView::Daily {
                time: self.time(),
                timezone: self.timezone.clone(),
            },
            Some(days) => ScheduleView::Weekly {
                days: days.iter().map(|d| DAYS[usize::from(*d)]).collect(),
                time: self.time(),
                timezone: self.timezone.clone(),
            },
        }
    }

    /// Words for the local times of the coming year that a DST change skips
    /// or repeats, as Scheduler fires them: at most one of each kind.
    pub fn dst_notes(&self, now: DateTime<Utc>) -> Vec<String> {
        super::schedule::preview::dst_changes(&self.to_schedule(), now)
            .into_iter()
            .map(|fire| {
                let day = fire.local.format("%Y-%m-%d");
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
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
                timezone: "Europe/Berlin".into()
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
                timezone: "America/New_York".into()
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
                timezone: "UTC".into()
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
        let notes = gap.dst_notes(now);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("2027-03-14") && notes[0].contains("skipped"),
            "{notes:?}"
        );
        let twice = Recurrence::daily(&json!({"time": "01:30", "timezone": "America/New_York"})).unwrap();
        let notes = twice.dst_notes(now);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("2027-11-07") && notes[0].contains("twice"),
            "{notes:?}"
        );
        let calm = Recurrence::daily(&json!({"time": "19:00", "timezone": "America/New_York"})).unwrap();
        assert!(calm.dst_notes(now).is_empty());
        let utc = Recurrence::daily(&json!({"time": "02:30", "timezone": "UTC"})).unwrap();
        assert!(utc.dst_notes(now).is_empty());
    }
}

/// A reminder's schedule as its owner reads it (SPEC §11): `{"at": <UTC>}`,
/// `{"daily": {"time", "timezone"}}` or `{"weekly": {"days", "time",
/// "timezone"}}`; any other schedule as it is stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleView {
    At(String),
    Daily {
        time: String,
        timezone: String,
    },
    Weekly {
        days: Vec<&'static str>,
        time: String,
        timezone: String,
    },
    #[serde(untagged)]
    Other(Schedule),
}

impl ScheduleView {
    pub fn of(schedule: &Schedule) -> Self {
        match schedule {
            Schedule::At { at } => ScheduleView::At(super::schedule::format_utc(*at)),
            other => Recurrence::of(other).map_or_else(|| ScheduleView::Other(other.clone()), |r| r.view()),
        }
    }
}
