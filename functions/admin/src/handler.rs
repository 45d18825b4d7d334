//! The admin handler: decode the invoke payload strictly (a repeated key is
//! refused, not silently resolved) into an [`AdminRequest`], run the admin
//! use case, encode its answer. Refusals are `ok: false` answers; internal
//! failures are function errors.

use chrono::{DateTime, Utc};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::queue::RunsQueue;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::{Admin, AdminError, AdminRefusal, AdminRequest, AdminSettings};
use shared::config::AdminConfig;
use shared::domain::payload::{self, Payload};
use shared::ports::{CallApprovals, ReminderStore, RunQueue, Schedules, TaskCatalog, TaskStore, WorkspaceBudgets};

pub type App = Admin<DynamoStore, EventBridgeSchedules, RunsQueue>;

pub fn build(sdk: &aws_config::SdkConfig, config: AdminConfig) -> App {
    Admin::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        EventBridgeSchedules::from_sdk(sdk, config.target),
        RunsQueue::from_sdk(sdk, config.run_queue_url),
        AdminSettings {
            max_active: config.max_active,
            retention: config.retention,
        },
    )
}

/// The request an invoke payload holds, or why it is refused: a payload
/// that names a workspace other than its principal's is `forbidden` (tasks
/// are looked up in the principal's own); a repeated key, or a payload that
/// is no admin request, is `invalid_request`.
pub fn decode(payload: Payload) -> Result<AdminRequest, AdminRefusal> {
    let named = payload.value.get("workspace").and_then(Value::as_str);
    let own = payload.value.pointer("/principal/workspace").and_then(Value::as_str);
    if named.is_some() && named != own {
        return Err(AdminRefusal::Forbidden);
    }
    if let Some(key) = &payload.duplicate_key {
        return Err(AdminRefusal::InvalidRequest(format!(
            "malformed request: the key `{key}` appears more than once; each key must appear once"
        )));
    }
    serde_json::from_value(payload.value).map_err(|e| AdminRefusal::InvalidRequest(format!("malformed request: {e}")))
}

/// Decodes a payload and answers it: what the function returns.
pub async fn answer<S, G, Q>(app: &Admin<S, G, Q>, payload: Payload, now: DateTime<Utc>) -> Result<Value, AdminError>
where
    S: TaskCatalog + TaskStore + ReminderStore + WorkspaceBudgets + CallApprovals,
    G: Schedules,
    Q: RunQueue,
{
    let outcome = match decode(payload) {
        Ok(request) => app.handle(request, now).await?,
        Err(refusal) => {
            tracing::info!(code = refusal.code(), "admin request refused");
            Err(refusal)
        }
    };
    Ok(match outcome {
        Ok(answer) => payload::answered(&answer),
        Err(refusal) => refused(&refusal),
    })
}

/// A refusal as the admin's answer: `ok: false` with its stable code.
pub fn refused(refusal: &AdminRefusal) -> Value {
    payload::refused(refusal.code(), &refusal.to_string())
}

pub async fn handle(app: &App, event: LambdaEvent<Payload>) -> Result<Value, Error> {
    answer(app, event.payload, Utc::now()).await.map_err(|error| {
        tracing::error!(error = %shared::error_chain(&error), "admin request failed");
        error.into()
    })
}
