//! The task store on one DynamoDB table (SPEC §3), through `serde_dynamo`.
//!
//! Invariants: items are the domain types serialised as they are, plus the
//! key attributes of `keys`, an `entity` name and, on tasks, the derived
//! `state`; every read of a task or record is strongly consistent; every
//! condition failure comes back as a domain outcome. The store counts its own
//! requests (moto's consumed-capacity figures are not reliable), so tests and
//! benchmarks can hold each use case to its request budget.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::keys::{ENTITY, IndexKey, Key, OwnerIndexKey, PK, SchedulableKey};
use crate::domain::task::budget;
use crate::domain::task::idempotency::IdempotencyRecord;
use crate::domain::task::{Task, TaskId};
use crate::ports::{Inserted, OwnerReminders, ReminderInserted, StoreError, TaskStore};

pub type Item = HashMap<String, AttributeValue>;

/// The DynamoDB client's configuration every store is built on: the
/// function's SDK configuration, and [`TransactionConflicts`] retried.
pub fn config(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::config::Builder {
    aws_sdk_dynamodb::config::Builder::from(sdk).retry_classifier(TransactionConflicts)
}

/// DynamoDB answers `TransactionConflictException` to a plain write of an
/// item a transaction is writing at that moment (a runner's claim or settle
/// beside a due move, a task's write, a budget's set), and the SDK's
/// standard retry does not retry it. Nothing was written: it is sent again
/// as a transient error is, within the client's retry attempts. (A
/// transaction's own conflicts come as its cancellation, which the settle
/// retries under its token.)
#[derive(Debug, Clone, Copy, Default)]
pub struct TransactionConflicts;

impl aws_smithy_runtime_api::client::retries::classifiers::ClassifyRetry for TransactionConflicts {
    fn classify_retry(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::InterceptorContext,
    ) -> aws_smithy_runtime_api::client::retries::classifiers::RetryAction {
        use aws_sdk_dynamodb::operation::{
            delete_item::DeleteItemError, put_item::PutItemError, update_item::UpdateItemError,
        };
        use aws_smithy_runtime_api::client::retries::classifiers::RetryAction;
        let Some(Err(error)) = ctx.output_or_error() else {
            return RetryAction::NoActionIndicated;
        };
        let Some(error) = error.as_operation_error() else {
            return RetryAction::NoActionIndicated;
        };
        let code = error
            .downcast_ref::<PutItemError>()
            .and_then(ProvideErrorMetadata::code)
            .or_else(|| {
                error
                    .downcast_ref::<UpdateItemError>()
                    .and_then(ProvideErrorMetadata::code)
            })
            .or_else(|| {
                error
                    .downcast_ref::<DeleteItemError>()
                    .and_then(ProvideErrorMetadata::code)
            });
        if code == Some(TRANSACTION_CONFLICT) {
            RetryAction::transient_error()
        } else {
            RetryAction::NoActionIndicated
        }
    }

    fn name(&self) -> &'static str {
        "TransactionConflicts"
    }
}

/// The error code of a plain write that met a transaction on its item.
pub const TRANSACTION_CONFLICT: &str = "TransactionConflictException";

#[derive(Clone)]
pub struct DynamoStore {
    client: Client,
    table: String,
    requests: Arc<AtomicU64>,
}

impl DynamoStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
            requests: Arc::default(),
        }
    }

    pub fn from_sdk(sdk: &aws_config::SdkConfig, table: impl Into<String>) -> Self {
        Self::new(Client::from_conf(config(sdk).build()), table)
    }

    /// DynamoDB requests this store has sent since it was built.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Counts one request (see [`Self::requests`]).
    pub(crate) fn counted(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// One item, read consistently, as a domain value.
    pub(crate) async fn get_item<T: DeserializeOwned>(&self, key: Key, what: &str) -> Result<Option<T>, StoreError> {
        self.counted();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.to_map()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| request_error("GetItem", e))?;
        out.item.map(|item| read_item(item, what)).transpose()
    }
}

/// Why DynamoDB cancelled a transaction: each item's reason, in the
/// transaction's order (code `None` for an item that did not cause it),
/// with the item as it was where the request asked for it (`ALL_OLD` on a
/// condition failure). Empty when the error is no cancellation. The one
/// reader of a cancelled transaction's reasons.
pub(crate) struct Cancellation(Vec<aws_sdk_dynamodb::types::CancellationReason>);

