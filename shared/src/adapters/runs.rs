//! The runner's store on the same table: occurrence claims on task items,
//! the run ledger, budget settlement and account charges.
//!
//! The claim (and a take-over) reads the task, then is one transaction: on
//! the task item it sets `claims.<occurrence>` (absent before, or the claim
//! as read), fenced on the version read, and adds the task's per-run
//! reserve to `budget_used.<period>` when that still fits
//! `budget_threshold_usd`; on the workspace's budget item
//! (`adapters::budgets`) it adds the same reserve to the month while the
//! month is below its limit. Claimed, the task is the one read with the
//! claim applied; refused on the task, the task as it was (`ALL_OLD`) so
//! the use case can tell why; refused on the workspace,
//! `ClaimAnswer::BudgetReached`. The settle is one transaction:
//! the run record, the claim finished (fenced on the execution id), the budget
//! settled, the account charged. DynamoDB cancels a transaction that
//! collides with another write of one of its items (two tasks of one
//! account settling at once), so the settle retries such a cancellation and
//! throttling a few times, under one client request token (a retry of a
//! transaction that did commit then succeeds without writing twice). Its
//! steps: `settle_items` builds the transaction (`run_record_put`,
//! `claim_settled`, `account_charge`), `transact` sends it with those
//! retries; the outcome-alone fallback after they fail is the use case's
//! (`app::run`), which settles again with a smaller record. A one-time
//! task completes only if it is not tombstoned: a task deleted while its
//! last run ran fails that condition, the cancellation's old item
//! (`ALL_OLD`) tells it from a lost fence, and the settle is sent once more
//! without the completion, so the stored `state` stays `deleted`. The
//! run record it writes is also the
//! notification's outbox: the table's stream carries it to the event bus
//! (`domain::run::notification`), so the runner sends no event itself.

use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Duration, Utc};

use super::budgets::Fit;
use super::dynamo::{Cancellation, DynamoStore, Item, put_if_absent, read_item, request_error, to_item};
use super::keys::{GSI3PK, GSI3SK, Key, PK, SK};
use crate::domain::run::gate::CallApproval;
use crate::domain::run::journal::{Journal, JournaledCall, JournaledOutcome};
use crate::domain::run::occurrence::{self, RunRecord, cap_output, occurrence_key};
use crate::domain::run::pace::Slots;
use crate::domain::run::settlement::Completion;
use crate::domain::task::budget::BudgetLevel;
use crate::domain::task::claim::{Claim, RunStatus};
use crate::domain::task::install::Install;
use crate::domain::task::{Provenance, Task, budget};
use crate::ports::{
    ClaimAnswer, ClaimRequest, PaceAnswer, Park, Release, RunStore, Settled, Settlement, StoreError, TakeOver,
    Unclaimed,
};

/// Malformed messages are kept this long.
const MALFORMED_DAYS: i64 = 14;
/// Settle attempts before the message goes back (backoff 100 ms to 800 ms).
const SETTLE_ATTEMPTS: u32 = 4;

/// The settle's client request token: the same for every attempt of one
/// execution's settle of one occurrence (at most 36 characters).
/// A fallback settle (the outcome without its output) gets its own token,
/// and so does a settle sent again without the completion.
fn settle_token(settlement: &Settlement<'_>) -> String {
    let variant = format!(
        "{} {} {} {}",
        settlement.execution_id,
        settlement.record.status.as_str(),
        settlement.record.output.is_some(),
        settlement.complete.is_some()
    );
    settle_token_of(settlement.task.task_id.as_str(), settlement.occurrence, &variant)
}

fn settle_token_of(task_id: &str, occurrence: &str, execution_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{task_id}\n{occurrence}\n{execution_id}").as_bytes());
    hex::encode(digest)[..36].to_owned()
}

