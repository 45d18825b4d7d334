//! The resources of `template.yaml` that the local stack needs, created on
//! moto from code. `STACK` holds the settings that must match the template,
//! and the test `template_in_step` compares the two.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, StreamSpecification, StreamViewType, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use shared::adapters::keys;

/// The settings shared with `template.yaml`.
#[derive(Debug, Clone, Copy)]
pub struct StackSpec {
    /// Table hash and range key names, both strings.
    pub table_keys: (&'static str, &'static str),
    /// The one global secondary index: name, hash and range key names
    /// (strings), keys-only projection. The adapters' names, so the code,
    /// this stack and the template (tested) agree.
    pub table_index: (&'static str, &'static str, &'static str),
    /// The owner index (a principal's reminders, newest first): name, hash
    /// and range key names (strings), all attributes projected.
    pub owner_index: (&'static str, &'static str, &'static str),
    /// The reminders that can still run (the daily pass's repair).
    pub schedulable_index: (&'static str, &'static str, &'static str),
    /// The table's stream, which feeds the notification pipe.
    pub table_stream_view: &'static str,
    pub ttl_attribute: &'static str,
    /// Runs queue: at least six times the runner's timeout.
    pub runs_visibility_timeout: u32,
    pub runs_retention_seconds: u32,
    /// Deliveries of one message before it moves to the runs DLQ.
    pub runs_max_receive_count: u32,
    pub dlq_retention_seconds: u32,
    /// Reconcile work queue: at least six times the reconcile function's timeout.
    pub reconcile_visibility_timeout: u32,
    /// Deliveries of one reconcile work item before it moves to its DLQ.
    pub reconcile_max_receive_count: u32,
    /// The platform's notification queue (`RunFinishedQueue`, SPEC §12):
    /// how long a backend has to read and post one result.
    pub run_finished_visibility_timeout: u32,
    pub run_finished_retention_seconds: u32,
    /// Deliveries of one notification before it moves to its DLQ.
    pub run_finished_max_receive_count: u32,
}

pub const STACK: StackSpec = StackSpec {
    table_keys: ("pk", "sk"),
    table_index: (keys::INDEX, keys::GSI1PK, keys::GSI1SK),
    owner_index: (keys::OWNER_INDEX, keys::GSI2PK, keys::GSI2SK),
    schedulable_index: (keys::SCHEDULABLE_INDEX, keys::GSI3PK, keys::GSI3SK),
    table_stream_view: "NEW_IMAGE",
    ttl_attribute: "ttl",
    runs_visibility_timeout: 2160,
    runs_retention_seconds: 345_600,
    runs_max_receive_count: 100,
    dlq_retention_seconds: 1_209_600,
    reconcile_visibility_timeout: 2520,
    reconcile_max_receive_count: 5,
    run_finished_visibility_timeout: 120,
    run_finished_retention_seconds: 345_600,
    run_finished_max_receive_count: 5,
};

/// The template's outputs the local stack has, and the resource each
/// names (`!Ref`, or `!GetAtt <resource>.Arn` for an ARN): the template
/// test holds them to `template.yaml`.
pub const OUTPUT_NAMES: [&str; 13] = [
    "TasksTableName",
    "ScheduleGroupName",
    "RunsQueueArn",
    "RunsQueueUrl",
    "RunsDeadLetterQueueUrl",
    "SchedulerDeadLetterQueueUrl",
    "ReconcileQueueUrl",
    "ReconcileDeadLetterQueueUrl",
    "EventBusName",
    "RunFinishedQueueUrl",
    "RunFinishedQueueArn",
    "RunFinishedQueueDeadLetterQueueUrl",
    "RunFinishedDeadLetterQueueUrl",
];

/// SPEC §9's example ceilings, as `SCHEDULE_CEILINGS` holds them.
fn example_ceilings() -> String {
    serde_json::to_value(shared::domain::task::limits::EXAMPLE_CEILINGS)
        .map(|v| v.to_string())
        .unwrap_or_default()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Names of one stack's resources: unique per test, so tests never share state.
#[derive(Debug, Clone)]
pub struct StackNames {
    pub table: String,
    pub runs_queue: String,
    pub runs_dlq: String,
    pub scheduler_dlq: String,
    pub schedule_group: String,
    pub event_bus: String,
    /// Local only: a queue that receives every event on the bus, so tests
    /// and the main job can read the notifications.
    pub events_capture: String,
    /// The platform's notification queue and its DLQ (`RunFinishedQueue`,
    /// `RunFinishedQueueDeadLetterQueue`), fed by the rule `run_finished_rule`.
    pub run_finished_queue: String,
    pub run_finished_dlq: String,
    pub run_finished_rule: String,
    /// The reconcile work queue (FIFO: the name ends in `.fifo`) and its DLQ.
    pub reconcile_queue: String,
    pub reconcile_dlq: String,
    /// `RunFinishedDeadLetterQueue`: the notification pipe's DLQ.
    pub pipe_dlq: String,
    pub webhook_secret: String,
    /// The name prefix of connector credentials (`ConnectorSecretPrefix`).
    pub connector_secrets: String,
}

impl StackNames {
    pub fn unique(prefix: &str) -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let suffix = &id[..10];
        Self {
            table: format!("{prefix}-tasks-{suffix}"),
            runs_queue: format!("{prefix}-runs-{suffix}"),
            runs_dlq: format!("{prefix}-runs-dlq-{suffix}"),
            scheduler_dlq: format!("{prefix}-scheduler-dlq-{suffix}"),
            schedule_group: format!("{prefix}-{suffix}"),
            event_bus: format!("{prefix}-bus-{suffix}"),
            events_capture: format!("{prefix}-events-{suffix}"),
            run_finished_queue: format!("{prefix}-run-finished-{suffix}"),
            run_finished_dlq: format!("{prefix}-run-finished-dlq-{suffix}"),
            run_finished_rule: format!("{prefix}-run-finished-{suffix}"),
            reconcile_queue: format!("{prefix}-reconcile-{suffix}.fifo"),
            reconcile_dlq: format!("{prefix}-reconcile-dlq-{suffix}.fifo"),
            pipe_dlq: format!("{prefix}-pipe-dlq-{suffix}"),
            webhook_secret: format!("{prefix}-webhook-{suffix}"),
            connector_secrets: format!("{prefix}-connectors-{suffix}/"),
        }
    }
}

/// One created stack.
#[derive(Debug, Clone)]
pub struct Stack {
    pub names: StackNames,
    pub runs_queue_url: String,
    pub runs_queue_arn: String,
    pub runs_dlq_url: String,
    pub scheduler_dlq_url: String,
    pub scheduler_dlq_arn: String,
    /// moto does not check roles; the ARN has the template's shape.
    pub scheduler_role_arn: String,
    pub events_capture_url: String,
    /// `RunFinishedQueue`: what the chat backend consumes (SPEC §12).
    pub run_finished: RunFinishedQueue,
    pub reconcile_queue_url: String,
    pub reconcile_dlq_url: String,
    /// `RunFinishedDeadLetterQueue`: nothing locally sends to it (the
    /// stand-in pipe does not fail); `sat redrive` reads it.
    pub pipe_dlq_url: String,
    pub webhook_secret_arn: String,
    /// The Standard Webhooks secret the platform signs with (`whsec_...`).
    pub webhook_secret: String,
    /// The local stand-in for the notification pipe (table stream to bus).
    pub pipe: crate::pipe::Pipe,
}

async fn queue(
    sqs: &aws_sdk_sqs::Client,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> anyhow::Result<(String, String)> {
    let mut create = sqs.create_queue().queue_name(name);
    for (key, value) in attributes {
        create = create.attributes(key.clone(), value);
    }
    let url = create.send().await?.queue_url.unwrap_or_default();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .unwrap_or_default();
    Ok((url, arn))
}

/// `RunFinishedQueue`, its DLQ and the rule that feeds it.
#[derive(Debug, Clone)]
pub struct RunFinishedQueue {
    pub url: String,
    pub arn: String,
    pub dlq_url: String,
    pub dlq_arn: String,
    pub rule_arn: String,
}

/// The runs queue and the two DLQs beside it.
struct RunQueues {
    runs_queue_url: String,
    runs_queue_arn: String,
    runs_dlq_url: String,
    scheduler_dlq_url: String,
    scheduler_dlq_arn: String,
}

/// The table with its two indexes, its stream and its TTL; answers the
/// stream's ARN, which the notification pipe reads.
async fn create_table(sdk: &SdkConfig, names: &StackNames) -> anyhow::Result<String> {
    let dynamo = aws_sdk_dynamodb::Client::new(sdk);
    let (hash, range) = STACK.table_keys;
    let attribute = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
    };
    let key = |name: &str, kind| KeySchemaElement::builder().attribute_name(name).key_type(kind).build();
    let index = |(name, index_hash, index_range): (&str, &str, &str), projection| {
        GlobalSecondaryIndex::builder()
            .index_name(name)
            .key_schema(key(index_hash, KeyType::Hash)?)
            .key_schema(key(index_range, KeyType::Range)?)
            .projection(Projection::builder().projection_type(projection).build())
            .build()
    };
    let (_, index_hash, index_range) = STACK.table_index;
    let (_, owner_hash, owner_range) = STACK.owner_index;
    let (_, schedulable_hash, schedulable_range) = STACK.schedulable_index;
    let mut create = dynamo
        .create_table()
        .table_name(&names.table)
        .billing_mode(BillingMode::PayPerRequest);
    for name in [
        hash,
        range,
        index_hash,
        index_range,
        owner_hash,
        owner_range,
        schedulable_hash,
        schedulable_range,
    ] {
        create = create.attribute_definitions(attribute(name)?);
    }
    let created = create
        .key_schema(key(hash, KeyType::Hash)?)
        .key_schema(key(range, KeyType::Range)?)
        .global_secondary_indexes(index(STACK.table_index, ProjectionType::KeysOnly)?)
        .global_secondary_indexes(index(STACK.owner_index, ProjectionType::All)?)
        .global_secondary_indexes(index(STACK.schedulable_index, ProjectionType::All)?)
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(STACK.table_stream_view))
                .build()?,
        )
        .send()
        .await?;
    let stream_arn = created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .ok_or_else(|| anyhow::anyhow!("the table has no stream"))?
        .to_owned();
    dynamo
        .update_time_to_live()
        .table_name(&names.table)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .attribute_name(STACK.ttl_attribute)
                .enabled(true)
                .build()?,
        )
        .send()
        .await?;
    Ok(stream_arn)
}

