//! The reconcile plan (SPEC §6): what a server declares against what is
//! stored, as one pure function that says which tasks to write and why.
//!
//! Invariants: never deletes a task; never writes `override`; never touches a
//! tombstoned task; a change that only narrows the approved bounds applies at
//! once, any widening (even mixed with narrowings) waits whole as `pending`
//! while the approved `spec` keeps running; a new required argument holds the
//! task until an admin gives a value; withdrawal is decided here, from
//! `prompts/list`, and nowhere else; each runtime hold is lifted only when
//! its own cause has cleared; a plan of an unchanged input writes nothing.
//!
//! The steps of [`plan`]: split the stored tasks into this install's and
//! others' ([`partition`]); for each distinct listed prompt, withdraw it when
//! unmarked, record a refused declaration ([`refuse`]), create a held task
//! ([`create`]) or bring the stored one up to the declaration ([`update`]:
//! reattach, accept, follow the arguments, follow the proposal or apply the
//! bounds, settle the holds); withdraw stored tasks whose prompt is gone.
//! What "widens" means is [`crate::domain::task::bounds`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use super::binding::check_binding;
use super::declaration::{self, Declaration};
use crate::domain::task::bounds::compare;
use crate::domain::task::hold::HoldReason;
use crate::domain::task::install::Install;
use crate::domain::task::limits::Ceilings;
use crate::domain::task::{Pending, Provenance, Spec, Task, TaskId, TaskKind};

/// A prompt as the server's `prompts/list` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedPrompt {
    pub name: String,
    /// name -> required
    pub arguments: BTreeMap<String, bool>,
    /// The marker's value, when the prompt's `_meta` carries it.
    pub marker: Option<Value>,
}

/// What reconcile read from one install's server.
#[derive(Debug, Clone)]
pub struct ServerView<'a> {
    pub install: &'a Install,
    pub prompts: &'a [ListedPrompt],
    pub tools: &'a BTreeSet<String>,
    /// How many live connector tasks this server may hold in its workspace:
    /// [`MAX_WORKSPACE_TASKS`] less the workspace's other servers' ones
    /// ([`workspace_room`]).
    pub room: usize,
}

/// The most live connector tasks one workspace holds, over all its
/// servers: Scheduler's schedules and its `CreateSchedule` rate are the
/// account's, shared by every tenant, so no one workspace's servers may
/// declare without bound. A declaration past it is refused by name, on its
/// install; tasks that exist are never taken away by it.
pub const MAX_WORKSPACE_TASKS: usize = 1_000;

/// The room [`ServerView::room`] names for `server`, from every task of its
/// workspace: the cap less the live (not tombstoned) connector tasks of
/// the workspace's other servers.
pub fn workspace_room(tasks: &[Task], server: &str) -> usize {
    let elsewhere = tasks
        .iter()
        .filter(|t| !is_tombstoned(t))
        .filter(|t| matches!(&t.provenance, Provenance::Connector { server: s, .. } if s != server))
        .count();
    MAX_WORKSPACE_TASKS.saturating_sub(elsewhere)
}

/// A kind of change, for logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Change {
    Created,
    Narrowed,
    PendingStored,
    PendingCleared,
    ProposalUpdated,
    HoldPlaced(HoldReason),
    HoldLifted(HoldReason),
    ArgumentsDropped,
    /// The prompt's argument list changed (names or required flags).
    ArgumentsChanged,
    DeclarationRefused,
    DeclarationAccepted,
    Reattached,
}

impl Change {
    pub fn kind(&self) -> String {
        match self {
            Change::HoldPlaced(r) => format!("hold_placed_{}", r.as_str()),
            Change::HoldLifted(r) => format!("hold_lifted_{}", r.as_str()),
            other => format!("{other:?}").chars().fold(String::new(), |mut s, c| {
                if c.is_uppercase() && !s.is_empty() {
                    s.push('_');
                }
                s.push(c.to_ascii_lowercase());
                s
            }),
        }
    }
}

/// A task to write: its new state, the task as it was read (`None`: a new
/// task), and why. The store writes a change conditional on the version
/// read, and sends exactly the attributes that differ between the two: what
/// is written is derived from the edit, never from a list of attribute names.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub task: Task,
    pub before: Option<Box<Task>>,
    pub changes: Vec<Change>,
}

impl Write {
    /// A new task, its `due` set (`domain::operations::overdue::refresh_due`).
    pub fn new(mut task: Task, changes: Vec<Change>) -> Self {
        let now = task.updated_at;
        crate::domain::operations::overdue::refresh_due(None, &mut task, now);
        Self {
            task,
            before: None,
            changes,
        }
    }

    /// A change of `before` into `after` (stamped with the change's time),
    /// its `due` kept or set again (`domain::operations::overdue::refresh_due`).
    pub fn change(before: &Task, mut after: Task, changes: Vec<Change>) -> Self {
        let now = after.updated_at;
        crate::domain::operations::overdue::refresh_due(Some(before), &mut after, now);
        Self {
            task: after,
            before: Some(Box::new(before.clone())),
            changes,
        }
    }

