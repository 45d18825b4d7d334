//! The missed-occurrence check (SPEC §14): every task whose `due` lies
//! before the cutoff (`domain::operations::overdue::cutoff`: its catch-up window and a
//! margin ago) is judged against its run records and claims; each
//! occurrence with no outcome is recorded `skipped` (never delivered, or
//! never finished) the way the runner's door records a skip (a skip sends
//! no event: the person reads it in the task's runs, the operator in the
//! `OccurrencesOverdue` metric and its alarm) and it is reported once;
//! then `due` moves past what was judged.
//!
//! Bounded like the daily pass (SPEC §13): it reads the index a page of at
//! most [`PAGE`] tasks at a time, per shard, judging up to [`JUDGED_AT_ONCE`]
//! tasks of a page at once, and stops at its deadline; a task it did not
//! reach keeps its `due` and is judged by the next check. On its schedule
//! (`overdue.check`, every 15 minutes) the reconcile worker queues one work
//! item per family and shard (`overdue.shard`, each in its own message
//! group, so the worker checks them side by side); each starts where that
//! shard's last check stopped ([`check_shard`], its cursor kept in the
//! table), goes on at once from there when it ran out of time (a few times
//! a period, `app::reconcile::CHECK_HOPS`), and says how old the oldest
//! `due` it left unjudged is, the backlog's age. `sat overdue` runs every
//! shard on demand ([`check`]).

use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::app::run::{Kept, record_skip};
use crate::domain::operations::overdue::{self, CHECK_EXECUTION_ID, Trace};
use crate::domain::run::definition::REMINDER_SHARDS;
use crate::domain::run::door::SkipReason;
use crate::domain::run::occurrence::{Delivery, RunMessage, claim_retention, occurrence_key};
use crate::domain::schedule::Schedule;
use crate::domain::task::{Task, TaskKind};
use crate::ports::{DueIndex, Family, RunStore, StoreError};

/// The most tasks one query of the index returns.
pub const PAGE: usize = 100;
/// Tasks of one page judged at once (about three requests each).
pub const JUDGED_AT_ONCE: usize = 8;

/// How the check runs.
#[derive(Debug, Clone, Copy)]
pub struct CheckSettings {
    /// `CATCH_UP_SECONDS`: occurrences are judged once it has passed.
    pub catch_up: Duration,
    /// `RETENTION_DAYS`: how long the records it writes are kept.
    pub retention: Duration,
    /// `false`: judge and report only, write nothing (`sat overdue --dry-run`).
    pub write: bool,
}

/// One occurrence found with no outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Missed {
    pub workspace: String,
    pub task_id: String,
    pub kind: &'static str,
    /// The occurrence (for a rate: the time one was expected by).
    pub scheduled_time: DateTime<Utc>,
    /// The schedule's zone (UTC for a one-time task and a rate).
    pub timezone: String,
    /// The stable word (`never_delivered`, `never_finished`).
    pub reason: &'static str,
    /// The reason in words, as its run record says it.
    pub explanation: String,
}

impl Missed {
    fn of(task: &Task, at: DateTime<Utc>, reason: &SkipReason) -> Self {
        Missed {
            workspace: task.workspace.clone(),
            task_id: task.task_id.to_string(),
            kind: match task.kind {
                TaskKind::Reminder => "reminder",
                TaskKind::Connector => "connector",
            },
            scheduled_time: at,
            timezone: task.spec.schedule.timezone().to_owned(),
            reason: reason.code(),
            explanation: reason.describe(),
        }
    }
}

/// What one check found.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Checked {
    /// Occurrences scheduled before this were judged.
    pub cutoff: Option<DateTime<Utc>>,
    /// The tasks read from the index.
    pub tasks: usize,
    /// The occurrences with no outcome, each reported by this check only.
    pub missed: Vec<Missed>,
    /// `false`: the deadline came first; the rest is judged next time.
    pub complete: bool,
    /// How long ago the oldest `due` this check left unjudged was (zero
    /// when it left none): the backlog's age.
    pub backlog: Duration,
    /// Tasks the check could not judge (a write the store refused, a read
    /// that failed): each named with why, the rest judged past them, so one
    /// task never stops its shard's check. Their `due` stays: the next
    /// check tries again, and the backlog's age shows them.
    pub unjudged: Vec<Unjudged>,
}

