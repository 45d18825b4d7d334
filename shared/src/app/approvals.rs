//! Gated tool calls' requests after the run (SPEC §15, `domain::run::gate`):
//! an admin lists and decides them (`app::admin`), the periodic check
//! expires the lapsed ones (`app::reconcile`, with the missed-occurrence
//! check). An approval resumes the occurrence with a message
//! ([`resume_message`]); a denial or an expiry ends it skipped, paying what
//! its run spent ([`end_occurrence`]).
//!
//! Invariants: every decision is fenced on the request's version and on its
//! occurrence still awaiting; an occurrence ends once, whichever of a
//! denial, an expiry or its resumed run comes first.

use std::time::Instant;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::domain::run::door::SkipReason;
use crate::domain::run::gate::{self, ApprovalState, CallApproval};
use crate::domain::run::occurrence::{Delivery, Outcome, RunMessage, RunRecord, claim_retention, prunable};
use crate::domain::task::budget::{self, Account};
use crate::domain::task::claim::RunStatus;
use crate::domain::task::{Provenance, Task, TaskId};
use crate::ports::{CallApprovals, EndAwaiting, StoreError, TaskCatalog, TaskStore};

/// A request as `approvals`, `approve_call` and `deny_call` show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalView {
    pub request_id: String,
    pub task_id: String,
    pub run_id: String,
    /// The install the call goes to (two installs of one server are two
    /// targets); absent on a request an earlier release put.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub install: String,
    pub server: String,
    pub tool: String,
    /// The exact arguments, as JSON.
    pub arguments: serde_json::Value,
    pub arguments_sha256: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// `open`, `approved`, `denied` or `expired` (an open request past its
    /// expiry reads as expired).
    pub state: ApprovalState,
    pub version: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When the approved call was made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_at: Option<DateTime<Utc>>,
}

pub fn view(approval: &CallApproval, now: DateTime<Utc>) -> ApprovalView {
    let arguments = serde_json::from_str(&approval.arguments)
        .unwrap_or_else(|_| serde_json::Value::String(approval.arguments.clone()));
    ApprovalView {
        request_id: approval.request_id.clone(),
        task_id: approval.task_id.clone(),
        run_id: approval.run_id.clone(),
        install: approval.install.clone(),
        server: approval.server.clone(),
        tool: approval.tool.clone(),
        arguments,
        arguments_sha256: approval.arguments_sha256.clone(),
        requested_at: approval.requested_at,
        expires_at: approval.expires_at,
        state: if approval.lapsed(now) {
            ApprovalState::Expired
        } else {
            approval.state
        },
        version: approval.version,
        decided_by: approval.decided_by.clone(),
        decided_at: approval.decided_at,
        note: approval.note.clone(),
        used_at: approval.used_at,
    }
}

/// The runs-queue message an approval sends: the occurrence's own, marked
/// as the resume of `approval` (the door gives it the request's time; the
/// claim takes over only an occurrence awaiting an approved request).
pub fn resume_message(approval: &CallApproval) -> RunMessage {
    RunMessage {
        task_id: approval.task_id.clone(),
        workspace: approval.workspace.clone(),
        scheduled_time: approval.scheduled_time.clone(),
        execution_id: format!("approval-{}", approval.request_id),
        attempt: "1".to_owned(),
        resume: Some(approval.request_id.clone()),
    }
}

/// Why an occurrence's end was not written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotEnded {
    /// The request moved since it was read: its version now.
    VersionMoved(u64),
    /// The occurrence no longer waits (its resumed run took it, or it ended).
    NotAwaiting,
}

