//! The domain: what the spec names, as pure code. No I/O, no AWS SDK, the
//! clock passed in as `now`. `cargo check -p shared --no-default-features`
//! proves it builds without the SDK.

pub mod agent;
pub mod agent_loop;
pub mod approval;
pub mod bounds;
pub mod budget;
pub mod declaration;
pub mod descriptor;
pub mod door;
pub mod endpoint;
pub mod history;
pub mod hold;
pub mod idempotency;
pub mod install;
pub mod limits;
pub mod model;
pub mod notification;
pub mod occurrence;
pub mod overrides;
pub mod payload;
pub mod reconcile;
// Test-only: the reconcile model check (no test executable of its own:
// each links the AWS SDK, and CI's disk is finite).
#[cfg(test)]
mod reconcile_model;
pub mod recurrence;
pub mod redelivery;
pub mod reminder;
pub mod schedule;
pub mod task;
pub mod webhook;
