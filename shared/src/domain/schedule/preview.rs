//! Next fire times of a schedule, in its zone, as EventBridge Scheduler will
//! fire them, with a word wherever DST skips or repeats a local time. Admins
//! see this before they approve (admin `get`).
//!
//! It evaluates the EventBridge expression the task is scheduled with (not
//! the declared Unix cron), with Scheduler's documented DST rule: a local
//! time that does not exist (spring forward) is skipped; one that happens
//! twice (fall back) fires once, at the first.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::Datelike;
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;

use super::{Expression, RateUnit, Schedule};

/// One entry of a preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fire {
    /// When it fires; `None` for a local time DST skips.
    pub at: Option<DateTime<Utc>>,
    /// The local wall-clock time, in the schedule's zone.
    pub local: NaiveDateTime,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewError {
    #[error("`{0}` is not an EventBridge expression this preview reads")]
    Expression(String),
    #[error("`{0}` is not an IANA time zone")]
    Zone(String),
}

/// An EventBridge `cron(min hour dom month dow year)` as sets.
struct EbCron {
    minutes: BTreeSet<u32>,
    hours: BTreeSet<u32>,
    dom: Option<BTreeSet<u32>>,
    months: BTreeSet<u32>,
    /// 1 = Sunday.
    dow: Option<BTreeSet<u32>>,
}

fn eb_field(text: &str, min: u32, max: u32) -> Option<Option<BTreeSet<u32>>> {
    if text == "?" {
        return Some(None);
    }
    let mut set = BTreeSet::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s > 0)?),
            None => (part, 1),
        };
        let (lo, hi) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
                None => {
                    let a: u32 = r.parse().ok()?;
                    (a, if part.contains('/') { max } else { a })
                }
            },
        };
        if lo < min || hi > max || lo > hi {
            return None;
        }
        set.extend((lo..=hi).step_by(step as usize));
    }
    Some(Some(set))
}

impl EbCron {
    fn parse(expression: &str) -> Option<Self> {
        let inner = expression.strip_prefix("cron(")?.strip_suffix(')')?;
        let f: Vec<&str> = inner.split_whitespace().collect();
        if f.len() != 6 || f[5] != "*" {
            return None;
        }
        let dom = eb_field(f[2], 1, 31)?;
        let dow = eb_field(f[4], 1, 7)?;
        if dom.is_some() == dow.is_some() {
            return None;
        }
        Some(Self {
            minutes: eb_field(f[0], 0, 59)??,
            hours: eb_field(f[1], 0, 23)??,
            dom,
            months: eb_field(f[3], 1, 12)??,
            dow,
        })
    }

    fn fires_on(&self, date: NaiveDate) -> bool {
        self.months.contains(&date.month())
            && self.dom.as_ref().is_none_or(|d| d.contains(&date.day()))
            && self
                .dow
                .as_ref()
                .is_none_or(|d| d.contains(&(date.weekday().num_days_from_sunday() + 1)))
    }
}

/// The next `count` entries after `after`: fires, and the local times DST
/// skips among them (which count too, so a preview never hides them).
pub fn next_fires(schedule: &Schedule, after: DateTime<Utc>, count: usize) -> Result<Vec<Fire>, PreviewError> {
    let expression = schedule
        .expression()
        .map_err(|e| PreviewError::Expression(e.to_string()))?;
    match schedule {
        Schedule::At { at } => Ok((*at > after)
            .then(|| Fire {
                at: Some(*at),
                local: at.naive_utc(),
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
                        local: at.naive_utc(),
                        note: None,
                    }
                })
                .collect())
        }
        Schedule::Cron { .. } => cron_fires(&expression, after, count),
    }
}