/// The runs queue, redriving to its DLQ, and the Scheduler DLQ.
async fn create_run_queues(sqs: &aws_sdk_sqs::Client, names: &StackNames) -> anyhow::Result<RunQueues> {
    let retention = (
        QueueAttributeName::MessageRetentionPeriod,
        STACK.dlq_retention_seconds.to_string(),
    );
    let (runs_dlq_url, runs_dlq_arn) = queue(sqs, &names.runs_dlq, std::slice::from_ref(&retention)).await?;
    let (scheduler_dlq_url, scheduler_dlq_arn) = queue(sqs, &names.scheduler_dlq, &[retention]).await?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": runs_dlq_arn,
        "maxReceiveCount": STACK.runs_max_receive_count,
    });
    let (runs_queue_url, runs_queue_arn) = queue(
        sqs,
        &names.runs_queue,
        &[
            (
                QueueAttributeName::VisibilityTimeout,
                STACK.runs_visibility_timeout.to_string(),
            ),
            (
                QueueAttributeName::MessageRetentionPeriod,
                STACK.runs_retention_seconds.to_string(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ],
    )
    .await?;
    Ok(RunQueues {
        runs_queue_url,
        runs_queue_arn,
        runs_dlq_url,
        scheduler_dlq_url,
        scheduler_dlq_arn,
    })
}

/// The event bus and, local only, a rule that copies every notification
/// to a capture queue; answers the capture queue's URL.
async fn create_event_bus(sdk: &SdkConfig, sqs: &aws_sdk_sqs::Client, names: &StackNames) -> anyhow::Result<String> {
    let events = aws_sdk_eventbridge::Client::new(sdk);
    events.create_event_bus().name(&names.event_bus).send().await?;
    let (events_capture_url, events_capture_arn) = queue(sqs, &names.events_capture, &[]).await?;
    events
        .put_rule()
        .name("capture")
        .event_bus_name(&names.event_bus)
        .event_pattern(serde_json::json!({"source": [shared::domain::run::notification::SOURCE]}).to_string())
        .send()
        .await?;
    events
        .put_targets()
        .rule("capture")
        .event_bus_name(&names.event_bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("capture")
                .arn(events_capture_arn)
                .build()?,
        )
        .send()
        .await?;
    Ok(events_capture_url)
}

/// `RunFinishedRule`'s event pattern, as `template.yaml` gives it (the
/// local rule is made from it, so a mistake there shows locally).
pub fn run_finished_pattern() -> anyhow::Result<serde_json::Value> {
    let path = crate::moto::repo_root().join("template.yaml");
    let template: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    let pattern = &template["Resources"]["RunFinishedRule"]["Properties"]["EventPattern"];
    anyhow::ensure!(
        pattern.is_mapping(),
        "RunFinishedRule: no EventPattern mapping in template.yaml"
    );
    Ok(serde_json::to_value(pattern)?)
}

/// `RunFinishedQueue` redriving to its DLQ, and the rule on the bus that
/// sends it every event matching the template's pattern. moto delivers a
/// matching event to an SQS target at once and never fails to; it reads no
/// queue policy and no target retry policy or DLQ, so those stay in the
/// template, where `tests/suite/template.rs` holds them (infra/FIDELITY.md).
async fn create_run_finished_queue(
    sdk: &SdkConfig,
    sqs: &aws_sdk_sqs::Client,
    names: &StackNames,
) -> anyhow::Result<RunFinishedQueue> {
    let (dlq_url, dlq_arn) = queue(
        sqs,
        &names.run_finished_dlq,
        &[(
            QueueAttributeName::MessageRetentionPeriod,
            STACK.dlq_retention_seconds.to_string(),
        )],
    )
    .await?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": STACK.run_finished_max_receive_count,
    });
    let (url, arn) = queue(
        sqs,
        &names.run_finished_queue,
        &[
            (
                QueueAttributeName::VisibilityTimeout,
                STACK.run_finished_visibility_timeout.to_string(),
            ),
            (
                QueueAttributeName::MessageRetentionPeriod,
                STACK.run_finished_retention_seconds.to_string(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ],
    )
    .await?;
    let events = aws_sdk_eventbridge::Client::new(sdk);
    let rule_arn = events
        .put_rule()
        .name(&names.run_finished_rule)
        .event_bus_name(&names.event_bus)
        .event_pattern(run_finished_pattern()?.to_string())
        .send()
        .await?
        .rule_arn
        .unwrap_or_default();
    let put = events
        .put_targets()
        .rule(&names.run_finished_rule)
        .event_bus_name(&names.event_bus)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("run-finished-queue")
                .arn(&arn)
                .build()?,
        )
        .send()
        .await?;
    anyhow::ensure!(
        put.failed_entry_count() == 0,
        "the bus refused the rule's target: {put:?}"
    );
    Ok(RunFinishedQueue {
        url,
        arn,
        dlq_url,
        dlq_arn,
        rule_arn,
    })
}