    /// The version the task was read at (`None`: a new task).
    pub fn read_version(&self) -> Option<u64> {
        self.before.as_ref().map(|t| t.version)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    pub writes: Vec<Write>,
    /// Prompts whose declaration was refused, and why.
    pub refused: BTreeMap<String, String>,
}

fn declared_spec(d: &Declaration) -> Spec {
    Spec {
        schedule: d.schedule.clone(),
        tools: d.tools.clone(),
        limits: d.limits,
        budget: Some(d.budget),
        arguments: BTreeMap::new(),
        needs: d.needs.clone(),
        bindings: BTreeMap::new(),
        agent: None,
        scopes: BTreeSet::new(),
    }
}

fn place(task: &mut Task, changes: &mut Vec<Change>, reason: HoldReason, now: DateTime<Utc>, detail: String) {
    let same = task.hold.entries().any(|(r, e)| r == reason && e.detail == detail);
    if !same {
        if !task.hold.has(reason) {
            changes.push(Change::HoldPlaced(reason));
        }
        task.hold.place(reason, now, detail);
    }
}

fn lift(task: &mut Task, changes: &mut Vec<Change>, reason: HoldReason) {
    if task.hold.lift(reason) {
        changes.push(Change::HoldLifted(reason));
    }
}

/// Holds that follow from the approved spec and the workspace's installs:
/// a required argument without a value, a need bound to a connector that is
/// gone. Shared with the admin's approve, which lifts them the same way.
pub fn settle_holds(
    task: &mut Task,
    changes: &mut Vec<Change>,
    installs: &BTreeMap<String, Install>,
    now: DateTime<Utc>,
) {
    if task.hold.has(HoldReason::AwaitingApproval) {
        return;
    }
    let missing: Vec<&String> = task
        .prompt_arguments
        .iter()
        .filter(|(name, required)| **required && !task.spec.arguments.contains_key(*name))
        .map(|(name, _)| name)
        .collect();
    if missing.is_empty() {
        lift(task, changes, HoldReason::AwaitingArgument);
    } else {
        let detail = format!(
            "no value for required argument {}",
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        );
        place(task, changes, HoldReason::AwaitingArgument, now, detail);
    }
    // A binding the approval rule refuses (the connector is gone, personal,
    // the declaring install or another install of its server) is never
    // honoured: the task holds until an admin rebinds.
    let unbound: Vec<(String, String)> = task
        .spec
        .bindings
        .iter()
        .filter_map(|(need, install)| {
            let id = install.as_ref()?;
            check_binding(task, id, installs)
                .err()
                .map(|refusal| (need.clone(), refusal.to_string()))
        })
        .collect();
    if unbound.is_empty() {
        lift(task, changes, HoldReason::NeedUnbound);
    } else {
        let detail = unbound_detail(task, &unbound, installs);
        place(task, changes, HoldReason::NeedUnbound, now, detail);
    }
}

/// What a hold for refused bindings says: that the bound connector is gone,
/// or why each binding is refused.
fn unbound_detail(task: &Task, unbound: &[(String, String)], installs: &BTreeMap<String, Install>) -> String {
    let gone = unbound.iter().all(|(need, _)| {
        task.spec
            .bindings
            .get(need)
            .cloned()
            .flatten()
            .is_some_and(|id| !installs.get(&id).is_some_and(|i| i.is_installed()))
    });
    let needs = unbound
        .iter()
        .map(|(n, _)| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if gone {
        format!("the connector bound to {needs} is not installed")
    } else {
        let why: Vec<String> = unbound.iter().map(|(n, r)| format!("`{n}`: {r}")).collect();
        format!("the binding of {} is refused: {}", needs, why.join("; "))
    }
}

/// The plan for one install's server. `stored` are the workspace's tasks of
/// this server; `installs` are the workspace's installs (needs bind to them).
///
/// A task belongs to the workspace install that declared it. Another
/// workspace install of the same server (a reinstall under a new id) takes
/// it over only when that install is gone (or is not a workspace install);
/// while both are installed, each leaves the other's tasks alone, so two
/// live installs never pull a task back and forth. A personal install plans
/// nothing: it never declares, owns or takes over a task. A prompt the
/// server lists twice counts once.
pub fn plan(
    view: &ServerView<'_>,
    stored: &[Task],
    installs: &BTreeMap<String, Install>,
    ceilings: &Ceilings,
    now: DateTime<Utc>,
) -> Plan {
    let install = view.install;
    let mut plan = Plan::default();
    // Only a workspace install declares and owns connector tasks: a personal
    // install's prompts are never reconciled, and no task moves to it.
    if !install.may_own_tasks() {
        return plan;
    }
    let (mut ours, theirs) = partition(stored, install, installs);
    let mut seen = BTreeSet::new();
    // By name, so the prompts past the bound are always the same ones.
    let mut prompts: Vec<&ListedPrompt> = view.prompts.iter().collect();
    prompts.sort_by(|a, b| a.name.cmp(&b.name));
    let mut marked = 0;
    // This server's live tasks, and those this plan creates: within `room`.
    let mut held = ours.values().filter(|t| !is_tombstoned(t)).count();
    for prompt in prompts {
        if !seen.insert(prompt.name.as_str()) {
            continue;
        }
        let id = TaskId::for_connector(&install.workspace, &install.server, &prompt.name);
        if theirs.contains(&id) {
            continue;
        }
        let existing = ours.remove(&id);
        if prompt.marker.is_some() {
            marked += 1;
            if let Some(reason) = out_of_bounds(prompt, marked) {
                refuse(&mut plan, prompt, existing, reason, now);
                continue;
            }
            if existing.is_none() && held >= view.room {
                let reason = format!(
                    "the workspace holds its most scheduled tasks ({MAX_WORKSPACE_TASKS} over all its connectors); \
                     this prompt becomes a task when others go"
                );
                refuse(&mut plan, prompt, existing, reason, now);
                continue;
            }
        }
        let before = plan.writes.len();
        plan_prompt(&mut plan, view, prompt, id, existing, installs, ceilings, now);
        if existing.is_none() && plan.writes.len() > before {
            held += 1;
        }
    }
    // Stored tasks whose prompt is gone from the list.
    for task in ours.into_values() {
        withdraw(&mut plan, task, "the prompt is gone from prompts/list", now);
    }
    plan
}

/// The stored tasks this install plans for, by id, and the ids of those
/// another live workspace install (or a user) owns.
fn partition<'t>(
    stored: &'t [Task],
    install: &Install,
    installs: &BTreeMap<String, Install>,
) -> (BTreeMap<TaskId, &'t Task>, BTreeSet<&'t TaskId>) {
    let owned_elsewhere = |task: &Task| match &task.provenance {
        Provenance::Connector { install_id, .. } => {
            *install_id != install.install_id && installs.get(install_id).is_some_and(Install::may_own_tasks)
        }
        Provenance::User { .. } => true,
    };
    let (theirs, ours): (Vec<&Task>, Vec<&Task>) = stored.iter().partition(|t| owned_elsewhere(t));
    (
        ours.into_iter().map(|t| (t.task_id.clone(), t)).collect(),
        theirs.into_iter().map(|t| &t.task_id).collect(),
    )
}

/// One listed prompt: unmarked, withdrawn; marked but invalid, refused;
/// valid, a new held task or the stored one brought up to the declaration.
#[allow(clippy::too_many_arguments)]
fn plan_prompt(
    plan: &mut Plan,
    view: &ServerView<'_>,
    prompt: &ListedPrompt,
    id: TaskId,
    existing: Option<&Task>,
    installs: &BTreeMap<String, Install>,
    ceilings: &Ceilings,
    now: DateTime<Utc>,
) {
    let Some(marker) = &prompt.marker else {
        if let Some(task) = existing {
            withdraw(
                plan,
                task,
                "the prompt no longer carries the scheduled-prompts marker",
                now,
            );
        }
        return;
    };
    let declaration = match declaration::parse(marker, view.tools, ceilings) {
        Ok(d) => d,
        Err(e) => return refuse(plan, prompt, existing, e.to_string(), now),
    };
    let declared = declared_spec(&declaration);
    match existing {
        None => plan.writes.push(create(view.install, prompt, id, declared, now)),
        Some(task) if is_tombstoned(task) => {}
        Some(task) => {
            let (t, changes) = update(task, view.install, prompt, declared, installs, now);
            push(plan, task, t, changes, now);
        }
    }
}

/// The most scheduled prompts of one install that are reconciled, by
/// name; the rest are refused (SPEC §13: each is a task and a schedule out
/// of the account's shared quota).
pub const MAX_SCHEDULED_PROMPTS: usize = 100;
/// The most arguments a scheduled prompt may have.
pub const MAX_ARGUMENTS: usize = 32;
/// What is recorded of one refusal, in characters, and of how many.
pub const MAX_REFUSAL_CHARS: usize = 500;
pub const MAX_REFUSALS_RECORDED: usize = 120;

/// Why a marked prompt is past the bounds on what one server may declare,
/// if it is: its place among the install's marked prompts (`marked`, from
/// 1, by name), its name's length, its arguments.
fn out_of_bounds(prompt: &ListedPrompt, marked: usize) -> Option<String> {
    if marked > MAX_SCHEDULED_PROMPTS {
        return Some(format!(
            "this server declares more than {MAX_SCHEDULED_PROMPTS} scheduled prompts; \
             only the first {MAX_SCHEDULED_PROMPTS} by name are reconciled"
        ));
    }
    let long = |name: &str| name.chars().count() > declaration::MAX_NAME_CHARS;
    if long(&prompt.name) {
        return Some(format!(
            "the prompt's name is longer than {} characters",
            declaration::MAX_NAME_CHARS
        ));
    }
    if prompt.arguments.len() > MAX_ARGUMENTS || prompt.arguments.keys().any(|a| long(a)) {
        return Some(format!(
            "a scheduled prompt has at most {MAX_ARGUMENTS} arguments, each named in at most {} characters",
            declaration::MAX_NAME_CHARS
        ));
    }
    None
}

/// A refused declaration changes no bounds: it is recorded (its name and
/// reason capped, and at most [`MAX_REFUSALS_RECORDED`] of them), and on the
/// stored task once per reason.
fn refuse(plan: &mut Plan, prompt: &ListedPrompt, existing: Option<&Task>, reason: String, now: DateTime<Utc>) {
    use crate::domain::run::occurrence::cap_chars;
    let reason = cap_chars(&reason, MAX_REFUSAL_CHARS);
    if plan.refused.len() < MAX_REFUSALS_RECORDED {
        plan.refused
            .insert(cap_chars(&prompt.name, declaration::MAX_NAME_CHARS), reason.clone());
    }
    if let Some(task) = existing.filter(|t| !is_tombstoned(t) && t.declaration_error.as_ref() != Some(&reason)) {
        let mut t = task.clone();
        t.declaration_error = Some(reason);
        push(plan, task, t, vec![Change::DeclarationRefused], now);
    }
}

/// A newly declared prompt: a task held until an admin approves it.
fn create(install: &Install, prompt: &ListedPrompt, id: TaskId, declared: Spec, now: DateTime<Utc>) -> Write {
    let mut task = Task::new(
        id,
        install.workspace.clone(),
        TaskKind::Connector,
        Provenance::Connector {
            install_id: install.install_id.clone(),
            server: install.server.clone(),
            prompt: prompt.name.clone(),
        },
        prompt.name.clone(),
        None,
        declared,
        now,
    );
    task.hold.place(
        HoldReason::AwaitingApproval,
        now,
        "a new scheduled prompt waits for an admin's approval",
    );
    task.prompt_arguments = prompt.arguments.clone();
    Write::new(task, vec![Change::Created])
}

/// A stored task brought up to its declaration: reattached to a reinstall,
/// the declaration accepted, the withdrawal lifted, the arguments followed,
/// the bounds applied (or kept pending), and the holds settled.
fn update(
    task: &Task,
    install: &Install,
    prompt: &ListedPrompt,
    declared: Spec,
    installs: &BTreeMap<String, Install>,
    now: DateTime<Utc>,
) -> (Task, Vec<Change>) {
    let mut t = task.clone();
    let mut changes = Vec::new();
    // A reinstall gives the server a new install id: its tasks follow.
    if let Provenance::Connector { install_id, .. } = &mut t.provenance
        && *install_id != install.install_id
    {
        install_id.clone_from(&install.install_id);
        changes.push(Change::Reattached);
    }
    if t.declaration_error.take().is_some() {
        changes.push(Change::DeclarationAccepted);
    }
    lift(&mut t, &mut changes, HoldReason::Withdrawn);
    follow_arguments(&mut t, &mut changes, prompt);
    if t.hold.has(HoldReason::AwaitingApproval) {
        follow_proposal(&mut t, &mut changes, declared);
    } else {
        apply_bounds(&mut t, &mut changes, declared, now);
    }
    settle_holds(&mut t, &mut changes, installs, now);
    (t, changes)
}

/// Arguments: a removed one narrows (its value goes); the required ones are
/// checked by `settle_holds`.
fn follow_arguments(t: &mut Task, changes: &mut Vec<Change>, prompt: &ListedPrompt) {
    let dropped: Vec<String> = t
        .spec
        .arguments
        .keys()
        .filter(|a| !prompt.arguments.contains_key(*a))
        .cloned()
        .collect();
    for name in &dropped {
        t.spec.arguments.remove(name);
        if let Some(p) = t.pending.as_mut() {
            p.spec.arguments.remove(name);
        }
    }
    if !dropped.is_empty() {
        changes.push(Change::ArgumentsDropped);
    }
    if t.prompt_arguments != prompt.arguments {
        t.prompt_arguments = prompt.arguments.clone();
        changes.push(Change::ArgumentsChanged);
    }
}

/// Not approved yet: the proposal follows the server.
fn follow_proposal(t: &mut Task, changes: &mut Vec<Change>, declared: Spec) {
    let mut proposal = declared;
    proposal.arguments = t.spec.arguments.clone();
    if t.spec != proposal {
        t.spec = proposal;
        changes.push(Change::ProposalUpdated);
    }
}

/// Approved: a change that only narrows applies at once; any widening waits
/// whole as `pending` while the approved spec keeps running.
fn apply_bounds(t: &mut Task, changes: &mut Vec<Change>, declared: Spec, now: DateTime<Utc>) {
    let mut target = declared;
    target.arguments = t.spec.arguments.clone();
    target.bindings = t
        .spec
        .bindings
        .iter()
        .filter(|(need, _)| target.needs.contains_key(*need))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    target.agent = t.spec.agent.clone();
    target.scopes = t.spec.scopes.clone();
    if compare(&t.spec, &target).iter().any(|d| d.widens) {
        if t.pending.as_ref().map(|p| &p.spec) != Some(&target) {
            t.pending = Some(Pending {
                spec: target,
                since: now,
            });
            changes.push(Change::PendingStored);
        }
    } else {
        if t.pending.take().is_some() {
            changes.push(Change::PendingCleared);
        }
        if t.spec != target {
            t.spec = target;
            changes.push(Change::Narrowed);
        }
    }
}

fn is_tombstoned(task: &Task) -> bool {
    task.overrides.as_ref().is_some_and(|o| o.deleted)
}

fn withdraw(plan: &mut Plan, task: &Task, detail: &str, now: DateTime<Utc>) {
    if is_tombstoned(task) || task.hold.has(HoldReason::Withdrawn) {
        return;
    }
    let mut t = task.clone();
    let mut changes = Vec::new();
    place(&mut t, &mut changes, HoldReason::Withdrawn, now, detail.to_owned());
    push(plan, task, t, changes, now);
}

fn push(plan: &mut Plan, before: &Task, mut after: Task, changes: Vec<Change>, now: DateTime<Utc>) {
    if changes.is_empty() || after == *before {
        return;
    }
    after.version = before.version + 1;
    after.updated_at = now;
    plan.writes.push(Write::change(before, after, changes));
}

/// The holds that an install's uninstall or reinstall changes on the
/// workspace's tasks bound to it: `need_unbound` placed or lifted.
pub fn rebind(tasks: &[Task], installs: &BTreeMap<String, Install>, now: DateTime<Utc>) -> Vec<Write> {
    let mut writes = Vec::new();
    for task in tasks
        .iter()
        .filter(|t| !is_tombstoned(t) && t.spec.bindings.values().any(Option::is_some))
    {
        let mut t = task.clone();
        let mut changes = Vec::new();
        settle_holds(&mut t, &mut changes, installs, now);
        if !changes.is_empty() {
            t.version = task.version + 1;
            t.updated_at = now;
            writes.push(Write::change(task, t, changes));
        }
    }
    writes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::hold::Hold;
    use crate::domain::task::install::{InstallScope, InstallStatus};
    use crate::domain::task::limits::tests_support::ceilings;
    use crate::domain::task::overrides::Overrides;
    use chrono::TimeZone;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
    }

