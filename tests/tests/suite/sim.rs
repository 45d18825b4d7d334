//! A slice of the seeded fault simulation (`tests::sim`,
//! `infra/scripts/sim.sh`) on the real adapters and local services: two
//! fixed seeds of 30 occurrences each, every fault kind among them, and two
//! seeds derived from the commit under test (`tests::sim::seeds_of_commit`),
//! so each commit CI tests explores seeds nobody tuned to. Asserts that
//! every check held, and that faults struck at all; a failure prints the
//! command that replays it.

use tests::sim::{SimConfig, commit_under_test as commit, run, seeds_of_commit};

async fn slice(first_seed: u64, last_seed: u64) -> tests::sim::SimReport {
    let (size, per_task) = (30, 5);
    let replay = format!("infra/scripts/sim.sh --seeds {first_seed}..{last_seed} --size {size} --per-task {per_task}");
    println!("sim: seeds {first_seed}..{last_seed}; replay with: {replay}");
    let report = run(&SimConfig {
        first_seed,
        last_seed,
        size,
        per_task,
        concurrency: 6,
        print_schedule: false,
        parallel: 2,
        tamper: false,
    })
    .await
    .unwrap();
    println!("{}", report.table());
    assert_eq!(
        report.violation_count(),
        0,
        "\n{}\n{}\nreplay with: {replay}",
        report.table(),
        report.details()
    );
    assert_eq!(report.occurrences as u64, 30 * (last_seed - first_seed + 1));
    assert!(
        report.faults.values().sum::<usize>() >= 10,
        "the slice injects faults:\n{}",
        report.table()
    );
    report
}

#[tokio::test(flavor = "multi_thread")]
async fn seeded_faults_leave_one_outcome_per_occurrence_paid_once_notified_once_none_lost() {
    let report = slice(1, 2).await;
    // Plain writes met transaction conflicts, as on AWS, and the checks held.
    assert!(report.conflicts_met > 0, "{}", report.table());
}

/// Seeds no one has run before this commit: the same checks.
#[tokio::test(flavor = "multi_thread")]
async fn the_commits_own_seeds_leave_one_outcome_per_occurrence_paid_once_notified_once_none_lost() {
    let commit = commit();
    let (first, last) = seeds_of_commit(&commit, 2).unwrap();
    println!("sim: commit {commit}");
    slice(first, last).await;
}

#[test]
fn a_commits_seeds_are_its_own_and_replayable() {
    let a = seeds_of_commit("57349f9c0ffee0000000000000000000000000000", 2).unwrap();
    assert_eq!(
        a,
        seeds_of_commit("57349f9c0ffeeabc", 2).unwrap(),
        "the first 12 digits decide"
    );
    assert_eq!(a.1 - a.0, 1);
    assert!(a.0 >= 1_000_000, "above every fixed seed");
    assert_ne!(a, seeds_of_commit("3561d00aaaaa", 2).unwrap());
    assert!(seeds_of_commit("not-a-commit", 2).is_err());
}

/// The checks read the table, not what the deliveries answered: a run
/// record deleted and an account overcharged behind the runner's back are
/// found, the record's cost missing at the task's and the workspace's
/// level both.
#[tokio::test(flavor = "multi_thread")]
async fn the_checks_find_a_record_lost_and_an_account_overcharged_behind_the_runners_back() {
    let report = run(&SimConfig {
        first_seed: 3,
        last_seed: 3,
        size: 10,
        per_task: 5,
        concurrency: 2,
        print_schedule: false,
        parallel: 1,
        tamper: true,
    })
    .await
    .unwrap();
    let found = |check: &str| report.violations.get(check).map_or(0, Vec::len);
    assert_eq!(found(tests::sim::NONE_LOST), 1, "\n{}", report.details());
    assert_eq!(
        found(tests::sim::ONE_EVENT),
        1,
        "the lost record's event:\n{}",
        report.details()
    );
    assert_eq!(
        found(tests::sim::ACCOUNTING),
        3,
        "its budget, its workspace's month and the overcharged account:\n{}",
        report.details()
    );
    assert_eq!(report.failing_seeds.iter().copied().collect::<Vec<_>>(), vec![3]);
}

