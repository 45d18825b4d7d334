//! The strict Converse stand-in and the runner's MCP-to-Converse mapping:
//! what Bedrock refuses is refused here too, and what real servers send
//! (the project's fixture shaped like them, server-everything, the Python
//! `mcp` SDK server) reaches the stand-in as Bedrock takes it.

use chrono::{Duration, Utc};
use local::converse::{Fault, Reply, Window, valid_tool_name};
use local::mcp_fixture::{FixtureState, McpFixture, PNG_1X1, scheduled_prompt, tool, undescribed_tool};
use rmcp::model::{CallToolResult, ContentBlock, PromptMessage, ResourceContents, Role as McpRole};
use serde_json::{Value, json};
use shared::adapters::bedrock::BedrockModel;
use shared::app::run::Disposition;
use shared::domain::run::agent::{
    Block, EMPTY_RESULT, Message, ModelRequest, PROMPT_OPENING, Role, ToolSpec, offered_name,
};
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;
use shared::ports::{Model, ModelErrorKind};
use tests::{RunStack, connector_task, install, run_message};

fn user(text: &str) -> Message {
    Message::user_text(text)
}

fn assistant(content: Vec<Block>) -> Message {
    Message {
        role: Role::Assistant,
        content,
    }
}

fn spec(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: json!({"type": "object"}),
    }
}

fn request(messages: Vec<Message>, tools: Vec<ToolSpec>) -> ModelRequest {
    ModelRequest {
        system: "system".into(),
        messages,
        tools,
        max_tokens: 100,
        cache: Default::default(),
    }
}

fn tool_use(id: &str) -> Block {
    Block::ToolUse {
        id: id.into(),
        name: "t".into(),
        input: json!({}),
    }
}

fn tool_answer(id: &str, content: Vec<Block>) -> Message {
    Message {
        role: Role::User,
        content: vec![Block::ToolResult {
            id: id.into(),
            content,
            is_error: false,
        }],
    }
}

