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
    let (schedulable, schedulable_hash, schedulable_range) = local::STACK.schedulable_index;
    assert_eq!(
        defs,
        vec![
            (hash.into(), "S".into()),
            (range.into(), "S".into()),
            (index_hash.into(), "S".into()),
            (index_range.into(), "S".into()),
            (owner_hash.into(), "S".into()),
            (owner_range.into(), "S".into()),
            (schedulable_hash.into(), "S".into()),
            (schedulable_range.into(), "S".into())
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
    assert_eq!(indexes.len(), 3);
    assert_eq!(indexes[0]["IndexName"], index);
    assert_eq!(key_schema(&indexes[0]["KeySchema"]), pair(index_hash, index_range));
    assert_eq!(indexes[0]["Projection"]["ProjectionType"], "KEYS_ONLY");
    assert_eq!(indexes[1]["IndexName"], owner);
    assert_eq!(key_schema(&indexes[1]["KeySchema"]), pair(owner_hash, owner_range));
    assert_eq!(indexes[1]["Projection"]["ProjectionType"], "ALL");
    assert_eq!(indexes[2]["IndexName"], schedulable);
    assert_eq!(
        key_schema(&indexes[2]["KeySchema"]),
        pair(schedulable_hash, schedulable_range)
    );
    assert_eq!(indexes[2]["Projection"]["ProjectionType"], "ALL");
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
    assert_eq!(
        globals["Environment"]["Variables"][shared::adapters::partitions::VARIABLE],
        shared::adapters::partitions::FILE
    );
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
    assert_eq!(
        variables(&t, "WebhookFunction"),
        want(&ReconcileConfig::INTAKE_VARIABLES)
    );
    assert_eq!(variables(&t, "AdminFunction"), want(&AdminConfig::VARIABLES));
    let reconcile = resource(&t, "ReconcileFunction");
    assert_eq!(reconcile["Metadata"]["BuildProperties"]["Binary"], "reconcile");
    assert_eq!(
        resource(&t, "WebhookFunction")["Metadata"]["BuildProperties"]["Binary"],
        "reconcile"
    );
    assert_eq!(
        resource(&t, "AdminFunction")["Metadata"]["BuildProperties"]["Binary"],
        "admin"
    );
    let work = &reconcile["Properties"]["Events"]["Work"]["Properties"];
    assert_eq!(get_att(&work["Queue"]), "ReconcileQueue.Arn");
    assert_eq!(work["FunctionResponseTypes"][0], "ReportBatchItemFailures");
    assert_eq!(
        props(&t, "WebhookFunction")["FunctionUrlConfig"]["AuthType"],
        "NONE",
        "webhooks authenticate by signature"
    );
    assert!(
        reconcile["Properties"]["FunctionUrlConfig"].is_null(),
        "the worker has no URL"
    );
    assert_eq!(
        get_att(&t["Outputs"]["WebhookUrl"]["Value"]),
        "WebhookFunctionUrl.FunctionUrl"
    );
    let queue = props(&t, "ReconcileQueue");
    assert_eq!(queue["FifoQueue"], true);
    assert_eq!(
        num(&queue["VisibilityTimeout"]),
        u64::from(local::STACK.reconcile_visibility_timeout)
    );
    assert!(num(&queue["VisibilityTimeout"]) >= 6 * num(&reconcile["Properties"]["Timeout"]));
    // Batch size, per-message deadline and timeout set together: one group
    // holding the whole batch, every message to its deadline, still fits.
    let work = &reconcile["Properties"]["Events"]["Work"]["Properties"];
    assert_eq!(num(&work["BatchSize"]), shared::app::reconcile::BATCH_SIZE);
    assert!(
        num(&reconcile["Properties"]["Timeout"]) >= shared::app::reconcile::worker_seconds_needed(),
        "the worker's timeout leaves every message of a batch its deadline"
    );
    assert_eq!(
        num(&queue["RedrivePolicy"]["maxReceiveCount"]),
        u64::from(local::STACK.reconcile_max_receive_count)
    );
    assert_eq!(
        get_att(&queue["RedrivePolicy"]["deadLetterTargetArn"]),
        "ReconcileDeadLetterQueue.Arn"
    );
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
    // The missed-occurrence check: its own schedule, a work item the worker
    // takes, every 15 minutes; the alarm sees an hour without a check too.
    let check = props(&t, "OverdueCheckSchedule");
    assert_eq!(check["ScheduleExpression"], "rate(15 minutes)");
    assert_eq!(get_att(&check["Target"]["Arn"]), "ReconcileQueue.Arn");
    let work: shared::app::reconcile::Work = serde_json::from_str(check["Target"]["Input"].as_str().unwrap()).unwrap();
    assert_eq!(
        work,
        shared::app::reconcile::Work::Pass(shared::app::reconcile::Pass::Overdue)
    );
    let alarm = props(&t, "OccurrencesOverdueAlarm");
    assert_eq!(alarm["MetricName"], "OccurrencesOverdue");
    assert_eq!(alarm["Namespace"], shared::adapters::metrics::NAMESPACE);
    assert_eq!(alarm["TreatMissingData"], "breaching");
    assert!(
        num(&alarm["Period"]) >= 2 * 15 * 60,
        "a period holds more than one check"
    );
    assert!(
        num(&alarm["Period"]) * num(&alarm["EvaluationPeriods"]) <= 30 * 60,
        "a stopped check is missing data within half an hour, not hours later"
    );
    // Both query the index (installed connectors; a task's workspace); no
    // function scans the table (SPEC 13: passes read pages through indexes).
    let index_arn = format!("${{TasksTable.Arn}}/index/{}", local::STACK.table_index.0);
    for function in ["ReconcileFunction", "AdminFunction"] {
        let statements = props(&t, function)["Policies"][0]["Statement"].as_sequence().unwrap();
        let names_index = |r: &Value| matches!(r, Value::Tagged(r) if r.tag == "!Sub" && r.value == index_arn.as_str());
        let on_index = statements.iter().any(|s| {
            s["Action"] == "dynamodb:Query"
                && match &s["Resource"] {
                    Value::Sequence(resources) => resources.iter().any(names_index),
                    one => names_index(one),
                }
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
    for (name, resource) in t["Resources"].as_mapping().unwrap() {
        let text = serde_yaml::to_string(resource).unwrap();
        assert!(!text.contains("dynamodb:Scan"), "{name:?} may scan the table");
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
    use shared::domain::run::notification::{DETAIL_TYPE, RunFinished, SOURCE};
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

/// `!Ref X` as it parses: a tagged string.
fn reference(v: &Value) -> String {
    match v {
        Value::Tagged(t) if t.tag == "!Ref" => t.value.as_str().unwrap_or_default().to_owned(),
        other => panic!("expected !Ref, got {other:?}"),
    }
}

/// SPEC §12: the platform's subscription. `RunFinishedRule` sends every
/// event the pipe puts on the bus (and nothing else) to `RunFinishedQueue`,
/// which the local stack makes with the same settings; SSE, a DLQ for
/// messages the backend failed and events the rule could not deliver, an
/// alarm on it, the outputs a backend needs, and nothing in the system
/// reading it.
#[test]
fn the_run_finished_queue_receives_every_notification_and_matches_the_local_stack() {
    use shared::domain::run::notification::{DETAIL_TYPE, SOURCE};
    let t = template();
    let rule = props(&t, "RunFinishedRule");
    assert_eq!(resource(&t, "RunFinishedRule")["Type"], "AWS::Events::Rule");
    assert_eq!(reference(&rule["EventBusName"]), "EventBus");
    assert_eq!(rule["State"], "ENABLED");
    let pattern = local::stack::run_finished_pattern().unwrap();
    assert_eq!(
        pattern,
        serde_json::json!({"source": [SOURCE], "detail-type": [DETAIL_TYPE]}),
        "exactly the pipe's events"
    );
    let pipe = local::pipe::PipeSpec::from_template().unwrap();
    assert_eq!((pipe.source.as_str(), pipe.detail_type.as_str()), (SOURCE, DETAIL_TYPE));
    let targets = rule["Targets"].as_sequence().unwrap();
    assert_eq!(targets.len(), 1);
    assert_eq!(get_att(&targets[0]["Arn"]), "RunFinishedQueue.Arn");
    assert_eq!(
        get_att(&targets[0]["DeadLetterConfig"]["Arn"]),
        "RunFinishedQueueDeadLetterQueue.Arn"
    );
    let retry = &targets[0]["RetryPolicy"];
    assert!((0..=185).contains(&num(&retry["MaximumRetryAttempts"])));
    assert!((60..=86_400).contains(&num(&retry["MaximumEventAgeInSeconds"])));

    let queue = props(&t, "RunFinishedQueue");
    assert_eq!(
        num(&queue["VisibilityTimeout"]),
        u64::from(local::STACK.run_finished_visibility_timeout)
    );
    assert_eq!(
        num(&queue["MessageRetentionPeriod"]),
        u64::from(local::STACK.run_finished_retention_seconds)
    );
    assert_eq!(
        num(&queue["RedrivePolicy"]["maxReceiveCount"]),
        u64::from(local::STACK.run_finished_max_receive_count)
    );
    assert_eq!(
        get_att(&queue["RedrivePolicy"]["deadLetterTargetArn"]),
        "RunFinishedQueueDeadLetterQueue.Arn"
    );
    let dlq = props(&t, "RunFinishedQueueDeadLetterQueue");
    assert_eq!(
        num(&dlq["MessageRetentionPeriod"]),
        u64::from(local::STACK.dlq_retention_seconds)
    );
    for q in [queue, dlq] {
        assert_eq!(q["SqsManagedSseEnabled"], true, "encrypted at rest");
        assert!(
            q["KmsMasterKeyId"].is_null(),
            "EventBridge cannot send under alias/aws/sqs"
        );
    }

    assert_eq!(
        reference(&t["Outputs"]["RunFinishedQueueUrl"]["Value"]),
        "RunFinishedQueue"
    );
    assert_eq!(
        get_att(&t["Outputs"]["RunFinishedQueueArn"]["Value"]),
        "RunFinishedQueue.Arn"
    );
    // The queue is the platform's: no function of the system reads it.
    for (name, r) in t["Resources"].as_mapping().unwrap() {
        if r["Type"] == "AWS::Serverless::Function" {
            assert!(!mentions(&r["Properties"], "RunFinishedQueue"), "{name:?}");
        }
    }
}

/// Only the rule may send to `RunFinishedQueue` and its DLQ: one statement
/// each, the EventBridge service principal, `sqs:SendMessage`, on that
/// queue, from that rule's ARN (`aws:SourceArn`).
#[test]
fn only_the_rule_may_send_to_the_run_finished_queue_and_its_dlq() {
    let t = json_form(&template());
    let deployment = Deployment::of(&t, "sat", &[]);
    let resources = t["Resources"].as_object().unwrap();
    let policies: BTreeMap<&String, &serde_json::Value> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::SQS::QueuePolicy")
        .collect();
    let mut guarded = BTreeSet::new();
    for (name, policy) in &policies {
        let policy = deployment.eval(&policy["Properties"]).unwrap();
        let queues = policy["Queues"].as_array().unwrap();
        assert_eq!(queues.len(), 1, "{name}: one queue a policy");
        let queue = queues[0].as_str().unwrap().trim_matches(['<', '>']).to_owned();
        let statements = policy["PolicyDocument"]["Statement"].as_array().unwrap();
        assert_eq!(statements.len(), 1, "{name}");
        assert_eq!(
            statements[0]["Principal"],
            serde_json::json!({"Service": "events.amazonaws.com"}),
            "{name}"
        );
        let statements = [Statement(statements[0].clone())];
        let arn = format!("<{queue}.Arn>");
        let from = |source: &str| BTreeMap::from([("aws:SourceArn", source.to_owned())]);
        let rule = from("<RunFinishedRule.Arn>");
        assert!(allowed(&statements, "sqs:SendMessage", &arn, &rule), "{name}");
        assert!(!allowed(&statements, "sqs:SendMessage", &arn, &from("<OtherRule.Arn>")));
        assert!(!allowed(&statements, "sqs:SendMessage", &arn, &BTreeMap::new()));
        for other in [
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:PurgeQueue",
            "sqs:SetQueueAttributes",
        ] {
            assert!(!allowed(&statements, other, &arn, &rule), "{name} grants {other}");
        }
        assert!(!allowed(&statements, "sqs:SendMessage", "<RunsQueue.Arn>", &rule));
        guarded.insert(queue);
    }
    assert_eq!(
        guarded,
        BTreeSet::from([
            "RunFinishedQueue".to_owned(),
            "RunFinishedQueueDeadLetterQueue".to_owned()
        ])
    );
}

/// Through the local stack: a settled run's record, carried by the pipe to
/// the bus, reaches `RunFinishedQueue` through the rule made from the
/// template's pattern, as EventBridge's envelope around the five fields; a
/// skipped run sends nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_settled_runs_event_reaches_the_run_finished_queue_and_a_skip_none() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use shared::domain::run::notification::{DETAIL_TYPE, RunFinished, SOURCE};
    let t = tests::TestStack::start().await.unwrap();
    let task = shared::domain::task::TaskId::for_reminder("ws_1", "usr_1", "k").to_string();
    let runs = [
        ("2026-12-24T18:00:00Z", "succeeded"),
        ("2026-12-25T18:00:00Z", "skipped"),
        ("2026-12-26T18:00:00Z", "failed"),
    ];
    for (at, status) in runs {
        let mut item = shared::adapters::keys::Key::run(&task, at).to_map();
        let run_id = format!("{task}@{at}");
        for (name, value) in [
            ("entity", "run"),
            ("workspace", "ws_1"),
            ("task_id", task.as_str()),
            ("run_id", run_id.as_str()),
            ("scheduled_time", at),
            ("status", status),
            ("output", "secret words"),
        ] {
            item.insert(name.to_owned(), AttributeValue::S(value.to_owned()));
        }
        t.dynamo
            .put_item()
            .table_name(&t.stack.names.table)
            .set_item(Some(item))
            .send()
            .await
            .unwrap();
    }
    assert_eq!(t.stack.pipe.pump(&t.aws.sdk).await.unwrap(), 2);
    let sqs = aws_sdk_sqs::Client::new(&t.aws.sdk);
    let mut received = BTreeSet::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(&t.stack.run_finished.url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if out.messages().is_empty() {
            break;
        }
        for message in out.messages() {
            let body = message.body().unwrap();
            assert!(!body.contains("secret words"), "content-free: {body}");
            let envelope: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(envelope["detail-type"], DETAIL_TYPE);
            assert_eq!(envelope["source"], SOURCE);
            let event: RunFinished = serde_json::from_value(envelope["detail"].clone()).unwrap();
            assert_eq!(serde_json::to_value(&event).unwrap(), envelope["detail"]);
            received.insert((event.run_id, event.status.as_str().to_owned()));
            sqs.delete_message()
                .queue_url(&t.stack.run_finished.url)
                .receipt_handle(message.receipt_handle().unwrap())
                .send()
                .await
                .unwrap();
        }
    }
    assert_eq!(
        received,
        BTreeSet::from([
            (format!("{task}@2026-12-24T18:00:00Z"), "succeeded".to_owned()),
            (format!("{task}@2026-12-26T18:00:00Z"), "failed".to_owned()),
        ])
    );
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
    assert_eq!(dead_letter_queues.len(), 5, "{dead_letter_queues:?}");
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

/// A policy's statements (every function here has one inline policy).
fn statements(t: &Value, function: &str) -> Vec<Value> {
    props(t, function)["Policies"][0]["Statement"]
        .as_sequence()
        .unwrap_or_else(|| panic!("{function} has a policy"))
        .clone()
}

fn mentions(v: &Value, text: &str) -> bool {
    serde_yaml::to_string(v).unwrap_or_default().contains(text)
}

/// SPEC §6, §9: the function that reads the webhook secret never talks to a
/// connector, no function that talks to connectors may read the webhook
/// secret (an explicit deny, even if it were named under the connector
/// prefix), and nothing sets `ALLOW_LOOPBACK_CONNECTORS`.
#[test]
fn the_webhook_secret_and_connector_credentials_never_share_a_function() {
    let t = template();
    let text = std::fs::read_to_string(local::moto::repo_root().join("template.yaml")).unwrap();
    assert!(
        !text.contains("ALLOW_LOOPBACK_CONNECTORS"),
        "the template never sets ALLOW_LOOPBACK_CONNECTORS"
    );
    let functions: Vec<String> = t["Resources"]
        .as_mapping()
        .unwrap()
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
        .filter_map(|(k, _)| k.as_str().map(str::to_owned))
        .collect();
    assert!(functions.len() >= 5, "{functions:?}");
    for function in &functions {
        let statements = statements(&t, function);
        let allows_webhook_secret = statements
            .iter()
            .any(|s| s["Effect"] == "Allow" && mentions(&s["Resource"], "WebhookSecretArn"));
        let denies_webhook_secret = statements.iter().any(|s| {
            s["Effect"] == "Deny"
                && s["Action"] == "secretsmanager:*"
                && mentions(&s["Resource"], "${WebhookSecretArn}-??????")
        });
        let reads_connector_credentials = statements
            .iter()
            .any(|s| s["Effect"] == "Allow" && mentions(&s["Resource"], "secret:${ConnectorSecretPrefix}"));
        let vars = variables(&t, function);
        if function == "WebhookFunction" {
            assert!(allows_webhook_secret && !reads_connector_credentials);
            assert!(vars.contains("WEBHOOK_SECRET_ARN") && !vars.contains("SCHEDULE_GROUP"));
            let actions: BTreeSet<String> = statements
                .iter()
                .flat_map(|s| match &s["Action"] {
                    Value::Sequence(a) => a.clone(),
                    one => vec![one.clone()],
                })
                .filter_map(|a| a.as_str().map(str::to_owned))
                .collect();
            assert_eq!(
                actions,
                [
                    "dynamodb:GetItem",
                    "dynamodb:PutItem",
                    "secretsmanager:GetSecretValue",
                    "sqs:SendMessage"
                ]
                .into_iter()
                .map(str::to_owned)
                .collect(),
                "the intake writes webhook ids, queues work and reads its secret, nothing else"
            );
        } else {
            assert!(!allows_webhook_secret, "{function} may read the webhook secret");
            assert!(!vars.contains("WEBHOOK_SECRET_ARN"), "{function}");
        }
        if reads_connector_credentials {
            assert!(
                denies_webhook_secret,
                "{function} talks to connectors: deny the webhook secret"
            );
            assert!(vars.contains("CONNECTOR_SECRET_PREFIX"), "{function}");
        }
    }
    for function in ["RunnerFunction", "ReconcileFunction"] {
        let reads = statements(&t, function)
            .iter()
            .any(|s| s["Effect"] == "Allow" && mentions(&s["Resource"], "secret:${ConnectorSecretPrefix}*"));
        assert!(reads, "{function} reads connector credentials under the prefix only");
    }
}

// ---- The template as AWS reads it ----------------------------------------------

/// A YAML intrinsic (`!Sub x`) in CloudFormation's JSON form (`{"Fn::Sub": x}`),
/// so one evaluator reads the SAM template and its translation alike.
fn json_form(v: &Value) -> serde_json::Value {
    match v {
        Value::Tagged(t) => {
            let name = t.tag.to_string();
            let name = name.trim_start_matches('!');
            let key = if name == "Ref" {
                "Ref".to_owned()
            } else {
                format!("Fn::{name}")
            };
            serde_json::json!({ key: json_form(&t.value) })
        }
        Value::Mapping(m) => serde_json::Value::Object(
            m.iter()
                .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), json_form(v)))
                .collect(),
        ),
        Value::Sequence(s) => serde_json::Value::Array(s.iter().map(json_form).collect()),
        Value::String(s) => serde_json::Value::String(s.clone()),
        Value::Number(n) => serde_json::to_value(n).unwrap(),
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Null => serde_json::Value::Null,
    }
}

/// What CloudFormation would make of a template for one set of parameter
/// values: pseudo parameters, parameters (defaults unless given), conditions.
struct Deployment {
    values: BTreeMap<String, String>,
    conditions: BTreeMap<String, bool>,
}

use std::collections::BTreeMap;

const ACCOUNT: &str = "123456789012";
const REGION: &str = "us-east-1";

impl Deployment {
    fn of(template: &serde_json::Value, stack_name: &str, given: &[(&str, &str)]) -> Self {
        let mut values: BTreeMap<String, String> = [
            ("AWS::Partition", "aws"),
            ("AWS::Region", REGION),
            ("AWS::AccountId", ACCOUNT),
            ("AWS::StackName", stack_name),
            ("AWS::URLSuffix", "amazonaws.com"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        for (name, parameter) in template["Parameters"].as_object().unwrap() {
            if let Some(default) = parameter.get("Default") {
                let text = default.as_str().map_or_else(|| default.to_string(), str::to_owned);
                values.insert(name.clone(), text);
            }
        }
        for (k, v) in given {
            assert!(template["Parameters"].get(*k).is_some(), "no parameter {k}");
            values.insert((*k).to_owned(), (*v).to_owned());
        }
        let mut deployment = Self {
            values,
            conditions: BTreeMap::new(),
        };
        if let Some(conditions) = template["Conditions"].as_object() {
            for (name, condition) in conditions {
                let holds = deployment.eval(condition).and_then(|v| v.as_bool()).unwrap();
                deployment.conditions.insert(name.clone(), holds);
            }
        }
        deployment
    }

    fn sub(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find('}').unwrap() + start;
            let name = &rest[start + 2..end];
            match self.values.get(name) {
                Some(v) => out.push_str(v),
                // A resource or attribute: a stand-in that names it.
                None => out.push_str(&format!("<{name}>")),
            }
            rest = &rest[end + 1..];
        }
        out.push_str(rest);
        out
    }

    /// The value of a template fragment; `None` for `AWS::NoValue`.
    fn eval(&self, v: &serde_json::Value) -> Option<serde_json::Value> {
        use serde_json::Value as J;
        let J::Object(map) = v else {
            return match v {
                J::Array(items) => Some(J::Array(items.iter().filter_map(|i| self.eval(i)).collect())),
                other => Some(other.clone()),
            };
        };
        if map.len() == 1 {
            let (key, arg) = map.iter().next().unwrap();
            let s = |v: Option<J>| v.and_then(|v| v.as_str().map(str::to_owned)).unwrap();
            match key.as_str() {
                "Ref" => {
                    let name = arg.as_str().unwrap();
                    if name == "AWS::NoValue" {
                        return None;
                    }
                    return Some(J::String(
                        self.values.get(name).cloned().unwrap_or_else(|| format!("<{name}>")),
                    ));
                }
                "Fn::Sub" => {
                    let text = arg.as_str().or_else(|| arg[0].as_str()).unwrap();
                    assert!(arg.is_string(), "Fn::Sub with a variable map is not read here");
                    return Some(J::String(self.sub(text)));
                }
                "Fn::GetAtt" => {
                    let name = arg.as_str().map_or_else(
                        || format!("{}.{}", arg[0].as_str().unwrap(), arg[1].as_str().unwrap()),
                        str::to_owned,
                    );
                    return Some(J::String(format!("<{name}>")));
                }
                "Fn::If" => {
                    let holds = self.conditions[arg[0].as_str().unwrap()];
                    return self.eval(&arg[if holds { 1 } else { 2 }]);
                }
                "Fn::Equals" => return Some(J::Bool(self.eval(&arg[0]) == self.eval(&arg[1]))),
                "Fn::Not" => return Some(J::Bool(!self.eval(&arg[0]).unwrap().as_bool().unwrap())),
                "Fn::Join" => {
                    let parts = self.eval(&arg[1]).unwrap();
                    let parts: Vec<String> = parts
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|p| p.as_str().unwrap().to_owned())
                        .collect();
                    return Some(J::String(parts.join(arg[0].as_str().unwrap())));
                }
                "Fn::Select" => {
                    let list = self.eval(&arg[1]).unwrap();
                    return Some(list[arg[0].as_u64().unwrap() as usize].clone());
                }
                "Fn::Split" => {
                    let text = s(self.eval(&arg[1]));
                    return Some(J::Array(
                        text.split(arg[0].as_str().unwrap())
                            .map(|p| J::String(p.to_owned()))
                            .collect(),
                    ));
                }
                _ => {}
            }
        }
        Some(J::Object(
            map.iter()
                .filter_map(|(k, v)| self.eval(v).map(|v| (k.clone(), v)))
                .collect(),
        ))
    }
}

/// One IAM statement, resolved.
#[derive(Debug)]
struct Statement(serde_json::Value);

fn strings(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::Array(items) => items.iter().map(|i| i.as_str().unwrap().to_owned()).collect(),
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Null => Vec::new(),
        other => panic!("not a string or list: {other}"),
    }
}

/// IAM's `*`/`?` match of one string.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    fn go(p: &[char], t: &[char]) -> bool {
        match p.first() {
            None => t.is_empty(),
            Some('*') => (0..=t.len()).any(|i| go(&p[1..], &t[i..])),
            Some('?') => !t.is_empty() && go(&p[1..], &t[1..]),
            Some(c) => t.first() == Some(c) && go(&p[1..], &t[1..]),
        }
    }
    go(&p, &t)
}

