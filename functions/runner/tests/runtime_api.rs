//! The real `runner` binary under a Lambda Runtime API emulator, against
//! moto, the Converse stand-in and the MCP fixture, fed crafted SQS batches:
//! a duplicate in the same batch, a poison message, a redelivery.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use chrono::Utc;
use local::runtime::{Launch, RuntimeApi};
use serde_json::{Value, json};
use tests::{RunStack, reminder, run_message};

const BINARY: &str = env!("CARGO_BIN_EXE_runner");

/// The runner as the template configures it on the stack, its model the
/// Converse stand-in at the harness's prices.
fn launch(s: &RunStack) -> Launch {
    Launch::new("runner", &s.t.aws, &s.t.stack)
        .unwrap()
        .model(&s.model.endpoint(), tests::MODEL, 3.0, 15.0)
}

/// The runner binary started as [`launch`] configures it, its log kept.
async fn started(s: &RunStack) -> local::runtime::Function {
    launch(s)
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap()
}

fn sqs_event(records: &[(&str, &str)]) -> Value {
    sqs_event_sent(records, 1_767_225_600_000)
}

/// A batch whose records SQS took at `sent_ms` (`SentTimestamp`).
fn sqs_event_sent(records: &[(&str, &str)], sent_ms: i64) -> Value {
    let sent = sent_ms.to_string();
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body)| {
            json!({
                "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": sent,
                               "SenderId": "scheduler", "ApproximateFirstReceiveTimestamp": sent},
                "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:runs", "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({"Records": records})
}

fn failures(response: &Value) -> Vec<String> {
    let mut ids = local::dispatcher::batch_failures(response);
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_runs_a_batch_with_partial_failures() {
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let task = reminder(at);
    s.store().insert_task(&task).await.unwrap();

    let api = started(&s).await;

    let body = run_message(&task, at, "exec-1");
    let batch = sqs_event(&[("m1", &body), ("m2", &body), ("poison", "{\"not\": \"a run\"}")]);
    let response = api.invoke_ok(&batch).await.unwrap();
    // One of the two copies ran; the other met its live lease and comes back.
    let back = failures(&response);
    assert_eq!(back.len(), 1, "{response}");
    assert!(back[0] == "m1" || back[0] == "m2");

    let redelivered = api.invoke_ok(&sqs_event(&[(&back[0], &body)])).await.unwrap();
    assert_eq!(
        failures(&redelivered),
        Vec::<String>::new(),
        "a duplicate of a finished run is acknowledged"
    );

    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    let record = s.run_record(&task.task_id, &occurrence).await.expect("run record");
    assert_eq!(record["status"], "succeeded");
    assert_eq!(s.t.items_of("malformed").await.len(), 1, "the poison message is kept");
    assert_eq!(s.events().await.len(), 1);
    assert_eq!(s.model.requests().await.len(), 1);

    let logs = api.logs().unwrap();
    assert!(
        !logs.contains("call mom about Sunday"),
        "no instruction text in the logs"
    );
    assert!(
        logs.lines().any(|l| l.contains("\"task_id\"")),
        "spans carry the task id: {logs}"
    );
}

/// A busy occurrence is retried and run, not missed: the binary returns the
/// record and shortens its visibility; the dispatcher does not see it again
/// before that visibility passes on SQS's clock, nor needs the queue's 2160 s;
/// once the other execution's lease has run out, the retry takes it over and
/// runs it, within the shortest catch-up window the runner accepts.
#[tokio::test(flavor = "multi_thread")]
async fn a_busy_occurrence_comes_back_after_its_short_visibility_and_runs() {
    use aws_sdk_dynamodb::types::AttributeValue;
    use shared::domain::run::occurrence::occurrence_key;
    use shared::domain::run::redelivery::return_delay;
    use shared::domain::task::claim::{Claim, RunStatus};
    use shared::ports::{ClaimRequest, RunStore};

    let s = RunStack::start().await.unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let task = reminder(at);
    s.store().insert_task(&task).await.unwrap();
    let occurrence = occurrence_key(at);
    // Another execution holds the occurrence under a live lease.
    let now = Utc::now();
    let claim = Claim {
        status: RunStatus::Running,
        lease_until: (now + chrono::Duration::seconds(300)).timestamp(),
        execution_id: "exec-other".into(),
        attempts: 1,
        started_at: now,
        crashed_usd: 0.0,
        workspace_usd: 0.0,
        request_id: None,
    };
    let period = shared::domain::task::budget::period(at);
    s.store()
        .claim(&ClaimRequest {
            workspace: &task.workspace,
            task_id: &task.task_id,
            occurrence: &occurrence,
            period: &period,
            claim: &claim,
            now,
            person_cap_usd: None,
            resume: None,
            keep_claims: chrono::Duration::minutes(70),
        })
        .await
        .unwrap();

    let runner = launch(&s)
        .set("CATCH_UP_SECONDS", shared::config::MIN_CATCH_UP_SECONDS.to_string())
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let idle = RuntimeApi::start("reconcile", Duration::from_secs(60)).await.unwrap();
    let dispatch = local::dispatcher::Dispatcher {
        sdk: &s.t.aws.sdk,
        stack: &s.t.stack,
        runner: &runner.api,
        reconcile: &idle,
    };
    aws_sdk_sqs::Client::new(&s.t.aws.sdk)
        .send_message()
        .queue_url(&s.t.stack.runs_queue_url)
        .message_body(run_message(&task, at, "exec-1"))
        .send()
        .await
        .unwrap();

    let first = dispatch.drain_runs().await.unwrap();
    assert_eq!(first.len(), 1);
    assert_eq!(failures(&first[0]).len(), 1, "busy: returned {first:?}");
    // Not seen again before the shortest first return has passed...
    let shortest = u32::try_from(return_delay(1, 0.0)).unwrap();
    dispatch.advance_clock(shortest - 1).unwrap();
    assert!(
        dispatch.drain_runs().await.unwrap().is_empty(),
        "seen before its visibility passed"
    );

    // ...and seen once the longest first return has, long before the
    // queue's own 2160 s. Meanwhile the other execution's lease ran out.
    let longest = u32::try_from(return_delay(1, 1.0)).unwrap();
    dispatch.advance_clock(longest - shortest + 1).unwrap();
    aws_sdk_dynamodb::Client::new(&s.t.aws.sdk)
        .update_item()
        .table_name(&s.t.stack.names.table)
        .set_key(Some(
            shared::adapters::keys::Key::task(&task.workspace, task.task_id.as_str()).to_map(),
        ))
        .update_expression("SET claims.#o.lease_until = :expired")
        .expression_attribute_names("#o", &occurrence)
        .expression_attribute_values(":expired", AttributeValue::N((Utc::now().timestamp() - 1).to_string()))
        .send()
        .await
        .unwrap();
    let retried = dispatch.drain_runs().await.unwrap();
    assert_eq!(retried.len(), 1, "the returned message came back");
    assert_eq!(failures(&retried[0]), Vec::<String>::new(), "{retried:?}");
    let record = s.run_record(&task.task_id, &occurrence).await.expect("run record");
    assert_eq!(record["status"], "succeeded", "run, not missed: {record}");
    assert_eq!(s.model.requests().await.len(), 1);
}

/// Two images of a megabyte each, as a tool answers them: a PNG header
/// (1,000 x 1,000 pixels, within Converse's 8,000 a side) and a megabyte
/// that does not compress.
fn two_images() -> Vec<rmcp::model::ContentBlock> {
    use base64::Engine;
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    png.extend(b"IHDR");
    png.extend(1000u32.to_be_bytes());
    png.extend(1000u32.to_be_bytes());
    png.extend((0..1024 * 1024).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    let image = base64::engine::general_purpose::STANDARD.encode(&png);
    (0..2)
        .map(|_| rmcp::model::ContentBlock::image(image.clone(), "image/png"))
        .collect()
}

/// A run's memory is bounded by the run, not only per item (SPEC §13): a
/// server answering every call with two 1 MB images (as much as a run's
/// session reads of one answer, `Reading::Runs`), called again and again,
/// leaves the real runner's peak memory under a stated bound, and no
/// request to the model carries more than 20 images.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_flooding_images_cannot_exhaust_the_runners_memory() {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
    use rmcp::model::CallToolResult;
    use shared::domain::task::install::InstallScope;
    /// The peak a run may reach with its server's flood: the held content's
    /// cap (8 MB), the requests that carry it, one call's answer in flight,
    /// and the process itself.
    const PEAK_BOUND: u64 = 160 * 1024 * 1024;
    let s = RunStack::start().await.unwrap();
    let images = two_images();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "shots",
            json!({"version": 1}),
            &[],
            "Collect the screenshots.",
        )],
        tools: vec![tool("shots")],
        tool_answers: [("shots".to_owned(), CallToolResult::success(images))].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&tests::install(
            "ins_1",
            "cams",
            &fixture.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    let mut task = tests::connector_task("cams", "shots", &["shots"], &[]);
    task.spec.limits.max_tool_calls = 10;
    task.spec.limits.max_turns = 10;
    task.spec.budget = None;
    s.store().insert_task(&task).await.unwrap();
    let shots = shared::domain::run::agent::offered_name("cams", "shots");
    let mut replies: Vec<local::converse::Reply> = (0..8)
        .map(|_| local::converse::Reply::tool(&shots, json!({}), 100, 10))
        .collect();
    replies.push(local::converse::Reply::text("Collected.", 100, 10));
    s.model.script(replies).await;

    let api = launch(&s)
        .timeout(Duration::from_secs(120))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let response = api
        .invoke_ok(&sqs_event(&[("m1", &run_message(&task, at, "e1"))]))
        .await
        .unwrap();
    assert!(failures(&response).is_empty(), "{response}");
    let record = s
        .run_record(&task.task_id, &shared::domain::run::occurrence::occurrence_key(at))
        .await
        .unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["usage"]["tool_calls"], 8);
    let requests = s.model.requests().await;
    assert_eq!(requests.len(), 9);
    for (_, request) in &requests {
        assert!(request.to_string().matches("\"image\"").count() <= 20);
    }
    let last = requests[8].1.to_string();
    let texts: Vec<String> = requests[8].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .flat_map(|b| b["toolResult"]["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["text"].as_str().map(|t| t.chars().take(120).collect()))
        .collect();
    println!(
        "last request: {} images, texts {texts:?}",
        last.matches("\"image\"").count()
    );
    assert!(
        last.contains(shared::domain::run::agent::HELD_LEFT_OUT),
        "past the run's cap, server content is named, not held"
    );
    let peak = api.process.peak_rss().expect("the runner's peak memory");
    assert!(
        peak < PEAK_BOUND,
        "peak {} MB, bound {} MB (16 images of 1 MB were sent)",
        peak / (1024 * 1024),
        PEAK_BOUND / (1024 * 1024)
    );
    println!("runner peak memory: {} MB", peak / (1024 * 1024));
}

/// A hostile server answers a tool call with a 16 MiB JSON array of
/// numbers, which rmcp would buffer twice at about 32 bytes a number (over
/// 500 MB). The run's sessions bound every response in bytes before it is
/// parsed (`adapters::mcp::Reading::Runs`, 4 MiB): the call fails as the
/// model reads it, the run goes on, another tenant's reminder in the same
/// batch succeeds, and the real runner's peak memory stays under a bound.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_answering_16_mib_of_numbers_is_bounded_in_bytes_read() {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
    use rmcp::model::CallToolResult;
    use shared::domain::task::install::InstallScope;
    /// The process, its clients, and one bounded response in flight.
    const PEAK_BOUND: u64 = 160 * 1024 * 1024;
    let s = RunStack::start().await.unwrap();
    let numbers = Value::Array(vec![json!(0); 8 * 1024 * 1024]);
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("dump", json!({"version": 1}), &[], "Dump the table.")],
        tools: vec![tool("dump")],
        tool_answers: [("dump".to_owned(), CallToolResult::structured(numbers))].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&tests::install(
            "ins_1",
            "hostile",
            &fixture.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    let mut task = tests::connector_task("hostile", "dump", &["dump"], &[]);
    task.spec.budget = None;
    s.store().insert_task(&task).await.unwrap();
    let mut other = reminder(Utc::now() - chrono::Duration::seconds(5));
    other.workspace = "ws_2".into();
    other.task_id = shared::domain::task::TaskId::for_reminder("ws_2", "usr_9", "k1");
    other.provenance = shared::domain::task::Provenance::User {
        principal: "usr_9".into(),
    };
    s.store().insert_task(&other).await.unwrap();
    // The stand-in's default: the connector run calls its one tool, then
    // answers; the reminder answers at once (the runs are concurrent, so no
    // script of turns in order).
    let api = launch(&s)
        .timeout(Duration::from_secs(120))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let other_at = match other.spec.schedule {
        shared::domain::schedule::Schedule::At { at } => at,
        _ => unreachable!(),
    };
    let response = api
        .invoke_ok(&sqs_event(&[
            ("m1", &run_message(&task, at, "e1")),
            ("m2", &run_message(&other, other_at, "e1")),
        ]))
        .await
        .unwrap();
    assert!(failures(&response).is_empty(), "{response}");
    let key = shared::domain::run::occurrence::occurrence_key;
    let record = s.run_record(&task.task_id, &key(at)).await.unwrap();
    assert_eq!(
        record["status"], "succeeded",
        "the run went on past the refused answer: {record}"
    );
    let theirs = s.run_record(&other.task_id, &key(other_at)).await.unwrap();
    assert_eq!(theirs["status"], "succeeded", "the other tenant's run: {theirs}");
    let requests = s.model.requests().await;
    let answered = requests
        .iter()
        .map(|(_, r)| r.to_string())
        .find(|r| r.contains("toolResult"))
        .expect("the tool's answer reached the model");
    assert!(answered.len() < 64 * 1024, "the model read an error, not the flood");
    let peak = api.process.peak_rss().expect("the runner's peak memory");
    println!("runner peak memory: {} MB", peak / (1024 * 1024));
    assert!(
        peak < PEAK_BOUND,
        "peak {} MB, bound {} MB",
        peak / (1024 * 1024),
        PEAK_BOUND / (1024 * 1024)
    );
}

/// Twenty calls of a tool answering two 1 MB images each, asked in one
/// turn: each result is bounded against the run's room as it arrives (not
/// once the turn's 40 MB are all in), so the real runner's peak memory
/// stays under the same bound, and the results past the room are named.
#[tokio::test(flavor = "multi_thread")]
async fn twenty_image_calls_in_one_turn_are_bounded_as_they_arrive() {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
    use rmcp::model::CallToolResult;
    use shared::domain::task::install::InstallScope;
    const PEAK_BOUND: u64 = 160 * 1024 * 1024;
    let s = RunStack::start().await.unwrap();
    let images = two_images();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "shots",
            json!({"version": 1}),
            &[],
            "Collect the screenshots.",
        )],
        tools: vec![tool("shots")],
        tool_answers: [("shots".to_owned(), CallToolResult::success(images))].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&tests::install(
            "ins_1",
            "cams",
            &fixture.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    let mut task = tests::connector_task("cams", "shots", &["shots"], &[]);
    task.spec.limits.max_tool_calls = 20;
    task.spec.budget = None;
    s.store().insert_task(&task).await.unwrap();
    let shots = shared::domain::run::agent::offered_name("cams", "shots");
    s.model
        .script([
            local::converse::Reply::ToolUses {
                calls: (0..20).map(|_| (shots.clone(), json!({}))).collect(),
                input_tokens: 100,
                output_tokens: 10,
            },
            local::converse::Reply::text("Collected.", 100, 10),
        ])
        .await;
    let api = launch(&s)
        .timeout(Duration::from_secs(120))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let response = api
        .invoke_ok(&sqs_event(&[("m1", &run_message(&task, at, "e1"))]))
        .await
        .unwrap();
    assert!(failures(&response).is_empty(), "{response}");
    let record = s
        .run_record(&task.task_id, &shared::domain::run::occurrence::occurrence_key(at))
        .await
        .unwrap();
    assert_eq!(record["status"], "succeeded", "{record}");
    assert_eq!(record["usage"]["tool_calls"], 20);
    let requests = s.model.requests().await;
    let last = requests.last().unwrap().1.to_string();
    assert!(
        last.contains(shared::domain::run::agent::HELD_LEFT_OUT),
        "past the run's room, results are named, not held"
    );
    assert!(last.matches("\"image\"").count() <= 20);
    let peak = api.process.peak_rss().expect("the runner's peak memory");
    println!("runner peak memory: {} MB", peak / (1024 * 1024));
    assert!(peak < PEAK_BOUND, "peak {} MB", peak / (1024 * 1024));
}

