//! Traces (SPEC §14): the spans of a connector run, of a create and of a
//! reconcile pass, read back from the CloudWatch OTLP endpoint's stand-in
//! (`local::otlp`) as the adapters' exporter sent them: names, parentage,
//! GenAI attributes, no content, and the `traceparent` the MCP fixture
//! received in `tools/call`'s `_meta`.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::Utc;
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::otlp::{OtlpEndpoint, ReceivedSpan};
use serde_json::{Value, json};
use shared::app::reconcile::{Pass, Work};
use shared::app::run::Disposition;
use shared::config::TracesConfig;
use shared::domain::run::agent::RUN_ID_META;
use shared::domain::run::occurrence::run_id;
use shared::domain::task::AgentPin;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;
use shared::trace::Traced;
use shared::trace::Tracer;
use tests::{MODEL, RunStack, TestStack, connector_task, create_request, install, installed, run_message};

/// Strings a run handles that no span may carry: a prompt argument (so
/// the prompt text), a tool's arguments (echoed in its result) and the
/// model's output.
const ARGUMENT: &str = "acme/argument-canary";
const TOOL_INPUT: &str = "tool-input-canary";
const OUTPUT: &str = "model-output-canary";

/// The adapters' tracer, sending to `endpoint` as `service`.
fn tracer(sdk: &aws_config::SdkConfig, endpoint: &OtlpEndpoint, service: &str) -> Tracer {
    let config = TracesConfig {
        endpoint: Some(endpoint.url().parse().unwrap()),
        service_name: service.to_owned(),
    };
    shared::adapters::telemetry::tracer(sdk, &config)
}

/// The spans of the trace whose root has `key` = `value`.
fn trace_of(spans: &[ReceivedSpan], key: &str, value: &str) -> Vec<ReceivedSpan> {
    let roots: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|s| s.is_root() && s.attribute(key) == Some(&json!(value)))
        .collect();
    assert_eq!(roots.len(), 1, "one root with {key} = {value}: {spans:#?}");
    let trace = &roots[0].trace_id;
    spans.iter().filter(|s| &s.trace_id == trace).cloned().collect()
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one `{name}` span: {spans:#?}");
    found[0]
}

/// Everything a span says, as text: name, attributes, status, resource.
fn said(span: &ReceivedSpan) -> String {
    format!(
        "{} {} {} {}",
        span.name,
        serde_json::to_string(&span.attributes).unwrap(),
        span.status_message,
        serde_json::to_string(&span.resource).unwrap()
    )
}