/// An ARN pattern matched as IAM matches ARNs: field by field. A field that
/// is only `*` is read strictly here, as matching a non-empty field, so a
/// region-less ARN (a global profile's foundation model) must be granted by
/// name.
fn arn_matches(pattern: &str, arn: &str) -> bool {
    let p: Vec<&str> = pattern.splitn(6, ':').collect();
    let a: Vec<&str> = arn.splitn(6, ':').collect();
    p.len() == 6
        && a.len() == 6
        && p.iter()
            .zip(&a)
            .all(|(p, a)| if *p == "*" { !a.is_empty() } else { glob(p, a) })
}

impl Statement {
    /// Whether this statement applies to `action` on `resource` with the
    /// request context `context` (whatever its effect).
    fn matches(&self, action: &str, resource: &str, context: &BTreeMap<&str, String>) -> bool {
        let s = &self.0;
        let action_ok = strings(&s["Action"]).iter().any(|a| glob(a, action));
        let resource_ok = strings(&s["Resource"])
            .iter()
            .any(|r| r == "*" || r == resource || arn_matches(r, resource));
        let condition_ok = match s.get("Condition") {
            None => true,
            Some(condition) => condition.as_object().unwrap().iter().all(|(op, keys)| {
                keys.as_object().unwrap().iter().all(|(key, values)| {
                    let Some(got) = context.get(key.as_str()) else {
                        return false;
                    };
                    let values = strings(values);
                    match op.as_str() {
                        "StringEquals" | "ArnEquals" => values.iter().any(|v| v == got),
                        "StringLike" | "ArnLike" => values.iter().any(|v| glob(v, got)),
                        other => panic!("condition operator {other} is not read here"),
                    }
                })
            }),
        };
        action_ok && resource_ok && condition_ok
    }
}

