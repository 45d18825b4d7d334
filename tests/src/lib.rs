//! Test harness: one helper per action, over the real local stack. Each test
//! gets its own moto process (killed by PID when the test ends) and its own
//! uniquely named resources.

pub mod bench;
pub mod herd;
pub mod intercept;
pub mod sim;
pub mod year;

/// A harness's report as one two-column markdown table's rows, the names
/// padded to one width.
pub fn table_rows(rows: Vec<(String, String)>) -> String {
    use std::fmt::Write as _;
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or_default();
    let mut out = String::new();
    for (k, v) in rows {
        let _ = writeln!(out, "| {k:<width$} | {v} |");
    }
    out
}

use std::collections::HashMap;

use anyhow::Context;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_scheduler::operation::get_schedule::GetScheduleOutput;
use chrono::{DateTime, Duration, Utc};
use local::{LocalAws, Stack};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::config::{CreateConfig, Flags};
use shared::domain::task::limits::{Ceilings, Limits};

pub const CEILINGS: Limits = shared::domain::task::limits::EXAMPLE_CEILINGS;

pub struct TestStack {
    pub aws: LocalAws,
    pub stack: Stack,
    pub dynamo: aws_sdk_dynamodb::Client,
    pub scheduler: aws_sdk_scheduler::Client,
}

impl TestStack {
    pub async fn start() -> anyhow::Result<Self> {
        let (aws, stack) = LocalAws::with_stack("t").await?;
        Ok(Self {
            dynamo: aws_sdk_dynamodb::Client::new(&aws.sdk),
            scheduler: aws_sdk_scheduler::Client::new(&aws.sdk),
            aws,
            stack,
        })
    }

    /// The create configuration for this stack, with the given flags.
    pub fn create_config(&self, flags: Flags) -> CreateConfig {
        CreateConfig {
            table_name: self.stack.names.table.clone(),
            target: shared::config::ScheduleTarget {
                group: self.stack.names.schedule_group.clone(),
                queue_arn: self.stack.runs_queue_arn.clone(),
                role_arn: self.stack.scheduler_role_arn.clone(),
                dlq_arn: self.stack.scheduler_dlq_arn.clone(),
            },
            flags,
            ceilings: Ceilings::new(CEILINGS).expect("test ceilings are valid"),
            traces: shared::config::TracesConfig::off("create"),
        }
    }

    /// The real create app, wired as the Lambda wires it.
    pub fn create_app(&self) -> create::App {
        create::build(&self.sdk_as("create"), self.create_config(ENABLED))
    }

