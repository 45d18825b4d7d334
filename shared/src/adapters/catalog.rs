//! Reconcile's and admin's view of the table: a workspace's tasks and
//! installs, versioned task writes, webhook ids.
//!
//! Invariant: a write of an existing task sets only the attributes its
//! owners hold (spec, pending, hold, override, approval, the prompt's
//! arguments, the declaration note, the derived attributes, version), never
//! the runner's (`claims`, `budget_used`), and only if the version is still
//! the one read; so an admin, a reconcile and a run never lose each other's
//! change.

use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, Utc};

use super::dynamo::{DynamoStore, Item, read_item, read_items, request_error, task_item, to_item, written};
use super::keys::Family;
use super::keys::{
    GSI1PK, GSI1SK, GSI3PK, GSI3SK, INDEX, INSTALLED, IndexKey, Key, PK, SCHEDULABLE_INDEX, SK, SchedulableKey,
};
use crate::domain::connector::reconcile::Write;
use crate::domain::run::occurrence::occurrence_key;
use crate::domain::task::install::Install;
use crate::domain::task::{Task, TaskId};
use crate::ports::{Cursor, DueIndex, Inserted, Page, StoreError, TaskCatalog, Versioned};

/// The runner's bookkeeping on a task item: claimed and settled by the
/// runner alone, with its own conditions, while admins, owners and
/// reconcile change the task. A change never sends these, even when the
/// copy it read is stale.
const RUNNER_OWNED: [&str; 2] = ["claims", "budget_used"];

/// A versioned change of a task item: the attributes that differ between
/// the task as read and as edited (set, or removed when the edit dropped
/// them), conditional on the version read. Derived from the two items, so
/// an edited field is written whatever its name.
pub(crate) struct TaskChange {
    pub expression: String,
    pub names: std::collections::HashMap<String, String>,
    pub values: std::collections::HashMap<String, AttributeValue>,
}

impl TaskChange {
    pub(crate) fn between(before: &Task, after: &Task) -> Result<Self, StoreError> {
        let old = task_item(before)?;
        let new = task_item(after)?;
        let mut names = std::collections::HashMap::from([("#version".to_owned(), "version".to_owned())]);
        let mut values =
            std::collections::HashMap::from([(":read".to_owned(), AttributeValue::N(before.version.to_string()))]);
        let mut sets = Vec::new();
        let mut removes = Vec::new();
        let mut attributes: Vec<&String> = old.keys().chain(new.keys()).collect();
        attributes.sort();
        attributes.dedup();
        for (i, name) in attributes
            .into_iter()
            .filter(|name| !RUNNER_OWNED.contains(&name.as_str()))
            .enumerate()
        {
            match (old.get(name), new.get(name)) {
                (Some(a), Some(b)) if a == b => continue,
                (_, Some(value)) => {
                    sets.push(format!("#a{i} = :v{i}"));
                    values.insert(format!(":v{i}"), value.clone());
                }
                (Some(_), None) => removes.push(format!("#a{i}")),
                (None, None) => continue,
            }
            names.insert(format!("#a{i}"), name.clone());
        }
        let mut expression = String::new();
        if !sets.is_empty() {
            expression.push_str(&format!("SET {}", sets.join(", ")));
        }
        if !removes.is_empty() {
            expression.push_str(&format!(" REMOVE {}", removes.join(", ")));
        }
        Ok(Self {
            expression: expression.trim().to_owned(),
            names,
            values,
        })
    }
}

/// Webhook ids are remembered this long; the replay window is five minutes.
const WEBHOOK_ID_DAYS: i64 = 2;

