//! An occurrence's journal (`domain::run::journal`) on the table: one item
//! per call beside the occurrence's run record (`Key::journal_call`), and
//! the outcome a settle that failed once keeps (`Key::journal_outcome`).
//! A call's item is put only where none is (a position journaled by an
//! earlier attempt stays as it was); the journal is read strongly, every
//! page: at most the run's tool calls of items, each below
//! `journal::MAX_ARGUMENT_BYTES` plus `journal::MAX_ANSWER_CHARS`.

use super::dynamo::{DynamoStore, read_item, to_item};
use super::keys::{ENTITY, Key, journal_prefix};
use crate::domain::run::journal::{Journal, JournaledCall, JournaledOutcome};
use crate::ports::StoreError;

const CALL: &str = "journal_call";
const OUTCOME: &str = "journal_outcome";

impl DynamoStore {
    pub(crate) async fn read_journal(&self, task_id: &str, occurrence: &str) -> Result<Journal, StoreError> {
        let pk = Key::journal_outcome(task_id, occurrence).pk;
        let items = self
            .query_pages(self.prefix_query(&pk, &journal_prefix(occurrence)), None)
            .await?;
        let mut calls = Vec::new();
        let mut outcome = None;
        for item in items {
            match item.get(ENTITY).and_then(|e| e.as_s().ok()).map(String::as_str) {
                Some(CALL) => calls.push(read_item::<JournaledCall>(item, CALL)?),
                Some(OUTCOME) => outcome = Some(read_item::<JournaledOutcome>(item, OUTCOME)?),
                _ => {}
            }
        }
        Ok(Journal::new(calls, outcome))
    }

    pub(crate) async fn put_journal_call(&self, call: &JournaledCall) -> Result<(), StoreError> {
        let key = Key::journal_call(&call.task_id, &call.scheduled_time, call.position);
        // Already journaled by an earlier attempt: that entry stands.
        self.put_new(to_item(call, &key, CALL)?).await.map(drop)
    }

    pub(crate) async fn put_journal_outcome(&self, outcome: &JournaledOutcome) -> Result<(), StoreError> {
        let key = Key::journal_outcome(&outcome.task_id, &outcome.scheduled_time);
        self.put(to_item(outcome, &key, OUTCOME)?).await
    }
}