    fn install(id: &str, status: InstallStatus) -> Install {
        Install {
            install_id: id.into(),
            workspace: "ws_1".into(),
            server: if id == "ins_1" {
                "issues".into()
            } else {
                format!("srv_{id}")
            },
            url: "http://127.0.0.1:1/mcp".into(),
            scope: InstallScope::Workspace,
            account: "acct_1".into(),
            credential_secret_arn: None,
            status,
            updated_at: now(),
            declaration_errors: Default::default(),
            last_error: None,
            lifecycle_at: None,
            lifecycle_id: None,
        }
    }

    fn installs() -> BTreeMap<String, Install> {
        [
            ("ins_1", InstallStatus::Installed),
            ("ins_chat", InstallStatus::Installed),
        ]
        .into_iter()
        .map(|(id, s)| (id.to_owned(), install(id, s)))
        .collect()
    }

    fn marker() -> Value {
        json!({"version": 1,
               "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
               "tools": ["list_issues"],
               "limits": {"max_turns": 8},
               "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0},
               "needs": [{"id": "summary_channel", "description": "a channel"}]})
    }

    fn prompt(marker: Option<Value>, args: &[(&str, bool)]) -> ListedPrompt {
        ListedPrompt {
            name: "weekly".into(),
            arguments: args.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect(),
            marker,
        }
    }