fn runner_statements(deployment: &Deployment) -> Vec<Statement> {
    let t = json_form(&template());
    let statements = &t["Resources"]["RunnerFunction"]["Properties"]["Policies"][0]["Statement"];
    deployment
        .eval(statements)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(Statement)
        .collect()
}

/// IAM's rule: some Allow applies and no Deny does (an explicit deny wins).
fn allowed(statements: &[Statement], action: &str, resource: &str, context: &BTreeMap<&str, String>) -> bool {
    let applies = |effect: &str| {
        statements
            .iter()
            .any(|s| s.0["Effect"] == effect && s.matches(action, resource, context))
    };
    applies("Allow") && !applies("Deny")
}

fn profile_arn(id: &str) -> String {
    format!("arn:aws:bedrock:{REGION}:{ACCOUNT}:inference-profile/{id}")
}

fn model_arn(region: &str, id: &str) -> String {
    format!("arn:aws:bedrock:{region}::foundation-model/{id}")
}

/// The requests Bedrock authorises for one Converse call, as its docs
/// describe them: through a profile, the profile and then the foundation
/// model in the region the call is routed to (the region-less ARN for a
/// global profile), with the profile in the request context; a plain model,
/// the model in this region.
fn converse_is_allowed(statements: &[Statement], model_id: &str, routed_to: &str) -> bool {
    let model = shared::domain::run::model::ModelId::parse(model_id).unwrap();
    let none = BTreeMap::new();
    if model.is_inference_profile() {
        let context = BTreeMap::from([("bedrock:InferenceProfileArn", profile_arn(model_id))]);
        allowed(statements, "bedrock:InvokeModel", &profile_arn(model_id), &none)
            && allowed(
                statements,
                "bedrock:InvokeModel",
                &model_arn(routed_to, model.foundation_model()),
                &context,
            )
    } else {
        allowed(
            statements,
            "bedrock:InvokeModel",
            &model_arn(routed_to, model.foundation_model()),
            &none,
        )
    }
}