/// A task a check could not judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unjudged {
    pub workspace: String,
    pub task_id: String,
    pub error: String,
}

/// Runs the check of every shard at `now` until `deadline`, one shard
/// after another (`sat overdue`; the worker checks the shards side by side,
/// [`check_shard`]).
pub async fn check<S: DueIndex + RunStore>(
    store: &S,
    settings: CheckSettings,
    now: DateTime<Utc>,
    deadline: Instant,
) -> Result<Checked, StoreError> {
    let mut checked = Checked {
        cutoff: Some(overdue::cutoff(now, settings.catch_up)),
        complete: true,
        ..Checked::default()
    };
    for family in Family::ALL {
        for shard in 0..REMINDER_SHARDS {
            let one = check_shard(store, settings, family, shard, now, deadline).await?;
            checked.tasks += one.tasks;
            checked.missed.extend(one.missed);
            checked.complete &= one.complete;
            checked.backlog = checked.backlog.max(one.backlog);
            checked.unjudged.extend(one.unjudged);
        }
    }
    Ok(checked)
}

/// Checks one shard of `family` until `deadline`: from where its last
/// check stopped (its cursor in the table) to the end of the index's
/// overdue range, a page at a time, [`JUDGED_AT_ONCE`] tasks of a page at
/// once; it keeps where it stopped, so the next check goes on from there
/// (and, past the end, starts over), and measures the backlog it left.
pub async fn check_shard<S: DueIndex + RunStore>(
    store: &S,
    settings: CheckSettings,
    family: Family,
    shard: u8,
    now: DateTime<Utc>,
    deadline: Instant,
) -> Result<Checked, StoreError> {
    use futures_util::StreamExt;
    let cutoff = overdue::cutoff(now, settings.catch_up);
    let mut checked = Checked {
        cutoff: Some(cutoff),
        complete: true,
        ..Checked::default()
    };
    let mut after = store.check_cursor(family, shard).await?;
    loop {
        if Instant::now() >= deadline {
            checked.complete = false;
            break;
        }
        let page = store.due_page(family, shard, cutoff, after.as_ref(), PAGE).await?;
        checked.tasks += page.items.len();
        let judged: Vec<(&Task, Result<Vec<Missed>, StoreError>)> = futures_util::stream::iter(&page.items)
            .map(|task| async move { (task, judge_task(store, &settings, task, cutoff, now).await) })
            .buffer_unordered(JUDGED_AT_ONCE)
            .collect()
            .await;
        for (task, missed) in judged {
            match missed {
                Ok(missed) => checked.missed.extend(missed),
                Err(error) => checked.unjudged.push(unjudged(task, &error)),
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => {
                after = None;
                break;
            }
        }
    }
    if settings.write {
        store.save_check_cursor(family, shard, after.as_ref()).await?;
    }
    // The oldest `due` still judgeable before the cutoff: not reached, or
    // held (a live claim); a check that read it all leaves only those. An
    // entry the last release wrote sorts by a rate's `due` alone: its age
    // counts from when it can be judged all the same.
    let oldest = store.due_page(family, shard, cutoff, None, 1).await?;
    checked.backlog = oldest
        .items
        .first()
        .and_then(overdue::judgeable_at)
        .filter(|judgeable| *judgeable < cutoff)
        .map_or(Duration::zero(), |due| (now - due).max(Duration::zero()));
    Ok(checked)
}

/// A task a check could not judge, logged once, here, where it is handled.
fn unjudged(task: &Task, error: &StoreError) -> Unjudged {
    let error = crate::error_chain(error);
    tracing::error!(task_id = %task.task_id, workspace = %task.workspace, error = %error, "a task the missed-occurrence check could not judge; the rest of its shard is judged");
    Unjudged {
        workspace: task.workspace.clone(),
        task_id: task.task_id.to_string(),
        error,
    }
}

/// Records a judged occurrence as the runner records a skip, under the
/// check's own execution id.
async fn record_judged<S: RunStore>(
    store: &S,
    settings: &CheckSettings,
    task: &Task,
    at: DateTime<Utc>,
    reason: SkipReason,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let key = occurrence_key(at);
    let occ = Delivery {
        message: RunMessage {
            task_id: task.task_id.to_string(),
            workspace: task.workspace.clone(),
            scheduled_time: key.clone(),
            execution_id: CHECK_EXECUTION_ID.to_owned(),
            attempt: "0".to_owned(),
            resume: None,
        },
        task_id: task.task_id.clone(),
        scheduled: at,
        key,
    };
    let kept = Kept {
        retention: settings.retention,
        claims: claim_retention(settings.catch_up),
    };
    record_skip(store, &occ, &reason, 0, now, kept, Some(task))
        .await
        .map(drop)
}

/// Judges one task, records what it missed and moves its `due`; what it
/// missed is reported only if this check moved `due` (another check that
/// got there first reports it).
async fn judge_task<S: DueIndex + RunStore>(
    store: &S,
    settings: &CheckSettings,
    task: &Task,
    cutoff: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Vec<Missed>, StoreError> {
    let Some(due) = task.due else {
        return Ok(Vec::new());
    };
    // A rate's latest outcome before `due` says when the next was expected.
    let from = match &task.spec.schedule {
        Schedule::Rate { .. } => overdue::first_due(task, due).map_or(due, |next| due - (next - due)),
        _ => due,
    };
    let recorded = store.recorded_times(&task.task_id, from, cutoff).await?;
    let judged = overdue::judge(task, cutoff, now, &recorded, |at| {
        if recorded.contains(&at) {
            Trace::Recorded
        } else {
            task.claims.get(&occurrence_key(at)).map_or(Trace::None, Trace::Claimed)
        }
    });
    // Skipped by its owner (or an admin) and never delivered: recorded as
    // the runner would have recorded it, and not missed.
    if let Some(at) = judged.skipped
        && settings.write
    {
        let reason = match task.kind {
            TaskKind::Reminder => SkipReason::SkippedByOwner,
            TaskKind::Connector => SkipReason::SkippedByAdmin,
        };
        record_judged(store, settings, task, at, reason, now).await?;
    }
    let mut missed = Vec::new();
    for at in &judged.missed {
        let reason = match task.claims.get(&occurrence_key(*at)) {
            Some(_) => SkipReason::NeverFinished,
            None => SkipReason::NeverDelivered,
        };
        if settings.write {
            record_judged(store, settings, task, *at, reason.clone(), now).await?;
        }
        missed.push(Missed::of(task, *at, &reason));
    }
    if !settings.write || judged.due == task.due {
        return Ok(missed);
    }
    if store.move_due(task, judged.due).await? {
        missed.iter().for_each(log_missed);
        Ok(missed)
    } else {
        // Another check, or a change of the task, moved `due` meanwhile.
        Ok(Vec::new())
    }
}

/// The log line of a missed occurrence.
fn log_missed(m: &Missed) {
    tracing::warn!(
        task_id = %m.task_id,
        workspace = %m.workspace,
        scheduled_time = %occurrence_key(m.scheduled_time),
        reason = m.reason,
        "an occurrence was missed"
    );
}

/// Gives a task that fires but has no `due` (written before the check
/// existed, or by a path that does not set one) its first `due` from
/// `now`: the daily pass calls it for every task it reads.
pub async fn adopt<S: DueIndex>(store: &S, task: &Task, now: DateTime<Utc>) -> Result<bool, StoreError> {
    if task.due.is_some() || !task.should_fire() {
        return Ok(false);
    }
    match overdue::first_due(task, now) {
        Some(due) => store.move_due(task, Some(due)).await,
        None => Ok(false),
    }
}
