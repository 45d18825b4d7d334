//! `sat redrive` against the local stack's queues on moto: each DLQ's
//! messages to where they belong, the rest left and said.

use aws_sdk_sqs::types::MessageSystemAttributeName;
use serde_json::json;
use tests::TestStack;

use crate::{EnvFile, sat_with};

/// Every body waiting in a queue (received, then made visible again).
async fn bodies(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<(String, Option<String>)> {
    let out = sqs
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
        .send()
        .await
        .unwrap();
    let mut got: Vec<(String, Option<String>)> = out
        .messages()
        .iter()
        .map(|m| {
            (
                m.body().unwrap_or_default().to_owned(),
                m.attributes()
                    .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                    .cloned(),
            )
        })
        .collect();
    got.sort();
    got
}

async fn send(sqs: &aws_sdk_sqs::Client, url: &str, body: &str, group: Option<&str>) {
    let mut send = sqs.send_message().queue_url(url).message_body(body);
    if let Some(group) = group {
        send = send
            .message_group_id(group)
            .message_deduplication_id(uuid::Uuid::new_v4().simple().to_string());
    }
    send.send().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn each_dead_letter_goes_where_it_belongs_and_the_rest_is_left_and_said() {
    let s = TestStack::start().await.unwrap();
    let env = EnvFile::write(&s.aws, &s.stack, &[]);
    let sqs = aws_sdk_sqs::Client::new(&s.aws.sdk);
    let stack = &s.stack;
    let run = json!({"task_id": format!("rem_{}", "a".repeat(32)), "workspace": "ws_1",
                     "scheduled_time": "2026-12-24T18:00:00Z", "execution_id": "e1", "attempt": "1"})
    .to_string();
    let run2 = run.replace("e1", "e2");
    let work = json!({"type": "connector.connected", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
    let event = json!({"detail-type": "Scheduled run finished", "source": "scheduled-agent-tasks.runner",
                       "detail": {"workspace": "ws_1", "task_id": "t", "run_id": "t@x", "scheduled_time": "x", "status": "succeeded"}})
    .to_string();
    send(&sqs, &stack.scheduler_dlq_url, &run, None).await;
    send(&sqs, &stack.scheduler_dlq_url, r#"{"type": "reconcile.all"}"#, None).await;
    send(&sqs, &stack.scheduler_dlq_url, r#"{"type": "overdue.check"}"#, None).await;
    send(&sqs, &stack.scheduler_dlq_url, "garbage", None).await;
    send(&sqs, &stack.runs_dlq_url, &run2, None).await;
    send(&sqs, &stack.reconcile_dlq_url, &work, Some("ws_1/ins_1")).await;
    send(&sqs, &stack.run_finished.dlq_url, &event, None).await;
    send(
        &sqs,
        &stack.pipe_dlq_url,
        r#"{"DDBStreamBatchInfo": {"shardId": "s"}}"#,
        None,
    )
    .await;

    // A dry run lists, moves nothing.
    let dry = sat_with(env.path(), &["--json", "redrive", "--dry-run"]).await;
    assert_eq!(dry.status, 3, "messages would be left: {dry:?}");
    let report = dry.json();
    assert_eq!(report["messages"].as_array().unwrap().len(), 8, "{report}");
    assert!(bodies(&sqs, &stack.runs_queue_url).await.is_empty());
    assert_eq!(bodies(&sqs, &stack.scheduler_dlq_url).await.len(), 4);

    let ran = sat_with(env.path(), &["redrive"]).await;
    assert_eq!(ran.status, 3, "{ran:?}");
    assert!(ran.stdout.contains("6 moved, 2 left."), "{}", ran.stdout);
    assert!(ran.stdout.contains("the daily reconcile pass"), "{}", ran.stdout);
    // Each where it belongs.
    assert_eq!(bodies(&sqs, &stack.runs_queue_url).await, {
        let mut want = vec![(run.clone(), None), (run2.clone(), None)];
        want.sort();
        want
    });
    let mut reconcile = bodies(&sqs, &stack.reconcile_queue_url).await;
    reconcile.sort();
    let mut want = vec![
        (
            r#"{"type": "reconcile.all"}"#.to_owned(),
            Some("reconcile-all".to_owned()),
        ),
        (
            r#"{"type": "overdue.check"}"#.to_owned(),
            Some("overdue-check".to_owned()),
        ),
        (work.clone(), Some("ws_1/ins_1".to_owned())),
    ];
    want.sort();
    assert_eq!(reconcile, want);
    assert_eq!(bodies(&sqs, &stack.run_finished.url).await, vec![(event.clone(), None)]);
    // What is no run stays, and so do the pipe's stream records.
    assert_eq!(
        bodies(&sqs, &stack.scheduler_dlq_url).await,
        vec![("garbage".to_owned(), None)]
    );
    assert_eq!(bodies(&sqs, &stack.pipe_dlq_url).await.len(), 1);
    assert!(bodies(&sqs, &stack.runs_dlq_url).await.is_empty());
    assert!(bodies(&sqs, &stack.reconcile_dlq_url).await.is_empty());
    assert!(bodies(&sqs, &stack.run_finished.dlq_url).await.is_empty());

    // The moved run is one the runner takes: it reads as a delivery.
    assert!(shared::domain::run::occurrence::RunMessage::parse(&run).is_ok());
    // Again: nothing more moves; the two left are said again.
    let again = sat_with(env.path(), &["--json", "redrive"]).await.json();
    let moved: u64 = again["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["moved"].as_u64().unwrap())
        .sum();
    assert_eq!(moved, 0, "{again}");
}

/// A redrive that cannot send (its destination is gone) fails, and what it
/// received is visible again at once, not hidden for the rest of its hold;
/// nothing is lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_redrive_that_cannot_send_gives_back_what_it_received_at_once() {
    let s = TestStack::start().await.unwrap();
    let gone = format!("{}-gone", s.stack.runs_queue_url);
    let env = EnvFile::write(&s.aws, &s.stack, &[("RunsQueueUrl", gone)]);
    let sqs = aws_sdk_sqs::Client::new(&s.aws.sdk);
    for e in ["e1", "e2", "e3"] {
        let run = json!({"task_id": format!("rem_{}", "a".repeat(32)), "workspace": "ws_1",
                         "scheduled_time": "2026-12-24T18:00:00Z", "execution_id": e, "attempt": "1"});
        send(&sqs, &s.stack.scheduler_dlq_url, &run.to_string(), None).await;
    }
    let ran = sat_with(env.path(), &["redrive"]).await;
    assert_ne!(ran.status, 0, "{ran:?}");
    assert_eq!(
        bodies(&sqs, &s.stack.scheduler_dlq_url).await.len(),
        3,
        "all three are visible again at once"
    );
    assert!(bodies(&sqs, &s.stack.runs_queue_url).await.is_empty());
}