/// Checks a request body the runner sent as the stand-in does, but here
/// in the test, so a test fails when the runner's output loosens.
fn assert_alternates_from_the_user(body: &Value) {
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "user", "{body}");
    for pair in messages.windows(2) {
        assert_ne!(pair[0]["role"], pair[1]["role"], "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stand_in_refuses_what_bedrock_refuses_with_its_error() {
    let s = RunStack::start().await.unwrap();
    let model = BedrockModel::from_sdk(&s.model_sdk);
    let ok_tools = || vec![spec("t", "a tool")];
    let cases: Vec<(&str, ModelRequest)> = vec![
        (
            "assistant first",
            request(vec![assistant(vec![Block::Text("hi".into())]), user("go")], vec![]),
        ),
        (
            "two user messages in a row",
            request(vec![user("a"), user("b")], vec![]),
        ),
        ("a blank text block", request(vec![user("  \n")], vec![])),
        (
            "a dotted tool name",
            request(vec![user("go")], vec![spec("schedule.create", "d")]),
        ),
        (
            "a 65-character tool name",
            request(vec![user("go")], vec![spec(&"t".repeat(65), "d")]),
        ),
        (
            "two tools of one name",
            request(vec![user("go")], vec![spec("t", "d"), spec("t", "e")]),
        ),
        ("an empty description", request(vec![user("go")], vec![spec("t", "")])),
        (
            "a toolUse left unanswered",
            request(
                vec![user("go"), assistant(vec![tool_use("u1")]), user("and?")],
                ok_tools(),
            ),
        ),
        (
            "a toolResult answering nothing",
            request(
                vec![
                    user("go"),
                    assistant(vec![Block::Text("ok".into())]),
                    tool_answer("u9", vec![Block::Text("r".into())]),
                ],
                ok_tools(),
            ),
        ),
        (
            "an empty tool result",
            request(
                vec![user("go"), assistant(vec![tool_use("u1")]), tool_answer("u1", vec![])],
                ok_tools(),
            ),
        ),
        (
            "a blank tool result",
            request(
                vec![
                    user("go"),
                    assistant(vec![tool_use("u1")]),
                    tool_answer("u1", vec![Block::Text(String::new())]),
                ],
                ok_tools(),
            ),
        ),
        (
            "tool blocks without a toolConfig",
            request(
                vec![
                    user("go"),
                    assistant(vec![tool_use("u1")]),
                    tool_answer("u1", vec![Block::Text("r".into())]),
                ],
                vec![],
            ),
        ),
        (
            "maxTokens of 0",
            ModelRequest {
                max_tokens: 0,
                ..request(vec![user("go")], vec![])
            },
        ),
        (
            "maxTokens above the model's own ceiling",
            ModelRequest {
                max_tokens: shared::domain::run::model::max_output_tokens(tests::MODEL) + 1,
                ..request(vec![user("go")], vec![])
            },
        ),
        (
            "a tool schema without type object at its root",
            request(
                vec![user("go")],
                vec![ToolSpec {
                    input_schema: json!({}),
                    ..spec("t", "d")
                }],
            ),
        ),
        (
            "a root anyOf schema",
            request(
                vec![user("go")],
                vec![ToolSpec {
                    input_schema: json!({"anyOf": [{"type": "object"}, {"type": "string"}]}),
                    ..spec("t", "d")
                }],
            ),
        ),
        (
            "an assistant message last (a prefill)",
            request(vec![user("go"), assistant(vec![Block::Text("Sure, ".into())])], vec![]),
        ),
        (
            "21 images in one request",
            request(
                vec![Message {
                    role: Role::User,
                    content: (0..21)
                        .map(|_| Block::Image {
                            format: shared::domain::run::agent::ImageFormat::Png,
                            data: base64_png(),
                        })
                        .collect(),
                }],
                vec![],
            ),
        ),
        (
            "an image 8,001 pixels wide",
            request(
                vec![Message {
                    role: Role::User,
                    content: vec![Block::Image {
                        format: shared::domain::run::agent::ImageFormat::Png,
                        data: png_header(8_001, 100),
                    }],
                }],
                vec![],
            ),
        ),
        (
            "png bytes sent as jpeg",
            request(
                vec![Message {
                    role: Role::User,
                    content: vec![Block::Image {
                        format: shared::domain::run::agent::ImageFormat::Jpeg,
                        data: base64_png(),
                    }],
                }],
                vec![],
            ),
        ),
    ];
    for (i, (what, bad)) in cases.iter().enumerate() {
        let err = model.converse(tests::MODEL, bad).await.expect_err(what);
        assert_eq!(err.kind, ModelErrorKind::Other, "{what}");
        assert!(
            err.message.starts_with("ValidationException"),
            "{what}: {}",
            err.message
        );
        assert_eq!(
            s.model.refused().await.len(),
            i + 1,
            "{what} is kept for the test to read"
        );
    }
    assert!(
        s.model.requests().await.is_empty(),
        "nothing refused reached the script"
    );

    // The same conversations, made valid, pass.
    s.model.script([Reply::text("fine", 10, 1)]).await;
    let good = request(
        vec![
            user("go"),
            assistant(vec![tool_use("u1")]),
            tool_answer(
                "u1",
                vec![
                    Block::Json(json!({"a": 1})),
                    Block::Image {
                        format: shared::domain::run::agent::ImageFormat::Png,
                        data: base64_png(),
                    },
                ],
            ),
        ],
        ok_tools(),
    );
    let reply = model.converse(tests::MODEL, &good).await.unwrap();
    assert_eq!(reply.message.text(), "fine");
    let (_, sent) = &s.model.requests().await[0];
    let result = &sent["messages"][2]["content"][0]["toolResult"];
    assert_eq!(result["content"][0]["json"], json!({"a": 1}));
    assert_eq!(result["content"][1]["image"]["format"], "png");
    assert!(
        result["content"][1]["image"]["source"]["bytes"].is_string(),
        "the SDK sends image bytes as base64 in JSON: {result}"
    );
}

fn base64_png() -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(PNG_1X1).unwrap()
}

/// A PNG's signature and header chunk: what Bedrock reads an image's size from.
fn png_header(width: u32, height: u32) -> Vec<u8> {
    let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
    png.extend(b"IHDR");
    png.extend(width.to_be_bytes());
    png.extend(height.to_be_bytes());
    png.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    png
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stand_in_throttles_above_its_rate_and_faults_on_demand() {
    let s = RunStack::start().await.unwrap();
    let model = BedrockModel::from_sdk(&s.model_sdk);
    let hello = request(vec![user("hello")], vec![]);
    s.model.throttle(Some((1, Window::Manual))).await;
    model.converse(tests::MODEL, &hello).await.unwrap();
    let err = model.converse(tests::MODEL, &hello).await.unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Throttled);
    assert!(err.message.starts_with("ThrottlingException"), "{}", err.message);
    assert_eq!(s.model.faulted().await, 1, "one attempt: the SDK's own retries are off");
    s.model.next_window().await;
    model.converse(tests::MODEL, &hello).await.unwrap();
    s.model.throttle(None).await;

    for (fault, code) in [
        (Fault::ServiceUnavailable, "ServiceUnavailableException"),
        (Fault::ModelNotReady, "ModelNotReadyException"),
        (Fault::Throttling, "ThrottlingException"),
    ] {
        s.model.fault(Some(fault)).await;
        let err = model.converse(tests::MODEL, &hello).await.unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::Throttled, "{code}");
        assert!(err.message.starts_with(code), "{}", err.message);
    }
    s.model.fault(None).await;
    model.converse(tests::MODEL, &hello).await.unwrap();
    assert_eq!(s.model.requests().await.len(), 3);
    assert_eq!(s.model.faulted().await, 4);
}

