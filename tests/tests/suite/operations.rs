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
/// queue's DLQ); the runbook's script moves them to the runs queue, and the
/// reconcile schedules' inputs (the daily pass's, in either form, and the
/// missed-occurrence check's) to the reconcile queue in their schedules'
/// message groups, when it is given that queue.
#[tokio::test(flavor = "multi_thread")]
async fn the_scheduler_dlq_runbook_moves_its_messages_to_the_runs_queue() {
    let t = TestStack::start().await.unwrap();
    let sqs = aws_sdk_sqs::Client::new(&t.aws.sdk);
    let sent: BTreeSet<String> = (0..13)
        .map(|i| {
            format!(r#"{{"task_id": "rem_{i}", "workspace": "ws_1", "scheduled_time": "2026-12-24T18:00:00Z", "execution_id": "e{i}", "attempt": "185"}}"#)
        })
        .collect();
    // The reconcile schedules share the DLQ: their inputs are no runs.
    let daily = r#"{"type": "reconcile.all"}"#;
    let older_daily = r#"{"op": "reconcile_all"}"#;
    let check = r#"{"type": "overdue.check"}"#;
    let stray = r#"{"hello": "world"}"#;
    for body in sent
        .iter()
        .map(String::as_str)
        .chain([daily, older_daily, check, stray])
    {
        sqs.send_message()
            .queue_url(&t.stack.scheduler_dlq_url)
            .message_body(body)
            .send()
            .await
            .unwrap();
    }
    let root = local::moto::repo_root();
    let redrive = |extra: &[&str]| {
        let out = std::process::Command::new(local::moto::python_path())
            .arg(root.join("infra/python/redrive_scheduler_dlq.py"))
            .args(["--from", &t.stack.scheduler_dlq_url, "--to", &t.stack.runs_queue_url])
            .args(extra)
            .envs(t.aws.sdk_env())
            .env("AWS_DEFAULT_REGION", local::REGION)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let answer = redrive(&[]);
    assert_eq!(answer["moved"], 13);
    assert_eq!(
        answer["left"], 4,
        "without the reconcile queue, the schedules' inputs stay in the DLQ: {answer}"
    );
    let moved: BTreeSet<String> = bodies(&sqs, &t.stack.runs_queue_url).await.into_iter().collect();
    assert_eq!(moved, sent, "every run message, once, body unchanged, and nothing else");
    t.advance_sqs_clock(121);

    let answer = redrive(&["--reconcile-queue", &t.stack.reconcile_queue_url]);
    assert_eq!(answer["reconciled"], 3, "{answer}");
    assert_eq!(answer["left"], 1, "{answer}");
    let mut reconciled: Vec<(String, String)> = t
        .take_work()
        .await
        .into_iter()
        .map(|(group, body)| (body, group))
        .collect();
    reconciled.sort();
    assert_eq!(
        reconciled,
        vec![
            (check.to_owned(), "overdue-check".to_owned()),
            (daily.to_owned(), "reconcile-all".to_owned()),
            (daily.to_owned(), "reconcile-all".to_owned()),
        ],
        "as the schedules send them, the older daily form as today's"
    );
    t.advance_sqs_clock(121);
    assert_eq!(
        bodies(&sqs, &t.stack.scheduler_dlq_url).await,
        vec![stray.to_owned()],
        "only what no schedule sends is left"
    );

    let same = std::process::Command::new(local::moto::python_path())
        .arg(root.join("infra/python/redrive_scheduler_dlq.py"))
        .args(["--from", &t.stack.runs_queue_url, "--to", &t.stack.runs_queue_url])
        .output()
        .unwrap();
    assert!(!same.status.success(), "a queue is not redriven into itself");
}
