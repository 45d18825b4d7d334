//! `sat overdue` as an operator runs it against the local stack: a
//! connector task whose schedule never fired for hours, each occurrence
//! named in its zone beside UTC, recorded once; a dry run records nothing.

use std::collections::BTreeSet;

use chrono::{Duration, Utc};
use serde_json::Value;
use shared::domain::operations::overdue::refresh_due;
use shared::domain::schedule::Schedule;
use tests::{RunStack, connector_task};

use crate::{EnvFile, sat_with};

fn named(answer: &Value) -> BTreeSet<(String, String, String)> {
    answer["missed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["task_id"].as_str().unwrap().to_owned(),
                m["scheduled_time"].as_str().unwrap().to_owned(),
                m["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_occurrences_that_never_ran_are_named_and_recorded_once() {
    let s = RunStack::start().await.unwrap();
    let env = EnvFile::write(&s.t.aws, &s.t.stack, &[]);
    // Hourly in Berlin, its schedule lost four hours ago: nothing ran since.
    let mut lost = connector_task("issues", "hourly_digest", &[], &[]);
    lost.spec.schedule = Schedule::Cron {
        cron: "0 * * * *".into(),
        timezone: "Europe/Berlin".into(),
        until: None,
    };
    refresh_due(None, &mut lost, Utc::now() - Duration::hours(4));
    s.insert(&lost).await;

    let dry = sat_with(env.path(), &["overdue", "--catch-up", "1h", "--dry-run", "--json"]).await;
    assert_eq!(dry.status, 3, "found something: {dry:?}");
    let before = named(&dry.json());
    assert!(before.len() >= 2, "{before:?}");
    for (task, _, reason) in &before {
        assert_eq!(
            (task.as_str(), reason.as_str()),
            (lost.task_id.as_str(), "never_delivered")
        );
    }
    let (_, first, _) = before.iter().next().unwrap();
    assert_eq!(
        s.run_record(&lost.task_id, first).await,
        None,
        "a dry run records nothing"
    );

    // The human form: a table, the zone's local time beside UTC.
    let text = sat_with(env.path(), &["overdue", "--catch-up", "1h", "--dry-run"]).await;
    assert_eq!(text.status, 3, "{text:?}");
    assert!(
        text.stdout.contains("never ran (dry run: nothing recorded)"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("CET") || text.stdout.contains("CEST"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(first.as_str()), "{}", text.stdout);

    let ran = sat_with(env.path(), &["overdue", "--catch-up", "1h", "--json"]).await;
    assert_eq!(ran.status, 3, "{ran:?}");
    let recorded = named(&ran.json());
    // The same occurrences (one more only if an hour passed the cutoff meanwhile).
    assert!(
        before.is_subset(&recorded) && recorded.len() <= before.len() + 1,
        "{recorded:?}"
    );
    for (_, at, _) in &recorded {
        let run = s
            .run_record(&lost.task_id, at)
            .await
            .expect("each missed occurrence is recorded");
        assert_eq!(run["status"], "skipped");
    }

    // Once: the next check names none of them again.
    let again = sat_with(env.path(), &["overdue", "--catch-up", "1h", "--json"]).await;
    assert!(named(&again.json()).is_disjoint(&recorded), "{again:?}");
}
