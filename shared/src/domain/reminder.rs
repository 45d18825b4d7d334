//! A reminder is a one-time task a chat user asked for and approved: "remind
//! me at 7pm". This module is the create contract of SPEC §4 as pure code:
//! the request, every rejection with its error code, and the task a valid
//! request becomes.
//!
//! Invariants: the principal must hold exactly `schedule.write`; the instant
//! is exact (given with an offset) and lies in (now, now + 366 days]; the task
//! requests the empty scope set, pins the agent, and gets finite limits no
//! wider than the agent's and the ceilings. Validation happens before any
//! write, so a rejected request leaves nothing behind. Called by the create
//! use case (`app::create`).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::approval::Approval;
use super::idempotency::{Fingerprint, IdempotencyRecord};
use super::limits::{Ceilings, RequestedLimits};
use super::schedule::{self, InstantError, Schedule};
use super::task::{AgentPin, Provenance, Spec, Task, TaskId, TaskKind};

/// The one scope that allows create. Nothing broader stands in for it.
pub const WRITE_SCOPE: &str = "schedule.write";
pub const MAX_TITLE_CHARS: usize = 200;
pub const MAX_INSTRUCTION_CHARS: usize = 4000;
/// Ids and keys become parts of DynamoDB keys and schedule inputs.
pub const MAX_ID_CHARS: usize = 128;

/// The caller, as the chat backend authenticated it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub id: String,
    pub workspace: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

impl Principal {
    /// Exact string match: `schedule.*`, `*` or `schedule.admin` do not count.
    pub fn holds(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRequest {
    pub id: String,
    pub version: String,
    pub policy_profile: String,
    #[serde(default)]
    pub limits: RequestedLimits,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    pub id: String,
    pub approved_at: String,
}

/// What the model proposed and the user approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReminderInput {
    pub title: String,
    pub instruction: String,
    pub at: String,
}

/// The `create` request of SPEC §4, structurally parsed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreateRequest {
    pub principal: Principal,
    pub idempotency_key: String,
    pub agent: AgentRequest,
    #[serde(default)]
    pub approval: Option<ApprovalRequest>,
    pub input: ReminderInput,
}

/// A client error of create: an `ok: false` answer with a stable code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("scheduled tasks are not enabled")]
    FeatureDisabled,
    #[error("the principal does not hold the `{WRITE_SCOPE}` scope")]
    ScopeDenied,
    #[error(transparent)]
    Instant(#[from] InstantError),
    #[error("{0}")]
    InvalidRequest(String),
    #[error("this idempotency key was already used with a different input")]
    IdempotencyConflict,
}

impl Rejection {
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::FeatureDisabled => "feature_disabled",
            Rejection::ScopeDenied => "scope_denied",
            Rejection::Instant(InstantError::Naive(_)) => "naive_instant",
            Rejection::Instant(InstantError::Invalid(_)) => "invalid_instant",
            Rejection::Instant(InstantError::InPast { .. }) => "instant_in_past",
            Rejection::Instant(InstantError::TooFar { .. }) => "instant_too_far",
            Rejection::InvalidRequest(_) => "invalid_request",
            Rejection::IdempotencyConflict => "idempotency_conflict",
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        Rejection::InvalidRequest(message.into())
    }
}

/// A request that passed every check that does not depend on the clock,
/// with its fingerprint. The instant is parsed but not yet compared to now,
/// so that a retry of an accepted call replays even after its instant.
#[derive(Debug, Clone)]
pub struct CheckedRequest {
    request: CreateRequest,
    at: DateTime<Utc>,
    approval: Approval,
    fingerprint: Fingerprint,
}

/// The canonical form a fingerprint is taken over.
#[derive(Serialize)]
struct Canonical<'a> {
    workspace: &'a str,
    principal: &'a str,
    agent: &'a AgentRequest,
    approval_id: &'a str,
    approved_at: DateTime<Utc>,
    title: &'a str,
    instruction: &'a str,
    at: DateTime<Utc>,
}

