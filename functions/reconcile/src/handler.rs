//! The reconcile handler. One binary, deployed as two functions with two
//! roles: the webhook intake (it holds the webhook secret and never talks to
//! a connector) and the worker (queue, daily and deploy passes: it talks to
//! connectors and cannot read the webhook secret). Locally one process may
//! be both. Four doors, told apart by the shape of the event:
//! - a Lambda function URL request: a platform webhook, authenticated and
//!   queued (202), refused (401, 400) or recognised as a duplicate (200);
//! - an SQS FIFO batch: work items, one install per message group; groups
//!   side by side, each in order; after a failure the rest of its group
//!   comes back, so no item of a group overtakes one that failed, and no
//!   other group waits on it;
//!   The missed-occurrence check (`{"type": "overdue.check"}`, on its own
//!   schedule) is one of those work items.
//! - `{"op": "reconcile_all"}`: queue the daily pass's first pages (the
//!   daily schedule and operators), never more, so the answer does not
//!   depend on how many installs and tasks exist;
//! - a CloudFormation custom resource request: the same, at deploy: it
//!   answers CloudFormation as soon as the work is queued.
//!
//! [`Event::decode`] tells them apart and decodes each as its type;
//! [`handle`] routes each to its one use case.

use aws_lambda_events::event::cloudformation::{
    CloudFormationCustomResourceRequest, CloudFormationCustomResourceResponse,
    CloudFormationCustomResourceResponseStatus,
};
use aws_lambda_events::event::lambda_function_urls::LambdaFunctionUrlRequest;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent};
use base64::Engine;
use chrono::Utc;
use lambda_runtime::{Error, LambdaEvent};
use serde_json::{Value, json};
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::McpConnectors;
use shared::adapters::queue::FifoQueue;
use shared::adapters::redelivery::Returns;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::adapters::secrets::{SecretError, SecretsReader};
use shared::app::reconcile::{Delivery, InstallRules, Reconciler, intake};
use shared::config::ReconcileConfig;
use shared::domain::connector::webhook::WebhookSecret;
use shared::trace::Traced;

/// The webhook intake: the store (webhook ids), the work queue, the secret.
pub struct Intake {
    pub store: DynamoStore,
    pub queue: FifoQueue,
    pub secret: WebhookKey,
    pub rules: InstallRules,
}

pub struct App {
    pub intake: Option<Intake>,
    pub reconciler: Option<Reconciler<DynamoStore, EventBridgeSchedules, McpConnectors, FifoQueue>>,
    /// Shortens the visibility of a work item that goes back, so a failure
    /// holds its install's FIFO group minutes, not the queue's timeout.
    pub returns: Returns,
}

/// The longest the intake waits on one read of its webhook secret.
/// Lambda may start an environment before any invocation and freeze it
/// once it polls for work, which can leave the read begun at start hanging
/// (the SDK bounds a connect, not an answer); the first webhook waits this
/// long for that read, then reads again, as long.
pub const SECRET_READ_SECONDS: u64 = 3;

/// The intake's webhook secret (SPEC section 6: a `whsec_` secret named by
/// `WEBHOOK_SECRET_ARN`). Its read starts with the process, as a task of its
/// own, so Secrets Manager answers while the rest of init (the other
/// clients) and the first poll for work go on; the first webhook waits for
/// it ([`SECRET_READ_SECONDS`]), none is verified without it. A read that
/// fails, or a secret that is no `whsec_` one, fails that webhook (the
/// sender retries it, as it would a failed init) and the next webhook reads
/// the secret again. A secret rotated while the process is warm reaches it
/// too: a webhook its secret refuses makes the process read the secret
/// again ([`WebhookKey::reread`], at most once each [`REREAD_SECONDS`], so
/// forged webhooks cannot make it hammer Secrets Manager) and verify again.
pub struct WebhookKey {
    reader: SecretsReader,
    arn: String,
    first: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<String, SecretError>>>>,
    secret: tokio::sync::RwLock<Option<(WebhookSecret, std::time::Instant)>>,
}

/// The least time between two reads of the webhook secret after refused
/// webhooks (a rotation is picked up within it).
pub const REREAD_SECONDS: u64 = 10;

