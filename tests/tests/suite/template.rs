//! `template.yaml` and the local stack are kept in step: the settings the
//! local stack creates on moto (`local::STACK`) and the variables each
//! function reads are compared with the template here.

use std::collections::BTreeSet;

use serde_yaml::Value;
use shared::config::{AdminConfig, CreateConfig, ReconcileConfig, RunnerConfig, SchedulesConfig};

fn template() -> Value {
    let path = local::moto::repo_root().join("template.yaml");
    let text = std::fs::read_to_string(&path).expect("template.yaml");
    serde_yaml::from_str(&text).expect("template.yaml parses")
}

fn resource<'a>(t: &'a Value, name: &str) -> &'a Value {
    let r = &t["Resources"][name];
    assert!(!r.is_null(), "resource {name} is missing");
    r
}

fn props<'a>(t: &'a Value, name: &str) -> &'a Value {
    &resource(t, name)["Properties"]
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v:?} is not a number"))
}

/// `!GetAtt X.Arn` as it parses: a tagged string.
fn get_att(v: &Value) -> String {
    match v {
        Value::Tagged(t) if t.tag == "!GetAtt" => t.value.as_str().unwrap_or_default().to_owned(),
        other => panic!("expected !GetAtt, got {other:?}"),
    }
}

#[test]
fn the_table_matches_the_local_stack() {
    let t = template();
    let table = props(&t, "TasksTable");
    assert_eq!(table["BillingMode"], "PAY_PER_REQUEST");
    let (hash, range) = local::STACK.table_keys;
    let defs: Vec<(String, String)> = table["AttributeDefinitions"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["AttributeName"].as_str().unwrap().into(),
                d["AttributeType"].as_str().unwrap().into(),
            )
        })
        .collect();
    let (index, index_hash, index_range) = local::STACK.table_index;
    let (owner, owner_hash, owner_range) = local::STACK.owner_index;
    assert_eq!(
        defs,
        vec![
            (hash.into(), "S".into()),
            (range.into(), "S".into()),
            (index_hash.into(), "S".into()),
            (index_range.into(), "S".into()),
            (owner_hash.into(), "S".into()),
            (owner_range.into(), "S".into())
        ]
    );
    let key_schema = |v: &Value| -> Vec<(String, String)> {
        v.as_sequence()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["AttributeName"].as_str().unwrap().into(),
                    k["KeyType"].as_str().unwrap().into(),
                )
            })
            .collect()
    };
    let pair = |a: &str, b: &str| vec![(a.to_owned(), "HASH".to_owned()), (b.to_owned(), "RANGE".to_owned())];
    assert_eq!(key_schema(&table["KeySchema"]), pair(hash, range));
    let indexes = table["GlobalSecondaryIndexes"].as_sequence().unwrap();
    assert_eq!(indexes.len(), 2);
    assert_eq!(indexes[0]["IndexName"], index);
    assert_eq!(key_schema(&indexes[0]["KeySchema"]), pair(index_hash, index_range));
    assert_eq!(indexes[0]["Projection"]["ProjectionType"], "KEYS_ONLY");
    assert_eq!(indexes[1]["IndexName"], owner);
    assert_eq!(key_schema(&indexes[1]["KeySchema"]), pair(owner_hash, owner_range));
    assert_eq!(indexes[1]["Projection"]["ProjectionType"], "ALL");
    assert_eq!(
        table["TimeToLiveSpecification"]["AttributeName"],
        local::STACK.ttl_attribute
    );
    assert_eq!(table["TimeToLiveSpecification"]["Enabled"], true);
}

#[test]
fn the_queues_match_the_local_stack() {
    let t = template();
    let runs = props(&t, "RunsQueue");
    assert_eq!(
        num(&runs["VisibilityTimeout"]),
        u64::from(local::STACK.runs_visibility_timeout)
    );
    assert_eq!(
        num(&runs["MessageRetentionPeriod"]),
        u64::from(local::STACK.runs_retention_seconds)
    );
    assert_eq!(
        num(&runs["RedrivePolicy"]["maxReceiveCount"]),
        u64::from(local::STACK.runs_max_receive_count)
    );
    assert_eq!(
        get_att(&runs["RedrivePolicy"]["deadLetterTargetArn"]),
        "RunsDeadLetterQueue.Arn"
    );
    for dlq in ["RunsDeadLetterQueue", "SchedulerDeadLetterQueue"] {
        assert_eq!(
            num(&props(&t, dlq)["MessageRetentionPeriod"]),
            u64::from(local::STACK.dlq_retention_seconds)
        );
    }
    assert_eq!(resource(&t, "ScheduleGroup")["Type"], "AWS::Scheduler::ScheduleGroup");
}

