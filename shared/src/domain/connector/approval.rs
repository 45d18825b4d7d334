//! An approval is a person agreeing to a task's bounds: the chat user who
//! approved a reminder's concrete call (create records it), or the workspace
//! admin who approves a connector's declared bounds here ([`approve`]). The
//! record itself is `task::Approval`, which the task item holds.
//!
//! Invariant: no task runs without one. A reminder carries the chat backend's
//! approval id and time; create refuses a request without it. An admin binds
//! a connector task's needs only as `binding::check_binding` allows: never to
//! the declaring install, another install of its server, a personal install or
//! one that is not installed.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use super::binding::check_binding;
use super::reconcile::settle_holds;
use crate::domain::task::hold::HoldReason;
use crate::domain::task::install::Install;
use crate::domain::task::{Approval, Task, TaskKind};

/// Why an admin's approval is refused: the message says what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidApproval(pub String);

/// The most tools an admin gates for one task (`ask_first`).
pub const MAX_ASK_FIRST: usize = 64;

/// An admin approves a connector task's pending (or first declared) bounds
/// with argument values and need bindings: every argument is one the prompt
/// has, every required one has a value, every need is bound (as
/// `binding::check_binding` allows) or left unbound by decision. The bounds become
/// `spec`, `pending` goes, the approval hold is lifted and the runtime holds
/// settle as reconcile settles them.
pub fn approve(
    task: &mut Task,
    installs: &BTreeMap<String, Install>,
    approver: &str,
    arguments: BTreeMap<String, String>,
    bindings: BTreeMap<String, Option<String>>,
    ask_first: Option<BTreeSet<String>>,
    now: DateTime<Utc>,
) -> Result<(), InvalidApproval> {
    let invalid = |m: String| Err(InvalidApproval(m));
    if task.kind != TaskKind::Connector {
        return invalid("only connector tasks are approved here; a reminder was approved by its user".into());
    }
    let mut target = task
        .pending
        .as_ref()
        .map_or_else(|| task.spec.clone(), |p| p.spec.clone());
    for (name, value) in arguments {
        if !task.prompt_arguments.contains_key(&name) {
            return invalid(format!("the prompt has no argument `{name}`"));
        }
        target.arguments.insert(name, value);
    }
    let missing = |(name, required): (&String, &bool)| *required && !target.arguments.contains_key(name);
    if let Some((name, _)) = task.prompt_arguments.iter().find(|&argument| missing(argument)) {
        return invalid(format!("the required argument `{name}` has no value"));
    }
    bind(task, &mut target, bindings, installs)?;
    // Given, the admin's gating replaces the last; not given, it stays: a
    // re-approval never drops what an admin gated.
    let ask_first = match ask_first {
        Some(names) => gated(names)?,
        None => task.approval.as_ref().map(|a| a.ask_first.clone()).unwrap_or_default(),
    };
    task.spec = target;
    task.pending = None;
    task.hold.lift(HoldReason::AwaitingApproval);
    settle_holds(task, &mut Vec::new(), installs, now);
    task.approval = Some(Approval {
        id: format!("admin:{approver}:{}", task.version + 1),
        approved_at: now,
        by: Some(approver.to_owned()),
        ask_first,
    });
    Ok(())
}

/// The admin's bindings applied to the bounds being approved: each to a
/// declared need, as `check_binding` allows; every need then decided.
fn bind(
    task: &Task,
    target: &mut crate::domain::task::Spec,
    bindings: BTreeMap<String, Option<String>>,
    installs: &BTreeMap<String, Install>,
) -> Result<(), InvalidApproval> {
    for (need, install) in bindings {
        if !target.needs.contains_key(&need) {
            return Err(InvalidApproval(format!("the task declares no need `{need}`")));
        }
        if let Some(id) = &install
            && let Err(refusal) = check_binding(task, id, installs)
        {
            return Err(InvalidApproval(refusal.to_string()));
        }
        target.bindings.insert(need, install);
    }
    let needs = &target.needs;
    target.bindings.retain(|need, _| needs.contains_key(need));
    match target.needs.keys().find(|n| !target.bindings.contains_key(*n)) {
        Some(need) => Err(InvalidApproval(format!(
            "need `{need}` has no decision: bind it to an install, or pass null to leave it unbound"
        ))),
        None => Ok(()),
    }
}