/// Evaluates an EventBridge cron expression in its zone.
pub fn cron_fires(expression: &Expression, after: DateTime<Utc>, count: usize) -> Result<Vec<Fire>, PreviewError> {
    let cron =
        EbCron::parse(&expression.expression).ok_or_else(|| PreviewError::Expression(expression.expression.clone()))?;
    let zone = Tz::from_str(&expression.timezone).map_err(|_| PreviewError::Zone(expression.timezone.clone()))?;
    let mut out = Vec::new();
    let mut date = after.with_timezone(&zone).date_naive();
    // A cron that fires at all fires within eight years (Feb 29 included).
    let last = date + Duration::days(366 * 8);
    while out.len() < count && date <= last {
        if cron.fires_on(date) {
            for hour in &cron.hours {
                for minute in &cron.minutes {
                    let Some(local) = date.and_hms_opt(*hour, *minute, 0) else {
                        continue;
                    };
                    let fire = match zone.from_local_datetime(&local) {
                        LocalResult::Single(t) => Fire {
                            at: Some(t.with_timezone(&Utc)),
                            local,
                            note: None,
                        },
                        LocalResult::Ambiguous(first, _) => Fire {
                            at: Some(first.with_timezone(&Utc)),
                            local,
                            note: Some(format!(
                                "{} happens twice as clocks go back; it fires once, the first time",
                                local.format("%H:%M")
                            )),
                        },
                        LocalResult::None => Fire {
                            at: None,
                            local,
                            note: Some(format!(
                                "{} does not exist as clocks go forward; this run is skipped",
                                local.format("%Y-%m-%d %H:%M")
                            )),
                        },
                    };
                    // Skipped times are listed by their local day; fires by instant.
                    let later = match fire.at {
                        Some(at) => at > after,
                        None => local > after.with_timezone(&zone).naive_local(),
                    };
                    if later && out.len() < count {
                        out.push(fire);
                    }
                }
            }
        }
        date += Duration::days(1);
    }
    Ok(out)
}

/// The most fires [`dst_changes`] reads: a year of a cron firing every
/// five minutes, nearly.
const MAX_FIRES_READ: usize = 100_000;

/// The first local time of the coming year (366 days after `now`) that a
/// DST change skips, and the first it repeats, among the schedule's fires,
/// as Scheduler fires them: at most one of each, the skip first. Only a
/// cron has a zone; a one-time or rate schedule has none.
pub fn dst_changes(schedule: &Schedule, now: DateTime<Utc>) -> Vec<Fire> {
    if !matches!(schedule, Schedule::Cron { .. }) {
        return Vec::new();
    }
    let horizon = now + Duration::days(366);
    let fires = next_fires(schedule, now, MAX_FIRES_READ).unwrap_or_default();
    let within = fires.into_iter().take_while(|f| f.at.is_none_or(|at| at <= horizon));
    let (mut skip, mut repeat) = (None, None);
    for fire in within.filter(|f| f.note.is_some()) {
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

/// The instants only (what a test compares with another evaluator).
pub fn instants(fires: &[Fire]) -> Vec<DateTime<Utc>> {
    fires.iter().filter_map(|f| f.at).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use proptest::prelude::*;

    fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
    }

    fn cron(c: &str, tz: &str) -> Schedule {
        Schedule::Cron {
            cron: c.into(),
            timezone: tz.into(),
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
        assert_eq!(changes[0].local.to_string(), "2027-03-28 02:30:00");
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

    /// The oracle: croner evaluates the declared Unix cron on local times,
    /// and Scheduler's DST rule maps them to instants.
    fn oracle(unix: &str, zone: Tz, after: DateTime<Utc>, count: usize) -> Vec<DateTime<Utc>> {
        let cron = croner::Cron::from_str(unix).expect("croner parses");
        let start = after.with_timezone(&zone).naive_local() - Duration::hours(3);
        cron.iter_after(start)
            .filter_map(|local: NaiveDateTime| match zone.from_local_datetime(&local) {
                LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
                LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
                LocalResult::None => None,
            })
            .filter(|t| *t > after)
            .take(count)
            .collect()
    }

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
            let theirs = oracle(&unix, Tz::from_str(zone).unwrap(), after, ours.len());
            prop_assert_eq!(ours, theirs, "{} in {}", unix, zone);
        }
    }
}