impl WebhookKey {
    /// Starts the read. Call it inside the runtime, before other init.
    pub fn read(reader: SecretsReader, arn: String) -> Self {
        let first = tokio::spawn({
            let (reader, arn) = (reader.clone(), arn.clone());
            async move { reader.read(&arn).await }
        });
        Self {
            reader,
            arn,
            first: std::sync::Mutex::new(Some(first)),
            secret: tokio::sync::RwLock::new(None),
        }
    }

    /// After a webhook the secret refused: the secret read again, if the
    /// last read is older than [`REREAD_SECONDS`] and the value changed
    /// (rotated); `None` otherwise, and the refusal stands.
    pub async fn reread(&self) -> Result<Option<WebhookSecret>, Error> {
        let mut held = self.secret.write().await;
        if held
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() < std::time::Duration::from_secs(REREAD_SECONDS))
        {
            return Ok(None);
        }
        let bound = std::time::Duration::from_secs(SECRET_READ_SECONDS);
        let text = tokio::time::timeout(bound, self.reader.read(&self.arn))
            .await
            .map_err(|_| format!("Secrets Manager did not answer within {SECRET_READ_SECONDS} s"))?
            .map_err(|e| format!("WEBHOOK_SECRET_ARN could not be read: {e}"))?;
        let secret = WebhookSecret::parse(&text)
            .ok_or_else(|| Error::from("WEBHOOK_SECRET_ARN does not hold a whsec_ secret"))?;
        let changed = held.as_ref().is_none_or(|(old, _)| !old.same_key(&secret));
        *held = Some((secret.clone(), std::time::Instant::now()));
        if changed {
            tracing::info!("the webhook secret changed (rotated): webhooks are verified with the new one");
        }
        Ok(changed.then_some(secret))
    }

    /// The secret: the read begun at start, or a new one if that failed or
    /// has not answered within [`SECRET_READ_SECONDS`]; kept until a
    /// refused webhook reads it again.
    pub async fn get(&self) -> Result<WebhookSecret, Error> {
        if let Some((secret, _)) = self.secret.read().await.as_ref() {
            return Ok(secret.clone());
        }
        let mut held = self.secret.write().await;
        if let Some((secret, _)) = held.as_ref() {
            return Ok(secret.clone());
        }
        let secret = async {
            let bound = std::time::Duration::from_secs(SECRET_READ_SECONDS);
            let again = || async {
                tokio::time::timeout(bound, self.reader.read(&self.arn))
                    .await
                    .unwrap_or_else(|_| {
                        Err(SecretError::failed(format!(
                            "Secrets Manager did not answer within {SECRET_READ_SECONDS} s"
                        )))
                    })
            };
            let first = self.first.lock().map_or(None, |mut first| first.take());
            let text = match first {
                Some(mut first) => match tokio::time::timeout(bound, &mut first).await {
                    // A task that panicked (where panics unwind) is a read that failed.
                    Ok(joined) => joined.unwrap_or_else(|e| Err(SecretError::failed(e.to_string()))),
                    Err(_) => {
                        tracing::warn!(
                            seconds = SECRET_READ_SECONDS,
                            "the webhook secret's read begun at start has not answered: reading it again"
                        );
                        first.abort();
                        again().await
                    }
                },
                None => again().await,
            };
            let text = text.map_err(|e| format!("WEBHOOK_SECRET_ARN could not be read: {e}"))?;
            WebhookSecret::parse(&text).ok_or_else(|| Error::from("WEBHOOK_SECRET_ARN does not hold a whsec_ secret"))
        }
        .await?;
        *held = Some((secret.clone(), std::time::Instant::now()));
        Ok(secret)
    }
}

/// Wires the use cases to the AWS adapters. The intake's secret read
/// starts first ([`WebhookKey`]); the worker never reads it.
pub fn build(sdk: &aws_config::SdkConfig, config: ReconcileConfig) -> App {
    let intake = config.webhook_secret_arn.as_ref().map(|arn| Intake {
        secret: WebhookKey::read(SecretsReader::from_sdk(sdk), arn.clone()),
        store: DynamoStore::from_sdk(sdk, config.table_name.clone()),
        queue: FifoQueue::from_sdk(sdk, config.queue_url.clone()),
        rules: config.rules.clone(),
    });
    let reconciler = config.worker.map(|worker| {
        Reconciler::new(
            DynamoStore::from_sdk(sdk, config.table_name.clone()),
            EventBridgeSchedules::from_sdk(sdk, worker.target),
            McpConnectors::from_sdk(sdk, config.rules.clone()).for_lists(),
            FifoQueue::from_sdk(sdk, config.queue_url.clone()),
            worker.ceilings,
            config.rules.clone(),
        )
        .with_overdue(
            chrono::Duration::seconds(worker.overdue.catch_up_seconds),
            worker.overdue.retention,
        )
        .with_tracer(shared::adapters::telemetry::tracer(sdk, &worker.traces))
    });
    App {
        intake,
        reconciler,
        returns: Returns::from_sdk(sdk),
    }
}

