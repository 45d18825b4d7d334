//! Test harness: one helper per action, over the real local stack. Each test
//! gets its own moto process (killed by PID when the test ends) and its own
//! uniquely named resources.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_scheduler::operation::get_schedule::GetScheduleOutput;
use chrono::{DateTime, Duration, Utc};
use local::{LocalAws, Stack};
use serde_json::{Value, json};
use shared::config::{CreateConfig, Flags};
use shared::domain::limits::{Ceilings, Limits};

pub const CEILINGS: Limits = Limits {
    max_turns: 10,
    max_tool_calls: 20,
    max_output_tokens: 4000,
    timeout_seconds: 300,
};

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
        }
    }

    /// The real create app, wired as the Lambda wires it.
    pub fn create_app(&self) -> create::App {
        create::build(&self.aws.sdk, self.create_config(ENABLED))
    }

    /// Every item of the table, as JSON.
    pub async fn items(&self) -> Vec<Value> {
        let out = self
            .dynamo
            .scan()
            .table_name(&self.stack.names.table)
            .consistent_read(true)
            .send()
            .await
            .expect("scan");
        out.items().iter().cloned().map(local::item_json).collect()
    }

    /// Items of one entity type (`task`, `idempotency`, ...).
    pub async fn items_of(&self, entity: &str) -> Vec<Value> {
        self.items()
            .await
            .into_iter()
            .filter(|i| i["entity"] == entity)
            .collect()
    }

    pub async fn item(&self, pk: &str, sk: &str) -> Option<Value> {
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
            .map(local::item_json)
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

    pub async fn schedule(&self, name: &str) -> GetScheduleOutput {
        self.scheduler
            .get_schedule()
            .group_name(&self.stack.names.schedule_group)
            .name(name)
            .send()
            .await
            .expect("get schedule")
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
