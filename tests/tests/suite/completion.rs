//! A one-time task that has run keeps no schedule: Scheduler deleted its
//! `at()` schedule after the one delivery, and no writer (admin, reconcile's
//! schedule repair, the owner's schedules function) creates it again, since
//! they all go through `Schedules::put`, which writes nothing for a retired
//! definition. A one-time task deleted while its last run ran stays
//! deleted: the settle records the run and does not complete it.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::run::Disposition;
use shared::domain::run::definition::ScheduleDefinition;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::claim::RunStatus;
use shared::ports::{RunStore, Schedules, Settled, Settlement, StoreError, TaskStore};
use tests::intercept::{Intercepted, RunStoreHook};
use tests::{AdminFunction, RunStack, admin_principal, reminder, run_message, run_settings};

async fn admin(s: &RunStack, request: Value) -> Value {
    s.t.admin().handle(request, Utc::now()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_pause_and_resume_of_a_completed_reminder_creates_no_schedule() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let ran = s.deliver_once(&task, at).await;
    assert_eq!(ran, Disposition::Ran(RunStatus::Succeeded));
    assert_eq!(s.task_item(&task).await["state"], "completed");
    assert!(s.t.schedule_names().await.is_empty());

    let got = admin(
        &s,
        json!({"op": "get", "principal": admin_principal(), "task_id": task.task_id}),
    )
    .await;
    let version = got["version"].as_u64().unwrap();
    let paused = admin(
        &s,
        json!({"op": "pause", "principal": admin_principal(), "task_id": task.task_id,
               "expected_version": version, "note": "hold on"}),
    )
    .await;
    assert_eq!(paused["ok"], true, "{paused}");
    assert!(
        s.t.schedule_names().await.is_empty(),
        "a pause re-created the schedule of a completed reminder"
    );
    let version = paused["task"]["version"].as_u64().unwrap();
    let resumed = admin(
        &s,
        json!({"op": "resume", "principal": admin_principal(), "task_id": task.task_id,
               "expected_version": version}),
    )
    .await;
    // Its time has passed: a resume is refused, and nothing changes.
    assert_eq!(tests::code(&resumed), "invalid_request", "{resumed}");
    assert_eq!(s.task_item(&task).await["state"], "completed");
    assert!(
        s.t.schedule_names().await.is_empty(),
        "a resume re-created an at() schedule in the past"
    );

    // The rule is in the definition every writer builds, so a direct put
    // (reconcile's repair, the schedules function) writes nothing either.
    let stored = s.store().task(&task.workspace, &task.task_id).await.unwrap().unwrap();
    let definition = ScheduleDefinition::for_task(&stored).unwrap();
    assert!(definition.retired);
    let schedules = EventBridgeSchedules::from_sdk(&s.t.aws.sdk, s.t.create_config(tests::ENABLED).target);
    schedules.put(&definition).await.unwrap();
    assert!(s.t.schedule_names().await.is_empty());
    // A one-time task that has not run yet still gets its schedule.
    let pending = reminder(Utc::now() + Duration::hours(1));
    let definition = ScheduleDefinition::for_task(&pending).unwrap();
    assert!(!definition.retired);
    schedules.put(&definition).await.unwrap();
    assert_eq!(s.t.schedule_names().await, vec![pending.task_id.to_string()]);
}

/// The admin deletes the task while its run is in progress: after the model
/// answered, before the settle is sent.
struct DeleteBeforeSettle {
    admin: AdminFunction<DynamoStore, EventBridgeSchedules, shared::adapters::queue::RunsQueue>,
    task_id: String,
    version: u64,
}

impl RunStoreHook<DynamoStore> for DeleteBeforeSettle {
    async fn settle(&self, inner: &DynamoStore, s: &Settlement<'_>) -> Result<Settled, StoreError> {
        let deleted = self
            .admin
            .handle(
                json!({"op": "delete", "principal": admin_principal(), "task_id": self.task_id,
                       "expected_version": self.version}),
                Utc::now(),
            )
            .await
            .unwrap();
        assert_eq!(deleted["ok"], true, "{deleted}");
        inner.settle(s).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_deleted_while_its_run_runs_is_recorded_and_stays_deleted() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let hook = DeleteBeforeSettle {
        admin: s.t.admin(),
        task_id: task.task_id.to_string(),
        version: task.version,
    };
    let runner = s.runner_on(Intercepted::new(s.store(), hook), run_settings(true));
    let body = run_message(&task, at, "e1");
    let got = runner
        .deliver("m1", &body, Utc::now(), tests::deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let item = s.task_item(&task).await;
    assert_eq!(item["state"], "deleted", "the settle overwrote the tombstone's state");
    assert_eq!(item["override"]["deleted"], true);
    assert!(item.get("completed_at").is_none(), "{item}");
    let occurrence = occurrence_key(at);
    assert_eq!(item["claims"][&occurrence]["status"], "succeeded");
    let record = s
        .run_record(&task.task_id, &occurrence)
        .await
        .expect("the run is recorded");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(record["execution_id"], "e1");
    let period = at.format("%Y-%m").to_string();
    let cost = record["cost_usd"].as_f64().unwrap();
    assert!(
        (item["budget_used"][&period].as_f64().unwrap() - cost).abs() < 1e-12,
        "the reservation settled to the cost"
    );
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_123"),
            &period,
        )
        .await
        .unwrap();
    assert_eq!(account["runs"], 1, "charged once");
    assert!((account["spent_usd"].as_f64().unwrap() - cost).abs() < 1e-12);
    assert_eq!(s.events().await.len(), 1, "one notification");
    // The same message again: settled, nothing written twice.
    let again = s
        .runner()
        .deliver("m1", &body, Utc::now(), tests::deadline())
        .await
        .unwrap();
    assert_eq!(again, Disposition::Duplicate);
    assert_eq!(s.model.requests().await.len(), 1);
}