fn worker(app: &App) -> Result<&Reconciler<DynamoStore, EventBridgeSchedules, McpConnectors, FifoQueue>, Error> {
    app.reconciler
        .as_ref()
        .ok_or_else(|| "this function is the webhook intake: it does no reconcile work".into())
}

fn response(status: u16, body: Value) -> Value {
    json!({"statusCode": status, "headers": {"content-type": "application/json"}, "body": body.to_string()})
}

async fn webhook(app: &App, request: LambdaFunctionUrlRequest) -> Result<Value, Error> {
    let Some(intake_app) = &app.intake else {
        return Err("this function is the reconcile worker: it takes no webhooks".into());
    };
    let header = |name: &str| request.headers.get(name).and_then(|v| v.to_str().ok());
    let raw = request.body.clone().unwrap_or_default();
    let body = if request.is_base64_encoded {
        match base64::engine::general_purpose::STANDARD.decode(raw.as_bytes()) {
            Ok(bytes) => bytes,
            Err(_) => return Ok(response(400, json!({"error": "body is not valid base64"}))),
        }
    } else {
        raw.into_bytes()
    };
    let delivery = Delivery {
        id: header("webhook-id"),
        timestamp: header("webhook-timestamp"),
        signature: header("webhook-signature"),
        body: &body,
    };
    let secret = intake_app.secret.get().await?;
    let check = |secret: WebhookSecret| {
        let delivery = &delivery;
        async move {
            intake(
                &intake_app.store,
                &intake_app.queue,
                &secret,
                &intake_app.rules,
                delivery,
                Utc::now(),
            )
            .await
        }
    };
    let mut answer = check(secret).await?;
    // Refused: the secret may have been rotated since this process read it.
    if matches!(answer, shared::app::reconcile::WebhookAnswer::Unauthorized(_))
        && let Some(rotated) = intake_app.secret.reread().await?
    {
        answer = check(rotated).await?;
    }
    let message = match &answer {
        shared::app::reconcile::WebhookAnswer::Accepted => "accepted".to_owned(),
        shared::app::reconcile::WebhookAnswer::Duplicate => "duplicate id: ignored".to_owned(),
        shared::app::reconcile::WebhookAnswer::Unauthorized(_) => "unauthorized".to_owned(),
        shared::app::reconcile::WebhookAnswer::Malformed(reason) => reason.clone(),
    };
    Ok(response(answer.status(), json!({"result": message})))
}

pub use shared::app::reconcile::{ANSWER_RESERVE_MS, BATCH_SIZE, MESSAGE_SECONDS};

/// What one message may take in an invocation that has `total` ms, its
/// batch's largest group holding `longest` messages: at most
/// [`MESSAGE_SECONDS`], and at most its share of the invocation, so even
/// that group's last message has its time.
pub fn message_budget(total_ms: u64, longest: usize) -> std::time::Duration {
    let share = total_ms.saturating_sub(ANSWER_RESERVE_MS) / (longest.max(1) as u64);
    std::time::Duration::from_millis((MESSAGE_SECONDS * 1000).min(share))
}

fn now_ms() -> u64 {
    u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default()
}

/// The records of a batch by message group (an install's work, a daily
/// pass's pages), each group in the batch's order, groups in the order of
/// their first message.
fn groups(event: &SqsEvent) -> Vec<(String, Vec<&aws_lambda_events::event::sqs::SqsMessage>)> {
    let mut out: Vec<(String, Vec<_>)> = Vec::new();
    for record in &event.records {
        let group = record.attributes.get("MessageGroupId").cloned().unwrap_or_default();
        match out.iter_mut().find(|(g, _)| *g == group) {
            Some((_, records)) => records.push(record),
            None => out.push((group, vec![record])),
        }
    }
    out
}

