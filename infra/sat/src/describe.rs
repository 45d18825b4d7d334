//! `sat describe <task_id>`: a task at a glance (SPEC §14), read as the
//! admin function reads it. The task, its explanation in words, its next
//! fires, its pending bounds and their cost ceilings come from
//! `app::admin`'s `get`, its recent runs with their reasons from admin
//! `runs` (`domain::operations::history`), both through the shared DynamoDB adapter:
//! nothing here reads an item's attributes itself. Beside them: the
//! coming year's DST skip and repeat, what the task committed against its
//! budget this month, and whether Scheduler's schedule is in step with the
//! task. A reminder is shown as an admin sees it: its state, schedule,
//! outcomes and cost, never its title, instruction or output (SPEC §8).

use chrono::{DateTime, Utc};
use serde::Serialize;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::WorkspaceView;
use shared::app::admin::{Admin, AdminAnswer, AdminRefusal, AdminRequest, AdminSettings, DiffView, Own, TaskDetail};
use shared::app::approvals::ApprovalView;
use shared::domain::operations::history::RunView;
use shared::domain::reminder::Principal;
use shared::domain::run::definition::ScheduleDefinition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::gate::ApprovalState;
use shared::domain::schedule::Schedule;
use shared::domain::schedule::preview::dst_changes;
use shared::domain::task::budget::{Budget, period};
use shared::domain::task::ceiling::CostCeiling;
use shared::domain::task::limits::Limits;
use shared::domain::task::{Provenance, TaskId, TaskKind};
use shared::ports::{Schedules, TaskCatalog};

use crate::check::{FireView, fires_table};
use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// The runs queue of the admin use case sat reads through: sat makes no
/// writes, so it never sends a run (a run now is the admin function's).
struct NoRuns;

impl shared::ports::RunQueue for NoRuns {
    async fn send_run(
        &self,
        _message: &shared::domain::run::occurrence::RunMessage,
    ) -> Result<(), shared::ports::QueueError> {
        Err(shared::ports::QueueError {
            operation: "SendMessage",
            source: "sat reads and never runs a task".into(),
        })
    }
}

/// Who `sat` reads as: an admin of the task's workspace, reading only.
const OPERATOR: &str = "sat";

#[derive(Debug, Clone, clap::Args)]
pub struct DescribeArgs {
    /// The task's id (`rem_…` for a reminder, `con_…` for a connector task).
    pub task_id: String,
    /// Its workspace (default: looked up through the table's task index).
    #[arg(long)]
    pub workspace: Option<String>,
    /// How many recent runs to show (1-50).
    #[arg(long, default_value_t = 10)]
    pub runs: u64,
}

/// A task as `describe` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct DescribeReport {
    pub task_id: String,
    pub workspace: String,
    pub kind: TaskKind,
    pub provenance: Provenance,
    /// A connector task's prompt; never a reminder's title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub state: String,
    pub version: u64,
    /// Whether and when it runs next, and why (the admin's explanation).
    pub explanation: String,
    pub hold: Vec<HoldView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declaration_error: Option<String>,
    pub schedule: Schedule,
    pub schedule_words: String,
    pub expression: String,
    pub timezone: String,
    pub scheduler: SchedulerView,
    pub next_fires: Vec<FireView>,
    pub dst: Vec<FireView>,
    pub tools: Vec<String>,
    pub limits: Limits,
    pub budget: Option<Budget>,
    /// A widening waiting for an admin, against the approved bounds.
    pub pending: Vec<DiffView>,
    pub cost: CostView,
    /// The workspace's monthly budget and this month's commitments
    /// (SPEC §15), as the admin's `workspace` answers them.
    pub workspace_budget: WorkspaceView,
    /// The task's gated tool calls still waiting for an admin, or approved
    /// and not yet made (SPEC §15), as the admin's `approvals` shows them.
    pub approvals: Vec<ApprovalView>,
    /// The latest runs, newest first, each with its reason in words.
    pub runs: Vec<RunView>,
    /// How many of those were missed: delivered too late, or found by the
    /// missed-occurrence check never delivered or never finished.
    pub missed: usize,
    pub read_at: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct HoldView {
    pub reason: &'static str,
    pub since: String,
    pub detail: String,
}

