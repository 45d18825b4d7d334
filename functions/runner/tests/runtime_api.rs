//! The real `runner` binary under a Lambda Runtime API emulator, against
//! moto, the Converse stand-in and the MCP fixture, fed crafted SQS batches:
//! a duplicate in the same batch, a poison message, a redelivery.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use local::runtime::{FunctionProcess, RuntimeApi};
use serde_json::{Value, json};
use tests::{RunStack, reminder, run_message};

const BINARY: &str = env!("CARGO_BIN_EXE_runner");

fn sqs_event(records: &[(&str, &str)]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767225600000",
                               "SenderId": "scheduler", "ApproximateFirstReceiveTimestamp": "1767225600000"},
                "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:runs", "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({"Records": records})
}

fn failures(response: &Value) -> Vec<String> {
    let mut ids = local::dispatcher::batch_failures(response);
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_runs_a_batch_with_partial_failures() {
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let task = reminder(at);
    s.store().insert_task(&task).await.unwrap();

    let mut env = s.t.aws.sdk_env();
    env.extend([
        ("TABLE_NAME".to_owned(), s.t.stack.names.table.clone()),
        ("AGENT_SCHEDULE_WORKER_ENABLED".to_owned(), "true".to_owned()),
        ("MODEL_ID".to_owned(), tests::MODEL.to_owned()),
        (
            "MODEL_PRICES".to_owned(),
            json!({tests::MODEL: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}).to_string(),
        ),
        (
            "SCHEDULE_CEILINGS".to_owned(),
            json!({"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300})
                .to_string(),
        ),
        ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME".to_owned(), s.model.endpoint()),
    ]);
    let api = RuntimeApi::start("runner", Duration::from_secs(60)).await.unwrap();
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("runner-{}.log", uuid::Uuid::new_v4().simple()));
    let _runner = FunctionProcess::spawn(Path::new(BINARY), &api, "runner", &env, Some(&log)).unwrap();

    let body = run_message(&task, at, "exec-1");
    let batch = sqs_event(&[("m1", &body), ("m2", &body), ("poison", "{\"not\": \"a run\"}")]);
    let response = api.invoke_ok(&batch).await.unwrap();
    // One of the two copies ran; the other met its live lease and comes back.
    let back = failures(&response);
    assert_eq!(back.len(), 1, "{response}");
    assert!(back[0] == "m1" || back[0] == "m2");

    let redelivered = api.invoke_ok(&sqs_event(&[(&back[0], &body)])).await.unwrap();
    assert_eq!(
        failures(&redelivered),
        Vec::<String>::new(),
        "a duplicate of a finished run is acknowledged"
    );

    let occurrence = shared::domain::occurrence::occurrence_key(at);
    let record = s.run_record(&task.task_id, &occurrence).await.expect("run record");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(s.t.items_of("malformed").await.len(), 1, "the poison message is kept");
    assert_eq!(s.events().await.len(), 1);
    assert_eq!(s.model.requests().await.len(), 1);

    let logs = std::fs::read_to_string(&log).unwrap();
    assert!(
        !logs.contains("call mom about Sunday"),
        "no instruction text in the logs"
    );
    assert!(
        logs.lines().any(|l| l.contains("\"task_id\"")),
        "spans carry the task id: {logs}"
    );
}