impl DynamoStore {
    /// Every page of a query (or its first page only, with a `limit`).
    pub(crate) async fn query_pages(
        &self,
        query: QueryFluentBuilder,
        limit: Option<i32>,
    ) -> Result<Vec<Item>, StoreError> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            self.counted();
            let out = query
                .clone()
                .set_limit(limit)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| request_error("Query", e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() || limit.is_some() {
                return Ok(items);
            }
        }
    }

    /// A query of one partition of an index (`gsi1`: `GSI1PK`; `gsi3`: `GSI3PK`).
    fn index_query(&self, index: &str, key: &str, partition: &str) -> QueryFluentBuilder {
        self.client()
            .query()
            .table_name(self.table())
            .index_name(index)
            .key_condition_expression("#pk = :pk")
            .expression_attribute_names("#pk", key)
            .expression_attribute_values(":pk", AttributeValue::S(partition.to_owned()))
    }

    /// The keys of the index entries in one `gsi1` partition.
    async fn query_index(&self, partition: &str, limit: Option<i32>) -> Result<Vec<Item>, StoreError> {
        self.query_pages(self.index_query(INDEX, GSI1PK, partition), limit)
            .await
    }

    /// A strongly consistent query of the items of partition `pk` whose
    /// sort key begins with `prefix`.
    pub(crate) fn prefix_query(&self, pk: &str, prefix: &str) -> QueryFluentBuilder {
        self.client()
            .query()
            .table_name(self.table())
            .key_condition_expression("#pk = :pk AND begins_with(#sk, :prefix)")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", AttributeValue::S(pk.to_owned()))
            .expression_attribute_values(":prefix", AttributeValue::S(prefix.to_owned()))
            .consistent_read(true)
    }

    async fn query_prefix(&self, pk: &str, prefix: &str) -> Result<Vec<Item>, StoreError> {
        self.query_pages(self.prefix_query(pk, prefix), None).await
    }
}

fn key_attribute<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn corrupt_index_entry(item: &Item) -> StoreError {
    StoreError::Corrupt {
        what: "index entry".to_owned(),
        source: format!("unexpected keys {:?} / {:?}", item.get(PK), item.get(SK)).into(),
    }
}

/// (workspace, install id) of an installed connector's index entry.
fn install_at(item: &Item) -> Result<(String, String), StoreError> {
    let workspace = key_attribute(item, PK).and_then(Key::workspace_of);
    let install = key_attribute(item, SK).and_then(Key::install_id_of);
    match (workspace, install) {
        (Some(w), Some(i)) => Ok((w.to_owned(), i.to_owned())),
        _ => Err(corrupt_index_entry(item)),
    }
}

impl TaskCatalog for DynamoStore {
    async fn workspace_tasks(&self, workspace: &str) -> Result<Vec<Task>, StoreError> {
        let items = self
            .query_prefix(&super::keys::workspace_partition(workspace), super::keys::TASK_PREFIX)
            .await?;
        items.into_iter().map(|i| read_item(i, "task")).collect()
    }

    async fn connector_tasks(&self, workspace: &str) -> Result<Vec<Task>, StoreError> {
        let prefix = format!(
            "{}{}",
            super::keys::TASK_PREFIX,
            crate::domain::task::TaskId::CONNECTOR_PREFIX
        );
        let items = self
            .query_prefix(&super::keys::workspace_partition(workspace), &prefix)
            .await?;
        items.into_iter().map(|i| read_item(i, "task")).collect()
    }

    async fn workspace_tasks_page(
        &self,
        workspace: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<Task>, Option<String>), StoreError> {
        let query = self
            .prefix_query(&super::keys::workspace_partition(workspace), super::keys::TASK_PREFIX)
            .set_exclusive_start_key(after.map(|id| Key::task(workspace, id).to_map()))
            .limit(i32::try_from(limit.max(1)).unwrap_or(i32::MAX));
        self.counted();
        let out = query.send().await.map_err(|e| request_error("Query", e))?;
        let tasks: Vec<Task> = read_items(out.items, "task")?;
        let next = out
            .last_evaluated_key
            .and(tasks.last().map(|t| t.task_id.as_str().to_owned()));
        Ok((tasks, next))
    }

    async fn workspace_installs(&self, workspace: &str) -> Result<Vec<Install>, StoreError> {
        let items = self
            .query_prefix(
                &super::keys::workspace_partition(workspace),
                super::keys::INSTALL_PREFIX,
            )
            .await?;
        items.into_iter().map(|i| read_item(i, "install")).collect()
    }

    async fn install(&self, workspace: &str, install_id: &str) -> Result<Option<Install>, StoreError> {
        self.get_item(Key::install(workspace, install_id), "install").await
    }

    async fn put_install(&self, install: &Install) -> Result<(), StoreError> {
        DynamoStore::put_install(self, install).await
    }

