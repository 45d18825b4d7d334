//! The schedules handler: decode the invoke payload strictly (a repeated
//! key is refused, not silently resolved), run the use case, encode its
//! answer. Refusals are `ok: false` answers; internal failures are function
//! errors.

use chrono::{DateTime, Utc};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::queue::RunsQueue;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::create::{CreateSettings, duplicate_key};
use shared::app::schedules::{OwnerSchedules, Refusal, Request, SchedulesError, SchedulesSettings};
use shared::config::SchedulesConfig;
use shared::domain::payload::{self, Payload};
use shared::domain::reminder::Rejection;
use shared::ports::{ReminderStore, RunQueue, Schedules, TaskCatalog, TaskStore};

/// The schedules use case on the AWS adapters, answering invoke payloads.
pub struct App(pub OwnerSchedules<DynamoStore, EventBridgeSchedules, RunsQueue>);

impl App {
    /// Decodes a payload and answers it at `now`: what the function returns.
    pub async fn handle(&self, payload: impl Into<Payload>, now: DateTime<Utc>) -> Result<Value, SchedulesError> {
        answer(&self.0, payload.into(), now).await
    }
}

/// Wires the use case to the AWS adapters. Called once, at start-up.
pub fn build(sdk: &aws_config::SdkConfig, config: SchedulesConfig) -> App {
    App(OwnerSchedules::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        EventBridgeSchedules::from_sdk(sdk, config.target),
        RunsQueue::from_sdk(sdk, config.run_queue_url),
        SchedulesSettings {
            create: CreateSettings {
                flags: config.flags,
                ceilings: config.ceilings,
            },
            max_active: config.max_active,
            retention: config.retention,
        },
    ))
}

/// The request an invoke payload holds, or why it is refused: a repeated
/// key anywhere, or a payload that is no schedules request, is
/// `invalid_request`.
pub fn decode(payload: Payload) -> Result<Request, Refusal> {
    if let Some(key) = &payload.duplicate_key {
        return Err(Refusal::Reminder(duplicate_key(key)));
    }
    serde_json::from_value(payload.value)
        .map_err(|e| Refusal::Reminder(Rejection::InvalidRequest(format!("malformed request: {e}"))))
}

/// Decodes a payload, answers it and encodes the answer: `{"ok": true,
/// ...answer}` or `{"ok": false, "error": {"code", "message"}}`. A
/// disabled surface says so before anything else is read.
pub async fn answer<S, G, Q>(
    app: &OwnerSchedules<S, G, Q>,
    payload: Payload,
    now: DateTime<Utc>,
) -> Result<Value, SchedulesError>
where
    S: TaskStore + TaskCatalog + ReminderStore,
    G: Schedules,
    Q: RunQueue,
{
    let op = payload
        .value
        .get("op")
        .and_then(Value::as_str)
        .and_then(shared::app::schedules::Op::named);
    let outcome = match app.gate(op).and_then(|()| decode(payload)) {
        Ok(request) => app.answer(request, now).await?,
        Err(refusal) => {
            tracing::info!(code = refusal.code(), "schedules request refused");
            Err(refusal)
        }
    };
    Ok(match outcome {
        Ok(answer) => payload::answered(&answer),
        Err(refusal) => payload::refused(refusal.code(), &refusal.to_string()),
    })
}

pub async fn handle(app: &App, event: LambdaEvent<Payload>) -> Result<Value, Error> {
    app.handle(event.payload, Utc::now()).await.map_err(|error| {
        tracing::error!(error = %shared::error_chain(&error), "schedules request failed; the caller retries");
        error.into()
    })
}
