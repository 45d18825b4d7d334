//! Approval requests of gated tool calls (`domain::run::gate`, SPEC §15):
//! one item each, `APPROVALS#<workspace>` / `REQ#<request_id>`, entity
//! `call_approval`, whose insert is the `Tool call awaiting approval`
//! event (`ApprovalPipe`). While it holds an occurrence (open, or approved
//! and not used) it carries `gsi3` keys in one of the `APPROVALS#<00-15>`
//! partitions (`gate::expiry_shard`), sorted by expiry, so the periodic
//! check finds the lapsed ones without a scan and no index partition
//! takes every request's writes.
//!
//! Every write is conditional: a park puts the request with the
//! occurrence's record and its `awaiting_approval` claim (`park`); a
//! decision is fenced on the request's version and on the claim still
//! awaiting; a use is fenced on the request approved and unused, so the
//! approved call is made at most once.

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Put, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};

use super::budgets::Fit;
use super::dynamo::{Cancellation, DynamoStore, Item, read_items, request_error, to_item, written};
use super::keys::{GSI3PK, GSI3SK, Key, PK, SCHEDULABLE_INDEX, SK};
use crate::domain::run::gate::{self, ApprovalState, CallApproval};
use crate::domain::schedule::format_utc;
use crate::domain::task::claim::RunStatus;
use crate::ports::{CallApprovals, EndAwaiting, Park, Settled, StoreError};

/// The `entity` of a request's item.
pub const ENTITY: &str = "call_approval";
use super::keys::approvals_holding;

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn key(workspace: &str, request_id: &str) -> Key {
    Key::approval(workspace, request_id)
}

/// Whether a request still holds its occurrence: open, or approved and
/// not used.
fn holds(approval: &CallApproval) -> bool {
    match approval.state {
        ApprovalState::Open => true,
        ApprovalState::Approved => approval.used_at.is_none(),
        ApprovalState::Denied | ApprovalState::Expired => false,
    }
}

/// The request as its item: its keys, and the expiry index's while it holds.
fn item_of(approval: &CallApproval) -> Result<Item, StoreError> {
    let mut item = to_item(approval, &key(&approval.workspace, &approval.request_id), ENTITY)?;
    if holds(approval) {
        item.insert(
            GSI3PK.to_owned(),
            s(&approvals_holding(Some(gate::expiry_shard(&approval.request_id)))),
        );
        item.insert(
            GSI3SK.to_owned(),
            s(&format!("{}#{}", format_utc(approval.expires_at), approval.request_id)),
        );
    }
    Ok(item)
}