    /// Every item of the table, as JSON, every page (a herd or a
    /// simulation fills more than one).
    pub async fn scan_all(&self) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = self
                .dynamo
                .scan()
                .table_name(&self.stack.names.table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .context("scan")?;
            out.extend(page.items().iter().cloned().map(local::item_json));
            match page.last_evaluated_key() {
                Some(key) if !key.is_empty() => start = Some(key.clone()),
                _ => return Ok(out),
            }
        }
    }

    /// Every item of the table, as JSON.
    pub async fn items(&self) -> Vec<Value> {
        self.scan_all().await.expect("scan")
    }

    /// Items of one entity type (`task`, `idempotency`, ...).
    pub async fn items_of(&self, entity: &str) -> Vec<Value> {
        self.items()
            .await
            .into_iter()
            .filter(|i| i["entity"] == entity)
            .collect()
    }

    /// The item at a key, as the harness reads it back.
    pub async fn item_at(&self, key: Key) -> Option<Value> {
        self.item(&key.pk, &key.sk).await
    }

    pub async fn item(&self, pk: &str, sk: &str) -> Option<Value> {
        self.raw_item(pk, sk).await.map(local::item_json)
    }

    /// An item as DynamoDB holds it, to write back changed.
    pub async fn raw_item(&self, pk: &str, sk: &str) -> Option<HashMap<String, AttributeValue>> {
        let key: HashMap<String, AttributeValue> = HashMap::from([
            ("pk".to_owned(), AttributeValue::S(pk.to_owned())),
            ("sk".to_owned(), AttributeValue::S(sk.to_owned())),
        ]);
        self.dynamo
            .get_item()
            .table_name(&self.stack.names.table)
            .set_key(Some(key))
            .consistent_read(true)
            .send()
            .await
            .expect("get item")
            .item
    }

    /// Names of the schedules in this stack's group.
    pub async fn schedule_names(&self) -> Vec<String> {
        let out = self
            .scheduler
            .list_schedules()
            .group_name(&self.stack.names.schedule_group)
            .send()
            .await
            .expect("list schedules");
        let mut names: Vec<String> = out
            .schedules()
            .iter()
            .filter_map(|s| s.name().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// Deletes a schedule as Scheduler does after a one-time schedule's
    /// delivery (`ActionAfterCompletion=DELETE`; moto never fires it).
    pub async fn scheduler_delete(&self, name: &str) {
        self.scheduler
            .delete_schedule()
            .name(name)
            .group_name(&self.stack.names.schedule_group)
            .send()
            .await
            .expect("delete the schedule");
    }

    pub async fn schedule(&self, name: &str) -> GetScheduleOutput {
        self.scheduler
            .get_schedule()
            .group_name(&self.stack.names.schedule_group)
            .name(name)
            .send()
            .await
            .expect("get schedule")
    }

    /// Moves SQS's clock forward by `seconds`: a message returned to a
    /// queue is received again only once its visibility has passed on it
    /// (`local::moto::advance_sqs_clock`).
    pub fn advance_sqs_clock(&self, seconds: u32) {
        local::moto::advance_sqs_clock(&self.aws.moto.endpoint(), seconds).expect("moto's SQS clock");
    }

    /// Asserts that nothing at all was written.
    pub async fn assert_untouched(&self, context: &str) {
        assert_eq!(
            self.items().await,
            Vec::<Value>::new(),
            "{context}: table must stay empty"
        );
        assert_eq!(
            self.schedule_names().await,
            Vec::<String>::new(),
            "{context}: no schedule"
        );
    }
}

pub const ENABLED: Flags = Flags {
    api_enabled: true,
    worker_enabled: true,
};

/// SPEC §4's example request, due `ahead` from `now`, written in UTC+01:00.
pub fn create_request(key: &str, now: DateTime<Utc>, ahead: Duration) -> Value {
    let offset = chrono::FixedOffset::east_opt(3600).expect("valid offset");
    let at = (now + ahead)
        .with_timezone(&offset)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
    json!({
        "op": "create",
        "principal": {"id": "usr_123", "workspace": "ws_1", "scopes": ["schedule.write"]},
        "idempotency_key": key,
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard",
                  "limits": {"max_turns": 6, "max_tool_calls": 0, "max_output_tokens": 2000, "timeout_seconds": 120}},
        "approval": {"id": "apr_9", "approved_at": now.to_rfc3339()},
        "input": {"title": "Call mom", "instruction": "Remind me to call mom about Sunday.", "at": at}
    })
}

/// The `error.code` of an answer, or `"ok"`.
pub fn code(answer: &Value) -> String {
    if answer["ok"] == true {
        "ok".to_owned()
    } else {
        answer["error"]["code"].as_str().unwrap_or("<no code>").to_owned()
    }
}

// ---- The runner --------------------------------------------------------------

use std::collections::{BTreeMap, BTreeSet};

use local::converse::ConverseStandIn;
use shared::adapters::bedrock::BedrockModel;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::McpConnectors;
use shared::app::run::{RunSettings, Runner};
use shared::domain::schedule::Schedule;
use shared::domain::task::budget::Budget;
use shared::domain::task::budget::{Price, Prices};
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::{Install, InstallScope, InstallStatus};
use shared::domain::task::{Provenance, Spec, Task, TaskId, TaskKind};

pub const MODEL: &str = "anthropic.claude-test-v1:0";

pub type TestRunner<S = DynamoStore> = Runner<S, BedrockModel, McpConnectors>;

