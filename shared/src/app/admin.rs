//! The admin use case (SPEC §8): a workspace admin lists, reads, approves,
//! pauses, resumes, deletes and restores tasks, and reads their runs.
//!
//! Invariants: the caller holds `schedule.admin` and acts in its own
//! workspace only; every write is conditional on the version the caller
//! read (`expected_version`), so an admin and a concurrent reconcile never
//! lose each other's change; admin writes touch `override`, and approval
//! writes `spec` (never `hold` directly: the runtime's holds are lifted by
//! the same rule reconcile uses, `reconcile::settle_holds`); a need binds
//! only as `binding::check_binding` allows; the task's schedule follows
//! every change, and converges on the task's latest version when writers
//! race (`change::put_in_step`).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::app::approvals::{self, ApprovalView};
use crate::app::change::{self, Edits, OwnRequests, Request, SurfaceError, Target};
use crate::app::run_now::{self, Requested};
use crate::domain::connector::approval;
use crate::domain::operations::history::RunView;
use crate::domain::reminder::Principal;
use crate::domain::run::gate::{ApprovalState, CallApproval, CallDecision, Undecidable};
use crate::domain::schedule::preview::{Fire, next_fires};
use crate::domain::task::bounds::compare;
use crate::domain::task::budget::{self, WorkspaceBudget};
use crate::domain::task::ceiling::{CostCeiling, cost_ceiling};
use crate::domain::task::edit::{self, Actor, Decision, Edit};
use crate::domain::task::explain::{self, Reader};
use crate::domain::task::install::Install;
use crate::domain::task::overrides::OverrideEdit;
use crate::domain::task::skip;
use crate::domain::task::{Provenance, Task, TaskId, TaskKind, TaskState};
use crate::ports::{CallApprovals, ReminderStore, RunQueue, Schedules, TaskCatalog, TaskStore, WorkspaceBudgets};

pub const ADMIN_SCOPE: &str = "schedule.admin";

type Outcome = Result<Result<AdminAnswer, AdminRefusal>, AdminError>;
/// Fire times shown by `get`.
pub const PREVIEW_COUNT: usize = 5;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminRefusal {
    #[error("the principal does not hold `{ADMIN_SCOPE}` in this workspace")]
    Forbidden,
    #[error("no task {0} in this workspace")]
    NotFound(String),
    #[error("it changed since version {expected} (now {current}): read it again")]
    VersionConflict { expected: u64, current: u64 },
    #[error("{0}")]
    InvalidRequest(String),
    #[error("this idempotency key was already used with a different input")]
    IdempotencyConflict,
    #[error("no approval request {0} in this workspace")]
    NoRequest(String),
}

impl AdminRefusal {
    pub fn code(&self) -> &'static str {
        match self {
            AdminRefusal::Forbidden => "forbidden",
            AdminRefusal::NotFound(_) | AdminRefusal::NoRequest(_) => "not_found",
            AdminRefusal::VersionConflict { .. } => "version_conflict",
            AdminRefusal::InvalidRequest(_) => "invalid_request",
            AdminRefusal::IdempotencyConflict => "idempotency_conflict",
        }
    }
}

/// An internal failure: the function errors and the caller retries.
pub type AdminError = SurfaceError;

/// An admin request, as the handler decodes it from the invoke payload
/// (`functions/admin`): the operation named by `op`, with its fields; the
/// edits both surfaces share are declared once (`change::SharedRequest`).
pub type AdminRequest = Request<Own>;