/// Whether a failed settle may be sent again as it is: the transaction was
/// cancelled by a collision or throttling, or is still in progress under
/// its token; never a failed condition or a malformed request.
fn retryable(code: Option<&str>, reasons: &[&str]) -> bool {
    match code {
        Some("TransactionCanceledException") => {
            reasons.iter().any(|r| {
                matches!(
                    *r,
                    "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
                )
            }) && reasons.iter().all(|r| {
                matches!(
                    *r,
                    "None" | "TransactionConflict" | "ThrottlingError" | "ProvisionedThroughputExceeded"
                )
            })
        }
        Some(
            "TransactionInProgressException"
            | "ThrottlingException"
            | "ProvisionedThroughputExceededException"
            | "RequestLimitExceeded"
            | "InternalServerError",
        ) => true,
        _ => false,
    }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// How a sent transaction ended, short of an error.
pub(crate) enum Sent {
    Done,
    /// The item at `fenced` failed its condition; the item as it was, when
    /// the request asked for it (`ALL_OLD`).
    Refused(Option<Item>),
    /// Another item failed its condition (a month above the task, reached):
    /// which, and the item as it was when the request asked for it.
    Declined(usize, Option<Item>),
}

/// Reads of a task a claim makes before it gives up on edits racing it.
const CLAIM_READS: usize = 3;

/// The claim a skip takes with its record: finished as the record says.
/// `set` (the update's `SET` clauses) with `remove` and the claims `prune`
/// (`occurrence::prunable`) removed beside them, each claim under a name of
/// its own (`#old<i>`): the update expression every claim write sends.
pub(crate) fn pruning(
    mut update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
    set: &str,
    remove: &[&str],
    prune: &[String],
) -> aws_sdk_dynamodb::types::builders::UpdateBuilder {
    let mut removals: Vec<String> = (0..prune.len()).map(|i| format!("claims.#old{i}")).collect();
    removals.extend(remove.iter().map(|r| (*r).to_owned()));
    for (i, occurrence) in prune.iter().enumerate() {
        update = update.expression_attribute_names(format!("#old{i}"), occurrence);
    }
    if removals.is_empty() {
        update.update_expression(set)
    } else {
        update.update_expression(format!("{set} REMOVE {}", removals.join(", ")))
    }
}

pub(crate) fn skip_claim(record: &RunRecord) -> Result<AttributeValue, StoreError> {
    let claim = Claim {
        status: record.status,
        lease_until: 0,
        execution_id: record.execution_id.clone().unwrap_or_default(),
        attempts: record.attempts,
        started_at: record.started_at,
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    serde_dynamo::to_attribute_value(&claim).map_err(|e| StoreError::Corrupt {
        what: "claim".into(),
        source: Box::new(e),
    })
}

fn task_from(item: Option<Item>) -> Result<Option<Box<Task>>, StoreError> {
    item.map(|item| read_item::<Task>(item, "task").map(Box::new))
        .transpose()
}

/// The schedule a completion was decided on, as a condition on the task
/// item with `placeholder` for its value: a one-time task's instant, or a
/// recurring one's whole schedule (its `until` and rule), which its owner
/// may have changed since.
fn schedule_fence(completion: &Completion, placeholder: &str) -> Result<(String, AttributeValue), StoreError> {
    let corrupt = |what: &str, e: serde_dynamo::Error| StoreError::Corrupt {
        what: what.into(),
        source: Box::new(e),
    };
    Ok(match &completion.schedule {
        None => (
            format!("spec.#schedule.#at = {placeholder}"),
            serde_dynamo::to_attribute_value(completion.at).map_err(|e| corrupt("instant", e))?,
        ),
        Some(schedule) => (
            format!("spec.#schedule = {placeholder}"),
            serde_dynamo::to_attribute_value(schedule).map_err(|e| corrupt("schedule", e))?,
        ),
    })
}

/// A settle that completes the task: fenced also on no tombstone and on
/// the schedule the plan completed (the owner may have moved it), it sets
/// `completed_at`, the state, a new version and, for a reminder, the expiry.
fn completing(
    mut update: aws_sdk_dynamodb::types::builders::UpdateBuilder,
    set: &mut Vec<String>,
    completion: &Completion,
    record: &RunRecord,
) -> Result<aws_sdk_dynamodb::types::builders::UpdateBuilder, StoreError> {
    // The tombstone is `override.deleted` (`domain::task::overrides`),
    // written true by the admin's delete and the owner's cancel, and
    // removed with the whole map when no override is left; the
    // instant (a recurring task's whole schedule) is the one the
    // owner may have moved meanwhile.
    let (fence, value) = schedule_fence(completion, ":at")?;
    update = update
        .condition_expression(format!(
            "claims.#occ.execution_id = :exec AND claims.#occ.#status = :running \
                 AND (attribute_not_exists(#override.deleted) OR #override.deleted = :kept) \
                 AND {fence}"
        ))
        .expression_attribute_names("#override", "override")
        .expression_attribute_names("#schedule", "schedule")
        .expression_attribute_values(":kept", AttributeValue::Bool(false))
        .expression_attribute_values(":at", value);
    if completion.schedule.is_none() {
        update = update.expression_attribute_names("#at", "at");
    }
    set.push("completed_at = :finished".into());
    set.push("#state = :completed".into());
    set.push("updated_at = :finished".into());
    set.push("version = version + :one".into());
    update = update
        .expression_attribute_names("#state", "state")
        .expression_attribute_values(":finished", s(&crate::domain::schedule::format_utc(record.finished_at)))
        .expression_attribute_values(":completed", s("completed"))
        .expression_attribute_values(":one", n(1));
    if let Some(ttl) = completion.expires {
        set.push("#ttl = :ttl".into());
        update = update
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":ttl", n(ttl));
    }
    Ok(update)
}

impl DynamoStore {
    /// An account's charge for a period: `spent_usd` grows by `usd`, and
    /// `runs` by one when a run is recorded.
    pub(crate) fn account_charge(
        &self,
        account: &crate::domain::task::budget::Account,
        period: &str,
        usd: f64,
        a_run: bool,
    ) -> Result<TransactWriteItem, StoreError> {
        // A month's charges are kept as long as its budget-reached mark: a
        // year past the month (`budgets::MONTH_KEPT_DAYS`), then TTL ends them.
        let month_start = chrono::NaiveDate::parse_from_str(&format!("{period}-01"), "%Y-%m-%d")
            .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc())
            .unwrap_or_else(|_| Utc::now());
        let expires = month_start + Duration::days(super::budgets::MONTH_KEPT_DAYS);
        let charge = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::account(account, period).to_map()))
            .update_expression(
                "SET entity = :entity, #ttl = if_not_exists(#ttl, :ttl) ADD spent_usd :actual, runs :runs",
            )
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":ttl", n(expires.timestamp()))
            .expression_attribute_values(":entity", s("account"))
            .expression_attribute_values(":actual", n(usd))
            .expression_attribute_values(":runs", n(u32::from(a_run)))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        Ok(TransactWriteItem::builder().update(charge).build())
    }

    /// Sends a transaction, retrying collisions and throttling under one
    /// client request token; the item at `fenced` carries the claim's fence.
    pub(crate) async fn transact(
        &self,
        items: Vec<TransactWriteItem>,
        token: String,
        fenced: usize,
    ) -> Result<Sent, StoreError> {
        let mut attempt = 0;
        loop {
            self.counted();
            let result = self
                .client()
                .transact_write_items()
                .set_transact_items(Some(items.clone()))
                .client_request_token(&token)
                .send()
                .await;
            let err = match result {
                Ok(_) => return Ok(Sent::Done),
                Err(err) => err,
            };
            let cancelled = Cancellation::of(&err);
            if cancelled.condition_failed(fenced) {
                return Ok(Sent::Refused(cancelled.take_item(fenced)));
            }
            if let Some(declined) = (0..items.len()).find(|i| cancelled.condition_failed(*i)) {
                return Ok(Sent::Declined(declined, cancelled.take_item(declined)));
            }
            let reasons = cancelled.codes();
            let code = err.as_service_error().and_then(|e| e.code());
            attempt += 1;
            if code == Some("ValidationException") || reasons.contains(&"ValidationError") {
                return Err(StoreError::Rejected {
                    operation: "TransactWriteItems",
                    source: Box::new(err),
                });
            }
            if attempt >= SETTLE_ATTEMPTS || !retryable(code, &reasons) {
                return Err(request_error("TransactWriteItems", err));
            }
            tracing::warn!(attempt, ?reasons, "a transaction collided with another write; retrying");
            tokio::time::sleep(std::time::Duration::from_millis(50 << attempt)).await;
        }
    }

    /// The settle's transaction: the run record, the claim finished and the
    /// budget settled on the task item, the account charged.
    fn settle_items(&self, settlement: &Settlement<'_>) -> Result<Vec<TransactWriteItem>, StoreError> {
        let mut items = vec![
            TransactWriteItem::builder()
                .put(self.run_record_put(settlement.record)?)
                .build(),
            TransactWriteItem::builder()
                .update(self.claim_settled(settlement)?)
                .build(),
        ];
        if let Some(account) = settlement.account {
            items.push(self.account_charge(account, settlement.period, settlement.record.cost_usd, true)?);
        }
        let workspace = settlement.record.cost_usd - settlement.workspace_held_usd;
        if workspace != 0.0 {
            items.push(self.workspace_hold(&settlement.task.workspace, settlement.period, workspace, Fit::Move)?);
        }
        if let Some(Completion {
            expires: Some(ttl),
            record: Some((workspace, principal, key)),
            ..
        }) = &settlement.complete
        {
            // The create's idempotency record expires with its reminder. No
            // condition: a record that is missing gets a stub that expires.
            let expire = Update::builder()
                .table_name(self.table())
                .set_key(Some(Key::idempotency(workspace, principal, key).to_map()))
                .update_expression("SET #ttl = :ttl")
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":ttl", n(*ttl))
                .build()
                .map_err(|e| request_error("TransactWriteItems", e))?;
            items.push(TransactWriteItem::builder().update(expire).build());
        }
        Ok(items)
    }

    /// The run record, written once, with the outcome.
    fn run_record_put(&self, record: &RunRecord) -> Result<Put, StoreError> {
        let run_key = Key::run(&record.task_id, &record.scheduled_time);
        Put::builder()
            .table_name(self.table())
            .set_item(Some(to_item(record, &run_key, "run")?))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))
    }

    /// The task item's side of a settle, fenced on the claim's execution id:
    /// the claim takes the outcome, the budget moves from reserved to actual,
    /// a finished one-time task completes, dead claims are pruned.
    fn claim_settled(&self, settlement: &Settlement<'_>) -> Result<Update, StoreError> {
        let (task, record) = (settlement.task, settlement.record);
        let mut set = vec![
            "claims.#occ.#status = :status".to_owned(),
            // One operator per SET value: DynamoDB's grammar has no `a - b + c`.
            "budget_used.#period = budget_used.#period + :delta".to_owned(),
        ];
        let mut update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&task.workspace, task.task_id.as_str()).to_map()))
            .condition_expression("claims.#occ.execution_id = :exec AND claims.#occ.#status = :running")
            .expression_attribute_names("#occ", settlement.occurrence)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#period", settlement.period)
            .expression_attribute_values(":status", s(record.status.as_str()))
            .expression_attribute_values(":delta", n(record.cost_usd - settlement.reserved_usd))
            .expression_attribute_values(":exec", s(settlement.execution_id))
            .expression_attribute_values(":running", s(RunStatus::Running.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if let Some(completion) = &settlement.complete {
            update = completing(update, &mut set, completion, record)?;
        }
        let mut removals = Vec::new();
        if settlement.complete.is_some() {
            // A completed reminder leaves the schedulable-reminder index.
            removals.extend(["#gsi3pk", "#gsi3sk"]);
            update = update
                .expression_attribute_names("#gsi3pk", GSI3PK)
                .expression_attribute_names("#gsi3sk", GSI3SK);
        }
        pruning(update, &format!("SET {}", set.join(", ")), &removals, &settlement.prune)
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))
    }

    /// A claim or a take-over: the task read, the new claim decided from the
    /// claim it holds (`Claim::after_crash`, `after_release`), then one
    /// transaction reserving the task's per-run reservation on the task
    /// (fenced on its version and on the claim as read, within its month's
    /// budget) and the run's most in its workspace's month (if it fits under
    /// the limit read, `budget::admits`, fenced on that limit). The claimed
    /// task is the one read with the claim and reservation applied: the
    /// version fence proves nothing else of it changed. A version moved by
    /// an edit meanwhile reads again.
    async fn reserve(&self, request: &ClaimRequest<'_>, from: Option<TakeOver>) -> Result<ClaimAnswer, StoreError> {
        // The workspace's limit, read once a claim is to be sent: the
        // reservation is admitted under it, fenced on it (`Fit::Under`).
        let mut limit: Option<Option<f64>> = None;
        for _ in 0..CLAIM_READS {
            let Some(mut task) = self.current_task(request.workspace, request.task_id).await? else {
                return Ok(ClaimAnswer::Refused(None));
            };
            let reservation = budget::reservation(task.spec.budget);
            let workspace = budget::workspace_reservation(&task);
            let held = task.claims.get(request.occurrence);
            // Not free, or not as the caller saw it: refused, as it is.
            let Some(claim) = new_claim(request, from, held, (reservation, workspace)) else {
                return Ok(ClaimAnswer::Refused(Some(Box::new(task))));
            };
            let prune = occurrence::prunable(&task, request.occurrence, request.now, request.keep_claims);
            let read = match limit {
                Some(read) => read,
                None => *limit.insert(self.workspace_limit(request.workspace).await?),
            };
            let mut items = vec![
                self.claim_taken(request, (&task, &prune), held, &claim, reservation)?,
                self.workspace_hold(&task.workspace, request.period, workspace, Fit::Under(read))?,
            ];
            let person = match (&task.provenance, request.person_cap_usd) {
                (Provenance::User { principal }, Some(cap)) => {
                    items.push(self.person_below(&task.workspace, principal, request.period, cap)?);
                    Some(cap)
                }
                _ => None,
            };
            // This claimant's own: the SDK's and `transact`'s repeats of it
            // are answered without a second write, and two deliveries of one
            // message claiming at the same instant are two requests (one
            // wins, the other is refused), never one answered twice.
            let token = settle_token_of(
                request.task_id.as_str(),
                request.occurrence,
                &format!("claim {} {:016x}", claim.execution_id, fastrand::u64(..)),
            );
            match self.transact(items, token, 0).await? {
                Sent::Done => {
                    *task.budget_used.entry(request.period.to_owned()).or_default() += reservation;
                    task.claims.retain(|key, _| !prune.contains(key));
                    task.claims.insert(request.occurrence.to_owned(), claim);
                    return Ok(ClaimAnswer::Claimed(Box::new(task)));
                }
                Sent::Refused(old) => match task_from(old)? {
                    Some(old) if old.version != task.version => continue,
                    old => return Ok(ClaimAnswer::Refused(old)),
                },
                Sent::Declined(1, workspace) => {
                    let now = super::budgets::limit_of(workspace.as_ref());
                    if now != read {
                        // An admin moved the limit since it was read.
                        limit = Some(now);
                        continue;
                    }
                    return Ok(ClaimAnswer::BudgetReached(
                        Box::new(task),
                        BudgetLevel::Workspace,
                        read.unwrap_or(0.0),
                    ));
                }
                Sent::Declined(..) => {
                    let cap = person.unwrap_or(0.0);
                    return Ok(ClaimAnswer::BudgetReached(Box::new(task), BudgetLevel::Person, cap));
                }
            }
        }
        Err(StoreError::Request {
            operation: "TransactWriteItems",
            source: format!("the task changed under {CLAIM_READS} claims in a row").into(),
        })
    }

    /// A reminder's person's month below their cap (`PERSON_MONTHLY_USD`):
    /// their account's charges (`account_charge`), checked in the claim's
    /// transaction, never written by it.
    fn person_below(
        &self,
        workspace: &str,
        principal: &str,
        period: &str,
        cap: f64,
    ) -> Result<TransactWriteItem, StoreError> {
        let account = budget::account_of_principal(workspace, principal);
        let check = ConditionCheck::builder()
            .table_name(self.table())
            .set_key(Some(Key::account(&account, period).to_map()))
            .condition_expression("attribute_not_exists(spent_usd) OR spent_usd < :cap")
            .expression_attribute_values(":cap", n(cap))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// The task's side of a claim or take-over: the claim written whole and
    /// the reservation added to the month, fenced on the version read, on
    /// the claim as read (`held`, or none), and on the month's budget.
    fn claim_taken(
        &self,
        request: &ClaimRequest<'_>,
        (task, prune): (&Task, &[String]),
        held: Option<&Claim>,
        claim: &Claim,
        reservation: f64,
    ) -> Result<TransactWriteItem, StoreError> {
        let value = serde_dynamo::to_attribute_value(claim).map_err(|e| StoreError::Corrupt {
            what: "claim".into(),
            source: Box::new(e),
        })?;
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(request.workspace, request.task_id.as_str()).to_map()))
            .expression_attribute_names("#occ", request.occurrence)
            .expression_attribute_names("#period", request.period)
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":claim", value)
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":reserve", n(reservation))
            .expression_attribute_values(":version", n(task.version))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let mut update = pruning(
            update,
            "SET claims.#occ = :claim, budget_used.#period = if_not_exists(budget_used.#period, :zero) + :reserve",
            &[],
            prune,
        );
        let occupied = match held {
            None => "attribute_not_exists(claims.#occ)".to_owned(),
            Some(old) => {
                update = update
                    .expression_attribute_names("#status", "status")
                    .expression_attribute_values(":status", s(old.status.as_str()))
                    .expression_attribute_values(":exec", s(&old.execution_id))
                    .expression_attribute_values(":lease", n(old.lease_until));
                "claims.#occ.#status = :status AND claims.#occ.execution_id = :exec \
                 AND claims.#occ.lease_until = :lease"
                    .to_owned()
            }
        };
        update
            .condition_expression(format!(
                "attribute_exists(#pk) AND version = :version AND {occupied} AND \
                 (attribute_not_exists(budget_threshold_usd) OR attribute_not_exists(budget_used.#period) \
                 OR budget_used.#period <= budget_threshold_usd)"
            ))
            .build()
            .map(|update| TransactWriteItem::builder().update(update).build())
            .map_err(|e| request_error("TransactWriteItems", e))
    }
}

