//! Run now (SPEC §8, §11): one extra occurrence of a task now, for a
//! reminder's owner (`app::schedules`) and a workspace admin (`app::admin`)
//! alike, once the caller has found the task and checked that it may ask.
//! [`request`] reads as its steps:
//!
//! 1. **Replay**: a key already used answers what it answered, the same
//!    occurrence, and sends its message again while it has no run record
//!    (a crash after the write and before the send); another input under
//!    the key is a conflict.
//! 2. **Occurrence**: a whole second from now that is none of the task's
//!    (`domain::task::run_now::occurrence`), recorded on the task.
//! 3. **Door**: the door's verdict on that occurrence of the task as it
//!    would be; any skip (paused, held, cancelled, completed, uninstalled)
//!    refuses the request with the door's reason, and nothing is written.
//! 4. **Write**: the task, conditional on the version the caller read, with
//!    the key's idempotency record, through `app::change::commit_with`.
//! 5. **Send**: the run message, as Scheduler would deliver it, to the runs
//!    queue. From there it is any occurrence: the door again, the claim
//!    (exactly once), the budget, the settle, its record and its event.

use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::app::change::{Changed, commit_with};
use crate::app::change::{StepError, SurfaceError};
use crate::domain::reminder::Principal;
use crate::domain::run::door::{Facts, TaskFacts, Verdict, verdict};
use crate::domain::run::occurrence::{RunMessage, occurrence_key, run_id};
use crate::domain::schedule::format_utc;
use crate::domain::task::Task;
use crate::domain::task::idempotency::{Fingerprint, IdempotencyRecord, Replay};
use crate::domain::task::install::Install;
use crate::domain::task::run_now::{self, RunNow};
use crate::ports::{QueueError, ReminderStore, RunQueue, Schedules, StoreError, TaskCatalog, TaskStore};

/// How a run now ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Requested {
    /// Recorded and sent (or, `replayed`, recorded before).
    Sent {
        run_id: String,
        task: Box<Task>,
        replayed: bool,
    },
    /// Not asked of the runner, and why in words.
    Refused(String),
    /// The task moved since it was read; its version now (0: gone).
    VersionMoved { current: u64 },
    /// The key was used with another input.
    Conflict,
}