#[test]
fn the_default_model_is_current_reached_through_a_global_profile_and_priced() {
    let t = template();
    let parameters = &t["Parameters"];
    let id = parameters["ModelId"]["Default"].as_str().unwrap();
    assert!(
        !id.contains("claude-3-5-haiku"),
        "Claude 3.5 Haiku reached its end of life"
    );
    let model = shared::domain::run::model::ModelId::parse(id).unwrap();
    assert_eq!(model.profile_prefix(), Some("global"));
    assert_eq!(
        parameters["ModelFoundationId"]["Default"].as_str().unwrap(),
        model.foundation_model(),
        "the foundation model parameter is the profile id without its prefix"
    );
    let prices: serde_json::Value =
        serde_json::from_str(parameters["ModelPrices"]["Default"].as_str().unwrap()).unwrap();
    let keys: Vec<&String> = prices.as_object().unwrap().keys().collect();
    assert_eq!(keys, vec![id], "prices are keyed by the configured id");
    // The runner accepts what the template passes it.
    let prices_text = parameters["ModelPrices"]["Default"].as_str().unwrap();
    let vars = [
        ("TABLE_NAME", "t"),
        ("AGENT_SCHEDULE_WORKER_ENABLED", "true"),
        ("MODEL_ID", id),
        ("MODEL_PRICES", prices_text),
        (
            "CONNECTOR_SECRET_PREFIX",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/",
        ),
        (
            "SCHEDULE_CEILINGS",
            parameters["ScheduleCeilings"]["Default"].as_str().unwrap(),
        ),
    ];
    let config = <RunnerConfig as shared::config::FromEnv>::read(&shared::config::Env::from_lookup(|k: &str| {
        vars.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned())
    }))
    .unwrap();
    let price = config.prices.of(&config.model_id).unwrap();
    assert!(
        price.caches() && shared::domain::run::model::cache_minimum(&config.model_id).is_some(),
        "the default model caches its prompt, priced"
    );
}