/// Works a FIFO batch within the invocation's deadline (Unix ms, from the
/// Lambda context): its message groups side by side, each group's messages
/// in order. After a failure, the later messages of the same group come
/// back with it, so its order holds; other groups are worked all the same,
/// so one hanging or failing install holds up no other (SPEC §13). Each
/// message has its deadline ([`message_budget`]), which the batch size and
/// the timeout leave time for; should the invocation still run short, the
/// rest of a group goes back unworked, in its order.
async fn batch(app: &App, event: SqsEvent, deadline_ms: u64) -> Result<Value, Error> {
    let reconciler = worker(app)?;
    let groups = groups(&event);
    let longest = groups.iter().map(|(_, records)| records.len()).max().unwrap_or(1);
    let budget = message_budget(deadline_ms.saturating_sub(now_ms()), longest);
    let handed_back = futures::future::join_all(
        groups
            .iter()
            .map(|(group, records)| work_group(reconciler, group, records, budget, deadline_ms)),
    )
    .await;
    // In the batch's order: a group's returns keep theirs.
    let back: std::collections::HashSet<String> = handed_back.into_iter().flatten().collect();
    let mut response = SqsBatchResponse::default();
    let mut returned = Vec::new();
    for record in &event.records {
        let id = record.message_id.clone().unwrap_or_default();
        if back.contains(&id) {
            returned.push(return_sooner(app, record));
            response.add_failure(id);
        }
    }
    futures::future::join_all(returned).await;
    Ok(serde_json::to_value(response).unwrap_or(Value::Null))
}

/// Shortens a returned work item's visibility to
/// `redelivery::return_delay` of its receive count (a minute, growing to
/// ten): its install's FIFO group waits that long, not the queue's
/// visibility timeout, for its next try. A failure is logged: the item
/// still comes back, at the queue's timeout.
async fn return_sooner(app: &App, record: &aws_lambda_events::event::sqs::SqsMessage) {
    let (Some(arn), Some(handle)) = (record.event_source_arn.as_deref(), record.receipt_handle.as_deref()) else {
        return;
    };
    let receives = record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|n| n.parse::<u32>().ok())
        .unwrap_or(1);
    let seconds = shared::domain::run::redelivery::return_delay(receives, fastrand::f64());
    if let Err(error) = app.returns.return_after(arn, handle, seconds).await {
        tracing::warn!(message_id = record.message_id.as_deref().unwrap_or_default(), error = %shared::error_chain(&error),
            "could not shorten a returned work item's visibility; it comes back at the queue's timeout");
    }
}

type Worker = Reconciler<DynamoStore, EventBridgeSchedules, McpConnectors, FifoQueue>;

/// One group's messages in order; the ids of those that go back: the one
/// that failed and every later one, or those the invocation had no time for.
async fn work_group(
    reconciler: &Worker,
    group: &str,
    records: &[&aws_lambda_events::event::sqs::SqsMessage],
    budget: std::time::Duration,
    deadline_ms: u64,
) -> Vec<String> {
    let mut back = Vec::new();
    for record in records {
        let id = record.message_id.clone().unwrap_or_default();
        // The budget was measured at the batch's start: what the group's
        // earlier messages and the clock took since is at most a moment
        // less, unless the invocation really runs short.
        let left =
            std::time::Duration::from_millis(deadline_ms.saturating_sub(now_ms()).saturating_sub(ANSWER_RESERVE_MS));
        if !back.is_empty() || left < budget / 2 {
            if back.is_empty() {
                tracing::warn!(message_id = %id, group = %group, "no time left for this message; it and its group's later ones come back");
            }
            back.push(id);
            continue;
        }
        let body = record.body.as_deref().unwrap_or_default();
        if !work_one(reconciler, &id, group, body, budget.min(left)).await {
            back.push(id);
        }
    }
    back
}

