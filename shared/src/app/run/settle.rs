//! Step 6 and the records of the steps before it: the settle of a claimed
//! occurrence (or its release), a skip that held no claim, a malformed
//! message. Every run record is made by `RunRecord::new`.

use chrono::{DateTime, Utc};

use super::claim::Claimed;
use super::clock::RunClock;
use super::{Disposition, RunError, Runner};
use crate::domain::run::agent_loop::{Parked, Requeue};
use crate::domain::run::door::SkipReason;
use crate::domain::run::journal::JournaledOutcome;
use crate::domain::run::occurrence::{Delivery, Outcome, RunRecord, cap_reason, claim_retention, prunable};
use crate::domain::run::settlement;
use crate::domain::task::budget;
use crate::domain::task::claim::RunStatus;
use crate::domain::task::install::Install;
use crate::domain::task::{Provenance, Task};
use crate::ports::{Connectors, Model, Park, Release, RunStore, Settled, Settlement, StoreError, Unclaimed};

/// A settle is not tried again when its next try could not begin this long
/// before the invocation's deadline: the batch's returns (a
/// `ChangeMessageVisibility` each), its traces' flush and its answer must
/// still fit, or Lambda's timeout would hand back the whole batch. The run
/// keeps `SETTLE_RESERVE_SECONDS` (10) for its settle, so a settle failing
/// for now is tried for about seven seconds.
const SETTLE_GIVE_UP_MARGIN: i64 = 3;

/// The account a run is charged to: one per install, a principal's for a
/// reminder.
fn account_of(task: &Task, install: Option<&Install>) -> Option<budget::Account> {
    match (&task.provenance, install) {
        (Provenance::User { principal }, _) => Some(budget::account_of_principal(&task.workspace, principal)),
        (Provenance::Connector { .. }, Some(install)) => Some(budget::Account::Install(install.account.clone())),
        (Provenance::Connector { .. }, None) => None,
    }
}

/// `record` with its outcome alone, for a settle the store refused: failed
/// (a skip stays a skip), no output, the reason saying why and what it was.
fn outcome_alone(record: &RunRecord, error: &StoreError) -> RunRecord {
    let mut minimal = record.clone();
    if minimal.status != RunStatus::Skipped {
        minimal.status = RunStatus::Failed;
    }
    minimal.output = None;
    minimal.reason = Some(cap_reason(&format!(
        "the run's outcome could not be recorded ({}); was: {}",
        crate::error_chain(error),
        record.reason.as_deref().unwrap_or(record.status.as_str())
    )));
    minimal
}