    async fn installed_page(&self, after: Option<&Cursor>, limit: usize) -> Result<Page<Cursor>, StoreError> {
        let mut query = self
            .index_query(INDEX, GSI1PK, INSTALLED)
            .limit(i32::try_from(limit).unwrap_or(i32::MAX));
        if let Some(after) = after {
            let mut start = Key::install(&after.workspace, &after.id).to_map();
            let index = IndexKey::installed(&after.workspace, &after.id);
            start.insert(GSI1PK.to_owned(), AttributeValue::S(index.gsi1pk));
            start.insert(GSI1SK.to_owned(), AttributeValue::S(index.gsi1sk));
            query = query.set_exclusive_start_key(Some(start));
        }
        self.counted();
        let out = query.send().await.map_err(|e| request_error("Query", e))?;
        let items: Vec<Cursor> = out
            .items
            .unwrap_or_default()
            .iter()
            .map(install_at)
            .map(|r| {
                r.map(|(workspace, id)| Cursor {
                    workspace,
                    id,
                    sort: None,
                })
            })
            .collect::<Result<_, _>>()?;
        let next = out.last_evaluated_key.and(items.last().cloned());
        Ok(Page { items, next })
    }

    async fn task_workspace(&self, task_id: &TaskId) -> Result<Option<String>, StoreError> {
        let items = self
            .query_index(&IndexKey::task_partition(task_id.as_str()), Some(1))
            .await?;
        items
            .first()
            .map(|item| {
                key_attribute(item, PK)
                    .and_then(Key::workspace_of)
                    .map(str::to_owned)
                    .ok_or_else(|| corrupt_index_entry(item))
            })
            .transpose()
    }

    async fn write_task(&self, write: &Write) -> Result<Versioned, StoreError> {
        let Some(before) = write.before.as_deref() else {
            return Ok(match self.insert_task(&write.task).await? {
                Inserted::Created => Versioned::Written,
                Inserted::KeyTaken => Versioned::Conflict,
            });
        };
        let change = TaskChange::between(before, &write.task)?;
        let update = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(
                Key::task(&write.task.workspace, write.task.task_id.as_str()).to_map(),
            ))
            .condition_expression("#version = :read")
            .set_expression_attribute_names(Some(change.names))
            .set_expression_attribute_values(Some(change.values))
            .update_expression(change.expression);
        self.counted();
        let result = update.send().await;
        Ok(if written("UpdateItem", result)? {
            Versioned::Written
        } else {
            Versioned::Conflict
        })
    }

    async fn schedulable_page(
        &self,
        shard: u8,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<Task>, StoreError> {
        self.schedulable_index_page(Family::Reminders, shard, None, after, limit)
            .await
    }

    async fn seen_delivery(&self, webhook_id: &str) -> Result<bool, StoreError> {
        #[derive(serde::Deserialize)]
        struct Seen {}
        Ok(self
            .get_item::<Seen>(Key::webhook(webhook_id), "webhook id")
            .await?
            .is_some())
    }

    async fn record_delivery(&self, webhook_id: &str, now: DateTime<Utc>) -> Result<(), StoreError> {
        #[derive(serde::Serialize)]
        struct Seen {
            received_at: DateTime<Utc>,
            ttl: i64,
        }
        let key = Key::webhook(webhook_id);
        let item = to_item(
            &Seen {
                received_at: now,
                ttl: (now + Duration::days(WEBHOOK_ID_DAYS)).timestamp(),
            },
            &key,
            "webhook",
        )?;
        // Not written: a duplicate recorded meanwhile, nothing to do.
        self.put_new(item).await.map(drop)
    }

    async fn record_probe(&self, probe: &str, hop: u8, now: DateTime<Utc>) -> Result<(), StoreError> {
        let key = Key::probe(probe);
        let item = to_item(
            &Probe {
                hop,
                at: now,
                ttl: (now + Duration::days(1)).timestamp(),
            },
            &key,
            "probe",
        )?;
        // A chain's hops come one after another: the last written is the
        // furthest.
        self.put(item).await
    }

    async fn probe_reached(&self, probe: &str) -> Result<Option<u8>, StoreError> {
        Ok(self.get_item::<Probe>(Key::probe(probe), "probe").await?.map(|p| p.hop))
    }
}

/// How far a probe chain came (`Pass::Probe`).
#[derive(serde::Serialize, serde::Deserialize)]
struct Probe {
    hop: u8,
    at: DateTime<Utc>,
    ttl: i64,
}

