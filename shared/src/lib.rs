//! The scheduled agent tasks system's library: the domain (pure), the use
//! cases, the ports they need, and (feature `aws`) the AWS adapters and the
//! Lambda start-up helpers. Dependencies point one way:
//! `adapters` -> `app` -> `domain`. See ARCHITECTURE.md.

pub mod app;
pub mod config;
pub mod domain;
pub mod ports;

#[cfg(feature = "aws")]
pub mod adapters;
