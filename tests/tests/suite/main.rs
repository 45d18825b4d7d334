//! The integration suite: one test binary, one module per area, so the
//! workspace links the AWS SDK into as few test executables as it can.

mod approvals;
mod bounded;
mod budget;
mod caching;
mod completion;
mod conformance;
mod converse;
mod create;
mod create_crash;
mod docs;
mod events;
mod fleet;
mod harness;
mod herd;
mod interop;
mod journal;
mod lifecycle;
mod operations;
mod overdue;
mod pace;
mod person;
mod reconcile;
mod runner;
mod schedules;
mod security;
mod sim;
mod store;
mod template;
mod tls;
mod traces;
mod upgrade;
mod webhooks;
