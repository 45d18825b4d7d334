//! A reminder's whole life as its person lives it (SPEC §3, §7, §8, §11,
//! §12), through the real schedules app, runner and admin against moto and
//! the Converse stand-in: every edit kept and run, a moved reminder never
//! completed by its old occurrence, a skipped one-time reminder finished
//! and its place freed, the result read back by `run`, a person's text kept
//! from admins and not kept forever.

use chrono::{DateTime, Duration, DurationRound, Utc};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::TaskId;
use shared::domain::task::claim::{Claim, RunStatus};
use shared::ports::{ClaimAnswer, ClaimRequest, RunStore};
use tests::{ENABLED, RunStack, TestStack, admin_principal, owner, owner_in, run_settings, schedules_create};

const RETENTION_SECONDS: i64 = 90 * 24 * 3600;

async fn call(app: &schedules::App, payload: Value, now: DateTime<Utc>) -> Value {
    app.handle(payload, now).await.expect("no internal failure")
}

/// A whole second, an hour or more ahead.
fn ahead(hours: i64) -> DateTime<Utc> {
    (Utc::now() + Duration::hours(hours))
        .duration_trunc(Duration::seconds(1))
        .unwrap()
}

fn op(name: &str, principal: &Value, task: &Value, extra: Value) -> Value {
    let mut request = json!({"op": name, "principal": principal, "task_id": task["task_id"],
                             "expected_version": task["version"]});
    if let (Some(r), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
        r.extend(extra.clone());
    }
    request
}

/// Delivers `task_id`'s occurrence at `at` through the real runner, `late`
/// after its time.
async fn deliver(s: &RunStack, task_id: &str, at: DateTime<Utc>, late: Duration, worker: bool) -> Disposition {
    let body = json!({
        "task_id": task_id, "workspace": "ws_1",
        "scheduled_time": occurrence_key(at), "execution_id": format!("e-{}", at.timestamp()), "attempt": "1",
    })
    .to_string();
    let now = at + late;
    s.runner_on(s.store(), run_settings(worker))
        .deliver("m1", &body, now, now + Duration::minutes(5))
        .await
        .expect("the delivery answers")
}

fn id(task: &Value) -> TaskId {
    TaskId::parse(task["task_id"].as_str().unwrap()).unwrap()
}