/// The model pace's parameter is what the runner reads: its default paces,
/// its least turns the pace off, its most is the runner's.
#[test]
fn the_model_pace_parameter_is_what_the_runner_accepts() {
    let t = template();
    let parameter = &t["Parameters"]["ModelRequestsPerMinute"];
    let read = |value: &str| {
        shared::config::pace(&shared::config::Env::from_lookup(|k: &str| {
            (k == "MODEL_REQUESTS_PER_MINUTE").then(|| value.to_owned())
        }))
    };
    let default = parameter["Default"].as_u64().unwrap().to_string();
    assert!(read(&default).unwrap().is_some(), "paced by default");
    assert_eq!(parameter["MinValue"].as_u64(), Some(0));
    assert_eq!(read("0"), Ok(None), "0 turns it off");
    let most = parameter["MaxValue"].as_u64().unwrap();
    assert_eq!(most, u64::from(shared::config::MAX_MODEL_REQUESTS_PER_MINUTE));
    assert!(read(&most.to_string()).unwrap().is_some());
    assert!(read(&(most + 1).to_string()).is_err());
    // Tokens a minute: its default counted, its most the runner's, 0 off.
    let tokens = &t["Parameters"]["ModelTokensPerMinute"];
    let read_tokens = |value: &str| {
        shared::config::pace(&shared::config::Env::from_lookup(|k: &str| match k {
            "MODEL_REQUESTS_PER_MINUTE" => Some(default.clone()),
            "MODEL_TOKENS_PER_MINUTE" => Some(value.to_owned()),
            _ => None,
        }))
    };
    let default_tokens = tokens["Default"].as_u64().unwrap();
    assert_eq!(
        read_tokens(&default_tokens.to_string())
            .unwrap()
            .and_then(|p| p.tokens()),
        Some(default_tokens)
    );
    assert_eq!(tokens["MinValue"].as_u64(), Some(0));
    assert_eq!(read_tokens("0").unwrap().and_then(|p| p.tokens()), None);
    let most = tokens["MaxValue"].as_u64().unwrap();
    assert_eq!(most, shared::config::MAX_MODEL_TOKENS_PER_MINUTE);
    assert!(read_tokens(&(most + 1).to_string()).is_err());
}