fn assert_no_content(spans: &[ReceivedSpan], canaries: &[&str]) {
    for span in spans {
        let text = said(span);
        for canary in canaries {
            assert!(!text.contains(canary), "span `{}` carries content: {text}", span.name);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_run_is_one_trace_from_delivery_through_each_model_and_tool_call() {
    let s = RunStack::start().await.unwrap();
    let endpoint = OtlpEndpoint::start().await.unwrap();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1}),
            &[("repo", true)],
            "Summarise this week's issues in {{repo}}.",
        )],
        tools: vec![tool("list_issues"), tool("post_summary")],
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&install("ins_1", "issues", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let mut task = connector_task("issues", "weekly_summary", &["list_issues"], &[("repo", ARGUMENT)]);
    task.spec.agent = Some(AgentPin {
        id: "agt_1".into(),
        version: "7".into(),
        policy_profile: "standard".into(),
    });
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({"text": TOOL_INPUT}), 500, 50),
            Reply::text(OUTPUT, 800, 40),
        ])
        .await;
    let tracer = tracer(&s.t.aws.sdk, &endpoint, "runner");
    let runner = s.runner().with_tracer(tracer.clone());
    let at = Utc::now() - chrono::Duration::seconds(5);

    let got = runner
        .deliver("m-traced", &run_message(&task, at, "e1"), Utc::now(), tests::deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    assert!(endpoint.spans().is_empty(), "nothing leaves before the flush");
    tracer.flush(Duration::from_secs(10)).await;

    let received = endpoint.received().lock().unwrap().refused.clone();
    assert!(received.is_empty(), "the endpoint refused: {received:?}");
    let spans = trace_of(&endpoint.spans(), "messaging.message.id", "m-traced");

    // Names and parentage: the delivery is the root, the agent under it,
    // every MCP request, model call and tool call under the agent.
    let root = one(&spans, "deliver");
    assert!(root.is_root());
    assert_eq!(root.kind, 5, "a consumer span");
    let agent = one(&spans, "invoke_agent issues/weekly_summary");
    assert_eq!(agent.parent_span_id, root.span_id);
    let chats = named(&spans, &format!("chat {MODEL}"));
    assert_eq!(chats.len(), 2, "one span per Converse call");
    let tool_span = one(&spans, "execute_tool list_issues");
    for child in chats.iter().copied().chain([
        tool_span,
        one(&spans, "initialize"),
        one(&spans, "prompts/get weekly_summary"),
        one(&spans, "tools/list"),
    ]) {
        assert_eq!(
            child.parent_span_id, agent.span_id,
            "`{}` is the agent's child",
            child.name
        );
    }
    assert_eq!(spans.len(), 8, "{spans:#?}");

    // The delivery's ids and outcome.
    assert_eq!(
        root.attribute("agent_schedule.task_id"),
        Some(&json!(task.task_id.as_str()))
    );
    assert_eq!(root.attribute("agent_schedule.workspace"), Some(&json!("ws_1")));
    assert_eq!(root.attribute("agent_schedule.outcome"), Some(&json!("ran:succeeded")));
    assert_eq!(root.attribute("messaging.system"), Some(&json!("aws_sqs")));

    // GenAI attributes.
    let want_agent: BTreeMap<&str, Value> = [
        ("gen_ai.operation.name", json!("invoke_agent")),
        ("gen_ai.provider.name", json!("aws.bedrock")),
        ("gen_ai.agent.name", json!("issues/weekly_summary")),
        ("gen_ai.agent.id", json!("agt_1")),
        ("gen_ai.agent.version", json!("7")),
        ("gen_ai.request.model", json!(MODEL)),
        ("gen_ai.conversation.id", json!(run_id(task.task_id.as_str(), at))),
        ("gen_ai.usage.input_tokens", json!(1300)),
        ("gen_ai.usage.output_tokens", json!(90)),
    ]
    .into();
    for (key, value) in &want_agent {
        assert_eq!(agent.attribute(key), Some(value), "invoke_agent's {key}");
    }
    let by_reason = |reason: &str| {
        *chats
            .iter()
            .find(|c| c.attribute("gen_ai.response.finish_reasons") == Some(&json!([reason])))
            .unwrap_or_else(|| panic!("a chat that ended in {reason}: {chats:#?}"))
    };
    for (chat, input, output) in [(by_reason("tool_use"), 500, 50), (by_reason("end_turn"), 800, 40)] {
        assert_eq!(chat.kind, 3, "a client span");
        assert_eq!(chat.attribute("gen_ai.operation.name"), Some(&json!("chat")));
        assert_eq!(chat.attribute("gen_ai.provider.name"), Some(&json!("aws.bedrock")));
        assert_eq!(chat.attribute("gen_ai.request.model"), Some(&json!(MODEL)));
        assert!(chat.attribute("gen_ai.request.max_tokens").is_some_and(Value::is_i64));
        assert_eq!(chat.attribute("gen_ai.usage.input_tokens"), Some(&json!(input)));
        assert_eq!(chat.attribute("gen_ai.usage.output_tokens"), Some(&json!(output)));
    }
    let requests = s.model.requests().await;
    let call_id = requests[1].1["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap().iter())
        .find_map(|b| b["toolResult"]["toolUseId"].as_str())
        .unwrap()
        .to_owned();
    for (key, value) in [
        ("gen_ai.operation.name", json!("execute_tool")),
        ("gen_ai.tool.name", json!("list_issues")),
        ("gen_ai.tool.call.id", json!(call_id)),
        ("gen_ai.tool.type", json!("extension")),
        ("mcp.method.name", json!("tools/call")),
        ("server.address", json!("127.0.0.1")),
    ] {
        assert_eq!(tool_span.attribute(key), Some(&value), "execute_tool's {key}");
    }
    assert!(tool_span.attribute("mcp.protocol.version").is_some());
    assert_eq!(tool_span.status_code, 0, "the call succeeded");
    assert_eq!(root.resource.get("service.name"), Some(&json!("runner")));
    assert_no_content(&spans, &[ARGUMENT, TOOL_INPUT, OUTPUT, "Summarise"]);

    // The fixture received the execute_tool span's W3C context beside the run id.
    let metas = fixture.state().read().await.call_metas.clone();
    assert_eq!(metas.len(), 1);
    let meta = metas[0].clone().expect("a _meta");
    assert_eq!(
        meta["traceparent"],
        json!(format!("00-{}-{}-01", tool_span.trace_id, tool_span.span_id)),
        "{meta}"
    );
    assert_eq!(meta[RUN_ID_META], json!(run_id(task.task_id.as_str(), at)));

    // Signed for the endpoint's service.
    let authorizations = endpoint.received().lock().unwrap().authorizations.clone();
    assert!(
        authorizations
            .iter()
            .all(|a| a.contains("/us-east-1/xray/aws4_request")),
        "{authorizations:?}"
    );

    // Off (the default), the same run sends no trace context.
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({}), 10, 5),
            Reply::text("ok", 10, 5),
        ])
        .await;
    let later = at + chrono::Duration::minutes(5);
    let got = s.deliver_once(&task, later).await;
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let metas = fixture.state().read().await.call_metas.clone();
    let untraced = metas[1].clone().expect("a _meta");
    assert!(
        untraced.get("traceparent").is_none() && untraced.get("tracestate").is_none(),
        "{untraced}"
    );
    assert_eq!(untraced[RUN_ID_META], json!(run_id(task.task_id.as_str(), later)));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_never_answers_delays_the_flush_only_to_its_bound() {
    let s = RunStack::start().await.unwrap();
    let endpoint = OtlpEndpoint::hanging().await.unwrap();
    let (task, at) = s.due_reminder().await;
    s.model.script([Reply::text("Time to call!", 100, 10)]).await;
    let tracer = tracer(&s.t.aws.sdk, &endpoint, "runner");
    let runner = s.runner().with_tracer(tracer.clone());
    let got = runner
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), tests::deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    // Returns although the endpoint never answers; the run is recorded.
    tracer.flush(Duration::from_millis(300)).await;
    let occurrence = shared::domain::run::occurrence::occurrence_key(at);
    assert_eq!(
        s.run_record(&task.task_id, &occurrence).await.unwrap()["status"],
        "succeeded"
    );
    assert!(endpoint.spans().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn create_and_a_reconcile_pass_are_traced_too() {
    let t = TestStack::start().await.unwrap();
    let endpoint = OtlpEndpoint::start().await.unwrap();

    let create = t.create_app().with_tracer(tracer(&t.aws.sdk, &endpoint, "create"));
    let answer = create
        .handle(
            create_request("k-traced", Utc::now(), chrono::Duration::hours(2)),
            Utc::now(),
        )
        .await
        .unwrap()
        .to_json();
    let task_id = answer["task"]["task_id"].as_str().unwrap().to_owned();
    create.tracer().flush(Duration::from_secs(10)).await;
    let spans = trace_of(&endpoint.spans(), "agent_schedule.task_id", &task_id);
    assert_eq!(spans.len(), 1, "{spans:#?}");
    assert_eq!(spans[0].name, "create");
    assert_eq!(spans[0].kind, 2, "a server span");
    assert_eq!(spans[0].attribute("agent_schedule.outcome"), Some(&json!("created")));
    assert_eq!(spans[0].resource.get("service.name"), Some(&json!("create")));
    assert_no_content(&spans, &["Call mom", "call mom about Sunday"]);

    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1,
                   "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
                   "tools": ["list_issues"],
                   "limits": {"max_turns": 8, "max_tool_calls": 10, "max_output_tokens": 2000, "timeout_seconds": 120},
                   "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[],
            "Summarise the week's issues.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    let reconciler = t.reconciler().with_tracer(tracer(&t.aws.sdk, &endpoint, "reconcile"));
    let body = serde_json::to_string(&Work::Event(shared::app::reconcile::Stamped::new(
        installed("ins_1", "issues", &fixture.url(), "workspace"),
        None,
    )))
    .unwrap();
    let summary = reconciler.work(&body, Utc::now()).await.unwrap();
    assert_eq!(summary.tasks_written, 1);
    reconciler.tracer().flush(Duration::from_secs(10)).await;
    let spans = trace_of(&endpoint.spans(), "agent_schedule.install_id", "ins_1");
    let root = one(&spans, "reconcile connector.installed");
    assert_eq!(root.attribute("agent_schedule.workspace"), Some(&json!("ws_1")));
    assert_eq!(root.attribute("agent_schedule.tasks_written"), Some(&json!(1)));
    assert_eq!(root.attribute("agent_schedule.declarations_refused"), Some(&json!(0)));
    assert_eq!(root.resource.get("service.name"), Some(&json!("reconcile")));
    for method in ["initialize", "prompts/list", "tools/list"] {
        let child = one(&spans, method);
        assert_eq!(child.parent_span_id, root.span_id, "{method} is the pass's child");
        assert_eq!(child.attribute("mcp.method.name"), Some(&json!(method)));
        assert_eq!(child.kind, 3, "a client span");
    }
    assert_eq!(spans.len(), 4, "{spans:#?}");
    assert_no_content(&spans, &["Summarise"]);

    // The missed-occurrence check is a work item too, and so is each
    // shard's check it queues, with what it found.
    let check = serde_json::to_string(&Work::Pass(Pass::Overdue)).unwrap();
    reconciler.work(&check, Utc::now()).await.unwrap();
    let (_, shard) = t.take_work().await.into_iter().next().expect("a shard's check queued");
    let summary = reconciler.work(&shard, Utc::now()).await.unwrap();
    reconciler.tracer().flush(Duration::from_secs(10)).await;
    let spans = endpoint.spans();
    assert!(one(&spans, "reconcile overdue check").is_root());
    let shard = one(&spans, "reconcile overdue shard");
    assert!(shard.is_root());
    assert_eq!(
        shard.attribute("agent_schedule.occurrences_overdue"),
        Some(&json!(summary.overdue.expect("the check's count")))
    );
}

/// An endpoint that refuses the request's access again and again (here:
/// unsigned, as for a role without credentials) is asked a few times per
/// process, not per flush.
#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_refuses_the_spans_is_asked_a_few_times_per_process() {
    let endpoint = OtlpEndpoint::start().await.unwrap();
    let unsigned = aws_config::SdkConfig::builder()
        .region(aws_config::Region::new("us-east-1"))
        .behavior_version(aws_config::BehaviorVersion::latest())
        .build();
    let tracer = tracer(&unsigned, &endpoint, "runner");
    for id in ["m1", "m2", "m3", "m4", "m5"] {
        tracer.delivery(id).end();
        tracer.flush(Duration::from_secs(10)).await;
    }
    let received = endpoint.received().lock().unwrap();
    assert_eq!(
        received.refused.len(),
        shared::adapters::telemetry::REFUSALS_BEFORE_STOP as usize,
        "asked until it stops: {:?}",
        received.refused
    );
    assert!(received.refused[0].contains("Authorization"), "{:?}", received.refused);
    assert!(received.spans.is_empty());
}