/// DynamoDB keeps a `TransactWriteItems` client request token for ten
/// minutes: a repeat of a transaction that succeeded (the SDK repeats one
/// whose answer timed out) succeeds without writing again, and the token
/// with other parameters is refused. moto ignores the token;
/// `moto_serial.py` keeps the promise (infra/FIDELITY.md), which the
/// runner's settle and release rely on.
#[tokio::test]
async fn a_transaction_repeated_under_its_client_request_token_is_applied_once() {
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    use aws_sdk_dynamodb::types::{AttributeValue, TransactWriteItem, Update};

    let t = tests::TestStack::start().await.unwrap();
    let add = |n: &str| {
        TransactWriteItem::builder()
            .update(
                Update::builder()
                    .table_name(&t.stack.names.table)
                    .key("pk", AttributeValue::S("token-probe".into()))
                    .key("sk", AttributeValue::S("token-probe".into()))
                    .update_expression("ADD n :n")
                    .expression_attribute_values(":n", AttributeValue::N(n.into()))
                    .build()
                    .unwrap(),
            )
            .build()
    };
    let send = |item: TransactWriteItem, token: &'static str| {
        t.dynamo
            .transact_write_items()
            .transact_items(item)
            .client_request_token(token)
            .send()
    };
    let n = || async {
        t.item("token-probe", "token-probe").await.unwrap()["n"]
            .as_i64()
            .unwrap()
    };
    send(add("1"), "token-a").await.unwrap();
    send(add("1"), "token-a").await.unwrap();
    assert_eq!(n().await, 1, "a repeat under its token writes nothing");
    let refused = send(add("5"), "token-a").await.unwrap_err();
    assert_eq!(
        refused.as_service_error().and_then(|e| e.code()),
        Some("IdempotentParameterMismatchException")
    );
    assert_eq!(n().await, 1);
    send(add("1"), "token-b").await.unwrap();
    assert_eq!(n().await, 2, "another token is another transaction");
}

/// DynamoDB applies a transaction whole or not at all: a cancelled one
/// leaves its items and the table's stream as they were. moto undoes a
/// cancelled transaction from a backup, which `moto_serial.py` takes of the
/// items the transaction names (moto's own deep copy of every named table
/// made each request cost the whole table; infra/FIDELITY.md): a put of a
/// new item and an update of an existing one, both applied before a third
/// item's condition fails, are undone, and the stream has no record of
/// them; the same writes without the failing check apply, two records.
#[tokio::test]
async fn a_cancelled_transaction_leaves_its_items_and_the_stream_as_they_were() {
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    use aws_sdk_dynamodb::types::{AttributeValue, ConditionCheck, Put, TransactWriteItem, Update};

    let t = tests::TestStack::start().await.unwrap();
    let table = t.stack.names.table.clone();
    let key = |sk: &str| {
        [
            ("pk".to_owned(), AttributeValue::S("cancel-probe".into())),
            ("sk".to_owned(), AttributeValue::S(sk.into())),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<_, _>>()
    };
    t.dynamo
        .put_item()
        .table_name(&table)
        .set_item(Some(key("kept")))
        .item("n", AttributeValue::N("1".into()))
        .send()
        .await
        .unwrap();
    let put_new = TransactWriteItem::builder()
        .put(
            Put::builder()
                .table_name(&table)
                .set_item(Some(key("new")))
                .build()
                .unwrap(),
        )
        .build();
    let add_five = TransactWriteItem::builder()
        .update(
            Update::builder()
                .table_name(&table)
                .set_key(Some(key("kept")))
                .update_expression("ADD n :n")
                .expression_attribute_values(":n", AttributeValue::N("5".into()))
                .build()
                .unwrap(),
        )
        .build();
    let absent_exists = TransactWriteItem::builder()
        .condition_check(
            ConditionCheck::builder()
                .table_name(&table)
                .set_key(Some(key("absent")))
                .condition_expression("attribute_exists(pk)")
                .build()
                .unwrap(),
        )
        .build();
    let n = || async { t.item("cancel-probe", "kept").await.unwrap()["n"].as_i64().unwrap() };
    let before = stream_records(&t).await;

    let cancelled = t
        .dynamo
        .transact_write_items()
        .transact_items(put_new.clone())
        .transact_items(add_five.clone())
        .transact_items(absent_exists)
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        cancelled.as_service_error().and_then(|e| e.code()),
        Some("TransactionCanceledException")
    );
    assert_eq!(t.item("cancel-probe", "new").await, None, "the put is undone");
    assert_eq!(n().await, 1, "the update is undone");
    assert_eq!(stream_records(&t).await, before, "no stream record of an undone write");

    t.dynamo
        .transact_write_items()
        .transact_items(put_new)
        .transact_items(add_five)
        .send()
        .await
        .unwrap();
    assert!(t.item("cancel-probe", "new").await.is_some());
    assert_eq!(n().await, 6);
    assert_eq!(stream_records(&t).await, before + 2, "one record per write applied");
}