/// $3 / $15 per million tokens.
pub fn prices() -> Prices {
    Prices::new(BTreeMap::from([(MODEL.to_owned(), Price::plain(3.0, 15.0))])).expect("valid prices")
}

pub fn run_settings(worker_enabled: bool) -> RunSettings {
    RunSettings {
        worker_enabled,
        catch_up: Duration::seconds(3600),
        model_id: MODEL.to_owned(),
        prices: prices(),
        ceilings: Ceilings::new(CEILINGS).expect("test ceilings are valid"),
        retention: Duration::days(shared::config::DEFAULT_RETENTION_DAYS),
        pace: None,
        person_monthly_usd: None,
        approval_hours: shared::domain::run::gate::DEFAULT_APPROVAL_HOURS,
    }
}

/// The local stack plus the Converse stand-in.
pub struct RunStack {
    pub t: TestStack,
    pub model: ConverseStandIn,
    pub model_sdk: aws_config::SdkConfig,
}

impl RunStack {
    pub async fn start() -> anyhow::Result<Self> {
        let t = TestStack::start().await?;
        let model = ConverseStandIn::start().await?;
        let model_sdk = local::sdk_config(&model.endpoint()).await;
        Ok(Self { t, model, model_sdk })
    }

    pub fn store(&self) -> DynamoStore {
        DynamoStore::new(local::strict::dynamodb(&self.t.aws.sdk), &self.t.stack.names.table)
    }

    /// Stores `task` as create or reconcile would have written it.
    pub async fn insert(&self, task: &Task) {
        self.store().insert_task(task).await.expect("insert the task");
    }

    /// A reminder stored with its occurrence five seconds ago.
    pub async fn due_reminder(&self) -> (Task, DateTime<Utc>) {
        let at = Utc::now() - Duration::seconds(5);
        let task = reminder(at);
        self.insert(&task).await;
        (task, at)
    }

    /// Delivers `task`'s occurrence at `at` once through the real runner
    /// (message `m1`, execution `e1`), with five minutes to go: now, or, for
    /// an occurrence still to come, at its time, as Scheduler delivers it.
    pub async fn deliver_once(&self, task: &Task, at: DateTime<Utc>) -> shared::app::run::Disposition {
        self.runner()
            .deliver("m1", &run_message(task, at, "e1"), Utc::now().max(at), deadline())
            .await
            .expect("the delivery answers")
    }

    /// The lease the claim of `task`'s occurrence at `at` holds, as its
    /// task item has it: a delivery after it takes the occurrence over.
    pub async fn lease_of(&self, task: &Task, at: DateTime<Utc>) -> DateTime<Utc> {
        let item = self
            .t
            .item_at(shared::adapters::keys::Key::task(
                &task.workspace,
                task.task_id.as_str(),
            ))
            .await
            .expect("the task item");
        let occurrence = shared::domain::run::occurrence::occurrence_key(at);
        let lease = item["claims"][&occurrence]["lease_until"]
            .as_i64()
            .unwrap_or_else(|| panic!("a claim with a lease: {item}"));
        DateTime::from_timestamp(lease, 0).expect("a lease in range")
    }

    /// Delivers once (as [`RunStack::deliver_once`]), asserts that the
    /// occurrence ran to `status`, and answers its run record.
    pub async fn run_to(&self, task: &Task, at: DateTime<Utc>, status: RunStatus) -> Value {
        let got = self.deliver_once(task, at).await;
        assert_eq!(got, shared::app::run::Disposition::Ran(status));
        let occurrence = shared::domain::run::occurrence::occurrence_key(at);
        self.run_record(&task.task_id, &occurrence).await.expect("a run record")
    }

    /// An issues server listing `tools` and a `triage` prompt, installed in
    /// ws_1 as `ins_1`, and its connector task offered `offered`, approved
    /// by an admin who gated `ask_first` (a gated tool call's set-up, SPEC
    /// §15), stored.
    pub async fn triage(
        &self,
        tools: Vec<local::mcp_fixture::FixtureTool>,
        offered: &[&str],
        ask_first: &[&str],
    ) -> (local::mcp_fixture::McpFixture, Task) {
        self.issues_task("triage", tools, offered, ask_first).await
    }

