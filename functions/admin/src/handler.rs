//! The admin handler: decode the invoke payload, run the admin use case,
//! encode its answer. Refusals are `ok: false` answers; internal failures are
//! function errors.

use chrono::Utc;
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::Admin;
use shared::config::AdminConfig;

pub type App = Admin<DynamoStore, EventBridgeSchedules>;

pub fn build(sdk: &aws_config::SdkConfig, config: AdminConfig) -> App {
    Admin::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        EventBridgeSchedules::from_sdk(sdk, config.target),
    )
}

pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    app.handle(event.payload, Utc::now()).await.map_err(|error| {
        tracing::error!(error = %shared::error_chain(&error), "admin request failed");
        error.into()
    })
}
