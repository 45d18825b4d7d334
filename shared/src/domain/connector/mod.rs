//! A connector's standing work: its declarations, reconcile's plan, the
//! admin's approval, bindings and webhooks.
//!
//! Invariants: one pure function plans reconcile (`reconcile::plan`);
//! narrowings apply at once and widenings wait for an admin
//! (`task::bounds`); a declaration is refused with its reason or taken
//! whole (`declaration`); a need binds to another installed server of the
//! workspace, never the declaring one (`binding`); a connector URL is
//! public `https://` only (`endpoint`); a webhook is verified over its
//! timestamp header's own bytes (`webhook`).

pub mod approval;
pub mod binding;
pub mod declaration;
pub mod endpoint;
pub mod reconcile;
pub mod webhook;
// Test-only: the reconcile model check (no test executable of its own:
// each links the AWS SDK, and CI's disk is finite).
#[cfg(test)]
mod reconcile_model;