    /// An issues server listing `tools` and the scheduled prompt `prompt`,
    /// installed in ws_1 as `ins_1`, and the prompt's connector task offered
    /// `offered`, approved by an admin who gated `ask_first`, stored.
    pub async fn issues_task(
        &self,
        prompt: &str,
        tools: Vec<local::mcp_fixture::FixtureTool>,
        offered: &[&str],
        ask_first: &[&str],
    ) -> (local::mcp_fixture::McpFixture, Task) {
        let issues = local::mcp_fixture::McpFixture::start(local::mcp_fixture::FixtureState {
            prompts: vec![local::mcp_fixture::scheduled_prompt(
                prompt,
                json!({"version": 1}),
                &[],
                "Triage.",
            )],
            tools,
            ..Default::default()
        })
        .await
        .expect("the issues server starts");
        self.store()
            .put_install(&install("ins_1", "issues", &issues.url(), InstallScope::Workspace))
            .await
            .expect("its install is stored");
        let mut task = connector_task("issues", prompt, offered, &[]);
        task.approval = Some(shared::domain::task::Approval {
            id: "admin:adm_1:1".into(),
            approved_at: Utc::now(),
            by: Some("adm_1".into()),
            ask_first: ask_first.iter().map(|t| (*t).to_owned()).collect(),
        });
        self.insert(&task).await;
        (issues, task)
    }

    /// The runner on a store of the caller's choice (to inject crashes).
    pub fn runner_on<S: shared::ports::RunStore>(&self, store: S, settings: RunSettings) -> TestRunner<S> {
        Runner::new(
            store,
            BedrockModel::from_sdk(&self.model_sdk),
            McpConnectors::from_sdk(&self.t.sdk_as("runner"), self.t.rules()),
            settings,
        )
    }

    /// The store as the runner function has it: every request under its
    /// role.
    /// The store as the reconcile worker signs (approvals' expiry, the
    /// missed-occurrence check).
    pub fn reconcile_store(&self) -> DynamoStore {
        DynamoStore::new(
            local::strict::dynamodb(&self.t.sdk_as("reconcile")),
            &self.t.stack.names.table,
        )
    }

    pub fn runner_store(&self) -> DynamoStore {
        DynamoStore::new(
            local::strict::dynamodb(&self.t.sdk_as("runner")),
            &self.t.stack.names.table,
        )
    }

    pub fn runner(&self) -> TestRunner {
        self.runner_on(self.runner_store(), run_settings(true))
    }

    /// The runner whose connectors verify certificates with `tls` (a test's
    /// root: `shared::adapters::tls::Tls::trusting`).
    pub fn runner_trusting(&self, tls: shared::adapters::tls::Tls) -> TestRunner {
        Runner::new(
            self.runner_store(),
            BedrockModel::from_sdk(&self.model_sdk),
            McpConnectors::from_sdk(&self.t.sdk_as("runner"), self.t.rules()).with_tls(tls),
            run_settings(true),
        )
    }

    /// The notifications so far: the local pipe carries the settled runs
    /// from the table's stream to the bus, then the capture queue is read.
    pub async fn events(&self) -> Vec<Value> {
        self.t.stack.received_events(&self.t.aws.sdk).await.expect("events")
    }

    pub async fn run_record(&self, task_id: &TaskId, occurrence: &str) -> Option<Value> {
        self.t.item_at(Key::run(task_id.as_str(), occurrence)).await
    }

    pub async fn task_item(&self, task: &Task) -> Value {
        self.t
            .item_at(Key::task(&task.workspace, task.task_id.as_str()))
            .await
            .expect("task item")
    }

    pub async fn account(&self, account: &shared::domain::task::budget::Account, period: &str) -> Option<Value> {
        self.t.item_at(Key::account(account, period)).await
    }
}

/// Five minutes from now: an invocation deadline no test run reaches.
pub fn deadline() -> DateTime<Utc> {
    Utc::now() + Duration::minutes(5)
}

