//! The schedules function (SPEC §11) against moto through the real
//! adapters: every op and error, owner-only visibility, idempotent replays,
//! version conflicts, the cap (also under concurrent creates), the
//! Scheduler schedule kept in step, run history, and a daily reminder run
//! by the runner across DST changes in its zone.

use chrono::{DateTime, Duration, TimeZone, Utc};
use local::converse::Reply;
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::app::run::Disposition;
use shared::config::Flags;
use shared::domain::schedule::Expression;
use shared::domain::schedule::preview::next_cron_fire;
use shared::domain::task::TaskId;
use shared::domain::task::claim::RunStatus;
use tests::{ENABLED, RunStack, TestStack, code, owner, owner_in, schedules_create};

async fn call(app: &schedules::App, payload: Value) -> Value {
    call_at(app, payload, Utc::now()).await
}

async fn call_at(app: &schedules::App, payload: Value, now: DateTime<Utc>) -> Value {
    app.handle(payload, now).await.expect("no internal failure")
}

fn at_in(ahead: Duration) -> Value {
    json!({"at": (Utc::now() + ahead).to_rfc3339()})
}

fn daily(time: &str, zone: &str) -> Value {
    json!({"daily": {"time": time, "timezone": zone}})
}

async fn create(app: &schedules::App, principal: &Value, key: &str, title: &str, when: Value) -> Value {
    let answer = call(app, schedules_create(principal, key, title, when)).await;
    assert_eq!(answer["ok"], true, "{answer}");
    answer["task"].clone()
}

fn op(name: &str, principal: &Value, task: &Value, extra: Value) -> Value {
    let mut request = json!({"op": name, "principal": principal, "task_id": task["task_id"],
                             "expected_version": task["version"]});
    if let (Some(r), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
        r.extend(extra.clone());
    }
    request
}