impl Cancellation {
    pub(crate) fn of<R>(err: &SdkError<TransactWriteItemsError, R>) -> Self {
        Self(match err.as_service_error() {
            Some(TransactWriteItemsError::TransactionCanceledException(e)) => e.cancellation_reasons().to_vec(),
            _ => Vec::new(),
        })
    }

    /// Each item's code, `None` where it had none.
    pub(crate) fn codes(&self) -> Vec<&str> {
        self.0.iter().map(|r| r.code().unwrap_or("None")).collect()
    }

    /// Whether item `i`'s condition failed.
    pub(crate) fn condition_failed(&self, i: usize) -> bool {
        self.0.get(i).and_then(|r| r.code()) == Some("ConditionalCheckFailed")
    }

    /// Whether the conditions alone cancelled it: at least one failed, and
    /// no item had another reason.
    pub(crate) fn by_conditions_alone(&self) -> bool {
        let codes = self.codes();
        codes.contains(&"ConditionalCheckFailed")
            && codes.iter().all(|c| matches!(*c, "None" | "ConditionalCheckFailed"))
    }

    /// Item `i` as it was, when the request asked for it and it existed.
    pub(crate) fn item(&self, i: usize) -> Option<&Item> {
        self.0.get(i).and_then(|r| r.item())
    }

    /// Item `i` as it was, taken out.
    pub(crate) fn take_item(mut self, i: usize) -> Option<Item> {
        (i < self.0.len()).then(|| self.0.swap_remove(i)).and_then(|r| r.item)
    }
}

pub(crate) fn request_error<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
    source: E,
) -> StoreError {
    StoreError::Request {
        operation,
        source: Box::new(source),
    }
}

pub(crate) fn read_item<T: DeserializeOwned>(item: Item, what: &str) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(|e| StoreError::Corrupt {
        what: what.to_owned(),
        source: Box::new(e),
    })
}

/// Items a read returned (`Query`'s `items`), each read as `T`.
pub(crate) fn read_items<T: DeserializeOwned>(items: Option<Vec<Item>>, what: &str) -> Result<Vec<T>, StoreError> {
    items
        .unwrap_or_default()
        .into_iter()
        .map(|i| read_item(i, what))
        .collect()
}

/// A conditional write's outcome: `true` written, `false` its condition
/// failed (a domain outcome for the caller to name); any other failure is an
/// error of `operation`.
pub(crate) fn written<O, E, R>(operation: &'static str, result: Result<O, SdkError<E, R>>) -> Result<bool, StoreError>
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(e) if e.as_service_error().and_then(|e| e.code()) == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(request_error(operation, e)),
    }
}

/// A domain value as an item under `key`, with its entity name.
pub fn to_item<T: Serialize>(value: &T, key: &Key, entity: &str) -> Result<Item, StoreError> {
    let mut item: Item = serde_dynamo::to_item(value).map_err(|e| StoreError::Corrupt {
        what: entity.to_owned(),
        source: Box::new(e),
    })?;
    item.extend(key.to_map());
    item.insert(ENTITY.to_owned(), AttributeValue::S(entity.to_owned()));
    Ok(item)
}

/// A task as stored: the domain task, its key and index key, and the attributes derived
/// from it: `state` for the console, and the budget figures the claim's
/// condition compares (`budget_reserve_usd`, `budget_threshold_usd`).
pub fn task_item(task: &Task) -> Result<Item, StoreError> {
    let mut item = to_item(task, &Key::task(&task.workspace, task.task_id.as_str()), "task")?;
    IndexKey::task(&task.workspace, task.task_id.as_str()).add_to(&mut item);
    if let crate::domain::task::Provenance::User { principal } = &task.provenance {
        OwnerIndexKey::new(&task.workspace, principal, task.created_at, task.task_id.as_str()).add_to(&mut item);
    }
    if let Some(index) = SchedulableKey::of(task) {
        index.add_to(&mut item);
    }
    item.insert("state".to_owned(), AttributeValue::S(task.state().as_str().to_owned()));
    item.insert(RESERVE.to_owned(), number(budget::reservation(task.spec.budget)));
    if let Some(threshold) = budget::threshold(task.spec.budget) {
        item.insert(THRESHOLD.to_owned(), number(threshold));
    }
    Ok(item)
}

