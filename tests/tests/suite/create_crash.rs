//! Crashes between create's writes converge when the caller retries with the
//! same key (SPEC §4 rule 5): no orphan schedule, no task without a schedule.
//! A crash is injected by wrapping the real adapters: the wrapped call goes
//! through to moto, then the wrapper fails as a process dying there would.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::create::{CreateReminder, CreateSettings};
use shared::domain::run::definition::ScheduleDefinition;
use shared::domain::task::Task;
use shared::domain::task::idempotency::IdempotencyRecord;
use shared::ports::{OwnerReminders, ReminderInserted, ScheduleError, Schedules, StoreError, TaskStore};
use tests::intercept::{Intercepted, SchedulesHook, TaskStoreHook};
use tests::{ENABLED, TestStack, code, create_request};

/// The schedule is written, then the process dies.
struct CrashAfterSchedule;

impl SchedulesHook<EventBridgeSchedules> for CrashAfterSchedule {
    async fn put(&self, inner: &EventBridgeSchedules, schedule: &ScheduleDefinition) -> Result<(), ScheduleError> {
        inner.put(schedule).await?;
        Err(ScheduleError {
            operation: "CreateSchedule",
            name: schedule.name.clone(),
            source: "injected crash after the schedule write".into(),
        })
    }
}

/// The transaction commits, then the process dies before answering.
struct CrashAfterInsert;

impl TaskStoreHook<DynamoStore> for CrashAfterInsert {
    async fn insert_with_idempotency(
        &self,
        inner: &DynamoStore,
        task: &Task,
        record: &IdempotencyRecord,
        owner: Option<&OwnerReminders>,
    ) -> Result<ReminderInserted, StoreError> {
        inner.insert_with_idempotency(task, record, owner).await?;
        Err(StoreError::Request {
            operation: "TransactWriteItems",
            source: "injected crash after the transaction".into(),
        })
    }
}

fn parts(t: &TestStack) -> (DynamoStore, EventBridgeSchedules, CreateSettings) {
    let config = t.create_config(ENABLED);
    (
        DynamoStore::from_sdk(&t.aws.sdk, config.table_name),
        EventBridgeSchedules::from_sdk(&t.aws.sdk, config.target),
        CreateSettings {
            flags: config.flags,
            ceilings: config.ceilings,
        },
    )
}

async fn retry(t: &TestStack, request: Value) -> Value {
    t.create_app()
        .handle(request, Utc::now())
        .await
        .expect("the retry succeeds")
        .to_json()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_schedule_converges_on_retry() {
    let t = TestStack::start().await.unwrap();
    let (store, schedules, settings) = parts(&t);
    let crashing = CreateReminder::new(store, Intercepted::new(schedules, CrashAfterSchedule), settings);
    let request = create_request("k", Utc::now(), Duration::hours(1));

    let failed = crashing.handle(request.clone(), Utc::now()).await;
    assert!(failed.is_err(), "an internal failure is a function error");
    assert_eq!(t.items().await, Vec::<Value>::new(), "no task yet");
    assert_eq!(t.schedule_names().await.len(), 1, "the schedule the retry will adopt");

    let answer = retry(&t, request).await;
    assert_eq!(
        (code(&answer), answer["replayed"].clone()),
        ("ok".to_owned(), json!(false))
    );
    let task_id = answer["task"]["task_id"].as_str().unwrap();
    assert_eq!(t.items_of("task").await.len(), 1);
    assert_eq!(t.schedule_names().await, vec![task_id.to_owned()]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_with_another_input_after_a_crash_takes_the_new_instant() {
    let t = TestStack::start().await.unwrap();
    let (store, schedules, settings) = parts(&t);
    let crashing = CreateReminder::new(store, Intercepted::new(schedules, CrashAfterSchedule), settings);
    let now = Utc::now();
    assert!(
        crashing
            .handle(create_request("k", now, Duration::hours(1)), now)
            .await
            .is_err()
    );

    // Nothing was recorded, so the key is still free for another input.
    let answer = retry(&t, create_request("k", now, Duration::hours(4))).await;
    assert_eq!(code(&answer), "ok");
    let at = answer["task"]["at"].as_str().unwrap();
    let schedule = t.schedule(answer["task"]["task_id"].as_str().unwrap()).await;
    assert_eq!(
        schedule.schedule_expression(),
        Some(format!("at({})", &at[..19]).as_str())
    );
    assert_eq!(t.schedule_names().await.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_the_transaction_replays_on_retry() {
    let t = TestStack::start().await.unwrap();
    let (store, schedules, settings) = parts(&t);
    let crashing = CreateReminder::new(Intercepted::new(store, CrashAfterInsert), schedules, settings);
    let request = create_request("k", Utc::now(), Duration::hours(1));
    assert!(crashing.handle(request.clone(), Utc::now()).await.is_err());
    assert_eq!(t.items_of("task").await.len(), 1);

    let answer = retry(&t, request).await;
    assert_eq!(
        (code(&answer), answer["replayed"].clone()),
        ("ok".to_owned(), json!(true))
    );
    assert_eq!(t.items_of("task").await.len(), 1);
    assert_eq!(t.schedule_names().await.len(), 1);
}