async fn schedule_of(t: &TestStack, task: &Value) -> Option<(String, String, String)> {
    let name = task["task_id"].as_str().unwrap();
    if !t.schedule_names().await.contains(&name.to_owned()) {
        return None;
    }
    let s = t.schedule(name).await;
    Some((
        s.schedule_expression().unwrap_or_default().to_owned(),
        s.schedule_expression_timezone().unwrap_or_default().to_owned(),
        s.state().map(|s| s.as_str().to_owned()).unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owner_creates_lists_reads_moves_pauses_resumes_and_cancels() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let once = create(&app, &me, "k1", "Call mom", at_in(Duration::hours(2))).await;
    let every_day = create(&app, &me, "k2", "Stretch", daily("19:00", "Europe/Berlin")).await;
    let weekly = create(
        &app,
        &me,
        "k3",
        "Bins",
        json!({"weekly": {"days": ["TUE", "MON"], "time": "07:30", "timezone": "America/New_York"}}),
    )
    .await;
    assert_eq!(once["state"], "scheduled");
    assert_eq!(once["version"], 1);
    assert!(once["schedule"]["at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(every_day["schedule"], daily("19:00", "Europe/Berlin"));
    assert_eq!(
        weekly["schedule"],
        json!({"weekly": {"days": ["MON", "TUE"], "time": "07:30", "timezone": "America/New_York"}})
    );
    assert_eq!(
        schedule_of(&t, &every_day).await,
        Some(("cron(0 19 * * ? *)".into(), "Europe/Berlin".into(), "ENABLED".into()))
    );
    assert_eq!(
        schedule_of(&t, &weekly).await.unwrap().0,
        "cron(30 7 ? * 2,3 *)",
        "Scheduler numbers days from SUN = 1"
    );
    let recurring = t.schedule(every_day["task_id"].as_str().unwrap()).await;
    assert_eq!(
        recurring.action_after_completion().map(|a| a.as_str()),
        Some("NONE"),
        "a recurring schedule stays after a run"
    );

    // list: newest first, paged with the cursor.
    let page = call(&app, json!({"op": "list", "principal": me, "limit": 2})).await;
    let ids: Vec<&Value> = page["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["task_id"])
        .collect();
    assert_eq!(ids, vec![&weekly["task_id"], &every_day["task_id"]]);
    let rest = call(
        &app,
        json!({"op": "list", "principal": me, "limit": 2, "cursor": page["cursor"]}),
    )
    .await;
    assert_eq!(rest["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(rest["tasks"][0]["task_id"], once["task_id"]);
    assert_eq!(rest["cursor"], Value::Null);

    // get: instruction, next runs, explanation.
    let got = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": every_day["task_id"]}),
    )
    .await;
    assert_eq!(got["task"]["instruction"], "Remind me: Stretch.");
    let next: Vec<&str> = got["task"]["next_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(next.len(), 5);
    assert_eq!(got["task"]["next_run_at"], next[0]);
    assert!(
        got["task"]["explanation"]
            .as_str()
            .unwrap()
            .starts_with("runs every day at 19:00 Europe/Berlin; next at"),
        "{got}"
    );

    // update: 7pm to 8pm, the schedule follows without residue.
    let moved = call(
        &app,
        op(
            "update",
            &me,
            &every_day,
            json!({"idempotency_key": "u1", "input": daily("20:00", "Europe/Berlin")}),
        ),
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    assert_eq!(moved["task"]["version"], 2);
    assert_eq!(schedule_of(&t, &every_day).await.unwrap().0, "cron(0 20 * * ? *)");
    let new_at = (Utc::now() + Duration::hours(5)).to_rfc3339();
    let to_once = call(
        &app,
        op(
            "update",
            &me,
            &moved["task"],
            json!({"idempotency_key": "u2", "input": {"at": new_at, "title": "Stretch once"}}),
        ),
    )
    .await;
    assert_eq!(to_once["task"]["title"], "Stretch once");
    assert!(schedule_of(&t, &every_day).await.unwrap().0.starts_with("at("));
    // (UpdateSchedule also sets ActionAfterCompletion to DELETE; moto keeps
    // the created value: infra/FIDELITY.md.)
    assert_eq!(t.schedule_names().await.len(), 3, "one schedule per reminder");

    // pause, resume, cancel keep the schedule in step.
    let paused = call(&app, op("pause", &me, &weekly, json!({}))).await;
    assert_eq!(paused["task"]["state"], "paused");
    assert_eq!(paused["task"]["next_run_at"], Value::Null);
    assert_eq!(schedule_of(&t, &weekly).await.unwrap().2, "DISABLED");
    let resumed = call(&app, op("resume", &me, &paused["task"], json!({}))).await;
    assert_eq!(resumed["task"]["state"], "scheduled");
    assert_eq!(schedule_of(&t, &weekly).await.unwrap().2, "ENABLED");
    let cancelled = call(&app, op("cancel", &me, &resumed["task"], json!({}))).await;
    assert_eq!(cancelled["task"]["state"], "deleted");
    assert_eq!(schedule_of(&t, &weekly).await, None, "cancel removes the schedule");
    let item = t
        .item_at(Key::task("ws_1", weekly["task_id"].as_str().unwrap()))
        .await
        .unwrap();
    assert_eq!(item["override"]["deleted"], true);
    assert_eq!(item["override"]["by"], "usr_1");

    let listed = call(&app, json!({"op": "list", "principal": me})).await;
    assert_eq!(
        listed["tasks"].as_array().unwrap().len(),
        2,
        "a cancelled reminder is not listed"
    );
    let deleted = call(&app, json!({"op": "list", "principal": me, "state": "deleted"})).await;
    assert_eq!(deleted["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(deleted["tasks"][0]["task_id"], weekly["task_id"]);
    let got = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": weekly["task_id"]}),
    )
    .await;
    assert!(
        got["task"]["explanation"]
            .as_str()
            .unwrap()
            .starts_with("never runs: cancelled by you")
    );
    let again = call(&app, op("resume", &me, &cancelled["task"], json!({}))).await;
    assert_eq!(code(&again), "invalid_request", "a cancelled reminder stays cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_error_has_its_code_and_leaves_no_residue() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let cases = [
        (
            schedules_create(&me, "a", "x", daily("7:00", "UTC")),
            "invalid_schedule",
        ),
        (
            schedules_create(&me, "a", "x", daily("19:00", "Nowhere/City")),
            "invalid_schedule",
        ),
        (
            schedules_create(
                &me,
                "a",
                "x",
                json!({"weekly": {"days": ["MON", "MON"], "time": "19:00", "timezone": "UTC"}}),
            ),
            "invalid_schedule",
        ),
        (
            schedules_create(
                &me,
                "a",
                "x",
                json!({"weekly": {"days": [], "time": "19:00", "timezone": "UTC"}}),
            ),
            "invalid_schedule",
        ),
        (
            schedules_create(&me, "a", "x", json!({"at": "2026-12-24T19:00:00"})),
            "naive_instant",
        ),
        (
            schedules_create(&me, "a", "x", json!({"at": "soon"})),
            "invalid_instant",
        ),
        (
            schedules_create(&me, "a", "x", json!({"at": "2020-01-01T00:00:00Z"})),
            "instant_in_past",
        ),
        (
            schedules_create(&me, "a", "x", at_in(Duration::days(400))),
            "instant_too_far",
        ),
        (schedules_create(&me, "a", "x", json!({})), "invalid_request"),
        (
            schedules_create(
                &me,
                "a",
                "x",
                json!({"at": "2030-01-01T00:00:00Z", "daily": {"time": "10:00", "timezone": "UTC"}}),
            ),
            "invalid_request",
        ),
        (
            schedules_create(&me, "a", &"x".repeat(201), at_in(Duration::hours(1))),
            "invalid_request",
        ),
        (
            schedules_create(
                &json!({"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.read"]}),
                "a",
                "x",
                at_in(Duration::hours(1)),
            ),
            "forbidden",
        ),
        (
            schedules_create(
                &json!({"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.*"]}),
                "a",
                "x",
                at_in(Duration::hours(1)),
            ),
            "forbidden",
        ),
        (
            json!({"op": "list", "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.write"]}}),
            "forbidden",
        ),
        (
            json!({"op": "list", "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": ["*"]}}),
            "forbidden",
        ),
        (json!({"op": "list", "principal": me, "limit": 0}), "invalid_request"),
        (json!({"op": "list", "principal": me, "limit": 101}), "invalid_request"),
        (
            json!({"op": "list", "principal": me, "state": "sleeping"}),
            "invalid_request",
        ),
        (
            json!({"op": "list", "principal": me, "cursor": "not-a-cursor"}),
            "invalid_request",
        ),
        (
            json!({"op": "list", "principal": {"id": "usr#1", "workspace": "ws_1", "scopes": ["schedule.read"]}}),
            "invalid_request",
        ),
        (
            json!({"op": "get", "principal": me, "task_id": "rem_0123456789abcdef0123456789abcdef"}),
            "not_found",
        ),
        (json!({"op": "get", "principal": me, "task_id": "garbage"}), "not_found"),
        (json!({"op": "explode", "principal": me}), "invalid_request"),
        (
            json!({"op": "pause", "principal": me, "task_id": "rem_0123456789abcdef0123456789abcdef", "expected_version": 1}),
            "not_found",
        ),
    ];
    for (request, want) in cases {
        let answer = call(&app, request.clone()).await;
        assert_eq!(code(&answer), want, "{request} -> {answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
        t.assert_untouched(want).await;
    }

    // Flags: reads need the API flag, writes both.
    for (api, worker, read, write) in [
        (false, true, "feature_disabled", "feature_disabled"),
        (true, false, "ok", "feature_disabled"),
    ] {
        let off = t.schedules_app_with(
            Flags {
                api_enabled: api,
                worker_enabled: worker,
            },
            50,
        );
        assert_eq!(code(&call(&off, json!({"op": "list", "principal": me})).await), read);
        let created = call(&off, schedules_create(&me, "f", "x", at_in(Duration::hours(1)))).await;
        assert_eq!(code(&created), write);
        t.assert_untouched("flags").await;
    }

    // Version conflicts and instants on a reminder that exists.
    let task = create(&app, &me, "k1", "Call mom", at_in(Duration::hours(1))).await;
    let before = t.items().await;
    let stale = json!({"expected_version": 7});
    for name in ["pause", "resume", "cancel"] {
        let mut request = op(name, &me, &task, json!({}));
        request["expected_version"] = stale["expected_version"].clone();
        assert_eq!(code(&call(&app, request).await), "version_conflict", "{name}");
    }
    let mut update = op(
        "update",
        &me,
        &task,
        json!({"idempotency_key": "u", "input": {"title": "x"}}),
    );
    update["expected_version"] = json!(7);
    assert_eq!(code(&call(&app, update).await), "version_conflict");
    for (input, want) in [
        (json!({"at": "2020-01-01T00:00:00Z"}), "instant_in_past"),
        (
            json!({"daily": {"time": "19:00", "timezone": "Utc/Nowhere"}}),
            "invalid_schedule",
        ),
        (json!({"title": "\u{202E}evil"}), "invalid_request"),
        (json!({}), "invalid_request"),
    ] {
        let request = op("update", &me, &task, json!({"idempotency_key": "u", "input": input}));
        assert_eq!(code(&call(&app, request).await), want);
    }
    assert_eq!(t.items().await, before, "refused updates change nothing");
    assert_eq!(schedule_of(&t, &task).await.unwrap().0, {
        let at: DateTime<Utc> = task["schedule"]["at"].as_str().unwrap().parse().unwrap();
        format!("at({})", at.format("%Y-%m-%dT%H:%M:%S"))
    });

    // A one-time reminder paused past its time cannot be resumed.
    let paused = call(&app, op("pause", &me, &task, json!({}))).await;
    let later = Utc::now() + Duration::hours(2);
    let resumed = call_at(&app, op("resume", &me, &paused["task"], json!({})), later).await;
    assert_eq!(code(&resumed), "instant_in_past");
    let got = call_at(
        &app,
        json!({"op": "get", "principal": me, "task_id": task["task_id"]}),
        later,
    )
    .await;
    assert_eq!(got["task"]["state"], "paused");
    assert!(got["task"]["explanation"].as_str().unwrap().contains("has passed"));
    assert_eq!(schedule_of(&t, &task).await.unwrap().2, "DISABLED");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_principal_sees_only_its_own_reminders() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let mine = create(&app, &owner("usr_1"), "k", "Mine", at_in(Duration::hours(1))).await;
    let theirs = create(&app, &owner("usr_2"), "k", "Theirs", at_in(Duration::hours(1))).await;
    // Idempotency keys are scoped per principal id (SPEC §3: `IDEM#<principal>`).
    let elsewhere = create(
        &app,
        &owner_in("usr_1", "ws_2"),
        "k-ws2",
        "Elsewhere",
        at_in(Duration::hours(1)),
    )
    .await;
    // A connector task of the same workspace.
    let connector = tests::connector_task("issues", "weekly", &[], &[]);
    t.admin_store().insert_task(&connector).await.unwrap();

    let me = owner("usr_1");
    let listed = call(&app, json!({"op": "list", "principal": me})).await;
    let ids: Vec<&Value> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["task_id"])
        .collect();
    assert_eq!(ids, vec![&mine["task_id"]]);
    for other in [&theirs["task_id"], &elsewhere["task_id"], &json!(connector.task_id)] {
        for name in ["get", "runs"] {
            let answer = call(&app, json!({"op": name, "principal": me, "task_id": other})).await;
            assert_eq!(code(&answer), "not_found", "{name} {other}");
        }
        for name in ["pause", "resume", "cancel"] {
            let answer = call(
                &app,
                json!({"op": name, "principal": me, "task_id": other, "expected_version": 1}),
            )
            .await;
            assert_eq!(code(&answer), "not_found", "{name} {other}");
        }
        let update = json!({"op": "update", "principal": me, "task_id": other, "expected_version": 1,
                            "idempotency_key": format!("u-{other}"), "input": {"title": "mine now"}});
        assert_eq!(code(&call(&app, update).await), "not_found");
    }
    // The same message whether the task exists elsewhere or not at all.
    let a = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": theirs["task_id"]}),
    )
    .await;
    let b = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": "rem_0123456789abcdef0123456789abcdef"}),
    )
    .await;
    assert_eq!(
        a["error"]["message"]
            .as_str()
            .unwrap()
            .replace(theirs["task_id"].as_str().unwrap(), "X"),
        b["error"]["message"]
            .as_str()
            .unwrap()
            .replace("rem_0123456789abcdef0123456789abcdef", "X")
    );
    // Another principal's cursor lists nothing of theirs.
    let two_page = create(&app, &owner("usr_2"), "k2", "Theirs 2", at_in(Duration::hours(1))).await;
    let page = call(&app, json!({"op": "list", "principal": owner("usr_2"), "limit": 1})).await;
    assert_eq!(page["tasks"][0]["task_id"], two_page["task_id"]);
    let stolen = call(&app, json!({"op": "list", "principal": me, "cursor": page["cursor"]})).await;
    assert!(
        stolen["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["title"] != "Theirs"),
        "{stolen}"
    );
    // Nothing of the others changed.
    let theirs_now = call(
        &app,
        json!({"op": "get", "principal": owner("usr_2"), "task_id": theirs["task_id"]}),
    )
    .await;
    assert_eq!(theirs_now["task"]["version"], 1);
    assert_eq!(theirs_now["task"]["title"], "Theirs");
}

#[tokio::test(flavor = "multi_thread")]
async fn creates_and_updates_replay_and_a_key_with_another_input_conflicts() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let request = schedules_create(&me, "k", "Stretch", daily("07:00", "Asia/Tokyo"));
    let first = call(&app, request.clone()).await;
    let again = call(&app, request.clone()).await;
    assert_eq!(
        (first["replayed"].clone(), again["replayed"].clone()),
        (json!(false), json!(true))
    );
    assert_eq!(first["task"]["task_id"], again["task"]["task_id"]);
    let other = call(
        &app,
        schedules_create(&me, "k", "Stretch", daily("08:00", "Asia/Tokyo")),
    )
    .await;
    assert_eq!(code(&other), "idempotency_conflict");
    assert_eq!(t.items_of("task").await.len(), 1);
    assert_eq!(t.schedule_names().await.len(), 1);

    let update = op(
        "update",
        &me,
        &first["task"],
        json!({"idempotency_key": "u", "input": {"title": "Stretch more"}}),
    );
    let updated = call(&app, update.clone()).await;
    assert_eq!(
        (updated["replayed"].clone(), updated["task"]["version"].clone()),
        (json!(false), json!(2))
    );
    let replayed = call(&app, update.clone()).await;
    assert_eq!(replayed["replayed"], true, "{replayed}");
    assert_eq!(replayed["task"]["version"], 2, "applied once");
    let mut changed = update.clone();
    changed["input"]["title"] = json!("Stretch less");
    assert_eq!(code(&call(&app, changed).await), "idempotency_conflict");
    let mut reused = op(
        "update",
        &me,
        &updated["task"],
        json!({"idempotency_key": "k", "input": {"title": "y"}}),
    );
    reused["idempotency_key"] = json!("k");
    assert_eq!(
        code(&call(&app, reused).await),
        "idempotency_conflict",
        "a create's key is taken"
    );
    let got = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": first["task"]["task_id"]}),
    )
    .await;
    assert_eq!(
        (got["task"]["title"].clone(), got["task"]["version"].clone()),
        (json!("Stretch more"), json!(2))
    );
}

/// A run-now key answers what it answered first, whatever the reminder
/// became since (SPEC §11): here it was moved from daily to one time, for
/// which a new key is refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_run_now_answers_the_same_after_the_reminder_became_one_time() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let task = create(&app, &me, "k-daily", "Stand-up", daily("09:00", "UTC")).await;
    let first = call(&app, op("run_now", &me, &task, json!({"idempotency_key": "now-1"}))).await;
    assert_eq!(first["ok"], true, "{first}");
    let moved = call(
        &app,
        op(
            "update",
            &me,
            &first["task"],
            json!({"idempotency_key": "move-1", "input": at_in(Duration::days(3))}),
        ),
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    let again = call(&app, op("run_now", &me, &task, json!({"idempotency_key": "now-1"}))).await;
    assert_eq!(again["ok"], true, "the first answer, replayed: {again}");
    assert_eq!(again["run_id"], first["run_id"]);
    assert_eq!(again["replayed"], true);
    let fresh = call(
        &app,
        op("run_now", &me, &moved["task"], json!({"idempotency_key": "now-2"})),
    )
    .await;
    assert_eq!(code(&fresh), "invalid_request", "{fresh}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_cap_holds_under_concurrent_creates_and_frees_a_place_on_cancel() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app_with(ENABLED, 3);
    let me = owner("usr_1");
    // One made by the model's tool counts too.
    let tool = t
        .create_app()
        .handle(
            {
                let mut r = tests::create_request("tool", Utc::now(), Duration::hours(1));
                r["principal"] = json!({"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.write"]});
                r
            },
            Utc::now(),
        )
        .await
        .unwrap()
        .to_json();
    assert_eq!(tool["ok"], true, "{tool}");
    let racers = (0..6).map(|i| {
        let app = &app;
        let me = &me;
        async move {
            call(
                app,
                schedules_create(me, &format!("r{i}"), "race", at_in(Duration::hours(1))),
            )
            .await
        }
    });
    let answers = futures::future::join_all(racers).await;
    let codes: Vec<String> = answers.iter().map(code).collect();
    assert_eq!(codes.iter().filter(|c| *c == "ok").count(), 2, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| *c == "too_many_active").count(), 4, "{codes:?}");
    assert_eq!(t.items_of("task").await.len(), 3);
    assert_eq!(t.schedule_names().await.len(), 3, "a refused racer leaves no schedule");

    // Paused ones count; a cancelled one frees its place.
    let winner = answers.iter().find(|a| a["ok"] == true).unwrap()["task"].clone();
    let paused = call(&app, op("pause", &me, &winner, json!({}))).await;
    assert_eq!(
        code(&call(&app, schedules_create(&me, "p", "x", at_in(Duration::hours(1)))).await),
        "too_many_active"
    );
    call(&app, op("cancel", &me, &paused["task"], json!({}))).await;
    let fourth = call(&app, schedules_create(&me, "c", "x", daily("09:00", "UTC"))).await;
    assert_eq!(fourth["ok"], true, "{fourth}");
    // Another principal has places of their own.
    let other = call(
        &app,
        schedules_create(&owner("usr_2"), "o", "x", at_in(Duration::hours(1))),
    )
    .await;
    assert_eq!(other["ok"], true);
}