/// The task's Scheduler schedule, against what the task says it should be.
#[derive(Debug, Clone, Serialize)]
pub struct SchedulerView {
    /// Whether Scheduler holds a schedule of the task's name.
    pub exists: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Whether it is the task's schedule as the system would put it now.
    pub in_step: bool,
    pub words: String,
}

/// What the task costs this month.
#[derive(Debug, Clone, Serialize)]
pub struct CostView {
    /// The budget period (UTC month).
    pub period: String,
    /// USD committed against the task's budget this month (spent plus
    /// reserved by runs in flight).
    pub committed_usd: f64,
    pub ceiling: Option<CostCeiling>,
    pub pending_ceiling: Option<CostCeiling>,
}

fn refused(refusal: AdminRefusal, task_id: &str, workspace: &str) -> SatError {
    match refusal {
        AdminRefusal::NotFound(_) | AdminRefusal::Forbidden => SatError::NotFound {
            task_id: task_id.to_owned(),
            where_: format!(" in workspace {workspace}"),
        },
        other => SatError::Admin(other.to_string()),
    }
}

fn admin_error(e: shared::app::admin::AdminError) -> SatError {
    SatError::Admin(format!("reading the task: {}", shared::error_chain(&e)))
}

/// The task's own workspace: a task of none is not found, and a wrong
/// `--workspace` is said as such.
async fn home_workspace(args: &DescribeArgs, resources: &Resources, store: &DynamoStore) -> Result<String, SatError> {
    let Some(id) = TaskId::parse(&args.task_id) else {
        return Err(SatError::NotFound {
            task_id: args.task_id.clone(),
            where_: ": a task id is rem_ or con_ and 32 hex digits".into(),
        });
    };
    match (&args.workspace, store.task_workspace(&id).await?) {
        (_, None) => Err(SatError::NotFound {
            task_id: args.task_id.clone(),
            where_: format!(" in {}", resources.source),
        }),
        (Some(given), Some(home)) if *given != home => Err(SatError::NotFound {
            task_id: args.task_id.clone(),
            where_: format!(" in workspace {given} (it is in workspace {home})"),
        }),
        (_, Some(home)) => Ok(home),
    }
}

pub async fn run(args: &DescribeArgs, resources: &Resources) -> Result<DescribeReport, SatError> {
    let now = Utc::now();
    let table = resources.output("TasksTableName")?;
    let group = resources.output("ScheduleGroupName")?;
    let store = DynamoStore::from_sdk(&resources.sdk, table);
    let workspace = home_workspace(args, resources, &store).await?;
    // The admin's reads; the settings only bound writes, which sat makes none of.
    let schedules = EventBridgeSchedules::from_sdk(
        &resources.sdk,
        shared::config::ScheduleTarget {
            group: group.to_owned(),
            queue_arn: String::new(),
            role_arn: String::new(),
            dlq_arn: String::new(),
        },
    );
    let settings = AdminSettings {
        max_active: 0,
        retention: chrono::Duration::zero(),
    };
    let reader = Reader {
        admin: Admin::new(store, schedules.clone(), NoRuns, settings),
        task_id: &args.task_id,
        workspace: &workspace,
        now,
    };
    let detail = match reader.ask(|principal, task_id| Own::Get { principal, task_id }).await? {
        Ok(AdminAnswer::Get(detail)) => detail,
        other => return Err(reader.unexpected("get", other)),
    };
    let limit = Some(args.runs);
    let runs = match reader
        .ask(|principal, task_id| Own::Runs {
            principal,
            task_id,
            limit,
        })
        .await?
    {
        Ok(AdminAnswer::Runs { runs }) => runs,
        Err(AdminRefusal::InvalidRequest(why)) => return Err(SatError::Usage(format!("--runs: {why}"))),
        other => return Err(reader.unexpected("runs", other)),
    };
    let approvals = match reader.ask(approvals_of).await? {
        Ok(AdminAnswer::Approvals { approvals, .. }) => approvals.into_iter().filter(waiting).collect(),
        other => return Err(reader.unexpected("approvals", other)),
    };
    let workspace_budget = match reader.ask(|principal, _| Own::Workspace { principal }).await? {
        Ok(AdminAnswer::Workspace { workspace }) => workspace,
        other => return Err(reader.unexpected("workspace", other)),
    };
    let scheduler = scheduler_view(&schedules, &detail).await?;
    let mut report = report(*detail, runs, scheduler, (workspace, workspace_budget), now);
    report.approvals = approvals;
    Ok(report)
}