/// A claimed occurrence given back (a release, or a park at a gated call)
/// after this attempt spent `spent`: its reservation returned, what its
/// attempts spent carried on the claim.
fn released<'a>(occ: &'a Delivery, claimed: &'a Claimed, spent: f64) -> Release<'a> {
    Release {
        task: &claimed.task,
        occurrence: &occ.key,
        execution_id: &occ.message.execution_id,
        period: &claimed.period,
        reserved_usd: budget::reservation(claimed.task.spec.budget) + claimed.crashed,
        carried_usd: spent + claimed.crashed,
        workspace_held_usd: claimed.workspace,
    }
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    /// Settles a claimed occurrence (`RunStore::settle`): its record, the
    /// claim finished, the budget settled, the account charged, fenced on
    /// the claim. The status recorded, or `None` when the claim was lost to
    /// a take-over (that execution records the outcome). A settle that
    /// keeps failing for now (colliding with other writes of the account,
    /// throttled) is sent again, the same transaction under its token,
    /// until the invocation's `deadline` ([`Self::settle_in_time`]), and
    /// its outcome is journaled at the first failure: the attempt after a
    /// deadline settles that outcome, so the run is never repeated to
    /// record it.
    pub(super) async fn settle(
        &self,
        occ: &Delivery,
        claimed: &Claimed,
        install: Option<&Install>,
        outcome: &Outcome,
        skip: Option<&SkipReason>,
        (clock, deadline): (&RunClock<'_>, DateTime<Utc>),
    ) -> Result<Option<RunStatus>, RunError> {
        let task = &claimed.task;
        let now = clock.handled_at();
        let finished_at = clock.now();
        let model_id = &self.settings.model_id;
        let record = RunRecord::new(
            occ,
            outcome,
            claimed.attempts,
            claimed.crashed,
            model_id,
            now,
            finished_at,
            self.settings.retention,
        );
        let account = account_of(task, install);
        let plan = settlement::plan(&settlement::Facts {
            task,
            scheduled: occ.scheduled,
            status: outcome.status,
            skip,
            crashed_usd: claimed.crashed,
            finished: finished_at,
            keep_claims: claim_retention(self.settings.catch_up),
            retention: self.settings.retention,
        });
        let settlement = Settlement {
            task,
            occurrence: &occ.key,
            execution_id: &occ.message.execution_id,
            period: &claimed.period,
            reserved_usd: budget::reservation(task.spec.budget) + claimed.crashed,
            account: account.as_ref().filter(|_| plan.charge_account),
            record: &record,
            workspace_held_usd: claimed.workspace,
            complete: plan.complete,
            prune: plan.prune,
        };
        let journaled = self.journaled(occ, outcome, now);
        let (settled, recorded) = match self.settle_in_time(&settlement, &journaled, clock, deadline).await {
            Ok(settled) => (settled, outcome.status),
            Err(error @ StoreError::Rejected { .. }) => self.settle_outcome_alone(&settlement, &error).await?,
            Err(error) => return Err(error.into()),
        };
        if settled == Settled::LostClaim {
            tracing::warn!("the claim was taken over before this run settled; its outcome is not recorded");
            return Ok(None);
        }
        tracing::info!(
            status = recorded.as_str(),
            cost_usd = outcome.cost,
            "occurrence settled"
        );
        Ok(Some(recorded))
    }

    /// The outcome as the journal keeps it should the settle fail.
    fn journaled(&self, occ: &Delivery, outcome: &Outcome, now: DateTime<Utc>) -> JournaledOutcome {
        let ttl = crate::domain::run::journal::expiry(now, self.settings.approval_hours, self.settings.retention);
        JournaledOutcome::new(occ.task_id.as_str(), &occ.key, outcome, ttl)
    }

    /// `RunStore::settle`, sent again after a failure that is not a
    /// refusal (the store's own retries spent) after the growing, jittered
    /// wait of a throttled model call (`backoff`), while the next try can begin before [`SETTLE_GIVE_UP_MARGIN`]
    /// of `deadline`; the same settlement, so the same client request
    /// token: a try that committed unseen makes the next succeed without
    /// writing twice.
    async fn settle_in_time(
        &self,
        settlement: &Settlement<'_>,
        journaled: &JournaledOutcome,
        clock: &RunClock<'_>,
        deadline: DateTime<Utc>,
    ) -> Result<Settled, StoreError> {
        let mut attempt = 0;
        loop {
            match self.store.settle(settlement).await {
                Err(error @ StoreError::Request { .. }) => {
                    if attempt == 0 {
                        // Should the time run out before a try gets
                        // through, the next attempt settles this outcome
                        // instead of running again.
                        if let Err(e) = self.store.journal_outcome(journaled).await {
                            tracing::warn!(error = %crate::error_chain(&e), "the outcome being settled could not be journaled");
                        }
                    }
                    let wait = super::backoff(attempt);
                    attempt += 1;
                    let next = clock.now() + chrono::Duration::from_std(wait).unwrap_or_default();
                    if next + chrono::Duration::seconds(SETTLE_GIVE_UP_MARGIN) >= deadline {
                        return Err(error);
                    }
                    tracing::warn!(error = %crate::error_chain(&error), attempt, wait_ms = wait.as_millis() as u64, "the settle failed for now; sending it again");
                    tokio::time::sleep(wait).await;
                }
                answered => return answered,
            }
        }
    }

    /// The settle once more with the outcome alone ([`outcome_alone`]),
    /// after the store refused it as invalid: that would fail the same way
    /// on every redelivery, and a claim must not stay running nor a
    /// reservation held because a record could not be written. (A failure
    /// for now is sent again in time, [`Self::settle_in_time`]; past the
    /// deadline the message goes back: a take-over later.)
    async fn settle_outcome_alone(
        &self,
        settlement: &Settlement<'_>,
        error: &StoreError,
    ) -> Result<(Settled, RunStatus), StoreError> {
        tracing::error!(error = %crate::error_chain(error), "the settle failed; recording the outcome without its content");
        let minimal = outcome_alone(settlement.record, error);
        let fallback = Settlement {
            record: &minimal,
            ..settlement.clone()
        };
        Ok((self.store.settle(&fallback).await?, minimal.status))
    }

    /// Releases the claim and the reservation (`RunStore::release`) so the
    /// message can come back and run as if it never had: what crashed
    /// attempts reserved and this one spent stays committed, carried by the
    /// released claim into the occurrence's one record and its settle's
    /// charge to the account (`domain::task::claim::Claim::committed`).
    pub(super) async fn release(
        &self,
        occ: &Delivery,
        claimed: &Claimed,
        requeue: Requeue,
    ) -> Result<Disposition, RunError> {
        let release = released(occ, claimed, requeue.cost);
        match self.store.release(&release).await? {
            Settled::LostClaim => {
                tracing::warn!("the claim was taken over before this run was released");
                return Ok(Disposition::Duplicate);
            }
            Settled::ClaimGone => {
                tracing::warn!("the claim was already released; the occurrence has not run and comes back");
            }
            Settled::Done => {}
        }
        match requeue.room_at {
            Some(room_at) => {
                tracing::info!(turns = requeue.usage.turns, room_at = %room_at,
                    "the model pace has no slot for this run in its time; returned to the queue until it has room");
                Ok(Disposition::Paced(room_at))
            }
            None => {
                tracing::warn!(
                    turns = requeue.usage.turns,
                    "the model stayed throttled before any tool call; returned to the queue"
                );
                Ok(Disposition::ReturnToQueue)
            }
        }
    }

    /// A run stopped at a gated call (`RunStore::park`): the occurrence's
    /// record says `awaiting_approval` with the request's id and what the
    /// run spent, the claim waits carrying it (as a released one does, the
    /// account charged at the occurrence's one settle or its denial), and
    /// the request is put: its insert is the `Tool call awaiting approval`
    /// event. The message is acknowledged; an approval sends it again.
    pub(super) async fn park(
        &self,
        occ: &Delivery,
        claimed: &Claimed,
        parked: Parked,
        clock: &RunClock<'_>,
    ) -> Result<Disposition, RunError> {
        let now = clock.handled_at();
        let outcome = Outcome {
            status: RunStatus::AwaitingApproval,
            reason: Some(cap_reason(&format!(
                "awaiting approval of `{}` on {}",
                parked.approval.tool, parked.approval.server
            ))),
            usage: parked.usage,
            output: None,
            cost: parked.cost,
            notes: Vec::new(),
        };
        let mut record = RunRecord::new(
            occ,
            &outcome,
            claimed.attempts,
            claimed.crashed,
            &self.settings.model_id,
            now,
            clock.now(),
            self.settings.retention,
        );
        record.request_id = Some(parked.approval.request_id.clone());
        let park = Park {
            release: released(occ, claimed, parked.cost),
            record: &record,
            approval: &parked.approval,
            prune: prunable(
                &claimed.task,
                &occ.key,
                clock.now(),
                claim_retention(self.settings.catch_up),
            ),
        };
        match self.store.park(&park).await? {
            Settled::Done => {
                tracing::info!(request_id = %parked.approval.request_id, "the occurrence waits for an approval");
                Ok(Disposition::AwaitingApproval)
            }
            Settled::LostClaim | Settled::ClaimGone => {
                tracing::warn!("the claim was taken over before this run could wait for its approval");
                Ok(Disposition::Duplicate)
            }
        }
    }

    /// Records a skip that holds no claim (`RunStore::record_unclaimed`):
    /// at the first door (`attempts` 0), or for a claim refused as missing
    /// or over budget (1), with the task when the claim's refusal returned it.
    pub(super) async fn skip_unclaimed(
        &self,
        occ: &Delivery,
        reason: SkipReason,
        now: DateTime<Utc>,
        attempts: u32,
        task: Option<&Task>,
    ) -> Result<Disposition, RunError> {
        let kept = Kept {
            retention: self.settings.retention,
            claims: claim_retention(self.settings.catch_up),
        };
        let skip = record_skip(&self.store, occ, &reason, attempts, now, kept, task).await?;
        if skip == Skip::HeldElsewhere {
            // Its run records the outcome; should it have died, this
            // delivery comes back after the lease and pays for its claim.
            tracing::info!(
                reason = reason.code(),
                "a skip finds the occurrence claimed under a live lease; retry later"
            );
            return Ok(Disposition::Busy);
        }
        tracing::info!(reason = reason.code(), "skipped at the door");
        Ok(Disposition::Skipped(reason))
    }

    /// Keeps a message that is no run message (`RunStore::record_malformed`)
    /// and acknowledges it.
    pub(super) async fn record_malformed(
        &self,
        message_id: &str,
        body: &str,
        reason: String,
        now: DateTime<Utc>,
    ) -> Result<Disposition, RunError> {
        self.store.record_malformed(message_id, body, &reason, now).await?;
        tracing::warn!(reason = %reason, "malformed message recorded and acknowledged");
        Ok(Disposition::Malformed(reason))
    }
}

/// What a skip came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Recorded (and paid for a dead claim), or already recorded.
    Recorded,
    /// Another execution holds the occurrence under a live lease: nothing
    /// recorded (`Unclaimed::Live`).
    HeldElsewhere,
}

