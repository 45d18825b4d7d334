//! What operators and people read back about runs.
//!
//! Invariants: every occurrence of a task that fires is accounted for by
//! the missed-occurrence check, once (`overdue`, SPEC §14); run records are
//! read back with reasons in words, a reminder's text only by its owner
//! (`history`).

pub mod history;
pub mod overdue;
