//! `sat verify`.
