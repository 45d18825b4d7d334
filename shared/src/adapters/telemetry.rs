//! Logging set-up shared by every Lambda: JSON lines without timestamps
//! (CloudWatch stamps each line), the level from `RUST_LOG` or `info`.
//! Spans carry ids (`task_id`, `workspace`, `occurrence`) as fields; no
//! instruction text, output or token ever goes to a log.

use tracing_subscriber::EnvFilter;

pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // A second init (tests that build several apps) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .with_target(false)
        .try_init();
}