/// A put of the request as decided, fenced on the version the decision was
/// made from.
fn decided_put(table: &str, decided: &CallApproval, expected: u64) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item_of(decided)?))
        .condition_expression("version = :expected AND attribute_not_exists(used_at)")
        .expression_attribute_values(":expected", n(expected))
        .build()
        .map_err(|e| request_error("TransactWriteItems", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

impl DynamoStore {
    /// The park's transaction: the claim kept `awaiting_approval` carrying
    /// what the occurrence spent (fenced on the execution, as a release),
    /// the record saying so, the request put, the workspace's month moved
    /// to hold what is carried.
    pub(crate) async fn park_at_gate(&self, park: &Park<'_>) -> Result<Settled, StoreError> {
        let release = &park.release;
        let task = release.task;
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&task.workspace, task.task_id.as_str()).to_map()))
            .condition_expression("claims.#occ.execution_id = :exec AND claims.#occ.#status = :running")
            .expression_attribute_names("#occ", release.occurrence)
            .expression_attribute_names("#status", "status")
            .expression_attribute_names("#period", release.period)
            .expression_attribute_values(":awaiting", s(RunStatus::AwaitingApproval.as_str()))
            .expression_attribute_values(":carried", n(release.carried_usd))
            .expression_attribute_values(":request", s(&park.approval.request_id))
            .expression_attribute_values(":delta", n(release.carried_usd - release.reserved_usd))
            .expression_attribute_values(":exec", s(release.execution_id))
            .expression_attribute_values(":running", s(RunStatus::Running.as_str()))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let update = super::runs::pruning(
            update,
            "SET claims.#occ.#status = :awaiting, claims.#occ.crashed_usd = :carried, \
             claims.#occ.workspace_usd = :carried, claims.#occ.request_id = :request, \
             budget_used.#period = budget_used.#period + :delta",
            &[],
            &park.prune,
        )
        .build()
        .map_err(|e| request_error("TransactWriteItems", e))?;
        let record = Put::builder()
            .table_name(self.table())
            .set_item(Some(to_item(
                park.record,
                &Key::run(&park.record.task_id, &park.record.scheduled_time),
                "run",
            )?))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        let mut items = vec![
            TransactWriteItem::builder().update(update).build(),
            TransactWriteItem::builder().put(record).build(),
            TransactWriteItem::builder()
                .put(self.request_put(park.approval)?)
                .build(),
        ];
        let workspace = release.carried_usd - release.workspace_held_usd;
        if workspace != 0.0 {
            items.push(self.workspace_hold(&task.workspace, release.period, workspace, Fit::Move)?);
        }
        // Collisions and throttling are sent again under one token, as a
        // settle's are; the claim's update (item 0) carries the fence.
        let token = format!("park-{:032x}", fastrand::u128(..));
        match self.transact(items, token[..36].to_owned(), 0).await? {
            super::runs::Sent::Done => Ok(Settled::Done),
            super::runs::Sent::Refused(_) => Ok(Settled::LostClaim),
            super::runs::Sent::Declined(..) => Err(StoreError::Request {
                operation: "TransactWriteItems",
                source: "the request was decided while its call was asked again".into(),
            }),
        }
    }

    /// The park's put of its request: new, or the same call still open (an
    /// attempt that parked on it and lost its answer), never over a decided
    /// or used request.
    fn request_put(&self, approval: &CallApproval) -> Result<Put, StoreError> {
        Put::builder()
            .table_name(self.table())
            .set_item(Some(item_of(approval)?))
            .condition_expression("attribute_not_exists(#pk) OR #state = :open")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":open", s(ApprovalState::Open.as_str()))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))
    }

    /// The requests of `run_id`, read strongly by their key prefix
    /// (`gate::run_requests`: at most `gate::MAX_ASKS` items, one page
    /// whatever the workspace's history), and `named` by its id when an
    /// earlier release asked it (an unprefixed id) for this run.
    pub(crate) async fn approvals_of_run(
        &self,
        workspace: &str,
        run_id: &str,
        named: Option<&str>,
    ) -> Result<Vec<CallApproval>, StoreError> {
        let prefix = key(workspace, &gate::run_requests(run_id));
        let mut found = Vec::new();
        let mut start = None;
        loop {
            self.counted();
            let page = self
                .client()
                .query()
                .table_name(self.table())
                .consistent_read(true)
                .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
                .expression_attribute_names("#pk", PK)
                .expression_attribute_names("#sk", SK)
                .expression_attribute_values(":pk", s(&prefix.pk))
                .expression_attribute_values(":prefix", s(&prefix.sk))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| request_error("Query", e))?;
            found.extend(read_items::<CallApproval>(page.items, ENTITY)?);
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        if let Some(named) = named.filter(|id| gate::is_unprefixed(id)) {
            let earlier: Option<CallApproval> = self.get_item(key(workspace, named), ENTITY).await?;
            found.extend(earlier.filter(|r| r.run_id == run_id));
        }
        Ok(found)
    }

    /// Uses an approved, unused request for its one call.
    pub(crate) async fn use_call_approval(
        &self,
        approval: &CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.counted();
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(key(&approval.workspace, &approval.request_id).to_map()))
            .update_expression("SET used_at = :now, used_by = :exec, version = version + :one REMOVE #gsi3pk, #gsi3sk")
            .condition_expression("#state = :approved AND attribute_not_exists(used_at)")
            .expression_attribute_names("#state", "state")
            .expression_attribute_names("#gsi3pk", GSI3PK)
            .expression_attribute_names("#gsi3sk", GSI3SK)
            .expression_attribute_values(":approved", s(ApprovalState::Approved.as_str()))
            .expression_attribute_values(":now", s(&now.to_rfc3339()))
            .expression_attribute_values(":exec", s(execution_id))
            .expression_attribute_values(":one", n(1))
            .send()
            .await;
        written("UpdateItem", result)
    }

    /// Keeps the approved call's answer on its request.
    pub(crate) async fn keep_result(
        &self,
        approval: &CallApproval,
        result: &str,
        is_error: bool,
    ) -> Result<(), StoreError> {
        self.counted();
        self.client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(key(&approval.workspace, &approval.request_id).to_map()))
            .update_expression("SET #result = :result, result_is_error = :error")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#result", "result")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":result", s(result))
            .expression_attribute_values(":error", AttributeValue::Bool(is_error))
            .send()
            .await
            .map_err(|e| request_error("UpdateItem", e))
            .map(drop)
    }

    /// The occurrence's claim still awaiting, as a check in a transaction.
    fn still_awaiting(&self, approval: &CallApproval) -> Result<TransactWriteItem, StoreError> {
        let check = ConditionCheck::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&approval.workspace, &approval.task_id).to_map()))
            .condition_expression("claims.#occ.#status = :awaiting AND claims.#occ.request_id = :request")
            .expression_attribute_names("#occ", &approval.scheduled_time)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":awaiting", s(RunStatus::AwaitingApproval.as_str()))
            .expression_attribute_values(":request", s(&approval.request_id))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        Ok(TransactWriteItem::builder().condition_check(check).build())
    }

    /// Sends a transaction once: `false` when a condition refused it.
    pub(crate) async fn send_all(&self, items: Vec<TransactWriteItem>) -> Result<bool, StoreError> {
        self.counted();
        let result = self
            .client()
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(err) if Cancellation::of(&err).by_conditions_alone() => Ok(false),
            Err(err) => Err(request_error("TransactWriteItems", err)),
        }
    }
}

