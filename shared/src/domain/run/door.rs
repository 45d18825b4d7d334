//! The door: one gate that says whether an occurrence runs, or why it is
//! skipped (SPEC §7.1). Every skip is a recorded run outcome, not an error.
//!
//! The runner asks twice with the facts it has: before the claim with the
//! task `Unknown` (a disabled worker or a missed occurrence claims nothing
//! and runs nothing; its skip reads the task only to prune its dead claims),
//! and after the claim, which returns the task, with the task and its
//! install. The checks run in one fixed order either way.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::run::occurrence::{MAX_AWAITING, awaiting_beside, occurrence_key};
use crate::domain::schedule::preview::is_occurrence;
use crate::domain::task::hold::HoldReason;
use crate::domain::task::install::Install;
use crate::domain::task::run_now::is_recorded;
use crate::domain::task::skip::skips;
use crate::domain::task::{Task, TaskKind};

/// Why an occurrence did not run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// `AGENT_SCHEDULE_WORKER_ENABLED` is off.
    WorkerDisabled,
    /// Delivered later than the catch-up window after its scheduled time.
    Missed,
    /// No task under that id (deleted outright, or never created).
    Missing,
    /// Tombstoned by an admin.
    Deleted,
    /// Paused by an admin.
    Paused,
    /// Held by the runtime, for these reasons.
    Held(Vec<HoldReason>),
    /// The declaring connector is not installed (or its install is unknown).
    Uninstalled,
    /// The task's install is not a workspace install: only a workspace
    /// install runs connector tasks (SPEC §5).
    NotWorkspaceInstall,
    /// A one-time task whose occurrence already finished.
    Completed,
    /// The scheduled time is not an occurrence of the task's current
    /// schedule, nor a run now it recorded: its owner or a release moved it
    /// since the message was sent. Never completes the task, never touches
    /// its schedule.
    Rescheduled,
    /// The run's maximum cost does not fit the task's period budget.
    BudgetExhausted,
    /// A budget above the task is spent for the month: its workspace's
    /// (`budget::WorkspaceBudget`: every task of the workspace skips until
    /// the month turns or an admin raises it), or, for a reminder, its
    /// person's cap (`PERSON_MONTHLY_USD`).
    BudgetReached(crate::domain::task::budget::BudgetLevel),
    /// Recorded by the missed-occurrence check (SPEC §14, `domain::operations::overdue`):
    /// no run of it started within the catch-up window.
    NeverDelivered,
    /// Recorded by the missed-occurrence check: its run was claimed, then
    /// stopped, and nothing recorded its outcome within the window.
    NeverFinished,
    /// The next occurrence its owner asked to skip (a reminder).
    SkippedByOwner,
    /// The next occurrence a workspace admin asked to skip (a connector task).
    SkippedByAdmin,
    /// Its run stopped at a gated tool call, and an admin denied the call
    /// (`domain::run::gate`).
    Denied,
    /// Its run stopped at a gated tool call nobody approved within
    /// `APPROVAL_HOURS` (or whose approved re-run did not start by then).
    Expired,
    /// [`MAX_AWAITING`] of the task's other occurrences wait for a person
    /// already: this one is not run (its model is never called), so a task
    /// nobody decides for keeps a bounded number of waiting claims.
    AwaitingApprovalLimit,
}

impl SkipReason {
    /// Whether a one-time task whose only occurrence is skipped for this
    /// reason is finished (SPEC §3): every outcome but a pause, a move, a
    /// tombstone (which ends it already) or a task that is not there.
    pub fn completes_one_time(&self) -> bool {
        !matches!(
            self,
            SkipReason::Paused
                | SkipReason::Rescheduled
                | SkipReason::Deleted
                | SkipReason::Missing
                | SkipReason::Completed
        )
    }