/// How many records the table's stream holds.
async fn stream_records(t: &tests::TestStack) -> usize {
    use aws_sdk_dynamodbstreams::types::ShardIteratorType;
    let arn = t
        .dynamo
        .describe_table()
        .table_name(&t.stack.names.table)
        .send()
        .await
        .unwrap()
        .table
        .and_then(|d| d.latest_stream_arn)
        .expect("the table has a stream");
    let streams = aws_sdk_dynamodbstreams::Client::new(&t.aws.sdk);
    let shard = streams.describe_stream().stream_arn(&arn).send().await.unwrap();
    let shard = shard
        .stream_description()
        .and_then(|d| d.shards().first())
        .and_then(|s| s.shard_id())
        .expect("the stream has a shard")
        .to_owned();
    let mut iterator = streams
        .get_shard_iterator()
        .stream_arn(&arn)
        .shard_id(shard)
        .shard_iterator_type(ShardIteratorType::TrimHorizon)
        .send()
        .await
        .unwrap()
        .shard_iterator;
    let mut count = 0;
    while let Some(at) = iterator {
        let page = streams.get_records().shard_iterator(&at).send().await.unwrap();
        if page.records().is_empty() {
            break;
        }
        count += page.records().len();
        iterator = page.next_shard_iterator;
    }
    count
}

/// SQS brings a returned message back with the same execution id: a run
/// throttled before any tool call on two deliveries of one message is
/// released both times (a release under the first one's client request
/// token would be answered from DynamoDB's record, writing nothing, and
/// leave the claim to be taken over and charged as a crash).
#[tokio::test(flavor = "multi_thread")]
async fn a_message_throttled_on_two_deliveries_of_one_execution_is_released_both_times() {
    use chrono::{Duration, Utc};
    use shared::app::run::{Disposition, SETTLE_RESERVE_SECONDS};
    use shared::domain::run::occurrence::occurrence_key;
    use shared::domain::task::claim::RunStatus;

    let s = tests::RunStack::start().await.unwrap();
    let at = Utc::now() - Duration::seconds(5);
    let task = tests::reminder(at);
    s.store().insert_task(&task).await.unwrap();
    let runner = s.runner();
    let body = tests::run_message(&task, at, "exec-1");
    s.model.fault(Some(local::converse::Fault::Throttling)).await;
    for delivery in 1..=2 {
        let deadline = Utc::now() + Duration::seconds(SETTLE_RESERVE_SECONDS + 2);
        assert_eq!(
            runner.deliver("m", &body, Utc::now(), deadline).await.unwrap(),
            Disposition::ReturnToQueue
        );
        let item = s.task_item(&task).await;
        assert!(
            item["claims"][occurrence_key(at)].is_null(),
            "delivery {delivery} released its claim: {}",
            item["claims"]
        );
    }
    s.model.fault(None).await;
    let deadline = Utc::now() + Duration::seconds(360);
    assert_eq!(
        runner.deliver("m", &body, Utc::now(), deadline).await.unwrap(),
        Disposition::Ran(RunStatus::Succeeded)
    );
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["attempts"], 1, "no attempt was taken over: {record}");
}