/// Derived task attributes the claim reads in its expressions.
const RESERVE: &str = "budget_reserve_usd";
const THRESHOLD: &str = "budget_threshold_usd";

fn number(value: f64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// A transaction's put of an item that must not exist yet.
pub(crate) fn put_if_absent(table: &str, item: Item) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", PK)
        .build()
        .map_err(|e| request_error("TransactWriteItems", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

impl DynamoStore {
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// Puts `item`, over an item with its key if there is one.
    pub(crate) async fn put(&self, item: Item) -> Result<(), StoreError> {
        self.counted();
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| request_error("PutItem", e))
            .map(drop)
    }

    /// Puts `item` unless an item has its key: whether it was written (one
    /// already there stays as it is).
    pub(crate) async fn put_new(&self, item: Item) -> Result<bool, StoreError> {
        self.counted();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await;
        written("PutItem", result)
    }

    /// Writes a new task, unless one already has its key. Reconcile creates
    /// connector tasks this way.
    pub async fn insert_task(&self, task: &Task) -> Result<Inserted, StoreError> {
        Ok(if self.put_new(task_item(task)?).await? {
            Inserted::Created
        } else {
            Inserted::KeyTaken
        })
    }

    /// Writes an install as the platform reported it.
    pub async fn put_install(&self, install: &crate::domain::task::install::Install) -> Result<(), StoreError> {
        let key = Key::install(&install.workspace, &install.install_id);
        let mut item = to_item(install, &key, "install")?;
        if install.is_installed() {
            IndexKey::installed(&install.workspace, &install.install_id).add_to(&mut item);
        }
        self.put(item).await
    }
}

impl TaskStore for DynamoStore {
    async fn idempotency_record(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
    ) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.get_item(Key::idempotency(workspace, principal, key), "idempotency record")
            .await
    }

    async fn expire_idempotency(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
        ttl: i64,
    ) -> Result<(), StoreError> {
        self.counted();
        let result = self
            .client
            .update_item()
            .table_name(&self.table)
            .set_key(Some(Key::idempotency(workspace, principal, key).to_map()))
            .update_expression("SET #ttl = :ttl")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
            .send()
            .await;
        // No record (one written before records were scoped by workspace): nothing to expire.
        written("UpdateItem", result).map(|_| ())
    }

    async fn task(&self, workspace: &str, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.get_item(Key::task(workspace, task_id.as_str()), "task").await
    }

    async fn insert_with_idempotency(
        &self,
        task: &Task,
        record: &IdempotencyRecord,
        owner: Option<&OwnerReminders>,
    ) -> Result<ReminderInserted, StoreError> {
        let task_put = put_if_absent(&self.table, task_item(task)?)?;
        let record_key = Key::idempotency(&record.workspace, &record.principal, &record.key);
        let record_put = put_if_absent(&self.table, to_item(record, &record_key, "idempotency")?)?;
        let mut items = vec![task_put, record_put];
        if let (crate::domain::task::Provenance::User { principal }, Some(owner)) = (&task.provenance, owner) {
            items.push(owner_update(
                &self.table,
                &task.workspace,
                principal,
                &task.task_id,
                owner,
            )?);
        }
        self.counted();
        let result = self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match result {
            Ok(_) => Ok(ReminderInserted::Created),
            Err(err) => {
                let cancelled = Cancellation::of(&err);
                if cancelled.condition_failed(0) || cancelled.condition_failed(1) {
                    Ok(ReminderInserted::KeyTaken)
                } else if cancelled.condition_failed(2) {
                    Ok(ReminderInserted::OwnerMoved)
                } else {
                    Err(request_error("TransactWriteItems", err))
                }
            }
        }
    }

    async fn owner_reminders(&self, workspace: &str, principal: &str) -> Result<OwnerReminders, StoreError> {
        #[derive(serde::Deserialize)]
        struct Owner {
            version: u64,
            #[serde(default)]
            reminders: Vec<String>,
        }
        let owner = self
            .get_item::<Owner>(Key::owner(workspace, principal), "owner")
            .await?
            .unwrap_or(Owner {
                version: 0,
                reminders: Vec::new(),
            });
        let ids: Vec<TaskId> = owner.reminders.iter().filter_map(|id| TaskId::parse(id)).collect();
        let mut found = self.tasks_by_id(workspace, &ids).await?;
        let mut tasks: Vec<(TaskId, Option<Task>)> = ids
            .into_iter()
            .map(|id| {
                let task = found.remove(id.as_str());
                (id, task)
            })
            .collect();
        // Reminders the create function made are not listed on the owner
        // item: the owner index finds them (it may lag a fresh one by a
        // moment; those are not capped anyway).
        for task in self.indexed_reminders(workspace, principal).await? {
            if !tasks.iter().any(|(id, _)| *id == task.task_id) {
                tasks.push((task.task_id.clone(), Some(task)));
            }
        }
        Ok(OwnerReminders {
            version: owner.version,
            tasks,
        })
    }
}

impl DynamoStore {
    /// The workspace's tasks of these ids that exist, strongly consistent,
    /// 100 a `BatchGetItem`, unprocessed keys asked again.
    async fn tasks_by_id(&self, workspace: &str, ids: &[TaskId]) -> Result<HashMap<String, Task>, StoreError> {
        let mut found: HashMap<String, Task> = HashMap::new();
        for chunk in ids.chunks(100) {
            let keys: Vec<Item> = chunk
                .iter()
                .map(|id| Key::task(workspace, id.as_str()).to_map())
                .collect();
            let mut pending = Some(
                aws_sdk_dynamodb::types::KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(|e| request_error("BatchGetItem", e))?,
            );
            while let Some(keys) = pending.take() {
                self.counted();
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table, keys)
                    .send()
                    .await
                    .map_err(|e| request_error("BatchGetItem", e))?;
                for item in out
                    .responses
                    .and_then(|mut r| r.remove(&self.table))
                    .unwrap_or_default()
                {
                    let task: Task = read_item(item, "task")?;
                    found.insert(task.task_id.to_string(), task);
                }
                pending = out.unprocessed_keys.and_then(|mut u| u.remove(&self.table));
            }
        }
        Ok(found)
    }

    /// Every reminder of the owner's the owner index holds, not deleted,
    /// read page by page.
    async fn indexed_reminders(&self, workspace: &str, principal: &str) -> Result<Vec<Task>, StoreError> {
        let mut tasks = Vec::new();
        let mut after = None;
        loop {
            let page = crate::ports::ReminderStore::owned(
                self,
                workspace,
                principal,
                crate::ports::StateFilter::NotDeleted,
                100,
                after.as_ref(),
            )
            .await?;
            tasks.extend(page.tasks);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(tasks),
            }
        }
    }
}

