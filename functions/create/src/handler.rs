//! The create handler: decode the invoke payload, run the create use case,
//! encode its answer. Client errors are `ok: false` answers; internal failures
//! are function errors, so the caller retries with the same idempotency key.

use chrono::{DateTime, Utc};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::adapters::telemetry;
use shared::app::create::{CreateReminder, CreateSettings};
use shared::config::CreateConfig;
use shared::domain::payload::Payload;
use shared::trace::Traced;

pub type App = CreateReminder<DynamoStore, EventBridgeSchedules>;

/// Wires the use case to the AWS adapters. Called once, at start-up.
pub fn build(sdk: &aws_config::SdkConfig, config: CreateConfig) -> App {
    CreateReminder::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        EventBridgeSchedules::from_sdk(sdk, config.target),
        CreateSettings {
            flags: config.flags,
            ceilings: config.ceilings,
        },
    )
    .with_tracer(telemetry::tracer(sdk, &config.traces))
}

/// The payload is decoded from the caller's bytes strictly: a repeated key
/// is `invalid_request`, never resolved silently to one of its values. The
/// call's trace leaves before the answer, within a bound.
pub async fn handle(app: &App, event: LambdaEvent<Payload>) -> Result<Value, Error> {
    let deadline = DateTime::<Utc>::from(event.context.deadline());
    let answer = app.handle(event.payload, Utc::now()).await;
    let left = (deadline - Utc::now()).to_std().unwrap_or_default();
    app.tracer().flush(shared::trace::flush_budget(left)).await;
    match answer {
        Ok(answer) => Ok(answer.to_json()),
        Err(error) => {
            tracing::error!(error = %shared::error_chain(&error), "create failed; the caller retries with the same key");
            Err(error.into())
        }
    }
}
