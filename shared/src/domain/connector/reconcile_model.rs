//! A model check of reconcile's plan (`domain::connector::reconcile::plan`, pure):
//! generated sequences of releases (declarations that narrow, widen, mix,
//! are unmarked, withdrawn, restored, add required arguments), admin
//! operations (approve, pause, resume, delete, restore), and installs and
//! uninstalls of the declaring workspace install, of a bound connector and
//! of a personal install of the same server, checked after every step
//! against a small reference model:
//!
//! - no widening without approval: while a task is not awaiting approval,
//!   its running `spec` is never wider than the bounds an admin last
//!   approved (a narrowing, then a widening back, waits as `pending`);
//! - no delete: a task once created is in every later plan's input;
//! - reconcile never writes `override`: no admin pause is lifted, no
//!   tombstone is revived (a tombstoned task gets no write at all);
//! - a personal install plans nothing;
//! - the holds follow the release: `withdrawn` exactly while the prompt is
//!   gone or unmarked, `awaiting_argument` while a required argument has no
//!   value;
//! - a second pass over the same server writes nothing.
//!
//! The admin's operations are modelled on the task as `app::admin` writes
//! them (approve: the pending or proposed bounds with argument values and
//! bindings; the overrides for the rest). CI runs proptest's default
//! number of cases; a long run: `PROPTEST_CASES=20000 cargo test -p shared
//! --lib reconcile_model` (docs/benchmarks.md).

use std::collections::{BTreeMap, BTreeSet};

use crate::domain::connector::reconcile::{ListedPrompt, ServerView, Write, plan, rebind, settle_holds};
use crate::domain::task::bounds::compare;
use crate::domain::task::hold::HoldReason;
use crate::domain::task::install::{Install, InstallScope, InstallStatus};
use crate::domain::task::limits::{Ceilings, Limits};
use crate::domain::task::overrides::Overrides;
use crate::domain::task::{Spec, Task};
use chrono::{DateTime, Duration, TimeZone, Utc};
use proptest::prelude::*;
use serde_json::{Value, json};

const PROMPT: &str = "weekly";

#[derive(Debug, Clone)]
struct Declared {
    schedule: u8,
    tools: (bool, bool),
    max_turns: u32,
    per_run: u8,
    need: bool,
    /// Argument `x`: 0 absent, 1 optional, 2 required; `y`: optional or absent.
    x: u8,
    y: bool,
}

impl Declared {
    fn marker(&self) -> Value {
        let schedule = match self.schedule {
            0 => json!({"rate": "30 minutes"}),
            1 => json!({"rate": "2 hours"}),
            2 => json!({"cron": "0 9 * * *", "timezone": "Europe/Berlin"}),
            _ => json!({"cron": "0 9 * * MON", "timezone": "Europe/Berlin"}),
        };
        let mut tools = Vec::new();
        if self.tools.0 {
            tools.push("list_issues");
        }
        if self.tools.1 {
            tools.push("post_summary");
        }
        let needs: Vec<Value> = if self.need {
            vec![json!({"id": "summary_channel", "description": "a channel"})]
        } else {
            vec![]
        };
        let per_run = [0.1, 0.25][usize::from(self.per_run)];
        json!({"version": 1, "schedule": schedule, "tools": tools,
               "limits": {"max_turns": self.max_turns},
               "budget": {"max_usd_per_run": per_run, "max_usd_per_month": 5.0},
               "needs": needs})
    }

    fn arguments(&self) -> BTreeMap<String, bool> {
        let mut out = BTreeMap::new();
        match self.x {
            1 => {
                out.insert("x".to_owned(), false);
            }
            2 => {
                out.insert("x".to_owned(), true);
            }
            _ => {}
        }
        if self.y {
            out.insert("y".to_owned(), false);
        }
        out
    }
}

#[derive(Debug, Clone)]
enum Listing {
    Marked(Declared),
    Unmarked,
    Gone,
}

#[derive(Debug, Clone)]
enum Step {
    Release(Listing),
    Approve,
    Pause,
    Resume,
    Delete,
    Restore,
    Uninstall,
    Reinstall,
    /// A personal install of the same server is reconciled.
    Personal,
    ChatUninstalled,
    ChatReinstalled,
}

