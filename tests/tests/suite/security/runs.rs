//! See `super`: attacks on what a run may do and spend.