/// A work deadline no test reaches (the expiry's and the check's are
/// monotonic instants).
pub fn far_deadline() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(600)
}

/// The runs-queue message Scheduler would deliver for an occurrence.
pub fn run_message(task: &Task, scheduled: DateTime<Utc>, execution_id: &str) -> String {
    json!({
        "task_id": task.task_id,
        "workspace": task.workspace,
        "scheduled_time": scheduled.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "execution_id": execution_id,
        "attempt": "1",
    })
    .to_string()
}

pub fn limits() -> Limits {
    Limits {
        max_turns: 4,
        max_tool_calls: 3,
        max_output_tokens: 2000,
        timeout_seconds: 60,
    }
}

/// A reminder due at `at`, as create would have written it.
/// A one-time reminder at `at`, in whole seconds as create stores it (and
/// as Scheduler's scheduled time names its occurrence).
pub fn reminder(at: DateTime<Utc>) -> Task {
    use chrono::SubsecRound;
    let at = at.trunc_subsecs(0);
    Task::new(
        TaskId::for_reminder("ws_1", "usr_123", &uuid_like(at)),
        "ws_1".into(),
        TaskKind::Reminder,
        Provenance::User {
            principal: "usr_123".into(),
        },
        "Call mom".into(),
        Some("Remind me to call mom about Sunday.".into()),
        Spec {
            schedule: Schedule::At { at },
            tools: BTreeSet::new(),
            limits: limits(),
            budget: None,
            arguments: BTreeMap::new(),
            needs: BTreeMap::new(),
            bindings: BTreeMap::new(),
            agent: None,
            scopes: BTreeSet::new(),
        },
        at,
    )
}

fn uuid_like(at: DateTime<Utc>) -> String {
    format!("key-{}", at.timestamp_nanos_opt().unwrap_or_default())
}

/// A connector task of `server`'s prompt, approved with `tools`, a budget
/// and `arguments`.
pub fn connector_task(server: &str, prompt: &str, tools: &[&str], arguments: &[(&str, &str)]) -> Task {
    let now = Utc::now();
    let mut task = reminder(now);
    task.task_id = TaskId::for_connector("ws_1", server, prompt);
    task.kind = TaskKind::Connector;
    task.provenance = Provenance::Connector {
        install_id: "ins_1".into(),
        server: server.into(),
        prompt: prompt.into(),
    };
    task.title = prompt.into();
    task.instruction = None;
    // A rate: any instant a test delivers is one of its occurrences (the
    // door skips a time that is not one of the current schedule's).
    task.spec.schedule = Schedule::Rate {
        every: 5,
        unit: shared::domain::schedule::RateUnit::Minutes,
    };
    task.spec.tools = tools.iter().map(|t| (*t).to_owned()).collect();
    task.spec.budget = Some(Budget {
        max_usd_per_run: 0.25,
        max_usd_per_month: 5.0,
    });
    task.spec.arguments = arguments
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    task
}

pub fn install(id: &str, server: &str, url: &str, scope: InstallScope) -> Install {
    Install {
        install_id: id.into(),
        workspace: "ws_1".into(),
        server: server.into(),
        url: url.into(),
        scope,
        account: format!("acct_{id}"),
        credential_secret_arn: None,
        status: InstallStatus::Installed,
        updated_at: Utc::now(),
        declaration_errors: Default::default(),
        last_error: None,
        lifecycle_at: None,
        lifecycle_id: None,
    }
}

// ---- Reconcile and admin -------------------------------------------------------

use shared::adapters::queue::{FifoQueue, RunsQueue};
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::Admin;
use shared::app::reconcile::Reconciler;

pub type TestReconciler = Reconciler<DynamoStore, EventBridgeSchedules, McpConnectors, FifoQueue>;