/// SPEC §14: with `TRACES_ENDPOINT` set, the binary sends each delivery's
/// trace before it answers: when the answer arrives, the endpoint's
/// stand-in already holds the delivery's spans, signed for `xray`.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_sends_a_delivery_s_trace_before_it_answers() {
    let s = RunStack::start().await.unwrap();
    let endpoint = local::otlp::OtlpEndpoint::start().await.unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let task = reminder(at);
    s.store().insert_task(&task).await.unwrap();
    let api = launch(&s)
        .set(shared::config::TRACES_ENDPOINT, endpoint.url())
        .start(Path::new(BINARY))
        .await
        .unwrap();

    let body = run_message(&task, at, "exec-1");
    let response = api.invoke_ok(&sqs_event(&[("m1", &body)])).await.unwrap();
    assert_eq!(failures(&response), Vec::<String>::new(), "{response}");

    let spans = endpoint.spans();
    assert!(endpoint.received().lock().unwrap().refused.is_empty());
    let root = spans
        .iter()
        .find(|s| s.is_root() && s.attribute("messaging.message.id") == Some(&json!("m1")))
        .unwrap_or_else(|| panic!("the delivery's root span: {spans:#?}"));
    assert_eq!(root.name, "deliver");
    assert_eq!(root.attribute("agent_schedule.outcome"), Some(&json!("ran:succeeded")));
    assert_eq!(root.resource.get("service.name"), Some(&json!("runner")));
    let agent = spans
        .iter()
        .find(|s| s.name == "invoke_agent reminder")
        .expect("the agent's span");
    assert_eq!(agent.parent_span_id, root.span_id);
    let chat = spans
        .iter()
        .find(|s| s.name == format!("chat {}", tests::MODEL))
        .expect("the model call's span");
    assert_eq!(chat.parent_span_id, agent.span_id);
    assert!(spans.iter().all(|s| s.trace_id == root.trace_id), "one trace");
}