#[test]
fn the_runner_may_converse_through_a_global_profile_in_every_region_it_routes_to() {
    let t = json_form(&template());
    let deployment = Deployment::of(&t, "sat", &[]);
    let id = deployment.values["ModelId"].clone();
    let statements = runner_statements(&deployment);
    for routed_to in ["us-east-1", "us-west-2", "eu-west-1", "ap-northeast-1", ""] {
        assert!(
            converse_is_allowed(&statements, &id, routed_to),
            "{id} routed to {routed_to:?}"
        );
    }
    let foundation = deployment.values["ModelFoundationId"].clone();
    let none = BTreeMap::new();
    assert!(
        !allowed(
            &statements,
            "bedrock:InvokeModel",
            &model_arn(REGION, &foundation),
            &none
        ),
        "the foundation model only through the profile"
    );
    let other_profile = BTreeMap::from([("bedrock:InferenceProfileArn", profile_arn(&format!("us.{foundation}")))]);
    assert!(!allowed(
        &statements,
        "bedrock:InvokeModel",
        &model_arn(REGION, &foundation),
        &other_profile
    ));
    assert!(!allowed(
        &statements,
        "bedrock:InvokeModel",
        &profile_arn("global.anthropic.claude-opus-4-1-20250805-v1:0"),
        &none
    ));
    assert!(!converse_is_allowed(
        &statements,
        "global.anthropic.claude-sonnet-4-5-20250929-v1:0",
        REGION
    ));
}

#[test]
fn the_runner_may_converse_through_a_geographic_profile_or_with_a_plain_model() {
    let t = json_form(&template());
    let us = "us.anthropic.claude-haiku-4-5-20251001-v1:0";
    let foundation = shared::domain::run::model::ModelId::parse(us)
        .unwrap()
        .foundation_model()
        .to_owned();
    let deployment = Deployment::of(&t, "sat", &[("ModelId", us), ("ModelFoundationId", &foundation)]);
    let statements = runner_statements(&deployment);
    for routed_to in ["us-east-1", "us-east-2", "us-west-2"] {
        assert!(
            converse_is_allowed(&statements, us, routed_to),
            "{us} routed to {routed_to}"
        );
    }

    let plain = "anthropic.claude-3-haiku-20240307-v1:0";
    let deployment = Deployment::of(&t, "sat", &[("ModelId", plain), ("ModelFoundationId", plain)]);
    let statements = runner_statements(&deployment);
    assert!(converse_is_allowed(&statements, plain, REGION));
    assert!(
        !converse_is_allowed(&statements, plain, "us-west-2"),
        "a plain model in this region only"
    );
    let none = BTreeMap::new();
    assert!(
        !statements.iter().any(|s| strings(&s.0["Resource"])
            .iter()
            .any(|r| r.contains("inference-profile"))),
        "no profile is granted for a plain model"
    );
    assert!(!allowed(
        &statements,
        "bedrock:InvokeModel",
        &model_arn("", plain),
        &none
    ));
}

/// The runner shortens the visibility of what it returns on the runs queue
/// only, and the catch-up window cannot be shorter than a return.
#[test]
fn returned_runs_come_back_within_the_catch_up_window() {
    use shared::domain::run::redelivery::{LONGEST_RETURN_SECONDS, return_delay};
    let t = json_form(&template());
    let deployment = Deployment::of(&t, "sat", &[]);
    let statements = runner_statements(&deployment);
    let none = BTreeMap::new();
    assert!(allowed(
        &statements,
        "sqs:ChangeMessageVisibility",
        "<RunsQueue.Arn>",
        &none
    ));
    assert!(!allowed(
        &statements,
        "sqs:ChangeMessageVisibility",
        "<ReconcileQueue.Arn>",
        &none
    ));
    let catch_up = &t["Parameters"]["CatchUpSeconds"];
    let min = catch_up["MinValue"].as_u64().unwrap();
    let visibility = t["Resources"]["RunsQueue"]["Properties"]["VisibilityTimeout"]
        .as_u64()
        .unwrap();
    assert!(
        min >= visibility,
        "CatchUpSeconds MinValue {min} < the runs queue's visibility {visibility}"
    );
    assert!(min >= u64::try_from(LONGEST_RETURN_SECONDS).unwrap());
    assert!(catch_up["Default"].as_u64().unwrap() >= min);
    assert!(i64::try_from(min).unwrap() >= shared::config::MIN_CATCH_UP_SECONDS);
    // A duplicate that meets a live lease is returned up to four times
    // before the fifth receive; even at their shortest, those returns
    // outlast the lease of a run that takes the function's whole timeout.
    let receives = t["Resources"]["RunsQueue"]["Properties"]["RedrivePolicy"]["maxReceiveCount"]
        .as_u64()
        .unwrap();
    let returns: i64 = (1..u32::try_from(receives).unwrap())
        .map(|n| i64::from(return_delay(n, 0.0)))
        .sum();
    let timeout = t["Resources"]["RunnerFunction"]["Properties"]["Timeout"]
        .as_i64()
        .unwrap();
    assert!(
        returns > timeout + shared::app::run::LEASE_MARGIN_SECONDS,
        "{returns} s of returns"
    );
    // Throttling is not a fault: however often an occurrence is returned,
    // its receives within the longest catch-up window stay under the
    // queue's maxReceiveCount, so it reaches the DLQ only after the window.
    let longest = catch_up["MaxValue"].as_i64().unwrap();
    assert_eq!(longest, shared::config::MAX_CATCH_UP_SECONDS);
    let within = shared::domain::run::redelivery::receives_within(longest);
    assert!(
        u64::from(within) < receives,
        "{within} receives within {longest} s, maxReceiveCount {receives}"
    );
}

/// CloudWatch can publish to the alarm topic: its key is customer managed,
/// rotated, and its policy lets CloudWatch use it.
#[test]
fn alarms_can_reach_the_topic() {
    let t = json_form(&template());
    let deployment = Deployment::of(&t, "sat", &[]);
    let topic = deployment.eval(&t["Resources"]["AlarmTopic"]["Properties"]).unwrap();
    let key_ref = topic["KmsMasterKeyId"].as_str().unwrap();
    assert!(
        !key_ref.starts_with("alias/aws/"),
        "an AWS managed key refuses CloudWatch"
    );
    let key_name = key_ref.trim_start_matches('<').trim_end_matches('>');
    let key = &t["Resources"][key_name];
    assert_eq!(key["Type"], "AWS::KMS::Key");
    assert_eq!(key["Properties"]["EnableKeyRotation"], true);
    let policy = deployment.eval(&key["Properties"]["KeyPolicy"]["Statement"]).unwrap();
    let cloudwatch = policy
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["Principal"]["Service"] == "cloudwatch.amazonaws.com")
        .expect("a statement for CloudWatch");
    let statement = Statement(cloudwatch.clone());
    for action in ["kms:Decrypt", "kms:GenerateDataKey"] {
        assert!(
            allowed(std::slice::from_ref(&statement), action, "*", &BTreeMap::new()),
            "{action}"
        );
    }
}

