//! A reminder is a one-time task a chat user asked for and approved: "remind
//! me at 7pm". This module is the create contract of SPEC §4 as pure code:
//! the request, every rejection with its error code, and the task a valid
//! request becomes.
//!
//! Invariants: the principal must hold exactly `schedule.write`; the instant
//! is exact (given with an offset) and lies in (now, now + 366 days]; the task
//! requests the empty scope set, pins the agent, and gets finite limits no
//! wider than the agent's and the ceilings. Validation happens before any
//! write, so a rejected request leaves nothing behind.
//!
//! This is the one place the rules of a reminder's fields live: the create
//! function (the model's tool: one-time only, approval required) and the
//! schedules function (the owner's app: also `daily` and `weekly`, §11) both
//! check through [`CreateRequest::check`], and schedules' `update` through
//! [`UpdateInput::check`], with the same text rules and codes. Text is
//! refused when it holds control characters, bidi overrides, embeddings or
//! isolates (they make a title read differently from what runs), Unicode tag
//! characters (invisible text a model still reads), or nothing but
//! whitespace and invisible characters. Called by `app::create` and
//! `app::schedules`.
//!
//! The cap of SPEC §11 (`MAX_ACTIVE_REMINDERS` a principal) counts the
//! reminders that take a place ([`takes_a_place`]: scheduled or paused) and
//! its owner item lists those that stay listed ([`stays_listed`]); the store
//! reads them (`ports::OwnerReminders`) and a capped insert is conditional on
//! the owner item's version.

pub mod descriptor;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

use serde_json::Value;

use super::schedule::{self, InstantError, Schedule};
use super::task::{AgentPin, Approval, Provenance, Spec, Task, TaskId, TaskKind};
use crate::domain::schedule::recurrence::{self, Recurrence, RecurrenceError};
use crate::domain::task::idempotency::{Fingerprint, IdempotencyRecord};
use crate::domain::task::limits::{Ceilings, RequestedLimits};

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

/// The fields a person gives a reminder, one declaration for create and
/// update: exactly one of `at`, `daily`, `weekly`, `monthly`, `yearly` in a
/// create (any one or none in an update), and for a recurring one an
/// optional `until` (the model's tool takes `at` only). The recurring kinds
/// are read by [`Recurrence`]. `Text` is `String` in a create, where title
/// and instruction are required, and `Option<String>` in an update, where
/// any field may stay as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReminderFields<Text: Given> {
    #[serde(skip_serializing_if = "Given::absent")]
    pub title: Text,
    #[serde(skip_serializing_if = "Given::absent")]
    pub instruction: Text,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daily: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weekly: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub monthly: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yearly: Option<Value>,
    /// The last local date a recurring reminder runs on (`YYYY-MM-DD`);
    /// `Some(Value::Null)` when given as `null`: an update removes it, a
    /// create reads it as absent.
    #[serde(default, deserialize_with = "present", skip_serializing_if = "Option::is_none")]
    pub until: Option<Value>,
}

/// What the model proposed and the user approved, or what the owner asked
/// for in the app.
pub type ReminderInput = ReminderFields<String>;

/// The `input` of the schedules function's `update`: any of the fields,
/// `until` a date or `null` to remove it (absent: unchanged); the same
/// rules as create.
pub type UpdateInput = ReminderFields<Option<String>>;

/// A text field of [`ReminderFields`]: always given in a create, perhaps
/// not in an update.
pub trait Given {
    fn absent(&self) -> bool;
}

impl Given for String {
    fn absent(&self) -> bool {
        false
    }
}

impl Given for Option<String> {
    fn absent(&self) -> bool {
        self.is_none()
    }
}

impl<Text: Given> ReminderFields<Text> {
    fn kinds(&self) -> Kinds<'_> {
        Kinds {
            at: self.at.as_deref(),
            daily: self.daily.as_ref(),
            weekly: self.weekly.as_ref(),
            monthly: self.monthly.as_ref(),
            yearly: self.yearly.as_ref(),
        }
    }
}

impl ReminderInput {
    /// `until` unless given as `null`, which a create reads as absent.
    fn until(&self) -> Option<&Value> {
        self.until.as_ref().filter(|until| !until.is_null())
    }
}

/// Which door a create comes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// The create function, the model's tool: one-time, approval required.
    Tool,
    /// The schedules function, the owner's app: one-time, daily, weekly,
    /// monthly or yearly; the owner's own request is the approval.
    App,
}

/// When a reminder fires, as checked (an instant not yet compared to now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    At(DateTime<Utc>),
    Every(Recurrence),
}