/// An admin's own operations.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Own {
    List {
        principal: Principal,
        /// 1 to 100, default 50.
        #[serde(default)]
        limit: Option<u64>,
        /// Opaque, from the previous page.
        #[serde(default)]
        cursor: Option<String>,
    },
    Get {
        principal: Principal,
        task_id: String,
    },
    Approve {
        #[serde(flatten)]
        target: Target,
        #[serde(default)]
        arguments: BTreeMap<String, String>,
        #[serde(default)]
        bindings: BTreeMap<String, Option<String>>,
        /// Tools gated for this task's runs (SPEC §15); absent, as before.
        #[serde(default)]
        ask_first: Option<std::collections::BTreeSet<String>>,
    },
    Pause {
        #[serde(flatten)]
        target: Target,
        #[serde(default)]
        note: Option<String>,
    },
    Delete {
        #[serde(flatten)]
        target: Target,
        #[serde(default)]
        note: Option<String>,
    },
    Restore {
        #[serde(flatten)]
        target: Target,
    },
    /// The latest run records of any task of the workspace, newest first.
    Runs {
        principal: Principal,
        task_id: String,
        #[serde(default)]
        limit: Option<u64>,
    },
    /// The workspace: its monthly budget and what this month holds
    /// (`budget::WorkspaceBudget`, SPEC §15).
    Workspace {
        principal: Principal,
    },
    /// The workspace's gated tool calls' requests (SPEC §15), of one task
    /// when `task_id` is given, newest first within a page.
    Approvals {
        principal: Principal,
        #[serde(default)]
        task_id: Option<String>,
        #[serde(default)]
        cursor: Option<String>,
        #[serde(default)]
        limit: Option<u64>,
    },
    /// Approves a request at `expected_version`: its occurrence resumes and
    /// the call is made once, with exactly its arguments.
    ApproveCall {
        principal: Principal,
        request_id: String,
        expected_version: u64,
    },
    /// Denies a request at `expected_version`: its occurrence ends skipped
    /// `denied`.
    DenyCall {
        principal: Principal,
        request_id: String,
        expected_version: u64,
        #[serde(default)]
        note: Option<String>,
    },
    /// Sets the workspace's monthly budget (`null`: none), if its version is
    /// still `expected_version` (0 when the workspace has none yet). A raise
    /// takes effect at the next occurrence.
    SetBudget {
        principal: Principal,
        /// Required, `null` included: a missing budget is never read as none.
        #[serde(deserialize_with = "Option::deserialize")]
        budget: Option<MonthlyBudget>,
        expected_version: u64,
    },
}

/// A workspace's budget as `set_budget` takes it and `workspace` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonthlyBudget {
    pub max_usd_per_month: f64,
}

/// The workspace as `workspace` and `set_budget` answer it (SPEC §15).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkspaceView {
    pub budget: Option<MonthlyBudget>,
    /// What this month holds: its runs' costs and the reservations of the
    /// runs under way.
    pub spent_usd: f64,
    pub month: String,
    pub version: u64,
    /// The month's budget is spent: its occurrences skip `budget_reached`.
    pub reached: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
}

impl OwnRequests for Own {
    const OPS: &'static [&'static str] = &[
        "list",
        "get",
        "approve",
        "pause",
        "resume",
        "delete",
        "restore",
        "skip_next",
        "unskip",
        "run_now",
        "runs",
        "workspace",
        "approvals",
        "approve_call",
        "deny_call",
        "set_budget",
    ];

    fn principal(&self) -> &Principal {
        match self {
            Own::List { principal, .. }
            | Own::Get { principal, .. }
            | Own::Runs { principal, .. }
            | Own::Workspace { principal }
            | Own::SetBudget { principal, .. }
            | Own::Approvals { principal, .. }
            | Own::ApproveCall { principal, .. }
            | Own::DenyCall { principal, .. } => principal,
            Own::Approve { target, .. }
            | Own::Pause { target, .. }
            | Own::Delete { target, .. }
            | Own::Restore { target } => &target.principal,
        }
    }
}

pub struct Admin<S, G, Q> {
    store: S,
    schedules: G,
    /// Where a run now's message goes (the runs queue).
    queue: Q,
    settings: AdminSettings,
}

/// What admin needs besides its ports.
#[derive(Debug, Clone, Copy)]
pub struct AdminSettings {
    /// `MAX_ACTIVE_REMINDERS`: a restore never takes an owner past it.
    pub max_active: usize,
    /// `RETENTION_DAYS`: a deleted reminder expires this long after.
    pub retention: chrono::Duration,
}