/// One message within `budget`: whether it is done (worked, or dropped as
/// no work item); a failure is recorded on its install.
async fn work_one(reconciler: &Worker, id: &str, group: &str, body: &str, budget: std::time::Duration) -> bool {
    let worked = match tokio::time::timeout(budget, reconciler.work(body, Utc::now())).await {
        Ok(worked) => worked,
        Err(_) => {
            tracing::error!(message_id = %id, group = %group, seconds = budget.as_secs(),
                "reconcile did not finish within its deadline; the message comes back");
            let reason = format!("reconcile did not finish within {} s", budget.as_secs());
            if let Err(e) = reconciler.record_failure(body, &reason, Utc::now()).await {
                tracing::warn!(error = %shared::error_chain(&e), "the failure could not be recorded on its install");
            }
            return false;
        }
    };
    match worked {
        Ok(summary) => {
            for (kind, n) in &summary.changes {
                shared::adapters::metrics::count("ReconcileChanges", u64::from(*n), Some(("Kind", kind)));
            }
            if !summary.refused.is_empty() {
                shared::adapters::metrics::count("DeclarationsRefused", summary.refused.len() as u64, None);
            }
            if let Some(missed) = summary.overdue {
                // Every check publishes, zero included: the alarm sees the check run.
                shared::adapters::metrics::count("OccurrencesOverdue", missed as u64, None);
            }
            if let Some(backlog) = summary.approvals_backlog {
                // Every period publishes, zero included: the alarm sees expiry run.
                shared::adapters::metrics::seconds(
                    "ApprovalsLapsedBacklog",
                    u64::try_from(backlog).unwrap_or_default(),
                );
            }
            if let Some(check) = summary.overdue_check {
                shared::adapters::metrics::count("OverdueCheckUnfinished", u64::from(check.unfinished), None);
                shared::adapters::metrics::count("OverdueTasksUnjudged", check.unjudged as u64, None);
                shared::adapters::metrics::seconds(
                    "OverdueBacklogSeconds",
                    u64::try_from(check.backlog_seconds).unwrap_or_default(),
                );
            }
            true
        }
        Err(shared::app::reconcile::ReconcileError::Malformed(reason)) => {
            tracing::error!(message_id = %id, reason = %reason, "dropped a message that is not reconcile work");
            true
        }
        Err(error) => {
            tracing::error!(message_id = %id, error = %shared::error_chain(&error), "reconcile failed; the message comes back");
            if let Err(e) = reconciler
                .record_failure(body, &shared::error_chain(&error), Utc::now())
                .await
            {
                tracing::warn!(error = %shared::error_chain(&e), "the failure could not be recorded on its install");
            }
            false
        }
    }
}

/// CloudFormation refuses a custom resource response body over 4096 bytes,
/// and the deploy then waits for the resource's `ServiceTimeout`.
pub const CUSTOM_RESOURCE_REPLY_LIMIT: usize = 4096;

/// The longest the reply to CloudFormation may take (an S3 presigned PUT,
/// normally well under a second): a response URL that hangs fails the
/// invocation, which Lambda's asynchronous retry sends again, rather than
/// holding the function to its own limit.
pub const CUSTOM_RESOURCE_REPLY_SECONDS: u64 = 10;

/// The physical id of the pass at deploy, until CloudFormation names one.
const PHYSICAL_RESOURCE_ID: &str = "reconcile-at-deploy";

/// The response body for a custom resource request, under
/// [`CUSTOM_RESOURCE_REPLY_LIMIT`] whatever the length of `reason` (an
/// error chain can be long): the reason is cut, on a character boundary,
/// with a closing `…`, until the whole body fits.
pub fn custom_resource_reply(
    request: &CloudFormationCustomResourceRequest,
    status: CloudFormationCustomResourceResponseStatus,
    reason: &str,
) -> String {
    let mut reply = CloudFormationCustomResourceResponse::default();
    reply.status = status;
    reply.physical_resource_id = PHYSICAL_RESOURCE_ID.to_owned();
    match request {
        CloudFormationCustomResourceRequest::Create(r) => {
            (reply.stack_id, reply.request_id, reply.logical_resource_id) =
                (r.stack_id.clone(), r.request_id.clone(), r.logical_resource_id.clone());
        }
        CloudFormationCustomResourceRequest::Update(r) => {
            (reply.stack_id, reply.request_id, reply.logical_resource_id) =
                (r.stack_id.clone(), r.request_id.clone(), r.logical_resource_id.clone());
            reply.physical_resource_id = r.physical_resource_id.clone();
        }
        CloudFormationCustomResourceRequest::Delete(r) => {
            (reply.stack_id, reply.request_id, reply.logical_resource_id) =
                (r.stack_id.clone(), r.request_id.clone(), r.logical_resource_id.clone());
            reply.physical_resource_id = r.physical_resource_id.clone();
        }
        // A request type this crate version does not know: answered with
        // the ids it has none of, which CloudFormation refuses visibly.
        _ => {}
    }
    let body = |reason: &str| {
        let mut reply = reply.clone();
        reply.reason = Some(reason.to_owned());
        serde_json::to_string(&reply).unwrap_or_default()
    };
    let mut text = body(reason);
    let mut keep: Vec<char> = reason.chars().collect();
    while text.len() >= CUSTOM_RESOURCE_REPLY_LIMIT && !keep.is_empty() {
        // Cut at least what is over, more when escaping made it longer.
        let over = text.len() + 1 - CUSTOM_RESOURCE_REPLY_LIMIT + '…'.len_utf8();
        let cut = keep.len().saturating_sub(over.max(1));
        keep.truncate(cut);
        let mut shortened: String = keep.iter().collect();
        shortened.push('…');
        text = body(&shortened);
    }
    text
}