/// Failures that are "not now" (SPEC §13: load is not a fault): a 500
/// `InternalServerException`, the `AccessDeniedException` a fresh account's
/// first calls answer while its model subscription completes, and no answer
/// at all (nothing listening, or a connection reset) are load that does
/// not slow the pace; a reminder meeting them goes back to the queue
/// whole, then runs.
#[tokio::test(flavor = "multi_thread")]
async fn server_errors_a_fresh_accounts_access_and_no_answer_are_retried_not_failed() {
    let s = RunStack::start().await.unwrap();
    let model = BedrockModel::from_sdk(&s.model_sdk);
    let hello = request(vec![user("hello")], vec![]);
    for (fault, code) in [
        (Fault::InternalServer, "InternalServerException"),
        (Fault::AccessDenied, "AccessDeniedException"),
    ] {
        s.model.fault(Some(fault)).await;
        let err = model.converse(tests::MODEL, &hello).await.unwrap_err();
        assert_eq!(err.kind, ModelErrorKind::Unavailable, "{code}");
        assert!(err.message.starts_with(code), "{}", err.message);
    }
    s.model.fault(None).await;
    // Nothing listening: the request is sent and never answered.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let unanswered = BedrockModel::from_sdk(&s.model_sdk.to_builder().endpoint_url(nowhere).build());
    let err = unanswered.converse(tests::MODEL, &hello).await.unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Unavailable, "{}", err.message);
    // A connection reset once the request is read.
    let resetting = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let reset_at = format!("http://{}", resetting.local_addr().unwrap());
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        while let Ok((mut conn, _)) = resetting.accept().await {
            let mut head = [0u8; 1024];
            let _ = conn.read(&mut head).await;
            let _ = conn.set_zero_linger();
            drop(conn);
        }
    });
    let reset = BedrockModel::from_sdk(&s.model_sdk.to_builder().endpoint_url(reset_at).build());
    let err = reset.converse(tests::MODEL, &hello).await.unwrap_err();
    assert_eq!(err.kind, ModelErrorKind::Unavailable, "{}", err.message);

    // A reminder while the account's access is still being given: back to
    // the queue whole, nothing recorded; once it is given, it runs.
    given_back_then_run(&s, Fault::AccessDenied).await;
}