/// How long what a skip writes is kept: its record (`RETENTION_DAYS`) and
/// the dead claims beside it (`occurrence::claim_retention`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kept {
    pub retention: chrono::Duration,
    pub claims: chrono::Duration,
}

/// Records a skip that holds no claim (`RunStore::record_unclaimed`) and,
/// when it finishes the reminder (SPEC §3: a one-time reminder's
/// occurrence, or a recurring one's last before its `until`), completes it
/// if this is still its schedule, as `settlement::completion` decides for
/// a settle. The one way a skip is recorded: at the runner's door and by
/// the missed-occurrence check alike. `task` is the task as the caller
/// read it; without one (the first door reads nothing) the skip reads it
/// (`RunStore::current_task`): its write prunes the task's dead claims
/// (`occurrence::prunable`), so a task whose every occurrence is skipped
/// keeps its window's claims and no more, and a skip that finishes a
/// reminder completes it from it.
pub(crate) async fn record_skip<S: RunStore>(
    store: &S,
    occ: &Delivery,
    reason: &SkipReason,
    attempts: u32,
    now: DateTime<Utc>,
    kept: Kept,
    task: Option<&Task>,
) -> Result<Skip, crate::ports::StoreError> {
    let skipped = Outcome::skipped(reason.describe());
    // A skip names no model. A resume's skip names its request: it ends the
    // occurrence that awaits it (`RunStore::record_unclaimed`).
    let mut record = RunRecord::new(occ, &skipped, attempts, 0.0, "", now, now, kept.retention);
    record.request_id = occ.message.resume.clone();
    let read;
    let task = match task {
        Some(task) => Some(task),
        None => {
            read = store.current_task(&occ.message.workspace, &occ.task_id).await?;
            read.as_ref()
        }
    };
    let prune = task.map_or_else(Vec::new, |task| prunable(task, &occ.key, now, kept.claims));
    let held = match store.record_unclaimed(&record, &prune).await? {
        Unclaimed::Done => None,
        Unclaimed::Live => return Ok(Skip::HeldElsewhere),
        Unclaimed::Dead(held) => {
            pay_dead_claim(store, occ, &skipped, &held, now, kept).await?;
            Some(held)
        }
    };
    if !(reason.completes_one_time() && occ.task_id.is_reminder()) {
        return Ok(Skip::Recorded);
    }
    let Some(task) = task.or(held.as_deref()) else {
        return Ok(Skip::Recorded);
    };
    let completion = settlement::completion(
        task,
        occ.scheduled,
        RunStatus::Skipped,
        Some(reason),
        now,
        kept.retention,
    );
    if let Some(completion) = completion {
        store
            .complete_unclaimed(
                &occ.message.workspace,
                &occ.task_id,
                &occ.message.execution_id,
                &completion,
                now,
            )
            .await?;
    }
    Ok(Skip::Recorded)
}