/// The schedule fields of an input, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Kinds<'a> {
    pub at: Option<&'a str>,
    pub daily: Option<&'a Value>,
    pub weekly: Option<&'a Value>,
    pub monthly: Option<&'a Value>,
    pub yearly: Option<&'a Value>,
}

impl Kinds<'_> {
    fn recurring(&self) -> bool {
        self.daily.is_some() || self.weekly.is_some() || self.monthly.is_some() || self.yearly.is_some()
    }
}

fn invalid_schedule(e: RecurrenceError) -> Rejection {
    Rejection::InvalidSchedule(e.0)
}

/// `until` as given: a date, or `null` (an update removes it).
pub fn read_until(value: &Value) -> Result<Option<NaiveDate>, Rejection> {
    match value {
        Value::Null => Ok(None),
        other => recurrence::parse_until(other).map(Some).map_err(invalid_schedule),
    }
}

impl When {
    /// The one of `at`, `daily`, `weekly`, `monthly`, `yearly` that is
    /// given, with `until` for a recurring one; `None` when none is.
    fn read(kinds: Kinds<'_>, until: Option<&Value>) -> Result<Option<Self>, Rejection> {
        let given = [
            kinds.at.is_some(),
            kinds.daily.is_some(),
            kinds.weekly.is_some(),
            kinds.monthly.is_some(),
            kinds.yearly.is_some(),
        ]
        .iter()
        .filter(|g| **g)
        .count();
        if given > 1 {
            return Err(Rejection::invalid(
                "give exactly one of `at`, `daily`, `weekly`, `monthly`, `yearly`",
            ));
        }
        if let Some(at) = kinds.at {
            if until.is_some() {
                return Err(Rejection::InvalidSchedule(
                    "`until` ends a recurring reminder; a one-time reminder runs once".to_owned(),
                ));
            }
            return Ok(Some(When::At(schedule::parse_instant_or_refuse(at)?)));
        }
        let mut recurrence = match kinds {
            Kinds { daily: Some(v), .. } => Recurrence::daily(v),
            Kinds { weekly: Some(v), .. } => Recurrence::weekly(v),
            Kinds { monthly: Some(v), .. } => Recurrence::monthly(v),
            Kinds { yearly: Some(v), .. } => Recurrence::yearly(v),
            _ => return Ok(None),
        }
        .map_err(invalid_schedule)?;
        if let Some(until) = until {
            recurrence.until = read_until(until)?;
        }
        Ok(Some(When::Every(recurrence)))
    }

    /// The task schedule, once a one-time instant is known to lie in the
    /// allowed window at `now`.
    pub fn to_schedule(&self, now: DateTime<Utc>) -> Result<Schedule, Rejection> {
        Ok(match self {
            When::At(at) => Schedule::At {
                at: schedule::check_window(*at, now)?,
            },
            When::Every(recurrence) => recurring(recurrence.to_schedule(), now)?,
        })
    }

    /// The canonical form the fingerprint covers.
    fn canonical(&self) -> (Option<DateTime<Utc>>, Option<String>) {
        match self {
            When::At(at) => (Some(*at), None),
            When::Every(r) => (None, Some(r.to_json().to_string())),
        }
    }
}

/// A recurring schedule, once its `until` is known to leave a run after
/// `now` (`invalid_schedule` otherwise).
fn recurring(schedule: Schedule, now: DateTime<Utc>) -> Result<Schedule, Rejection> {
    match schedule.until() {
        Some(until) if schedule.is_over(now) => Err(Rejection::InvalidSchedule(format!(
            "until {} leaves no run after now",
            until.format("%Y-%m-%d")
        ))),
        _ => Ok(schedule),
    }
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
    #[error("{0}")]
    InvalidSchedule(String),
    #[error("this idempotency key was already used with a different input")]
    IdempotencyConflict,
    #[error("the principal already holds {max} scheduled or paused reminders; cancel one first")]
    TooManyActive { max: usize },
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
            Rejection::InvalidSchedule(_) => "invalid_schedule",
            Rejection::IdempotencyConflict => "idempotency_conflict",
            Rejection::TooManyActive { .. } => "too_many_active",
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Rejection::InvalidRequest(message.into())
    }
}

/// A request that passed every check that does not depend on the clock,
/// with its fingerprint. The instant is parsed but not yet compared to now,
/// so that a retry of an accepted call replays even after its instant.
#[derive(Debug, Clone)]
pub struct CheckedRequest {
    request: CreateRequest,
    when: When,
    /// `None` for an app create: the owner's request is its own approval,
    /// recorded when the task is built.
    approval: Option<Approval>,
    fingerprint: Fingerprint,
}

