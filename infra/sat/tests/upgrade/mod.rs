//! `sat upgrade` over a table as older releases left it: tasks written
//! before due times (a reminder in the schedulable index by its id alone, a
//! connector task outside it) and before the index (a reminder with none of
//! its keys). Neither the missed-occurrence check nor the daily pass can
//! see them until the upgrade gives each its due time and index entry; a
//! second run finds nothing; a dry run changes nothing.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{Duration, Utc};
use shared::adapters::dynamo::task_item;
use shared::adapters::keys::SchedulableKey;
use shared::domain::schedule::Schedule;
use shared::domain::task::{Task, TaskId};
use shared::ports::{DueIndex, Family, TaskCatalog};
use tests::{RunStack, connector_task};

use crate::{EnvFile, sat_with};

/// `task` as a release before due times wrote it: no `due`; its index
/// entry as that release had it (`Some(sort)`), or none at all.
async fn put_as_before(s: &RunStack, task: &Task, index_sort: Option<&str>) {
    let mut item = task_item(task).unwrap();
    item.remove("due");
    item.remove("gsi3pk");
    item.remove("gsi3sk");
    if let Some(sort) = index_sort {
        let shard = SchedulableKey::shard_of(task.task_id.as_str());
        item.insert(
            "gsi3pk".into(),
            AttributeValue::S(SchedulableKey::partition(Family::Reminders, shard)),
        );
        item.insert("gsi3sk".into(), AttributeValue::S(sort.to_owned()));
    }
    aws_sdk_dynamodb::Client::new(&s.t.aws.sdk)
        .put_item()
        .table_name(&s.t.stack.names.table)
        .set_item(Some(item))
        .send()
        .await
        .unwrap();
}

fn daily(hour: u32) -> Schedule {
    Schedule::Cron {
        cron: format!("0 {hour} * * *"),
        timezone: "Europe/Berlin".into(),
        until: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tasks_an_older_release_wrote_get_a_due_time_and_their_place_in_the_index() {
    let s = RunStack::start().await.unwrap();
    let env = EnvFile::write(&s.t.aws, &s.t.stack, &[]);
    let store = s.store();
    // A daily reminder from before the index, one from the index's first
    // release (sorted by id), a connector task, and a completed reminder.
    let mut before_index = tests::reminder(Utc::now());
    before_index.task_id = TaskId::for_reminder("ws_1", "usr_123", "before-index");
    before_index.spec.schedule = daily(9);
    let mut by_id = tests::reminder(Utc::now());
    by_id.task_id = TaskId::for_reminder("ws_1", "usr_123", "by-id");
    by_id.spec.schedule = daily(18);
    let mut connector = connector_task("issues", "digest", &[], &[]);
    connector.spec.schedule = daily(7);
    let mut done = tests::reminder(Utc::now() - Duration::days(2));
    done.task_id = TaskId::for_reminder("ws_1", "usr_123", "done");
    done.completed_at = Some(Utc::now() - Duration::days(2));
    put_as_before(&s, &before_index, None).await;
    put_as_before(&s, &by_id, Some(by_id.task_id.as_str())).await;
    put_as_before(&s, &connector, None).await;
    put_as_before(&s, &done, None).await;

    // What the daily pass reads: the index's shards. The pre-index
    // reminder is in none; none of them has a due time to be checked by.
    let in_index = |id: &TaskId| {
        let store = store.clone();
        let id = id.clone();
        async move {
            let shard = SchedulableKey::shard_of(id.as_str());
            store
                .schedulable_page(shard, None, 1_000)
                .await
                .unwrap()
                .items
                .iter()
                .any(|t| t.task_id == id)
        }
    };
    assert!(!in_index(&before_index.task_id).await);

    let dry = sat_with(env.path(), &["upgrade", "--dry-run", "--json"]).await;
    assert_eq!(dry.status, 0, "{dry:?}");
    let dry = dry.json();
    assert_eq!(dry["without_due"], 4, "{dry}");
    assert_eq!(dry["adopted"], 3, "{dry}");
    assert_eq!(dry["not_firing"], 1, "{dry}");
    assert!(
        s.task_item(&before_index).await.get("due").is_none(),
        "a dry run changes nothing"
    );

    let ran = sat_with(env.path(), &["upgrade", "--json"]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    assert_eq!(ran.json()["adopted"], 3, "{}", ran.stdout);
    for task in [&before_index, &by_id, &connector] {
        let item = s.task_item(task).await;
        assert!(item["due"].is_string(), "{item}");
        let sort = item["gsi3sk"].as_str().unwrap();
        assert!(
            sort.starts_with(item["due"].as_str().unwrap()),
            "sorted by its due time: {item}"
        );
    }
    assert!(in_index(&before_index.task_id).await, "the daily pass reads it now");
    assert!(in_index(&by_id.task_id).await);
    assert!(
        s.task_item(&done).await.get("due").is_none(),
        "a finished one is left alone"
    );
    // The check reads them once their due time passes.
    let later = Utc::now() + Duration::days(2);
    for (task, family) in [(&before_index, Family::Reminders), (&connector, Family::Connectors)] {
        let shard = SchedulableKey::shard_of(task.task_id.as_str());
        let due = store.due_page(family, shard, later, None, 1_000).await.unwrap();
        assert!(due.items.iter().any(|t| t.task_id == task.task_id), "{}", task.task_id);
    }

    let again = sat_with(env.path(), &["upgrade", "--json"]).await;
    assert_eq!(again.json()["adopted"], 0, "{}", again.stdout);
    let text = sat_with(env.path(), &["upgrade"]).await;
    assert!(text.stdout.contains("tasks without a due time"), "{}", text.stdout);
}