/// The public webhook URL cannot take the account's concurrency from the
/// functions that run work: its function reserves the `WebhookConcurrency`
/// parameter (10 by default), unset only when that is 0.
#[test]
fn the_public_webhook_url_has_reserved_concurrency() {
    fn tagged<'a>(v: &'a Value, tag: &str) -> &'a Value {
        match v {
            Value::Tagged(t) if t.tag == tag => &t.value,
            other => panic!("expected {tag}, got {other:?}"),
        }
    }
    let t = template();
    let reserved = tagged(&props(&t, "WebhookFunction")["ReservedConcurrentExecutions"], "!If");
    assert_eq!(reserved[0].as_str(), Some("WebhookConcurrencyReserved"));
    assert_eq!(tagged(&reserved[1], "!Ref").as_str(), Some("WebhookConcurrency"));
    assert_eq!(tagged(&reserved[2], "!Ref").as_str(), Some("AWS::NoValue"));
    assert_eq!(num(&t["Parameters"]["WebhookConcurrency"]["Default"]), 10);
    let equals = tagged(
        &tagged(&t["Conditions"]["WebhookConcurrencyReserved"], "!Not")[0],
        "!Equals",
    );
    assert_eq!(tagged(&equals[0], "!Ref").as_str(), Some("WebhookConcurrency"));
    assert_eq!(num(&equals[1]), 0);
}

/// A deploy whose custom resource never answers fails in minutes, not the
/// default hour.
#[test]
fn the_deploy_time_pass_has_a_service_timeout() {
    let t = template();
    let timeout = num(&props(&t, "ReconcileAtDeploy")["ServiceTimeout"]);
    assert!((1..=900).contains(&timeout), "{timeout}");
    assert!(timeout > num(&props(&t, "ReconcileFunction")["Timeout"]));
}