impl TestStack {
    /// Writes items straight to the table, 25 a batch (a table as another
    /// release or a large fleet left it), until none is left unprocessed.
    pub async fn put_items(&self, items: Vec<shared::adapters::dynamo::Item>) {
        use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
        for chunk in items.chunks(25) {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    WriteRequest::builder()
                        .put_request(
                            PutRequest::builder()
                                .set_item(Some(item.clone()))
                                .build()
                                .expect("a put"),
                        )
                        .build()
                })
                .collect();
            while !requests.is_empty() {
                let out = self
                    .dynamo
                    .batch_write_item()
                    .request_items(&self.stack.names.table, requests)
                    .send()
                    .await
                    .expect("a batch write");
                requests = out
                    .unprocessed_items
                    .and_then(|mut left| left.remove(&self.stack.names.table))
                    .unwrap_or_default();
            }
        }
    }

    pub fn reconciler(&self) -> TestReconciler {
        self.reconciler_with(self.rules())
    }

    /// The install rules of this stack: loopback connectors allowed, as
    /// the local stack sets `ALLOW_LOOPBACK_CONNECTORS`.
    pub fn rules(&self) -> shared::app::reconcile::InstallRules {
        self.stack.install_rules().expect("the stack's install rules")
    }

    /// The rules of a deployment: `ALLOW_LOOPBACK_CONNECTORS` unset.
    pub fn deployed_rules(&self) -> shared::app::reconcile::InstallRules {
        let mut rules = self.rules();
        rules.endpoint.allow_loopback = false;
        rules
    }

    /// The SDK configuration `function` signs with (its role's key,
    /// `local::runtime::role_key`), so the local IAM check holds a use case
    /// run in process to that function's role in template.yaml.
    pub fn sdk_as(&self, function: &str) -> aws_config::SdkConfig {
        use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
        let key = local::runtime::role_key(function).expect("a function of the template");
        self.aws
            .sdk
            .to_builder()
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                key, "local", None, None, "role",
            )))
            .build()
    }

    /// The reconciler as the reconcile worker runs it: every AWS request
    /// under its role.
    pub fn reconciler_as_worker(&self) -> TestReconciler {
        let rules = self.rules();
        let sdk = self.sdk_as("reconcile");
        let config = self.create_config(ENABLED);
        Reconciler::new(
            DynamoStore::new(local::strict::dynamodb(&sdk), &self.stack.names.table),
            EventBridgeSchedules::from_sdk(&sdk, config.target),
            McpConnectors::from_sdk(&sdk, rules.clone()).for_lists(),
            FifoQueue::from_sdk(&sdk, &self.stack.reconcile_queue_url),
            config.ceilings,
            rules,
        )
    }

    /// The reconciler under the given install rules.
    pub fn reconciler_with(&self, rules: shared::app::reconcile::InstallRules) -> TestReconciler {
        self.reconciler_over(
            McpConnectors::from_sdk(&self.sdk_as("reconcile"), rules.clone()).for_lists(),
            rules,
        )
    }

    /// The reconciler on these connectors (one verifying with a test's
    /// root: `McpConnectors::with_tls`).
    pub fn reconciler_over(
        &self,
        connectors: McpConnectors,
        rules: shared::app::reconcile::InstallRules,
    ) -> TestReconciler {
        let config = self.create_config(ENABLED);
        let sdk = self.sdk_as("reconcile");
        Reconciler::new(
            DynamoStore::new(local::strict::dynamodb(&sdk), &self.stack.names.table),
            EventBridgeSchedules::from_sdk(&sdk, config.target),
            connectors,
            FifoQueue::from_sdk(&sdk, &self.stack.reconcile_queue_url),
            config.ceilings,
            rules,
        )
    }

    /// The store on this stack's table.
    pub fn admin_store(&self) -> DynamoStore {
        DynamoStore::new(local::strict::dynamodb(&self.aws.sdk), &self.stack.names.table)
    }

    pub fn admin(&self) -> AdminFunction<DynamoStore, EventBridgeSchedules, RunsQueue> {
        let config = self.create_config(ENABLED);
        let sdk = self.sdk_as("admin");
        AdminFunction(Admin::new(
            DynamoStore::new(local::strict::dynamodb(&sdk), &self.stack.names.table),
            EventBridgeSchedules::from_sdk(&sdk, config.target),
            RunsQueue::from_sdk(&sdk, &self.stack.runs_queue_url),
            admin_settings(),
        ))
    }

    /// The runs queue, as the admin and schedules functions send a run now.
    pub fn runs_queue(&self) -> RunsQueue {
        RunsQueue::from_sdk(&self.aws.sdk, &self.stack.runs_queue_url)
    }

    /// Receives and deletes every message of the runs queue: their bodies.
    pub async fn take_run_messages(&self) -> Vec<String> {
        let sqs = aws_sdk_sqs::Client::new(&self.aws.sdk);
        let mut bodies = Vec::new();
        loop {
            let got = sqs
                .receive_message()
                .queue_url(&self.stack.runs_queue_url)
                .max_number_of_messages(10)
                .send()
                .await
                .expect("receive");
            if got.messages().is_empty() {
                return bodies;
            }
            for message in got.messages() {
                bodies.push(message.body().unwrap_or_default().to_owned());
                sqs.delete_message()
                    .queue_url(&self.stack.runs_queue_url)
                    .receipt_handle(message.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
    }

    /// Receives and deletes every message of the reconcile FIFO queue.
    /// Runs the daily pass as the FIFO worker would: its first pages, then
    /// every page message it queues, to the end of its chain. Answers the
    /// install passes it queued (group, body, not worked) and how many page
    /// messages it worked.
    pub async fn run_daily_pass(&self, r: &TestReconciler, now: DateTime<Utc>) -> (Vec<(String, String)>, usize) {
        r.reconcile_all(now).await.expect("the pass is queued");
        let (mut installs, mut pages) = (Vec::new(), 0);
        loop {
            let work = self.take_work().await;
            if work.is_empty() {
                return (installs, pages);
            }
            for (group, body) in work {
                if body.contains("\"reconcile.install\"") {
                    installs.push((group, body));
                } else {
                    r.work(&body, now).await.expect("a page of the pass");
                    pages += 1;
                }
            }
        }
    }

    /// The missed-occurrence check as the worker runs it at `at`: the
    /// scheduled item, then each shard's item it queued (taken from the
    /// work queue); how many missed occurrences they reported, summed.
    pub async fn run_overdue_check(&self, r: &TestReconciler, at: DateTime<Utc>) -> usize {
        let queued = r
            .work(r#"{"type": "overdue.check"}"#, at)
            .await
            .expect("the check runs");
        assert_eq!(
            queued.overdue, None,
            "the scheduled item only queues the shards' checks"
        );
        let mut missed = 0;
        let mut shards = 0;
        for (group, body) in self.take_work().await {
            assert!(group.starts_with("overdue/"), "{group}: {body}");
            let summary = r.work(&body, at).await.expect("a shard's check runs");
            missed += summary.overdue.expect("a shard's count");
            shards += 1;
        }
        assert_eq!(
            shards,
            2 * usize::from(shared::domain::run::definition::REMINDER_SHARDS)
        );
        missed
    }

    pub async fn take_work(&self) -> Vec<(String, String)> {
        let sqs = aws_sdk_sqs::Client::new(&self.aws.sdk);
        let mut out = Vec::new();
        loop {
            let got = sqs
                .receive_message()
                .queue_url(&self.stack.reconcile_queue_url)
                .max_number_of_messages(10)
                .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)
                .send()
                .await
                .expect("receive");
            if got.messages().is_empty() {
                return out;
            }
            for m in got.messages() {
                let group = m
                    .attributes()
                    .and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId))
                    .cloned()
                    .unwrap_or_default();
                out.push((group, m.body().unwrap_or_default().to_owned()));
                sqs.delete_message()
                    .queue_url(&self.stack.reconcile_queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
    }
}

/// A workspace admin of ws_1.
/// Admin's settings as the template's defaults give them.
pub fn admin_settings() -> shared::app::admin::AdminSettings {
    shared::app::admin::AdminSettings {
        max_active: shared::config::DEFAULT_MAX_ACTIVE_REMINDERS,
        retention: chrono::Duration::days(shared::config::DEFAULT_RETENTION_DAYS),
    }
}

pub fn admin_principal() -> Value {
    json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]})
}