impl DueIndex for DynamoStore {
    async fn undue_page(
        &self,
        after: Option<&crate::ports::TableCursor>,
        limit: usize,
    ) -> Result<crate::ports::ScanPage, StoreError> {
        let start = after.map(|c| {
            std::collections::HashMap::from([
                (PK.to_owned(), AttributeValue::S(c.pk.clone())),
                (SK.to_owned(), AttributeValue::S(c.sk.clone())),
            ])
        });
        self.counted();
        let out = self
            .client()
            .scan()
            .table_name(self.table())
            .filter_expression("#entity = :task AND attribute_not_exists(#due)")
            .expression_attribute_names("#entity", "entity")
            .expression_attribute_names("#due", "due")
            .expression_attribute_values(":task", AttributeValue::S("task".to_owned()))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| request_error("Scan", e))?;
        let items: Vec<Task> = read_items(out.items, "task")?;
        let text = |key: &Item, name: &str| key.get(name).and_then(|v| v.as_s().ok()).cloned();
        let next = out.last_evaluated_key.and_then(|key| {
            Some(crate::ports::TableCursor {
                pk: text(&key, PK)?,
                sk: text(&key, SK)?,
            })
        });
        Ok(crate::ports::ScanPage { items, next })
    }

    async fn due_page(
        &self,
        family: Family,
        shard: u8,
        before: DateTime<Utc>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<Task>, StoreError> {
        self.schedulable_index_page(family, shard, Some(before), after, limit)
            .await
    }

    async fn recorded_times(
        &self,
        task_id: &TaskId,
        from: DateTime<Utc>,
        before: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Utc>>, StoreError> {
        if from >= before {
            return Ok(Vec::new());
        }
        let first = Key::run(task_id.as_str(), &occurrence_key(from));
        let last = Key::run(task_id.as_str(), &occurrence_key(before));
        let query = self
            .client()
            .query()
            .table_name(self.table())
            .key_condition_expression("#pk = :pk AND #sk BETWEEN :first AND :last")
            .expression_attribute_names("#pk", PK)
            .expression_attribute_names("#sk", SK)
            .expression_attribute_values(":pk", AttributeValue::S(first.pk))
            .expression_attribute_values(":first", AttributeValue::S(first.sk))
            .expression_attribute_values(":last", AttributeValue::S(last.sk))
            .projection_expression("#sk")
            .consistent_read(true);
        let items = self.query_pages(query, None).await?;
        Ok(items
            .iter()
            .filter_map(|item| key_attribute(item, SK))
            .filter_map(|sk| sk.split_once('#').map(|(_, at)| at))
            .filter_map(crate::domain::schedule::parse_instant)
            .filter(|at| *at < before)
            .collect())
    }

    async fn check_cursor(&self, family: Family, shard: u8) -> Result<Option<Cursor>, StoreError> {
        #[derive(serde::Deserialize)]
        struct Saved {
            #[serde(default)]
            cursor: Option<Cursor>,
        }
        let saved: Option<Saved> = self
            .get_item(Key::check_cursor(family.as_str(), shard), "check cursor")
            .await?;
        Ok(saved.and_then(|s| s.cursor))
    }

    /// A shard that reached its end keeps its item without a cursor (the
    /// next period starts from the first task): a put, as every other
    /// save is, so the worker's role needs no `dynamodb:DeleteItem`, which
    /// would let it delete any item of the table.
    async fn save_check_cursor(&self, family: Family, shard: u8, cursor: Option<&Cursor>) -> Result<(), StoreError> {
        let key = Key::check_cursor(family.as_str(), shard);
        let mut item = key.to_map();
        item.insert("entity".to_owned(), AttributeValue::S("check_cursor".to_owned()));
        if let Some(cursor) = cursor {
            let cursor = serde_dynamo::to_attribute_value(cursor).map_err(|e| StoreError::Corrupt {
                what: "check cursor".into(),
                source: Box::new(e),
            })?;
            item.insert("cursor".to_owned(), cursor);
        }
        self.put(item).await
    }

    async fn move_due(&self, task: &Task, to: Option<DateTime<Utc>>) -> Result<bool, StoreError> {
        let mut moved = task.clone();
        moved.due = to;
        let mut names = std::collections::HashMap::from([
            ("#pk".to_owned(), PK.to_owned()),
            ("#due".to_owned(), "due".to_owned()),
            ("#gsi3pk".to_owned(), GSI3PK.to_owned()),
            ("#gsi3sk".to_owned(), GSI3SK.to_owned()),
        ]);
        let mut values = std::collections::HashMap::new();
        let mut sets = Vec::new();
        let mut removes = Vec::new();
        match to {
            Some(to) => {
                sets.push("#due = :to");
                values.insert(":to".to_owned(), instant(to)?);
            }
            None => removes.push("#due"),
        }
        // A one-time task with nothing left to expect has finished (its
        // completion took it out of the index): it stays out.
        let index = if to.is_none() && task.spec.schedule.is_one_time() {
            None
        } else {
            SchedulableKey::of(&moved)
        };
        match index {
            Some(index) => {
                sets.push("#gsi3pk = :gsi3pk, #gsi3sk = :gsi3sk");
                values.insert(":gsi3pk".to_owned(), AttributeValue::S(index.gsi3pk));
                values.insert(":gsi3sk".to_owned(), AttributeValue::S(index.gsi3sk));
            }
            None => removes.push("#gsi3pk, #gsi3sk"),
        }
        let condition = match task.due {
            Some(due) => {
                values.insert(":from".to_owned(), instant(due)?);
                "attribute_exists(#pk) AND #due = :from"
            }
            None => "attribute_exists(#pk) AND attribute_not_exists(#due)",
        };
        let expression = set_and_remove(&sets, &removes);
        names.retain(|name, _| expression.contains(name.as_str()) || condition.contains(name.as_str()));
        self.counted();
        let result = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(Key::task(&task.workspace, task.task_id.as_str()).to_map()))
            .update_expression(expression.trim())
            .condition_expression(condition)
            .set_expression_attribute_names(Some(names))
            .set_expression_attribute_values(Some(values))
            .send()
            .await;
        written("UpdateItem", result)
    }
}