/// The canonical form a fingerprint is taken over.
#[derive(Serialize)]
struct Canonical<'a> {
    workspace: &'a str,
    principal: &'a str,
    agent: &'a AgentRequest,
    #[serde(skip_serializing_if = "Option::is_none")]
    approval_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approved_at: Option<DateTime<Utc>>,
    title: &'a str,
    instruction: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    recurrence: Option<String>,
}

pub fn check_id(field: &str, value: &str) -> Result<(), Rejection> {
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

/// Bidi embeddings and overrides (U+202A..U+202E) and isolates
/// (U+2066..U+2069): they reorder how text is shown, so a title the user
/// approved could read otherwise than what runs.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Unicode tag characters: invisible, yet a model reads them.
fn is_tag(c: char) -> bool {
    matches!(c, '\u{E0000}'..='\u{E007F}')
}

/// Characters that show nothing: zero-width spaces and joiners, marks,
/// fillers, the byte-order mark, variation selectors. Allowed inside text
/// (joiners build emoji), never as all of it.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{061C}'
            | '\u{115F}'
            | '\u{1160}'
            | '\u{17B4}'
            | '\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2060}'..='\u{2064}'
            | '\u{206A}'..='\u{206F}'
            | '\u{2800}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{E0100}'..='\u{E01EF}'
    ) || is_bidi_control(c)
        || is_tag(c)
}

/// The rules of a reminder's title and instruction (SPEC §4 rule 3 and
/// issue-9's hardening), shared by create and update.
pub fn check_text(field: &str, value: &str, max: usize) -> Result<(), Rejection> {
    if value.chars().all(|c| c.is_whitespace() || is_invisible(c)) {
        return Err(Rejection::invalid(format!(
            "{field} must not be empty, whitespace or invisible characters only"
        )));
    }
    if value.chars().any(is_bidi_control) {
        return Err(Rejection::invalid(format!(
            "{field} must not contain bidi override, embedding or isolate characters"
        )));
    }
    if value.chars().any(is_tag) {
        return Err(Rejection::invalid(format!(
            "{field} must not contain Unicode tag characters"
        )));
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
    /// The model's tool (`Surface::Tool`) takes a one-time `at` and requires
    /// the approval; the owner's app also takes `daily` and `weekly`.
    pub fn check(self, surface: Surface) -> Result<CheckedRequest, Rejection> {
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
        let approval = self.approval(surface)?;
        check_text("input.title", &self.input.title, MAX_TITLE_CHARS)?;
        check_text("input.instruction", &self.input.instruction, MAX_INSTRUCTION_CHARS)?;
        let kinds = self.input.kinds();
        if surface == Surface::Tool && (kinds.recurring() || self.input.until().is_some()) {
            return Err(Rejection::invalid(
                "this tool creates one-time reminders (`at`); recurring ones are made in the app",
            ));
        }
        let when = When::read(kinds, self.input.until())?.ok_or_else(|| match surface {
            Surface::Tool => Rejection::invalid("input.at is required"),
            Surface::App => Rejection::invalid("give exactly one of `at`, `daily`, `weekly`, `monthly`, `yearly`"),
        })?;
        let (at, recurrence) = when.canonical();
        let fingerprint = Fingerprint::of(&Canonical {
            workspace: &self.principal.workspace,
            principal: &self.principal.id,
            agent: &self.agent,
            approval_id: approval.as_ref().map(|a| a.id.as_str()),
            approved_at: approval.as_ref().map(|a| a.approved_at),
            title: &self.input.title,
            instruction: &self.input.instruction,
            at,
            recurrence,
        });
        Ok(CheckedRequest {
            request: self,
            when,
            approval,
            fingerprint,
        })
    }
}

impl CreateRequest {
    /// The user's approval of the call: required of the model's tool, which
    /// creates only what the user approved; optional in the owner's app.
    fn approval(&self, surface: Surface) -> Result<Option<Approval>, Rejection> {
        let Some(approval) = &self.approval else {
            return match surface {
                Surface::Tool => Err(Rejection::invalid(
                    "approval is required: the user must approve the call",
                )),
                Surface::App => Ok(None),
            };
        };
        check_id("approval.id", &approval.id)?;
        let approved_at = schedule::parse_instant(&approval.approved_at)
            .ok_or_else(|| Rejection::invalid("approval.approved_at must be an RFC 3339 instant with an offset"))?;
        Ok(Some(Approval {
            id: approval.id.clone(),
            approved_at,
            by: None,
            ask_first: Default::default(),
        }))
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
        let schedule = self.when.to_schedule(now)?;
        let task_id = self.task_id();
        let CreateRequest {
            principal,
            idempotency_key,
            agent,
            input,
            ..
        } = self.request;
        let spec = Spec {
            schedule,
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
        task.created_with = Some(idempotency_key.clone());
        crate::domain::operations::overdue::refresh_due(None, &mut task, now);
        // An app create is the owner's own request: it is its approval.
        task.approval = Some(self.approval.unwrap_or_else(|| Approval {
            id: format!("owner:{idempotency_key}"),
            approved_at: now,
            by: Some(principal.id.clone()),
            ask_first: Default::default(),
        }));
        let record = IdempotencyRecord {
            principal: principal.id,
            key: idempotency_key,
            fingerprint: self.fingerprint,
            task_id,
            workspace: principal.workspace,
            created_at: now,
            ttl: None,
            occurrence: None,
        };
        Ok((task, record))
    }
}

/// Where the next page of an owner's reminders starts (newest first: by
/// creation time, then task id). Callers see it as an opaque string; it
/// names a position only, never the owner, so a cursor from another
/// principal's page lists nothing of theirs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListCursor {
    pub created: DateTime<Utc>,
    pub task_id: TaskId,
}

impl ListCursor {
    pub fn encode(&self) -> String {
        hex::encode(format!(
            "{}|{}",
            self.created.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
            self.task_id
        ))
    }

    pub fn decode(text: &str) -> Result<Self, Rejection> {
        let bad = || Rejection::invalid("cursor is not one this function returned");
        let bytes = hex::decode(text).map_err(|_| bad())?;
        let text = String::from_utf8(bytes).map_err(|_| bad())?;
        let (created, task_id) = text.split_once('|').ok_or_else(bad)?;
        Ok(Self {
            created: DateTime::parse_from_rfc3339(created)
                .map_err(|_| bad())?
                .with_timezone(&Utc),
            task_id: TaskId::parse(task_id).ok_or_else(bad)?,
        })
    }
}

/// A field that is present, `null` included (serde reads a `null`
/// `Option` as absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(deserializer).map(Some)
}

