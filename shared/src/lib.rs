//! The scheduled agent tasks system's library: the domain (pure), the use
//! cases, the ports they need, and (feature `aws`) the AWS adapters and the
//! Lambda start-up helpers. Dependencies point inward: `app` uses the
//! `ports` and the `domain`; `adapters` implement the ports with the
//! domain and never import `app`; the `domain` imports none of them
//! (`infra/scripts/test.sh` checks both). See ARCHITECTURE.md.

pub mod app;
pub mod config;
pub mod domain;
pub mod ports;
pub mod trace;

#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;

#[cfg(feature = "aws")]
pub mod adapters;

/// An error with its `#[source]` chain on one line, for the one log line
/// written where the error is handled.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
