//! See `super`: attacks through the create and schedules payloads.