pub fn installed(id: &str, server: &str, url: &str, scope: &str) -> shared::domain::connector::webhook::Event {
    serde_json::from_value(json!({"type": "connector.installed", "workspace": "ws_1",
        "install": {"id": id, "server": server, "url": url, "scope": scope, "account": format!("acct_{id}")}}))
    .expect("event")
}

pub fn event(kind: &str, id: &str) -> shared::domain::connector::webhook::Event {
    serde_json::from_value(json!({"type": kind, "workspace": "ws_1", "install": {"id": id}})).expect("event")
}

// ---- The owner's schedules (SPEC §11) -------------------------------------------

impl TestStack {
    /// The real schedules app, wired as the Lambda wires it, with `max_active`.
    pub fn schedules_app_with(&self, flags: Flags, max_active: usize) -> schedules::App {
        let config = self.create_config(flags);
        schedules::build(
            &self.sdk_as("schedules"),
            shared::config::SchedulesConfig {
                table_name: config.table_name,
                target: config.target,
                run_queue_url: self.stack.runs_queue_url.clone(),
                flags: config.flags,
                ceilings: config.ceilings,
                max_active,
                retention: chrono::Duration::days(shared::config::DEFAULT_RETENTION_DAYS),
            },
        )
    }

    pub fn schedules_app(&self) -> schedules::App {
        self.schedules_app_with(ENABLED, shared::config::DEFAULT_MAX_ACTIVE_REMINDERS)
    }
}

