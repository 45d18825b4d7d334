//! `sat describe`.