/// The admin's reads of one task, as the operator in its workspace.
struct Reader<'a> {
    admin: Admin<DynamoStore, EventBridgeSchedules, NoRuns>,
    task_id: &'a str,
    workspace: &'a str,
    now: DateTime<Utc>,
}

impl Reader<'_> {
    /// The admin's answer to the request `request` builds from the
    /// operator's principal and the task id.
    async fn ask(
        &self,
        request: impl FnOnce(Principal, String) -> Own,
    ) -> Result<Result<AdminAnswer, AdminRefusal>, SatError> {
        let principal = Principal {
            id: OPERATOR.to_owned(),
            workspace: self.workspace.to_owned(),
            scopes: vec![shared::app::admin::ADMIN_SCOPE.to_owned()],
        };
        let request = request(principal, self.task_id.to_owned());
        self.admin
            .handle(AdminRequest::Own(request), self.now)
            .await
            .map_err(admin_error)
    }

    /// A refusal, or an answer of another operation's kind, as sat's error.
    fn unexpected(&self, op: &str, answer: Result<AdminAnswer, AdminRefusal>) -> SatError {
        match answer {
            Ok(_) => SatError::Admin(format!("admin {op} answered something else")),
            Err(refusal) => refused(refusal, self.task_id, self.workspace),
        }
    }
}

fn approvals_of(principal: Principal, task_id: String) -> Own {
    Own::Approvals {
        principal,
        task_id: Some(task_id),
        cursor: None,
        limit: Some(100),
    }
}

/// A tool call still waiting: open, or approved and not yet made.
fn waiting(approval: &ApprovalView) -> bool {
    approval.state == ApprovalState::Open || (approval.state == ApprovalState::Approved && approval.used_at.is_none())
}

async fn scheduler_view(schedules: &EventBridgeSchedules, detail: &TaskDetail) -> Result<SchedulerView, SatError> {
    let task = &detail.task;
    let status = schedules
        .status(task.task_id.as_str())
        .await
        .map_err(|e| SatError::Aws {
            action: "reading the task's schedule (scheduler:GetSchedule)".into(),
            message: e.to_string(),
        })?;
    let wanted = ScheduleDefinition::for_task(task).ok();
    let (in_step, words) = match (&wanted, &status) {
        (Some(w), None) if w.retired => (true, "none, as a finished task has none".to_owned()),
        (Some(w), Some(s)) if !w.retired && w.matches(s) => (
            true,
            format!(
                "{}, in step with the task",
                if s.enabled { "enabled" } else { "disabled" }
            ),
        ),
        (Some(w), Some(s)) if w.retired => (
            false,
            "present, but the task is finished: it should have none".to_owned(),
        ),
        (Some(w), Some(s)) => (
            false,
            format!(
                "out of step: Scheduler has {} {} ({}), the task wants {} {} ({}); the daily pass or the next change puts it back",
                s.expression.expression,
                s.expression.timezone,
                if s.enabled { "enabled" } else { "disabled" },
                w.expression.expression,
                w.expression.timezone,
                if w.enabled { "enabled" } else { "disabled" },
            ),
        ),
        (_, None) if task.spec.schedule.is_one_time() && task.completed_at.is_none() => {
            // A one-time schedule deletes itself after its one delivery.
            (
                false,
                "none: a one-time schedule deletes itself once it fired; if its time has not come, it is missing"
                    .into(),
            )
        }
        (_, None) => (false, "missing: the task has no Scheduler schedule".into()),
        (None, Some(_)) => (false, "present, but the task's schedule cannot be expressed".into()),
    };
    Ok(SchedulerView {
        exists: status.is_some(),
        expression: status
            .as_ref()
            .map(|s| format!("{} {}", s.expression.expression, s.expression.timezone)),
        enabled: status.as_ref().map(|s| s.enabled),
        in_step,
        words,
    })
}

