//! The human form of `sat`'s answers: tables and words, every instant in
//! the task's zone beside UTC. (`--json` prints the reports' serde form.)

use std::str::FromStr;

use chrono::{DateTime, Utc};
use comfy_table::{ContentArrangement, Table, presets};
use shared::domain::schedule::zone::Zone;

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
    match Zone::from_str(zone) {
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

/// A task's budget in words: a run's and a month's, or none.
pub fn budget(budget: Option<shared::domain::task::budget::Budget>) -> String {
    budget.map_or_else(
        || "none".to_owned(),
        |b| format!("{} a run, {} a month", usd(b.max_usd_per_run), usd(b.max_usd_per_month)),
    )
}

/// A heading line.
pub fn heading(text: &str) -> String {
    format!("\n{text}\n")
}

/// Whether `c` changes what a terminal shows rather than showing itself:
/// a control character (ESC starts the sequences that move the cursor,
/// rewrite lines or set the clipboard) or a bidirectional override or
/// isolate (which reorders the text around it).
fn acts_on_the_terminal(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// `text` as a terminal may print it: every character that would act on
/// the terminal instead of showing (see [`acts_on_the_terminal`]) is
/// written as its escape (`\u{1b}`), so text a connector server or an
/// admin wrote shows as what it is. All human output goes through it.
pub fn terminal_safe(text: &str) -> String {
    if !text.chars().any(acts_on_the_terminal) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if acts_on_the_terminal(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_would_act_on_the_terminal_is_shown_escaped() {
        // A clipboard write (OSC 52), a line rewrite, a right-to-left
        // override that would show "accepted" for "detpecca".
        let hostile = "ok\u{1b}]52;c;Y3VybA==\u{7}\r\u{1b}[2Kaccepted \u{202E}detpecca\u{202C}";
        let safe = terminal_safe(hostile);
        assert!(!safe.chars().any(acts_on_the_terminal), "{safe}");
        assert_eq!(
            safe,
            "ok\\u{1b}]52;c;Y3VybA==\\u{7}\\u{d}\\u{1b}[2Kaccepted \\u{202e}detpecca\\u{202c}"
        );
        let table = "┌─┐\n│ é 名 │\n";
        assert_eq!(terminal_safe(table), table, "lines, box drawing and letters pass");
    }
}