impl DynamoStore {
    /// A skip's record, put if the occurrence has none, or, for the skip of
    /// an approval's resume (`RunRecord::request_id`), over the record that
    /// says it awaits that request.
    fn skip_record_put(&self, item: Item, record: &RunRecord) -> Result<TransactWriteItem, StoreError> {
        let Some(request_id) = &record.request_id else {
            return put_if_absent(self.table(), item);
        };
        let put = Put::builder()
            .table_name(self.table())
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk) OR (#status = :awaiting AND request_id = :request)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":awaiting", s(RunStatus::AwaitingApproval.as_str()))
            .expression_attribute_values(":request", s(request_id))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        Ok(TransactWriteItem::builder().put(put).build())
    }
}

impl RunStore for DynamoStore {
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimAnswer, StoreError> {
        self.reserve(request, None).await
    }

    async fn take_over(&self, request: &ClaimRequest<'_>, from: TakeOver) -> Result<ClaimAnswer, StoreError> {
        self.reserve(request, Some(from)).await
    }

    async fn install(&self, workspace: &str, install_id: &str) -> Result<Option<Install>, StoreError> {
        self.get_item(Key::install(workspace, install_id), "install").await
    }

    async fn settle(&self, settlement: &Settlement<'_>) -> Result<Settled, StoreError> {
        let items = self.settle_items(settlement)?;
        // The claim's update (item 1) carries the fence.
        match self.transact(items, settle_token(settlement), 1).await? {
            Sent::Done => Ok(Settled::Done),
            Sent::Refused(old) if settlement.complete.is_some() && completion_refused(old.clone(), settlement)? => {
                // Deleted or moved while it ran: settled as usual, not completed.
                let settlement = Settlement {
                    complete: None,
                    ..settlement.clone()
                };
                let items = self.settle_items(&settlement)?;
                match self.transact(items, settle_token(&settlement), 1).await? {
                    Sent::Done => Ok(Settled::Done),
                    Sent::Refused(_) | Sent::Declined(..) => Ok(Settled::LostClaim),
                }
            }
            // Only the claim's update carries a condition.
            Sent::Refused(_) | Sent::Declined(..) => Ok(Settled::LostClaim),
        }
    }