/// A due reminder delivered while the model answers `fault`: back to the
/// queue whole, nothing recorded; delivered again once the fault is gone,
/// it runs. Answers the reminder and its occurrence.
async fn given_back_then_run(s: &RunStack, fault: Fault) -> (shared::domain::task::Task, chrono::DateTime<Utc>) {
    let at = Utc::now() - chrono::Duration::seconds(5);
    let reminder = tests::reminder(at);
    s.insert(&reminder).await;
    s.model.fault(Some(fault)).await;
    let got = s
        .runner()
        .deliver("m1", &run_message(&reminder, at, "e1"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::ReturnToQueue, "{fault:?}");
    assert!(s.run_record(&reminder.task_id, &occurrence_key(at)).await.is_none());
    s.model.fault(None).await;
    let got = s
        .runner()
        .deliver("m1", &run_message(&reminder, at, "e2"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded), "{fault:?}");
    (reminder, at)
}

/// An answer that stalls (the request read, nothing sent back) ends at the
/// run's time: before any tool call the occurrence goes back to the queue
/// whole, nothing recorded and its claim given back, and its next delivery
/// runs it, with one outcome.
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_model_answer_gives_the_occurrence_back_and_it_runs_once() {
    let s = RunStack::start().await.unwrap();
    let (reminder, at) = given_back_then_run(&s, Fault::Stalled).await;
    assert_eq!(s.model.faulted().await, 1, "the one call that stalled");
    let record = s
        .run_record(&reminder.task_id, &occurrence_key(at))
        .await
        .expect("its one outcome");
    assert_eq!(record["status"], "succeeded");
    let again = s
        .runner()
        .deliver("m1", &run_message(&reminder, at, "e2"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert!(
        !matches!(again, Disposition::Ran(_)),
        "a redelivery runs nothing: {again:?}"
    );
}

const DOTTED: &str = "repos.issues.list";

fn long_name() -> String {
    format!("report_{}", "x".repeat(93))
}

/// The fixture, shaped like real servers: a prompt with an assistant first,
/// runs of one role, an image, an embedded resource, audio and a resource
/// link; tools with a dotted and a 100-character name, without a
/// description, with an empty and a structured result.
async fn realistic_fixture() -> McpFixture {
    let prompt = vec![
        PromptMessage::new_text(McpRole::Assistant, "I am the release assistant."),
        PromptMessage::new_text(McpRole::Assistant, ""),
        PromptMessage::new_text(McpRole::User, "Here is this week's board:"),
        PromptMessage::new(McpRole::User, ContentBlock::image(PNG_1X1, "image/png")),
        PromptMessage::new(McpRole::User, ContentBlock::image("PHN2Zz48L3N2Zz4=", "image/svg+xml")),
        PromptMessage::new(
            McpRole::User,
            ContentBlock::embedded_text("file:///notes.md", "Ship on Friday."),
        ),
        PromptMessage::new(
            McpRole::User,
            ContentBlock::resource(ResourceContents::BlobResourceContents {
                uri: "file:///build.tar".into(),
                mime_type: Some("application/x-tar".into()),
                blob: "AAAA".into(),
                meta: None,
            }),
        ),
        PromptMessage::new(McpRole::User, ContentBlock::audio("AAAA", "audio/wav")),
        PromptMessage::new_text(McpRole::Assistant, "Understood."),
        PromptMessage::new_text(McpRole::User, "Now list the issues and report."),
    ];
    let mut answers = std::collections::BTreeMap::new();
    answers.insert("empty".to_owned(), CallToolResult::success(vec![]));
    let mut structured = CallToolResult::structured(json!({"open": 3, "closed": 7}));
    structured.is_error = Some(false);
    answers.insert(DOTTED.to_owned(), structured);
    answers.insert(
        long_name(),
        CallToolResult::error(vec![ContentBlock::text("the report service is down")]),
    );
    McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("weekly", json!({"version": 1}), &[], "unused")],
        tools: vec![tool(DOTTED), tool(&long_name()), undescribed_tool("empty")],
        prompt_messages: [("weekly".to_owned(), prompt)].into(),
        tool_answers: answers,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_a_server_shaped_like_real_ones_is_sent_as_bedrock_takes_it() {
    let s = RunStack::start().await.unwrap();
    let fixture = realistic_fixture().await;
    s.store()
        .put_install(&install(
            "ins_1",
            "releases.v2",
            &fixture.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    let long = long_name();
    let mut task = connector_task("releases.v2", "weekly", &[DOTTED, &long, "empty"], &[]);
    task.spec.limits.max_tool_calls = 5;
    task.spec.limits.max_turns = 6;
    s.insert(&task).await;
    let names = [DOTTED, long.as_str(), "empty"].map(|t| offered_name("releases.v2", t));
    s.model
        .script([
            Reply::tool(&names[0], json!({}), 100, 10),
            Reply::tool(&names[1], json!({}), 100, 10),
            Reply::tool(&names[2], json!({}), 100, 10),
            Reply::text("Reported.", 100, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s.deliver_once(&task, at).await;
    let refused = s.model.refused().await;
    assert!(
        refused.is_empty(),
        "{:?}",
        refused.iter().map(|r| &r.message).collect::<Vec<_>>()
    );
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let requests = s.model.requests().await;
    assert_eq!(requests.len(), 4);
    let first = &requests[0].1;
    assert_alternates_from_the_user(first);
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], json!([{"text": PROMPT_OPENING}]));
    assert_eq!(messages[1]["content"], json!([{"text": "I am the release assistant."}]));
    let board = messages[2]["content"].as_array().unwrap();
    assert_eq!(board[0]["text"], "Here is this week's board:");
    assert_eq!(board[1]["image"]["format"], "png");
    let texts: Vec<&str> = board.iter().filter_map(|b| b["text"].as_str()).collect();
    assert!(texts.iter().any(|t| t.contains("image/svg+xml")), "{texts:?}");
    assert!(
        texts.contains(&"Resource file:///notes.md:\nShip on Friday."),
        "{texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("file:///build.tar")), "{texts:?}");
    assert!(texts.iter().any(|t| t.contains("audio/wav")), "{texts:?}");
    assert_eq!(messages[3]["content"], json!([{"text": "Understood."}]));
    assert_eq!(messages.len(), 5);

    let tools = first["toolConfig"]["tools"].as_array().unwrap();
    let offered: Vec<&str> = tools.iter().map(|t| t["toolSpec"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered.len(), 3);
    for name in &offered {
        assert!(valid_tool_name(name), "{name}");
    }
    let empty = tools
        .iter()
        .find(|t| t["toolSpec"]["name"] == names[2].as_str())
        .unwrap();
    assert_eq!(
        empty["toolSpec"]["description"], "empty",
        "the name stands in for a missing description"
    );

    // The results: structured as JSON, an error with its status, empty said so.
    let last = &requests[3].1["messages"];
    let result = |i: usize| last[i]["content"][0]["toolResult"].clone();
    assert_eq!(result(6)["content"], json!([{"json": {"open": 3, "closed": 7}}]));
    assert_eq!(result(6)["status"], "success");
    assert_eq!(result(8)["status"], "error");
    assert_eq!(result(8)["content"], json!([{"text": "the report service is down"}]));
    assert_eq!(result(10)["content"], json!([{"text": EMPTY_RESULT}]));
    // The server was called by its own names.
    let calls: Vec<String> = fixture.state().read().await.calls.iter().map(|c| c.0.clone()).collect();
    assert_eq!(calls, vec![DOTTED.to_owned(), long, "empty".to_owned()]);
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["usage"]["tool_calls"], 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everythings_resource_prompt_and_rich_tools_go_through_the_strict_stand_in() {
    let server = local::everything::ServerEverything::start().unwrap();
    let s = RunStack::start().await.unwrap();
    s.store()
        .put_install(&install("ins_1", "everything", &server.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let tools = ["get-tiny-image", "get-structured-content", "get-resource-links"];
    let mut task = connector_task(
        "everything",
        "resource-prompt",
        &tools,
        &[("resourceType", "Text"), ("resourceId", "1")],
    );
    task.spec.limits.max_turns = 5;
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("everything__get-tiny-image", json!({}), 100, 10),
            Reply::tool(
                "everything__get-structured-content",
                json!({"location": "Chicago"}),
                100,
                10,
            ),
            Reply::tool("everything__get-resource-links", json!({"count": 2}), 100, 10),
            Reply::text("Analysed.", 100, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s.deliver_once(&task, at).await;
    let refused = s.model.refused().await;
    assert!(
        refused.is_empty(),
        "{:?}",
        refused.iter().map(|r| &r.message).collect::<Vec<_>>()
    );
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let requests = s.model.requests().await;
    let last = &requests.last().unwrap().1;
    assert_alternates_from_the_user(last);
    let messages = last["messages"].as_array().unwrap();
    // Two user messages in a row from the server, merged; the resource named.
    let prompt = messages[0]["content"].as_array().unwrap();
    assert_eq!(prompt.len(), 2, "{prompt:?}");
    assert!(
        prompt[1]["text"].as_str().unwrap().starts_with("Resource "),
        "{prompt:?}"
    );
    let image = &messages[2]["content"][0]["toolResult"]["content"];
    assert!(
        image.as_array().unwrap().iter().any(|b| b["image"]["format"] == "png"),
        "{image}"
    );
    let structured = &messages[4]["content"][0]["toolResult"]["content"];
    assert!(
        structured.as_array().unwrap().iter().any(|b| b["json"].is_object()),
        "{structured}"
    );
    let links = messages[6]["content"][0]["toolResult"]["content"].to_string();
    assert!(links.contains("a link to resource"), "{links}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_servers_structured_result_goes_through_the_strict_stand_in() {
    let python = local::python_mcp::PythonMcp::start().unwrap();
    let s = RunStack::start().await.unwrap();
    s.store()
        .put_install(&install(
            "ins_1",
            "python-digest",
            python.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    let task = connector_task("python-digest", "daily_digest", &["search"], &[("topic", "rust")]);
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("python-digest__search", json!({"query": "rust"}), 100, 10),
            Reply::text("Digest written.", 100, 10),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s.deliver_once(&task, at).await;
    assert!(s.model.refused().await.is_empty());
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let last = &s.model.requests().await[1].1;
    let result = &last["messages"][2]["content"][0]["toolResult"]["content"];
    assert!(
        result[0]["text"].as_str().unwrap().contains("results for 'rust'"),
        "{result}"
    );
    assert_eq!(result[1]["json"]["query"], "rust", "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_described_tool_spec_goes_through_a_real_converse_call_to_the_strict_stand_in() {
    let s = RunStack::start().await.unwrap();
    let answer =
        s.t.create_app()
            .handle(json!({"op": "describe"}), Utc::now())
            .await
            .unwrap()
            .to_json();
    let d = &answer["descriptor"];
    assert_eq!(d["name"], "schedule.create", "the capability id");
    let pasted = &d["formats"]["bedrock_converse"]["toolSpec"];
    let tool = ToolSpec {
        name: pasted["name"].as_str().unwrap().to_owned(),
        description: pasted["description"].as_str().unwrap().to_owned(),
        input_schema: pasted["inputSchema"]["json"].clone(),
    };
    s.model
        .script([Reply::tool(
            "schedule_create",
            json!({"title": "Call mom", "instruction": "Call mom.", "at": "2026-12-24T19:00:00+01:00"}),
            10,
            5,
        )])
        .await;
    let model = BedrockModel::from_sdk(&s.model_sdk);
    let reply = model
        .converse(
            tests::MODEL,
            &request(vec![user("Remind me to call mom at 7 on Christmas Eve.")], vec![tool]),
        )
        .await
        .unwrap();
    assert!(s.model.refused().await.is_empty());
    assert!(matches!(&reply.message.content[0], Block::ToolUse { name, .. } if name == "schedule_create"));
    let sent = &s.model.requests().await[0].1["toolConfig"]["tools"][0];
    assert_eq!(sent, &d["formats"]["bedrock_converse"], "sent exactly as pasted");

    // And the capability id itself is what Bedrock refuses as a name.
    let dotted = ToolSpec {
        name: d["name"].as_str().unwrap().to_owned(),
        ..spec("x", "d")
    };
    let err = model
        .converse(tests::MODEL, &request(vec![user("go")], vec![dotted]))
        .await
        .unwrap_err();
    assert!(err.message.starts_with("ValidationException"), "{}", err.message);
}

// ---- Throttling is load, not failure (SPEC §7) ------------------------------

/// A deadline that leaves the run three seconds of model time (the settle
/// reserve comes off it): throttled retries give up soon.
fn short_deadline() -> chrono::DateTime<Utc> {
    Utc::now() + Duration::seconds(shared::app::run::SETTLE_RESERVE_SECONDS + 3)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_throttled_herd_loses_no_occurrence_runs_none_twice_and_fails_none_without_a_tool_call() {
    let s = RunStack::start().await.unwrap();
    let prompts = (0..3)
        .map(|i| scheduled_prompt(&format!("digest_{i}"), json!({"version": 1}), &[], "Write the digest."))
        .collect();
    let fixture = McpFixture::start(FixtureState {
        prompts,
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&install("ins_1", "news", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let at = Utc::now() - Duration::seconds(5);
    let mut tasks: Vec<_> = (0..3)
        .map(|i| connector_task("news", &format!("digest_{i}"), &[], &[]))
        .collect();
    tasks.push(tests::reminder(at - Duration::seconds(1)));
    let ats = |i: usize| if i < 3 { at } else { at - Duration::seconds(1) };
    for task in &tasks {
        s.store().insert_task(task).await.unwrap();
    }
    // One answer per window: a cron at 09:00 across many workspaces.
    s.model.throttle(Some((1, Window::Manual))).await;
    let runner = s.runner();
    let mut pending: Vec<usize> = (0..tasks.len()).collect();
    let mut round = 0;
    while !pending.is_empty() {
        round += 1;
        assert!(round <= tasks.len() + 1, "every round runs one: {pending:?} left");
        let deliveries = pending.iter().map(|&i| {
            let body = run_message(&tasks[i], ats(i), &format!("e{round}"));
            let runner = &runner;
            async move {
                (
                    i,
                    runner.deliver("m", &body, Utc::now(), short_deadline()).await.unwrap(),
                )
            }
        });
        let outcomes = futures::future::join_all(deliveries).await;
        let mut returned = Vec::new();
        for (i, disposition) in outcomes {
            let task = &tasks[i];
            let occurrence = occurrence_key(ats(i));
            match disposition {
                Disposition::Ran(RunStatus::Succeeded) => {}
                Disposition::ReturnToQueue => {
                    // Given back whole: no record, no claim, no reservation held.
                    assert!(s.run_record(&task.task_id, &occurrence).await.is_none());
                    let item = s.task_item(task).await;
                    assert!(item["claims"].get(&occurrence).is_none(), "{item}");
                    let used = item["budget_used"][ats(i).format("%Y-%m").to_string()]
                        .as_f64()
                        .unwrap_or(0.0);
                    assert!(used.abs() < 1e-12, "the reservation is released: {used}");
                    returned.push(i);
                }
                other => panic!("task {i}: {other:?}"),
            }
        }
        assert_eq!(returned.len(), pending.len() - 1, "one answer per window");
        pending = returned;
        s.model.next_window().await;
    }
    assert!(s.model.faulted().await > 0, "the herd was throttled");
    assert_eq!(
        s.model.requests().await.len(),
        tasks.len(),
        "each occurrence ran exactly once"
    );
    for (i, task) in tasks.iter().enumerate() {
        let record = s
            .run_record(&task.task_id, &occurrence_key(ats(i)))
            .await
            .expect("not lost");
        assert_eq!(record["status"], "succeeded", "{record}");
    }
    // A redelivery of any of them is a duplicate now.
    let again = runner
        .deliver("m", &run_message(&tasks[0], at, "late"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(again, Disposition::Duplicate);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_throttled_after_a_tool_call_fails_as_model_throttled_and_before_one_goes_back() {
    let s = RunStack::start().await.unwrap();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly",
            json!({"version": 1}),
            &[],
            "List the issues.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&install("ins_1", "issues", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let task = connector_task("issues", "weekly", &["list_issues"], &[]);
    s.insert(&task).await;
    let at = Utc::now() - Duration::seconds(5);
    s.model
        .script([Reply::tool("issues__list_issues", json!({}), 100, 10)])
        .await;
    // The first answer is served (a tool call), then the model is throttled.
    s.model.throttle(Some((1, Window::Manual))).await;
    let got = s
        .runner()
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Failed));
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    assert_eq!(record["reason"], "model throttled");
    assert_eq!(record["usage"]["tool_calls"], 1);
    assert_eq!(fixture.state().read().await.calls.len(), 1);

    // A reminder under a ServiceUnavailableException outage goes back whole.
    let (reminder, when) = (tests::reminder(at), at);
    s.insert(&reminder).await;
    s.model.throttle(None).await;
    s.model.fault(Some(Fault::ServiceUnavailable)).await;
    let got = s
        .runner()
        .deliver("m2", &run_message(&reminder, when, "e1"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::ReturnToQueue);
    assert!(s.run_record(&reminder.task_id, &occurrence_key(when)).await.is_none());
    assert!(
        s.task_item(&reminder).await["claims"]
            .get(occurrence_key(when))
            .is_none()
    );
    assert!(
        s.events()
            .await
            .iter()
            .all(|e| e["detail"]["task_id"] != reminder.task_id.as_str())
    );
    // The outage over, the returned message runs.
    s.model.fault(None).await;
    let got = s
        .runner()
        .deliver("m2", &run_message(&reminder, when, "e2"), Utc::now(), short_deadline())
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    // The release removed the claim: `attempts` counts since it, so the
    // delivery given back is not counted (ARCHITECTURE, `claims`).
    let record = s.run_record(&reminder.task_id, &occurrence_key(when)).await.unwrap();
    assert_eq!(record["attempts"], 1);
}

/// What real servers send and Bedrock refuses is made what Bedrock takes:
/// a tool schema of `{}` or properties without a type gets its root
/// `"type": "object"`, a root `anyOf` is left out (the run record says so,
/// the request still goes), a prompt ending with the assistant's message
/// gets a user turn after it, a tool flooding images is held to 20 images a
/// request (the latest), and `maxTokens` never exceeds the model's own.
#[tokio::test(flavor = "multi_thread")]
async fn schemas_prompts_images_and_max_tokens_bedrock_refuses_are_made_ones_it_takes() {
    use local::mcp_fixture::tool_with_schema;
    use shared::domain::run::agent::{IMAGE_LEFT_OUT, MAX_IMAGES_PER_REQUEST, PROMPT_CONTINUE};
    let s = RunStack::start().await.unwrap();
    let images: Vec<ContentBlock> = (0..8).map(|_| ContentBlock::image(PNG_1X1, "image/png")).collect();
    let prompt = vec![
        PromptMessage::new_text(McpRole::User, "Collect today's screenshots."),
        PromptMessage::new_text(McpRole::Assistant, "I will collect them."),
    ];
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("shots", json!({"version": 1}), &[], "unused")],
        tools: vec![
            tool_with_schema("flat", json!({})),
            tool_with_schema("props", json!({"properties": {"q": {"type": "string"}}})),
            tool_with_schema("union", json!({"anyOf": [{"type": "object"}, {"type": "string"}]})),
            tool("shots"),
        ],
        prompt_messages: [("shots".to_owned(), prompt)].into(),
        tool_answers: [("shots".to_owned(), CallToolResult::success(images))].into(),
        ..Default::default()
    })
    .await
    .unwrap();
    s.store()
        .put_install(&install("ins_1", "cams", &fixture.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let mut task = connector_task("cams", "shots", &["flat", "props", "union", "shots"], &[]);
    task.spec.limits.max_tool_calls = 5;
    task.spec.limits.max_turns = 6;
    task.spec.limits.max_output_tokens = 50_000;
    s.insert(&task).await;
    let shots = offered_name("cams", "shots");
    s.model
        .script([
            Reply::tool(&shots, json!({}), 100, 10),
            Reply::tool(&shots, json!({}), 100, 10),
            Reply::tool(&shots, json!({}), 100, 10),
            Reply::text("Collected.", 100, 10),
        ])
        .await;
    // Ceilings that let the task ask more output than the model gives.
    let mut settings = tests::run_settings(true);
    settings.ceilings = shared::domain::task::limits::Ceilings::new(shared::domain::task::limits::Limits {
        max_output_tokens: 50_000,
        ..tests::CEILINGS
    })
    .unwrap();
    let at = Utc::now() - Duration::seconds(5);
    let got = s
        .runner_on(s.store(), settings)
        .deliver("m1", &run_message(&task, at, "e1"), Utc::now(), tests::deadline())
        .await
        .unwrap();
    let refused = s.model.refused().await;
    assert!(
        refused.is_empty(),
        "{:?}",
        refused.iter().map(|r| &r.message).collect::<Vec<_>>()
    );
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));

    let requests = s.model.requests().await;
    assert_eq!(requests.len(), 4);
    let first = &requests[0].1;
    let messages = first["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["role"], "user", "the user speaks last");
    assert_eq!(messages.last().unwrap()["content"], json!([{"text": PROMPT_CONTINUE}]));
    let tools = first["toolConfig"]["tools"].as_array().unwrap();
    let offered: Vec<&str> = tools.iter().map(|t| t["toolSpec"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered.len(), 3, "{offered:?}: the root anyOf is left out");
    assert!(!offered.contains(&offered_name("cams", "union").as_str()));
    for tool in tools {
        assert_eq!(tool["toolSpec"]["inputSchema"]["json"]["type"], "object", "{tool}");
    }
    let max = shared::domain::run::model::max_output_tokens(tests::MODEL);
    for (_, request) in &requests {
        assert!(request["inferenceConfig"]["maxTokens"].as_u64().unwrap() <= u64::from(max));
        let images = request.to_string().matches("\"image\"").count();
        assert!(images <= MAX_IMAGES_PER_REQUEST, "{images} images in one request");
    }
    let last = requests[3].1.to_string();
    assert_eq!(
        last.matches("\"image\"").count(),
        MAX_IMAGES_PER_REQUEST,
        "the latest 20 of 24"
    );
    assert!(last.contains(IMAGE_LEFT_OUT));
    let record = s.run_record(&task.task_id, &occurrence_key(at)).await.unwrap();
    let notes = record["notes"]
        .as_array()
        .expect("the run record says what was left out");
    assert!(notes[0].as_str().unwrap().contains("`union`"), "{notes:?}");
}

#[test]
fn a_tool_result_status_is_refused_for_a_model_family_that_takes_none() {
    let mut body = json!({
        "messages": [
            {"role": "user", "content": [{"text": "go"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "u1", "name": "t", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "u1", "content": [{"text": "r"}], "status": "success"}}]}
        ],
        "toolConfig": {"tools": [{"toolSpec": {"name": "t", "description": "d", "inputSchema": {"json": {"type": "object"}}}}]}
    });
    let nova = "amazon.nova-lite-v1:0";
    let refused = local::converse::validate(nova, &body).unwrap_err();
    assert!(refused.contains("status"), "{refused}");
    assert_eq!(
        local::converse::validate(tests::MODEL, &body),
        Ok(()),
        "Claude takes it"
    );
    body["messages"][2]["content"][0]["toolResult"]
        .as_object_mut()
        .unwrap()
        .remove("status");
    assert_eq!(local::converse::validate(nova, &body), Ok(()));
}