/// Delivers every occurrence of a task's schedule in (from, to], as
/// Scheduler would fire its stored expression, each twice (a redelivery),
/// at its scheduled time plus a few seconds.
async fn fire_between(s: &RunStack, task_id: &str, from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<DateTime<Utc>> {
    let schedule = s.t.schedule(task_id).await;
    let expression = Expression {
        expression: schedule.schedule_expression().unwrap().to_owned(),
        timezone: schedule.schedule_expression_timezone().unwrap().to_owned(),
        end_date: schedule.end_date().and_then(|e| DateTime::from_timestamp(e.secs(), 0)),
    };
    let mut fires: Vec<DateTime<Utc>> = Vec::new();
    while let Some(at) = next_cron_fire(&expression, fires.last().copied().unwrap_or(from)).unwrap() {
        if at > to {
            break;
        }
        fires.push(at);
    }
    let runner = s.runner();
    let id = TaskId::parse(task_id).unwrap();
    let task = s.store();
    let task = shared::ports::TaskStore::task(&task, "ws_1", &id)
        .await
        .unwrap()
        .unwrap();
    for at in &fires {
        for attempt in ["a", "b"] {
            let got = runner
                .deliver(
                    &format!("m-{at}-{attempt}"),
                    &tests::run_message(&task, *at, &format!("e-{at}-{attempt}")),
                    *at + Duration::seconds(3),
                    Utc::now() + Duration::minutes(5),
                )
                .await
                .unwrap();
            let want = if attempt == "a" {
                Disposition::Ran(RunStatus::Succeeded)
            } else {
                Disposition::Duplicate
            };
            assert_eq!(got, want, "{at} {attempt}");
        }
    }
    fires
}

fn utc(y: i32, m: u32, d: u32, h: u32, min: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, m, d, h, min, 0).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daily_reminder_runs_every_occurrence_once_across_dst_changes() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    // New York springs forward on 2027-03-14 (02:30 does not exist) and
    // falls back on 2027-11-07 (01:30 happens twice).
    let gap = create(&app, &me, "gap", "Night pill", daily("02:30", "America/New_York")).await;
    let twice = create(&app, &me, "twice", "Late call", daily("01:30", "America/New_York")).await;
    let gap_id = gap["task_id"].as_str().unwrap();
    let twice_id = twice["task_id"].as_str().unwrap();

    let explained = call_at(
        &app,
        json!({"op": "get", "principal": me, "task_id": gap_id}),
        utc(2027, 3, 10, 0, 0),
    )
    .await;
    let words = explained["task"]["explanation"].as_str().unwrap();
    assert!(
        words.contains("on 2027-03-14, 02:30 does not exist in America/New_York"),
        "{words}"
    );
    let next: Vec<&str> = explained["task"]["next_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(
        next,
        vec![
            "2027-03-10T07:30:00Z",
            "2027-03-11T07:30:00Z",
            "2027-03-12T07:30:00Z",
            "2027-03-13T07:30:00Z",
            "2027-03-15T06:30:00Z"
        ],
        "the skipped day has no run"
    );
    let explained = call_at(
        &app,
        json!({"op": "get", "principal": me, "task_id": twice_id}),
        utc(2027, 11, 1, 0, 0),
    )
    .await;
    assert!(
        explained["task"]["explanation"]
            .as_str()
            .unwrap()
            .contains("on 2027-11-07, 01:30 happens twice"),
        "{explained}"
    );

    for _ in 0..8 {
        s.model.script([Reply::text("Time for it!", 100, 10)]).await;
    }
    let fired = fire_between(&s, gap_id, utc(2027, 3, 12, 0, 0), utc(2027, 3, 16, 0, 0)).await;
    assert_eq!(
        fired,
        vec![
            utc(2027, 3, 12, 7, 30),
            utc(2027, 3, 13, 7, 30),
            utc(2027, 3, 15, 6, 30)
        ],
        "no run on the day 02:30 does not exist"
    );
    let fired = fire_between(&s, twice_id, utc(2027, 11, 6, 0, 0), utc(2027, 11, 9, 0, 0)).await;
    assert_eq!(
        fired,
        vec![
            utc(2027, 11, 6, 5, 30),
            utc(2027, 11, 7, 5, 30),
            utc(2027, 11, 8, 6, 30)
        ],
        "once on the day 01:30 happens twice, at the first"
    );

    // Still scheduled: a recurring reminder is never completed by a run.
    let got = call_at(
        &app,
        json!({"op": "get", "principal": me, "task_id": gap_id}),
        utc(2027, 3, 16, 0, 0),
    )
    .await;
    assert_eq!(got["task"]["state"], "scheduled");
    assert_eq!(got["task"]["next_run_at"], "2027-03-16T06:30:00Z");

    // Run history, newest first, from the run records; charged to the principal.
    let runs = call(&app, json!({"op": "runs", "principal": me, "task_id": gap_id})).await;
    let times: Vec<&str> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["scheduled_time"].as_str().unwrap())
        .collect();
    assert_eq!(
        times,
        vec!["2027-03-15T06:30:00Z", "2027-03-13T07:30:00Z", "2027-03-12T07:30:00Z"]
    );
    assert!(
        runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["status"] == "succeeded")
    );
    let one = call(
        &app,
        json!({"op": "runs", "principal": me, "task_id": gap_id, "limit": 1}),
    )
    .await;
    assert_eq!(one["runs"].as_array().unwrap().len(), 1);
    assert_eq!(
        code(
            &call(
                &app,
                json!({"op": "runs", "principal": me, "task_id": gap_id, "limit": 51})
            )
            .await
        ),
        "invalid_request"
    );
    let march = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_1"),
            "2027-03",
        )
        .await
        .unwrap();
    assert_eq!(march["runs"], 3);
    let november = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_1"),
            "2027-11",
        )
        .await
        .unwrap();
    assert_eq!(november["runs"], 3);

    // A paused run is skipped at the door, and the history says why in words.
    let current = call(&app, json!({"op": "get", "principal": me, "task_id": gap_id})).await;
    let paused = call(&app, op("pause", &me, &current["task"], json!({}))).await;
    assert_eq!(paused["task"]["state"], "paused");
    let task = shared::ports::TaskStore::task(&s.store(), "ws_1", &TaskId::parse(gap_id).unwrap())
        .await
        .unwrap()
        .unwrap();
    let at = utc(2027, 3, 16, 6, 30);
    let got = s
        .runner()
        .deliver(
            "m-paused",
            &tests::run_message(&task, at, "e-p"),
            at + Duration::seconds(2),
            Utc::now() + Duration::minutes(5),
        )
        .await
        .unwrap();
    assert!(matches!(got, Disposition::Skipped(_)), "{got:?}");
    let runs = call(&app, json!({"op": "runs", "principal": me, "task_id": gap_id})).await;
    assert_eq!(runs["runs"][0]["status"], "skipped");
    assert_eq!(runs["runs"][0]["reason"], "paused");
    assert_eq!(runs["runs"][0]["explanation"], "skipped: it was paused");

    // The admin reads any task's runs in the workspace, newest first.
    let admin =
        s.t.admin()
            .handle(
                json!({"op": "runs", "principal": tests::admin_principal(), "task_id": gap_id}),
                Utc::now(),
            )
            .await
            .unwrap();
    assert_eq!(admin["runs"].as_array().unwrap().len(), 4, "{admin}");
    assert_eq!(admin["runs"][0]["status"], "skipped");
    let foreign = s
        .t
        .admin()
        .handle(json!({"op": "runs", "principal": {"id": "adm_2", "workspace": "ws_2", "scopes": ["schedule.admin"]}, "task_id": gap_id}), Utc::now())
        .await
        .unwrap();
    assert_eq!(code(&foreign), "forbidden");
}