/// An update expression of these `SET` and `REMOVE` actions.
fn set_and_remove(sets: &[&str], removes: &[&str]) -> String {
    let mut clauses = Vec::new();
    if !sets.is_empty() {
        clauses.push(format!("SET {}", sets.join(", ")));
    }
    if !removes.is_empty() {
        clauses.push(format!("REMOVE {}", removes.join(", ")));
    }
    clauses.join(" ")
}

/// An instant as the task item stores it (its serde form).
fn instant(at: DateTime<Utc>) -> Result<AttributeValue, StoreError> {
    serde_dynamo::to_attribute_value(at).map_err(|e| StoreError::Corrupt {
        what: "instant".into(),
        source: Box::new(e),
    })
}

impl DynamoStore {
    /// One page of one shard of the schedulable index (`gsi3`, sorted by
    /// `<due or ~>#<task_id>`), in `family`, due before `before` when given,
    /// after `after`: the daily pass's reminder pages and the
    /// missed-occurrence check's alike.
    async fn schedulable_index_page(
        &self,
        family: Family,
        shard: u8,
        before: Option<DateTime<Utc>>,
        after: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page<Task>, StoreError> {
        // A cursor from before the index sorted by due names the id alone.
        let start =
            after.map(|c| SchedulableKey::start_after(family, &c.workspace, &c.id, c.sort.as_deref().unwrap_or(&c.id)));
        let mut query = self
            .client()
            .query()
            .table_name(self.table())
            .index_name(SCHEDULABLE_INDEX)
            .expression_attribute_names("#pk", GSI3PK)
            .expression_attribute_values(":pk", AttributeValue::S(SchedulableKey::partition(family, shard)))
            .limit(i32::try_from(limit).unwrap_or(i32::MAX))
            .set_exclusive_start_key(start);
        query = match before {
            Some(before) => query
                .key_condition_expression("#pk = :pk AND #sk < :before")
                .expression_attribute_names("#sk", GSI3SK)
                .expression_attribute_values(":before", AttributeValue::S(SchedulableKey::due_before(before))),
            None => query.key_condition_expression("#pk = :pk"),
        };
        self.counted();
        let out = query.send().await.map_err(|e| request_error("Query", e))?;
        // The cursor names the last entry's sort key as stored: one the
        // last release wrote sorts by its `due` alone.
        let stored = out
            .items
            .as_ref()
            .and_then(|items| items.last())
            .and_then(|item| item.get(GSI3SK))
            .and_then(|sk| sk.as_s().ok())
            .cloned();
        let items: Vec<Task> = read_items(out.items, "task")?;
        let next = out.last_evaluated_key.and(items.last()).map(|t| Cursor {
            workspace: t.workspace.clone(),
            id: t.task_id.to_string(),
            sort: Some(stored.unwrap_or_else(|| {
                SchedulableKey::sort(crate::domain::operations::overdue::judgeable_at(t), t.task_id.as_str())
            })),
        });
        Ok(Page { items, next })
    }
}
