//! The edits a reminder's owner and a workspace admin make to a task's
//! standing: pause, resume, cancel (an admin's `delete`), restore, skip
//! next and unskip. One type for both ([`Edit`]), and each one's rules in
//! one place ([`decide`]), held by one table test.
//!
//! Invariants:
//! - an owner edits only a reminder that is still open (not cancelled, not
//!   completed), cancel aside; resumes only a pause of their own; and
//!   resumes nothing whose time has passed (a one-time instant, or the last
//!   day of an `until`): it could never run and would hold a cap place;
//! - an admin skips and unskips connector tasks only (a reminder's runs are
//!   its owner's); resumes or restores no reminder whose time has passed;
//!   restores no reminder its owner cancelled (SPEC §8: the person's cancel
//!   is final);
//! - an edit that changes nothing is answered without a write, except an
//!   admin's override, which is written as a new version like an approval;
//! - the overrides change only through `overrides::OverrideEdit`, the skip
//!   only through `skip`.
//!
//! What needs the store (whether a restore fits the owner's cap) and the
//! write itself (`app::change::commit`) stay in the use cases.

use chrono::{DateTime, Utc};

use crate::domain::schedule::{InstantError, Schedule, format_utc};
use crate::domain::task::overrides::OverrideEdit;
use crate::domain::task::skip::{self, SkipError};
use crate::domain::task::{Provenance, Task, TaskKind, TaskState};

/// One edit of a task's standing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    Pause {
        note: Option<String>,
    },
    Resume,
    /// The owner's `cancel`, an admin's `delete`: a tombstone.
    Cancel {
        note: Option<String>,
    },
    /// An admin's; an owner creates a cancelled reminder again instead.
    Restore,
    SkipNext,
    Unskip,
}

impl Edit {
    /// The operation's name, as `op` spells it for `actor`.
    pub fn name(&self, actor: Actor<'_>) -> &'static str {
        match (self, actor) {
            (Edit::Pause { .. }, _) => "pause",
            (Edit::Resume, _) => "resume",
            (Edit::Cancel { .. }, Actor::Owner(_)) => "cancel",
            (Edit::Cancel { .. }, Actor::Admin(_)) => "delete",
            (Edit::Restore, _) => "restore",
            (Edit::SkipNext, _) => "skip_next",
            (Edit::Unskip, _) => "unskip",
        }
    }

    fn overrides(&self) -> Option<OverrideEdit> {
        match self {
            Edit::Pause { note } => Some(OverrideEdit::Pause { note: note.clone() }),
            Edit::Resume => Some(OverrideEdit::Resume),
            Edit::Cancel { note } => Some(OverrideEdit::Delete { note: note.clone() }),
            Edit::Restore => Some(OverrideEdit::Restore),
            Edit::SkipNext | Edit::Unskip => None,
        }
    }
}

/// Who edits, by their principal id: the reminder's owner (the use case
/// has checked the ownership) or a workspace admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Actor<'a> {
    Owner(&'a str),
    Admin(&'a str),
}

impl Actor<'_> {
    fn id(&self) -> &str {
        match self {
            Actor::Owner(id) | Actor::Admin(id) => id,
        }
    }
}

/// What an allowed edit does.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nothing to change: answer the task as it is, without a write.
    Unchanged,
    /// Write this task (a new version) and put its schedule in step.
    Write(Box<Task>),
}