/// (operation, ActionAfterCompletion) of one Scheduler request.
type Seen = (&'static str, Option<String>);

/// (operation, expression, EndDate in Unix seconds) of one Scheduler request.
type SeenEnd = (&'static str, String, Option<i64>);

/// The Scheduler requests a client sends.
#[derive(Debug, Default, Clone)]
struct SeenRequests(
    std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
    std::sync::Arc<std::sync::Mutex<Vec<SeenEnd>>>,
);

impl aws_sdk_scheduler::config::Intercept for SeenRequests {
    fn name(&self) -> &'static str {
        "SeenRequests"
    }

    fn read_before_execution(
        &self,
        context: &aws_sdk_scheduler::config::interceptors::BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut aws_sdk_scheduler::config::ConfigBag,
    ) -> Result<(), aws_sdk_scheduler::error::BoxError> {
        use aws_sdk_scheduler::operation::create_schedule::CreateScheduleInput;
        use aws_sdk_scheduler::operation::update_schedule::UpdateScheduleInput;
        let input = context.input();
        let seen = if let Some(create) = input.downcast_ref::<CreateScheduleInput>() {
            Some((
                (
                    "create",
                    create.action_after_completion().map(|a| a.as_str().to_owned()),
                ),
                (
                    "create",
                    create.schedule_expression().unwrap_or_default().to_owned(),
                    create.end_date().map(|e| e.secs()),
                ),
            ))
        } else {
            input.downcast_ref::<UpdateScheduleInput>().map(|update| {
                (
                    (
                        "update",
                        update.action_after_completion().map(|a| a.as_str().to_owned()),
                    ),
                    (
                        "update",
                        update.schedule_expression().unwrap_or_default().to_owned(),
                        update.end_date().map(|e| e.secs()),
                    ),
                )
            })
        };
        if let (Some((seen, end)), Ok(mut all), Ok(mut ends)) = (seen, self.0.lock(), self.1.lock()) {
            all.push(seen);
            ends.push(end);
        }
        Ok(())
    }
}

/// The schedules app on a Scheduler client that records its requests.
fn app_seeing(t: &TestStack, seen: &SeenRequests) -> schedules::App {
    let client = aws_sdk_scheduler::Client::from_conf(
        aws_sdk_scheduler::config::Builder::from(&t.aws.sdk)
            .interceptor(seen.clone())
            .build(),
    );
    let config = t.create_config(ENABLED);
    schedules::App(shared::app::schedules::OwnerSchedules::new(
        t.admin_store(),
        shared::adapters::scheduler::EventBridgeSchedules::new(client, config.target),
        t.runs_queue(),
        shared::app::schedules::SchedulesSettings {
            create: shared::app::create::CreateSettings {
                flags: config.flags,
                ceilings: config.ceilings,
            },
            max_active: 50,
            retention: chrono::Duration::days(90),
        },
    ))
}

/// moto keeps a schedule's ActionAfterCompletion from its creation
/// (infra/FIDELITY.md); Scheduler takes it from every update. The request
/// is pinned here: a move between one-time and recurring sends the new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_move_between_one_time_and_recurring_sends_the_new_action_after_completion() {
    let t = TestStack::start().await.unwrap();
    let seen = SeenRequests::default();
    let app = app_seeing(&t, &seen);
    let me = owner("usr_1");
    let created = app
        .handle(schedules_create(&me, "k", "Stretch", daily("07:00", "UTC")), Utc::now())
        .await
        .unwrap();
    let once = app
        .handle(
            op(
                "update",
                &me,
                &created["task"],
                json!({"idempotency_key": "u1", "input": at_in(Duration::hours(3))}),
            ),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(once["ok"], true, "{once}");
    let back = app
        .handle(
            op(
                "update",
                &me,
                &once["task"],
                json!({"idempotency_key": "u2", "input": daily("08:00", "UTC")}),
            ),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(back["ok"], true, "{back}");
    let requests = seen.0.lock().unwrap().clone();
    let some = |a: &str| Some(a.to_owned());
    // An update first tries CreateSchedule, which conflicts, then updates.
    assert_eq!(
        requests,
        vec![
            ("create", some("NONE")),
            ("create", some("DELETE")),
            ("update", some("DELETE")),
            ("create", some("NONE")),
            ("update", some("NONE")),
        ]
    );
}

fn next_runs(answer: &Value) -> Vec<String> {
    answer["task"]["next_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect()
}

/// Monthly on the 31st and on the first Monday, yearly on 29 February:
/// one Scheduler expression each (`L`/`#` where needed), next runs that
/// skip the months without the day, an explanation that names the next
/// such month, and the runner running exactly those occurrences.
#[tokio::test(flavor = "multi_thread")]
async fn monthly_and_yearly_reminders_run_on_their_days_and_name_the_months_without_them() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let on_31st = create(
        &app,
        &me,
        "m31",
        "Pay rent",
        json!({"monthly": {"day": 31, "time": "09:00", "timezone": "Europe/Berlin"}}),
    )
    .await;
    let first_monday = create(
        &app,
        &me,
        "m1",
        "Team lunch",
        json!({"monthly": {"weekday": "MON", "nth": 1, "time": "12:30", "timezone": "America/New_York"}}),
    )
    .await;
    let last_friday = create(
        &app,
        &me,
        "mlast",
        "Timesheet",
        json!({"monthly": {"weekday": "FRI", "nth": "last", "time": "16:00", "timezone": "UTC"}}),
    )
    .await;
    let leap_day = create(
        &app,
        &me,
        "y29",
        "Leap birthday",
        json!({"yearly": {"month": 2, "day": 29, "time": "08:00", "timezone": "UTC"}}),
    )
    .await;
    assert_eq!(
        on_31st["schedule"],
        json!({"monthly": {"day": 31, "time": "09:00", "timezone": "Europe/Berlin"}})
    );
    assert_eq!(
        last_friday["schedule"],
        json!({"monthly": {"weekday": "FRI", "nth": "last", "time": "16:00", "timezone": "UTC"}})
    );
    for (task, want) in [
        (&on_31st, "cron(0 9 31 * ? *)"),
        (&first_monday, "cron(30 12 ? * 2#1 *)"),
        (&last_friday, "cron(0 16 ? * 6L *)"),
        (&leap_day, "cron(0 8 29 2 ? *)"),
    ] {
        let (expression, _, state) = schedule_of(&s.t, task).await.unwrap();
        assert_eq!((expression.as_str(), state.as_str()), (want, "ENABLED"));
    }

    let get = |task: &Value, now| {
        call_at(
            &app,
            json!({"op": "get", "principal": me, "task_id": task["task_id"]}),
            now,
        )
    };
    let rent = get(&on_31st, utc(2027, 1, 10, 0, 0)).await;
    assert_eq!(
        next_runs(&rent),
        vec![
            "2027-01-31T08:00:00Z",
            "2027-03-31T07:00:00Z",
            "2027-05-31T07:00:00Z",
            "2027-07-31T07:00:00Z",
            "2027-08-31T07:00:00Z"
        ],
        "February, April and June have no 31st; Berlin is on summer time from March"
    );
    let words = rent["task"]["explanation"].as_str().unwrap();
    assert!(
        words.contains("on day 31 of every month at 09:00 Europe/Berlin")
            && words.contains("February 2027 has no day 31: that month's reminder is skipped"),
        "{words}"
    );
    let lunch = get(&first_monday, utc(2027, 1, 10, 0, 0)).await;
    assert_eq!(
        next_runs(&lunch)[..3],
        ["2027-02-01T17:30:00Z", "2027-03-01T17:30:00Z", "2027-04-05T16:30:00Z"]
    );
    assert!(
        lunch["task"]["explanation"]
            .as_str()
            .unwrap()
            .contains("on the first Monday of every month at 12:30 America/New_York")
    );
    let birthday = get(&leap_day, utc(2027, 1, 10, 0, 0)).await;
    assert_eq!(
        next_runs(&birthday)[..3],
        ["2028-02-29T08:00:00Z", "2032-02-29T08:00:00Z", "2036-02-29T08:00:00Z"]
    );
    let words = birthday["task"]["explanation"].as_str().unwrap();
    assert!(
        words.contains("every year on 29 February at 08:00 UTC")
            && words.contains("February 2027 has no day 29: that month's reminder is skipped"),
        "{words}"
    );

    for _ in 0..12 {
        s.model.script([Reply::text("Time for it!", 100, 10)]).await;
    }
    let fired = fire_between(
        &s,
        on_31st["task_id"].as_str().unwrap(),
        utc(2027, 1, 1, 0, 0),
        utc(2027, 7, 1, 0, 0),
    )
    .await;
    assert_eq!(
        fired,
        vec![utc(2027, 1, 31, 8, 0), utc(2027, 3, 31, 7, 0), utc(2027, 5, 31, 7, 0)]
    );
    let fired = fire_between(
        &s,
        leap_day["task_id"].as_str().unwrap(),
        utc(2027, 1, 1, 0, 0),
        utc(2029, 1, 1, 0, 0),
    )
    .await;
    assert_eq!(fired, vec![utc(2028, 2, 29, 8, 0)]);
    // A day the schedule does not name is not one of its occurrences.
    let task = shared::ports::TaskStore::task(
        &s.store(),
        "ws_1",
        &TaskId::parse(on_31st["task_id"].as_str().unwrap()).unwrap(),
    )
    .await
    .unwrap()
    .unwrap();
    let stray = runner_deliver(&s, &task, utc(2027, 4, 30, 7, 0)).await;
    assert_eq!(
        stray,
        Disposition::Skipped(shared::domain::run::door::SkipReason::Rescheduled)
    );
    let runs = call(
        &app,
        json!({"op": "runs", "principal": me, "task_id": on_31st["task_id"]}),
    )
    .await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 4, "three runs and the skip");
}

async fn runner_deliver(s: &RunStack, task: &shared::domain::task::Task, at: DateTime<Utc>) -> Disposition {
    s.runner()
        .deliver(
            &format!("m-{at}"),
            &tests::run_message(task, at, &format!("e-{at}")),
            at + Duration::seconds(3),
            Utc::now() + Duration::minutes(5),
        )
        .await
        .unwrap()
}

/// A daily reminder until a date: its Scheduler schedule carries the
/// `EndDate` (the first instant after that local day) and deletes itself
/// after its last run; the last run completes the reminder, which frees
/// its place under `MAX_ACTIVE_REMINDERS`; an update moves or removes the
/// end, in the request too.
#[tokio::test(flavor = "multi_thread")]
async fn a_daily_reminder_until_a_date_completes_after_its_last_run_and_frees_its_place() {
    let s = RunStack::start().await.unwrap();
    let seen = SeenRequests::default();
    let app = app_seeing(&s.t, &seen);
    let me = owner("usr_1");
    let today = Utc::now().date_naive();
    let until = today + Duration::days(2);
    let created = create(
        &app,
        &me,
        "until",
        "Antibiotics",
        json!({"daily": {"time": "23:30", "timezone": "UTC"}, "until": until.to_string()}),
    )
    .await;
    assert_eq!(
        created["schedule"],
        json!({"daily": {"time": "23:30", "timezone": "UTC"}, "until": until.to_string()})
    );
    let id = created["task_id"].as_str().unwrap();
    let end = shared::domain::schedule::end_of_local_day(until, "UTC");
    let stored = s.t.schedule(id).await;
    assert_eq!(stored.end_date().map(|e| e.secs()), Some(end.timestamp()));
    assert_eq!(
        stored.action_after_completion().map(|a| a.as_str()),
        Some("DELETE"),
        "it deletes itself after its last run"
    );

    // An update moves the end; `null` removes it; the requests say so.
    let moved = call(
        &app,
        op(
            "update",
            &me,
            &created,
            json!({"idempotency_key": "u1", "input": {"until": (until + Duration::days(1)).to_string()}}),
        ),
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    let endless = call(
        &app,
        op(
            "update",
            &me,
            &moved["task"],
            json!({"idempotency_key": "u2", "input": {"until": null}}),
        ),
    )
    .await;
    assert_eq!(endless["ok"], true, "{endless}");
    assert_eq!(endless["task"]["schedule"].get("until"), None);
    assert_eq!(s.t.schedule(id).await.end_date(), None);
    let back = call(
        &app,
        op(
            "update",
            &me,
            &endless["task"],
            json!({"idempotency_key": "u3", "input": {"until": until.to_string()}}),
        ),
    )
    .await;
    assert_eq!(back["ok"], true, "{back}");
    let ends: Vec<SeenEnd> = seen.1.lock().unwrap().clone();
    let moved_end = shared::domain::schedule::end_of_local_day(until + Duration::days(1), "UTC");
    let sent: Vec<Option<i64>> = ends.iter().map(|(_, _, end)| *end).collect();
    assert_eq!(
        sent,
        vec![
            Some(end.timestamp()),
            Some(moved_end.timestamp()),
            Some(moved_end.timestamp()),
            None,
            None,
            Some(end.timestamp()),
            Some(end.timestamp()),
        ],
        "every update sends the EndDate it wants, none to remove it: {ends:?}"
    );
    assert!(ends.iter().all(|(_, e, _)| e == "cron(30 23 * * ? *)"));
    let actions: Vec<Seen> = seen.0.lock().unwrap().clone();
    assert_eq!(
        actions.iter().map(|(_, a)| a.clone().unwrap()).collect::<Vec<_>>(),
        vec!["DELETE", "DELETE", "DELETE", "NONE", "NONE", "DELETE", "DELETE"]
    );

    for _ in 0..4 {
        s.model.script([Reply::text("Take it!", 100, 10)]).await;
    }
    let start = Utc::now();
    let fired = fire_between(&s, id, start, end + Duration::days(3)).await;
    let want: Vec<DateTime<Utc>> = (0..3)
        .map(|d| (today + Duration::days(d)).and_hms_opt(23, 30, 0).unwrap().and_utc())
        .filter(|at| *at > start)
        .collect();
    assert_eq!(fired, want, "every day at 23:30 up to the until date");
    assert!(*fired.last().unwrap() < end);
    let got = call(&app, json!({"op": "get", "principal": me, "task_id": id})).await;
    assert_eq!(got["task"]["state"], "completed", "{got}");
    assert_eq!(got["task"]["next_run_at"], Value::Null);
    assert!(
        got["task"]["explanation"]
            .as_str()
            .unwrap()
            .contains(&format!("it ran until {until}, its last day")),
        "{got}"
    );
    // Scheduler deletes the schedule after its last delivery (the local
    // dispatcher does it as Scheduler does); no writer puts it back.
    let task = shared::ports::TaskStore::task(&s.store(), "ws_1", &TaskId::parse(id).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert!(
        shared::domain::run::definition::ScheduleDefinition::for_task(&task)
            .unwrap()
            .retired
    );
    let item = s.t.item_at(Key::task("ws_1", id)).await.unwrap();
    assert!(item["ttl"].as_i64().is_some(), "a finished reminder expires");
    assert_eq!(item.get("gsi3pk"), None, "it left the schedulable index");

    // Its place is free: a principal at the cap can create one more.
    let capped = s.t.schedules_app_with(ENABLED, 1);
    let another = call(&capped, schedules_create(&me, "next", "x", daily("09:00", "UTC"))).await;
    assert_eq!(another["ok"], true, "{another}");
    // An until that leaves no run is refused, and leaves nothing behind.
    let none_left = call(
        &app,
        schedules_create(
            &me,
            "past",
            "x",
            json!({"daily": {"time": "09:00", "timezone": "UTC"}, "until": "2026-01-01"}),
        ),
    )
    .await;
    assert_eq!(code(&none_left), "invalid_schedule");
}

async fn task_of(s: &RunStack, task: &Value) -> shared::domain::task::Task {
    shared::ports::TaskStore::task(
        &s.store(),
        "ws_1",
        &TaskId::parse(task["task_id"].as_str().unwrap()).unwrap(),
    )
    .await
    .unwrap()
    .unwrap()
}

async fn get_at(app: &schedules::App, me: &Value, task: &Value, now: DateTime<Utc>) -> Value {
    call_at(
        app,
        json!({"op": "get", "principal": me, "task_id": task["task_id"]}),
        now,
    )
    .await["task"]
        .clone()
}

/// Skip next and unskip (SPEC §11): exactly the next occurrence is
/// recorded `skipped` with the reason in words and the one after runs; an
/// unskip before it comes takes it back; asking twice changes nothing; a
/// one-time reminder has no next one to skip.
#[tokio::test(flavor = "multi_thread")]
async fn skip_next_skips_exactly_the_next_occurrence_and_unskip_takes_it_back() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let daily = create(&app, &me, "d", "Stretch", daily("07:00", "UTC")).await;
    let now = utc(2027, 5, 3, 12, 0);
    let skipped = call_at(&app, op("skip_next", &me, &daily, json!({})), now).await;
    assert_eq!(skipped["ok"], true, "{skipped}");
    assert_eq!(skipped["task"]["version"], 2);
    assert_eq!(
        skipped["task"]["next_run_at"], "2027-05-05T07:00:00Z",
        "the 4th is skipped: the 5th is next"
    );
    let again = call_at(&app, op("skip_next", &me, &skipped["task"], json!({})), now).await;
    assert_eq!(again["task"]["version"], 2, "the same next one: nothing changes");
    let got = get_at(&app, &me, &daily, now).await;
    assert_eq!(got["next_runs"][0], "2027-05-05T07:00:00Z");
    assert!(
        got["explanation"]
            .as_str()
            .unwrap()
            .contains("the run at 2027-05-04T07:00:00Z is skipped (you skipped it)"),
        "{got}"
    );

    s.model.script([Reply::text("Stretch!", 100, 10)]).await;
    let task = task_of(&s, &daily).await;
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 5, 4, 7, 0)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::SkippedByOwner)
    );
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 5, 5, 7, 0)).await,
        Disposition::Ran(RunStatus::Succeeded),
        "the one after runs"
    );
    let runs = call(
        &app,
        json!({"op": "runs", "principal": me, "task_id": daily["task_id"]}),
    )
    .await;
    assert_eq!(runs["runs"][1]["scheduled_time"], "2027-05-04T07:00:00Z");
    assert_eq!(runs["runs"][1]["status"], "skipped");
    assert_eq!(runs["runs"][1]["reason"], "skipped by its owner");
    assert_eq!(
        runs["runs"][1]["explanation"],
        "skipped: its owner skipped this one; the next one runs"
    );
    assert!(
        s.events().await.iter().all(|e| e["detail"]["status"] != "skipped"),
        "a skip sends no event"
    );

    // Unskip before it comes: it runs.
    let later = utc(2027, 5, 5, 12, 0);
    let current = get_at(&app, &me, &daily, later).await;
    let skipped = call_at(&app, op("skip_next", &me, &current, json!({})), later).await;
    assert_eq!(skipped["task"]["next_run_at"], "2027-05-07T07:00:00Z");
    let unskipped = call_at(&app, op("unskip", &me, &skipped["task"], json!({})), later).await;
    assert_eq!(unskipped["ok"], true, "{unskipped}");
    assert_eq!(unskipped["task"]["next_run_at"], "2027-05-06T07:00:00Z");
    let nothing = call_at(&app, op("unskip", &me, &unskipped["task"], json!({})), later).await;
    assert_eq!(
        nothing["task"]["version"], unskipped["task"]["version"],
        "nothing to take back"
    );
    s.model.script([Reply::text("Stretch!", 100, 10)]).await;
    assert_eq!(
        runner_deliver(&s, &task_of(&s, &daily).await, utc(2027, 5, 6, 7, 0)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );

    // A one-time reminder, a stale version, another principal.
    let once = create(&app, &me, "o", "Call", at_in(Duration::hours(3))).await;
    assert_eq!(
        code(&call(&app, op("skip_next", &me, &once, json!({}))).await),
        "invalid_request"
    );
    assert_eq!(
        code(&call(&app, op("skip_next", &me, &daily, json!({}))).await),
        "version_conflict"
    );
    let current = get_at(&app, &me, &daily, later).await;
    assert_eq!(
        code(&call(&app, op("skip_next", &owner("usr_2"), &current, json!({}))).await),
        "not_found"
    );
    let reader = json!({"id": "usr_1", "workspace": "ws_1", "scopes": ["schedule.read"]});
    assert_eq!(
        code(&call(&app, op("unskip", &reader, &current, json!({}))).await),
        "forbidden"
    );
}

