//! The runner handler: each SQS record is one delivery of an occurrence.
//! Records of a batch run concurrently (they are distinct occurrences, or
//! duplicates the claim tells apart). A record that must be delivered again
//! (a live lease elsewhere, a transient failure, a throttled model) is
//! returned in the partial batch response; nothing is logged and dropped.
//! Every returned record, whatever the reason, gets a short visibility
//! (`domain::run::redelivery`: the growing return, or for a run the model pace
//! turned away the time until the pace has room), so it comes back within
//! the catch-up window instead of after the queue's visibility timeout.

use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use lambda_runtime::{Error, LambdaEvent};
use shared::adapters::bedrock::BedrockModel;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::McpConnectors;
use shared::adapters::redelivery::Returns;
use shared::adapters::{metrics, telemetry};
use shared::app::run::{Disposition, RunSettings, Runner};
use shared::config::RunnerConfig;
use shared::trace::Traced;

pub struct App {
    pub runner: Runner<DynamoStore, BedrockModel, McpConnectors>,
    pub returns: Returns,
}

/// Wires the use case to the AWS adapters. Called once, at start-up.
pub fn build(sdk: &aws_config::SdkConfig, config: RunnerConfig) -> App {
    App {
        runner: runner(sdk, config),
        returns: Returns::from_sdk(sdk),
    }
}

fn runner(sdk: &aws_config::SdkConfig, config: RunnerConfig) -> Runner<DynamoStore, BedrockModel, McpConnectors> {
    let tracer = telemetry::tracer(sdk, &config.traces);
    Runner::new(
        DynamoStore::from_sdk(sdk, config.table_name),
        BedrockModel::from_sdk(sdk),
        McpConnectors::from_sdk(sdk, config.rules),
        RunSettings {
            worker_enabled: config.worker_enabled,
            catch_up: chrono::Duration::seconds(config.catch_up_seconds),
            model_id: config.model_id,
            prices: config.prices,
            ceilings: config.ceilings,
            retention: config.retention,
            pace: config.pace,
            person_monthly_usd: config.person_monthly_usd,
            approval_hours: config.approval_hours,
        },
    )
    .with_tracer(tracer)
}

/// Delivers one record; `Some((id, seconds))` when it must come back, after
/// that many seconds.
async fn deliver(app: &App, record: &SqsMessage, deadline: DateTime<Utc>) -> Option<(String, i32)> {
    let id = record.message_id.clone().unwrap_or_default();
    let body = record.body.as_deref().unwrap_or_default();
    let receives = record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(1);
    match app.runner.deliver(&id, body, seen_at(record), deadline).await {
        Ok(disposition) => {
            emit(&disposition);
            disposition
                .comes_back(receives, Utc::now(), fastrand::f64())
                .map(|seconds| (id, seconds))
        }
        Err(error) => {
            tracing::error!(message_id = %id, error = %shared::error_chain(&error), "delivery failed; returned to the queue");
            Some((
                id,
                shared::domain::run::redelivery::return_delay(receives, fastrand::f64()),
            ))
        }
    }
}

/// The delivery's metrics (CloudWatch EMF).
fn emit(disposition: &Disposition) {
    use shared::domain::run::door::SkipReason;
    use shared::domain::task::claim::RunStatus;
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
        Disposition::Paced(_) => metrics::count("RunsReturnedPaced", 1, None),
        Disposition::NotYet => metrics::count("RunsNotYet", 1, None),
        Disposition::AwaitingApproval => metrics::count("RunsAwaitingApproval", 1, None),
    }
}

/// When a record is delivered: now, or, if later, when SQS says it was
/// sent (`SentTimestamp`, which SQS sets and no sender can). On AWS the two
/// differ by clock skew; the local dispatcher fast-forwards a schedule by
/// moving SQS's clock to the occurrence before it sends it.
fn seen_at(record: &SqsMessage) -> DateTime<Utc> {
    let sent = record
        .attributes
        .get("SentTimestamp")
        .and_then(|ms| ms.parse::<i64>().ok())
        .and_then(DateTime::from_timestamp_millis);
    let now = Utc::now();
    sent.map_or(now, |sent| sent.max(now))
}

/// Shortens a returned record's visibility to `seconds`. A failure is
/// logged and otherwise ignored: the record still comes back, at the
/// queue's timeout.
async fn return_sooner(app: &App, record: &SqsMessage, seconds: i32) {
    let (Some(arn), Some(handle)) = (record.event_source_arn.as_deref(), record.receipt_handle.as_deref()) else {
        return;
    };
    if let Err(error) = app.returns.return_after(arn, handle, seconds).await {
        tracing::warn!(message_id = record.message_id.as_deref().unwrap_or_default(), error = %shared::error_chain(&error),
            "could not shorten a returned message's visibility; it comes back at the queue's timeout");
    } else {
        metrics::count("RunsReturned", 1, None);
    }
}

pub async fn handle(app: &App, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let deadline = DateTime::<Utc>::from(event.context.deadline());
    let records = &event.payload.records;
    let outcomes = futures::future::join_all(records.iter().map(|r| deliver(app, r, deadline))).await;
    let mut response = SqsBatchResponse::default();
    let mut returned = Vec::new();
    for (record, back) in records.iter().zip(outcomes) {
        if let Some((id, seconds)) = back {
            returned.push((record, seconds));
            response.add_failure(id);
        }
    }
    futures::future::join_all(returned.into_iter().map(|(r, seconds)| return_sooner(app, r, seconds))).await;
    // The batch's traces leave before the answer (a Lambda is frozen after
    // it), within a bound that keeps the answer inside the deadline.
    let left = (deadline - Utc::now()).to_std().unwrap_or_default();
    app.runner.tracer().flush(shared::trace::flush_budget(left)).await;
    Ok(response)
}