    fn tools() -> BTreeSet<String> {
        ["list_issues", "post_summary"].into_iter().map(str::to_owned).collect()
    }

    fn run(prompts: &[ListedPrompt], stored: &[Task]) -> Plan {
        run_with(prompts, stored, &installs())
    }

    fn run_with(prompts: &[ListedPrompt], stored: &[Task], installs: &BTreeMap<String, Install>) -> Plan {
        let install = install("ins_1", InstallStatus::Installed);
        let tools = tools();
        let view = ServerView {
            install: &install,
            prompts,
            tools: &tools,
            room: MAX_WORKSPACE_TASKS,
        };
        plan(&view, stored, installs, &ceilings(), now())
    }

    /// The task as an admin approved it: arguments given, need bound.
    fn approved(args: &[(&str, bool)]) -> Task {
        let created = run(&[prompt(Some(marker()), args)], &[]).writes.remove(0).task;
        let mut t = created;
        t.hold = Hold::default();
        t.spec.arguments = args.iter().map(|(n, _)| ((*n).to_owned(), "v".to_owned())).collect();
        t.spec.bindings = [("summary_channel".to_owned(), Some("ins_chat".to_owned()))].into();
        t.version = 2;
        t
    }

    fn with(mutate: impl FnOnce(&mut Value)) -> Value {
        let mut m = marker();
        mutate(&mut m);
        m
    }

