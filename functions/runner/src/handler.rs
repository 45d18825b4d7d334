//! The runner handler: each SQS record is one delivery of an occurrence.
//! Records of a batch run concurrently (they are distinct occurrences, or
//! duplicates the claim tells apart). A record that must be delivered again
//! (a live lease elsewhere, a run given back because the model stayed
//! throttled, a transient failure) is returned in the partial
//! batch response; nothing is logged and dropped.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use lambda_runtime::{Error, LambdaEvent};
use shared::adapters::bedrock::BedrockModel;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::McpConnectors;
use shared::adapters::metrics;
use shared::app::run::{Disposition, RunSettings, Runner};
use shared::config::RunnerConfig;

pub type App = Runner<DynamoStore, BedrockModel, McpConnectors>;

/// Wires the use case to the AWS adapters. Called once, at start-up.
pub fn build(sdk: &aws_config::SdkConfig, config: RunnerConfig) -> App {
    Runner::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        BedrockModel::from_sdk(sdk),
        McpConnectors::from_sdk(sdk),
        RunSettings {
            worker_enabled: config.worker_enabled,
            catch_up: chrono::Duration::seconds(config.catch_up_seconds),
            model_id: config.model_id,
            prices: config.prices,
            ceilings: config.ceilings,
        },
    )
}

/// Delivers one record; `Some(id)` when it must come back.
async fn deliver(app: &App, record: &SqsMessage, deadline: DateTime<Utc>) -> Option<String> {
    let id = record.message_id.clone().unwrap_or_default();
    let body = record.body.as_deref().unwrap_or_default();
    match app.deliver(&id, body, Utc::now(), deadline).await {
        Ok(disposition) => {
            emit(&disposition);
            matches!(disposition, Disposition::Busy | Disposition::ReturnToQueue).then_some(id)
        }
        Err(error) => {
            tracing::error!(message_id = %id, error = %shared::error_chain(&error), "delivery failed; returned to the queue");
            Some(id)
        }
    }
}

/// The delivery's metrics (CloudWatch EMF).
fn emit(disposition: &Disposition) {
    use shared::domain::door::SkipReason;
    use shared::domain::occurrence::RunStatus;
    match disposition {
        Disposition::Ran(status) => {
            metrics::count("RunsStarted", 1, None);
            match status {
                RunStatus::Failed => metrics::count("RunsFailed", 1, None),
                _ => metrics::count("RunsSucceeded", 1, None),
            }
        }
        Disposition::Skipped(reason) => {
            metrics::count("RunsSkipped", 1, Some(("Reason", reason.code())));
            if *reason == SkipReason::BudgetExhausted {
                metrics::count("BudgetRefusals", 1, None);
            }
        }
        Disposition::Duplicate | Disposition::Busy => metrics::count("DuplicatesAbsorbed", 1, None),
        Disposition::Malformed(_) => metrics::count("MalformedMessages", 1, None),
        Disposition::ReturnToQueue => metrics::count("RunsReturnedThrottled", 1, None),
    }
}

pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let deadline = DateTime::<Utc>::from(event.context.deadline());
    let outcomes = futures::future::join_all(event.payload.records.iter().map(|r| deliver(app, r, deadline))).await;
    let mut response = SqsBatchResponse::default();
    for id in outcomes.into_iter().flatten() {
        response.add_failure(id);
    }
    Ok(response)
}
