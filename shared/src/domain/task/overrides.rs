//! The admin's overrides of a task: a pause and a tombstone, with who set them.
//!
//! Invariants: only an admin, or a reminder's owner for their own reminder,
//! writes these, through [`OverrideEdit`]; reconcile never does, and
//! a tombstoned (`deleted`) task is never re-created or re-enabled by the
//! runtime. Stored as the top-level `override` map (the file is named
//! `overrides` because `override` is a Rust keyword).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Overrides {
    #[serde(default)]
    pub paused: bool,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// Who set the pause that holds now (`by` names the latest editor of
    /// any flag): a reminder's owner resumes only a pause of their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused_by: Option<String>,
    /// Who deleted the task, while it is deleted (the first to: a second
    /// delete changes nothing): an admin restores no reminder its owner
    /// cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_by: Option<String>,
}

impl Overrides {
    /// Who paused the task, while it is paused.
    pub fn pauser(&self) -> Option<&str> {
        self.paused
            .then(|| self.paused_by.as_deref().or(self.by.as_deref()))
            .flatten()
    }

    /// Who deleted the task, while it is deleted (an item written before
    /// `deleted_by` names its latest editor).
    pub fn deleter(&self) -> Option<&str> {
        self.deleted
            .then(|| self.deleted_by.as_deref().or(self.by.as_deref()))
            .flatten()
    }
}

impl Overrides {
    /// Whether any override is set; an unset override is not stored.
    pub fn is_set(&self) -> bool {
        self.paused || self.deleted
    }
}

/// One change of a task's overrides, by a workspace admin or, for their own
/// reminder, its owner (SPEC §8, §11). The one place overrides are edited.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OverrideEdit {
    Pause { note: Option<String> },
    Resume,
    Delete { note: Option<String> },
    Restore,
}

impl OverrideEdit {
    /// The overrides after this edit by `by` at `now`; `None` when nothing
    /// is left to store (no pause, no tombstone, no note).
    pub fn apply(self, current: Option<&Overrides>, by: &str, now: DateTime<Utc>) -> Option<Overrides> {
        let mut overrides = current.cloned().unwrap_or_default();
        match self {
            OverrideEdit::Pause { note } => {
                overrides.paused = true;
                overrides.paused_by = Some(by.to_owned());
                overrides.note = note;
            }
            OverrideEdit::Resume => {
                overrides.paused = false;
                overrides.paused_by = None;
                overrides.note = None;
            }
            OverrideEdit::Delete { note } => {
                if !overrides.deleted {
                    overrides.deleted_by = Some(by.to_owned());
                }
                overrides.deleted = true;
                overrides.note = note;
            }
            OverrideEdit::Restore => {
                overrides.deleted = false;
                overrides.deleted_by = None;
            }
        }
        overrides.by = Some(by.to_owned());
        overrides.at = Some(now);
        (overrides.is_set() || overrides.note.is_some()).then_some(overrides)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn each_edit_sets_its_flag_and_who_and_an_empty_override_is_not_stored() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap();
        let paused = OverrideEdit::Pause {
            note: Some("audit".into()),
        }
        .apply(None, "adm_1", now)
        .unwrap();
        assert!(paused.paused && !paused.deleted);
        assert_eq!(
            (paused.note.as_deref(), paused.by.as_deref(), paused.at),
            (Some("audit"), Some("adm_1"), Some(now))
        );
        assert_eq!(
            OverrideEdit::Resume.apply(Some(&paused), "usr_1", now),
            None,
            "nothing left to store"
        );
        let deleted = OverrideEdit::Delete { note: None }
            .apply(Some(&paused), "usr_1", now)
            .unwrap();
        assert!(
            deleted.paused && deleted.deleted,
            "a tombstone keeps the pause under it"
        );
        let restored = OverrideEdit::Restore.apply(Some(&deleted), "adm_1", now).unwrap();
        assert!(restored.paused && !restored.deleted);
        assert_eq!(
            restored.pauser(),
            Some("adm_1"),
            "the pause is still the one adm_1 set, whoever edited since"
        );
        let owners = OverrideEdit::Pause { note: None }.apply(None, "usr_1", now).unwrap();
        let restored = OverrideEdit::Restore.apply(Some(&owners), "adm_1", now).unwrap();
        assert_eq!(
            restored.pauser(),
            Some("usr_1"),
            "a restore does not take the owner's pause over"
        );
        let cases = [
            (OverrideEdit::Pause { note: None }, true, false),
            (OverrideEdit::Resume, false, false),
            (OverrideEdit::Delete { note: None }, false, true),
            (OverrideEdit::Restore, false, false),
        ];
        for (edit, paused, deleted) in cases {
            let after = edit.clone().apply(None, "x", now);
            assert_eq!(after.as_ref().is_some_and(|o| o.paused), paused, "{edit:?}");
            assert_eq!(after.as_ref().is_some_and(|o| o.deleted), deleted, "{edit:?}");
        }
    }
}
