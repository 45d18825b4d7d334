//! The rules of create (SPEC §4), against moto through the real adapters:
//! the feature flags (rule 1), the exact scope (rule 2), the approved call's
//! task and schedule (rules 6, 7), validation without residue (rules 3, 4)
//! and retry idempotency (rule 5).

use chrono::{Duration, Utc};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::config::Flags;
use tests::{TestStack, code, create_request};

async fn call(app: &create::App, payload: Value) -> Value {
    app.handle(payload, Utc::now())
        .await
        .expect("no internal failure")
        .to_json()
}

#[tokio::test(flavor = "multi_thread")]
async fn rule_1_feature_flags_hide_the_descriptor_and_refuse_create() {
    let t = TestStack::start().await.unwrap();
    let now = Utc::now();
    for (api, worker) in [(false, true), (true, false), (false, false)] {
        let flags = Flags {
            api_enabled: api,
            worker_enabled: worker,
        };
        let app = create::build(&t.aws.sdk, t.create_config(flags));
        let describe = call(&app, json!({"op": "describe"})).await;
        assert_eq!(code(&describe), "feature_disabled", "describe with {flags:?}");
        assert!(describe.get("descriptor").is_none());
        let created = call(&app, create_request("k1", now, Duration::hours(1))).await;
        assert_eq!(code(&created), "feature_disabled", "create with {flags:?}");
        t.assert_untouched("flags off").await;
    }

    let app = t.create_app();
    let describe = call(&app, json!({"op": "describe"})).await;
    assert_eq!(describe["ok"], true);
    let d = &describe["descriptor"];
    assert_eq!(d["name"], "schedule.create");
    assert_eq!(
        d["classification"],
        json!({"effect": "EXTERNAL_WRITE", "risk": "HIGH", "idempotency": "CONDITIONALLY_IDEMPOTENT",
               "parallel": false, "required_scopes": ["schedule.write"]})
    );
    assert_eq!(d["input_schema"]["required"], json!(["title", "instruction", "at"]));
    assert!(
        d["input_schema"]["properties"]["at"]["description"]
            .as_str()
            .unwrap()
            .contains("offset")
    );
    t.assert_untouched("describe").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_6_7_an_approved_call_writes_the_task_and_its_schedule_exactly() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let due = now + Duration::hours(3);
    let answer = call(&app, create_request("call_7f3a", now, Duration::hours(3))).await;
    assert_eq!(code(&answer), "ok", "{answer}");
    assert_eq!(answer["replayed"], false);
    let task_id = answer["task"]["task_id"].as_str().unwrap().to_owned();
    let at = due.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    assert_eq!(answer["task"]["at"], at, "the instant comes back in UTC");
    assert_eq!(answer["task"]["state"], "scheduled");

    // The task item.
    let item = t.item_at(Key::task("ws_1", &task_id)).await.expect("task item");
    assert_eq!(item["entity"], "task");
    assert_eq!(item["kind"], "reminder");
    assert_eq!(item["state"], "scheduled");
    assert_eq!(item["version"], 1);
    assert_eq!(item["provenance"], json!({"type": "user", "principal": "usr_123"}));
    assert_eq!(item["title"], "Call mom");
    assert_eq!(item["instruction"], "Remind me to call mom about Sunday.");
    assert_eq!(item["spec"]["schedule"], json!({"type": "at", "at": at}));
    assert_eq!(item["spec"]["scopes"], json!([]), "the empty scope set");
    assert_eq!(item["spec"]["tools"], json!([]));
    assert_eq!(
        item["spec"]["limits"],
        json!({"max_turns": 6, "max_tool_calls": 0, "max_output_tokens": 2000, "timeout_seconds": 120})
    );
    assert_eq!(
        item["spec"]["agent"],
        json!({"id": "agt_1", "version": "7", "policy_profile": "standard"})
    );
    assert_eq!(item["approval"]["id"], "apr_9");
    assert!(item.get("hold").is_none() && item.get("override").is_none() && item.get("pending").is_none());

    // Its idempotency record, in the same transaction.
    let record = t
        .item_at(Key::idempotency("ws_1", "usr_123", "call_7f3a"))
        .await
        .expect("idempotency record");
    assert_eq!(record["task_id"], task_id.as_str());
    assert_eq!(t.items().await.len(), 2, "exactly the task and its record");

    // The schedule.
    assert_eq!(t.schedule_names().await, vec![task_id.clone()]);
    let s = t.schedule(&task_id).await;
    assert_eq!(s.schedule_expression(), Some(format!("at({})", &at[..19]).as_str()));
    assert_eq!(s.schedule_expression_timezone(), Some("UTC"));
    assert_eq!(s.action_after_completion().map(|a| a.as_str()), Some("DELETE"));
    assert_eq!(s.flexible_time_window().map(|w| w.mode().as_str()), Some("OFF"));
    assert_eq!(s.state().map(|s| s.as_str()), Some("ENABLED"));
    let target = s.target().expect("target");
    assert_eq!(target.arn(), t.stack.runs_queue_arn);
    assert_eq!(target.role_arn(), t.stack.scheduler_role_arn);
    assert_eq!(
        target.dead_letter_config().and_then(|d| d.arn()),
        Some(t.stack.scheduler_dlq_arn.as_str())
    );
    let retry = target.retry_policy().expect("retry policy");
    assert_eq!(retry.maximum_event_age_in_seconds(), Some(86_400));
    assert_eq!(retry.maximum_retry_attempts(), Some(185));
    let input: Value = serde_json::from_str(target.input().unwrap()).unwrap();
    assert_eq!(
        input,
        json!({"task_id": task_id, "workspace": "ws_1",
               "scheduled_time": "<aws.scheduler.scheduled-time>",
               "execution_id": "<aws.scheduler.execution-id>",
               "attempt": "<aws.scheduler.attempt-number>"})
    );
    assert!(
        !s.description().unwrap_or_default().contains("Call mom"),
        "no content in the schedule"
    );

    // Request budget: one read, one transaction, one schedule write.
    assert_eq!(app.store().requests(), 2);
    assert_eq!(app.schedules().requests(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn rule_2_only_the_exact_scope_allows_create() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let denied: [&[&str]; 6] = [
        &[],
        &["schedule.*"],
        &["*"],
        &["schedule.read"],
        &["schedule.admin", "schedule.read"],
        &["schedule.write.all", "schedule"],
    ];
    for scopes in denied {
        let mut request = create_request("k", now, Duration::hours(1));
        request["principal"]["scopes"] = json!(scopes);
        let answer = call(&app, request).await;
        assert_eq!(code(&answer), "scope_denied", "{scopes:?}");
        t.assert_untouched("scope denied").await;
    }
    let mut request = create_request("k", now, Duration::hours(1));
    request["principal"]["scopes"] = json!(["schedule.read", "schedule.write"]);
    assert_eq!(code(&call(&app, request).await), "ok");
}

#[tokio::test(flavor = "multi_thread")]
async fn rules_3_4_rejected_requests_leave_no_residue() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let base = || create_request("k", now, Duration::hours(1));
    let with = |path: &[&str], value: Value| {
        let mut request = base();
        let mut slot = &mut request;
        for key in path {
            slot = &mut slot[*key];
        }
        *slot = value;
        request
    };
    let without = |outer: &str, field: Option<&str>| {
        let mut request = base();
        match field {
            Some(f) => request[outer].as_object_mut().unwrap().remove(f),
            None => request.as_object_mut().unwrap().remove(outer),
        };
        request
    };
    let naive = (now + Duration::hours(1)).format("%Y-%m-%dT%H:%M:%S").to_string();
    let cases: Vec<(&str, Value, &str)> = vec![
        ("naive", with(&["input", "at"], json!(naive)), "naive_instant"),
        (
            "unparsable",
            with(&["input", "at"], json!("tomorrow at 7")),
            "invalid_instant",
        ),
        (
            "not a string",
            with(&["input", "at"], json!(1767034800)),
            "invalid_request",
        ),
        (
            "past",
            with(&["input", "at"], json!((now - Duration::minutes(1)).to_rfc3339())),
            "instant_in_past",
        ),
        (
            "too far",
            with(&["input", "at"], json!((now + Duration::days(367)).to_rfc3339())),
            "instant_too_far",
        ),
        (
            "long title",
            with(&["input", "title"], json!("t".repeat(201))),
            "invalid_request",
        ),
        (
            "long instruction",
            with(&["input", "instruction"], json!("i".repeat(4001))),
            "invalid_request",
        ),
        (
            "control title",
            with(&["input", "title"], json!("Call\u{0000}mom")),
            "invalid_request",
        ),
        (
            "control instruction",
            with(&["input", "instruction"], json!("a\u{001b}[31m")),
            "invalid_request",
        ),
        ("empty title", with(&["input", "title"], json!("")), "invalid_request"),
        (
            "extra input field",
            with(&["input", "scopes"], json!(["*"])),
            "invalid_request",
        ),
        ("missing approval", without("approval", None), "invalid_request"),
        ("null approval", with(&["approval"], Value::Null), "invalid_request"),
        ("missing at", without("input", Some("at")), "invalid_request"),
        ("missing key", without("idempotency_key", None), "invalid_request"),
        ("unknown op", with(&["op"], json!("delete")), "invalid_request"),
        ("not an object", json!("create"), "invalid_request"),
        (
            "negative limit",
            with(&["agent", "limits", "max_turns"], json!(-1)),
            "invalid_request",
        ),
    ];
    for (name, request, want) in cases {
        let answer = call(&app, request).await;
        assert_eq!(code(&answer), want, "{name}: {answer}");
        assert!(
            answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}"
        );
        t.assert_untouched(name).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn rule_5_retries_are_idempotent_per_principal() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let request = create_request("call_1", now, Duration::hours(2));

    let first = call(&app, request.clone()).await;
    assert_eq!(
        (code(&first), first["replayed"].clone()),
        ("ok".to_owned(), json!(false))
    );
    let reads_before = app.store().requests();
    let again = call(&app, request.clone()).await;
    assert_eq!(
        (code(&again), again["replayed"].clone()),
        ("ok".to_owned(), json!(true))
    );
    assert_eq!(again["task"], first["task"], "the same task");
    assert_eq!(
        app.store().requests() - reads_before,
        2,
        "a replay reads the record and the task, writes nothing"
    );
    assert_eq!(t.items_of("task").await.len(), 1);
    assert_eq!(t.schedule_names().await.len(), 1);

    // The same instant spelled in UTC is the same input.
    let mut respelled = request.clone();
    let at = chrono::DateTime::parse_from_rfc3339(request["input"]["at"].as_str().unwrap()).unwrap();
    respelled["input"]["at"] = json!(at.with_timezone(&Utc).to_rfc3339());
    assert_eq!(call(&app, respelled).await["replayed"], true);

    // Same key, other input: conflict, nothing changes.
    let task_before = t.items_of("task").await;
    let task_id = first["task"]["task_id"].as_str().unwrap();
    let schedule_before = t.schedule(task_id).await.schedule_expression().map(str::to_owned);
    let mut other = request.clone();
    other["input"]["title"] = json!("Call dad");
    assert_eq!(code(&call(&app, other).await), "idempotency_conflict");
    let mut later = create_request("call_1", now, Duration::hours(5));
    later["approval"] = request["approval"].clone();
    assert_eq!(code(&call(&app, later).await), "idempotency_conflict");
    assert_eq!(t.items_of("task").await, task_before);
    assert_eq!(
        t.schedule(task_id).await.schedule_expression().map(str::to_owned),
        schedule_before
    );

    // Same key, other principal: an independent task.
    let mut theirs = request.clone();
    theirs["principal"]["id"] = json!("usr_456");
    let answer = call(&app, theirs).await;
    assert_eq!(
        (code(&answer), answer["replayed"].clone()),
        ("ok".to_owned(), json!(false))
    );
    assert_ne!(answer["task"]["task_id"], first["task"]["task_id"]);
    assert_eq!(t.items_of("task").await.len(), 2);
    assert_eq!(t.schedule_names().await.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn rule_5_a_replay_after_the_instant_passed_still_replays() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let request = create_request("late", now, Duration::minutes(1));
    assert_eq!(call(&app, request.clone()).await["replayed"], false);
    let later = now + Duration::minutes(5);
    let answer = app.handle(request, later).await.unwrap().to_json();
    assert_eq!(
        (code(&answer), answer["replayed"].clone()),
        ("ok".to_owned(), json!(true))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rule_5_concurrent_calls_with_one_key_converge() {
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();

    // Same input, eight at once: one creation, seven replays.
    let request = create_request("same", now, Duration::hours(1));
    let answers = futures_join(&app, (0..8).map(|_| request.clone()).collect()).await;
    assert!(answers.iter().all(|a| code(a) == "ok"), "{answers:?}");
    assert_eq!(answers.iter().filter(|a| a["replayed"] == false).count(), 1);
    assert_eq!(t.items_of("task").await.len(), 1);
    assert_eq!(t.schedule_names().await.len(), 1);

    // Different inputs, eight at once: one wins, the rest conflict, and the
    // schedule fires at the winner's instant.
    let requests: Vec<Value> = (1..=8)
        .map(|h| create_request("race", now, Duration::hours(h)))
        .collect();
    let answers = futures_join(&app, requests).await;
    let winners: Vec<&Value> = answers.iter().filter(|a| code(a) == "ok").collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .filter(|a| code(a) != "ok")
            .all(|a| code(a) == "idempotency_conflict")
    );
    let winner = &winners[0]["task"];
    let s = t.schedule(winner["task_id"].as_str().unwrap()).await;
    let at = winner["at"].as_str().unwrap();
    assert_eq!(s.schedule_expression(), Some(format!("at({})", &at[..19]).as_str()));
    assert_eq!(t.items_of("task").await.len(), 2);
    assert_eq!(t.schedule_names().await.len(), 2);
}

async fn futures_join(app: &create::App, requests: Vec<Value>) -> Vec<Value> {
    futures::future::join_all(requests.into_iter().map(|r| call(app, r))).await
}