    #[test]
    fn a_workspace_at_its_task_cap_refuses_new_declarations_by_name_and_keeps_its_tasks() {
        let named = |name: &str| ListedPrompt {
            name: name.into(),
            ..prompt(Some(marker()), &[])
        };
        let listed = [named("a"), named("b"), named("c")];
        let install = install("ins_1", InstallStatus::Installed);
        let tools = tools();
        let with_room = |room: usize, stored: &[Task]| {
            let view = ServerView {
                install: &install,
                prompts: &listed,
                tools: &tools,
                room,
            };
            plan(&view, stored, &installs(), &ceilings(), now())
        };
        let p = with_room(2, &[]);
        assert_eq!(p.writes.len(), 2, "two new tasks fit");
        assert!(p.refused["c"].contains("most scheduled tasks"), "{:?}", p.refused);
        // With no room at all, the tasks that exist stay; nothing new comes.
        let existing: Vec<Task> = p.writes.iter().map(|w| w.task.clone()).collect();
        let p = with_room(0, &existing);
        assert!(p.writes.is_empty(), "{:?}", p.writes);
        assert_eq!(p.refused.keys().collect::<Vec<_>>(), vec!["c"]);
        // The room counts the other servers' live tasks.
        let mut other = existing[0].clone();
        other.provenance = Provenance::Connector {
            install_id: "ins_2".into(),
            server: "mail".into(),
            prompt: "a".into(),
        };
        assert_eq!(
            workspace_room(std::slice::from_ref(&other), "issues"),
            MAX_WORKSPACE_TASKS - 1
        );
        assert_eq!(
            workspace_room(&existing, "issues"),
            MAX_WORKSPACE_TASKS,
            "its own are not elsewhere"
        );
    }