/// Ends the occurrence `decided` (denied or expired, from `expected`) held:
/// skipped `denied` or `expired`, its record paying what the claim
/// committed, the account charged, the request decided, in one transaction.
/// The claim is the one awaiting the request or, for an expiry, a resumed
/// run's claim that carries it and no execution holds (a crash, or a
/// release whose message was lost): fenced on it as read.
pub async fn end_occurrence<S: TaskStore + TaskCatalog + CallApprovals>(
    store: &S,
    decided: &CallApproval,
    expected: u64,
    now: DateTime<Utc>,
    retention: Duration,
) -> Result<Result<(), NotEnded>, StoreError> {
    let reason = match decided.state {
        ApprovalState::Expired => SkipReason::Expired,
        _ => SkipReason::Denied,
    };
    let Some(task_id) = TaskId::parse(&decided.task_id) else {
        return Ok(Err(NotEnded::NotAwaiting));
    };
    let Some(task) = store.task(&decided.workspace, &task_id).await? else {
        return Ok(Err(NotEnded::NotAwaiting));
    };
    let expiry = decided.state == ApprovalState::Expired;
    let Some(claim) = task
        .claims
        .get(&decided.scheduled_time)
        .filter(|c| {
            c.request_id.as_deref() == Some(&decided.request_id)
                && (c.status == RunStatus::AwaitingApproval || (expiry && c.is_dead(now.timestamp())))
        })
        .cloned()
    else {
        return Ok(Err(NotEnded::NotAwaiting));
    };
    let Some(delivery) = delivery_of(decided) else {
        return Ok(Err(NotEnded::NotAwaiting));
    };
    let mut record = RunRecord::new(
        &delivery,
        &Outcome::skipped(reason.describe()),
        claim.attempts,
        claim.committed(budget::reservation(task.spec.budget)),
        "",
        claim.started_at,
        now,
        retention,
    );
    record.request_id = Some(decided.request_id.clone());
    let account = account_of(store, &task).await?;
    let period = budget::period(delivery.scheduled);
    let ended = EndAwaiting {
        approval: decided,
        task: &task,
        record: &record,
        claim: &claim,
        account: account.as_ref(),
        period: &period,
        // This function knows no catch-up window: the widest one keeps
        // every claim a runner's would, and the runner's writes prune the rest.
        prune: prunable(
            &task,
            &decided.scheduled_time,
            now,
            claim_retention(Duration::seconds(crate::config::MAX_CATCH_UP_SECONDS)),
        ),
    };
    if store.end_awaiting(&ended, expected).await? {
        tracing::info!(request_id = %decided.request_id, reason = reason.code(), "an occurrence awaiting approval ended");
        return Ok(Ok(()));
    }
    Ok(Err(
        match store.approval(&decided.workspace, &decided.request_id).await? {
            Some(now) if now.version != expected => NotEnded::VersionMoved(now.version),
            _ => NotEnded::NotAwaiting,
        },
    ))
}

/// The occurrence a request names, as a delivery of it.
fn delivery_of(approval: &CallApproval) -> Option<Delivery> {
    let body = serde_json::to_string(&resume_message(approval)).ok()?;
    RunMessage::parse(&body).ok()
}

/// The account the occurrence's run was charged to (`app::run::settle`'s rule).
async fn account_of<S: TaskCatalog>(store: &S, task: &Task) -> Result<Option<Account>, StoreError> {
    Ok(match &task.provenance {
        Provenance::User { principal } => Some(budget::account_of_principal(&task.workspace, principal)),
        Provenance::Connector { install_id, .. } => store
            .install(&task.workspace, install_id)
            .await?
            .map(|install| Account::Install(install.account)),
    })
}

/// The lapsed requests one page reads.
pub const EXPIRE_PER_PAGE: usize = 100;
/// The most rounds one check reads: each round reads a page of every
/// expiry partition that has more, so a partition of requests it must
/// leave (a resumed run under way) never holds back the others.
pub const EXPIRE_PAGES: usize = 20;

/// What one check's expiry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expiry {
    /// Occurrences ended `expired`.
    pub ended: usize,
    /// Seconds since the oldest request still lapsed after the check
    /// expired (0: none): `ApprovalsLapsedBacklog`.
    pub backlog_seconds: i64,
}

/// The expiry partitions: the last release's one (`None`), then each shard.
fn expiry_partitions() -> impl Iterator<Item = Option<u8>> {
    std::iter::once(None).chain((0..gate::EXPIRY_SHARDS).map(Some))
}