/// Why an edit is refused; each use case gives it its code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditRefusal {
    #[error("the reminder was cancelled")]
    Cancelled,
    #[error("the reminder already ran; create a new one")]
    AlreadyRan,
    #[error("a workspace admin paused this reminder: only an admin resumes it")]
    PausedByAdmin,
    /// The owner resumes a one-time reminder whose instant has passed.
    #[error(transparent)]
    InstantPassed(InstantError),
    /// The owner resumes a reminder whose `until` has passed.
    #[error("its last day, {until}, has passed, so it cannot be resumed: move it with update")]
    UntilPassed { until: String },
    /// An admin resumes or restores a reminder whose time has passed.
    #[error("its time has passed, so it could never run again: its owner can move it with update")]
    TimePassed,
    #[error("its owner cancelled this reminder: only they can create it again")]
    OwnerCancelled,
    #[error("{0} is for connector tasks: a reminder's runs are its owner's")]
    ConnectorOnly(&'static str),
    #[error("restore is a workspace admin's: create the reminder again")]
    AdminOnly,
    #[error(transparent)]
    Skip(#[from] SkipError),
}

/// Whether `actor` may make `edit` to `task` at `now`, and what it writes.
pub fn decide(edit: &Edit, actor: Actor<'_>, task: &Task, now: DateTime<Utc>) -> Result<Decision, EditRefusal> {
    match actor {
        Actor::Owner(_) => owners(edit, actor, task, now),
        Actor::Admin(_) => admins(edit, actor, task, now),
    }
}

fn owners(edit: &Edit, actor: Actor<'_>, task: &Task, now: DateTime<Utc>) -> Result<Decision, EditRefusal> {
    let state = task.state();
    if *edit == Edit::Restore {
        return Err(EditRefusal::AdminOnly);
    }
    if !matches!(edit, Edit::Cancel { .. }) {
        match state {
            TaskState::Deleted => return Err(EditRefusal::Cancelled),
            TaskState::Completed => return Err(EditRefusal::AlreadyRan),
            _ => {}
        }
    }
    let unchanged = match edit {
        Edit::Pause { .. } => state == TaskState::Paused,
        Edit::Resume => state != TaskState::Paused,
        Edit::Cancel { .. } => state == TaskState::Deleted,
        Edit::Restore | Edit::SkipNext | Edit::Unskip => false,
    };
    if unchanged {
        return Ok(Decision::Unchanged);
    }
    if *edit == Edit::Resume {
        let overrides = task.overrides.clone().unwrap_or_default();
        if overrides.pauser().is_some_and(|by| by != actor.id()) {
            return Err(EditRefusal::PausedByAdmin);
        }
        if let Schedule::At { at } = task.spec.schedule
            && at <= now
        {
            return Err(EditRefusal::InstantPassed(InstantError::InPast {
                at: format_utc(at),
                now: format_utc(now),
            }));
        }
        if let Some(until) = task.spec.schedule.until()
            && task.spec.schedule.is_over(now)
        {
            return Err(EditRefusal::UntilPassed {
                until: until.format("%Y-%m-%d").to_string(),
            });
        }
    }
    apply(edit, actor, task, now, false)
}

fn admins(edit: &Edit, actor: Actor<'_>, task: &Task, now: DateTime<Utc>) -> Result<Decision, EditRefusal> {
    match edit {
        Edit::SkipNext | Edit::Unskip if task.kind != TaskKind::Connector => {
            Err(EditRefusal::ConnectorOnly(edit.name(actor)))
        }
        Edit::Resume | Edit::Restore => {
            revivable(edit, task, now)?;
            apply(edit, actor, task, now, true)
        }
        _ => apply(edit, actor, task, now, true),
    }
}

/// Whether an admin may bring a reminder back: not one whose time has
/// passed, which could never run and would hold its owner's cap place for
/// good; not one its owner cancelled, which would run again on their
/// account against their word. Connector tasks are the admins' own.
fn revivable(edit: &Edit, task: &Task, now: DateTime<Utc>) -> Result<(), EditRefusal> {
    let Provenance::User { principal: owner } = &task.provenance else {
        return Ok(());
    };
    let overrides = task.overrides.clone().unwrap_or_default();
    if *edit == Edit::Restore && overrides.deleter() == Some(owner.as_str()) {
        return Err(EditRefusal::OwnerCancelled);
    }
    let passed = match task.spec.schedule {
        Schedule::At { at } => at <= now,
        _ => task.spec.schedule.is_over(now),
    };
    if passed {
        return Err(EditRefusal::TimePassed);
    }
    Ok(())
}

/// The task after `edit`; `Unchanged` when it is the task as it was, unless
/// `overrides_always_write` and the edit is an override (an admin's).
fn apply(
    edit: &Edit,
    actor: Actor<'_>,
    task: &Task,
    now: DateTime<Utc>,
    overrides_always_write: bool,
) -> Result<Decision, EditRefusal> {
    let mut updated = task.clone();
    match edit {
        Edit::SkipNext => {
            updated.skip_next = Some(skip::skip_next(
                &task.spec.schedule,
                task.skip_next.as_ref(),
                actor.id(),
                now,
            )?);
        }
        Edit::Unskip if skip::pending(task.skip_next.as_ref(), now).is_some() => {
            updated.skip_next = None;
        }
        _ => {}
    }
    let overrides = edit.overrides();
    let always = overrides_always_write && overrides.is_some();
    if let Some(change) = overrides {
        updated.overrides = change.apply(task.overrides.as_ref(), actor.id(), now);
    }
    Ok(if updated == *task && !always {
        Decision::Unchanged
    } else {
        Decision::Write(Box::new(updated))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::overrides::Overrides;
    use crate::domain::task::tests_fixture;
    use chrono::{NaiveDate, TimeZone};

    const OWNER: &str = "usr_1";
    const ADMIN: &str = "u_admin";

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 6, 10, 12, 0, 0).unwrap()
    }

    fn daily() -> Schedule {
        Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        }
    }

    fn at(hour: u32) -> Schedule {
        Schedule::At {
            at: Utc.with_ymd_and_hms(2026, 6, 10, hour, 0, 0).unwrap(),
        }
    }

    fn task(kind: TaskKind, schedule: Schedule) -> Task {
        let mut task = tests_fixture(schedule);
        if kind == TaskKind::Connector {
            task.kind = TaskKind::Connector;
            task.provenance = Provenance::Connector {
                install_id: "ins_1".into(),
                server: "issues".into(),
                prompt: "weekly".into(),
            };
        }
        task
    }

    fn overrides(paused_by: Option<&str>, deleted_by: Option<&str>) -> Option<Overrides> {
        Some(Overrides {
            paused: paused_by.is_some(),
            deleted: deleted_by.is_some(),
            by: paused_by.or(deleted_by).map(str::to_owned),
            paused_by: paused_by.map(str::to_owned),
            deleted_by: deleted_by.map(str::to_owned),
            at: Some(now()),
            note: None,
        })
    }

    /// What a decision comes to, for the table: refused, answered as it is,
    /// or written with this state.
    #[derive(Debug, PartialEq)]
    enum Comes {
        Refused(EditRefusal),
        Unchanged,
        Written(TaskState),
    }

    fn comes(edit: Edit, actor: Actor<'_>, task: &Task) -> Comes {
        match decide(&edit, actor, task, now()) {
            Err(refusal) => Comes::Refused(refusal),
            Ok(Decision::Unchanged) => Comes::Unchanged,
            Ok(Decision::Write(task)) => Comes::Written(task.state()),
        }
    }

    #[test]
    fn each_actor_s_rules_for_each_edit() {
        let owner = Actor::Owner(OWNER);
        let admin = Actor::Admin(ADMIN);
        let daily = task(TaskKind::Reminder, daily());
        let connector = task(TaskKind::Connector, self::daily());
        let mut paused_by_owner = daily.clone();
        paused_by_owner.overrides = overrides(Some(OWNER), None);
        let mut paused_by_admin = daily.clone();
        paused_by_admin.overrides = overrides(Some(ADMIN), None);
        let mut cancelled_by_owner = daily.clone();
        cancelled_by_owner.overrides = overrides(None, Some(OWNER));
        let mut deleted_by_admin = daily.clone();
        deleted_by_admin.overrides = overrides(None, Some(ADMIN));
        let mut passed_once = task(TaskKind::Reminder, at(11));
        passed_once.overrides = overrides(Some(OWNER), None);
        let mut passed_until = task(
            TaskKind::Reminder,
            Schedule::Cron {
                cron: "0 9 * * *".into(),
                timezone: "UTC".into(),
                until: NaiveDate::from_ymd_opt(2026, 6, 1),
            },
        );
        passed_until.overrides = overrides(Some(OWNER), None);
        let mut completed = task(TaskKind::Reminder, at(11));
        completed.completed_at = Some(now());
        let one_time = task(TaskKind::Reminder, at(13));

        use Comes::*;
        use EditRefusal as R;
        use TaskState::*;
        let pause = || Edit::Pause { note: None };
        let cancel = || Edit::Cancel { note: None };
        let table: Vec<(&str, Edit, Actor<'_>, &Task, Comes)> = vec![
            ("owner pauses", pause(), owner, &daily, Written(Paused)),
            ("owner pauses again", pause(), owner, &paused_by_owner, Unchanged),
            (
                "admin pauses again: a new version",
                pause(),
                admin,
                &paused_by_owner,
                Written(Paused),
            ),
            (
                "owner resumes their pause",
                Edit::Resume,
                owner,
                &paused_by_owner,
                Written(Scheduled),
            ),
            (
                "owner resumes an admin's pause",
                Edit::Resume,
                owner,
                &paused_by_admin,
                Refused(R::PausedByAdmin),
            ),
            (
                "admin resumes the owner's pause",
                Edit::Resume,
                admin,
                &paused_by_owner,
                Written(Scheduled),
            ),
            (
                "owner resumes what is not paused",
                Edit::Resume,
                owner,
                &daily,
                Unchanged,
            ),
            (
                "owner resumes a passed instant",
                Edit::Resume,
                owner,
                &passed_once,
                Refused(R::InstantPassed(InstantError::InPast {
                    at: "2026-06-10T11:00:00Z".into(),
                    now: "2026-06-10T12:00:00Z".into(),
                })),
            ),
            (
                "admin resumes a passed instant",
                Edit::Resume,
                admin,
                &passed_once,
                Refused(R::TimePassed),
            ),
            (
                "owner resumes past its until",
                Edit::Resume,
                owner,
                &passed_until,
                Refused(R::UntilPassed {
                    until: "2026-06-01".into(),
                }),
            ),
            (
                "admin resumes past its until",
                Edit::Resume,
                admin,
                &passed_until,
                Refused(R::TimePassed),
            ),
            ("owner cancels", cancel(), owner, &daily, Written(Deleted)),
            ("owner cancels again", cancel(), owner, &cancelled_by_owner, Unchanged),
            ("owner cancels what ran", cancel(), owner, &completed, Written(Deleted)),
            (
                "owner pauses what they cancelled",
                pause(),
                owner,
                &cancelled_by_owner,
                Refused(R::Cancelled),
            ),
            (
                "owner pauses what ran",
                pause(),
                owner,
                &completed,
                Refused(R::AlreadyRan),
            ),
            (
                "owner restores",
                Edit::Restore,
                owner,
                &deleted_by_admin,
                Refused(R::AdminOnly),
            ),
            (
                "admin restores its delete",
                Edit::Restore,
                admin,
                &deleted_by_admin,
                Written(Scheduled),
            ),
            (
                "admin restores the owner's cancel",
                Edit::Restore,
                admin,
                &cancelled_by_owner,
                Refused(R::OwnerCancelled),
            ),
            (
                "admin deletes a connector task",
                cancel(),
                admin,
                &connector,
                Written(Deleted),
            ),
            ("owner skips next", Edit::SkipNext, owner, &daily, Written(Scheduled)),
            (
                "owner unskips with nothing skipped",
                Edit::Unskip,
                owner,
                &daily,
                Unchanged,
            ),
            (
                "admin skips a reminder",
                Edit::SkipNext,
                admin,
                &daily,
                Refused(R::ConnectorOnly("skip_next")),
            ),
            (
                "admin unskips a reminder",
                Edit::Unskip,
                admin,
                &daily,
                Refused(R::ConnectorOnly("unskip")),
            ),
            (
                "admin skips a connector task",
                Edit::SkipNext,
                admin,
                &connector,
                Written(Scheduled),
            ),
            (
                "admin unskips with nothing skipped",
                Edit::Unskip,
                admin,
                &connector,
                Unchanged,
            ),
            (
                "owner skips a one-time reminder",
                Edit::SkipNext,
                owner,
                &one_time,
                Refused(R::Skip(SkipError::OneTime)),
            ),
        ];
        for (case, edit, actor, task, expected) in table {
            assert_eq!(comes(edit, actor, task), expected, "{case}");
        }
    }

    #[test]
    fn a_skip_taken_back_leaves_the_task_as_before_the_skip() {
        let owner = Actor::Owner(OWNER);
        let daily = task(TaskKind::Reminder, daily());
        let Ok(Decision::Write(skipped)) = decide(&Edit::SkipNext, owner, &daily, now()) else {
            panic!("the skip is written")
        };
        assert!(skipped.skip_next.is_some());
        assert_eq!(
            decide(&Edit::SkipNext, owner, &skipped, now()),
            Ok(Decision::Unchanged),
            "the same skip again changes nothing"
        );
        let Ok(Decision::Write(unskipped)) = decide(&Edit::Unskip, owner, &skipped, now()) else {
            panic!("the unskip is written")
        };
        assert_eq!(unskipped.skip_next, None);
        assert_eq!(unskipped.overrides, daily.overrides);
    }
}
