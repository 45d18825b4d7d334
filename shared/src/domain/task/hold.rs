//! A hold stops a task from running for a reason the runtime itself owns.
//!
//! Invariants: only the runtime (reconcile, and create for nothing) places or
//! lifts a hold, and it lifts a reason only when that reason's own cause has
//! cleared; an admin's pause lives in `overrides`, never here. A held task is
//! skipped at the door whatever the reason. Stored as the top-level `hold` map
//! `reason -> {since, detail}` so an operator reads it in the console.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Why the runtime holds a task (SPEC §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    /// The prompt left `prompts/list`, or lost its marker.
    Withdrawn,
    /// A new declaration waits for an admin's first approval.
    AwaitingApproval,
    /// A release added a required argument the admin has not given a value for.
    AwaitingArgument,
    /// A connector bound to one of the task's needs was uninstalled.
    NeedUnbound,
}

impl HoldReason {
    pub const ALL: [HoldReason; 4] = [
        HoldReason::Withdrawn,
        HoldReason::AwaitingApproval,
        HoldReason::AwaitingArgument,
        HoldReason::NeedUnbound,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::Withdrawn => "withdrawn",
            HoldReason::AwaitingApproval => "awaiting_approval",
            HoldReason::AwaitingArgument => "awaiting_argument",
            HoldReason::NeedUnbound => "need_unbound",
        }
    }
}

/// When a hold reason was placed, and what it concerns, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldEntry {
    pub since: DateTime<Utc>,
    pub detail: String,
}

/// The set of active hold reasons. Empty means not held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Hold(BTreeMap<HoldReason, HoldEntry>);

impl Hold {
    pub fn is_held(&self) -> bool {
        !self.0.is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn has(&self, reason: HoldReason) -> bool {
        self.0.contains_key(&reason)
    }

    pub fn entries(&self) -> impl Iterator<Item = (HoldReason, &HoldEntry)> {
        self.0.iter().map(|(r, e)| (*r, e))
    }

    /// Places a reason. An existing reason keeps its original `since` (the
    /// task has been held for that long) and takes the newer detail.
    pub fn place(&mut self, reason: HoldReason, now: DateTime<Utc>, detail: impl Into<String>) {
        let detail = detail.into();
        self.0
            .entry(reason)
            .and_modify(|e| e.detail.clone_from(&detail))
            .or_insert(HoldEntry { since: now, detail });
    }

    /// Lifts one reason; the others stay. Returns whether it was present.
    pub fn lift(&mut self, reason: HoldReason) -> bool {
        self.0.remove(&reason).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn place_keeps_since_and_lift_removes_only_its_reason() {
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let t1 = Utc.with_ymd_and_hms(2026, 1, 2, 0, 0, 0).unwrap();
        let mut hold = Hold::default();
        assert!(!hold.is_held());
        hold.place(HoldReason::Withdrawn, t0, "gone from prompts/list");
        hold.place(HoldReason::AwaitingArgument, t0, "argument `repo`");
        hold.place(HoldReason::Withdrawn, t1, "marker removed");
        let (_, entry) = hold.entries().find(|(r, _)| *r == HoldReason::Withdrawn).unwrap();
        assert_eq!(entry.since, t0);
        assert_eq!(entry.detail, "marker removed");
        assert!(hold.lift(HoldReason::Withdrawn));
        assert!(!hold.lift(HoldReason::Withdrawn));
        assert!(hold.has(HoldReason::AwaitingArgument));
        assert!(hold.is_held());
    }

    #[test]
    fn serialises_as_a_map_of_reason_names() {
        let mut hold = Hold::default();
        let t0 = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        hold.place(HoldReason::NeedUnbound, t0, "summary_channel");
        let json = serde_json::to_value(&hold).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"need_unbound": {"since": "2026-01-01T00:00:00Z", "detail": "summary_channel"}})
        );
        for reason in HoldReason::ALL {
            assert_eq!(serde_json::to_value(reason).unwrap(), reason.as_str());
        }
    }
}