/// The tools an admin gates (`ask_first`), within their bounds.
fn gated(names: BTreeSet<String>) -> Result<BTreeSet<String>, InvalidApproval> {
    if names.len() > MAX_ASK_FIRST {
        return Err(InvalidApproval(format!(
            "ask_first names at most {MAX_ASK_FIRST} tools"
        )));
    }
    if let Some(name) = names.iter().find(|n| n.is_empty() || n.chars().count() > 128) {
        return Err(InvalidApproval(format!(
            "ask_first name `{name}` must be 1 to 128 characters"
        )));
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::install::tests_support::install;
    use crate::domain::task::install::{InstallScope, InstallStatus};
    use crate::domain::task::tests_support::connector_task;
    use chrono::TimeZone;

    fn awaiting(now: DateTime<Utc>) -> Task {
        let mut task = connector_task(now);
        task.hold.place(HoldReason::AwaitingApproval, now, "new");
        task.prompt_arguments = BTreeMap::from([("repo".to_owned(), true), ("label".to_owned(), false)]);
        task.spec.needs = BTreeMap::from([("chat".to_owned(), "where to post".to_owned())]);
        task.spec.arguments.clear();
        task.spec.bindings.clear();
        task
    }

    fn chat() -> BTreeMap<String, Install> {
        let chat = install("ins_chat", "chat", InstallScope::Workspace, InstallStatus::Installed);
        BTreeMap::from([(chat.install_id.clone(), chat)])
    }

    fn args(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn bind(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn an_approval_needs_every_required_argument_and_a_decision_for_every_need() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let cases = [
            (
                args(&[("nope", "x")]),
                bind(&[("chat", None)]),
                "the prompt has no argument `nope`",
            ),
            (
                args(&[("label", "x")]),
                bind(&[("chat", None)]),
                "the required argument `repo` has no value",
            ),
            (
                args(&[("repo", "a/b")]),
                bind(&[("mail", None)]),
                "the task declares no need `mail`",
            ),
            (
                args(&[("repo", "a/b")]),
                bind(&[]),
                "need `chat` has no decision: bind it to an install, or pass null to leave it unbound",
            ),
            (
                args(&[("repo", "a/b")]),
                bind(&[("chat", Some("ins_gone"))]),
                "install `ins_gone` is not an installed connector of this workspace",
            ),
        ];
        for (arguments, bindings, expected) in cases {
            let mut task = awaiting(now);
            let before = task.clone();
            assert_eq!(
                approve(&mut task, &chat(), "usr_admin", arguments, bindings, None, now),
                Err(InvalidApproval(expected.to_owned()))
            );
            assert_eq!(task, before, "a refused approval changes nothing");
        }
    }

    #[test]
    fn an_approval_applies_the_bounds_lifts_the_hold_and_records_who() {
        let now = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap();
        let mut task = awaiting(now);
        approve(
            &mut task,
            &chat(),
            "usr_admin",
            args(&[("repo", "a/b")]),
            bind(&[("chat", Some("ins_chat"))]),
            Some(BTreeSet::from(["delete".to_owned()])),
            now,
        )
        .unwrap();
        assert_eq!(task.spec.arguments, args(&[("repo", "a/b")]));
        assert_eq!(task.spec.bindings, bind(&[("chat", Some("ins_chat"))]));
        assert!(task.pending.is_none());
        assert!(!task.hold.has(HoldReason::AwaitingApproval));
        assert!(!task.hold.has(HoldReason::NeedUnbound));
        let approval = task.approval.clone().unwrap();
        assert_eq!(approval.id, format!("admin:usr_admin:{}", task.version + 1));
        assert_eq!(approval.by.as_deref(), Some("usr_admin"));
        assert_eq!(approval.ask_first, BTreeSet::from(["delete".to_owned()]));
        // A re-approval that names no gating keeps the admin's.
        approve(&mut task, &chat(), "usr_other", args(&[]), bind(&[]), None, now).unwrap();
        assert_eq!(
            task.approval.as_ref().unwrap().ask_first,
            BTreeSet::from(["delete".to_owned()])
        );
        let too_many: BTreeSet<String> = (0..=MAX_ASK_FIRST).map(|i| format!("t{i}")).collect();
        assert!(
            approve(
                &mut task,
                &chat(),
                "usr_admin",
                args(&[]),
                bind(&[]),
                Some(too_many),
                now
            )
            .is_err()
        );

        let mut reminder = awaiting(now);
        reminder.kind = TaskKind::Reminder;
        assert!(approve(&mut reminder, &chat(), "usr_admin", args(&[]), bind(&[]), None, now).is_err());
    }
}