#[test]
fn the_scheduler_role_may_only_send_to_the_runs_queue_and_its_dlq() {
    let t = template();
    let role = props(&t, "SchedulerRole");
    let trust = &role["AssumeRolePolicyDocument"]["Statement"][0];
    assert_eq!(trust["Principal"]["Service"], "scheduler.amazonaws.com");
    let policies = role["Policies"].as_sequence().unwrap();
    assert_eq!(policies.len(), 1);
    let statements = policies[0]["PolicyDocument"]["Statement"].as_sequence().unwrap();
    assert_eq!(statements.len(), 1);
    assert_eq!(statements[0]["Action"], "sqs:SendMessage");
    let resources: BTreeSet<String> = statements[0]["Resource"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(get_att)
        .collect();
    assert_eq!(
        resources,
        BTreeSet::from(["RunsQueue.Arn".to_owned(), "SchedulerDeadLetterQueue.Arn".to_owned()])
    );
}

#[test]
fn the_create_function_is_built_and_configured_as_the_code_expects() {
    let t = template();
    let globals = &t["Globals"]["Function"];
    assert_eq!(globals["Runtime"], "provided.al2023");
    assert_eq!(globals["Architectures"][0], "arm64");
    let function = resource(&t, "CreateFunction");
    assert_eq!(function["Metadata"]["BuildMethod"], "rust-cargolambda");
    assert_eq!(function["Metadata"]["BuildProperties"]["Binary"], "create");
    let vars: BTreeSet<&str> = function["Properties"]["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(vars, CreateConfig::VARIABLES.into_iter().collect());
}

#[test]
fn the_runner_consumes_the_runs_queue_with_partial_batch_failures() {
    let t = template();
    let runner = resource(&t, "RunnerFunction");
    assert_eq!(runner["Metadata"]["BuildMethod"], "rust-cargolambda");
    assert_eq!(runner["Metadata"]["BuildProperties"]["Binary"], "runner");
    let props = &runner["Properties"];
    let event = &props["Events"]["Runs"];
    assert_eq!(event["Type"], "SQS");
    assert_eq!(get_att(&event["Properties"]["Queue"]), "RunsQueue.Arn");
    assert_eq!(
        event["Properties"]["FunctionResponseTypes"][0],
        "ReportBatchItemFailures"
    );
    let timeout = num(&props["Timeout"]);
    let visibility = num(&props_of_runs_queue(&t)["VisibilityTimeout"]);
    assert!(visibility >= 6 * timeout, "visibility {visibility} < 6 x {timeout}");
    let vars: BTreeSet<&str> = props["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(vars, RunnerConfig::VARIABLES.into_iter().collect());
}

fn props_of_runs_queue(t: &Value) -> &Value {
    props(t, "RunsQueue")
}

fn variables(t: &Value, function: &str) -> BTreeSet<String> {
    props(t, function)["Environment"]["Variables"]
        .as_mapping()
        .unwrap()
        .keys()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

#[test]
fn reconcile_and_admin_read_what_the_template_sets() {
    let t = template();
    let want = |vars: &[&str]| vars.iter().map(|v| (*v).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(variables(&t, "ReconcileFunction"), want(&ReconcileConfig::VARIABLES));
    assert_eq!(variables(&t, "AdminFunction"), want(&AdminConfig::VARIABLES));
    let reconcile = resource(&t, "ReconcileFunction");
    assert_eq!(reconcile["Metadata"]["BuildProperties"]["Binary"], "reconcile");
    assert_eq!(
        resource(&t, "AdminFunction")["Metadata"]["BuildProperties"]["Binary"],
        "admin"
    );
    let work = &reconcile["Properties"]["Events"]["Work"]["Properties"];
    assert_eq!(get_att(&work["Queue"]), "ReconcileQueue.Arn");
    assert_eq!(work["FunctionResponseTypes"][0], "ReportBatchItemFailures");
    assert_eq!(
        reconcile["Properties"]["FunctionUrlConfig"]["AuthType"], "NONE",
        "webhooks authenticate by signature"
    );
    let queue = props(&t, "ReconcileQueue");
    assert_eq!(queue["FifoQueue"], true);
    assert_eq!(
        num(&queue["VisibilityTimeout"]),
        u64::from(local::STACK.reconcile_visibility_timeout)
    );
    assert!(num(&queue["VisibilityTimeout"]) >= 6 * num(&reconcile["Properties"]["Timeout"]));
    let daily = props(&t, "DailyReconcileSchedule");
    assert_eq!(daily["ScheduleExpression"], "rate(1 day)");
    assert_eq!(daily["Target"]["Input"], r#"{"type": "reconcile.all"}"#);
    let pass: shared::app::reconcile::Work = serde_json::from_str(daily["Target"]["Input"].as_str().unwrap()).unwrap();
    assert_eq!(
        pass,
        shared::app::reconcile::Work::Pass(shared::app::reconcile::Pass::All)
    );
    assert_eq!(
        resource(&t, "ReconcileAtDeploy")["Type"],
        "AWS::CloudFormation::CustomResource"
    );
    // Both query the index (installed connectors; a task's workspace), and
    // nothing scans the table.
    let index_arn = format!("${{TasksTable.Arn}}/index/{}", local::STACK.table_index.0);
    for function in ["ReconcileFunction", "AdminFunction"] {
        let statements = props(&t, function)["Policies"][0]["Statement"].as_sequence().unwrap();
        let on_index = statements.iter().any(|s| {
            s["Action"] == "dynamodb:Query"
                && matches!(&s["Resource"], Value::Tagged(r) if r.tag == "!Sub" && r.value == index_arn.as_str())
        });
        assert!(on_index, "{function} may query {index_arn}");
        for s in statements {
            let actions = match &s["Action"] {
                Value::Sequence(a) => a.clone(),
                one => vec![one.clone()],
            };
            assert!(!actions.contains(&Value::from("dynamodb:Scan")), "{function} scans");
        }
    }
}

fn run_stream_record(event: &str, status: &str) -> serde_json::Value {
    serde_json::json!({"eventName": event, "dynamodb": {"NewImage": {
        "entity": {"S": "run"}, "workspace": {"S": "ws_1"}, "task_id": {"S": "rem_1"},
        "run_id": {"S": "run_1"}, "scheduled_time": {"S": "2026-12-24T18:00:00Z"},
        "status": {"S": status}, "output": {"S": "secret words"}, "cost_usd": {"N": "0.01"}}}})
}

/// The notification outbox: the pipe's filter and input template, as the
/// template gives them (and the local stand-in applies them).
#[test]
fn the_pipe_notifies_settled_runs_with_ids_and_status_only() {
    use shared::domain::notification::{DETAIL_TYPE, RunFinished, SOURCE};
    let spec = local::pipe::PipeSpec::from_template().unwrap();
    assert_eq!(spec.detail_type, DETAIL_TYPE);
    assert_eq!(spec.source, SOURCE);
    for status in ["succeeded", "failed"] {
        for event in ["INSERT", "MODIFY"] {
            assert!(spec.matches(&run_stream_record(event, status)), "{event} {status}");
        }
        let detail = spec.render(&run_stream_record("INSERT", status)).unwrap();
        let parsed: RunFinished = serde_json::from_value(detail.clone()).unwrap();
        assert_eq!(
            serde_json::to_value(&parsed).unwrap(),
            detail,
            "exactly the five fields"
        );
        assert_eq!(parsed.run_id, "run_1");
    }
    assert!(
        !spec.matches(&run_stream_record("INSERT", "skipped")),
        "a skip sends none"
    );
    assert!(!spec.matches(&run_stream_record("INSERT", "running")));
    assert!(
        !spec.matches(&run_stream_record("REMOVE", "succeeded")),
        "a TTL expiry sends none"
    );
    let mut task = run_stream_record("MODIFY", "succeeded");
    task["dynamodb"]["NewImage"]["entity"] = serde_json::json!({"S": "task"});
    assert!(!spec.matches(&task), "only run records");

    let t = template();
    assert_eq!(
        props(&t, "TasksTable")["StreamSpecification"]["StreamViewType"],
        local::STACK.table_stream_view
    );
    let pipe = props(&t, "RunFinishedPipe");
    assert_eq!(get_att(&pipe["Source"]), "TasksTable.StreamArn");
    assert_eq!(get_att(&pipe["Target"]), "EventBus.Arn");
    assert_eq!(
        get_att(&pipe["SourceParameters"]["DynamoDBStreamParameters"]["DeadLetterConfig"]["Arn"]),
        "RunFinishedDeadLetterQueue.Arn"
    );
    // The runner sends nothing itself.
    let runner = props(&t, "RunnerFunction");
    assert!(runner["Environment"]["Variables"]["EVENT_BUS_NAME"].is_null());
    let statements = runner["Policies"][0]["Statement"].as_sequence().unwrap();
    assert!(statements.iter().all(|s| s["Action"] != "events:PutEvents"));
}

#[test]
fn the_local_pipe_matches_exact_strings_and_escapes_what_it_renders() {
    let spec = local::pipe::PipeSpec {
        pattern: serde_json::json!({"a": {"b": ["x", "y"]}}),
        input_template: r#"{"v": "<$.a.b>"}"#.into(),
        detail_type: String::new(),
        source: String::new(),
    };
    assert!(spec.matches(&serde_json::json!({"a": {"b": "y", "c": 1}})));
    assert!(!spec.matches(&serde_json::json!({"a": {"b": "z"}})));
    assert!(!spec.matches(&serde_json::json!({"a": {}})));
    assert!(!spec.matches(&serde_json::json!({})));
    let detail = spec.render(&serde_json::json!({"a": {"b": "say \"hi\""}})).unwrap();
    assert_eq!(detail, serde_json::json!({"v": "say \"hi\""}));
    assert!(
        spec.render(&serde_json::json!({"a": {"b": 1}})).is_err(),
        "a missing string is an error"
    );
}

/// Every dead-letter queue has an alarm that pages, and the run alarms watch
/// the metrics the handlers emit.
#[test]
fn every_dead_letter_queue_and_the_failed_and_skipped_runs_are_alarmed() {
    let t = template();
    let resources = t["Resources"].as_mapping().unwrap();
    let alarms: Vec<&Value> = resources
        .values()
        .filter(|r| r["Type"] == "AWS::CloudWatch::Alarm")
        .map(|r| &r["Properties"])
        .collect();
    let pages = |alarm: &Value| {
        alarm["AlarmActions"].as_sequence().is_some_and(|a| {
            a.iter()
                .any(|v| matches!(v, Value::Tagged(t) if t.tag == "!Ref" && t.value == "AlarmTopic"))
        })
    };
    let dead_letter_queues: Vec<&str> = resources
        .iter()
        .filter(|(name, r)| r["Type"] == "AWS::SQS::Queue" && name.as_str().unwrap().contains("DeadLetter"))
        .map(|(name, _)| name.as_str().unwrap())
        .collect();
    assert_eq!(dead_letter_queues.len(), 4, "{dead_letter_queues:?}");
    for queue in dead_letter_queues {
        let watched = alarms.iter().any(|a| {
            a["MetricName"] == "ApproximateNumberOfMessagesVisible"
                && get_att(&a["Dimensions"][0]["Value"]) == format!("{queue}.QueueName")
                && num(&a["Threshold"]) == 0
                && pages(a)
        });
        assert!(watched, "no paging alarm on {queue}");
    }
    for metric in ["RunsFailed", "RunsSkipped"] {
        let watched = alarms
            .iter()
            .any(|a| a["Namespace"] == shared::adapters::metrics::NAMESPACE && a["MetricName"] == metric && pages(a));
        assert!(watched, "no paging alarm on {metric}");
    }
}

/// The schedules function: its binary, exactly its variables, its output,
/// and IAM that reaches only the table, its owner index and the group's
/// schedules (no scan, no other index, no wildcard action).
#[test]
fn the_schedules_function_is_configured_and_least_privileged() {
    let t = template();
    let function = resource(&t, "SchedulesFunction");
    assert_eq!(function["Metadata"]["BuildMethod"], "rust-cargolambda");
    assert_eq!(function["Metadata"]["BuildProperties"]["Binary"], "schedules");
    let want: BTreeSet<String> = SchedulesConfig::VARIABLES.iter().map(|v| (*v).to_owned()).collect();
    assert_eq!(variables(&t, "SchedulesFunction"), want);
    assert_eq!(
        get_att(&t["Outputs"]["SchedulesFunctionArn"]["Value"]),
        "SchedulesFunction.Arn"
    );
    let statements = props(&t, "SchedulesFunction")["Policies"][0]["Statement"]
        .as_sequence()
        .unwrap();
    let owner_index = format!("${{TasksTable.Arn}}/index/{}", local::STACK.owner_index.0);
    let mut actions = BTreeSet::new();
    for s in statements {
        let these: Vec<String> = match &s["Action"] {
            Value::Sequence(a) => a.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
            one => vec![one.as_str().unwrap().to_owned()],
        };
        for action in &these {
            assert!(!action.contains('*'), "wildcard action {action}");
        }
        match &s["Resource"] {
            Value::Tagged(r) if r.tag == "!GetAtt" && r.value == "SchedulerRole.Arn" => {
                assert_eq!(these, vec!["iam:PassRole".to_owned()]);
            }
            Value::Tagged(r) if r.tag == "!GetAtt" => assert_eq!(r.value, "TasksTable.Arn"),
            Value::Tagged(r) if r.tag == "!Sub" && r.value.as_str() == Some(owner_index.as_str()) => {
                assert_eq!(these, vec!["dynamodb:Query".to_owned()]);
            }
            Value::Tagged(r) if r.tag == "!Sub" => {
                let arn = r.value.as_str().unwrap();
                assert!(arn.ends_with(":schedule/${ScheduleGroup}/*"), "{arn}");
            }
            other => panic!("unexpected resource {other:?}"),
        }
        actions.extend(these);
    }
    let expected: BTreeSet<String> = [
        "dynamodb:GetItem",
        "dynamodb:BatchGetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:Query",
        "scheduler:CreateSchedule",
        "scheduler:UpdateSchedule",
        "scheduler:DeleteSchedule",
        "iam:PassRole",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(actions, expected);
}