/// Exactly the next one across a DST change (the day whose time does not
/// exist is not "the next one") and across an update of the schedule (the
/// skip moves to the new schedule's next occurrence; the old time is
/// `rescheduled`, not skipped).
#[tokio::test(flavor = "multi_thread")]
async fn skip_next_stays_the_next_one_across_a_dst_change_and_an_update() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    // New York springs forward on 2027-03-14: 02:30 does not exist that day.
    let night = create(&app, &me, "n", "Night pill", daily("02:30", "America/New_York")).await;
    let now = utc(2027, 3, 13, 17, 0);
    let skipped = call_at(&app, op("skip_next", &me, &night, json!({})), now).await;
    assert_eq!(skipped["task"]["next_run_at"], "2027-03-16T06:30:00Z");
    for _ in 0..2 {
        s.model.script([Reply::text("Pill!", 100, 10)]).await;
    }
    let task = task_of(&s, &night).await;
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 3, 15, 6, 30)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::SkippedByOwner),
        "the 15th is the next one: the 14th has no 02:30"
    );
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 3, 16, 6, 30)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );

    let morning = create(&app, &me, "m", "Stretch", daily("07:00", "UTC")).await;
    let now = utc(2027, 5, 3, 12, 0);
    let skipped = call_at(&app, op("skip_next", &me, &morning, json!({})), now).await;
    let moved = call_at(
        &app,
        op(
            "update",
            &me,
            &skipped["task"],
            json!({"idempotency_key": "mv", "input": daily("08:00", "UTC")}),
        ),
        now + Duration::hours(1),
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    assert_eq!(
        moved["task"]["next_run_at"], "2027-05-05T08:00:00Z",
        "the skip moved to the new time's next one, the 4th at 08:00"
    );
    let task = task_of(&s, &morning).await;
    assert_eq!(
        task.skip_next.as_ref().map(|s| s.occurrence),
        Some(utc(2027, 5, 4, 8, 0))
    );
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 5, 4, 7, 0)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::Rescheduled),
        "the old time is no occurrence any more"
    );
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 5, 4, 8, 0)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::SkippedByOwner)
    );
    s.model.script([Reply::text("Stretch!", 100, 10)]).await;
    assert_eq!(
        runner_deliver(&s, &task, utc(2027, 5, 5, 8, 0)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
}

/// Delivers a run message body as the runs queue's consumer would, at `now`.
async fn deliver_body(s: &RunStack, body: &str, now: DateTime<Utc>) -> Disposition {
    s.runner()
        .deliver("m-now", body, now, Utc::now() + Duration::minutes(5))
        .await
        .unwrap()
}

/// Run now (SPEC §11): one extra occurrence now, exactly once per key,
/// through the door, claim, budget and settle of any occurrence, with its
/// run record and event; a replay of the key answers the same run and sends
/// its message again until it has run; refused for a paused reminder with
/// the door's reason, and for a one-time one; stale after a move or a pause.
#[tokio::test(flavor = "multi_thread")]
async fn run_now_runs_one_extra_occurrence_exactly_once_per_key() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let daily = create(&app, &me, "d", "Stretch", daily("07:00", "UTC")).await;
    let now = Utc::now();
    let first = call_at(
        &app,
        op("run_now", &me, &daily, json!({"idempotency_key": "now_1"})),
        now,
    )
    .await;
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!(first["replayed"], false);
    assert_eq!(first["task"]["version"], 2);
    let run_id = first["run_id"].as_str().unwrap().to_owned();
    let occurrence = run_id.split_once('@').unwrap().1.to_owned();
    assert!(run_id.starts_with(daily["task_id"].as_str().unwrap()));
    let sent = s.t.take_run_messages().await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    let message: Value = serde_json::from_str(&sent[0]).unwrap();
    assert_eq!(message["scheduled_time"], occurrence);
    assert_eq!(message["task_id"], daily["task_id"]);

    // The same key again: the same run, its message sent again (not run yet).
    let again = call_at(
        &app,
        op("run_now", &me, &daily, json!({"idempotency_key": "now_1"})),
        now,
    )
    .await;
    assert_eq!(
        (again["replayed"].clone(), again["run_id"].clone()),
        (json!(true), json!(run_id))
    );
    assert_eq!(again["task"]["version"], 2, "nothing written again");
    let resent = s.t.take_run_messages().await;
    assert_eq!(resent.len(), 1);
    // Both deliveries: one run.
    s.model.script([Reply::text("Stretch now!", 100, 10)]).await;
    let at = DateTime::parse_from_rfc3339(&occurrence).unwrap().with_timezone(&Utc);
    assert_eq!(
        deliver_body(&s, &sent[0], at + Duration::seconds(1)).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    assert_eq!(
        deliver_body(&s, &resent[0], at + Duration::seconds(2)).await,
        Disposition::Duplicate
    );
    let run = call(
        &app,
        json!({"op": "run", "principal": me, "task_id": daily["task_id"], "run_id": run_id}),
    )
    .await;
    assert_eq!(run["run"]["status"], "succeeded", "{run}");
    assert_eq!(run["run"]["output"], "Stretch now!");
    assert_eq!(
        s.events()
            .await
            .iter()
            .filter(|e| e["detail"]["run_id"] == json!(run_id))
            .count(),
        1,
        "one event"
    );
    let account = s
        .account(
            &shared::domain::task::budget::account_of_principal("ws_1", "usr_1"),
            &at.format("%Y-%m").to_string(),
        )
        .await
        .unwrap();
    assert_eq!(account["runs"], 1, "charged like any other");
    // Once it has run, a replay sends nothing.
    let third = call_at(
        &app,
        op("run_now", &me, &daily, json!({"idempotency_key": "now_1"})),
        now,
    )
    .await;
    assert_eq!(third["replayed"], true);
    assert!(s.t.take_run_messages().await.is_empty());
    // The key with another input conflicts.
    let current = get_at(&app, &me, &daily, now).await;
    assert_eq!(
        code(
            &call_at(
                &app,
                op("run_now", &me, &current, json!({"idempotency_key": "now_1"})),
                now
            )
            .await
        ),
        "idempotency_conflict"
    );
    // Another key is another run, at another instant.
    let second = call_at(
        &app,
        op("run_now", &me, &current, json!({"idempotency_key": "now_2"})),
        now,
    )
    .await;
    assert_eq!(second["ok"], true, "{second}");
    assert_ne!(second["run_id"], json!(run_id));
    s.t.take_run_messages().await;

    // A paused reminder: refused with the door's reason; nothing written or sent.
    let paused = call(&app, op("pause", &me, &second["task"], json!({}))).await;
    let refused = call(
        &app,
        op("run_now", &me, &paused["task"], json!({"idempotency_key": "now_3"})),
    )
    .await;
    assert_eq!(code(&refused), "invalid_request", "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the door skips it (paused)"),
        "{refused}"
    );
    assert_eq!(
        get_at(&app, &me, &daily, Utc::now()).await["version"],
        paused["task"]["version"]
    );
    assert!(s.t.take_run_messages().await.is_empty());
    assert!(
        s.t.item(
            &Key::idempotency("ws_1", "usr_1", "now_3").pk,
            &Key::idempotency("ws_1", "usr_1", "now_3").sk
        )
        .await
        .is_none(),
        "a refused request leaves no record"
    );
    // A one-time reminder runs at its time.
    let once = create(&app, &me, "o", "Call", at_in(Duration::hours(3))).await;
    assert_eq!(
        code(&call(&app, op("run_now", &me, &once, json!({"idempotency_key": "now_4"}))).await),
        "invalid_request"
    );
}