/// The reconcile work queue (FIFO, deduplicated by content), redriving to
/// its FIFO DLQ; answers both URLs.
async fn create_reconcile_queue(sqs: &aws_sdk_sqs::Client, names: &StackNames) -> anyhow::Result<(String, String)> {
    let (dlq_url, dlq_arn) = queue(
        sqs,
        &names.reconcile_dlq,
        &[
            (QueueAttributeName::FifoQueue, "true".to_owned()),
            (
                QueueAttributeName::MessageRetentionPeriod,
                STACK.dlq_retention_seconds.to_string(),
            ),
        ],
    )
    .await?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": STACK.reconcile_max_receive_count,
    });
    let (url, _) = queue(
        sqs,
        &names.reconcile_queue,
        &[
            (QueueAttributeName::FifoQueue, "true".to_owned()),
            (QueueAttributeName::ContentBasedDeduplication, "true".to_owned()),
            (
                QueueAttributeName::VisibilityTimeout,
                STACK.reconcile_visibility_timeout.to_string(),
            ),
            (QueueAttributeName::RedrivePolicy, redrive.to_string()),
        ],
    )
    .await?;
    Ok((url, dlq_url))
}

/// A fresh Standard Webhooks secret (`whsec_...`) in Secrets Manager;
/// answers the secret and its ARN.
async fn create_webhook_secret(sdk: &SdkConfig, names: &StackNames) -> anyhow::Result<(String, String)> {
    let secret = format!("whsec_{}", uuid::Uuid::new_v4().simple());
    let secret = format!("whsec_{}", base64_encode(secret.as_bytes()));
    let arn = aws_sdk_secretsmanager::Client::new(sdk)
        .create_secret()
        .name(&names.webhook_secret)
        .secret_string(&secret)
        .send()
        .await?
        .arn
        .unwrap_or_default();
    Ok((secret, arn))
}