/// An update whose fields passed the checks that need no clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedUpdate {
    pub title: Option<String>,
    pub instruction: Option<String>,
    pub when: Option<When>,
    /// `None`: unchanged; `Some(None)`: removed; `Some(Some(date))`: set.
    pub until: Option<Option<NaiveDate>>,
}

#[derive(Serialize)]
struct UpdateCanonical<'a> {
    op: &'static str,
    workspace: &'a str,
    principal: &'a str,
    task_id: &'a str,
    expected_version: u64,
    title: Option<&'a str>,
    instruction: Option<&'a str>,
    at: Option<DateTime<Utc>>,
    recurrence: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<Option<NaiveDate>>,
}

impl UpdateInput {
    pub fn check(self) -> Result<CheckedUpdate, Rejection> {
        if let Some(title) = &self.title {
            check_text("input.title", title, MAX_TITLE_CHARS)?;
        }
        if let Some(instruction) = &self.instruction {
            check_text("input.instruction", instruction, MAX_INSTRUCTION_CHARS)?;
        }
        let when = When::read(self.kinds(), None)?;
        let until = self.until.as_ref().map(read_until).transpose()?;
        if matches!(when, Some(When::At(_))) && until.is_some_and(|u| u.is_some()) {
            return Err(Rejection::InvalidSchedule(
                "`until` ends a recurring reminder; a one-time reminder runs once".to_owned(),
            ));
        }
        if self.title.is_none() && self.instruction.is_none() && when.is_none() && until.is_none() {
            return Err(Rejection::invalid(
                "an update changes at least one of `title`, `instruction`, `at`, `daily`, `weekly`, `monthly`, `yearly`, `until`",
            ));
        }
        Ok(CheckedUpdate {
            title: self.title,
            instruction: self.instruction,
            when,
            until,
        })
    }
}

impl CheckedUpdate {
    /// What a replay must match: the principal, the task, the version the
    /// update was made against, and the new values (instants as instants).
    pub fn fingerprint(&self, principal: &Principal, task_id: &TaskId, expected_version: u64) -> Fingerprint {
        let (at, recurrence) = self.when.as_ref().map(When::canonical).unwrap_or_default();
        Fingerprint::of(&UpdateCanonical {
            op: "update",
            workspace: &principal.workspace,
            principal: &principal.id,
            task_id: task_id.as_str(),
            expected_version,
            title: self.title.as_deref(),
            instruction: self.instruction.as_deref(),
            at,
            recurrence,
            until: self.until,
        })
    }

