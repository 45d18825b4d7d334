//! A task is standing or one-time work that the runner executes on schedule:
//! a `reminder` a chat user created, or a `connector` task reconciled from a
//! scheduled prompt that a connector server declares.
//!
//! Invariants:
//! - A task id is derived, never random: a reminder's from (workspace,
//!   principal, idempotency key), a connector task's from (workspace, server,
//!   prompt). Retries and reconciles therefore land on the same item, and the
//!   task's Scheduler schedule carries the same name.
//! - `spec` holds the approved bounds and is what runs; `pending` never runs.
//! - `hold` is the runtime's, `override` the admin's; `state` is derived from
//!   them by [`Task::state`] and only written for the console.
//! - `version` grows by one with every write, and every write but the first is
//!   conditional on the version read.

// What the task item carries, and the rules that change it.
pub mod bounds;
pub mod budget;
pub mod ceiling;
pub mod claim;
pub mod edit;
pub mod explain;
pub mod hold;
pub mod idempotency;
pub mod install;
pub mod limits;
pub mod overrides;
pub mod run_now;
pub mod skip;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::schedule::Schedule;
use crate::domain::task::budget::Budget;
use crate::domain::task::claim::Claim;
use crate::domain::task::hold::Hold;
use crate::domain::task::limits::Limits;
use crate::domain::task::overrides::Overrides;
use crate::domain::task::run_now::RunNow;
use crate::domain::task::skip::SkipNext;

/// A task's id: a kind prefix and 32 hex digits of a SHA-256 over its natural key.
/// Also the name of the task's Scheduler schedule (at most 64 characters).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TaskId(String);

impl TaskId {
    fn derive(prefix: &str, parts: &[&str]) -> Self {
        let mut hasher = Sha256::new();
        for part in parts {
            // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part.as_bytes());
        }
        let digest = hex::encode(hasher.finalize());
        Self(format!("{prefix}_{}", &digest[..32]))
    }

    /// The reminder a principal creates with an idempotency key.
    pub fn for_reminder(workspace: &str, principal: &str, idempotency_key: &str) -> Self {
        Self::derive("rem", &[workspace, principal, idempotency_key])
    }

    /// How every connector task's id starts (a reminder's starts `rem_`).
    pub const CONNECTOR_PREFIX: &'static str = "con_";

    /// The task of a prompt declared by a server in a workspace.
    pub fn for_connector(workspace: &str, server: &str, prompt: &str) -> Self {
        Self::derive("con", &[workspace, server, prompt])
    }

    /// Takes an id as stored or as a caller names it.
    pub fn parse(text: &str) -> Option<Self> {
        let (prefix, digest) = text.split_once('_')?;
        let ok = matches!(prefix, "rem" | "con")
            && digest.len() == 32
            && digest.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase());
        ok.then(|| Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the id names a reminder (its kind is in its prefix).
    pub fn is_reminder(&self) -> bool {
        self.0.starts_with("rem_")
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskKind {
    Reminder,
    Connector,
}

/// Who owns a task and acts when it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Provenance {
    /// A user principal, through a chat backend's create call.
    User { principal: String },
    /// The connector principal: an installed connector acting as itself.
    Connector {
        install_id: String,
        server: String,
        prompt: String,
    },
}

impl Provenance {
    /// The scheduled prompt a connector task runs; none for a reminder.
    pub fn prompt(&self) -> Option<&str> {
        match self {
            Provenance::Connector { prompt, .. } => Some(prompt),
            Provenance::User { .. } => None,
        }
    }
}

/// The agent a reminder was created by, pinned at create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentPin {
    pub id: String,
    pub version: String,
    pub policy_profile: String,
}

/// The record that a person agreed to a task's bounds: the chat user who
/// approved a reminder's concrete call, or the workspace admin who approved a
/// connector's declared bounds (`approval::approve`). No task runs without one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The approval's id in the system that asked the person.
    pub id: String,
    pub approved_at: DateTime<Utc>,
    /// Who approved, when it was not the task's own principal (an admin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Tools the admin gated for this task's runs ("ask first",
    /// `domain::run::gate`): by the server's name for the tool, or the name
    /// a run offers it under (`<server>__<tool>`, for a bound connector's).
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub ask_first: BTreeSet<String>,
}