/// A run message for an occurrence two hours ahead, sent now (by hand or a
/// redrive), is acknowledged with nothing run, claimed or recorded, and
/// counted; the same occurrence sent by Scheduler at its time (SQS's
/// `SentTimestamp` then) runs.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_takes_a_delivery_as_of_its_sent_time_and_refuses_one_not_due_yet() {
    let s = RunStack::start().await.unwrap();
    let at = Utc::now() + chrono::Duration::hours(2);
    let task = reminder(at);
    s.store().insert_task(&task).await.unwrap();
    let api = started(&s).await;
    let body = run_message(&task, at, "forged");
    let now_ms = Utc::now().timestamp_millis();
    let response = api
        .invoke_ok(&sqs_event_sent(&[("early", &body)], now_ms))
        .await
        .unwrap();
    assert!(failures(&response).is_empty(), "acknowledged: {response}");
    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    assert!(s.run_record(&task.task_id, &occurrence).await.is_none());
    assert!(
        s.task_item(&task).await["claims"]
            .as_object()
            .is_none_or(|c| c.is_empty())
    );
    assert!(s.model.requests().await.is_empty());
    assert!(api.logs().unwrap().contains("RunsNotYet"), "counted");

    let body = run_message(&task, at, "e1");
    let on_time = api
        .invoke_ok(&sqs_event_sent(&[("m1", &body)], at.timestamp_millis() + 2_000))
        .await
        .unwrap();
    assert!(failures(&on_time).is_empty(), "{on_time}");
    let record = s.run_record(&task.task_id, &occurrence).await.expect("its run");
    assert_eq!(record["status"], "succeeded");
}

