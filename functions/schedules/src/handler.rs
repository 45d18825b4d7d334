//! The schedules handler: decode the invoke payload strictly (a repeated
//! key is refused, not silently resolved), run the use case, encode its
//! answer. Refusals are `ok: false` answers; internal failures are function
//! errors.

use chrono::Utc;
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::create::CreateSettings;
use shared::app::schedules::{OwnerSchedules, SchedulesSettings};
use shared::config::SchedulesConfig;
use shared::domain::payload::Payload;

pub type App = OwnerSchedules<DynamoStore, EventBridgeSchedules>;

/// Wires the use case to the AWS adapters. Called once, at start-up.
pub fn build(sdk: &aws_config::SdkConfig, config: SchedulesConfig) -> App {
    OwnerSchedules::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        EventBridgeSchedules::from_sdk(sdk, config.target),
        SchedulesSettings {
            create: CreateSettings {
                flags: config.flags,
                ceilings: config.ceilings,
            },
            max_active: config.max_active,
            retention: config.retention,
        },
    )
}

pub async fn handle(app: &App, event: LambdaEvent<Payload>) -> Result<Value, Error> {
    app.handle(event.payload, Utc::now()).await.map_err(|error| {
        tracing::error!(error = %shared::error_chain(&error), "schedules request failed; the caller retries");
        error.into()
    })
}