impl Stack {
    /// Creates the table, the queues, the schedule group, the bus with its
    /// rules and `RunFinishedQueue`, and the webhook secret, in that order.
    pub async fn create(sdk: &SdkConfig, names: StackNames) -> anyhow::Result<Self> {
        let stream_arn = create_table(sdk, &names).await?;
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let runs = create_run_queues(&sqs, &names).await?;
        aws_sdk_scheduler::Client::new(sdk)
            .create_schedule_group()
            .name(&names.schedule_group)
            .send()
            .await?;
        let events_capture_url = create_event_bus(sdk, &sqs, &names).await?;
        let run_finished = create_run_finished_queue(sdk, &sqs, &names).await?;
        let (reconcile_queue_url, reconcile_dlq_url) = create_reconcile_queue(&sqs, &names).await?;
        let (pipe_dlq_url, _) = queue(
            &sqs,
            &names.pipe_dlq,
            &[(
                QueueAttributeName::MessageRetentionPeriod,
                STACK.dlq_retention_seconds.to_string(),
            )],
        )
        .await?;
        let (webhook_secret, webhook_secret_arn) = create_webhook_secret(sdk, &names).await?;
        let pipe = crate::pipe::Pipe::new(
            crate::pipe::PipeSpec::all_from_template()?,
            stream_arn,
            names.event_bus.clone(),
        );
        Ok(Self {
            pipe,
            reconcile_queue_url,
            reconcile_dlq_url,
            pipe_dlq_url,
            webhook_secret_arn,
            webhook_secret,
            events_capture_url,
            run_finished,
            scheduler_role_arn: format!("arn:aws:iam::123456789012:role/{}-scheduler", names.schedule_group),
            names,
            runs_queue_url: runs.runs_queue_url,
            runs_queue_arn: runs.runs_queue_arn,
            runs_dlq_url: runs.runs_dlq_url,
            scheduler_dlq_url: runs.scheduler_dlq_url,
            scheduler_dlq_arn: runs.scheduler_dlq_arn,
        })
    }