/// A person's monthly cap (`PERSON_MONTHLY_USD`) through the binary and its
/// role: the claim of a reminder checks its person's month in its
/// transaction (a `ConditionCheck`, which the role grants as
/// `dynamodb:ConditionCheckItem`). The first reminder spends past the cap;
/// the person's next is skipped `budget_reached`.
#[tokio::test(flavor = "multi_thread")]
async fn the_binary_holds_a_person_to_their_monthly_cap() {
    let s = RunStack::start().await.unwrap();
    let api = launch(&s)
        .set("PERSON_MONTHLY_USD", "0.0005")
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let at = Utc::now() - chrono::Duration::seconds(5);
    let first = reminder(at);
    s.store().insert_task(&first).await.unwrap();
    let mut second = reminder(at);
    second.task_id = shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", "the-second");
    s.store().insert_task(&second).await.unwrap();
    for (id, task) in [("m1", &first), ("m2", &second)] {
        let body = run_message(task, at, "e1");
        let answer = api.invoke_ok(&sqs_event(&[(id, &body)])).await.unwrap();
        assert_eq!(failures(&answer), Vec::<String>::new(), "{answer}");
    }
    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    let ran = s.run_record(&first.task_id, &occurrence).await.expect("a record");
    assert_eq!(ran["status"], "succeeded", "{ran}");
    assert!(ran["cost_usd"].as_f64().unwrap() >= 0.0005, "{ran}");
    let skipped = s.run_record(&second.task_id, &occurrence).await.expect("a record");
    assert_eq!(skipped["status"], "skipped", "{skipped}");
    assert!(
        skipped["reason"].as_str().unwrap().contains("its person's monthly cap"),
        "{skipped}"
    );
}