impl CallApprovals for DynamoStore {
    async fn approvals_page(
        &self,
        workspace: &str,
        task_id: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<CallApproval>, Option<String>), StoreError> {
        let partition = key(workspace, "");
        let mut query = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":pk", s(&partition.pk))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX));
        if let Some(task_id) = task_id {
            query = query
                .filter_expression("task_id = :task")
                .expression_attribute_values(":task", s(task_id));
        }
        if let Some(after) = after {
            let start = key(workspace, after);
            query = query.set_exclusive_start_key(Some(start.to_map()));
        }
        self.counted();
        let page = query.send().await.map_err(|e| request_error("Query", e))?;
        let next = page
            .last_evaluated_key
            .as_ref()
            .and_then(|k| k.get(SK))
            .and_then(|v| v.as_s().ok())
            .and_then(|sk| sk.strip_prefix(super::keys::APPROVAL_PREFIX))
            .map(str::to_owned);
        let mut approvals = read_items::<CallApproval>(page.items, ENTITY)?;
        approvals.sort_by_key(|a| std::cmp::Reverse(a.requested_at));
        Ok((approvals, next))
    }

    async fn approval(&self, workspace: &str, request_id: &str) -> Result<Option<CallApproval>, StoreError> {
        self.get_item(key(workspace, request_id), ENTITY).await
    }

    async fn approve_call(&self, decided: &CallApproval, expected: u64) -> Result<bool, StoreError> {
        let items = vec![
            decided_put(self.table(), decided, expected)?,
            self.still_awaiting(decided)?,
        ];
        self.send_all(items).await
    }

    async fn end_awaiting(&self, ended: &EndAwaiting<'_>, expected: u64) -> Result<bool, StoreError> {
        let record = ended.record;
        let put = Put::builder()
            .table_name(self.table())
            .set_item(Some(to_item(
                record,
                &Key::run(&record.task_id, &record.scheduled_time),
                "run",
            )?))
            .condition_expression("#status = :awaiting")
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":awaiting", s(RunStatus::AwaitingApproval.as_str()))
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        let claim = super::runs::skip_claim(record)?;
        let finished = Update::builder()
            .table_name(self.table())
            .set_key(Some(
                Key::task(&ended.task.workspace, ended.task.task_id.as_str()).to_map(),
            ))
            .condition_expression(
                "claims.#occ.#status = :held AND claims.#occ.request_id = :request \
                 AND claims.#occ.execution_id = :exec AND claims.#occ.lease_until = :lease",
            )
            .expression_attribute_names("#occ", &record.scheduled_time)
            .expression_attribute_names("#status", "status")
            .expression_attribute_values(":claim", claim)
            .expression_attribute_values(":held", s(ended.claim.status.as_str()))
            .expression_attribute_values(":exec", s(&ended.claim.execution_id))
            .expression_attribute_values(":lease", n(ended.claim.lease_until))
            .expression_attribute_values(":request", s(&ended.approval.request_id));
        let finished = super::runs::pruning(finished, "SET claims.#occ = :claim", &[], &ended.prune)
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        let mut items = vec![
            decided_put(self.table(), ended.approval, expected)?,
            TransactWriteItem::builder().put(put).build(),
            TransactWriteItem::builder().update(finished).build(),
        ];
        if let Some(account) = ended.account {
            items.push(self.account_charge(account, ended.period, record.cost_usd, true)?);
        }
        let workspace = record.cost_usd - ended.claim.workspace_usd;
        if workspace != 0.0 {
            items.push(self.workspace_hold(&ended.task.workspace, ended.period, workspace, Fit::Move)?);
        }
        self.send_all(items).await
    }

    async fn close_request(&self, decided: &CallApproval, expected: u64) -> Result<bool, StoreError> {
        self.send_all(vec![decided_put(self.table(), decided, expected)?]).await
    }

    async fn lapsed_approvals(
        &self,
        shard: Option<u8>,
        before: DateTime<Utc>,
        after: Option<&CallApproval>,
        limit: usize,
    ) -> Result<Vec<CallApproval>, StoreError> {
        // The page goes on from the item `after` is, by its keys and its
        // index keys (a request the pass left, or closed, since).
        let start = after.map(|last| {
            let mut start = key(&last.workspace, &last.request_id).to_map();
            start.insert(GSI3PK.to_owned(), s(&approvals_holding(shard)));
            start.insert(
                GSI3SK.to_owned(),
                s(&format!("{}#{}", format_utc(last.expires_at), last.request_id)),
            );
            start
        });
        self.counted();
        let page = self
            .client()
            .query()
            .table_name(self.table())
            .index_name(SCHEDULABLE_INDEX)
            .key_condition_expression("#pk = :pk AND #sk < :before")
            .expression_attribute_names("#pk", GSI3PK)
            .expression_attribute_names("#sk", GSI3SK)
            .expression_attribute_values(":pk", s(&approvals_holding(shard)))
            .expression_attribute_values(":before", s(&format_utc(before)))
            .set_exclusive_start_key(start)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .send()
            .await
            .map_err(|e| request_error("Query", e))?;
        read_items(page.items, ENTITY)
    }
}