async fn task_item(t: &TestStack, task: &Value) -> Value {
    t.item_at(Key::task("ws_1", task["task_id"].as_str().unwrap()))
        .await
        .expect("the task item")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_edited_moved_and_run_reaches_its_person_and_then_expires() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    let (first, second) = (ahead(1), ahead(2));
    let created = call(
        &app,
        schedules_create(&me, "k1", "Call mom", json!({"at": first.to_rfc3339()})),
        now,
    )
    .await;
    let task = created["task"].clone();

    // Every field edited is kept: title and instruction, then the time.
    let edited = call(
        &app,
        op(
            "update",
            &me,
            &task,
            json!({"idempotency_key": "u1",
            "input": {"title": "Cake", "instruction": "Bring the cake to the party."}}),
        ),
        now,
    )
    .await;
    assert_eq!(edited["ok"], true, "{edited}");
    let got = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": task["task_id"]}),
        now,
    )
    .await;
    assert_eq!(got["task"]["title"], "Cake");
    assert_eq!(
        got["task"]["instruction"], "Bring the cake to the party.",
        "an edited instruction is saved"
    );
    let moved = call(
        &app,
        op(
            "update",
            &me,
            &edited["task"],
            json!({"idempotency_key": "u2", "input": {"at": second.to_rfc3339()}}),
        ),
        now,
    )
    .await;
    assert_eq!(moved["ok"], true, "{moved}");
    assert_eq!(
        s.t.schedule(task["task_id"].as_str().unwrap())
            .await
            .schedule_expression(),
        Some(format!("at({})", second.format("%Y-%m-%dT%H:%M:%S")).as_str())
    );

    // The old time's message, throttled and late, never completes it.
    let stale = deliver(
        &s,
        task["task_id"].as_str().unwrap(),
        first,
        Duration::seconds(30),
        true,
    )
    .await;
    assert_eq!(stale, Disposition::Skipped(SkipReason::Rescheduled));
    let after_stale = call(
        &app,
        json!({"op": "get", "principal": me, "task_id": task["task_id"]}),
        first,
    )
    .await;
    assert_eq!(after_stale["task"]["state"], "scheduled", "{after_stale}");
    assert_eq!(after_stale["task"]["next_run_at"], occurrence_key(second));
    assert!(
        s.t.schedule_names()
            .await
            .contains(&task["task_id"].as_str().unwrap().to_owned()),
        "a stale occurrence never touches the current schedule"
    );

    // The new time runs with the edited instruction, then completes.
    let ran = deliver(
        &s,
        task["task_id"].as_str().unwrap(),
        second,
        Duration::seconds(3),
        true,
    )
    .await;
    assert_eq!(ran, Disposition::Ran(RunStatus::Succeeded));
    let prompts = s.model.requests().await;
    assert!(
        prompts
            .last()
            .unwrap()
            .1
            .to_string()
            .contains("Bring the cake to the party."),
        "the run used the edited instruction"
    );

    // The person reads the result back by the id the event names.
    let run_id = format!("{}@{}", task["task_id"].as_str().unwrap(), occurrence_key(second));
    let run = call(
        &app,
        json!({"op": "run", "principal": me, "task_id": task["task_id"], "run_id": run_id}),
        second,
    )
    .await;
    assert_eq!(run["ok"], true, "{run}");
    assert_eq!(run["run"]["status"], "succeeded");
    assert!(
        run["run"]["output"].as_str().unwrap().contains("Bring the cake"),
        "{run}"
    );
    let runs = call(
        &app,
        json!({"op": "runs", "principal": me, "task_id": task["task_id"]}),
        second,
    )
    .await;
    assert_eq!(runs["runs"][0]["run_id"], run_id);
    assert_eq!(runs["runs"][0]["output"], run["run"]["output"]);
    assert_eq!(runs["runs"][1]["reason"], "rescheduled");
    assert_eq!(runs["runs"][1]["output"], Value::Null, "a skip has no output");
    let stranger = call(
        &app,
        json!({"op": "run", "principal": owner("usr_2"), "task_id": task["task_id"], "run_id": run_id}),
        second,
    )
    .await;
    assert_eq!(tests::code(&stranger), "not_found");

    // Finished: completed, its schedule gone, its text expiring with its
    // runs and both idempotency records.
    let item = task_item(&s.t, &task).await;
    assert_eq!(item["state"], "completed");
    let ttl = item["ttl"].as_i64().expect("a completed reminder expires");
    assert!((ttl - (second.timestamp() + RETENTION_SECONDS)).abs() < 120, "{ttl}");
    assert_eq!(
        s.t.schedule(task["task_id"].as_str().unwrap())
            .await
            .action_after_completion()
            .map(|a| a.as_str()),
        Some("DELETE"),
        "Scheduler deletes the one-time schedule after its delivery (moto never fires it)"
    );
    let record = s.run_record(&id(&task), &occurrence_key(second)).await.unwrap();
    assert!(record["ttl"].as_i64().unwrap() >= second.timestamp() + RETENTION_SECONDS);
    for key in ["k1", "u1"] {
        let idem = s.t.item_at(Key::idempotency("ws_1", "usr_1", key)).await.unwrap();
        assert!(idem["ttl"].as_i64().is_some(), "the record of {key} expires: {idem}");
    }

    // An admin sees the state, the schedule and the outcomes, never the text.
    let admin = s.t.admin();
    let got = admin
        .handle(
            json!({"op": "get", "principal": admin_principal(), "task_id": task["task_id"]}),
            second,
        )
        .await
        .unwrap();
    assert_eq!(got["ok"], true, "{got}");
    assert_eq!(got["state"], "completed");
    let text = got.to_string();
    assert!(!text.contains("Bring the cake") && !text.contains("Cake"), "{text}");
    let listed = admin
        .handle(json!({"op": "list", "principal": admin_principal()}), second)
        .await
        .unwrap();
    assert!(!listed.to_string().contains("Cake"), "{listed}");
    let runs = admin
        .handle(
            json!({"op": "runs", "principal": admin_principal(), "task_id": task["task_id"]}),
            second,
        )
        .await
        .unwrap();
    assert_eq!(runs["runs"][0]["status"], "succeeded");
    assert!(!runs.to_string().contains("Bring the cake"), "{runs}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reminder_moved_from_once_to_daily_is_not_completed_by_its_old_time() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    let first = ahead(1);
    let created = call(
        &app,
        schedules_create(&me, "k1", "Stretch", json!({"at": first.to_rfc3339()})),
        now,
    )
    .await;
    let daily = call(
        &app,
        op(
            "update",
            &me,
            &created["task"],
            json!({"idempotency_key": "u1",
            "input": {"daily": {"time": "07:00", "timezone": "Europe/Berlin"}}}),
        ),
        now,
    )
    .await;
    assert_eq!(daily["ok"], true, "{daily}");
    let task_id = created["task"]["task_id"].as_str().unwrap();
    let stale = deliver(&s, task_id, first, Duration::seconds(5), true).await;
    assert_eq!(stale, Disposition::Skipped(SkipReason::Rescheduled));
    let item = task_item(&s.t, &created["task"]).await;
    assert_eq!(item["state"], "scheduled", "no zombie: {item}");
    assert!(item.get("completed_at").is_none());
    let schedule = s.t.schedule(task_id).await;
    assert_eq!(schedule.state().map(|s| s.as_str()), Some("ENABLED"));
    assert_eq!(schedule.schedule_expression(), Some("cron(0 7 * * ? *)"));
    let edit = call(
        &app,
        op(
            "update",
            &me,
            &daily["task"],
            json!({"idempotency_key": "u2", "input": {"title": "Stretch well"}}),
        ),
        first,
    )
    .await;
    assert_eq!(edit["ok"], true, "still editable: {edit}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_one_time_reminder_skipped_at_its_time_is_finished_and_frees_its_place() {
    let s = RunStack::start().await.unwrap();
    let app = s.t.schedules_app_with(ENABLED, 2);
    let me = owner("usr_1");
    let now = Utc::now();
    let (first, second) = (ahead(1), ahead(2));
    let off = call(
        &app,
        schedules_create(&me, "k1", "One", json!({"at": first.to_rfc3339()})),
        now,
    )
    .await;
    let missed = call(
        &app,
        schedules_create(&me, "k2", "Two", json!({"at": second.to_rfc3339()})),
        now,
    )
    .await;
    let full = call(
        &app,
        schedules_create(&me, "k3", "Three", json!({"at": second.to_rfc3339()})),
        now,
    )
    .await;
    assert_eq!(tests::code(&full), "too_many_active");

    // The worker is switched off at the first one's time.
    let skipped = deliver(
        &s,
        off["task"]["task_id"].as_str().unwrap(),
        first,
        Duration::seconds(2),
        false,
    )
    .await;
    assert_eq!(skipped, Disposition::Skipped(SkipReason::WorkerDisabled));
    // The second one's message comes two hours late.
    let late = deliver(
        &s,
        missed["task"]["task_id"].as_str().unwrap(),
        second,
        Duration::hours(2),
        true,
    )
    .await;
    assert_eq!(late, Disposition::Skipped(SkipReason::Missed));
    for task in [&off["task"], &missed["task"]] {
        let item = task_item(&s.t, task).await;
        assert_eq!(item["state"], "completed", "{item}");
        assert!(item["ttl"].as_i64().is_some(), "{item}");
        let idem =
            s.t.item_at(Key::idempotency(
                "ws_1",
                "usr_1",
                if task == &off["task"] { "k1" } else { "k2" },
            ))
            .await;
        assert!(idem.unwrap()["ttl"].as_i64().is_some());
    }
    let runs = call(
        &app,
        json!({"op": "runs", "principal": me, "task_id": off["task"]["task_id"]}),
        second,
    )
    .await;
    assert_eq!(runs["runs"][0]["reason"], "worker disabled");
    // Both places are free again.
    let later = second + Duration::hours(3);
    for key in ["k4", "k5"] {
        let created = call(
            &app,
            schedules_create(
                &me,
                key,
                "Again",
                json!({"at": (later + Duration::hours(1)).to_rfc3339()}),
            ),
            later,
        )
        .await;
        assert_eq!(created["ok"], true, "{created}");
    }

    // A paused reminder whose time passed stays paused, not completed.
    let paused_at = later + Duration::hours(5);
    let me2 = owner("usr_2");
    let p = call(
        &app,
        schedules_create(&me2, "p1", "Paused", json!({"at": paused_at.to_rfc3339()})),
        later,
    )
    .await;
    let paused = call(&app, op("pause", &me2, &p["task"], json!({})), later).await;
    assert_eq!(paused["task"]["state"], "paused");
    let skipped = deliver(
        &s,
        p["task"]["task_id"].as_str().unwrap(),
        paused_at,
        Duration::hours(2),
        true,
    )
    .await;
    assert_eq!(skipped, Disposition::Skipped(SkipReason::Missed));
    assert_eq!(task_item(&s.t, &p["task"]).await["state"], "paused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_late_delivery_of_a_claimed_occurrence_waits_for_its_run_and_then_pays_for_a_dead_claim() {
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let key = occurrence_key(at);
    let claim = Claim {
        status: RunStatus::Running,
        // Live when the late delivery comes, two hours after its time.
        lease_until: (at + Duration::hours(3)).timestamp(),
        execution_id: "e-running".into(),
        attempts: 1,
        started_at: Utc::now(),
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    let claimed = s
        .store()
        .claim(&ClaimRequest {
            workspace: &task.workspace,
            task_id: &task.task_id,
            occurrence: &key,
            period: &shared::domain::task::budget::period(at),
            claim: &claim,
            now: Utc::now(),
            person_cap_usd: None,
            resume: None,
            keep_claims: chrono::Duration::minutes(70),
        })
        .await
        .unwrap();
    assert!(matches!(claimed, ClaimAnswer::Claimed(_)));
    let late = deliver(&s, task.task_id.as_str(), at, Duration::hours(2), true).await;
    assert_eq!(
        late,
        Disposition::Busy,
        "the claim's run records the outcome: this delivery comes back, not acknowledged as skipped"
    );
    assert_eq!(
        s.run_record(&task.task_id, &key).await,
        None,
        "the running claim's settle writes the occurrence's one outcome"
    );
    assert_eq!(
        s.task_item(&task).await["state"],
        "scheduled",
        "and decides the completion"
    );
    // That run died: once its lease has run out, the late delivery that
    // came back records the skip over its dead claim, and the occurrence is
    // never lost.
    let after = deliver(&s, task.task_id.as_str(), at, Duration::hours(4), true).await;
    assert_eq!(after, Disposition::Skipped(SkipReason::Missed));
    let record = s.run_record(&task.task_id, &key).await.unwrap();
    assert_eq!(
        (record["status"].as_str(), record["reason"].as_str()),
        (Some("skipped"), Some("missed"))
    );
    assert_eq!(s.task_item(&task).await["claims"][&key]["status"], "skipped");
}

#[tokio::test(flavor = "multi_thread")]
async fn one_principal_id_in_two_workspaces_has_two_key_spaces() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let when = json!({"at": ahead(3).to_rfc3339()});
    let one = call(
        &app,
        schedules_create(&owner_in("usr_1", "ws_1"), "k", "Here", when.clone()),
        Utc::now(),
    )
    .await;
    let two = call(
        &app,
        schedules_create(&owner_in("usr_1", "ws_2"), "k", "There", when),
        Utc::now(),
    )
    .await;
    assert_eq!(one["ok"], true, "{one}");
    assert_eq!(two["ok"], true, "no spurious idempotency_conflict: {two}");
    assert_ne!(one["task"]["task_id"], two["task"]["task_id"]);
}

/// An admin cannot bring back a reminder whose time has passed: resumed
/// or restored, it could never run, and would hold its owner's place
/// under the cap for good. The owner's own resume refuses the same.
#[tokio::test(flavor = "multi_thread")]
async fn an_admin_cannot_resume_or_restore_a_reminder_whose_time_has_passed() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let admin = t.admin();
    let me = owner("usr_1");
    let now = Utc::now();
    let at = ahead(1);
    let created = call(
        &app,
        schedules_create(&me, "k1", "Call", json!({"at": at.to_rfc3339()})),
        now,
    )
    .await;
    let admin_op = |name: &str, task: &Value, now: DateTime<Utc>| {
        let request = json!({"op": name, "principal": admin_principal(), "task_id": task["task_id"],
                             "expected_version": task["version"]});
        let admin = &admin;
        async move { admin.handle(request, now).await.unwrap() }
    };
    let paused = admin_op("pause", &created["task"], now).await;
    assert_eq!(paused["ok"], true, "{paused}");
    let later = at + Duration::minutes(5);
    let resumed = admin_op("resume", &paused["task"], later).await;
    assert_eq!(tests::code(&resumed), "invalid_request", "{resumed}");
    assert!(resumed.to_string().contains("time has passed"), "{resumed}");
    let deleted = admin_op("delete", &paused["task"], now).await;
    assert_eq!(deleted["ok"], true, "{deleted}");
    let restored = admin_op("restore", &deleted["task"], later).await;
    assert_eq!(tests::code(&restored), "invalid_request", "{restored}");
    // Before its time, both bring it back.
    let restored = admin_op("restore", &deleted["task"], now).await;
    assert_eq!(restored["ok"], true, "{restored}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restore_never_takes_an_owner_past_the_cap() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    let first = call(
        &app,
        schedules_create(&me, "k0", "First", json!({"at": ahead(3).to_rfc3339()})),
        now,
    )
    .await;
    let cancelled = call(&app, op("cancel", &me, &first["task"], json!({})), now).await;
    assert_eq!(cancelled["task"]["state"], "deleted");
    let item = task_item(&t, &first["task"]).await;
    assert!(item["ttl"].as_i64().is_some(), "a cancelled reminder expires");
    assert!(
        t.item_at(Key::idempotency("ws_1", "usr_1", "k0")).await.unwrap()["ttl"]
            .as_i64()
            .is_some()
    );
    let admin = t.admin();
    // What its owner cancelled, no admin brings back on their account.
    let refused = admin
        .handle(
            json!({"op": "restore", "principal": admin_principal(), "task_id": first["task"]["task_id"],
                   "expected_version": cancelled["task"]["version"]}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(tests::code(&refused), "invalid_request", "{refused}");
    assert!(refused.to_string().contains("owner cancelled"), "{refused}");
    assert_eq!(task_item(&t, &first["task"]).await["state"], "deleted");

    // One an admin deleted: restored while its owner has room.
    let second = call(
        &app,
        schedules_create(&me, "k-second", "Second", json!({"at": ahead(3).to_rfc3339()})),
        now,
    )
    .await;
    let removed = admin
        .handle(
            json!({"op": "delete", "principal": admin_principal(), "task_id": second["task"]["task_id"],
                   "expected_version": second["task"]["version"]}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(removed["ok"], true, "{removed}");
    let first = second;
    for i in 1..shared::config::DEFAULT_MAX_ACTIVE_REMINDERS {
        let created = call(
            &app,
            schedules_create(&me, &format!("k{i}"), "Fill", json!({"at": ahead(3).to_rfc3339()})),
            now,
        )
        .await;
        assert_eq!(created["ok"], true, "{created}");
    }
    let restore = json!({"op": "restore", "principal": admin_principal(), "task_id": first["task"]["task_id"],
                         "expected_version": removed["task"]["version"]});
    // One place is left: the restore takes it.
    let restored = admin.handle(restore.clone(), now).await.unwrap();
    assert_eq!(restored["ok"], true, "{restored}");
    assert!(
        task_item(&t, &first["task"]).await.get("ttl").is_none(),
        "a restored reminder expires no more"
    );
    let deleted = admin
        .handle(
            json!({"op": "delete", "principal": admin_principal(), "task_id": first["task"]["task_id"],
                   "expected_version": restored["task"]["version"]}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(deleted["ok"], true, "{deleted}");
    let last = call(
        &app,
        schedules_create(&me, "k-last", "Last", json!({"at": ahead(3).to_rfc3339()})),
        now,
    )
    .await;
    assert_eq!(last["ok"], true, "{last}");
    let over = admin
        .handle(
            json!({"op": "restore", "principal": admin_principal(), "task_id": first["task"]["task_id"],
                   "expected_version": deleted["task"]["version"]}),
            now,
        )
        .await
        .unwrap();
    assert_eq!(tests::code(&over), "invalid_request", "{over}");
    assert_eq!(
        task_item(&t, &first["task"]).await["state"],
        "deleted",
        "nothing changed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owners_pause_racing_an_admins_resume_leaves_the_schedule_in_step() {
    use shared::adapters::scheduler::EventBridgeSchedules;
    use tests::intercept::{GatedPut, Intercepted};
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    let created = call(
        &app,
        schedules_create(
            &me,
            "k1",
            "Stretch",
            json!({"daily": {"time": "07:00", "timezone": "UTC"}}),
        ),
        now,
    )
    .await;
    let task = created["task"].clone();

    // The owner pauses; its schedule put (after the task write) is slow.
    // An admin reads the paused version and resumes; the admin's put lands
    // first, the owner's (disabled) last.
    let (gated, entered, gate) = GatedPut::new();
    let config = t.create_config(ENABLED);
    let slow = shared::app::schedules::OwnerSchedules::new(
        t.admin_store(),
        Intercepted::new(EventBridgeSchedules::from_sdk(&t.aws.sdk, config.target), gated),
        t.runs_queue(),
        shared::app::schedules::SchedulesSettings {
            create: shared::app::create::CreateSettings {
                flags: config.flags,
                ceilings: config.ceilings,
            },
            max_active: 50,
            retention: Duration::days(90),
        },
    );
    let pause = op("pause", &me, &task, json!({}));
    let owner_pause = schedules::answer(&slow, pause.into(), now);
    let admin_resume = async {
        entered.await.unwrap();
        let resumed = t
            .admin()
            .handle(
                json!({"op": "resume", "principal": admin_principal(), "task_id": task["task_id"], "expected_version": 2}),
                now,
            )
            .await
            .unwrap();
        assert_eq!(resumed["ok"], true, "{resumed}");
        gate.send(()).unwrap();
    };
    let (paused, ()) = tokio::join!(owner_pause, admin_resume);
    assert_eq!(paused.unwrap()["ok"], true);
    let item = task_item(&t, &task).await;
    assert_eq!(
        (item["version"].as_u64(), item["state"].as_str()),
        (Some(3), Some("scheduled"))
    );
    assert_eq!(
        t.schedule(task["task_id"].as_str().unwrap())
            .await
            .state()
            .map(|s| s.as_str()),
        Some("ENABLED"),
        "the owner's late put is followed by one from the latest version"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_that_finds_its_claim_gone_sends_the_occurrence_back() {
    use shared::ports::{Release, Settled};
    let s = RunStack::start().await.unwrap();
    let (task, at) = s.due_reminder().await;
    let key = occurrence_key(at);
    let period = shared::domain::task::budget::period(at);
    let claim = Claim {
        status: RunStatus::Running,
        lease_until: (Utc::now() + Duration::minutes(10)).timestamp(),
        execution_id: "e1".into(),
        attempts: 1,
        started_at: Utc::now(),
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    let request = ClaimRequest {
        workspace: &task.workspace,
        task_id: &task.task_id,
        occurrence: &key,
        period: &period,
        claim: &claim,
        now: Utc::now(),
        person_cap_usd: None,
        resume: None,
        keep_claims: chrono::Duration::minutes(70),
    };
    let ClaimAnswer::Claimed(claimed) = s.store().claim(&request).await.unwrap() else {
        panic!("claimed")
    };
    let release = Release {
        task: &claimed,
        occurrence: &key,
        execution_id: "e1",
        period: &period,
        reserved_usd: 0.0,
        carried_usd: 0.0,
        workspace_held_usd: 0.0,
    };
    assert_eq!(s.store().release(&release).await.unwrap(), Settled::Done);
    assert_eq!(
        s.store().release(&release).await.unwrap(),
        Settled::Done,
        "repeated within its client request token's ten minutes: answered, not applied twice"
    );
    // The same release once its token has lapsed (its answer was lost, the
    // SDK's repeat came late): here a token of its own, which the claim's
    // lease as read gives it. The claim is gone, not taken over, and the
    // occurrence has not run: it must come back, never be acknowledged as a
    // duplicate.
    let mut lapsed = (*claimed).clone();
    lapsed.claims.get_mut(&key).unwrap().lease_until += 1;
    let late = Release {
        task: &lapsed,
        ..release.clone()
    };
    assert_eq!(s.store().release(&late).await.unwrap(), Settled::ClaimGone);
    // Taken over by another execution instead: that one records it.
    let other = Claim {
        execution_id: "e2".into(),
        ..claim.clone()
    };
    let again = ClaimRequest {
        claim: &other,
        ..request
    };
    assert!(matches!(
        s.store().claim(&again).await.unwrap(),
        ClaimAnswer::Claimed(_)
    ));
    let mut lapsed_again = lapsed.clone();
    lapsed_again.claims.get_mut(&key).unwrap().lease_until += 1;
    let late_again = Release {
        task: &lapsed_again,
        ..release.clone()
    };
    assert_eq!(s.store().release(&late_again).await.unwrap(), Settled::LostClaim);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_reminders_stays_whole_however_many_cancelled_ones_lie_between() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    let mut tasks = Vec::new();
    for i in 0..30 {
        let created = call(
            &app,
            schedules_create(&me, &format!("k{i}"), "R", json!({"at": ahead(3).to_rfc3339()})),
            now,
        )
        .await;
        tasks.push(created["task"].clone());
    }
    // The newest 24 are cancelled: a page of the others reads past them.
    for task in tasks.iter().skip(6) {
        let cancelled = call(&app, op("cancel", &me, task, json!({})), now).await;
        assert_eq!(cancelled["ok"], true);
    }
    let store = t.admin_store();
    let before = store.requests();
    let page =
        shared::ports::ReminderStore::owned(&store, "ws_1", "usr_1", shared::ports::StateFilter::NotDeleted, 5, None)
            .await
            .unwrap();
    assert_eq!(page.tasks.len(), 5, "a whole page");
    assert!(
        store.requests() - before <= 7,
        "each query reads a page's worth: {} queries for 5 of 6 behind 24 cancelled",
        store.requests() - before
    );
    let listed = call(&app, json!({"op": "list", "principal": me, "limit": 5}), now).await;
    assert_eq!(listed["tasks"].as_array().unwrap().len(), 5);
    let rest = call(
        &app,
        json!({"op": "list", "principal": me, "limit": 5, "cursor": listed["cursor"]}),
        now,
    )
    .await;
    assert_eq!(rest["tasks"].as_array().unwrap().len(), 1);
}

/// An admin's `list` pages with a cursor, as the owner's does: one query
/// a page, whatever the workspace holds, every task once across the pages.
#[tokio::test(flavor = "multi_thread")]
async fn an_admins_list_pages_through_a_workspace_with_a_cursor() {
    let t = TestStack::start().await.unwrap();
    let app = t.schedules_app();
    let me = owner("usr_1");
    let now = Utc::now();
    for i in 0..7 {
        let created = call(
            &app,
            schedules_create(&me, &format!("k{i}"), "R", json!({"at": ahead(3).to_rfc3339()})),
            now,
        )
        .await;
        assert_eq!(created["ok"], true, "{created}");
    }
    let admin = t.admin();
    let mut seen = std::collections::BTreeSet::new();
    let mut cursor = Value::Null;
    let mut pages = 0;
    loop {
        let page = admin
            .handle(
                json!({"op": "list", "principal": admin_principal(), "limit": 3, "cursor": cursor}),
                now,
            )
            .await
            .unwrap();
        assert_eq!(page["ok"], true, "{page}");
        let tasks = page["tasks"].as_array().unwrap();
        assert!(tasks.len() <= 3);
        for task in tasks {
            assert!(
                seen.insert(task["task_id"].as_str().unwrap().to_owned()),
                "each task once"
            );
        }
        pages += 1;
        cursor = page["cursor"].clone();
        if cursor.is_null() {
            break;
        }
        assert!(pages < 10, "the pages end");
    }
    assert_eq!(seen.len(), 7, "every task of the workspace");
    assert!(pages >= 3);
    for bad in [json!({"limit": 0}), json!({"limit": 101}), json!({"cursor": "zz"})] {
        let mut request = json!({"op": "list", "principal": admin_principal()});
        for (k, v) in bad.as_object().unwrap() {
            request[k] = v.clone();
        }
        let refused = admin.handle(request, now).await.unwrap();
        assert_eq!(refused["error"]["code"], "invalid_request", "{bad}: {refused}");
    }
}