/// Every name the template derives fits its service's limit for the longest
/// stack name CloudFormation allows (128 characters), read from the offline
/// translation as CloudFormation gets it. A resource type with no row here
/// fails the test until its name rule is written down.
#[test]
fn every_derived_name_fits_for_a_128_character_stack_name() {
    let root = local::moto::repo_root();
    let out = std::process::Command::new(local::moto::python_path())
        .arg(root.join("infra/python/translate_template.py"))
        .arg(root.join("template.yaml"))
        .output()
        .expect("the translation runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let translated: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The name property of each type and its longest value; `None`: the
    // type has no name.
    let limits: BTreeMap<&str, Option<(&str, usize)>> = BTreeMap::from([
        ("AWS::DynamoDB::Table", Some(("TableName", 255))),
        ("AWS::SQS::Queue", Some(("QueueName", 80))),
        ("AWS::Scheduler::ScheduleGroup", Some(("Name", 64))),
        ("AWS::Scheduler::Schedule", Some(("Name", 64))),
        ("AWS::IAM::Role", Some(("RoleName", 64))),
        ("AWS::Events::EventBus", Some(("Name", 256))),
        ("AWS::Events::Rule", Some(("Name", 64))),
        ("AWS::SQS::QueuePolicy", None),
        ("AWS::Pipes::Pipe", Some(("Name", 64))),
        ("AWS::SNS::Topic", Some(("TopicName", 256))),
        ("AWS::KMS::Key", None),
        ("AWS::CloudWatch::Alarm", Some(("AlarmName", 255))),
        ("AWS::Lambda::Function", Some(("FunctionName", 64))),
        ("AWS::Lambda::EventSourceMapping", None),
        ("AWS::Lambda::Version", None),
        ("AWS::Lambda::Alias", Some(("Name", 128))),
        ("AWS::Lambda::Url", None),
        ("AWS::Lambda::Permission", None),
        ("AWS::CloudFormation::CustomResource", None),
        ("AWS::Logs::LogGroup", Some(("LogGroupName", 512))),
    ]);
    let stack_name = format!("s{}", "x".repeat(127));
    assert_eq!(stack_name.len(), 128);
    let deployment = Deployment::of(
        &translated,
        &stack_name,
        &[(
            "WebhookSecretArn",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:whsec-AbCdEf",
        )],
    );
    for (logical, resource) in translated["Resources"].as_object().unwrap() {
        let kind = resource["Type"].as_str().unwrap();
        let rule = limits
            .get(kind)
            .unwrap_or_else(|| panic!("{logical}: {kind} has no name rule in this test"));
        let Some((property, limit)) = rule else { continue };
        let Some(name) = resource["Properties"].get(*property) else {
            continue; // CloudFormation generates a name that fits.
        };
        let name = deployment.eval(name).unwrap();
        let name = name.as_str().unwrap();
        assert!(
            name.len() <= *limit,
            "{logical}.{property} is {} characters: {name}",
            name.len()
        );
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
            // A run now's message (SPEC section 11): sending, and no more.
            Value::Tagged(r) if r.tag == "!GetAtt" && r.value == "RunsQueue.Arn" => {
                assert_eq!(these, vec!["sqs:SendMessage".to_owned()]);
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
        "sqs:SendMessage",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(actions, expected);
}

/// Every function logs to its own log group, kept `LogRetentionDays` (30 by
/// default): logs are not kept forever (SPEC §14).
#[test]
fn every_function_logs_to_its_own_group_kept_as_long_as_chosen() {
    let t = template();
    let retention = &t["Parameters"]["LogRetentionDays"];
    assert_eq!(retention["Default"].as_u64(), Some(30));
    let resources = t["Resources"].as_mapping().unwrap();
    let mut groups = BTreeSet::new();
    for (name, resource) in resources {
        if resource["Type"] != "AWS::Serverless::Function" {
            continue;
        }
        let name = name.as_str().unwrap();
        let logging = &resource["Properties"]["LoggingConfig"];
        let group = match &logging["LogGroup"] {
            Value::Tagged(tagged) if tagged.tag == "!Ref" => tagged.value.as_str().unwrap().to_owned(),
            other => panic!("{name} logs to {other:?}, not its own group"),
        };
        let props = &t["Resources"][group.as_str()];
        assert_eq!(props["Type"], "AWS::Logs::LogGroup", "{name}: {group}");
        assert!(
            matches!(&props["Properties"]["RetentionInDays"], Value::Tagged(r) if r.tag == "!Ref" && r.value == "LogRetentionDays"),
            "{group} keeps its lines LogRetentionDays"
        );
        assert!(groups.insert(group), "{name} shares its log group");
    }
    assert_eq!(groups.len(), 6, "one group a function");
}

/// A fresh account's first call of a Claude model subscribes it through
/// AWS Marketplace, as the caller: the runner may, and no other function.
#[test]
fn the_runner_may_subscribe_the_account_to_its_model_on_the_first_call() {
    let t = json_form(&template());
    let deployment = Deployment::of(&t, "sat", &[]);
    let statements = runner_statements(&deployment);
    let none = BTreeMap::new();
    for action in ["aws-marketplace:Subscribe", "aws-marketplace:ViewSubscriptions"] {
        assert!(allowed(&statements, action, "*", &none), "{action}");
    }
    let text = serde_yaml::to_string(&template()["Resources"]).unwrap();
    assert_eq!(
        text.matches("aws-marketplace:Subscribe").count(),
        1,
        "only the runner's role"
    );
}

/// The deploy papercuts a team meets following the README and
/// docs/deploying.md to the letter.
#[test]
fn sam_builds_non_interactively_and_the_readme_invokes_where_watch_listens() {
    let samconfig = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../samconfig.toml")).unwrap();
    let build = samconfig.split("[default.build.parameters]").nth(1).unwrap();
    let build = build.split("\n[").next().unwrap();
    assert!(
        build.lines().any(|l| l.trim() == "beta_features = true"),
        "rust-cargolambda is a SAM beta feature: a non-interactive build needs the opt-in"
    );
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let deploying = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/deploying.md")).unwrap();
    for text in [&readme, &deploying] {
        assert!(!text.contains("Enable the model in the Bedrock console"));
    }
    let readme = deploying;
    let watch = readme
        .lines()
        .find(|l| l.starts_with("cargo lambda watch"))
        .expect("docs/deploying.md runs cargo lambda watch");
    let address = watch.split_whitespace().skip_while(|w| *w != "-A").nth(1).unwrap();
    let invokes: Vec<&str> = readme
        .lines()
        .filter(|l| l.starts_with("cargo lambda invoke"))
        .collect();
    assert!(!invokes.is_empty());
    for line in invokes {
        assert!(
            line.contains(&format!("-A {address}")),
            "{line} connects where watch listens ({address})"
        );
    }
}

/// A function's IAM statements as CloudFormation would make them for `deployment`.
fn function_statements(deployment: &Deployment, function: &str) -> Vec<Statement> {
    let t = json_form(&template());
    let statements = &t["Resources"][function]["Properties"]["Policies"][0]["Statement"];
    deployment
        .eval(statements)
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .cloned()
        .map(Statement)
        .collect()
}

/// SPEC §14: with `Traces` enabled (the default), create, the runner and
/// the reconcile worker send their spans to this region's CloudWatch OTLP
/// endpoint (a `TRACES_ENDPOINT` the code accepts) and may, as the endpoint
/// authorises them, `xray:PutSpans` and `xray:PutSpansForIndexing` (not
/// X-Ray's segment API, `xray:PutTraceSegments`); disabled, neither. No
/// other function sends spans or may.
#[test]
fn traced_functions_send_to_the_region_s_otlp_endpoint_with_the_permission_it_authorises() {
    let t = json_form(&template());
    let traced = ["CreateFunction", "RunnerFunction", "ReconcileFunction"];
    let untraced = ["AdminFunction", "SchedulesFunction", "WebhookFunction"];
    let no_context = BTreeMap::new();
    for (setting, on) in [(None, true), (Some("enabled"), true), (Some("disabled"), false)] {
        let given: Vec<(&str, &str)> = setting.map(|s| ("Traces", s)).into_iter().collect();
        let deployment = Deployment::of(&t, "sat", &given);
        for function in traced.iter().chain(&untraced) {
            let variables = deployment
                .eval(&t["Resources"][*function]["Properties"]["Environment"]["Variables"])
                .unwrap();
            let endpoint = variables
                .get("TRACES_ENDPOINT")
                .and_then(|v| v.as_str().map(str::to_owned));
            let statements = function_statements(&deployment, function);
            let may = ["xray:PutSpans", "xray:PutSpansForIndexing"]
                .iter()
                .all(|action| allowed(&statements, action, "*", &no_context));
            assert!(
                !allowed(&statements, "xray:PutTraceSegments", "*", &no_context),
                "{function}: the segment API is not what the endpoint authorises"
            );
            if on && traced.contains(function) {
                assert_eq!(
                    endpoint.as_deref(),
                    Some("https://xray.us-east-1.amazonaws.com/v1/traces"),
                    "{function}"
                );
                let env = shared::config::Env::from_lookup(|name: &str| {
                    (name == shared::config::TRACES_ENDPOINT)
                        .then(|| endpoint.clone())
                        .flatten()
                });
                let config = shared::config::traces(&env, "function").unwrap();
                assert!(
                    config.endpoint.is_some(),
                    "{function}: the code takes the template's endpoint"
                );
                assert!(may, "{function} may send its spans");
            } else {
                assert_eq!(endpoint, None, "{function} with Traces {setting:?}");
                assert!(!may, "{function} with Traces {setting:?} may not send spans");
            }
        }
    }
}

/// Every output the local stack writes for operators (`sat` reads them
/// from `target/local.env`) is a template output naming the same resource:
/// a queue URL is `!Ref <queue>`, an ARN `!GetAtt <resource>.Arn`.
#[test]
fn the_local_stack_names_the_template_s_outputs() {
    let t = template();
    let outputs = &t["Outputs"];
    for name in local::stack::OUTPUT_NAMES {
        let value = &outputs[name]["Value"];
        assert!(!value.is_null(), "template.yaml has no output {name}");
        if let Some(resource) = name.strip_suffix("Url") {
            assert_eq!(reference(value), resource, "{name}");
        } else if let Some(resource) = name.strip_suffix("Arn") {
            assert_eq!(get_att(value), format!("{resource}.Arn"), "{name}");
        }
    }
    assert_eq!(reference(&outputs["TasksTableName"]["Value"]), "TasksTable");
    assert_eq!(reference(&outputs["ScheduleGroupName"]["Value"]), "ScheduleGroup");
    assert_eq!(reference(&outputs["EventBusName"]["Value"]), "EventBus");
}

/// Lambda's recursive loop detection stops a chain Lambda -> SQS -> the same
/// Lambda after about 16 hops unless the function allows it. The reconcile
/// worker goes on through its own queue (the daily pass's pages, the
/// missed-occurrence check's continuations), so it allows it; every other
/// function keeps the default (Terminate), and no other one sends to the
/// queue that invokes it.
#[test]
fn only_the_reconcile_worker_allows_its_own_chains_through_its_queue() {
    let t = template();
    for (name, resource) in t["Resources"].as_mapping().unwrap() {
        if resource["Type"].as_str() != Some("AWS::Serverless::Function") {
            continue;
        }
        let name = name.as_str().unwrap();
        let recursive = resource["Properties"]["RecursiveLoop"].as_str();
        if name == "ReconcileFunction" {
            assert_eq!(recursive, Some("Allow"), "{name}");
        } else {
            assert_eq!(recursive, None, "{name} keeps Lambda's default, Terminate");
        }
    }
}
