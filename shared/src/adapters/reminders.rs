//! The owner's view of the table (SPEC §11): a principal's reminders, newest
//! first, from the owner index `gsi2`; a task's run records, newest first;
//! and a versioned task write together with an idempotency record.
//!
//! Invariants: a page is read from the caller's own index partition only
//! (the cursor names a position, the partition comes from the principal);
//! run records are read from the task's own partition, strongly
//! consistent; the versioned write sends what `catalog::TaskChange` finds
//! changed (never the runner's `claims`/`budget_used`).

use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};

use super::catalog::TaskChange;
use super::dynamo::{DynamoStore, put_if_absent, read_item, read_items, request_error, to_item};
use super::keys::{GSI2PK, Key, OWNER_INDEX, OwnerIndexKey, PK, SK};
use crate::domain::connector::reconcile::Write;
use crate::domain::run::occurrence::RunRecord;
use crate::domain::task::idempotency::IdempotencyRecord;
use crate::domain::task::{Task, TaskId};
use crate::ports::{ListCursor, OwnedPage, ReminderStore, StateFilter, StoreError, UpdateWritten};

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

/// A page ends at its `limit`-th task and continues after it (the cursor
/// names a task, not DynamoDB's position, so what was read past it is read
/// again by the next page); DynamoDB may say there is more (`unread`) when
/// there is not, and the next page is then empty.
fn page_of(mut tasks: Vec<Task>, unread: bool, limit: usize) -> OwnedPage {
    let more = unread || tasks.len() > limit;
    tasks.truncate(limit);
    let next = match (more, tasks.last()) {
        (true, Some(last)) => Some(ListCursor {
            created: last.created_at,
            task_id: last.task_id.clone(),
        }),
        _ => None,
    };
    OwnedPage { tasks, next }
}

impl ReminderStore for DynamoStore {
    async fn owned(
        &self,
        workspace: &str,
        principal: &str,
        filter: StateFilter,
        limit: usize,
        after: Option<&ListCursor>,
    ) -> Result<OwnedPage, StoreError> {
        let mut base = self
            .client()
            .query()
            .table_name(self.table())
            .index_name(OWNER_INDEX)
            .key_condition_expression("#pk = :owner")
            .expression_attribute_names("#pk", GSI2PK)
            .expression_attribute_names("#state", "state")
            .expression_attribute_values(":owner", s(&OwnerIndexKey::partition(workspace, principal)))
            .scan_index_forward(false);
        base = match filter {
            StateFilter::NotDeleted => base
                .filter_expression("#state <> :state")
                .expression_attribute_values(":state", s("deleted")),
            StateFilter::Only(state) => base
                .filter_expression("#state = :state")
                .expression_attribute_values(":state", s(state.as_str())),
        };
        let mut start = after.map(|c| OwnerIndexKey::start_after(workspace, principal, c.created, c.task_id.as_str()));
        let mut tasks: Vec<Task> = Vec::new();
        loop {
            // Limit counts items read before the filter: each query reads
            // a whole page's worth, however many the filter kept before,
            // so a page never shrinks to a few items per request.
            let want = i32::try_from(limit).unwrap_or(i32::MAX);
            self.counted();
            let out = base
                .clone()
                .limit(want)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| request_error("Query", e))?;
            for item in out.items.unwrap_or_default() {
                tasks.push(read_item(item, "task")?);
            }
            start = out.last_evaluated_key;
            if start.is_none() || tasks.len() >= limit {
                break;
            }
        }
        Ok(page_of(tasks, start.is_some(), limit))
    }

    async fn runs(&self, task_id: &TaskId, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        let partition = Key::run(task_id.as_str(), "");
        self.counted();
        let out = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", s(&partition.pk))
            .expression_attribute_values(":prefix", s(&partition.sk))
            .scan_index_forward(false)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| request_error("Query", e))?;
        read_items(out.items, "run record")
    }

    async fn run(&self, task_id: &TaskId, occurrence: &str) -> Result<Option<RunRecord>, StoreError> {
        self.get_item(Key::run(task_id.as_str(), occurrence), "run record")
            .await
    }

    async fn write_with_idempotency(
        &self,
        write: &Write,
        record: &IdempotencyRecord,
    ) -> Result<UpdateWritten, StoreError> {
        let task = &write.task;
        let Some(before) = write.before.as_deref() else {
            return Err(StoreError::Corrupt {
                what: "task change".into(),
                source: "a change with an idempotency record needs the task as read".into(),
            });
        };
        let change = TaskChange::between(before, task)?;
        let update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::task(&task.workspace, task.task_id.as_str()).to_map()))
            .condition_expression("#version = :read")
            .set_expression_attribute_names(Some(change.names))
            .set_expression_attribute_values(Some(change.values))
            .update_expression(change.expression)
            .build()
            .map_err(|e| request_error("TransactWriteItems", e))?;
        let record_key = Key::idempotency(&record.workspace, &record.principal, &record.key);
        let put = put_if_absent(self.table(), to_item(record, &record_key, "idempotency")?)?;
        self.counted();
        let result = self
            .client()
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(put)
            .send()
            .await;
        let err = match result {
            Ok(_) => return Ok(UpdateWritten::Written),
            Err(err) => err,
        };
        let cancelled = super::dynamo::Cancellation::of(&err);
        if cancelled.condition_failed(1) {
            Ok(UpdateWritten::KeyTaken)
        } else if cancelled.condition_failed(0) {
            Ok(UpdateWritten::VersionMoved)
        } else {
            Err(request_error("TransactWriteItems", err))
        }
    }
}