/// A gated tool call (SPEC §15) through the runner's binary under its
/// role: the run stops at `delete_issue` (annotated destructive) and waits
/// (the runner reads the occurrence's requests, a `Query`, and parks it in
/// one transaction); an admin approves it (the admin binary's own test
/// decides under its role); the resume, delivered twice, makes the call once.
#[tokio::test(flavor = "multi_thread")]
async fn a_gated_call_waits_under_the_runners_role_and_the_admins_approval_resumes_it_once() {
    use local::converse::Reply;
    use local::mcp_fixture::annotated_tool;
    let s = RunStack::start().await.unwrap();
    let gated = annotated_tool("delete_issue", json!({"destructiveHint": true}));
    let (issues, task) = s.triage(vec![gated], &["delete_issue"], &[]).await;
    let runner = started(&s).await;
    let admin = s.t.admin();
    let principal = json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]});

    let at = Utc::now() - chrono::Duration::seconds(5);
    s.model
        .script([Reply::tool("issues__delete_issue", json!({"id": 7}), 1000, 50)])
        .await;
    let answer = runner
        .invoke_ok(&sqs_event(&[("m1", &run_message(&task, at, "e1"))]))
        .await
        .unwrap();
    assert!(failures(&answer).is_empty(), "{answer}");
    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    let parked = s.run_record(&task.task_id, &occurrence).await.expect("a record");
    assert_eq!(parked["status"], "awaiting_approval", "{parked}");
    assert!(issues.state().read().await.calls.is_empty(), "not called unapproved");

    let listed = admin
        .handle(
            json!({"op": "approvals", "principal": principal, "task_id": task.task_id}),
            Utc::now(),
        )
        .await
        .unwrap();
    let request = listed["approvals"][0].clone();
    assert_eq!(request["arguments"], json!({"id": 7}), "{listed}");
    let approved = admin
        .handle(
            json!({"op": "approve_call", "principal": principal,
                   "request_id": request["request_id"], "expected_version": request["version"]}),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(approved["approval"]["state"], "approved", "{approved}");
    let resumes = s.t.take_run_messages().await;
    assert_eq!(resumes.len(), 1, "{resumes:?}");

    s.model.script([Reply::text("Deleted.", 1200, 10)]).await;
    let now_ms = Utc::now().timestamp_millis();
    for id in ["m2", "m3"] {
        let answer = runner
            .invoke_ok(&sqs_event_sent(&[(id, &resumes[0])], now_ms))
            .await
            .unwrap();
        assert!(failures(&answer).is_empty(), "{answer}");
    }
    let settled = s.run_record(&task.task_id, &occurrence).await.expect("a record");
    assert_eq!(settled["status"], "succeeded", "{settled}");
    assert_eq!(
        issues.state().read().await.calls,
        vec![("delete_issue".to_owned(), json!({"id": 7}))],
        "made once, redelivered or not"
    );
}

