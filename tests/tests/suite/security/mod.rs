//! The security suite: every attack on the trust boundaries that was tried,
//! one test each (SPEC §5, §6, §7). Each test asserts the refusal and that
//! no item, schedule or secret read changed because of it.
//!
//! - `connectors`: installs, webhooks, bindings and connector endpoints.
//! - `create`: the create and schedules payloads.
//! - `runs`: what a run may do and spend, whatever a server or a crash does.

mod connectors;
mod create;
mod runs;