    #[test]
    fn a_task_follows_a_reinstall_but_not_a_second_live_install() {
        let mut task = approved(&[]);
        if let Provenance::Connector { install_id, .. } = &mut task.provenance {
            *install_id = "ins_old".into();
        }
        let listed = [prompt(Some(marker()), &[])];
        let with_old = |status| {
            let mut all = installs();
            all.insert("ins_old".into(), install("ins_old", status));
            all
        };
        let gone = with_old(InstallStatus::Uninstalled);
        let plan = run_with(&listed, std::slice::from_ref(&task), &gone);
        assert_eq!(plan.writes.len(), 1);
        assert_eq!(plan.writes[0].changes, vec![Change::Reattached]);
        assert!(
            matches!(&plan.writes[0].task.provenance, Provenance::Connector { install_id, .. } if install_id == "ins_1")
        );

        let both = with_old(InstallStatus::Installed);
        assert_eq!(run_with(&listed, std::slice::from_ref(&task), &both), Plan::default());
        assert_eq!(
            run_with(&[], std::slice::from_ref(&task), &both),
            Plan::default(),
            "another live install's task is not withdrawn either"
        );
    }

    #[test]
    fn a_personal_install_never_declares_nor_takes_over_a_task() {
        let task = approved(&[]);
        let mut personal = install("ins_me", InstallStatus::Installed);
        personal.server = "issues".into();
        personal.scope = InstallScope::Personal;
        let mut all = installs();
        all.get_mut("ins_1").unwrap().status = InstallStatus::Uninstalled;
        all.insert("ins_me".into(), personal.clone());
        let tools = tools();
        let listed = [prompt(Some(marker()), &[])];
        let view = ServerView {
            install: &personal,
            prompts: &listed,
            tools: &tools,
            room: MAX_WORKSPACE_TASKS,
        };
        assert_eq!(
            plan(&view, std::slice::from_ref(&task), &all, &ceilings(), now()),
            Plan::default(),
            "no takeover once the workspace install is gone"
        );
        assert_eq!(
            plan(&view, &[], &all, &ceilings(), now()),
            Plan::default(),
            "no new task"
        );

        // A task that a personal install holds goes back to the workspace install.
        let mut taken = task.clone();
        if let Provenance::Connector { install_id, .. } = &mut taken.provenance {
            *install_id = "ins_me".into();
        }
        let mut back = installs();
        back.insert("ins_me".into(), personal);
        let plan = run_with(&listed, std::slice::from_ref(&taken), &back);
        assert_eq!(plan.writes[0].changes, vec![Change::Reattached]);
    }

    #[test]
    fn a_stored_binding_to_the_declaring_server_is_never_honoured() {
        let mut task = approved(&[]);
        let mut twin = install("ins_twin", InstallStatus::Installed);
        twin.server = "issues".into();
        let mut all = installs();
        all.insert("ins_twin".into(), twin);
        for bound in ["ins_1", "ins_twin"] {
            task.spec.bindings = [("summary_channel".to_owned(), Some(bound.to_owned()))].into();
            let writes = rebind(std::slice::from_ref(&task), &all, now());
            assert_eq!(
                writes[0].changes,
                vec![Change::HoldPlaced(HoldReason::NeedUnbound)],
                "{bound}"
            );
            assert!(!writes[0].task.should_fire(), "{bound}");
            let plan = run_with(&[prompt(Some(marker()), &[])], std::slice::from_ref(&task), &all);
            assert!(plan.writes[0].task.hold.has(HoldReason::NeedUnbound), "{bound}");
        }
    }

    #[test]
    fn a_prompt_listed_twice_counts_once() {
        let twice = [prompt(Some(marker()), &[]), prompt(Some(marker()), &[])];
        assert_eq!(run(&twice, &[]).writes.len(), 1);
        let task = approved(&[]);
        assert_eq!(run(&twice, std::slice::from_ref(&task)), Plan::default());
    }