    /// Applies the update to a reminder at `now`: a new one-time instant must
    /// lie in the allowed window (SPEC §4's instant codes); a recurring
    /// schedule keeps its `until` unless the update gives one (or `null`),
    /// which must leave a run after `now`; a one-time one has none.
    pub fn apply(&self, task: &mut Task, now: DateTime<Utc>) -> Result<(), Rejection> {
        let one_time_until = || {
            Rejection::InvalidSchedule("`until` ends a recurring reminder; a one-time reminder runs once".to_owned())
        };
        let schedule = match (&self.when, self.until) {
            (None, None) => None,
            (Some(When::At(_)), Some(Some(_))) => return Err(one_time_until()),
            (Some(when @ When::At(_)), _) => Some(when.to_schedule(now)),
            (Some(When::Every(recurrence)), until) => Some(
                When::Every(Recurrence {
                    until: until.unwrap_or_else(|| task.spec.schedule.until()),
                    ..recurrence.clone()
                })
                .to_schedule(now),
            ),
            (None, Some(until)) => match Recurrence::of(&task.spec.schedule) {
                Some(recurrence) => Some(When::Every(Recurrence { until, ..recurrence }).to_schedule(now)),
                None => return Err(one_time_until()),
            },
        };
        if let Some(schedule) = schedule {
            task.spec.schedule = schedule?;
        }
        if let Some(title) = &self.title {
            task.title = title.clone();
        }
        if let Some(instruction) = &self.instruction {
            task.instruction = Some(instruction.clone());
        }
        Ok(())
    }
}

/// Whether a reminder in `state` takes one of its owner's places under the
/// cap (SPEC §11): scheduled or paused; a finished or cancelled one frees it.
pub fn takes_a_place(state: super::task::TaskState) -> bool {
    use super::task::TaskState;
    matches!(state, TaskState::Scheduled | TaskState::Paused)
}