    /// Nothing committed, the claim goes whole (`REMOVE claims.<occurrence>`)
    /// and the next delivery claims afresh. What crashed attempts reserved
    /// or this one spent stays committed: the claim stays, `released`,
    /// carrying it in `crashed_usd`, and the next delivery takes it over
    /// (`TakeOver::Released`), so the occurrence's one record carries it and
    /// its settle charges the account (the release charges none). Either
    /// way a claim's `attempts`, and the run record's, counts the attempts
    /// since the last release (take-overs after crashes), not the
    /// deliveries given back before it.
    async fn release(&self, release: &Release<'_>) -> Result<Settled, StoreError> {
        let task = release.task;
        let carried = release.carried_usd > 0.0;
        let expression = if carried {
            "SET claims.#occ.#status = :released, claims.#occ.crashed_usd = :carried, \
             claims.#occ.workspace_usd = :carried, budget_used.#period = budget_used.#period + :delta"
        } else {
            "REMOVE claims.#occ SET budget_used.#period = budget_used.#period + :delta"
        };
        let mut update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&task.workspace, task.task_id.as_str()).to_map()))
            .update_expression(expression)
            .condition_expression("claims.#occ.execution_id = :exec AND claims.#occ.#status = :running")
            .expression_attribute_names("#occ", release.occurrence)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#period", release.period)
            .expression_attribute_values(":delta", n(release.carried_usd - release.reserved_usd))
            .expression_attribute_values(":exec", s(release.execution_id))
            .expression_attribute_values(":running", s(RunStatus::Running.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        if carried {
            update = update
                .expression_attribute_values(":released", s(RunStatus::Released.as_str()))
                .expression_attribute_values(":carried", n(release.carried_usd));
        }
        let update = update.build().map_err(|e| request_error("TransactWriteItems", e))?;
        let mut items = vec![TransactWriteItem::builder().update(update).build()];
        // The workspace then holds what the claim carries, as the task does.
        let workspace = release.carried_usd - release.workspace_held_usd;
        if workspace != 0.0 {
            items.push(self.workspace_hold(&task.workspace, release.period, workspace, Fit::Move)?);
        }
        match self.transact(items, release_token(release), 0).await? {
            Sent::Done => Ok(Settled::Done),
            Sent::Declined(..) => Ok(Settled::LostClaim),
            Sent::Refused(old) => {
                let held = task_from(old)?.and_then(|t| t.claims.get(release.occurrence).map(|c| c.status));
                Ok(match held {
                    // Another execution took it over and runs it.
                    Some(RunStatus::Running) => Settled::LostClaim,
                    // Gone or released: this release (or a ghost of it) applied.
                    Some(RunStatus::Released) | None => Settled::ClaimGone,
                    // Finished by another execution or a skip.
                    Some(_) => Settled::LostClaim,
                })
            }
        }
    }

    async fn park(&self, park: &Park<'_>) -> Result<Settled, StoreError> {
        self.park_at_gate(park).await
    }

    async fn run_approvals(
        &self,
        workspace: &str,
        run_id: &str,
        named: Option<&str>,
    ) -> Result<Vec<CallApproval>, StoreError> {
        self.approvals_of_run(workspace, run_id, named).await
    }

    async fn use_approval(
        &self,
        approval: &CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.use_call_approval(approval, execution_id, now).await
    }

    async fn keep_call_result(&self, approval: &CallApproval, result: &str, is_error: bool) -> Result<(), StoreError> {
        self.keep_result(approval, result, is_error).await
    }

    async fn journal(&self, task_id: &str, occurrence: &str) -> Result<Journal, StoreError> {
        self.read_journal(task_id, occurrence).await
    }

    async fn journal_call(&self, call: &JournaledCall) -> Result<(), StoreError> {
        self.put_journal_call(call).await
    }

    async fn journal_outcome(&self, outcome: &JournaledOutcome) -> Result<(), StoreError> {
        self.put_journal_outcome(outcome).await
    }

    async fn mark_budget_reached(
        &self,
        workspace: &str,
        month: &str,
        budget_usd: f64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.mark_reached(workspace, month, budget_usd, now).await
    }

    async fn record_unclaimed(&self, record: &RunRecord, prune: &[String]) -> Result<Unclaimed, StoreError> {
        let key = Key::run(&record.task_id, &record.scheduled_time);
        let item = to_item(record, &key, "run")?;
        // The skip takes the occurrence's claim, finished, in the same
        // transaction: a later delivery of it is a duplicate (never a run
        // over a recorded skip), and a delivery that claimed it first and
        // may still be running keeps it: its settle writes the one outcome.
        // A claim no execution holds (a crash, a release) committed money
        // that nothing will settle: the skip pays it (`Unclaimed::Dead`).
        let taken = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&record.workspace, &record.task_id).to_map()))
            .condition_expression("attribute_exists(#pk) AND attribute_not_exists(claims.#occ)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#occ", &record.scheduled_time)
            .expression_attribute_values(":claim", skip_claim(record)?)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let taken = pruning(taken, "SET claims.#occ = :claim", &[], prune)
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        self.counted();
        let result = self
            .client()
            .transact_write_items()
            .transact_items(self.skip_record_put(item.clone(), record)?)
            .transact_items(TransactWriteItem::builder().update(taken).build())
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(Unclaimed::Done),
            Err(err) => err,
        };
        let cancelled = Cancellation::of(&err);
        if !cancelled.by_conditions_alone() {
            return Err(request_error("TransactWriteItems", err));
        }
        if cancelled.condition_failed(0) {
            // The occurrence has a record already: a real run's is never overwritten.
            return Ok(Unclaimed::Done);
        }
        if cancelled.condition_failed(1) && cancelled.item(1).is_some() {
            let task = task_from(cancelled.take_item(1))?;
            let now = record.finished_at.timestamp();
            let claim = task.as_ref().and_then(|task| task.claims.get(&record.scheduled_time));
            return Ok(match claim {
                Some(claim) if claim.is_dead(now) || ends_awaiting(claim, record) => {
                    task.map_or(Unclaimed::Done, Unclaimed::Dead)
                }
                // A live lease: its run records the outcome, or its claim dies.
                Some(claim) if claim.status == RunStatus::Running => Unclaimed::Live,
                _ => Unclaimed::Done,
            });
        }
        // No task at all (a skip as missing): the record alone, once.
        self.put_new(item).await?;
        Ok(Unclaimed::Done)
    }

    async fn record_over_dead(
        &self,
        record: &RunRecord,
        dead: &Claim,
        account: Option<&crate::domain::task::budget::Account>,
        period: &str,
        prune: &[String],
    ) -> Result<(), StoreError> {
        let key = Key::run(&record.task_id, &record.scheduled_time);
        let item = to_item(record, &key, "run")?;
        // Fenced on the dead claim as read: a take-over since runs it instead.
        let taken = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&record.workspace, &record.task_id).to_map()))
            .condition_expression(
                "claims.#occ.execution_id = :exec AND claims.#occ.#status = :status \
                 AND claims.#occ.lease_until = :lease",
            )
            .expression_attribute_names("#occ", &record.scheduled_time)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":claim", skip_claim(record)?)
            .expression_attribute_values(":exec", s(&dead.execution_id))
            .expression_attribute_values(":status", s(dead.status.as_str()))
            .expression_attribute_values(":lease", n(dead.lease_until));
        let taken = pruning(taken, "SET claims.#occ = :claim", &[], prune)
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        let mut items = vec![
            self.skip_record_put(item, record)?,
            TransactWriteItem::builder().update(taken).build(),
        ];
        if let Some(account) = account {
            items.push(self.account_charge(account, period, record.cost_usd, true)?);
        }
        // The record's cost is what the dead claim committed; the workspace
        // held what the claim says it did there.
        let workspace = record.cost_usd - dead.workspace_usd;
        if workspace != 0.0 {
            items.push(self.workspace_hold(&record.workspace, period, workspace, Fit::Move)?);
        }
        // Refused: a record is there, or the claim moved on; nothing of this skip's.
        self.send_all(items).await.map(drop)
    }

    async fn current_task(
        &self,
        workspace: &str,
        task_id: &crate::domain::task::TaskId,
    ) -> Result<Option<Task>, StoreError> {
        self.get_item(Key::task(workspace, task_id.as_str()), "task").await
    }

    async fn complete_unclaimed(
        &self,
        workspace: &str,
        task_id: &crate::domain::task::TaskId,
        execution_id: &str,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let update = self.skip_completion(workspace, task_id, execution_id, completion, now)?;
        self.counted();
        match update.send().await {
            Ok(_) => {}
            Err(err) => match err.into_service_error() {
                // Moved, paused, cancelled, completed or gone: not finished by this skip.
                UpdateItemError::ConditionalCheckFailedException(_) => return Ok(()),
                other => return Err(request_error("UpdateItem", other)),
            },
        }
        if let (Some((workspace, principal, key)), Some(ttl)) = (&completion.record, completion.expires) {
            crate::ports::TaskStore::expire_idempotency(self, workspace, principal, key, ttl).await?;
        }
        Ok(())
    }

    async fn record_malformed(
        &self,
        message_id: &str,
        body: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let key = Key::malformed(&now.format("%Y-%m-%d").to_string(), message_id);
        let item = Item::from([
            (PK.to_owned(), s(&key.pk)),
            (SK.to_owned(), s(&key.sk)),
            ("entity".to_owned(), s("malformed")),
            (
                "reason".to_owned(),
                s(&crate::domain::run::occurrence::cap_reason(reason)),
            ),
            ("body".to_owned(), s(&cap_output(body))),
            ("received_at".to_owned(), s(&crate::domain::schedule::format_utc(now))),
            ("ttl".to_owned(), n((now + Duration::days(MALFORMED_DAYS)).timestamp())),
        ]);
        self.put(item).await
    }

    async fn pace_book(&self, model_id: &str, now_ms: i64, latest_ms: i64) -> Result<PaceAnswer, StoreError> {
        self.book_pace(model_id, now_ms, latest_ms).await
    }

    async fn pace_start(&self, model_id: &str, now_ms: i64, gap_ms: i64) -> Result<PaceAnswer, StoreError> {
        self.start_pace(model_id, now_ms, gap_ms).await
    }

    async fn pace_gap(&self, model_id: &str, seen: &Slots, gap_ms: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.set_pace_gap(model_id, seen, gap_ms, now_ms).await
    }

    async fn pace_charge(&self, model_id: &str, now_ms: i64, charge_ms: i64) -> Result<bool, StoreError> {
        self.charge_pace(model_id, now_ms, charge_ms).await
    }
}