/// A crash of the real binary (SIGKILL) right after a tool answered and
/// before its next model call: the call was journaled, so the attempt that
/// takes the occurrence over past the lease reads it back and its model
/// goes on from it; the server sees the call once.
#[tokio::test(flavor = "multi_thread")]
async fn a_binary_killed_after_a_tool_answered_never_makes_the_call_again() {
    use local::converse::Reply;
    use local::mcp_fixture::tool;
    let s = RunStack::start().await.unwrap();
    let (issues, task) = s
        .triage(
            vec![tool("close_issue"), tool("label_issue")],
            &["close_issue", "label_issue"],
            &[],
        )
        .await;
    let mut runner = started(&s).await;
    let at = Utc::now() - chrono::Duration::seconds(5);
    // The model closes the issue, then hangs on its next call.
    s.model.script([Reply::EachToolOnce, Reply::Stall]).await;
    let body = run_message(&task, at, "e1");
    let hung = async {
        while s.model.requests().await.len() < 2 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let event = sqs_event(&[("m1", &body)]);
    tokio::select! {
        answered = runner.invoke_ok(&event) => panic!("the invocation answered: {answered:?}"),
        () = hung => {}
    }
    runner.process.kill().await.unwrap();
    let made = issues.state().read().await.call_metas.clone();
    assert_eq!(made.len(), 1, "{made:?}");

    // Redelivered past the lease: taken over, the journal read back.
    let past = s.lease_of(&task, at).await + chrono::Duration::seconds(1);
    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    s.model.script([Reply::EachToolOnce, Reply::EachToolOnce]).await;
    let got = s.runner().deliver("m2", &body, past, tests::deadline()).await.unwrap();
    assert_eq!(
        got,
        shared::app::run::Disposition::Ran(shared::domain::task::claim::RunStatus::Succeeded)
    );
    let calls: Vec<String> = issues
        .state()
        .read()
        .await
        .calls
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(
        calls,
        ["close_issue", "label_issue"],
        "the journaled call is not made again"
    );
    let record = s.run_record(&task.task_id, &occurrence).await.expect("a record");
    assert_eq!(record["attempts"], 2, "{record}");
    assert_eq!(record["usage"]["tool_calls"], 2, "{record}");
}