fn declared() -> impl Strategy<Value = Declared> {
    (
        0u8..4,
        (any::<bool>(), any::<bool>()),
        prop::sample::select(vec![2u32, 4, 8]),
        0u8..2,
        any::<bool>(),
        0u8..3,
        any::<bool>(),
    )
        .prop_map(|(schedule, tools, max_turns, per_run, need, x, y)| Declared {
            schedule,
            tools,
            max_turns,
            per_run,
            need,
            x,
            y,
        })
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => declared().prop_map(|d| Step::Release(Listing::Marked(d))),
        1 => Just(Step::Release(Listing::Unmarked)),
        1 => Just(Step::Release(Listing::Gone)),
        3 => Just(Step::Approve),
        1 => Just(Step::Pause),
        1 => Just(Step::Resume),
        1 => Just(Step::Delete),
        1 => Just(Step::Restore),
        1 => Just(Step::Uninstall),
        1 => Just(Step::Reinstall),
        1 => Just(Step::Personal),
        1 => Just(Step::ChatUninstalled),
        1 => Just(Step::ChatReinstalled),
    ]
}

fn install(id: &str, server: &str, scope: InstallScope, status: InstallStatus) -> Install {
    Install {
        install_id: id.into(),
        workspace: "ws_1".into(),
        server: server.into(),
        url: "https://mcp.example.com/mcp".into(),
        scope,
        account: format!("acct_{id}"),
        credential_secret_arn: None,
        status,
        updated_at: Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap(),
        declaration_errors: Default::default(),
        last_error: None,
        lifecycle_at: None,
        lifecycle_id: None,
    }
}

struct World {
    now: DateTime<Utc>,
    installs: BTreeMap<String, Install>,
    listing: Listing,
    task: Option<Task>,
    /// The bounds an admin last approved (the reference's ceiling on `spec`).
    approved: Option<Spec>,
    tools: BTreeSet<String>,
    ceilings: Ceilings,
}

fn widenings(from: &Spec, to: &Spec) -> Vec<String> {
    compare(from, to)
        .into_iter()
        .filter(|d| d.widens)
        .map(|d| d.to_string())
        .collect()
}

impl World {
    fn new() -> Self {
        let installs = [
            install("ins_1", "issues", InstallScope::Workspace, InstallStatus::Installed),
            install("ins_chat", "chat", InstallScope::Workspace, InstallStatus::Installed),
        ]
        .into_iter()
        .map(|i| (i.install_id.clone(), i))
        .collect();
        Self {
            now: Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap(),
            installs,
            listing: Listing::Gone,
            task: None,
            approved: None,
            tools: ["list_issues", "post_summary"].into_iter().map(str::to_owned).collect(),
            ceilings: Ceilings::new(Limits {
                max_turns: 10,
                max_tool_calls: 20,
                max_output_tokens: 4000,
                timeout_seconds: 300,
            })
            .unwrap(),
        }
    }

    fn prompts(&self) -> Vec<ListedPrompt> {
        match &self.listing {
            Listing::Marked(d) => vec![ListedPrompt {
                name: PROMPT.into(),
                arguments: d.arguments(),
                marker: Some(d.marker()),
            }],
            Listing::Unmarked => vec![ListedPrompt {
                name: PROMPT.into(),
                arguments: BTreeMap::new(),
                marker: None,
            }],
            Listing::Gone => vec![],
        }
    }

    fn tombstoned(&self) -> bool {
        self.task
            .as_ref()
            .and_then(|t| t.overrides.as_ref())
            .is_some_and(|o| o.deleted)
    }

