//! `sat redrive`.