/// A run now whose reminder moved or was paused since it was asked is
/// stale: skipped like any other occurrence, never run.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_run_now_is_skipped_like_any_other() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let stretch = create(&app, &me, "d", "Stretch", daily("07:00", "UTC")).await;
    let now = Utc::now();
    let asked = call_at(
        &app,
        op("run_now", &me, &stretch, json!({"idempotency_key": "n1"})),
        now,
    )
    .await;
    let moved = call_at(
        &app,
        op(
            "update",
            &me,
            &asked["task"],
            json!({"idempotency_key": "mv", "input": daily("08:00", "UTC")}),
        ),
        now,
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    let body = s.t.take_run_messages().await.remove(0);
    assert_eq!(
        deliver_body(&s, &body, now + Duration::seconds(2)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::Rescheduled)
    );
    let asked = call_at(
        &app,
        op("run_now", &me, &moved["task"], json!({"idempotency_key": "n2"})),
        now,
    )
    .await;
    let paused = call_at(&app, op("pause", &me, &asked["task"], json!({})), now).await;
    let resumed = call_at(&app, op("resume", &me, &paused["task"], json!({})), now).await;
    assert_eq!(resumed["task"]["state"], "scheduled");
    let body = s.t.take_run_messages().await.remove(0);
    assert_eq!(
        deliver_body(&s, &body, now + Duration::seconds(2)).await,
        Disposition::Skipped(shared::domain::run::door::SkipReason::Rescheduled),
        "paused since it was asked: stale even after the resume"
    );
}