/// Whether a run record is of an occurrence missed: past its catch-up
/// window, never delivered or never finished.
fn missed(run: &RunView) -> bool {
    run.reason.as_deref().is_some_and(|reason| {
        [
            SkipReason::Missed,
            SkipReason::NeverDelivered,
            SkipReason::NeverFinished,
        ]
        .iter()
        .any(|missed| missed.code() == reason)
    })
}

fn report(
    detail: TaskDetail,
    runs: Vec<RunView>,
    scheduler: SchedulerView,
    (workspace, workspace_budget): (String, WorkspaceView),
    now: DateTime<Utc>,
) -> DescribeReport {
    let task = &detail.task;
    let schedule = &task.spec.schedule;
    let (expression, timezone) = schedule
        .expression()
        .map(|e| (e.expression, e.timezone))
        .unwrap_or_default();
    let month = period(now);
    DescribeReport {
        task_id: task.task_id.to_string(),
        workspace,
        kind: task.kind,
        provenance: task.provenance.clone(),
        title: (task.kind == TaskKind::Connector).then(|| task.title.clone()),
        state: detail.state.as_str().to_owned(),
        version: detail.version,
        explanation: detail.explanation.clone(),
        hold: task
            .hold
            .entries()
            .map(|(reason, entry)| HoldView {
                reason: reason.as_str(),
                since: render::utc(entry.since),
                detail: entry.detail.clone(),
            })
            .collect(),
        declaration_error: task.declaration_error.clone(),
        schedule: schedule.clone(),
        schedule_words: schedule.in_words(),
        scheduler,
        next_fires: detail.next_fires.iter().map(|f| FireView::of(f, &timezone)).collect(),
        dst: dst_changes(schedule, now)
            .iter()
            .map(|f| FireView::of(f, &timezone))
            .collect(),
        expression,
        timezone,
        tools: task.spec.tools.iter().cloned().collect(),
        limits: task.spec.limits,
        budget: task.spec.budget,
        pending: detail.pending_diff.clone(),
        cost: CostView {
            committed_usd: task.budget_used.get(&month).copied().unwrap_or(0.0),
            period: month,
            ceiling: detail.cost_ceiling.approved.clone(),
            pending_ceiling: detail.cost_ceiling.pending.clone(),
        },
        missed: runs.iter().filter(|r| missed(r)).count(),
        approvals: Vec::new(),
        runs,
        workspace_budget,
        read_at: render::utc(now),
    }
}

impl Report for DescribeReport {
    fn human(&self) -> String {
        let mut text = render::fields(&self.fields());
        if !self.pending.is_empty() {
            let mut table = render::table(&["pending change", "from", "to", "widens"]);
            for diff in &self.pending {
                table.add_row(vec![
                    diff.what.clone(),
                    diff.from.clone(),
                    diff.to.clone(),
                    if diff.widens { "yes" } else { "no" }.to_owned(),
                ]);
            }
            text.push_str(&format!("{table}\n"));
        }
        text.push_str(&self.fires_text());
        text.push_str(&self.approvals_text());
        text.push_str(&self.runs_text());
        text
    }
}

impl DescribeReport {
    /// The task's fields, one a line: what it is, its state and why, its
    /// schedule, bounds, budget and cost.
    fn fields(&self) -> Vec<(&'static str, String)> {
        let origin = match &self.provenance {
            Provenance::Connector {
                server,
                prompt,
                install_id,
            } => {
                format!("connector task: prompt {prompt} of server {server} (install {install_id})")
            }
            Provenance::User { principal } => format!("reminder of {principal}"),
        };
        let mut pairs = vec![
            ("task", format!("{} in workspace {}", self.task_id, self.workspace)),
            ("what", origin),
            ("state", format!("{} (version {})", self.state, self.version)),
            ("why", self.explanation.clone()),
        ];
        for hold in &self.hold {
            pairs.push(("held", format!("{} since {}: {}", hold.reason, hold.since, hold.detail)));
        }
        if let Some(error) = &self.declaration_error {
            pairs.push(("refused", format!("the server's latest declaration: {error}")));
        }
        pairs.extend([
            ("schedule", self.schedule_words.clone()),
            ("expression", format!("{} in {}", self.expression, self.timezone)),
            ("scheduler", self.scheduler.words.clone()),
            (
                "tools",
                if self.tools.is_empty() {
                    "none".to_owned()
                } else {
                    self.tools.join(", ")
                },
            ),
            (
                "limits",
                format!(
                    "{} turns, {} tool calls, {} output tokens, {} s",
                    self.limits.max_turns,
                    self.limits.max_tool_calls,
                    self.limits.max_output_tokens,
                    self.limits.timeout_seconds
                ),
            ),
        ]);
        pairs.extend(self.money());
        pairs
    }