/// The approved bounds of a task: what the runner may do, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    pub schedule: Schedule,
    /// The declaring server's own tools the run may call. Empty for reminders.
    #[serde(default)]
    pub tools: BTreeSet<String>,
    pub limits: Limits,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// Approved values of the prompt's arguments.
    #[serde(default)]
    pub arguments: BTreeMap<String, String>,
    /// Needs the declaration states, in words: id -> description.
    #[serde(default)]
    pub needs: BTreeMap<String, String>,
    /// Need id -> bound install id, or `None` when the admin left it unbound.
    #[serde(default)]
    pub bindings: BTreeMap<String, Option<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentPin>,
    /// Scopes delegated to the run. Reminders request the empty set.
    #[serde(default)]
    pub scopes: BTreeSet<String>,
}

/// A declared change that widens the approved bounds and waits for an admin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    pub spec: Spec,
    pub since: DateTime<Utc>,
}

/// The state shown in the console, derived from the rest of the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskState {
    Scheduled,
    Held,
    Paused,
    Deleted,
    Completed,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Scheduled => "scheduled",
            TaskState::Held => "held",
            TaskState::Paused => "paused",
            TaskState::Deleted => "deleted",
            TaskState::Completed => "completed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub task_id: TaskId,
    pub workspace: String,
    pub kind: TaskKind,
    pub provenance: Provenance,
    /// Never empty in a stored task; left empty (and out) where a
    /// reminder is shown to an admin (SPEC §8).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
    /// A reminder's instruction. Connector tasks fetch theirs with
    /// `prompts/get` at every run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    pub spec: Spec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<Pending>,
    #[serde(default, skip_serializing_if = "Hold::is_empty")]
    pub hold: Hold,
    #[serde(rename = "override", default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<Overrides>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// When a one-time task's only occurrence finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<DateTime<Utc>>,
    /// The next occurrence its owner (a reminder) or an admin (a connector
    /// task) skips (`domain::task::skip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_next: Option<SkipNext>,
    /// Extra occurrences requested with run now, by occurrence key
    /// (`domain::task::run_now`): the door accepts them as the task's own.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub run_now: BTreeMap<String, RunNow>,
    /// Reconcile's record of the prompt's arguments: name -> required.
    #[serde(default)]
    pub prompt_arguments: BTreeMap<String, bool>,
    /// Why the server's latest declaration of this prompt was refused, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declaration_error: Option<String>,
    /// Runtime bookkeeping: occurrence -> its claim (lease, then outcome).
    /// Always stored, even empty, so the claim can set one entry in place.
    #[serde(default)]
    pub claims: BTreeMap<String, Claim>,
    /// Runtime bookkeeping: period (`YYYY-MM`) -> USD committed (spent plus
    /// reserved). Always stored, even empty, for the same reason.
    #[serde(default)]
    pub budget_used: BTreeMap<String, f64>,
    pub version: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// A reminder's create idempotency key: its record expires with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_with: Option<String>,
    /// Unix seconds: DynamoDB's TTL removes a finished (completed or
    /// cancelled) reminder after this (`RETENTION_DAYS`, SPEC §3). Never
    /// set on a connector task: a tombstone must outlive every release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// The first occurrence the missed-occurrence check has not accounted
    /// for yet (`domain::operations::overdue`); none while the task does not fire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due: Option<DateTime<Utc>>,
}

impl Task {
    /// A new task at version 1, with no runtime state yet: no hold, no
    /// override, no pending change, no claims.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        task_id: TaskId,
        workspace: String,
        kind: TaskKind,
        provenance: Provenance,
        title: String,
        instruction: Option<String>,
        spec: Spec,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            task_id,
            workspace,
            kind,
            provenance,
            title,
            instruction,
            spec,
            pending: None,
            hold: Hold::default(),
            overrides: None,
            approval: None,
            completed_at: None,
            skip_next: None,
            run_now: BTreeMap::new(),
            prompt_arguments: BTreeMap::new(),
            declaration_error: None,
            claims: BTreeMap::new(),
            budget_used: BTreeMap::new(),
            version: 1,
            created_at: now,
            updated_at: now,
            created_with: None,
            ttl: None,
            due: None,
        }
    }

    /// Whether this is a reminder that will never run again: completed or
    /// cancelled. Its text is not kept forever.
    pub fn is_finished_reminder(&self) -> bool {
        self.kind == TaskKind::Reminder && matches!(self.state(), TaskState::Completed | TaskState::Deleted)
    }

    /// The expiry a task should carry after a change at `now`: a finished
    /// reminder keeps the one it has or expires `retention` from now; any
    /// other task (a restored reminder too) carries none.
    pub fn expiry_after_change(&self, now: DateTime<Utc>, retention: chrono::Duration) -> Option<i64> {
        self.is_finished_reminder()
            .then(|| self.ttl.unwrap_or((now + retention).timestamp()))
    }

    /// The derived state. A tombstone wins over everything; a finished
    /// one-time task is completed whatever else is set; an admin's pause is
    /// shown before the runtime's hold, since it is the one a person must undo.
    pub fn state(&self) -> TaskState {
        let overrides = self.overrides.clone().unwrap_or_default();
        if overrides.deleted {
            TaskState::Deleted
        } else if self.completed_at.is_some() {
            TaskState::Completed
        } else if overrides.paused {
            TaskState::Paused
        } else if self.hold.is_held() {
            TaskState::Held
        } else {
            TaskState::Scheduled
        }
    }

    /// Whether the task's Scheduler schedule should be enabled.
    pub fn should_fire(&self) -> bool {
        self.state() == TaskState::Scheduled
    }
}

