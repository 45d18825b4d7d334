//! The human form of `sat`'s answers: tables and words, every instant in
//! the task's zone beside UTC. (`--json` prints the reports' serde form.)

use std::str::FromStr;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use comfy_table::{ContentArrangement, Table, presets};

/// A report a command answers: its machine form is its serde form.
pub trait Report: serde::Serialize {
    /// The human form: tables and words.
    fn human(&self) -> String;
    /// Whether it found something wrong (exit status 3).
    fn findings(&self) -> bool {
        false
    }
}

/// The width of a table printed to a pipe or a file (a terminal's own
/// width wins when there is one).
const PIPE_WIDTH: u16 = 110;

/// A table with a header, in the house style: cells wrap to the
/// terminal's width, or to [`PIPE_WIDTH`] when there is no terminal.
pub fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if table.width().is_none() {
        table.set_width(PIPE_WIDTH);
    }
    table
}

/// `2026-12-07 09:00 CET` in `zone` (UTC when the zone is unknown).
pub fn local(at: DateTime<Utc>, zone: &str) -> String {
    match Tz::from_str(zone) {
        Ok(tz) => at.with_timezone(&tz).format("%a %Y-%m-%d %H:%M %Z").to_string(),
        Err(_) => at.format("%a %Y-%m-%d %H:%M UTC").to_string(),
    }
}

/// An instant in UTC, as every record of the system writes it.
pub fn utc(at: DateTime<Utc>) -> String {
    shared::domain::schedule::format_utc(at)
}

/// `key: value` lines, aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    pairs.iter().map(|(k, v)| format!("{k:width$}  {v}\n")).collect()
}

/// USD, as the budget and the ceiling say it.
pub fn usd(amount: f64) -> String {
    format!("USD {amount:.2}")
}

/// A heading line.
pub fn heading(text: &str) -> String {
    format!("\n{text}\n")
}