/// A task as `list` and the writes show it to an admin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub task_id: TaskId,
    pub kind: TaskKind,
    /// A connector task's prompt; never a reminder's title (its person's).
    pub title: Option<String>,
    pub state: TaskState,
    pub version: u64,
    pub hold: Vec<&'static str>,
    pub pending: bool,
}

/// A difference between the approved bounds and a pending change.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffView {
    pub what: String,
    pub from: String,
    pub to: String,
    pub widens: bool,
    /// In words.
    pub text: String,
}

/// A task as `get` shows it to an admin.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskDetail {
    /// The whole task as stored, a reminder's title and instruction left out.
    pub task: Task,
    pub state: TaskState,
    pub version: u64,
    pub pending_diff: Vec<DiffView>,
    pub next_fires: Vec<Fire>,
    pub explanation: String,
    /// What the approved bounds, and a pending widening, can cost in a
    /// month (`domain::task::ceiling`): an admin sees it before approving.
    pub cost_ceiling: CostCeilings,
}

/// The cost ceilings of a task's approved and pending bounds (`None`: no
/// budget, as a reminder's).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostCeilings {
    pub approved: Option<CostCeiling>,
    pub pending: Option<CostCeiling>,
}

/// What an admin request answers; the handler encodes it after `"ok": true`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum AdminAnswer {
    List {
        tasks: Vec<TaskView>,
        /// The next page's, or null on the last.
        cursor: Option<String>,
    },
    Get(Box<TaskDetail>),
    Changed {
        task: TaskView,
        explanation: String,
    },
    /// `run_now`: the extra occurrence's run id, as its event will name it.
    RunNow {
        run_id: String,
        replayed: bool,
        task: TaskView,
        explanation: String,
    },
    Runs {
        runs: Vec<RunView>,
    },
    /// `workspace` and `set_budget`.
    Workspace {
        workspace: WorkspaceView,
    },
    /// `approvals`.
    Approvals {
        approvals: Vec<ApprovalView>,
        cursor: Option<String>,
    },
    /// `approve_call` and `deny_call`.
    Approval {
        approval: ApprovalView,
    },
}

fn workspace_answer(budget: WorkspaceBudget) -> AdminAnswer {
    AdminAnswer::Workspace {
        workspace: WorkspaceView {
            reached: budget.reached(),
            budget: budget
                .limit_usd
                .map(|max_usd_per_month| MonthlyBudget { max_usd_per_month }),
            spent_usd: budget.committed_usd,
            month: budget.period,
            version: budget.version,
            updated_by: budget.updated_by,
            updated_at: budget.updated_at,
        },
    }
}

/// A decision the request refused, as the admin's answer says it.
fn refused_decision(undecidable: Undecidable, expected: u64) -> AdminRefusal {
    match undecidable {
        Undecidable::VersionMoved { current } => AdminRefusal::VersionConflict { expected, current },
        Undecidable::State(state) => AdminRefusal::InvalidRequest(format!("the request is {}", state.as_str())),
    }
}

/// The door's verdict in words, as an admin reads it (`domain::task::explain`).
fn explain(task: &Task, now: DateTime<Utc>) -> String {
    explain::explain(task, Reader::Admin, now)
}

/// `run_now` is for connector tasks: a reminder's runs are its owner's to
/// run (SPEC §11), as its skips are (`domain::task::edit`).
fn connector_only(task: &Task, op: &str) -> Result<(), AdminRefusal> {
    match task.kind {
        TaskKind::Connector => Ok(()),
        TaskKind::Reminder => Err(AdminRefusal::InvalidRequest(format!(
            "{op} is for connector tasks: a reminder's runs are its owner's"
        ))),
    }
}

/// A task as an admin reads it. A reminder belongs to its person (SPEC §8):
/// its state, schedule, version, outcomes and cost, never its title,
/// instruction or output.
fn view(task: &Task) -> TaskView {
    TaskView {
        task_id: task.task_id.clone(),
        kind: task.kind,
        title: (task.kind == TaskKind::Connector).then(|| task.title.clone()),
        state: task.state(),
        version: task.version,
        hold: task.hold.entries().map(|(r, _)| r.as_str()).collect(),
        pending: task.pending.is_some(),
    }
}