fn check_id(field: &str, value: &str) -> Result<(), Rejection> {
    let len = value.chars().count();
    if len == 0 || len > MAX_ID_CHARS {
        return Err(Rejection::invalid(format!(
            "{field} must be 1 to {MAX_ID_CHARS} characters"
        )));
    }
    if value.chars().any(|c| c.is_control() || c.is_whitespace() || c == '#') {
        return Err(Rejection::invalid(format!(
            "{field} must not contain whitespace, control characters or `#`"
        )));
    }
    Ok(())
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), Rejection> {
    if value.trim().is_empty() {
        return Err(Rejection::invalid(format!("{field} must not be empty")));
    }
    let len = value.chars().count();
    if len > max {
        return Err(Rejection::invalid(format!(
            "{field} is {len} characters, more than {max}"
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(Rejection::invalid(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(())
}

impl CreateRequest {
    /// Every check of SPEC §4 that does not need the clock or the store, in
    /// the order a caller should learn of them: scope first, then the fields.
    pub fn check(self) -> Result<CheckedRequest, Rejection> {
        if !self.principal.holds(WRITE_SCOPE) {
            return Err(Rejection::ScopeDenied);
        }
        check_id("principal.id", &self.principal.id)?;
        check_id("principal.workspace", &self.principal.workspace)?;
        check_id("idempotency_key", &self.idempotency_key)?;
        check_id("agent.id", &self.agent.id)?;
        check_id("agent.version", &self.agent.version)?;
        check_id("agent.policy_profile", &self.agent.policy_profile)?;
        self.agent
            .limits
            .check()
            .map_err(|e| Rejection::invalid(format!("agent.limits: {e}")))?;
        let Some(approval) = &self.approval else {
            return Err(Rejection::invalid(
                "approval is required: the user must approve the call",
            ));
        };
        check_id("approval.id", &approval.id)?;
        let approved_at = schedule::parse_instant(&approval.approved_at)
            .ok_or_else(|| Rejection::invalid("approval.approved_at must be an RFC 3339 instant with an offset"))?;
        check_text("input.title", &self.input.title, MAX_TITLE_CHARS)?;
        check_text("input.instruction", &self.input.instruction, MAX_INSTRUCTION_CHARS)?;
        let at = schedule::parse_instant_or_refuse(&self.input.at)?;
        let fingerprint = Fingerprint::of(&Canonical {
            workspace: &self.principal.workspace,
            principal: &self.principal.id,
            agent: &self.agent,
            approval_id: &approval.id,
            approved_at,
            title: &self.input.title,
            instruction: &self.input.instruction,
            at,
        });
        let approval = Approval {
            id: approval.id.clone(),
            approved_at,
            by: None,
        };
        Ok(CheckedRequest {
            request: self,
            at,
            approval,
            fingerprint,
        })
    }
}

impl CheckedRequest {
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    pub fn principal(&self) -> &Principal {
        &self.request.principal
    }

    pub fn idempotency_key(&self) -> &str {
        &self.request.idempotency_key
    }

    pub fn task_id(&self) -> TaskId {
        let p = &self.request.principal;
        TaskId::for_reminder(&p.workspace, &p.id, &self.request.idempotency_key)
    }

    /// The task and its idempotency record, once the instant is known to lie
    /// in the allowed window at `now`.
    pub fn into_task(self, now: DateTime<Utc>, ceilings: &Ceilings) -> Result<(Task, IdempotencyRecord), Rejection> {
        let at = schedule::check_window(self.at, now)?;
        let task_id = self.task_id();
        let CreateRequest {
            principal,
            idempotency_key,
            agent,
            input,
            ..
        } = self.request;
        let spec = Spec {
            schedule: Schedule::At { at },
            tools: BTreeSet::new(),
            limits: ceilings.derive(&agent.limits),
            budget: None,
            arguments: BTreeMap::new(),
            needs: BTreeMap::new(),
            bindings: BTreeMap::new(),
            agent: Some(AgentPin {
                id: agent.id,
                version: agent.version,
                policy_profile: agent.policy_profile,
            }),
            scopes: BTreeSet::new(),
        };
        let mut task = Task::new(
            task_id.clone(),
            principal.workspace.clone(),
            TaskKind::Reminder,
            Provenance::User {
                principal: principal.id.clone(),
            },
            input.title,
            Some(input.instruction),
            spec,
            now,
        );
        task.approval = Some(self.approval);
        let record = IdempotencyRecord {
            principal: principal.id,
            key: idempotency_key,
            fingerprint: self.fingerprint,
            task_id,
            workspace: principal.workspace,
            created_at: now,
        };
        Ok((task, record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::limits::Limits;
    use crate::domain::limits::tests_support::ceilings;
    use crate::domain::task::TaskState;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
    }

    fn request() -> CreateRequest {
        serde_json::from_value(serde_json::json!({
            "principal": {"id": "usr_123", "workspace": "ws_1", "scopes": ["schedule.write"]},
            "idempotency_key": "call_7f3a",
            "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard",
                      "limits": {"max_turns": 6, "max_tool_calls": 0, "max_output_tokens": 2000, "timeout_seconds": 120}},
            "approval": {"id": "apr_9", "approved_at": "2026-11-30T10:00:00Z"},
            "input": {"title": "Call mom", "instruction": "Remind me to call mom about Sunday.",
                      "at": "2026-12-24T19:00:00+01:00"}
        }))
        .unwrap()
    }

    fn code_of(mutate: impl FnOnce(&mut CreateRequest)) -> &'static str {
        let mut req = request();
        mutate(&mut req);
        match req.check().and_then(|c| c.into_task(now(), &ceilings())) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn the_spec_example_becomes_a_least_privilege_pinned_task() {
        let (task, record) = request().check().unwrap().into_task(now(), &ceilings()).unwrap();
        assert_eq!(
            task.spec.schedule,
            Schedule::At {
                at: Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap()
            }
        );
        assert!(task.spec.scopes.is_empty());
        assert!(task.spec.tools.is_empty());
        assert_eq!(
            task.spec.limits,
            Limits {
                max_turns: 6,
                max_tool_calls: 0,
                max_output_tokens: 2000,
                timeout_seconds: 120
            }
        );
        assert_eq!(
            task.spec.agent,
            Some(AgentPin {
                id: "agt_1".into(),
                version: "7".into(),
                policy_profile: "standard".into()
            })
        );
        assert_eq!(task.approval.as_ref().map(|a| a.id.as_str()), Some("apr_9"));
        assert_eq!(task.state(), TaskState::Scheduled);
        assert_eq!(task.kind, TaskKind::Reminder);
        assert_eq!(record.task_id, task.task_id);
        assert_eq!(record.principal, "usr_123");
    }

    #[test]
    fn each_rule_has_its_code() {
        assert_eq!(code_of(|_| {}), "ok");
        assert_eq!(code_of(|r| r.principal.scopes = vec![]), "scope_denied");
        for scope in [
            "schedule.*",
            "*",
            "schedule.read",
            "schedule.admin",
            "Schedule.Write",
            "schedule.write ",
        ] {
            assert_eq!(
                code_of(|r| r.principal.scopes = vec![scope.into()]),
                "scope_denied",
                "{scope}"
            );
        }
        assert_eq!(
            code_of(|r| r.principal.scopes = vec!["x".into(), "schedule.write".into()]),
            "ok"
        );
        assert_eq!(code_of(|r| r.input.at = "2026-12-24T19:00:00".into()), "naive_instant");
        assert_eq!(code_of(|r| r.input.at = "next friday".into()), "invalid_instant");
        assert_eq!(
            code_of(|r| r.input.at = "2026-11-29T19:00:00Z".into()),
            "instant_in_past"
        );
        assert_eq!(
            code_of(|r| r.input.at = "2028-01-01T00:00:00Z".into()),
            "instant_too_far"
        );
        assert_eq!(code_of(|r| r.input.title = "x".repeat(201)), "invalid_request");
        assert_eq!(
            code_of(|r| r.input.title = "é".repeat(200)),
            "ok",
            "characters, not bytes"
        );
        assert_eq!(code_of(|r| r.input.title = "  ".into()), "invalid_request");
        assert_eq!(code_of(|r| r.input.instruction = "x".repeat(4001)), "invalid_request");
        assert_eq!(
            code_of(|r| r.input.instruction = "line\u{0007}bell".into()),
            "invalid_request"
        );
        assert_eq!(code_of(|r| r.input.title = "a\nb".into()), "invalid_request");
        assert_eq!(code_of(|r| r.approval = None), "invalid_request");
        assert_eq!(
            code_of(|r| r.approval.as_mut().unwrap().approved_at = "yesterday".into()),
            "invalid_request"
        );
        assert_eq!(code_of(|r| r.idempotency_key = String::new()), "invalid_request");
        assert_eq!(code_of(|r| r.idempotency_key = "a#b".into()), "invalid_request");
        assert_eq!(code_of(|r| r.principal.workspace = "k".repeat(129)), "invalid_request");
        assert_eq!(code_of(|r| r.agent.limits.max_turns = Some(0)), "invalid_request");
    }

    #[test]
    fn scope_is_checked_before_the_fields() {
        assert_eq!(
            code_of(|r| {
                r.principal.scopes = vec!["schedule.*".into()];
                r.input.at = "garbage".into();
            }),
            "scope_denied"
        );
    }

    #[test]
    fn fingerprint_compares_instants_not_spellings_and_ignores_scopes() {
        let a = request().check().unwrap();
        let mut same = request();
        same.input.at = "2026-12-24T18:00:00Z".into();
        same.principal.scopes.push("other".into());
        assert_eq!(a.fingerprint(), same.check().unwrap().fingerprint());
        let mut other = request();
        other.input.title = "Call dad".into();
        assert_ne!(a.fingerprint(), other.check().unwrap().fingerprint());
        let mut later = request();
        later.agent.limits.max_turns = Some(5);
        assert_ne!(a.fingerprint(), later.check().unwrap().fingerprint());
    }

    #[test]
    fn a_missing_agent_limit_takes_the_ceiling() {
        let mut req = request();
        req.agent.limits = RequestedLimits::default();
        let (task, _) = req.check().unwrap().into_task(now(), &ceilings()).unwrap();
        assert_eq!(task.spec.limits, ceilings().limits());
    }
}