    /// Applies reconcile's writes, checking each against the model.
    fn apply(&mut self, writes: Vec<Write>, context: &str) -> Result<(), TestCaseError> {
        for write in writes {
            let read = write.read_version();
            let after = write.task;
            match (&self.task, read) {
                (None, None) => {
                    prop_assert!(
                        after.hold.has(HoldReason::AwaitingApproval),
                        "{context}: a new task waits for approval"
                    );
                }
                (Some(before), Some(read)) => {
                    prop_assert_eq!(read, before.version, "{}: written at the version read", context);
                    prop_assert_eq!(after.version, before.version + 1, "{}", context);
                    prop_assert!(!self.tombstoned(), "{context}: a tombstone was written: {after:?}");
                    prop_assert_eq!(
                        &after.overrides,
                        &before.overrides,
                        "{}: reconcile wrote override",
                        context
                    );
                    prop_assert_eq!(&after.task_id, &before.task_id, "{}", context);
                    if !before.hold.has(HoldReason::AwaitingApproval) {
                        let wider = widenings(&before.spec, &after.spec);
                        prop_assert!(wider.is_empty(), "{context}: spec widened without approval: {wider:?}");
                        if let Some(approved) = &self.approved {
                            let wider = widenings(approved, &after.spec);
                            prop_assert!(wider.is_empty(), "{context}: wider than approved: {wider:?}");
                        }
                    }
                }
                (None, Some(_)) => prop_assert!(false, "{context}: an update of a task that does not exist"),
                (Some(_), None) => prop_assert!(false, "{context}: a second task for one prompt"),
            }
            self.task = Some(after);
        }
        Ok(())
    }

    fn reconcile(&mut self, context: &str) -> Result<(), TestCaseError> {
        let declaring = self.installs["ins_1"].clone();
        if declaring.status != InstallStatus::Installed {
            // The uninstall's webhook changes no task; nothing reads the server.
            return Ok(());
        }
        let prompts = self.prompts();
        let stored: Vec<Task> = self.task.iter().cloned().collect();
        let tools = self.tools.clone();
        let view = ServerView {
            install: &declaring,
            prompts: &prompts,
            tools: &tools,
            room: super::reconcile::MAX_WORKSPACE_TASKS,
        };
        let first = plan(&view, &stored, &self.installs, &self.ceilings, self.now);
        self.apply(first.writes, context)?;
        let stored: Vec<Task> = self.task.iter().cloned().collect();
        let second = plan(&view, &stored, &self.installs, &self.ceilings, self.now);
        prop_assert!(
            second.writes.is_empty(),
            "{context}: a second pass wrote {:?}",
            second.writes
        );
        self.check_holds(context)
    }

    /// The holds the listing implies.
    fn check_holds(&self, context: &str) -> Result<(), TestCaseError> {
        let Some(task) = &self.task else {
            return Ok(());
        };
        if self.tombstoned() {
            return Ok(());
        }
        match &self.listing {
            Listing::Gone | Listing::Unmarked => {
                prop_assert!(task.hold.has(HoldReason::Withdrawn), "{context}: not withdrawn");
            }
            Listing::Marked(d) => {
                if self.declaration_is_valid(d) {
                    prop_assert!(!task.hold.has(HoldReason::Withdrawn), "{context}: still withdrawn");
                }
                let unvalued = d.x == 2 && !task.spec.arguments.contains_key("x");
                if !task.hold.has(HoldReason::AwaitingApproval) && d.x == 2 {
                    prop_assert_eq!(
                        task.hold.has(HoldReason::AwaitingArgument),
                        unvalued,
                        "{}: awaiting_argument must follow the required argument's value",
                        context
                    );
                }
            }
        }
        Ok(())
    }

    fn declaration_is_valid(&self, d: &Declared) -> bool {
        crate::domain::connector::declaration::parse(&d.marker(), &self.tools, &self.ceilings).is_ok()
    }

    /// An admin's write: the version grows, nothing else of reconcile's moves.
    fn admin(&mut self, change: impl FnOnce(&mut Task, &BTreeMap<String, Install>, DateTime<Utc>)) {
        if let Some(task) = self.task.as_mut() {
            change(task, &self.installs, self.now);
            task.version += 1;
        }
    }

