//! Use cases: each takes ports, the clock's `now` and a request, applies the
//! domain, and says what to write in which order. No AWS types here.

pub mod admin;
pub mod change;
pub mod create;
pub mod overdue;
pub mod reconcile;
pub mod run;
pub mod schedules;