/// A reminder with `schedule`, for the fuzz targets' checks.
#[cfg(any(test, feature = "fuzzing"))]
pub fn tests_fixture(schedule: Schedule) -> Task {
    Task::new(
        TaskId::for_reminder("ws_1", "usr_1", "k1"),
        "ws_1".into(),
        TaskKind::Reminder,
        Provenance::User {
            principal: "usr_1".into(),
        },
        "t".into(),
        Some("i".into()),
        Spec {
            schedule,
            tools: BTreeSet::new(),
            limits: Limits {
                max_turns: 1,
                max_tool_calls: 0,
                max_output_tokens: 10,
                timeout_seconds: 10,
            },
            budget: None,
            arguments: BTreeMap::new(),
            needs: BTreeMap::new(),
            bindings: BTreeMap::new(),
            agent: None,
            scopes: BTreeSet::new(),
        },
        DateTime::UNIX_EPOCH,
    )
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    pub fn reminder_task(at: DateTime<Utc>) -> Task {
        let mut task = super::tests_fixture(Schedule::At { at });
        task.title = "Call mom".into();
        task.instruction = Some("Remind me".into());
        task.created_at = at;
        task.updated_at = at;
        task
    }

    pub fn connector_task(at: DateTime<Utc>) -> Task {
        let mut task = reminder_task(at);
        task.task_id = TaskId::for_connector("ws_1", "issues", "weekly");
        task.kind = TaskKind::Connector;
        task.provenance = Provenance::Connector {
            install_id: "ins_1".into(),
            server: "issues".into(),
            prompt: "weekly".into(),
        };
        task.instruction = None;
        task.spec.schedule = Schedule::Rate {
            every: 1,
            unit: super::super::schedule::RateUnit::Days,
        };
        task.spec.budget = Some(Budget {
            max_usd_per_run: 0.25,
            max_usd_per_month: 5.0,
        });
        task
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::hold::HoldReason;
    use chrono::TimeZone;

    fn reminder() -> Task {
        tests_support::reminder_task(Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap())
    }

    #[test]
    fn ids_are_derived_stable_and_distinct() {
        let a = TaskId::for_reminder("ws_1", "usr_1", "k");
        assert_eq!(a, TaskId::for_reminder("ws_1", "usr_1", "k"));
        assert_ne!(a, TaskId::for_reminder("ws_1", "usr_2", "k"));
        assert_ne!(a, TaskId::for_reminder("ws_2", "usr_1", "k"));
        assert_ne!(
            TaskId::for_reminder("ws", "ab", "c"),
            TaskId::for_reminder("ws", "a", "bc")
        );
        assert!(a.as_str().starts_with("rem_") && a.as_str().len() == 36);
        assert!(
            TaskId::for_connector("ws_1", "issues", "weekly")
                .as_str()
                .starts_with(TaskId::CONNECTOR_PREFIX)
        );
        assert!(!a.as_str().starts_with(TaskId::CONNECTOR_PREFIX));
        assert_eq!(TaskId::parse(a.as_str()), Some(a));
        for bad in [
            "",
            "rem_",
            "xyz_0123456789abcdef0123456789abcdef",
            "rem_0123456789ABCDEF0123456789abcdef",
            "rem_0123",
        ] {
            assert_eq!(TaskId::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn state_is_derived_in_precedence_order() {
        let t = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let mut task = reminder();
        assert_eq!(task.state(), TaskState::Scheduled);
        assert!(task.should_fire());
        task.hold.place(HoldReason::AwaitingApproval, t, "new");
        assert_eq!(task.state(), TaskState::Held);
        task.overrides = Some(Overrides {
            paused: true,
            ..Default::default()
        });
        assert_eq!(task.state(), TaskState::Paused);
        task.completed_at = Some(t);
        assert_eq!(task.state(), TaskState::Completed);
        task.overrides = Some(Overrides {
            deleted: true,
            ..Default::default()
        });
        assert_eq!(task.state(), TaskState::Deleted);
        assert!(!task.should_fire());
    }
}