/// Whether a reminder in `state` stays on its owner's list: until it has
/// finished or been cancelled.
pub fn stays_listed(state: super::task::TaskState) -> bool {
    use super::task::TaskState;
    !matches!(state, TaskState::Completed | TaskState::Deleted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::TaskState;
    use crate::domain::task::limits::Limits;
    use crate::domain::task::limits::tests_support::ceilings;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 10, 0, 0).unwrap()
    }

    #[test]
    fn scheduled_and_paused_reminders_take_a_place_and_finished_ones_leave_the_list() {
        use TaskState::*;
        for (state, place, listed) in [
            (Scheduled, true, true),
            (Paused, true, true),
            (Held, false, true),
            (Completed, false, false),
            (Deleted, false, false),
        ] {
            assert_eq!(takes_a_place(state), place, "{state:?}");
            assert_eq!(stays_listed(state), listed, "{state:?}");
        }
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
        match req.check(Surface::Tool).and_then(|c| c.into_task(now(), &ceilings())) {
            Ok(_) => "ok",
            Err(e) => e.code(),
        }
    }

    #[test]
    fn create_requires_both_texts_update_any_field_and_a_null_until_is_absent_in_a_create() {
        let fields = |json: serde_json::Value| serde_json::from_value::<ReminderInput>(json).map_err(|e| e.to_string());
        let update = |json: serde_json::Value| serde_json::from_value::<UpdateInput>(json).map_err(|e| e.to_string());
        assert!(
            fields(serde_json::json!({"title": "t", "at": "2026-12-24T19:00:00Z"}))
                .unwrap_err()
                .contains("missing field `instruction`")
        );
        assert!(
            fields(serde_json::json!({"title": "t", "instruction": "i", "every": "day"}))
                .unwrap_err()
                .contains("unknown field `every`")
        );
        assert!(
            update(serde_json::json!({"every": "day"}))
                .unwrap_err()
                .contains("unknown field `every`")
        );
        let only_until = update(serde_json::json!({"until": null})).unwrap();
        assert_eq!(
            (only_until.title, only_until.until),
            (None, Some(serde_json::Value::Null)),
            "null removes it"
        );
        assert_eq!(update(serde_json::json!({})).unwrap().until, None, "absent: unchanged");
        // A one-time create through the tool, which refuses an `until`, takes a `null` one.
        assert_eq!(code_of(|r| r.input.until = Some(serde_json::Value::Null)), "ok");
        assert_eq!(
            code_of(|r| r.input.until = Some(serde_json::json!("2026-12-31"))),
            "invalid_request"
        );
        // The wire form leaves out what is absent, as before.
        assert_eq!(
            serde_json::to_value(update(serde_json::json!({"title": "t"})).unwrap()).unwrap(),
            serde_json::json!({"title": "t"})
        );
        assert_eq!(
            serde_json::to_value(fields(serde_json::json!({"title": "t", "instruction": "i", "at": "x"})).unwrap())
                .unwrap(),
            serde_json::json!({"title": "t", "instruction": "i", "at": "x"})
        );
    }

    #[test]
    fn the_spec_example_becomes_a_least_privilege_pinned_task() {
        let (task, record) = request()
            .check(Surface::Tool)
            .unwrap()
            .into_task(now(), &ceilings())
            .unwrap();
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
        assert_eq!(
            code_of(|r| r.input.at = Some("2026-12-24T19:00:00".into())),
            "naive_instant"
        );
        assert_eq!(code_of(|r| r.input.at = Some("next friday".into())), "invalid_instant");
        assert_eq!(
            code_of(|r| r.input.at = Some("2026-11-29T19:00:00Z".into())),
            "instant_in_past"
        );
        assert_eq!(
            code_of(|r| r.input.at = Some("2028-01-01T00:00:00Z".into())),
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
                r.input.at = Some("garbage".into());
            }),
            "scope_denied"
        );
    }

    #[test]
    fn fingerprint_compares_instants_not_spellings_and_ignores_scopes() {
        let a = request().check(Surface::Tool).unwrap();
        let mut same = request();
        same.input.at = Some("2026-12-24T18:00:00Z".into());
        same.principal.scopes.push("other".into());
        assert_eq!(a.fingerprint(), same.check(Surface::Tool).unwrap().fingerprint());
        let mut other = request();
        other.input.title = "Call dad".into();
        assert_ne!(a.fingerprint(), other.check(Surface::Tool).unwrap().fingerprint());
        let mut later = request();
        later.agent.limits.max_turns = Some(5);
        assert_ne!(a.fingerprint(), later.check(Surface::Tool).unwrap().fingerprint());
    }

    #[test]
    fn a_missing_agent_limit_takes_the_ceiling() {
        let mut req = request();
        req.agent.limits = RequestedLimits::default();
        let (task, _) = req.check(Surface::Tool).unwrap().into_task(now(), &ceilings()).unwrap();
        assert_eq!(task.spec.limits, ceilings().limits());
    }

    #[test]
    fn bidi_controls_tags_and_invisible_only_text_are_refused() {
        for text in [
            "Call mom\u{202E}gnp.exe",
            "\u{2066}Call\u{2069} mom",
            "Call \u{202A}mom",
            "Call mom\u{E0041}\u{E0042}",
            "\u{200B}\u{200B}",
            "\u{FEFF}",
            " \u{3164} \u{2800} ",
            "\u{00A0}\u{2003}",
            "\u{200D}\u{FE0F}",
        ] {
            assert_eq!(code_of(|r| r.input.title = text.into()), "invalid_request", "{text:?}");
            assert_eq!(
                code_of(|r| r.input.instruction = text.into()),
                "invalid_request",
                "{text:?}"
            );
        }
        for text in ["Call mom \u{1F469}\u{200D}\u{1F467}", "Anruf bei Mütter", "שלום mom"] {
            assert_eq!(code_of(|r| r.input.title = text.into()), "ok", "{text:?}");
        }
    }

    #[test]
    fn the_tool_takes_one_time_reminders_and_the_app_also_recurring_ones() {
        let daily = serde_json::json!({"time": "19:00", "timezone": "Europe/Berlin"});
        let app = |mutate: &dyn Fn(&mut CreateRequest)| {
            let mut req = request();
            mutate(&mut req);
            match req.check(Surface::App).and_then(|c| c.into_task(now(), &ceilings())) {
                Ok((task, _)) => Ok(task),
                Err(e) => Err(e.code()),
            }
        };
        assert_eq!(
            code_of(|r| {
                r.input.at = None;
                r.input.daily = Some(daily.clone());
            }),
            "invalid_request"
        );
        assert_eq!(code_of(|r| r.input.at = None), "invalid_request");
        let task = app(&|r| {
            r.input.at = None;
            r.input.daily = Some(daily.clone());
            r.approval = None;
        })
        .unwrap();
        assert_eq!(
            task.spec.schedule,
            Schedule::Cron {
                cron: "0 19 * * *".into(),
                timezone: "Europe/Berlin".into(),
                until: None,
            }
        );
        assert_eq!(task.approval.as_ref().and_then(|a| a.by.as_deref()), Some("usr_123"));
        assert_eq!(
            app(&|r| r.input.daily = Some(daily.clone())).err(),
            Some("invalid_request")
        );
        assert_eq!(
            app(&|r| {
                r.input.at = None;
                r.input.weekly = Some(serde_json::json!({"days": [], "time": "19:00", "timezone": "UTC"}));
            })
            .err(),
            Some("invalid_schedule")
        );
        assert_eq!(
            app(&|r| r.input.at = Some("2026-11-29T19:00:00Z".into())).err(),
            Some("instant_in_past"),
            "the same instant rules"
        );
        assert_eq!(
            app(&|r| r.input.title = "\u{200B}".into()).err(),
            Some("invalid_request")
        );
    }

    #[test]
    fn an_update_follows_the_same_rules() {
        let check = |input: serde_json::Value| {
            serde_json::from_value::<UpdateInput>(input)
                .map_err(|_| "invalid_request")
                .and_then(|i| i.check().map_err(|e| e.code()))
        };
        assert_eq!(check(serde_json::json!({})).err(), Some("invalid_request"));
        assert_eq!(
            check(serde_json::json!({"title": "a\u{202E}b"})).err(),
            Some("invalid_request")
        );
        assert_eq!(
            check(serde_json::json!({"at": "2026-12-24T19:00:00"})).err(),
            Some("naive_instant")
        );
        assert_eq!(
            check(serde_json::json!({"daily": {"time": "25:00", "timezone": "UTC"}})).err(),
            Some("invalid_schedule")
        );
        assert_eq!(
            check(serde_json::json!({"at": "2026-12-24T19:00:00Z", "daily": {"time": "10:00", "timezone": "UTC"}}))
                .err(),
            Some("invalid_request")
        );
        assert_eq!(
            check(serde_json::json!({"colour": "red"})).err(),
            Some("invalid_request")
        );
        let update = check(serde_json::json!({"at": "2026-12-24T20:00:00+01:00", "title": "Call dad"})).unwrap();
        let mut task = request()
            .check(Surface::Tool)
            .unwrap()
            .into_task(now(), &ceilings())
            .unwrap()
            .0;
        update.apply(&mut task, now()).unwrap();
        assert_eq!(task.title, "Call dad");
        assert_eq!(
            task.spec.schedule,
            Schedule::At {
                at: Utc.with_ymd_and_hms(2026, 12, 24, 19, 0, 0).unwrap()
            }
        );
        let past = check(serde_json::json!({"at": "2026-11-01T20:00:00Z"})).unwrap();
        assert_eq!(
            past.apply(&mut task, now()).map_err(|e| e.code()),
            Err("instant_in_past")
        );
    }

    #[test]
    fn monthly_yearly_and_until_are_made_in_the_app_only() {
        let app = |mutate: &dyn Fn(&mut CreateRequest)| {
            let mut req = request();
            req.approval = None;
            req.input.at = None;
            mutate(&mut req);
            match req.check(Surface::App).and_then(|c| c.into_task(now(), &ceilings())) {
                Ok((task, _)) => Ok(task),
                Err(e) => Err(e.code()),
            }
        };
        let monthly = serde_json::json!({"weekday": "MON", "nth": 1, "time": "09:00", "timezone": "Europe/Berlin"});
        let task = app(&|r| r.input.monthly = Some(monthly.clone())).unwrap();
        assert_eq!(
            task.spec.schedule.expression().unwrap().expression,
            "cron(0 9 ? * 2#1 *)"
        );
        let task = app(&|r| {
            r.input.daily = Some(serde_json::json!({"time": "07:00", "timezone": "UTC"}));
            r.input.until = Some(serde_json::json!("2026-12-31"));
        })
        .unwrap();
        assert_eq!(task.spec.schedule.until(), NaiveDate::from_ymd_opt(2026, 12, 31));
        assert_eq!(
            task.spec.schedule.end_date(),
            Some(Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0).unwrap())
        );
        assert_eq!(
            app(&|r| r.input.yearly =
                Some(serde_json::json!({"month": 4, "day": 31, "time": "09:00", "timezone": "UTC"})))
            .err(),
            Some("invalid_schedule")
        );
        assert_eq!(
            app(&|r| {
                r.input.at = Some("2026-12-24T19:00:00Z".into());
                r.input.until = Some(serde_json::json!("2026-12-31"));
            })
            .err(),
            Some("invalid_schedule"),
            "a one-time reminder has no until"
        );
        assert_eq!(
            app(&|r| {
                r.input.daily = Some(serde_json::json!({"time": "07:00", "timezone": "UTC"}));
                r.input.until = Some(serde_json::json!("2026-11-30"));
            })
            .err(),
            Some("invalid_schedule"),
            "07:00 on the until date has passed at 10:00: no run is left"
        );
        assert_eq!(
            app(&|r| {
                r.input.daily = Some(serde_json::json!({"time": "11:00", "timezone": "UTC"}));
                r.input.until = Some(serde_json::json!("2026-11-30"));
            })
            .map(|t| t.spec.schedule.until()),
            Ok(NaiveDate::from_ymd_opt(2026, 11, 30)),
            "11:00 today is still to come"
        );
        assert_eq!(
            app(&|r| {
                r.input.daily = Some(serde_json::json!({"time": "07:00", "timezone": "UTC"}));
                r.input.until = Some(serde_json::json!("tomorrow"));
            })
            .err(),
            Some("invalid_schedule")
        );
        assert_eq!(
            app(&|r| {
                r.input.monthly = Some(monthly.clone());
                r.input.yearly = Some(serde_json::json!({"month": 1, "day": 1, "time": "09:00", "timezone": "UTC"}));
            })
            .err(),
            Some("invalid_request")
        );
        // The model's tool: one-time only.
        assert_eq!(code_of(|r| r.input.monthly = Some(monthly.clone())), "invalid_request");
        assert_eq!(
            code_of(|r| r.input.until = Some(serde_json::json!("2026-12-31"))),
            "invalid_request"
        );
        // The fingerprint covers until.
        let fingerprint = |until: Option<&str>| {
            let mut req = request();
            req.approval = None;
            req.input.at = None;
            req.input.daily = Some(serde_json::json!({"time": "07:00", "timezone": "UTC"}));
            req.input.until = until.map(|u| serde_json::json!(u));
            req.check(Surface::App).unwrap().fingerprint().clone()
        };
        assert_ne!(fingerprint(None), fingerprint(Some("2026-12-31")));
        assert_ne!(fingerprint(Some("2027-01-01")), fingerprint(Some("2026-12-31")));
    }

    #[test]
    fn an_update_keeps_sets_or_removes_until() {
        let check = |input: serde_json::Value| {
            serde_json::from_value::<UpdateInput>(input)
                .map_err(|_| "invalid_request")
                .and_then(|i| i.check().map_err(|e| e.code()))
        };
        let mut task = request()
            .check(Surface::Tool)
            .unwrap()
            .into_task(now(), &ceilings())
            .unwrap()
            .0;
        let until = |t: &Task| t.spec.schedule.until().map(|d| d.to_string());
        assert_eq!(
            check(serde_json::json!({"until": "2027-01-31"}))
                .unwrap()
                .apply(&mut task.clone(), now())
                .map_err(|e| e.code()),
            Err("invalid_schedule"),
            "a one-time reminder has no until"
        );
        check(serde_json::json!({"daily": {"time": "07:00", "timezone": "UTC"}, "until": "2027-01-31"}))
            .unwrap()
            .apply(&mut task, now())
            .unwrap();
        assert_eq!(until(&task).as_deref(), Some("2027-01-31"));
        // A new rule keeps the until; `until` alone moves it; `null` removes it.
        check(serde_json::json!({"monthly": {"day": "last", "time": "07:00", "timezone": "UTC"}}))
            .unwrap()
            .apply(&mut task, now())
            .unwrap();
        assert_eq!(task.spec.schedule.expression().unwrap().expression, "cron(0 7 L * ? *)");
        assert_eq!(until(&task).as_deref(), Some("2027-01-31"));
        check(serde_json::json!({"until": "2027-06-30"}))
            .unwrap()
            .apply(&mut task, now())
            .unwrap();
        assert_eq!(until(&task).as_deref(), Some("2027-06-30"));
        assert_eq!(
            check(serde_json::json!({"until": "2026-11-01"}))
                .unwrap()
                .apply(&mut task.clone(), now())
                .map_err(|e| e.code()),
            Err("invalid_schedule"),
            "an until that leaves no run"
        );
        check(serde_json::json!({"until": null}))
            .unwrap()
            .apply(&mut task, now())
            .unwrap();
        assert_eq!(until(&task), None);
        assert_eq!(
            check(serde_json::json!({"at": "2026-12-24T19:00:00Z", "until": "2027-01-31"})).err(),
            Some("invalid_schedule")
        );
        // The fingerprint tells absent, null and a date apart.
        let principal = request().principal;
        let fp = |input: serde_json::Value| check(input).unwrap().fingerprint(&principal, &task.task_id, 3);
        let a = fp(serde_json::json!({"title": "x"}));
        let b = fp(serde_json::json!({"title": "x", "until": null}));
        let c = fp(serde_json::json!({"title": "x", "until": "2027-01-31"}));
        assert!(a != b && b != c && a != c);
    }
}
