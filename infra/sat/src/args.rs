//! What `sat`'s arguments parse into beyond clap's own types.

/// A duration on the command line: `2m`, `90s`, `1h 30m`.
pub fn duration(text: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is not a duration such as 90s or 2m: {e}"))
}
