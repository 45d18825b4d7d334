//! Step 2, the claim, and the install read of step 3.

use chrono::{DateTime, Duration, Utc};

use super::{Disposition, LEASE_MARGIN_SECONDS, RunError, Runner};
use crate::domain::run::door::{SkipReason, TaskFacts, Verdict, verdict};
use crate::domain::run::occurrence::{ClaimOutcome, Delivery, claim_retention, diagnose};
use crate::domain::task::budget::{self, BudgetLevel};
use crate::domain::task::claim::{Claim, RunStatus};
use crate::domain::task::install::Install;
use crate::domain::task::{Provenance, Task};
use crate::ports::{ClaimAnswer, ClaimRequest, Connectors, Model, RunStore, StoreError, TakeOver};

/// An occurrence this execution holds the claim of.
pub(super) struct Claimed {
    /// The task as the claim returned it.
    pub task: Box<Task>,
    /// The budget period the claim reserved in (`budget::period`).
    pub period: String,
    /// This attempt's number, counting taken-over ones.
    pub attempts: u32,
    /// What earlier attempts of this occurrence committed (crashed ones'
    /// reservations at take-over, released ones' spending): part of the
    /// record's cost and charged to the account with this attempt's.
    pub crashed: f64,
    /// What the occurrence holds of its workspace's month
    /// (`Claim::workspace_usd`).
    pub workspace: f64,
}

impl Claimed {
    fn of(task: Box<Task>, occurrence: &str, period: &str) -> Self {
        let claim = task.claims.get(occurrence);
        Self {
            attempts: claim.map_or(1, |c| c.attempts),
            crashed: claim.map_or(0.0, |c| c.crashed_usd),
            workspace: claim.map_or(0.0, |c| c.workspace_usd),
            period: period.to_owned(),
            task,
        }
    }
}

/// Whether `occ` is the resume of the request its occurrence's claim awaits.
fn resumes(task: Option<&Task>, occ: &Delivery) -> bool {
    let awaited = task
        .and_then(|t| t.claims.get(&occ.key))
        .and_then(|c| c.request_id.as_deref());
    awaited.is_some() && awaited == occ.message.resume.as_deref()
}

