//! Logging set-up shared by every Lambda: JSON lines without timestamps
//! (CloudWatch stamps each line), the level from `RUST_LOG` or `info`.
//! Spans carry ids (`task_id`, `workspace`, `occurrence`) as fields; no
//! instruction text, output or token ever goes to a log.
//!
//! `RUST_LOG` takes `Targets` directives (`warn`, `shared=debug,info`): a
//! level per target, without `EnvFilter`'s span and field matchers, whose
//! regex engines would add to every binary.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the subscriber; `directives` are `RUST_LOG`'s, as
/// `config::log_directives` reads them.
pub fn init(directives: Option<String>) {
    // A directive that does not parse falls back to `info`, as before.
    let filter = directives
        .and_then(|directives| directives.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let format = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .with_target(false);
    // A second init (tests that build several apps) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(format).with(filter).try_init();
}