/// One refusal of access (a credential's hiccup) does not switch a warm
/// process's traces off: the next flush is sent and taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_request_once_does_not_stop_the_traces() {
    let endpoint = OtlpEndpoint::start().await.unwrap();
    let sdk = local::sdk_config(&endpoint.url()).await;
    let tracer = tracer(&sdk, &endpoint, "runner");
    endpoint.deny_next(1);
    for id in ["m1", "m2", "m3"] {
        tracer.delivery(id).end();
        tracer.flush(Duration::from_secs(10)).await;
    }
    let received = endpoint.received().lock().unwrap();
    assert_eq!(received.refused.len(), 1, "{:?}", received.refused);
    assert_eq!(received.spans.len(), 2, "the two later flushes are taken");
}

/// A flush larger than the endpoint takes (413) is sent again in halves
/// until each part fits; a server's long tool name is cut in the span's
/// name and attribute.
#[tokio::test(flavor = "multi_thread")]
async fn a_flush_too_large_for_the_endpoint_is_sent_in_parts_and_names_are_capped() {
    use shared::adapters::telemetry::{MAX_NAME_CHARS, MAX_VALUE_CHARS};
    let endpoint = OtlpEndpoint::start().await.unwrap();
    let sdk = local::sdk_config(&endpoint.url()).await;
    let tracer = tracer(&sdk, &endpoint, "runner");
    endpoint.limit_body(4_000);
    for i in 0..64 {
        tracer.delivery(&format!("m{i}")).end();
    }
    let long = "t".repeat(10_000);
    tracer.execute_tool(&long, "call_1").end();
    tracer.flush(Duration::from_secs(30)).await;
    let received = endpoint.received().lock().unwrap();
    assert!(
        received.refused.iter().any(|why| why.contains("more than 4000")),
        "the whole flush was too large: {:?}",
        received.refused
    );
    assert_eq!(received.spans.len(), 65, "every span, in parts");
    let tool = received
        .spans
        .iter()
        .find(|s| s.name.starts_with("execute_tool"))
        .expect("the tool's span");
    assert_eq!(tool.name.chars().count(), MAX_NAME_CHARS);
    let name = tool.attribute("gen_ai.tool.name").and_then(|v| v.as_str()).unwrap();
    assert_eq!(name.chars().count(), MAX_VALUE_CHARS);
}
