//! A one-time task that has run keeps no schedule: Scheduler deleted its
//! `at()` schedule after the one delivery, and no writer (admin, reconcile's
//! schedule repair, the owner's schedules function) creates it again, since
//! they all go through `Schedules::put`, which writes nothing for a retired
//! definition.

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::run::Disposition;
use shared::domain::claim::RunStatus;
use shared::domain::schedule_definition::ScheduleDefinition;
use shared::ports::{Schedules, TaskStore};
use tests::{RunStack, admin_principal, reminder};

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
    assert_eq!(resumed["ok"], true, "{resumed}");
    assert_eq!(resumed["task"]["state"], "completed");
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