/// What a run now could not do: the caller retries with the same key.
#[derive(Debug, thiserror::Error)]
pub enum RunNowFailure {
    #[error(transparent)]
    Step(#[from] StepError),
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<RunNowFailure> for SurfaceError {
    fn from(e: RunNowFailure) -> Self {
        match e {
            RunNowFailure::Step(e) => SurfaceError::Step(e),
            RunNowFailure::Queue(e) => SurfaceError::Queue(e),
        }
    }
}

impl From<StoreError> for RunNowFailure {
    fn from(e: StoreError) -> Self {
        RunNowFailure::Step(StepError::Store(e))
    }
}

/// The door is asked as if the occurrence were delivered at once: late is
/// never its reason, whatever the deployment's window.
const AT_ONCE: Duration = Duration::hours(1);

/// What a replay of the key must match: the caller, the task and the
/// version it was asked against.
pub fn fingerprint(principal: &Principal, task: &Task, expected_version: u64) -> Fingerprint {
    Fingerprint::of(&json!({
        "op": "run_now",
        "workspace": principal.workspace,
        "principal": principal.id,
        "task_id": task.task_id,
        "expected_version": expected_version,
    }))
}

/// The run message of a run now: Scheduler's shape, an execution id of
/// its own for each send (Scheduler's changes on every delivery).
fn message(task: &Task, at: DateTime<Utc>, key: &str, now: DateTime<Utc>) -> RunMessage {
    let seed = format!(
        "{}\n{key}\n{}",
        task.task_id,
        now.timestamp_nanos_opt().unwrap_or_default()
    );
    let digest = Sha256::digest(seed.as_bytes());
    RunMessage {
        task_id: task.task_id.to_string(),
        workspace: task.workspace.clone(),
        scheduled_time: format_utc(at),
        execution_id: format!("run-now-{}", &hex::encode(digest)[..32]),
        attempt: "1".to_owned(),
        resume: None,
    }
}

/// Steps 2 and 3: the extra occurrence (a free whole second), recorded on
/// the task as `updated`, and the door's verdict on it, asked as if it were
/// delivered at once; why not, in words.
fn planned(
    task: &Task,
    principal: &Principal,
    key: &str,
    install: Option<&Install>,
    now: DateTime<Utc>,
) -> Result<(DateTime<Utc>, Task), String> {
    let at = run_now::occurrence(
        &task.spec.schedule,
        |k| task.claims.contains_key(k) || task.run_now.contains_key(k),
        now,
    );
    let mut updated = task.clone();
    let asked = RunNow {
        key: key.to_owned(),
        by: principal.id.clone(),
        requested_at: now,
    };
    updated.run_now = run_now::record(&task.run_now, at, asked, now).map_err(|why| why.to_string())?;
    let facts = Facts {
        worker_enabled: true,
        scheduled: at,
        now,
        catch_up: AT_ONCE,
        task: TaskFacts::Present {
            task: &updated,
            install,
        },
    };
    match verdict(&facts) {
        Verdict::Skip(reason) => Err(format!(
            "it would not run now: the door skips it ({})",
            reason.describe()
        )),
        Verdict::Run => Ok((at, updated)),
    }
}

/// One run now asked: by `principal`, of `task` as read at
/// `expected_version` (with its install, for a connector task's door),
/// under `key`.
pub struct Ask<'a> {
    pub principal: &'a Principal,
    pub task: &'a Task,
    pub install: Option<&'a Install>,
    pub key: &'a str,
    pub expected_version: u64,
}

/// The run now `ask` asks for, at `now`, through the store, the schedules
/// and the runs queue. See the module doc for the steps.
pub async fn request<S, G, Q>(
    (store, schedules, queue): (&S, &G, &Q),
    ask: Ask<'_>,
    now: DateTime<Utc>,
    retention: Duration,
) -> Result<Requested, RunNowFailure>
where
    S: TaskStore + TaskCatalog + ReminderStore,
    G: Schedules,
    Q: RunQueue,
{
    let Ask {
        principal,
        task,
        install,
        key,
        expected_version,
    } = ask;
    let fingerprint = fingerprint(principal, task, expected_version);
    // 1. Replay.
    if let Some(record) = store
        .idempotency_record(&principal.workspace, &principal.id, key)
        .await?
    {
        return replay(store, queue, task, &record, &fingerprint, key, now).await;
    }
    if task.version != expected_version {
        return Ok(Requested::VersionMoved { current: task.version });
    }
    // 2. Occurrence; 3. door.
    let (at, updated) = match planned(task, principal, key, install, now) {
        Ok(planned) => planned,
        Err(why) => return Ok(Requested::Refused(why)),
    };
    // 4. Write.
    let record = key_record(principal, key, &fingerprint, task, at, (now, retention));
    let written = match commit_with(store, schedules, task, updated, now, retention, Some(&record)).await? {
        Changed::Written(task) => task,
        Changed::VersionMoved { current } => return Ok(Requested::VersionMoved { current }),
        Changed::KeyTaken => {
            return match store
                .idempotency_record(&principal.workspace, &principal.id, key)
                .await?
            {
                Some(winner) => replay(store, queue, task, &winner, &fingerprint, key, now).await,
                None => Ok(Requested::Conflict),
            };
        }
    };
    // 5. Send.
    queue.send_run(&message(&written, at, key, now)).await?;
    tracing::info!(task_id = %written.task_id, occurrence = %occurrence_key(at), "run now sent");
    Ok(Requested::Sent {
        run_id: run_id(written.task_id.as_str(), at),
        task: written,
        replayed: false,
    })
}

/// The key's record, written with the run now's occurrence and kept for
/// `retention`.
fn key_record(
    principal: &Principal,
    key: &str,
    fingerprint: &Fingerprint,
    task: &Task,
    at: DateTime<Utc>,
    (now, retention): (DateTime<Utc>, Duration),
) -> IdempotencyRecord {
    IdempotencyRecord {
        principal: principal.id.clone(),
        key: key.to_owned(),
        fingerprint: fingerprint.clone(),
        task_id: task.task_id.clone(),
        workspace: task.workspace.clone(),
        created_at: now,
        ttl: Some((now + retention).timestamp()),
        occurrence: Some(at),
    }
}

/// The answer of a key already used: the same occurrence, its message sent
/// again while it has no run record.
async fn replay<S, Q>(
    store: &S,
    queue: &Q,
    task: &Task,
    record: &IdempotencyRecord,
    fingerprint: &Fingerprint,
    key: &str,
    now: DateTime<Utc>,
) -> Result<Requested, RunNowFailure>
where
    S: TaskStore + ReminderStore,
    Q: RunQueue,
{
    let (Replay::Same(task_id), Some(at)) = (record.replay(fingerprint), record.occurrence) else {
        return Ok(Requested::Conflict);
    };
    let current = store
        .task(&task.workspace, &task_id)
        .await?
        .unwrap_or_else(|| task.clone());
    if store.run(&task_id, &occurrence_key(at)).await?.is_none() {
        queue.send_run(&message(&current, at, key, now)).await?;
    }
    Ok(Requested::Sent {
        run_id: run_id(task_id.as_str(), at),
        task: Box::new(current),
        replayed: true,
    })
}
