//! Idempotency of create: a principal's key names one task for good.
//!
//! Invariants: keys are scoped per principal within its workspace; a record
//! is written in the same transaction as its task, so a record exists
//! while its task does (both expire after a reminder finishes); the
//! fingerprint covers everything a caller chose except the key itself and the
//! principal's current scopes (a retry may carry refreshed scopes), with
//! instants compared as instants, not as spellings.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::domain::task::TaskId;

/// A SHA-256 (hex) over the canonical form of a request's input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fingerprint(String);

impl Fingerprint {
    /// Hashes a value's JSON form. Callers pass a struct, whose fields
    /// serialise in declaration order, so the form is canonical.
    pub fn of<T: Serialize>(canonical: &T) -> Self {
        // Serialising a plain struct of strings and numbers cannot fail.
        let bytes = serde_json::to_vec(canonical).unwrap_or_default();
        Self(hex::encode(Sha256::digest(&bytes)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a principal's key is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    pub principal: String,
    pub key: String,
    pub fingerprint: Fingerprint,
    pub task_id: TaskId,
    pub workspace: String,
    pub created_at: DateTime<Utc>,
    /// Unix seconds: DynamoDB's TTL removes the record after this. A
    /// create's record gets one when its reminder finishes; an update's
    /// when it is written (it only guards that update's retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// A run now's occurrence: what a replay of its key answers (and sends
    /// again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<DateTime<Utc>>,
}

/// What a second call with a recorded key gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replay {
    /// Same input: the recorded task, `replayed: true`.
    Same(TaskId),
    /// Different input: refused, nothing changes.
    Conflict,
}

impl IdempotencyRecord {
    pub fn replay(&self, fingerprint: &Fingerprint) -> Replay {
        if &self.fingerprint == fingerprint {
            Replay::Same(self.task_id.clone())
        } else {
            Replay::Conflict
        }
    }
}