/// Whether a skip ends the occurrence `claim` holds while it waits for an
/// approval: only the skip of that request's resume (a resume the door or
/// a spent budget refuses), which pays what the claim carries.
fn ends_awaiting(claim: &Claim, record: &RunRecord) -> bool {
    claim.status == RunStatus::AwaitingApproval && claim.request_id.is_some() && claim.request_id == record.request_id
}

/// Whether a completing settle was refused for its completion alone (the
/// task was tombstoned or moved while it ran): the task as it was still
/// holds this execution's running claim.
fn completion_refused(old: Option<Item>, settlement: &Settlement<'_>) -> Result<bool, StoreError> {
    let Some(task) = task_from(old)? else {
        return Ok(false);
    };
    Ok(task
        .claims
        .get(settlement.occurrence)
        .is_some_and(|claim| claim.execution_id == settlement.execution_id && claim.status == RunStatus::Running))
}

impl DynamoStore {
    /// The update a skip's completion of a finished one-time task makes:
    /// while the skip's claim is this execution's, the task unchanged in
    /// schedule, not paused, cancelled or completed.
    fn skip_completion(
        &self,
        workspace: &str,
        task_id: &crate::domain::task::TaskId,
        execution_id: &str,
        completion: &Completion,
        now: DateTime<Utc>,
    ) -> Result<aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder, StoreError> {
        let (fence, value) = schedule_fence(completion, ":fence")?;
        let mut update = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(Key::task(workspace, task_id.as_str()).to_map()))
            .update_expression(format!(
                "SET completed_at = :now, #state = :completed, updated_at = :now, version = version + :one{} \
                 REMOVE #gsi3pk, #gsi3sk",
                if completion.expires.is_some() {
                    ", #ttl = :ttl"
                } else {
                    ""
                }
            ))
            .expression_attribute_names("#gsi3pk", GSI3PK)
            .expression_attribute_names("#gsi3sk", GSI3SK)
            .condition_expression(format!(
                "attribute_exists(#pk) AND {fence} AND attribute_not_exists(completed_at) \
                 AND NOT (#override.deleted = :yes) AND NOT (#override.paused = :yes) \
                 AND claims.#occ.execution_id = :exec AND claims.#occ.#status = :skipped",
            ))
            .expression_attribute_names("#occ", occurrence_key(completion.at))
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":exec", s(execution_id))
            .expression_attribute_values(":skipped", s(RunStatus::Skipped.as_str()))
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#schedule", "schedule")
            .expression_attribute_names("#override", "override")
            .expression_attribute_values(":now", s(&crate::domain::schedule::format_utc(now)))
            .expression_attribute_values(":completed", s("completed"))
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":fence", value)
            .expression_attribute_values(":yes", AttributeValue::Bool(true));
        if completion.schedule.is_none() {
            update = update.expression_attribute_names("#at", "at");
        }
        if let Some(ttl) = completion.expires {
            update = update
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":ttl", n(ttl));
        }
        Ok(update)
    }
}

