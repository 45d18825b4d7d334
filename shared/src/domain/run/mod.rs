//! An occurrence's delivery, from the runs queue's message to its record.
//!
//! Invariants: the door decides from the task as read and the message's
//! instant alone (`door`); an occurrence runs at most once (the claim on the
//! task item, `task::claim`) and is recorded once (`occurrence::RunRecord`);
//! the agent loop never exceeds the run's limits, budget or held bytes
//! (`agent_loop`); the settle's plan completes only what the occurrence
//! finishes (`settlement`); the fleet's model requests keep the pace
//! (`pace`); a task's schedule is built in one place for every writer
//! (`definition`).

pub mod agent;
pub mod agent_loop;
pub mod definition;
pub mod door;
pub mod gate;
pub mod journal;
pub mod model;
pub mod notification;
pub mod occurrence;
pub mod pace;
pub mod redelivery;
pub mod settlement;