/// Ends the occurrences whose requests lapsed before `now` (open past
/// their expiry, or approved and never resumed by then), a page of each
/// expiry partition a round until every partition is read or `deadline`
/// passes: a request it must leave (its resumed run under way under a
/// live lease) or cannot end (logged) never holds back the ones after it,
/// nor a partition the others. A request whose occurrence no longer waits
/// for it closes alone. The answer says how many ended and how old the
/// oldest request left lapsed is, which the next period goes on with.
pub async fn expire_lapsed<S: TaskStore + TaskCatalog + CallApprovals>(
    store: &S,
    now: DateTime<Utc>,
    retention: Duration,
    deadline: Instant,
) -> Result<Expiry, StoreError> {
    let mut ended = 0;
    // Each partition with more to read, after the request its last page ended at.
    let mut open: Vec<(Option<u8>, Option<CallApproval>)> = expiry_partitions().map(|p| (p, None)).collect();
    for _ in 0..EXPIRE_PAGES {
        let mut more = Vec::new();
        for (partition, after) in open {
            if Instant::now() >= deadline {
                break;
            }
            let page = match store
                .lapsed_approvals(partition, now, after.as_ref(), EXPIRE_PER_PAGE)
                .await
            {
                Ok(page) => page,
                Err(error) => {
                    tracing::warn!(
                        shard = ?partition,
                        error = %crate::error_chain(&error),
                        "an expiry partition was not read; the next check tries again"
                    );
                    continue;
                }
            };
            let full = page.len() == EXPIRE_PER_PAGE;
            let mut last = None;
            for lapsed in page {
                if Instant::now() >= deadline {
                    break;
                }
                match expire_one(store, &lapsed, now, retention).await {
                    Ok(true) => ended += 1,
                    Ok(false) => {}
                    Err(error) => tracing::warn!(
                        request_id = %lapsed.request_id,
                        error = %crate::error_chain(&error),
                        "a lapsed request could not be ended; the next check tries again"
                    ),
                }
                last = Some(lapsed);
            }
            if full {
                more.push((partition, last));
            }
        }
        open = more;
        if open.is_empty() || Instant::now() >= deadline {
            break;
        }
    }
    let mut oldest: Option<DateTime<Utc>> = None;
    for partition in expiry_partitions() {
        if let Some(left) = store.lapsed_approvals(partition, now, None, 1).await?.first() {
            oldest = Some(oldest.map_or(left.expires_at, |o| o.min(left.expires_at)));
        }
    }
    let backlog_seconds = oldest.map_or(0, |left| (now - left).num_seconds().max(0));
    Ok(Expiry { ended, backlog_seconds })
}

/// One lapsed request: its occurrence ended `expired`, or the request
/// closed alone when its occurrence no longer waits for it.
async fn expire_one<S: TaskStore + TaskCatalog + CallApprovals>(
    store: &S,
    lapsed: &CallApproval,
    now: DateTime<Utc>,
    retention: Duration,
) -> Result<bool, StoreError> {
    let expired = lapsed.expire(now);
    match end_occurrence(store, &expired, lapsed.version, now, retention).await? {
        Ok(()) => Ok(true),
        Err(NotEnded::VersionMoved(_)) => Ok(false),
        Err(NotEnded::NotAwaiting) => {
            if resumed_run_under_way(store, lapsed).await? {
                return Ok(false);
            }
            store.close_request(&expired, lapsed.version).await?;
            Ok(false)
        }
    }
}

/// Whether the run an approval resumed still holds its occurrence under a
/// live lease (a dead one is ended by [`end_occurrence`]).
async fn resumed_run_under_way<S: TaskStore>(store: &S, approval: &CallApproval) -> Result<bool, StoreError> {
    let Some(task_id) = TaskId::parse(&approval.task_id) else {
        return Ok(false);
    };
    let task = store.task(&approval.workspace, &task_id).await?;
    Ok(task
        .as_ref()
        .and_then(|t| t.claims.get(&approval.scheduled_time))
        .is_some_and(|c| c.request_id.as_deref() == Some(&approval.request_id) && c.status == RunStatus::Running))
}