    #[test]
    fn row_new_declared_prompt_creates_a_held_task() {
        let plan = run(&[prompt(Some(marker()), &[("repo", true)])], &[]);
        assert_eq!(plan.writes.len(), 1);
        let w = &plan.writes[0];
        assert_eq!(w.read_version(), None);
        assert_eq!(w.changes, vec![Change::Created]);
        assert!(w.task.hold.has(HoldReason::AwaitingApproval));
        assert!(!w.task.should_fire(), "no run until an admin approves");
        assert_eq!(w.task.task_id, TaskId::for_connector("ws_1", "issues", "weekly"));
        assert_eq!(w.task.prompt_arguments, [("repo".to_owned(), true)].into());
    }

    #[test]
    fn row_equal_declaration_writes_nothing_and_a_second_reconcile_neither() {
        let task = approved(&[("repo", true)]);
        assert_eq!(
            run(
                &[prompt(Some(marker()), &[("repo", true)])],
                std::slice::from_ref(&task)
            ),
            Plan::default()
        );
        let created = run(&[prompt(Some(marker()), &[])], &[]).writes.remove(0).task;
        assert!(
            run(&[prompt(Some(marker()), &[])], &[created]).writes.is_empty(),
            "an unapproved task is stable too"
        );
    }

    #[test]
    fn row_narrowing_applies_at_once() {
        let task = approved(&[]);
        let narrower = with(|m| {
            m["limits"]["max_turns"] = json!(5);
            m["budget"]["max_usd_per_run"] = json!(0.1);
            m["tools"] = json!([]);
            m["schedule"]["cron"] = json!("0 9 * * MON");
            m["needs"] = json!([]);
        });
        let plan = run(&[prompt(Some(narrower), &[])], std::slice::from_ref(&task));
        let w = &plan.writes[0];
        assert_eq!(w.changes, vec![Change::Narrowed]);
        assert_eq!(w.read_version(), Some(2));
        assert_eq!(w.task.version, 3);
        assert_eq!(w.task.spec.limits.max_turns, 5);
        assert!(w.task.spec.tools.is_empty());
        assert!(w.task.spec.bindings.is_empty(), "a removed need drops its binding");
        assert!(w.task.pending.is_none());
        assert!(w.task.should_fire());
    }

    #[test]
    fn row_any_widening_waits_whole_and_the_approved_spec_keeps_running() {
        let task = approved(&[]);
        let mixed = with(|m| {
            m["limits"]["max_turns"] = json!(5);
            m["budget"]["max_usd_per_run"] = json!(0.5);
        });
        let plan = run(&[prompt(Some(mixed), &[])], std::slice::from_ref(&task));
        let w = &plan.writes[0];
        assert_eq!(w.changes, vec![Change::PendingStored]);
        assert_eq!(w.task.spec, task.spec, "nothing applied, not even the narrowing");
        let pending = &w.task.pending.as_ref().unwrap().spec;
        assert_eq!(pending.limits.max_turns, 5);
        assert_eq!(pending.bindings, task.spec.bindings, "bindings carry over");
        let diff = compare(&task.spec, pending);
        assert!(
            diff.iter()
                .any(|d| d.widens && d.to_string() == "budget per run raised from $0.25 to $0.50")
        );
        assert!(w.task.should_fire());
        // The same release again writes nothing.
        assert!(
            run(
                &[prompt(
                    Some(with(|m| {
                        m["limits"]["max_turns"] = json!(5);
                        m["budget"]["max_usd_per_run"] = json!(0.5);
                    })),
                    &[]
                )],
                std::slice::from_ref(&w.task)
            )
            .writes
            .is_empty()
        );
        for widen in [
            with(|m| m["tools"] = json!(["list_issues", "post_summary"])),
            with(|m| m["schedule"]["cron"] = json!("0 * * * *")),
            with(|m| {
                m["needs"] =
                    json!([{"id": "summary_channel", "description": "a"}, {"id": "archive", "description": "b"}])
            }),
            with(|m| m["budget"]["max_usd_per_month"] = json!(9.0)),
        ] {
            let plan = run(&[prompt(Some(widen.clone()), &[])], std::slice::from_ref(&task));
            assert_eq!(plan.writes[0].changes, vec![Change::PendingStored], "{widen}");
        }
    }

    #[test]
    fn row_a_new_required_argument_holds_until_a_value_and_a_removed_one_narrows() {
        let task = approved(&[("repo", true)]);
        let plan = run(
            &[prompt(Some(marker()), &[("repo", true), ("team", true)])],
            std::slice::from_ref(&task),
        );
        let w = &plan.writes[0];
        assert_eq!(
            w.changes,
            vec![
                Change::ArgumentsChanged,
                Change::HoldPlaced(HoldReason::AwaitingArgument)
            ]
        );
        assert_eq!(w.task.spec.arguments, task.spec.arguments, "old values kept");
        assert!(
            w.task
                .hold
                .entries()
                .any(|(r, e)| r == HoldReason::AwaitingArgument && e.detail.contains("`team`"))
        );
        // The admin gives the value: the next reconcile lifts the hold.
        let mut given = w.task.clone();
        given.spec.arguments.insert("team".into(), "web".into());
        let plan = run(&[prompt(Some(marker()), &[("repo", true), ("team", true)])], &[given]);
        assert_eq!(
            plan.writes[0].changes,
            vec![Change::HoldLifted(HoldReason::AwaitingArgument)]
        );
        // An optional new argument holds nothing; a removed one drops its value.
        let plan = run(
            &[prompt(Some(marker()), &[("verbose", false)])],
            std::slice::from_ref(&task),
        );
        assert_eq!(
            plan.writes[0].changes,
            vec![Change::ArgumentsDropped, Change::ArgumentsChanged]
        );
        assert!(plan.writes[0].task.spec.arguments.is_empty());
        assert!(plan.writes[0].task.should_fire());
    }