    /// The stable word stored as the run's `reason` and used as a metric dimension.
    pub fn code(&self) -> &'static str {
        match self {
            SkipReason::WorkerDisabled => "worker_disabled",
            SkipReason::Missed => "missed",
            SkipReason::Missing => "missing",
            SkipReason::Deleted => "deleted",
            SkipReason::Paused => "paused",
            SkipReason::Held(_) => "held",
            SkipReason::Uninstalled => "uninstalled",
            SkipReason::NotWorkspaceInstall => "not_workspace_install",
            SkipReason::Completed => "completed",
            SkipReason::Rescheduled => "rescheduled",
            SkipReason::BudgetExhausted => "budget_exhausted",
            SkipReason::BudgetReached(_) => "budget_reached",
            SkipReason::NeverDelivered => "never_delivered",
            SkipReason::NeverFinished => "never_finished",
            SkipReason::SkippedByOwner => "skipped_by_owner",
            SkipReason::SkippedByAdmin => "skipped_by_admin",
            SkipReason::Denied => "denied",
            SkipReason::Expired => "expired",
            SkipReason::AwaitingApprovalLimit => "awaiting_approval_limit",
        }
    }

    /// The reason in words, for the ledger.
    pub fn describe(&self) -> String {
        match self {
            SkipReason::Held(reasons) => {
                let names: Vec<&str> = reasons.iter().map(|r| r.as_str()).collect();
                format!("held: {}", names.join(", "))
            }
            SkipReason::NeverDelivered => "never delivered: no run of it started within the catch-up window \
                 (a lost schedule, or a message left in a dead-letter queue)"
                .to_owned(),
            SkipReason::NeverFinished => {
                "never finished: its run stopped and no outcome was recorded within the catch-up window".to_owned()
            }
            SkipReason::SkippedByOwner => "skipped by its owner".to_owned(),
            SkipReason::SkippedByAdmin => "skipped by an admin".to_owned(),
            SkipReason::BudgetReached(crate::domain::task::budget::BudgetLevel::Workspace) => {
                "budget reached: the workspace's monthly budget is spent (an admin raises it)".to_owned()
            }
            SkipReason::BudgetReached(crate::domain::task::budget::BudgetLevel::Person) => {
                "budget reached: its person's monthly cap on their reminders' cost is spent".to_owned()
            }
            SkipReason::AwaitingApprovalLimit => format!(
                "awaiting approval limit: {MAX_AWAITING} of its occurrences already wait for an admin's decision"
            ),
            other => other.code().replace('_', " "),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Run,
    Skip(SkipReason),
}

impl Verdict {
    /// Why the occurrence is skipped, when it is.
    pub fn skip(&self) -> Option<&SkipReason> {
        match self {
            Verdict::Skip(reason) => Some(reason),
            Verdict::Run => None,
        }
    }
}

/// What the runner knows of the task when it asks.
#[derive(Debug, Clone, Copy)]
pub enum TaskFacts<'a> {
    /// Not read yet: only the checks that need no task apply.
    Unknown,
    Missing,
    /// The task and, for a connector task, its install (`None`: not found).
    Present {
        task: &'a Task,
        install: Option<&'a Install>,
    },
}

#[derive(Debug, Clone, Copy)]
pub struct Facts<'a> {
    pub worker_enabled: bool,
    pub scheduled: DateTime<Utc>,
    pub now: DateTime<Utc>,
    pub catch_up: Duration,
    pub task: TaskFacts<'a>,
}

/// How far ahead of now a delivery's occurrence may be: Scheduler delivers
/// at the occurrence's time, and clocks drift by less.
pub const EARLY_SECONDS: i64 = 120;

/// Whether a delivery of the occurrence at `scheduled`, seen at `now`, is
/// of one not due yet (more than [`EARLY_SECONDS`] ahead): no producer of
/// the system sends one; a hand-sent or redriven message can. It is not
/// run, claims nothing and records nothing, so the occurrence's own
/// delivery, when its time comes, still runs it. Checked before the door.
pub fn not_yet(scheduled: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    scheduled - now > Duration::seconds(EARLY_SECONDS)
}