/// What the claim step came to.
pub(super) enum Claiming {
    /// This execution runs the occurrence.
    Held(Claimed),
    /// It does not: this is the delivery's answer (a skip already recorded).
    Answered(Disposition),
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    /// Claims the occurrence (`RunStore::claim`): a lease until `deadline`
    /// plus a margin, and the run's reservation on its task and its
    /// workspace's month, in one transaction.
    pub(super) async fn claim(
        &self,
        occ: &Delivery,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<Claiming, RunError> {
        let period = budget::period(occ.scheduled);
        let claim = Claim {
            status: RunStatus::Running,
            lease_until: (deadline + Duration::seconds(LEASE_MARGIN_SECONDS)).timestamp(),
            execution_id: occ.message.execution_id.clone(),
            attempts: 1,
            started_at: now,
            crashed_usd: 0.0,
            workspace_usd: 0.0,
            request_id: None,
        };
        let request = ClaimRequest {
            workspace: &occ.message.workspace,
            task_id: &occ.task_id,
            occurrence: &occ.key,
            period: &period,
            claim: &claim,
            now,
            person_cap_usd: self.settings.person_monthly_usd,
            resume: occ.message.resume.as_deref(),
            keep_claims: claim_retention(self.settings.catch_up),
        };
        let answer = match &occ.message.resume {
            Some(request_id) => match self.resumable(occ, request_id).await? {
                true => self.store.take_over(&request, TakeOver::Approved).await?,
                false => return Ok(Claiming::Answered(Disposition::Duplicate)),
            },
            None => self.store.claim(&request).await?,
        };
        match answer {
            ClaimAnswer::Claimed(task) => Ok(Claiming::Held(Claimed::of(task, &occ.key, &period))),
            ClaimAnswer::Refused(old) => self.refused(occ, &request, old, now).await,
            ClaimAnswer::BudgetReached(task, level, limit) => {
                self.budget_reached(occ, &task, (level, limit), now).await
            }
        }
    }

    /// Whether a resume message may take its occurrence over: its request
    /// is of this occurrence's run and approved (used already, it is the
    /// resumed run's redelivery after a crash or a release, which the
    /// take-over's refusal diagnoses). Anything else claims nothing: a
    /// resume never starts an occurrence of its own.
    async fn resumable(&self, occ: &Delivery, request_id: &str) -> Result<bool, RunError> {
        let run = crate::domain::run::occurrence::run_id(occ.task_id.as_str(), occ.scheduled);
        let requests = self
            .store
            .run_approvals(&occ.message.workspace, &run, Some(request_id))
            .await?;
        let approved = requests
            .iter()
            .any(|r| r.request_id == request_id && r.state == crate::domain::run::gate::ApprovalState::Approved);
        if !approved {
            tracing::warn!(
                request_id,
                "a resume without an approved request of this occurrence: nothing claimed"
            );
        }
        Ok(approved)
    }

    /// A claim or take-over its workspace's spent month refused: skipped
    /// (the door speaks first), paying what a dead claim committed; the
    /// month is marked reached, once, for its one event (SPEC §15). A mark
    /// that fails is logged: the next refused claim marks it.
    async fn budget_reached(
        &self,
        occ: &Delivery,
        task: &Task,
        (level, limit): (BudgetLevel, f64),
        now: DateTime<Utc>,
    ) -> Result<Claiming, RunError> {
        let reason = match self.over_budget(occ, Some(task), now).await? {
            SkipReason::BudgetExhausted => SkipReason::BudgetReached(level),
            door => door,
        };
        tracing::info!(
            reason = reason.code(),
            ?level,
            "a monthly budget above the task is reached"
        );
        let answered = self.skip_unclaimed(occ, reason, now, 1, Some(task)).await?;
        // A person's cap is the deployment's: the event is the workspace's.
        if level == BudgetLevel::Person {
            return Ok(Claiming::Answered(answered));
        }
        if let Err(e) = self
            .store
            .mark_budget_reached(&task.workspace, &budget::period(occ.scheduled), limit, now)
            .await
        {
            tracing::warn!(error = %crate::error_chain(&e), "the month's reached mark was not written; the next refused claim writes it");
        }
        Ok(Claiming::Answered(answered))
    }

    /// A refused claim, diagnosed from the task as it was: a duplicate, a
    /// live lease (retry later), an expired one or a released one (taken
    /// over with `RunStore::take_over`), no task, or no budget (skips
    /// recorded).
    async fn refused(
        &self,
        occ: &Delivery,
        request: &ClaimRequest<'_>,
        old: Option<Box<Task>>,
        now: DateTime<Utc>,
    ) -> Result<Claiming, RunError> {
        let answered = |disposition| -> Result<Claiming, RunError> { Ok(Claiming::Answered(disposition)) };
        match diagnose(old.as_deref(), &occ.key, now) {
            ClaimOutcome::Finished { status } => {
                tracing::info!(status = status.as_str(), "duplicate delivery of a finished occurrence");
                answered(Disposition::Duplicate)
            }
            // The resume of the request it awaits, refused by its budget:
            // skipped, paying what the waiting claim carries.
            ClaimOutcome::AwaitingApproval if resumes(old.as_deref(), occ) => {
                answered(self.skip_over_budget(occ, old.as_deref(), now).await?)
            }
            ClaimOutcome::AwaitingApproval => {
                tracing::info!("the occurrence waits for an approval; only its approval resumes it");
                answered(Disposition::Duplicate)
            }
            // A resume never starts or skips an occurrence of its own.
            ClaimOutcome::Missing | ClaimOutcome::BudgetExhausted if occ.message.resume.is_some() => {
                answered(Disposition::Duplicate)
            }
            ClaimOutcome::Busy { lease_until } => {
                tracing::info!(lease_until, "occurrence is running elsewhere; retry later");
                answered(Disposition::Busy)
            }
            ClaimOutcome::Expired => self.take_over(occ, request, TakeOver::Crashed, now).await,
            ClaimOutcome::Released => self.take_over(occ, request, TakeOver::Released, now).await,
            ClaimOutcome::Missing => answered(self.skip_unclaimed(occ, SkipReason::Missing, now, 1, None).await?),
            ClaimOutcome::BudgetExhausted => answered(self.skip_over_budget(occ, old.as_deref(), now).await?),
        }
    }

    /// A take-over of a crashed attempt's expired lease or of an occurrence
    /// given back, with what it carries. Still as it was, its reservation
    /// does not fit the budget: skipped, paying what the old claim
    /// committed. Taken by another delivery meanwhile: as busy, diagnosed
    /// again later.
    async fn take_over(
        &self,
        occ: &Delivery,
        request: &ClaimRequest<'_>,
        from: TakeOver,
        now: DateTime<Utc>,
    ) -> Result<Claiming, RunError> {
        let as_was = match from {
            TakeOver::Crashed => ClaimOutcome::Expired,
            TakeOver::Released | TakeOver::Approved => ClaimOutcome::Released,
        };
        match self.store.take_over(request, from).await? {
            ClaimAnswer::Claimed(task) => {
                match from {
                    TakeOver::Crashed => tracing::warn!("took over an expired lease"),
                    _ => tracing::info!("claimed an occurrence given back before, with what it carries"),
                }
                Ok(Claiming::Held(Claimed::of(task, &occ.key, request.period)))
            }
            ClaimAnswer::Refused(old) if diagnose(old.as_deref(), &occ.key, now) == as_was => Ok(Claiming::Answered(
                self.skip_over_budget(occ, old.as_deref(), now).await?,
            )),
            ClaimAnswer::Refused(_) => Ok(Claiming::Answered(Disposition::Busy)),
            ClaimAnswer::BudgetReached(task, level, limit) => {
                self.budget_reached(occ, &task, (level, limit), now).await
            }
        }
    }

    /// An occurrence skipped for its budget (`over_budget` says which),
    /// paying what the claim it holds carries.
    async fn skip_over_budget(
        &self,
        occ: &Delivery,
        old: Option<&Task>,
        now: DateTime<Utc>,
    ) -> Result<Disposition, RunError> {
        let reason = self.over_budget(occ, old, now).await?;
        self.skip_unclaimed(occ, reason, now, 1, old).await
    }

    /// Why a claim refused for its budget is skipped: the door speaks first
    /// (a paused task is skipped as paused), after the install read.
    async fn over_budget(
        &self,
        occ: &Delivery,
        old: Option<&Task>,
        now: DateTime<Utc>,
    ) -> Result<SkipReason, RunError> {
        let Some(old) = old else {
            return Ok(SkipReason::Missing);
        };
        let install = self.install_of(old).await?;
        let task = TaskFacts::Present {
            task: old,
            install: install.as_ref(),
        };
        Ok(match verdict(&self.facts(occ, now, task)) {
            Verdict::Skip(reason) => reason,
            Verdict::Run => SkipReason::BudgetExhausted,
        })
    }

    /// The install of a connector task (`RunStore::install`); a reminder has none.
    pub(super) async fn install_of(&self, task: &Task) -> Result<Option<Install>, StoreError> {
        match &task.provenance {
            Provenance::Connector { install_id, .. } => self.store.install(&task.workspace, install_id).await,
            Provenance::User { .. } => Ok(None),
        }
    }
}