/// A skip over a claim no execution holds (a crash, a release): its record
/// carries what the claim committed (`Claim::committed`) as its cost, and
/// the account is charged it, so a crash or a release that is never run
/// again is paid for, never left behind in the period budget unrecorded.
async fn pay_dead_claim<S: RunStore>(
    store: &S,
    occ: &Delivery,
    skipped: &Outcome,
    held: &Task,
    now: DateTime<Utc>,
    kept: Kept,
) -> Result<(), StoreError> {
    let Some(dead) = held.claims.get(&occ.key) else {
        return Ok(());
    };
    let committed = dead.committed(budget::reservation(held.spec.budget));
    let mut record = RunRecord::new(occ, skipped, dead.attempts, committed, "", now, now, kept.retention);
    record.request_id = occ.message.resume.clone();
    let install = match &held.provenance {
        Provenance::Connector { install_id, .. } if committed > 0.0 => {
            store.install(&held.workspace, install_id).await?
        }
        _ => None,
    };
    let account = account_of(held, install.as_ref()).filter(|_| committed > 0.0);
    tracing::warn!(
        committed_usd = committed,
        status = dead.status.as_str(),
        "a skip pays for a claim no execution holds"
    );
    store
        .record_over_dead(
            &record,
            dead,
            account.as_ref(),
            &budget::period(occ.scheduled),
            &prunable(held, &occ.key, now, kept.claims),
        )
        .await
}