/// The whole task as `get` shows it; a reminder's person's text (title,
/// instruction) left out.
fn admin_task(task: &Task) -> Task {
    let mut shown = task.clone();
    if task.kind == TaskKind::Reminder {
        shown.title = String::new();
        shown.instruction = None;
    }
    shown
}

impl<S: TaskCatalog + TaskStore + ReminderStore + WorkspaceBudgets + CallApprovals, G: Schedules, Q: RunQueue>
    Admin<S, G, Q>
{
    /// `runs`: the task's latest run records, newest first, with the skip
    /// and failure reasons in words (`domain::operations::history`).
    async fn runs(&self, principal: &Principal, task_id: &str, limit: Option<u64>) -> Outcome {
        let limit = match crate::domain::operations::history::runs_limit(limit) {
            Ok(limit) => limit,
            Err(message) => return Ok(Err(AdminRefusal::InvalidRequest(message))),
        };
        let task = match self.load(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let runs = self.store.runs(&task.task_id, limit).await?;
        Ok(Ok(AdminAnswer::Runs {
            runs: runs
                .iter()
                .map(|r| crate::domain::operations::history::view(r, task.kind == TaskKind::Connector))
                .collect(),
        }))
    }
}

impl<S: TaskCatalog + TaskStore + ReminderStore + WorkspaceBudgets + CallApprovals, G: Schedules, Q: RunQueue>
    Admin<S, G, Q>
{
    pub fn new(store: S, schedules: G, queue: Q, settings: AdminSettings) -> Self {
        Self {
            store,
            schedules,
            queue,
            settings,
        }
    }

    /// Answers one decoded request: a typed answer, or a refusal (an
    /// `ok: false` answer); internal failures are errors (the caller retries).
    pub async fn handle(&self, request: AdminRequest, now: DateTime<Utc>) -> Outcome {
        let outcome = self.dispatch(request, now).await?;
        if let Err(refusal) = &outcome {
            tracing::info!(code = refusal.code(), "admin request refused");
        }
        Ok(outcome)
    }

    async fn load(&self, principal: &Principal, task_id: &str) -> Result<Result<Task, AdminRefusal>, AdminError> {
        let Some(id) = TaskId::parse(task_id) else {
            return Ok(Err(AdminRefusal::NotFound(task_id.to_owned())));
        };
        if let Some(task) = self.store.task(&principal.workspace, &id).await? {
            return Ok(Ok(task));
        }
        // Not in the caller's workspace: a task of another workspace is
        // `forbidden` (SPEC §8), one of none `not_found`.
        Ok(Err(match self.store.task_workspace(&id).await? {
            Some(other) if other != principal.workspace => AdminRefusal::Forbidden,
            _ => AdminRefusal::NotFound(task_id.to_owned()),
        }))
    }

    /// A page of the workspace's tasks in task id order, as the owner's
    /// `list` pages (`limit` 1 to 100, default 50; an opaque cursor).
    async fn list(&self, principal: &Principal, limit: Option<u64>, cursor: Option<String>) -> Outcome {
        let limit = match crate::app::schedules::page_limit(limit) {
            Ok(limit) => limit,
            Err(message) => return Ok(Err(AdminRefusal::InvalidRequest(message))),
        };
        let after = match cursor.as_deref().map(decode_cursor).transpose() {
            Ok(after) => after,
            Err(message) => return Ok(Err(AdminRefusal::InvalidRequest(message))),
        };
        let (tasks, next) = self
            .store
            .workspace_tasks_page(&principal.workspace, after.as_deref(), limit)
            .await?;
        Ok(Ok(AdminAnswer::List {
            tasks: tasks.iter().map(view).collect(),
            cursor: next.map(hex::encode),
        }))
    }

    async fn dispatch(&self, request: AdminRequest, now: DateTime<Utc>) -> Outcome {
        let principal = request.principal().clone();
        if !principal.holds(ADMIN_SCOPE) {
            return Ok(Err(AdminRefusal::Forbidden));
        }
        let own = match request {
            Request::Shared(shared) => return shared.make(self, now).await,
            Request::Own(own) => own,
        };
        match own {
            Own::List { limit, cursor, .. } => self.list(&principal, limit, cursor).await,
            Own::Get { task_id, .. } => self.get(&principal, &task_id, now).await,
            Own::Runs { task_id, limit, .. } => self.runs(&principal, &task_id, limit).await,
            Own::Approve {
                target,
                arguments,
                bindings,
                ask_first,
            } => self.approve(&target, arguments, bindings, ask_first, now).await,
            Own::Pause { target, note } => self.edit(&target, Edit::Pause { note }, now).await,
            Own::Delete { target, note } => self.edit(&target, Edit::Cancel { note }, now).await,
            Own::Restore { target } => self.edit(&target, Edit::Restore, now).await,
            Own::Workspace { .. } => {
                let month = budget::period(now);
                Ok(Ok(workspace_answer(
                    self.store.workspace_budget(&principal.workspace, &month).await?,
                )))
            }
            Own::SetBudget {
                budget,
                expected_version,
                ..
            } => {
                let limit = budget.map(|b| b.max_usd_per_month);
                self.set_budget(&principal, limit, expected_version, now).await
            }
            Own::Approvals {
                task_id, cursor, limit, ..
            } => self.approvals(&principal, task_id, cursor, limit, now).await,
            Own::ApproveCall {
                request_id,
                expected_version,
                ..
            } => self.approve_call(&principal, &request_id, expected_version, now).await,
            Own::DenyCall {
                request_id,
                expected_version,
                note,
                ..
            } => {
                self.deny_call(&principal, &request_id, expected_version, note, now)
                    .await
            }
        }
    }

    /// `approve`: the task approved with these arguments, bindings and
    /// gated tools, through the one change path.
    async fn approve(
        &self,
        target: &Target,
        arguments: BTreeMap<String, String>,
        bindings: BTreeMap<String, Option<String>>,
        ask_first: Option<std::collections::BTreeSet<String>>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let admin = &target.principal.id;
        self.change(target, now, |task, installs| {
            let mut approved = task.clone();
            approval::approve(&mut approved, installs, admin, arguments, bindings, ask_first, now)
                .map_err(|e| AdminRefusal::InvalidRequest(e.0))?;
            Ok(Decision::Write(Box::new(approved)))
        })
        .await
    }

    /// `approvals`: a page of the workspace's requests (`limit` 1 to 100,
    /// default 50; the cursor is the last request id of the page before).
    async fn approvals(
        &self,
        principal: &Principal,
        task_id: Option<String>,
        cursor: Option<String>,
        limit: Option<u64>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let limit = match crate::app::schedules::page_limit(limit) {
            Ok(limit) => limit,
            Err(message) => return Ok(Err(AdminRefusal::InvalidRequest(message))),
        };
        if let Some(id) = &task_id
            && let Err(refusal) = self.load(principal, id).await?
        {
            return Ok(Err(refusal));
        }
        let (requests, next) = self
            .store
            .approvals_page(&principal.workspace, task_id.as_deref(), cursor.as_deref(), limit)
            .await?;
        Ok(Ok(AdminAnswer::Approvals {
            approvals: requests.iter().map(|r| approvals::view(r, now)).collect(),
            cursor: next,
        }))
    }

    /// A request of the caller's workspace, as stored.
    async fn request(
        &self,
        principal: &Principal,
        request_id: &str,
    ) -> Result<Result<CallApproval, AdminRefusal>, AdminError> {
        Ok(self
            .store
            .approval(&principal.workspace, request_id)
            .await?
            .ok_or_else(|| AdminRefusal::NoRequest(request_id.to_owned())))
    }

    /// `approve_call`: the request approved (its occurrence still
    /// awaiting), then its occurrence's resume sent. Approving again a
    /// request already approved at `expected` and not yet used sends the
    /// resume again (a send that failed is retried this way).
    async fn approve_call(
        &self,
        principal: &Principal,
        request_id: &str,
        expected: u64,
        now: DateTime<Utc>,
    ) -> Outcome {
        let asked = match self.request(principal, request_id).await? {
            Ok(asked) => asked,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let approved = if asked.state == ApprovalState::Approved && asked.used_at.is_none() && asked.version == expected
        {
            asked
        } else {
            let decided = match asked.decide(CallDecision::Approve, &principal.id, None, expected, now) {
                Ok(decided) => decided,
                Err(undecidable) => return Ok(Err(refused_decision(undecidable, expected))),
            };
            if !self.store.approve_call(&decided, expected).await? {
                return Ok(Err(self.moved(principal, request_id, expected).await?));
            }
            decided
        };
        self.queue.send_run(&approvals::resume_message(&approved)).await?;
        tracing::info!(request_id, "a gated call approved; its occurrence resumes");
        Ok(Ok(AdminAnswer::Approval {
            approval: approvals::view(&approved, now),
        }))
    }

    /// `deny_call`: the request denied and its occurrence ended skipped
    /// `denied`, in one write.
    async fn deny_call(
        &self,
        principal: &Principal,
        request_id: &str,
        expected: u64,
        note: Option<String>,
        now: DateTime<Utc>,
    ) -> Outcome {
        let asked = match self.request(principal, request_id).await? {
            Ok(asked) => asked,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let denied = match asked.decide(CallDecision::Deny, &principal.id, note, expected, now) {
            Ok(denied) => denied,
            Err(undecidable) => return Ok(Err(refused_decision(undecidable, expected))),
        };
        match approvals::end_occurrence(&self.store, &denied, expected, now, self.settings.retention).await? {
            Ok(()) => Ok(Ok(AdminAnswer::Approval {
                approval: approvals::view(&denied, now),
            })),
            Err(approvals::NotEnded::VersionMoved(current)) => {
                Ok(Err(AdminRefusal::VersionConflict { expected, current }))
            }
            Err(approvals::NotEnded::NotAwaiting) => Ok(Err(AdminRefusal::InvalidRequest(
                "its occurrence no longer waits for it".to_owned(),
            ))),
        }
    }

    /// Why a fenced decision was not written: the request's version moved,
    /// or its occurrence no longer waits.
    async fn moved(&self, principal: &Principal, request_id: &str, expected: u64) -> Result<AdminRefusal, AdminError> {
        Ok(match self.store.approval(&principal.workspace, request_id).await? {
            Some(now) if now.version != expected => AdminRefusal::VersionConflict {
                expected,
                current: now.version,
            },
            Some(_) => AdminRefusal::InvalidRequest("its occurrence no longer waits for it".to_owned()),
            None => AdminRefusal::NoRequest(request_id.to_owned()),
        })
    }

    /// `set_budget`: a limit within its bounds, written if the version is
    /// the one the admin read.
    async fn set_budget(
        &self,
        principal: &Principal,
        limit: Option<f64>,
        expected: u64,
        now: DateTime<Utc>,
    ) -> Outcome {
        if let Some(why) = budget::workspace_limit_error(limit) {
            return Ok(Err(AdminRefusal::InvalidRequest(why)));
        }
        let set = self
            .store
            .set_workspace_budget(
                &principal.workspace,
                limit,
                expected,
                &principal.id,
                now,
                &budget::period(now),
            )
            .await?;
        Ok(match set {
            Ok(budget) => {
                tracing::info!(version = budget.version, "workspace budget set");
                Ok(workspace_answer(budget))
            }
            Err(current) => Err(AdminRefusal::VersionConflict { expected, current }),
        })
    }

    /// A restored reminder counts toward its owner's `MAX_ACTIVE_REMINDERS`
    /// again: a restore that would take the owner past it is refused.
    async fn restore_fits(
        &self,
        principal: &Principal,
        task_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Result<(), AdminRefusal>, AdminError> {
        let task = match self.load(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        let Provenance::User { principal: owner } = &task.provenance else {
            return Ok(Ok(()));
        };
        let mut restored = task.clone();
        restored.overrides = OverrideEdit::Restore.apply(task.overrides.as_ref(), &principal.id, now);
        if task.state() != TaskState::Deleted || !matches!(restored.state(), TaskState::Scheduled | TaskState::Paused) {
            return Ok(Ok(()));
        }
        let active = self.store.owner_reminders(&task.workspace, owner).await?.active();
        Ok(if active >= self.settings.max_active {
            Err(AdminRefusal::InvalidRequest(format!(
                "restoring this reminder would give its owner more than {} active reminders (too_many_active)",
                self.settings.max_active
            )))
        } else {
            Ok(())
        })
    }

    /// One task with its pending difference, next fires and explanation.
    async fn get(&self, principal: &Principal, task_id: &str, now: DateTime<Utc>) -> Outcome {
        let task = match self.load(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        // The occurrence skipped next is listed as a skip, as DST's are.
        let skipped = skip::pending(task.skip_next.as_ref(), now);
        let fires: Vec<Fire> = next_fires(&task.spec.schedule, now, PREVIEW_COUNT)
            .unwrap_or_default()
            .into_iter()
            .map(|fire| match (fire.at, skipped) {
                (Some(at), Some(skip)) if at == skip.occurrence => Fire {
                    at: None,
                    note: Some(format!("skipped by {}: it does not run", skip.by)),
                    ..fire
                },
                _ => fire,
            })
            .collect();
        let diff: Vec<DiffView> = task
            .pending
            .as_ref()
            .map(|p| compare(&task.spec, &p.spec))
            .unwrap_or_default()
            .iter()
            .map(|d| DiffView {
                what: d.what.clone(),
                from: d.from.clone(),
                to: d.to.clone(),
                widens: d.widens,
                text: d.to_string(),
            })
            .collect();
        Ok(Ok(AdminAnswer::Get(Box::new(TaskDetail {
            task: admin_task(&task),
            state: task.state(),
            version: task.version,
            pending_diff: diff,
            next_fires: fires,
            explanation: explain(&task, now),
            cost_ceiling: CostCeilings {
                approved: task.spec.budget.map(|b| cost_ceiling(&task.spec.schedule, b, now)),
                pending: task
                    .pending
                    .as_ref()
                    .and_then(|p| p.spec.budget.map(|b| cost_ceiling(&p.spec.schedule, b, now))),
            },
        }))))
    }

    /// Reads, checks the version, decides the change, writes it
    /// conditionally, and puts the schedule in step.
    async fn change(
        &self,
        target: &Target,
        now: DateTime<Utc>,
        decide: impl FnOnce(&Task, &BTreeMap<String, Install>) -> Result<Decision, AdminRefusal>,
    ) -> Outcome {
        let (principal, task_id, expected_version) = (&target.principal, &target.task_id, target.expected_version);
        let task = match self.load(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if task.version != expected_version {
            return Ok(Err(AdminRefusal::VersionConflict {
                expected: expected_version,
                current: task.version,
            }));
        }
        let installs: BTreeMap<String, Install> = self
            .store
            .workspace_installs(&principal.workspace)
            .await?
            .into_iter()
            .map(|i| (i.install_id.clone(), i))
            .collect();
        let decision = match decide(&task, &installs) {
            Ok(decision) => decision,
            Err(refusal) => return Ok(Err(refusal)),
        };
        match change::commit(
            &self.store,
            &self.schedules,
            &task,
            decision,
            now,
            self.settings.retention,
        )
        .await?
        {
            Ok(task) => Ok(Ok(AdminAnswer::Changed {
                task: view(&task),
                explanation: explain(&task, now),
            })),
            Err(current) => Ok(Err(AdminRefusal::VersionConflict {
                expected: expected_version,
                current,
            })),
        }
    }
}

/// An admin list cursor: the hex of the last task id of the page before.
fn decode_cursor(text: &str) -> Result<String, String> {
    let bad = || "cursor is not one this function returned".to_owned();
    let id = String::from_utf8(hex::decode(text).map_err(|_| bad())?).map_err(|_| bad())?;
    crate::domain::task::TaskId::parse(&id).ok_or_else(bad)?;
    Ok(id)
}

impl<S: TaskCatalog + TaskStore + ReminderStore + WorkspaceBudgets + CallApprovals, G: Schedules, Q: RunQueue> Edits
    for Admin<S, G, Q>
{
    type Outcome = Outcome;

    /// `pause`, `resume`, `delete`, `restore`, `skip_next` and `unskip`:
    /// the admin's rules are `domain::task::edit`'s; a restore must also fit its
    /// owner's cap, which only the store can tell.
    async fn edit(&self, target: &Target, edit: Edit, now: DateTime<Utc>) -> Outcome {
        if edit == Edit::Restore
            && let Err(refusal) = self.restore_fits(&target.principal, &target.task_id, now).await?
        {
            return Ok(Err(refusal));
        }
        self.change(target, now, |task, _| {
            edit::decide(&edit, Actor::Admin(&target.principal.id), task, now)
                .map_err(|refusal| AdminRefusal::InvalidRequest(refusal.to_string()))
        })
        .await
    }

    /// `run_now`: one extra occurrence of an approved connector task now.
    async fn run_now(&self, target: &Target, key: &str, now: DateTime<Utc>) -> Outcome {
        let (principal, task_id, expected_version) = (&target.principal, &target.task_id, target.expected_version);
        if let Err(rejection) = crate::domain::reminder::check_id("idempotency_key", key) {
            return Ok(Err(AdminRefusal::InvalidRequest(rejection.to_string())));
        }
        let task = match self.load(principal, task_id).await? {
            Ok(task) => task,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if let Err(refusal) = connector_only(&task, "run_now") {
            return Ok(Err(refusal));
        }
        let install = match &task.provenance {
            Provenance::Connector { install_id, .. } => self.store.install(&task.workspace, install_id).await?,
            Provenance::User { .. } => None,
        };
        let ask = run_now::Ask {
            principal,
            task: &task,
            install: install.as_ref(),
            key,
            expected_version,
        };
        let requested = run_now::request(
            (&self.store, &self.schedules, &self.queue),
            ask,
            now,
            self.settings.retention,
        )
        .await?;
        Ok(match requested {
            Requested::Sent { run_id, task, replayed } => Ok(AdminAnswer::RunNow {
                run_id,
                replayed,
                task: view(&task),
                explanation: explain(&task, now),
            }),
            Requested::Refused(why) => Err(AdminRefusal::InvalidRequest(format!("run_now refused: {why}"))),
            Requested::VersionMoved { current } => Err(AdminRefusal::VersionConflict {
                expected: expected_version,
                current,
            }),
            Requested::Conflict => Err(AdminRefusal::IdempotencyConflict),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::change::SharedRequest;

    #[test]
    fn every_admin_op_decodes_and_an_unknown_one_names_them_all() {
        crate::app::change::assert_every_op_decodes::<Own>();
        let pause = serde_json::json!({"op": "pause", "principal": {"id": "adm", "workspace": "ws", "scopes": []},
                                       "task_id": "t", "expected_version": 3, "note": "n"});
        assert!(matches!(
            serde_json::from_value::<AdminRequest>(pause).unwrap(),
            Request::Own(Own::Pause { note: Some(_), .. })
        ));
        let run_now = serde_json::json!({"op": "run_now", "principal": {"id": "adm", "workspace": "ws", "scopes": []},
                                         "task_id": "t", "expected_version": 3, "idempotency_key": "k"});
        assert!(matches!(
            serde_json::from_value::<AdminRequest>(run_now).unwrap(),
            Request::Shared(SharedRequest::RunNow { .. })
        ));
        let unskip_without_version = serde_json::json!({"op": "unskip", "principal": {"id": "adm", "workspace": "ws", "scopes": []},
                                                  "task_id": "t"});
        let error = serde_json::from_value::<AdminRequest>(unskip_without_version)
            .unwrap_err()
            .to_string();
        assert!(error.contains("missing field `expected_version`"), "{error}");
    }
}