fn response_url(request: &CloudFormationCustomResourceRequest) -> Option<&str> {
    match request {
        CloudFormationCustomResourceRequest::Create(r) => Some(&r.response_url),
        CloudFormationCustomResourceRequest::Update(r) => Some(&r.response_url),
        CloudFormationCustomResourceRequest::Delete(r) => Some(&r.response_url),
        _ => None,
    }
}

/// Answers a CloudFormation custom resource: a pass at deploy.
async fn custom_resource(app: &App, request: &CloudFormationCustomResourceRequest) -> Result<Value, Error> {
    use CloudFormationCustomResourceResponseStatus::{Failed, Success};
    let (status, reason) = if matches!(request, CloudFormationCustomResourceRequest::Delete(_)) {
        (Success, String::new())
    } else {
        match worker(app)?.reconcile_all(Utc::now()).await {
            Ok(_) => (
                Success,
                "queued the reconcile pass: its pages of installs and reminders follow".to_owned(),
            ),
            Err(e) => (Failed, shared::error_chain(&e)),
        }
    };
    let answer = custom_resource_reply(request, status.clone(), &reason);
    let url = response_url(request).ok_or("custom resource event of an unknown request type")?;
    // The process's one TLS configuration, as every client here.
    shared::adapters::tls::Tls::process()
        .reqwest()
        .timeout(std::time::Duration::from_secs(CUSTOM_RESOURCE_REPLY_SECONDS))
        .build()?
        .put(url)
        .body(answer)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| format!("the reply to CloudFormation failed: {e}"))?;
    Ok(json!({"status": status}))
}

/// The events the binary takes, each decoded as its type.
pub enum Event {
    /// A Lambda function URL request: a platform webhook.
    Webhook(Box<LambdaFunctionUrlRequest>),
    /// An SQS FIFO batch of reconcile work.
    Batch(SqsEvent),
    /// A CloudFormation custom resource request: the pass at deploy.
    CustomResource(Box<CloudFormationCustomResourceRequest>),
    /// `{"op": "reconcile_all"}`: the daily pass, or an operator's.
    ReconcileAll,
}

impl Event {
    /// Tells the events apart by their shape, then decodes each as its type.
    pub fn decode(payload: Value) -> Result<Self, Error> {
        if payload.get("requestContext").and_then(|c| c.get("http")).is_some() {
            return Ok(Event::Webhook(serde_json::from_value(payload)?));
        }
        if payload.get("Records").is_some() {
            return Ok(Event::Batch(serde_json::from_value(payload)?));
        }
        if payload.get("ResponseURL").is_some() && payload.get("RequestType").is_some() {
            return Ok(Event::CustomResource(serde_json::from_value(payload)?));
        }
        if payload["op"] == "reconcile_all" {
            return Ok(Event::ReconcileAll);
        }
        Err("unrecognised event: expected a function URL request, an SQS batch, a custom resource or {\"op\": \"reconcile_all\"}".into())
    }
}

pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    let LambdaEvent { payload, context } = event;
    let answer = match Event::decode(payload)? {
        Event::Webhook(request) => webhook(app, *request).await,
        Event::Batch(batch_event) => batch(app, batch_event, context.deadline).await,
        Event::CustomResource(request) => custom_resource(app, &request).await,
        Event::ReconcileAll => match worker(app)?.reconcile_all(Utc::now()).await {
            Ok(queued) => Ok(json!({"ok": true, "queued": queued})),
            Err(error) => Err(error.into()),
        },
    };
    // The worker's traces leave before the answer, within a bound that
    // keeps the answer inside the deadline (the intake opens none).
    if let Some(reconciler) = &app.reconciler {
        let left = std::time::Duration::from_millis(context.deadline.saturating_sub(now_ms()));
        reconciler.tracer().flush(shared::trace::flush_budget(left)).await;
    }
    answer
}