    fn step(&mut self, step: &Step, context: &str) -> Result<(), TestCaseError> {
        self.now += Duration::minutes(7);
        match step {
            Step::Release(listing) => {
                self.listing = listing.clone();
                self.reconcile(context)?;
            }
            Step::Approve => {
                if self.tombstoned() {
                    return Ok(());
                }
                let mut approved = None;
                self.admin(|t, installs, now| {
                    if let Some(pending) = t.pending.take() {
                        t.spec = pending.spec;
                    }
                    t.hold.lift(HoldReason::AwaitingApproval);
                    for name in t.prompt_arguments.keys() {
                        t.spec.arguments.entry(name.clone()).or_insert_with(|| "v".into());
                    }
                    t.spec.bindings = t
                        .spec
                        .needs
                        .keys()
                        .map(|need| (need.clone(), Some("ins_chat".to_owned())))
                        .collect();
                    let mut changes = Vec::new();
                    settle_holds(t, &mut changes, installs, now);
                    approved = Some(t.spec.clone());
                });
                if approved.is_some() {
                    self.approved = approved;
                }
            }
            Step::Pause | Step::Resume | Step::Delete | Step::Restore => {
                let step = step.clone();
                self.admin(|t, _, _| {
                    let o = t.overrides.get_or_insert_with(Overrides::default);
                    match step {
                        Step::Pause => o.paused = true,
                        Step::Resume => o.paused = false,
                        Step::Delete => o.deleted = true,
                        _ => o.deleted = false,
                    }
                    o.by = Some("adm_1".into());
                });
            }
            Step::Uninstall => {
                self.set_status("ins_1", InstallStatus::Uninstalled);
                self.reconcile(context)?;
            }
            Step::Reinstall => {
                self.set_status("ins_1", InstallStatus::Installed);
                self.reconcile(context)?;
            }
            Step::Personal => {
                let personal = install("ins_me", "issues", InstallScope::Personal, InstallStatus::Installed);
                let prompts = self.prompts();
                let stored: Vec<Task> = self.task.iter().cloned().collect();
                let view = ServerView {
                    install: &personal,
                    prompts: &prompts,
                    tools: &self.tools,
                    room: super::reconcile::MAX_WORKSPACE_TASKS,
                };
                let p = plan(&view, &stored, &self.installs, &self.ceilings, self.now);
                prop_assert!(
                    p.writes.is_empty(),
                    "{context}: a personal install planned {:?}",
                    p.writes
                );
            }
            Step::ChatUninstalled | Step::ChatReinstalled => {
                let status = if matches!(step, Step::ChatUninstalled) {
                    InstallStatus::Uninstalled
                } else {
                    InstallStatus::Installed
                };
                self.set_status("ins_chat", status);
                let stored: Vec<Task> = self.task.iter().cloned().collect();
                let writes = rebind(&stored, &self.installs, self.now);
                self.apply(writes, context)?;
                let stored: Vec<Task> = self.task.iter().cloned().collect();
                prop_assert!(
                    rebind(&stored, &self.installs, self.now).is_empty(),
                    "{context}: a second rebind wrote"
                );
            }
        }
        Ok(())
    }

    fn set_status(&mut self, id: &str, status: InstallStatus) {
        if let Some(i) = self.installs.get_mut(id) {
            i.status = status;
        }
    }
}

proptest! {
    #[test]
    fn reconcile_never_widens_deletes_lifts_a_pause_or_revives_a_tombstone_and_settles_in_one_pass(
        steps in prop::collection::vec(step(), 1..40)
    ) {
        let mut world = World::new();
        let mut created = false;
        for (i, step) in steps.iter().enumerate() {
            let context = format!("step {i} ({step:?})");
            let paused_before = world.task.as_ref().and_then(|t| t.overrides.as_ref()).is_some_and(|o| o.paused);
            let tombstoned_before = world.tombstoned();
            world.step(step, &context)?;
            let task = world.task.as_ref();
            if created {
                prop_assert!(task.is_some(), "{context}: the task is gone");
            }
            created |= task.is_some();
            let admin_step = matches!(step, Step::Pause | Step::Resume | Step::Delete | Step::Restore);
            if !admin_step {
                let paused = task.and_then(|t| t.overrides.as_ref()).is_some_and(|o| o.paused);
                prop_assert_eq!(paused, paused_before, "{}: reconcile moved a pause", context);
                prop_assert_eq!(world.tombstoned(), tombstoned_before, "{}: reconcile moved a tombstone", context);
            }
        }
    }
}