/// A change that leaves a reminder's schedule as it was (its title, its
/// instruction) puts no schedule: a put costs a Scheduler request and would
/// start a `rate()` schedule's phase again. A change of its time puts one.
#[tokio::test(flavor = "multi_thread")]
async fn a_change_that_leaves_the_schedule_as_it_was_puts_none() {
    let t = TestStack::start().await.unwrap();
    let seen = SeenRequests::default();
    let app = app_seeing(&t, &seen);
    let me = owner("usr_1");
    let created = app
        .handle(schedules_create(&me, "k", "Stretch", daily("07:00", "UTC")), Utc::now())
        .await
        .unwrap();
    let put = || seen.0.lock().unwrap().len();
    let after_create = put();
    let renamed = app
        .handle(
            op(
                "update",
                &me,
                &created["task"],
                json!({"idempotency_key": "u1", "input": {"title": "Stretch well"}}),
            ),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(renamed["task"]["title"], "Stretch well", "{renamed}");
    assert_eq!(put(), after_create, "no schedule put for a new title");
    let moved = app
        .handle(
            op(
                "update",
                &me,
                &renamed["task"],
                json!({"idempotency_key": "u2", "input": daily("08:00", "UTC")}),
            ),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(moved["ok"], true, "{moved}");
    assert!(put() > after_create, "a new time is put");
    assert_eq!(schedule_of(&t, &moved["task"]).await.unwrap().0, "cron(0 8 * * ? *)");
}
