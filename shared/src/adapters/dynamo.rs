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

use super::keys::{ENTITY, IndexKey, Key, PK};
use crate::domain::budget;
use crate::domain::idempotency::IdempotencyRecord;
use crate::domain::task::{Task, TaskId};
use crate::ports::{Inserted, StoreError, TaskStore};

pub type Item = HashMap<String, AttributeValue>;

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
        Self::new(Client::new(sdk), table)
    }

    /// DynamoDB requests this store has sent since it was built.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    async fn get<T: DeserializeOwned>(&self, key: Key, what: &str) -> Result<Option<T>, StoreError> {
        self.count();
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .set_key(Some(key.to_map()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| request("GetItem", e))?;
        out.item.map(|item| from_item(item, what)).transpose()
    }
}

fn request<E: std::error::Error + Send + Sync + 'static>(operation: &'static str, source: E) -> StoreError {
    StoreError::Request {
        operation,
        source: Box::new(source),
    }
}

fn from_item<T: DeserializeOwned>(item: Item, what: &str) -> Result<T, StoreError> {
    serde_dynamo::from_item(item).map_err(|e| StoreError::Corrupt {
        what: what.to_owned(),
        source: Box::new(e),
    })
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
        Err(e) => Err(request(operation, e)),
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
    item.insert("state".to_owned(), AttributeValue::S(task.state().as_str().to_owned()));
    item.insert(RESERVE.to_owned(), number(budget::reservation(task)));
    if let Some(threshold) = budget::threshold(task) {
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

fn put_if_absent(table: &str, item: Item) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", PK)
        .build()
        .map_err(|e| request("TransactWriteItems", e))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

impl DynamoStore {
    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    pub(crate) fn counted(&self) {
        self.count();
    }

    /// Writes a new task, unless one already has its key. Reconcile creates
    /// connector tasks this way.
    pub async fn insert_task(&self, task: &Task) -> Result<Inserted, StoreError> {
        self.count();
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(task_item(task)?))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", PK)
            .send()
            .await;
        Ok(if written("PutItem", result)? {
            Inserted::Created
        } else {
            Inserted::KeyTaken
        })
    }

    /// Writes an install as the platform reported it.
    pub async fn put_install(&self, install: &crate::domain::install::Install) -> Result<(), StoreError> {
        self.count();
        let key = Key::install(&install.workspace, &install.install_id);
        let mut item = to_item(install, &key, "install")?;
        if install.is_installed() {
            IndexKey::installed(&install.workspace, &install.install_id).add_to(&mut item);
        }
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| request("PutItem", e))?;
        Ok(())
    }

    pub(crate) async fn get_item<T: DeserializeOwned>(&self, key: Key, what: &str) -> Result<Option<T>, StoreError> {
        self.get(key, what).await
    }
}

pub(crate) fn request_error<E: std::error::Error + Send + Sync + 'static>(
    operation: &'static str,
    source: E,
) -> StoreError {
    request(operation, source)
}

pub(crate) fn read_item<T: DeserializeOwned>(item: Item, what: &str) -> Result<T, StoreError> {
    from_item(item, what)
}

impl TaskStore for DynamoStore {
    async fn idempotency_record(&self, principal: &str, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        self.get(Key::idempotency(principal, key), "idempotency record").await
    }

    async fn task(&self, workspace: &str, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.get(Key::task(workspace, task_id.as_str()), "task").await
    }

    async fn insert_with_idempotency(&self, task: &Task, record: &IdempotencyRecord) -> Result<Inserted, StoreError> {
        let task_put = put_if_absent(&self.table, task_item(task)?)?;
        let record_key = Key::idempotency(&record.principal, &record.key);
        let record_put = put_if_absent(&self.table, to_item(record, &record_key, "idempotency")?)?;
        self.count();
        let result = self
            .client
            .transact_write_items()
            .transact_items(task_put)
            .transact_items(record_put)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Inserted::Created),
            Err(err) => {
                let condition_failed = matches!(
                    err.as_service_error(),
                    Some(TransactWriteItemsError::TransactionCanceledException(e))
                        if e.cancellation_reasons().iter().any(|r| r.code() == Some("ConditionalCheckFailed"))
                );
                if condition_failed {
                    Ok(Inserted::KeyTaken)
                } else {
                    Err(request("TransactWriteItems", err))
                }
            }
        }
    }
}