/// The door's verdict, checks in this order: worker flag, lateness, task
/// missing, tombstone, pause, hold, install, completion, current schedule,
/// skip next, the bound on occurrences waiting for a person.
pub fn verdict(facts: &Facts<'_>) -> Verdict {
    use SkipReason::*;
    if !facts.worker_enabled {
        return Verdict::Skip(WorkerDisabled);
    }
    if facts.now - facts.scheduled > facts.catch_up {
        return Verdict::Skip(Missed);
    }
    let (task, install) = match facts.task {
        TaskFacts::Unknown => return Verdict::Run,
        TaskFacts::Missing => return Verdict::Skip(Missing),
        TaskFacts::Present { task, install } => (task, install),
    };
    let overrides = task.overrides.clone().unwrap_or_default();
    if overrides.deleted {
        return Verdict::Skip(Deleted);
    }
    if overrides.paused {
        return Verdict::Skip(Paused);
    }
    if task.hold.is_held() {
        return Verdict::Skip(Held(task.hold.entries().map(|(r, _)| r).collect()));
    }
    if task.kind == TaskKind::Connector {
        match install {
            Some(install) if !install.is_installed() => return Verdict::Skip(Uninstalled),
            None => return Verdict::Skip(Uninstalled),
            Some(install) if !install.may_own_tasks() => return Verdict::Skip(NotWorkspaceInstall),
            Some(_) => {}
        }
    }
    if task.completed_at.is_some() {
        return Verdict::Skip(Completed);
    }
    if !is_occurrence(&task.spec.schedule, facts.scheduled) && !is_recorded(&task.run_now, facts.scheduled) {
        return Verdict::Skip(Rescheduled);
    }
    if skips(task.skip_next.as_ref(), facts.scheduled) {
        return Verdict::Skip(match task.kind {
            TaskKind::Reminder => SkippedByOwner,
            TaskKind::Connector => SkippedByAdmin,
        });
    }
    if awaiting_beside(task, &occurrence_key(facts.scheduled)) >= MAX_AWAITING {
        return Verdict::Skip(AwaitingApprovalLimit);
    }
    Verdict::Run
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::schedule::Schedule;
    use crate::domain::task::install::{InstallScope, InstallStatus};
    use crate::domain::task::overrides::Overrides;
    use crate::domain::task::tests_support::{connector_task, reminder_task};
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap()
    }

    #[test]
    fn an_occurrence_more_than_two_minutes_ahead_is_not_yet_due() {
        assert!(!not_yet(t0(), t0()));
        assert!(!not_yet(t0() + Duration::seconds(EARLY_SECONDS), t0()), "clock drift");
        assert!(not_yet(t0() + Duration::seconds(EARLY_SECONDS + 1), t0()));
        assert!(!not_yet(t0() - Duration::days(1), t0()), "late is the door's, not this");
    }

    fn install(status: InstallStatus) -> Install {
        Install {
            install_id: "ins_1".into(),
            workspace: "ws_1".into(),
            server: "issues".into(),
            url: "http://127.0.0.1:1/mcp".into(),
            scope: InstallScope::Workspace,
            account: "acct_1".into(),
            credential_secret_arn: None,
            status,
            updated_at: t0(),
            declaration_errors: Default::default(),
            last_error: None,
            lifecycle_at: None,
            lifecycle_id: None,
        }
    }

    fn facts<'a>(task: TaskFacts<'a>) -> Facts<'a> {
        Facts {
            worker_enabled: true,
            scheduled: t0(),
            now: t0() + Duration::seconds(5),
            catch_up: Duration::seconds(3600),
            task,
        }
    }

    #[test]
    fn an_occurrence_of_a_schedule_that_moved_is_rescheduled() {
        let moved = reminder_task(t0() + Duration::hours(1));
        let present = TaskFacts::Present {
            task: &moved,
            install: None,
        };
        assert_eq!(verdict(&facts(present)), Verdict::Skip(SkipReason::Rescheduled));
        assert!(!SkipReason::Rescheduled.completes_one_time());
        assert!(SkipReason::Missed.completes_one_time());
        assert!(SkipReason::WorkerDisabled.completes_one_time());
        assert!(!SkipReason::Paused.completes_one_time());

        let mut daily = reminder_task(t0());
        daily.spec.schedule = Schedule::Cron {
            cron: "0 19 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        let present = TaskFacts::Present {
            task: &daily,
            install: None,
        };
        // t0 is 18:00 UTC, 19:00 in Berlin: the daily time.
        assert_eq!(verdict(&facts(present)), Verdict::Run);
        daily.spec.schedule = Schedule::Cron {
            cron: "30 7 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        let present = TaskFacts::Present {
            task: &daily,
            install: None,
        };
        assert_eq!(
            verdict(&facts(present)),
            Verdict::Skip(SkipReason::Rescheduled),
            "yesterday's 19:00 of a reminder moved to 07:30"
        );
        assert!(is_occurrence(
            &Schedule::Rate {
                every: 5,
                unit: crate::domain::schedule::RateUnit::Minutes
            },
            t0() + Duration::seconds(17)
        ));
    }

    #[test]
    fn each_skip_reason_in_order() {
        let reminder = reminder_task(t0());
        let present = TaskFacts::Present {
            task: &reminder,
            install: None,
        };
        assert_eq!(verdict(&facts(present)), Verdict::Run);
        assert_eq!(verdict(&facts(TaskFacts::Unknown)), Verdict::Run);

        let off = Facts {
            worker_enabled: false,
            ..facts(present)
        };
        assert_eq!(verdict(&off), Verdict::Skip(SkipReason::WorkerDisabled));
        let late = Facts {
            now: t0() + Duration::seconds(3601),
            ..facts(TaskFacts::Unknown)
        };
        assert_eq!(verdict(&late), Verdict::Skip(SkipReason::Missed));
        let on_the_edge = Facts {
            now: t0() + Duration::seconds(3600),
            ..facts(present)
        };
        assert_eq!(verdict(&on_the_edge), Verdict::Run);
        assert_eq!(verdict(&facts(TaskFacts::Missing)), Verdict::Skip(SkipReason::Missing));

        let mut deleted = reminder.clone();
        deleted.overrides = Some(Overrides {
            deleted: true,
            paused: true,
            ..Default::default()
        });
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &deleted,
                install: None
            })),
            Verdict::Skip(SkipReason::Deleted)
        );
        let mut paused = reminder.clone();
        paused.overrides = Some(Overrides {
            paused: true,
            ..Default::default()
        });
        paused.hold.place(HoldReason::Withdrawn, t0(), "gone");
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &paused,
                install: None
            })),
            Verdict::Skip(SkipReason::Paused)
        );
        let mut held = reminder.clone();
        held.hold.place(HoldReason::AwaitingArgument, t0(), "team");
        held.hold.place(HoldReason::Withdrawn, t0(), "gone");
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &held,
                install: None
            })),
            Verdict::Skip(SkipReason::Held(vec![
                HoldReason::Withdrawn,
                HoldReason::AwaitingArgument
            ]))
        );
        let mut done = reminder.clone();
        done.completed_at = Some(t0());
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &done,
                install: None
            })),
            Verdict::Skip(SkipReason::Completed)
        );
    }

    #[test]
    fn a_connector_task_runs_only_while_installed() {
        let task = connector_task(t0());
        let installed = install(InstallStatus::Installed);
        let gone = install(InstallStatus::Uninstalled);
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &task,
                install: Some(&installed)
            })),
            Verdict::Run
        );
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &task,
                install: Some(&gone)
            })),
            Verdict::Skip(SkipReason::Uninstalled)
        );
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &task,
                install: None
            })),
            Verdict::Skip(SkipReason::Uninstalled)
        );
    }

    #[test]
    fn a_connector_task_never_runs_on_a_personal_install() {
        let task = connector_task(t0());
        let mut personal = install(InstallStatus::Installed);
        personal.scope = InstallScope::Personal;
        assert_eq!(
            verdict(&facts(TaskFacts::Present {
                task: &task,
                install: Some(&personal)
            })),
            Verdict::Skip(SkipReason::NotWorkspaceInstall)
        );
        assert_eq!(SkipReason::NotWorkspaceInstall.describe(), "not workspace install");
    }

    #[test]
    fn past_the_bound_of_occurrences_waiting_for_a_person_the_next_is_skipped_and_a_resume_still_runs() {
        use crate::domain::task::claim::{Claim, RunStatus};
        let mut task = connector_task(t0());
        let installed = install(InstallStatus::Installed);
        let waiting = |hours: i64| Claim {
            status: RunStatus::AwaitingApproval,
            lease_until: 0,
            execution_id: "e1".into(),
            attempts: 1,
            started_at: t0(),
            crashed_usd: 0.0,
            workspace_usd: 0.0,
            request_id: Some(format!("req_{hours}")),
        };
        let present = |task: &Task, scheduled: DateTime<Utc>| {
            verdict(&Facts {
                scheduled,
                now: scheduled + Duration::seconds(5),
                ..facts(TaskFacts::Present {
                    task,
                    install: Some(&installed),
                })
            })
        };
        for hours in 1..i64::try_from(MAX_AWAITING).unwrap() {
            task.claims
                .insert(occurrence_key(t0() - Duration::hours(hours)), waiting(hours));
        }
        assert_eq!(present(&task, t0()), Verdict::Run, "one short of the bound");
        let last = t0() - Duration::hours(i64::try_from(MAX_AWAITING).unwrap());
        task.claims.insert(occurrence_key(last), waiting(99));
        assert_eq!(
            present(&task, t0()),
            Verdict::Skip(SkipReason::AwaitingApprovalLimit),
            "at the bound: skipped before the model"
        );
        // The resume of one that waits is not held back by the others.
        let resumed = connector_task(last);
        let mut resumed = Task {
            claims: task.claims.clone(),
            ..resumed
        };
        resumed.claims.get_mut(&occurrence_key(last)).unwrap().status = RunStatus::Running;
        assert_eq!(present(&resumed, last), Verdict::Run);
        assert_eq!(SkipReason::AwaitingApprovalLimit.code(), "awaiting_approval_limit");
    }

    #[test]
    fn reasons_have_stable_codes() {
        assert_eq!(
            SkipReason::Held(vec![HoldReason::NeedUnbound]).describe(),
            "held: need_unbound"
        );
        assert_eq!(SkipReason::WorkerDisabled.describe(), "worker disabled");
        assert_eq!(SkipReason::BudgetExhausted.code(), "budget_exhausted");
    }

    #[test]
    fn a_monthly_reminders_occurrences_are_its_own_and_none_after_its_until() {
        let mut monthly = reminder_task(t0());
        monthly.spec.schedule = Schedule::Calendar {
            calendar: crate::domain::schedule::calendar::Calendar {
                month: None,
                day: crate::domain::schedule::calendar::MonthDay::Last,
                hour: 19,
                minute: 0,
            },
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        let last_of_december = Utc.with_ymd_and_hms(2026, 12, 31, 18, 0, 0).unwrap();
        assert!(is_occurrence(&monthly.spec.schedule, last_of_december));
        assert!(
            !is_occurrence(&monthly.spec.schedule, t0()),
            "the 24th is not the last day"
        );
        let present = TaskFacts::Present {
            task: &monthly,
            install: None,
        };
        let facts = Facts {
            scheduled: last_of_december,
            now: last_of_december,
            ..facts(present)
        };
        assert_eq!(verdict(&facts), Verdict::Run);
        let mut ended = monthly.clone();
        if let Schedule::Calendar { until, .. } = &mut ended.spec.schedule {
            *until = chrono::NaiveDate::from_ymd_opt(2026, 12, 30);
        }
        assert!(
            !is_occurrence(&ended.spec.schedule, last_of_december),
            "after its until, no occurrence is its own"
        );
    }

    #[test]
    fn the_skipped_occurrence_is_skipped_with_who_asked_and_the_next_runs() {
        let mut daily = reminder_task(t0());
        daily.spec.schedule = Schedule::Cron {
            cron: "0 19 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        daily.skip_next = Some(crate::domain::task::skip::SkipNext {
            occurrence: t0(),
            by: "usr_1".into(),
            at: t0() - Duration::days(1),
        });
        let present = TaskFacts::Present {
            task: &daily,
            install: None,
        };
        assert_eq!(verdict(&facts(present)), Verdict::Skip(SkipReason::SkippedByOwner));
        assert_eq!(SkipReason::SkippedByOwner.describe(), "skipped by its owner");
        let tomorrow = Facts {
            scheduled: t0() + Duration::days(1),
            now: t0() + Duration::days(1),
            ..facts(present)
        };
        assert_eq!(verdict(&tomorrow), Verdict::Run);
        let mut connector = daily.clone();
        connector.kind = TaskKind::Connector;
        let installed = install(InstallStatus::Installed);
        let present = TaskFacts::Present {
            task: &connector,
            install: Some(&installed),
        };
        assert_eq!(verdict(&facts(present)), Verdict::Skip(SkipReason::SkippedByAdmin));
        assert_eq!(SkipReason::SkippedByAdmin.describe(), "skipped by an admin");
        // A pause speaks first.
        daily.overrides = Some(Overrides {
            paused: true,
            ..Default::default()
        });
        let present = TaskFacts::Present {
            task: &daily,
            install: None,
        };
        assert_eq!(verdict(&facts(present)), Verdict::Skip(SkipReason::Paused));
    }

    #[test]
    fn a_recorded_run_now_is_one_of_the_tasks_own_and_an_unrecorded_one_is_not() {
        let mut daily = reminder_task(t0());
        daily.spec.schedule = Schedule::Cron {
            cron: "0 7 * * *".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        };
        fn present(task: &Task) -> TaskFacts<'_> {
            TaskFacts::Present { task, install: None }
        }
        // t0 (19:00 in Berlin) is no occurrence of a 07:00 reminder.
        assert_eq!(verdict(&facts(present(&daily))), Verdict::Skip(SkipReason::Rescheduled));
        daily.run_now.insert(
            crate::domain::schedule::format_utc(t0()),
            crate::domain::task::run_now::RunNow {
                key: "now_1".into(),
                by: "usr_1".into(),
                requested_at: t0(),
            },
        );
        assert_eq!(verdict(&facts(present(&daily))), Verdict::Run);
        daily.overrides = Some(Overrides {
            paused: true,
            ..Default::default()
        });
        assert_eq!(verdict(&facts(present(&daily))), Verdict::Skip(SkipReason::Paused));
    }
}