    #[test]
    fn row_gone_or_unmarked_prompts_are_withdrawn_and_come_back() {
        let task = approved(&[]);
        for prompts in [vec![], vec![prompt(None, &[])]] {
            let plan = run(&prompts, std::slice::from_ref(&task));
            assert_eq!(plan.writes[0].changes, vec![Change::HoldPlaced(HoldReason::Withdrawn)]);
            let withdrawn = plan.writes[0].task.clone();
            assert!(
                run(&prompts, std::slice::from_ref(&withdrawn)).writes.is_empty(),
                "withdrawn once"
            );
            // Back, with a widening: the hold lifts, the widening waits.
            let back = with(|m| m["limits"]["max_turns"] = json!(10));
            let plan = run(&[prompt(Some(back), &[])], &[withdrawn]);
            let w = &plan.writes[0];
            assert_eq!(
                w.changes,
                vec![Change::HoldLifted(HoldReason::Withdrawn), Change::PendingStored]
            );
            assert!(w.task.should_fire());
        }
    }

    #[test]
    fn row_a_bound_connector_uninstalled_holds_until_it_is_back() {
        let task = approved(&[]);
        let mut gone = installs();
        gone.insert("ins_chat".into(), install("ins_chat", InstallStatus::Uninstalled));
        let writes = rebind(std::slice::from_ref(&task), &gone, now());
        assert_eq!(writes[0].changes, vec![Change::HoldPlaced(HoldReason::NeedUnbound)]);
        let held = writes[0].task.clone();
        assert!(rebind(std::slice::from_ref(&held), &gone, now()).is_empty());
        let writes = rebind(&[held], &installs(), now());
        assert_eq!(writes[0].changes, vec![Change::HoldLifted(HoldReason::NeedUnbound)]);
        // A need left unbound by decision holds nothing.
        let mut unbound = task;
        unbound.spec.bindings = [("summary_channel".to_owned(), None)].into();
        assert!(rebind(&[unbound], &gone, now()).is_empty());
    }

    #[test]
    fn row_overrides_survive_and_tombstones_are_never_touched() {
        let mut paused = approved(&[]);
        paused.overrides = Some(Overrides {
            paused: true,
            note: Some("quiet".into()),
            ..Default::default()
        });
        let plan = run(&[], std::slice::from_ref(&paused));
        assert_eq!(plan.writes[0].task.overrides, paused.overrides, "a pause survives");
        let plan = run(&[prompt(Some(marker()), &[])], &[plan.writes[0].task.clone()]);
        assert_eq!(plan.writes[0].changes, vec![Change::HoldLifted(HoldReason::Withdrawn)]);
        assert_eq!(
            plan.writes[0].task.overrides, paused.overrides,
            "lifting a hold never lifts a pause"
        );

        let mut deleted = approved(&[]);
        deleted.overrides = Some(Overrides {
            deleted: true,
            ..Default::default()
        });
        for prompts in [
            vec![],
            vec![prompt(Some(marker()), &[])],
            vec![prompt(Some(with(|m| m["limits"]["max_turns"] = json!(10))), &[])],
        ] {
            assert_eq!(
                run(&prompts, std::slice::from_ref(&deleted)),
                Plan::default(),
                "never re-created or re-enabled"
            );
        }
    }

    #[test]
    fn invalid_declarations_change_no_bounds_and_are_recorded() {
        let foreign = with(|m| m["tools"] = json!(["github__create_issue"]));
        let plan = run(&[prompt(Some(foreign.clone()), &[])], &[]);
        assert!(plan.writes.is_empty(), "no task from an invalid declaration");
        assert!(plan.refused["weekly"].contains("github__create_issue"));
        let task = approved(&[]);
        let plan = run(&[prompt(Some(foreign.clone()), &[])], std::slice::from_ref(&task));
        let w = &plan.writes[0];
        assert_eq!(w.changes, vec![Change::DeclarationRefused]);
        assert_eq!(w.task.spec, task.spec);
        assert!(w.task.should_fire(), "an invalid release is not a withdrawal");
        assert!(
            run(&[prompt(Some(foreign), &[])], std::slice::from_ref(&w.task))
                .writes
                .is_empty()
        );
        let plan = run(&[prompt(Some(marker()), &[])], std::slice::from_ref(&w.task));
        assert_eq!(plan.writes[0].changes, vec![Change::DeclarationAccepted]);
    }
}