/// A signed-in user of ws_1 with both schedule scopes.
pub fn owner(id: &str) -> Value {
    owner_in(id, "ws_1")
}

pub fn owner_in(id: &str, workspace: &str) -> Value {
    json!({"id": id, "workspace": workspace, "scopes": ["schedule.read", "schedule.write"]})
}

/// A schedules `create` of the owner `principal`, with `when` one of
/// `{"at": ...}`, `{"daily": ...}`, `{"weekly": ...}`.
pub fn schedules_create(principal: &Value, key: &str, title: &str, when: Value) -> Value {
    let mut input = json!({"title": title, "instruction": format!("Remind me: {title}.")});
    if let (Some(input), Some(when)) = (input.as_object_mut(), when.as_object()) {
        input.extend(when.clone());
    }
    json!({
        "op": "create",
        "principal": principal,
        "idempotency_key": key,
        "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard"},
        "input": input,
    })
}

/// The admin use case behind its function's handler: a payload is decoded
/// as the admin function decodes it (`admin::decode`), then answered.
pub struct AdminFunction<S, G, Q>(pub Admin<S, G, Q>);

impl<S, G, Q> AdminFunction<S, G, Q>
where
    S: shared::ports::TaskCatalog
        + shared::ports::TaskStore
        + shared::ports::ReminderStore
        + shared::ports::WorkspaceBudgets
        + shared::ports::CallApprovals,
    G: shared::ports::Schedules,
    Q: shared::ports::RunQueue,
{
    pub async fn handle(
        &self,
        payload: Value,
        now: chrono::DateTime<chrono::Utc>,
    ) -> Result<Value, shared::app::admin::AdminError> {
        admin::answer(&self.0, payload.into(), now).await
    }
}

/// Answers `-h` or `--help` with `usage` and exits, before anything starts:
/// every harness binary does.
pub fn answer_help(usage: &str) {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!("{usage}");
        std::process::exit(0);
    }
}

/// An owner's `list` answer as each task id and its state.
pub fn listed_states(listed: &Value) -> std::collections::BTreeMap<String, String> {
    listed["tasks"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|t| {
            (
                t["task_id"].as_str().unwrap_or_default().to_owned(),
                t["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Whether a delivery died: its future did not finish within five seconds
/// (a hook that never answers stands for a process that is gone; its
/// message goes back when its visibility passes).
pub async fn crashes<T>(delivery: impl std::future::Future<Output = T>) -> bool {
    tokio::time::timeout(std::time::Duration::from_secs(5), delivery)
        .await
        .is_err()
}