/// One token per claim released: SQS brings a returned message back with
/// its execution id, and a second release under the first one's token would
/// be answered from DynamoDB's record without applying (the claim kept, its
/// reservation later charged as a crash). The claim's start and lease tell
/// two claims of one execution apart.
fn release_token(release: &Release<'_>) -> String {
    let claim = release.task.claims.get(release.occurrence);
    settle_token_of(
        release.task.task_id.as_str(),
        release.occurrence,
        &format!(
            "release {} {} {}",
            release.execution_id,
            claim.map(|c| c.started_at.to_rfc3339()).unwrap_or_default(),
            claim.map_or(0, |c| c.lease_until)
        ),
    )
}

/// The claim a claimant takes, decided from the claim the occurrence holds
/// and what the claimant takes it over from; `None` when it is not free,
/// or not as the claimant saw it.
fn new_claim(
    request: &ClaimRequest<'_>,
    from: Option<TakeOver>,
    held: Option<&Claim>,
    (reservation, workspace): (f64, f64),
) -> Option<Claim> {
    let now = request.now.timestamp();
    match (from, held) {
        (None, None) => Some(Claim {
            workspace_usd: workspace,
            ..request.claim.clone()
        }),
        (Some(TakeOver::Crashed), Some(old)) if old.status == RunStatus::Running && old.lease_until < now => {
            Some(old.after_crash(request.claim, reservation, workspace))
        }
        (Some(TakeOver::Released), Some(old)) if old.status == RunStatus::Released => {
            Some(old.after_release(request.claim, workspace))
        }
        // The re-run an approval resumes carries what the occurrence spent.
        (Some(TakeOver::Approved), Some(old))
            if old.status == RunStatus::AwaitingApproval
                && old.request_id.is_some()
                && old.request_id.as_deref() == request.resume =>
        {
            Some(old.after_release(request.claim, workspace))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::retryable;

    #[test]
    fn only_collisions_throttling_and_in_progress_settles_are_sent_again() {
        let cancelled = Some("TransactionCanceledException");
        assert!(retryable(cancelled, &["None", "TransactionConflict", "None"]));
        assert!(retryable(cancelled, &["ThrottlingError", "None"]));
        assert!(!retryable(cancelled, &["None", "ConditionalCheckFailed"]));
        assert!(
            !retryable(cancelled, &["TransactionConflict", "ValidationError"]),
            "a malformed item fails the same way again"
        );
        assert!(!retryable(cancelled, &["None", "None"]));
        assert!(retryable(Some("TransactionInProgressException"), &[]));
        assert!(retryable(Some("ThrottlingException"), &[]));
        assert!(!retryable(Some("ValidationException"), &[]));
        assert!(
            !retryable(None, &[]),
            "an ambiguous transport failure goes back to the queue"
        );
    }
}
