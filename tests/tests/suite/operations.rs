//! The runbooks' commands (infra/OPERATIONS.md), run against the local stack.

use std::collections::BTreeSet;

use tests::TestStack;

async fn bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    loop {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        if got.messages().is_empty() {
            return out;
        }
        out.extend(got.messages().iter().map(|m| m.body().unwrap_or_default().to_owned()));
    }
}

/// SQS's DLQ redrive cannot return the Scheduler DLQ's messages (it is no
/// queue's DLQ); the runbook's script moves them to the runs queue.
#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_dlq_runbook_moves_its_messages_to_the_runs_queue() {
    let t = TestStack::start().await.unwrap();
    let sqs = aws_sdk_sqs::Client::new(&t.aws.sdk);
    let sent: BTreeSet<String> = (0..13)
        .map(|i| {
            format!(r#"{{"task_id": "rem_{i}", "workspace": "ws_1", "scheduled_time": "2026-12-24T18:00:00Z", "execution_id": "e{i}", "attempt": "185"}}"#)
        })
        .collect();
    // The daily reconcile schedule shares the DLQ: its input is no run.
    let daily = r#"{"op": "reconcile_all"}"#;
    for body in sent.iter().map(String::as_str).chain([daily]) {
        sqs.send_message()
            .queue_url(&t.stack.scheduler_dlq_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let root = local::moto::repo_root();
    let out = std::process::Command::new(local::moto::python_path())
        .arg(root.join("infra/python/redrive_scheduler_dlq.py"))
        .args(["--from", &t.stack.scheduler_dlq_url, "--to", &t.stack.runs_queue_url])
        .envs(t.aws.sdk_env())
        .env("AWS_DEFAULT_REGION", local::REGION)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["moved"], 13);
    assert_eq!(answer["left"], 1, "the daily pass's input stays in the DLQ: {answer}");
    let moved: BTreeSet<String> = bodies(&sqs, &t.stack.runs_queue_url).await.into_iter().collect();
    assert_eq!(moved, sent, "every run message, once, body unchanged, and nothing else");
    t.advance_sqs_clock(121);
    assert_eq!(
        bodies(&sqs, &t.stack.scheduler_dlq_url).await,
        vec![daily.to_owned()],
        "only the reconcile input is left"
    );

    let same = std::process::Command::new(local::moto::python_path())
        .arg(root.join("infra/python/redrive_scheduler_dlq.py"))
        .args(["--from", &t.stack.runs_queue_url, "--to", &t.stack.runs_queue_url])
        .output()
        .unwrap();
    assert!(!same.status.success(), "a queue is not redriven into itself");
}