    /// The notifications the bus received so far (drains the capture queue),
    /// after the pipe carried the latest settled runs to the bus.
    pub async fn received_events(&self, sdk: &SdkConfig) -> anyhow::Result<Vec<serde_json::Value>> {
        self.pipe.pump(sdk).await?;
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let mut events = Vec::new();
        loop {
            let out = sqs
                .receive_message()
                .queue_url(&self.events_capture_url)
                .max_number_of_messages(10)
                .send()
                .await?;
            if out.messages().is_empty() {
                return Ok(events);
            }
            for message in out.messages() {
                if let Some(body) = message.body() {
                    events.push(serde_json::from_str(body)?);
                }
                if let Some(handle) = message.receipt_handle() {
                    sqs.delete_message()
                        .queue_url(&self.events_capture_url)
                        .receipt_handle(handle)
                        .send()
                        .await?;
                }
            }
        }
    }

    /// `CONNECTOR_SECRET_PREFIX`: the ARN prefix of connector credentials
    /// (moto's account, the local region).
    pub fn connector_secret_prefix(&self) -> String {
        format!(
            "arn:aws:secretsmanager:{}:123456789012:secret:{}",
            crate::moto::REGION,
            self.names.connector_secrets
        )
    }

    /// The name of an install's credential secret under this stack's prefix.
    pub fn connector_secret_name(&self, workspace: &str, install_id: &str) -> String {
        format!("{}{workspace}/{install_id}", self.names.connector_secrets)
    }