    /// Budget, cost this month and the cost ceilings.
    fn money(&self) -> Vec<(&'static str, String)> {
        let budget = render::budget(self.budget);
        let mut cost = format!("USD {:.4} committed in {}", self.cost.committed_usd, self.cost.period);
        if let Some(b) = self.budget {
            cost.push_str(&format!(" of {} a month", render::usd(b.max_usd_per_month)));
        }
        let mut pairs = vec![("budget", budget), ("cost", cost)];
        if let Some(ceiling) = &self.cost.ceiling {
            pairs.push(("ceiling", ceiling.words.clone()));
        }
        if let Some(ceiling) = &self.cost.pending_ceiling {
            pairs.push(("if approved", ceiling.words.clone()));
        }
        let w = &self.workspace_budget;
        let mut workspace = match w.budget {
            Some(b) => format!(
                "budget {} a month, USD {:.4} committed in {}",
                render::usd(b.max_usd_per_month),
                w.spent_usd,
                w.month
            ),
            None => format!("no budget (USD {:.4} committed in {})", w.spent_usd, w.month),
        };
        if w.reached {
            workspace.push_str(": REACHED, every occurrence of the workspace skips `budget_reached` until a raise");
        }
        pairs.push(("workspace", workspace));
        pairs
    }

    /// The next fires, and the DST notes of the coming year.
    fn fires_text(&self) -> String {
        let mut text = render::heading("Next fires");
        if self.next_fires.is_empty() {
            text.push_str("none\n");
        } else {
            text.push_str(&fires_table(&self.next_fires, &self.timezone));
            text.push('\n');
        }
        for fire in &self.dst {
            text.push_str(&format!(
                "DST: {}{}\n",
                fire.note.clone().unwrap_or_default(),
                fire.utc.as_ref().map(|u| format!(" ({u})")).unwrap_or_default()
            ));
        }
        text
    }

    /// The gated calls waiting for an admin (none: nothing said).
    fn approvals_text(&self) -> String {
        if self.approvals.is_empty() {
            return String::new();
        }
        let mut text = render::heading(&format!("Tool calls waiting ({})", self.approvals.len()));
        let mut table = render::table(&["request", "tool", "arguments", "state", "expires (UTC)", "version"]);
        for a in &self.approvals {
            let mut arguments = a.arguments.to_string();
            if arguments.chars().count() > 60 {
                arguments = format!("{}…", arguments.chars().take(59).collect::<String>());
            }
            table.add_row(vec![
                a.request_id.clone(),
                format!("{} on {}", a.tool, a.server),
                arguments,
                a.state.as_str().to_owned(),
                render::utc(a.expires_at),
                a.version.to_string(),
            ]);
        }
        text.push_str(&format!("{table}\n"));
        text.push_str("Decide with the admin function's approve_call or deny_call (docs/integrating.md).\n");
        text
    }

    /// The recent runs, in the task's zone and UTC.
    fn runs_text(&self) -> String {
        let mut text = render::heading(&format!(
            "Recent runs (latest {}; missed: {})",
            self.runs.len(),
            self.missed
        ));
        if self.runs.is_empty() {
            text.push_str("none yet\n");
            return text;
        }
        let mut table = render::table(&[
            &format!("scheduled ({})", self.timezone),
            "UTC",
            "status",
            "why",
            "cost",
        ]);
        for run in &self.runs {
            let local = DateTime::parse_from_rfc3339(&run.scheduled_time)
                .map(|t| render::local(t.with_timezone(&Utc), &self.timezone))
                .unwrap_or_default();
            table.add_row(vec![
                local,
                run.scheduled_time.clone(),
                format!("{:?}", run.status).to_lowercase(),
                run.explanation.clone(),
                format!("{:.4}", run.cost_usd),
            ]);
        }
        text.push_str(&format!("{table}\n"));
        text
    }
}