/// The owner item's part of a capped reminder insert: conditional on the
/// version counted, it replaces the list with the ids still worth listing
/// plus the new one (one `SET`: an expression may not `ADD` and `DELETE`
/// the same set).
fn owner_update(
    table: &str,
    workspace: &str,
    principal: &str,
    task_id: &TaskId,
    owner: &OwnerReminders,
) -> Result<TransactWriteItem, StoreError> {
    let builder = aws_sdk_dynamodb::types::Update::builder()
        .table_name(table)
        .set_key(Some(Key::owner(workspace, principal).to_map()))
        .expression_attribute_names("#entity", ENTITY)
        .expression_attribute_values(":entity", AttributeValue::S("owner".to_owned()))
        .expression_attribute_values(":one", AttributeValue::N("1".to_owned()));
    let mut ids: Vec<String> = owner.kept().iter().map(TaskId::to_string).collect();
    if !ids.contains(&task_id.to_string()) {
        ids.push(task_id.to_string());
    }
    let builder = builder
        .update_expression("SET #entity = :entity, reminders = :ids ADD version :one")
        .expression_attribute_values(":ids", AttributeValue::Ss(ids));
    let update = if owner.version == 0 {
        builder
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
    } else {
        builder
            .condition_expression("version = :read")
            .expression_attribute_values(":read", AttributeValue::N(owner.version.to_string()))
    };
    let update = update.build().map_err(|e| request_error("TransactWriteItems", e))?;
    Ok(TransactWriteItem::builder().update(update).build())
}