    /// The rules every function that takes installs or talks to connectors
    /// holds them to, here: loopback servers allowed (local runs only).
    pub fn install_rules(&self) -> anyhow::Result<shared::domain::connector::webhook::InstallRules> {
        Ok(shared::domain::connector::webhook::InstallRules {
            endpoint: shared::domain::connector::endpoint::EndpointPolicy { allow_loopback: true },
            credentials: shared::domain::task::install::CredentialPrefix::parse(&self.connector_secret_prefix())?,
        })
    }

    /// The local value of every SPEC §9 variable that has one: those that
    /// point a function at this stack's resources, both flags on, and SPEC
    /// §9's example ceilings, and the template's globals' endpoint
    /// partitions file. `ALLOW_LOOPBACK_CONNECTORS=true`: local
    /// connectors are on loopback (the template never sets it). The model's
    /// variables come with the Converse endpoint
    /// ([`crate::runtime::Launch::model`]); `CATCH_UP_SECONDS` and
    /// `MAX_ACTIVE_REMINDERS` are left to the functions' defaults.
    /// [`crate::runtime::Launch`] gives each function its template's share.
    /// The stack's outputs as `template.yaml` names them ([`OUTPUT_NAMES`],
    /// in that order): what `sat` reads, from `target/local.env` locally.
    pub fn outputs(&self) -> Vec<(&'static str, String)> {
        let values = [
            self.names.table.clone(),
            self.names.schedule_group.clone(),
            self.runs_queue_arn.clone(),
            self.runs_queue_url.clone(),
            self.runs_dlq_url.clone(),
            self.scheduler_dlq_url.clone(),
            self.reconcile_queue_url.clone(),
            self.reconcile_dlq_url.clone(),
            self.names.event_bus.clone(),
            self.run_finished.url.clone(),
            self.run_finished.arn.clone(),
            self.run_finished.dlq_url.clone(),
            self.pipe_dlq_url.clone(),
        ];
        OUTPUT_NAMES.into_iter().zip(values).collect()
    }

    pub fn function_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AGENT_SCHEDULE_API_ENABLED", "true".to_owned()),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "true".to_owned()),
            ("SCHEDULE_CEILINGS", example_ceilings()),
            ("TABLE_NAME", self.names.table.clone()),
            ("SCHEDULE_GROUP", self.names.schedule_group.clone()),
            ("RUN_QUEUE_ARN", self.runs_queue_arn.clone()),
            ("RUN_QUEUE_URL", self.runs_queue_url.clone()),
            ("SCHEDULER_ROLE_ARN", self.scheduler_role_arn.clone()),
            ("SCHEDULER_DLQ_ARN", self.scheduler_dlq_arn.clone()),
            ("WEBHOOK_SECRET_ARN", self.webhook_secret_arn.clone()),
            ("RECONCILE_QUEUE_URL", self.reconcile_queue_url.clone()),
            ("CONNECTOR_SECRET_PREFIX", self.connector_secret_prefix()),
            ("ALLOW_LOOPBACK_CONNECTORS", "true".to_owned()),
            (
                shared::adapters::partitions::VARIABLE,
                shared::adapters::partitions::FILE.to_owned(),
            ),
        ]
    }
}
