//! A scripted stand-in for Bedrock Runtime `Converse` on loopback. Bedrock
//! cannot be reached here, so tests and the local main job point the SDK at
//! this with `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`; it speaks the Converse wire
//! format (`POST /model/{id}/converse`) and answers from a script, or, when
//! the script is empty, with a deterministic default: call the first offered
//! tool once, then finish. Token counts are deterministic too.
//!
//! It is strict: every request is checked as Bedrock documents Converse
//! (SPEC §7, "What the real services demand of a run"; [`validate`]) and a
//! request Bedrock would refuse is answered as Bedrock answers it, HTTP 400
//! `ValidationException` with a JSON `{"message"}`, and kept for the test to
//! read ([`ConverseStandIn::refused`]). It can also throttle above a rate
//! ([`ConverseStandIn::throttle`], windows a test advances or a real period)
//! and answer a fault on demand ([`ConverseStandIn::fault`]):
//! `ThrottlingException` (429), `ServiceUnavailableException` (503),
//! `ModelNotReadyException` (429).

use std::collections::{BTreeSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::Mutex;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Finish the turn with this text.
    Text {
        text: String,
        input_tokens: u64,
        output_tokens: u64,
    },
    /// Ask for one tool call.
    ToolUse {
        name: String,
        input: Value,
        input_tokens: u64,
        output_tokens: u64,
    },
    /// Stop for another reason (`max_tokens`, `guardrail_intervened`, ...).
    Stop {
        reason: String,
        text: String,
        input_tokens: u64,
        output_tokens: u64,
    },
    /// Answer an error, as Bedrock would (`ThrottlingException`, 429).
    Error { status: u16, code: String },
}

impl Reply {
    pub fn text(text: &str, input_tokens: u64, output_tokens: u64) -> Self {
        Reply::Text {
            text: text.to_owned(),
            input_tokens,
            output_tokens,
        }
    }

    pub fn tool(name: &str, input: Value, input_tokens: u64, output_tokens: u64) -> Self {
        Reply::ToolUse {
            name: name.to_owned(),
            input,
            input_tokens,
            output_tokens,
        }
    }
}

/// A fault the stand-in answers instead of a reply, as Bedrock does under load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `ThrottlingException`, HTTP 429: over the account's quota.
    Throttling,
    /// `ServiceUnavailableException`, HTTP 503.
    ServiceUnavailable,
    /// `ModelNotReadyException`, HTTP 429.
    ModelNotReady,
}

impl Fault {
    pub fn code(self) -> &'static str {
        match self {
            Fault::Throttling => "ThrottlingException",
            Fault::ServiceUnavailable => "ServiceUnavailableException",
            Fault::ModelNotReady => "ModelNotReadyException",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Fault::Throttling | Fault::ModelNotReady => 429,
            Fault::ServiceUnavailable => 503,
        }
    }
}

/// How the throttle's windows pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Only when the test says so ([`ConverseStandIn::next_window`]): a clock
    /// a test compresses at will.
    Manual,
    /// Every period of real time (a minute, as Bedrock's quotas count).
    Every(Duration),
}

#[derive(Debug, Clone, Copy)]
struct Rate {
    limit: usize,
    window: Window,
    /// The window being counted, and the requests served in it.
    current: u64,
    served: usize,
}

/// A request the stand-in refused as Bedrock would.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub model: String,
    pub request: Value,
    /// Bedrock's `ValidationException` message.
    pub message: String,
}

struct Script {
    replies: VecDeque<Reply>,
    requests: Vec<(String, Value)>,
    refused: Vec<Refusal>,
    faulted: usize,
    rate: Option<Rate>,
    fault: Option<Fault>,
    started: Instant,
    manual_window: u64,
}

impl Script {
    fn new() -> Self {
        Self {
            replies: VecDeque::new(),
            requests: Vec::new(),
            refused: Vec::new(),
            faulted: 0,
            rate: None,
            fault: None,
            started: Instant::now(),
            manual_window: 0,
        }
    }

    /// The fault this request gets instead of an answer, if any.
    fn fault_now(&mut self) -> Option<Fault> {
        if let Some(fault) = self.fault {
            return Some(fault);
        }
        let window = match self.rate?.window {
            Window::Manual => self.manual_window,
            Window::Every(period) => (self.started.elapsed().as_millis() / period.as_millis().max(1)) as u64,
        };
        let rate = self.rate.as_mut()?;
        if rate.current != window {
            rate.current = window;
            rate.served = 0;
        }
        if rate.served >= rate.limit {
            return Some(Fault::Throttling);
        }
        rate.served += 1;
        None
    }
}

pub struct ConverseStandIn {
    port: u16,
    script: Arc<Mutex<Script>>,
    server: tokio::task::JoinHandle<()>,
}

fn body(message: Vec<Value>, stop: &str, input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "output": {"message": {"role": "assistant", "content": message}},
        "stopReason": stop,
        "usage": {"inputTokens": input_tokens, "outputTokens": output_tokens, "totalTokens": input_tokens + output_tokens},
        "metrics": {"latencyMs": 1}
    })
}

/// Deterministic token estimate: a token per four characters, at least one.
fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

/// The default when the script is empty: one call of the first offered tool,
/// then a short summary that quotes the last tool result.
fn default_reply(request: &Value) -> Reply {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let input_tokens = tokens(&request.to_string());
    let last_result = messages
        .iter()
        .rev()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find_map(|c| {
            let first = &c["toolResult"]["content"][0];
            first["text"]
                .as_str()
                .map(str::to_owned)
                .or_else(|| first.get("json").map(Value::to_string))
        });
    let first_tool = request["toolConfig"]["tools"][0]["toolSpec"]["name"].as_str();
    match (last_result, first_tool) {
        (None, Some(tool)) => Reply::tool(tool, json!({}), input_tokens, 20),
        (Some(result), _) => {
            let text = format!("Done. The tool answered: {result}");
            Reply::text(&text, input_tokens, tokens(&text))
        }
        (None, None) => {
            let prompt = messages
                .first()
                .map(|m| m["content"][0]["text"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            let text = format!("Reminder: {}", prompt.chars().take(200).collect::<String>());
            Reply::text(&text, input_tokens, tokens(&text))
        }
    }
}

fn error_response(status: u16, code: &str, message: String) -> (StatusCode, HeaderMap, axum::Json<Value>) {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    if let Ok(v) = HeaderValue::from_str(code) {
        headers.insert("x-amzn-errortype", v);
    }
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        headers,
        axum::Json(json!({ "message": message })),
    )
}

async fn converse(
    State(script): State<Arc<Mutex<Script>>>,
    Path(model): Path<String>,
    request: axum::Json<Value>,
) -> impl IntoResponse {
    let mut script = script.lock().await;
    if let Err(message) = validate(&model, &request.0) {
        script.refused.push(Refusal {
            model,
            request: request.0,
            message: message.clone(),
        });
        return error_response(400, "ValidationException", message);
    }
    if let Some(fault) = script.fault_now() {
        script.faulted += 1;
        return error_response(
            fault.status(),
            fault.code(),
            format!("{} (the stand-in's throttle or fault)", fault.code()),
        );
    }
    script.requests.push((model, request.0.clone()));
    let reply = script.replies.pop_front().unwrap_or_else(|| default_reply(&request.0));
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    let (status, value) = match reply {
        Reply::Text {
            text,
            input_tokens,
            output_tokens,
        } => (
            StatusCode::OK,
            body(vec![json!({"text": text})], "end_turn", input_tokens, output_tokens),
        ),
        Reply::ToolUse {
            name,
            input,
            input_tokens,
            output_tokens,
        } => {
            let id = format!("tooluse_{}", script.requests.len());
            let content = vec![json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})];
            (StatusCode::OK, body(content, "tool_use", input_tokens, output_tokens))
        }
        Reply::Stop {
            reason,
            text,
            input_tokens,
            output_tokens,
        } => (
            StatusCode::OK,
            body(vec![json!({"text": text})], &reason, input_tokens, output_tokens),
        ),
        Reply::Error { status, code } => {
            return error_response(status, &code, format!("{code} from the stand-in"));
        }
    };
    (status, headers, axum::Json(value))
}

/// Bedrock's tool name rule: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The image formats Converse takes.
pub const IMAGE_FORMATS: [&str; 4] = ["png", "jpeg", "gif", "webp"];
/// Converse's largest image: 3.75 MB.
pub const MAX_IMAGE_BYTES: usize = 3_932_160;

fn blank(text: &Value) -> bool {
    text.as_str().is_none_or(|t| t.trim().is_empty())
}

fn check_image(image: &Value, at: &str) -> Result<(), String> {
    let format = image["format"].as_str().unwrap_or_default();
    if !IMAGE_FORMATS.contains(&format) {
        return Err(format!(
            "{at}.image.format `{format}` is not one of png, jpeg, gif, webp"
        ));
    }
    let Some(encoded) = image["source"]["bytes"].as_str() else {
        return Err(format!("{at}.image.source.bytes is missing"));
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| format!("{at}.image.source.bytes is not base64"))?;
    if bytes.is_empty() {
        return Err(format!("{at}.image.source.bytes is empty"));
    }
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(format!("{at}.image is larger than 3.75 MB"));
    }
    Ok(())
}

/// Image blocks anywhere in the messages, tool results included.
fn count_images(value: &Value) -> usize {
    match value {
        Value::Object(map) => usize::from(map.contains_key("image")) + map.values().map(count_images).sum::<usize>(),
        Value::Array(items) => items.iter().map(count_images).sum(),
        _ => 0,
    }
}

/// One content block of a message (`text`, `image`, `toolUse`, `toolResult`).
fn check_block(block: &Value, at: &str) -> Result<(), String> {
    let Some(object) = block.as_object().filter(|o| o.len() == 1) else {
        return Err(format!(
            "{at} must hold exactly one of text, image, toolUse, toolResult"
        ));
    };
    match object.keys().next().map(String::as_str) {
        Some("text") if blank(&block["text"]) => Err(format!(
            "The text field in the ContentBlock object at {at} is blank. Add text to the text field, and try again."
        )),
        Some("text") => Ok(()),
        Some("image") => check_image(&block["image"], at),
        Some("toolUse") => {
            let tool = &block["toolUse"];
            if tool["toolUseId"].as_str().is_none_or(str::is_empty) {
                return Err(format!("{at}.toolUse.toolUseId is missing"));
            }
            if !tool["name"].as_str().is_some_and(valid_tool_name) {
                return Err(format!("{at}.toolUse.name does not match ^[a-zA-Z0-9_-]{{1,64}}$"));
            }
            if !tool["input"].is_object() {
                return Err(format!("{at}.toolUse.input must be a JSON object"));
            }
            Ok(())
        }
        Some("toolResult") => {
            let result = &block["toolResult"];
            if result["toolUseId"].as_str().is_none_or(str::is_empty) {
                return Err(format!("{at}.toolResult.toolUseId is missing"));
            }
            if let Some(status) = result.get("status")
                && !matches!(status.as_str(), Some("success" | "error"))
            {
                return Err(format!("{at}.toolResult.status must be success or error"));
            }
            let content = result["content"].as_array().cloned().unwrap_or_default();
            if content.is_empty() {
                return Err(format!("{at}.toolResult.content must not be empty"));
            }
            for (i, part) in content.iter().enumerate() {
                let here = format!("{at}.toolResult.content.{i}");
                match part
                    .as_object()
                    .filter(|o| o.len() == 1)
                    .and_then(|o| o.keys().next())
                    .map(String::as_str)
                {
                    Some("text") if blank(&part["text"]) => {
                        return Err(format!(
                            "The text field at {here} is blank. Add text to the text field, and try again."
                        ));
                    }
                    Some("text") => {}
                    Some("json") if part["json"].is_null() => return Err(format!("{here}.json is null")),
                    Some("json") => {}
                    Some("image") => check_image(&part["image"], &here)?,
                    _ => return Err(format!("{here} must hold exactly one of text, json, image")),
                }
            }
            Ok(())
        }
        _ => Err(format!("{at} holds an unknown content block")),
    }
}

fn tool_use_ids(message: &Value, kind: &str) -> Vec<String> {
    message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b[kind]["toolUseId"].as_str().map(str::to_owned))
        .collect()
}

/// Checks a Converse request as Bedrock does, answering the
/// `ValidationException` message it would send.
pub fn validate(model: &str, request: &Value) -> Result<(), String> {
    if model.is_empty() {
        return Err("modelId is empty".into());
    }
    for (i, system) in request["system"].as_array().into_iter().flatten().enumerate() {
        if system.get("text").is_some_and(blank) {
            return Err(format!("The text field in the system block at system.{i} is blank."));
        }
    }
    if let Some(max) = request["inferenceConfig"].get("maxTokens")
        && max.as_i64().is_none_or(|m| m < 1)
    {
        return Err("inferenceConfig.maxTokens must be at least 1".into());
    }
    // Bedrock refuses a maxTokens above the model's own ceiling.
    let ceiling = i64::from(shared::domain::model::max_output_tokens(model));
    if let Some(max) = request["inferenceConfig"]["maxTokens"].as_i64()
        && max > ceiling
    {
        return Err(format!(
            "The maximum tokens you requested exceeds the model limit of {ceiling}. Try again with a maximum tokens value that is lower than {ceiling}."
        ));
    }
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        return Err("messages must not be empty".into());
    }
    let mut uses_tools = false;
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if !matches!(role, "user" | "assistant") {
            return Err(format!("messages.{i}.role must be user or assistant"));
        }
        if i == 0 && role != "user" {
            return Err("A conversation must start with a user message. Try again with a conversation that starts with a user message.".into());
        }
        if i > 0 && messages[i - 1]["role"] == message["role"] {
            return Err("A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".into());
        }
        let content = message["content"].as_array().cloned().unwrap_or_default();
        if content.is_empty() {
            return Err(format!("messages.{i}.content must not be empty"));
        }
        for (j, block) in content.iter().enumerate() {
            check_block(block, &format!("messages.{i}.content.{j}"))?;
            if block["toolResult"].get("status").is_some() && !shared::domain::model::takes_tool_result_status(model) {
                return Err(format!(
                    "messages.{i}.content.{j}.toolResult.status: this model doesn't support the status field of a tool result"
                ));
            }
            if role == "user" && block.get("toolUse").is_some() {
                return Err(format!("messages.{i}.content.{j}: a user message cannot hold toolUse"));
            }
            if role == "assistant" && block.get("toolResult").is_some() {
                return Err(format!(
                    "messages.{i}.content.{j}: an assistant message cannot hold toolResult"
                ));
            }
            uses_tools |= block.get("toolUse").is_some() || block.get("toolResult").is_some();
        }
        // toolUse / toolResult pairing.
        let results = tool_use_ids(message, "toolResult");
        let asked: Vec<String> = if i > 0 {
            tool_use_ids(&messages[i - 1], "toolUse")
        } else {
            Vec::new()
        };
        if role == "user" {
            let distinct: BTreeSet<&String> = results.iter().collect();
            if distinct.len() != results.len() {
                return Err(format!(
                    "messages.{i} answers one toolUse with more than one toolResult"
                ));
            }
            if let Some(stray) = results.iter().find(|r| !asked.contains(r)) {
                return Err(format!(
                    "messages.{i}: the toolResult {stray} answers no toolUse of the previous assistant message"
                ));
            }
            if let Some(open) = asked.iter().find(|a| !results.contains(a)) {
                return Err(format!(
                    "Expected toolResult blocks at messages.{i}.content for the following Ids: {open}"
                ));
            }
        }
    }
    if let Some(last) = messages.last()
        && last["role"] == "assistant"
        && !tool_use_ids(last, "toolUse").is_empty()
    {
        return Err("The conversation ends with toolUse blocks that no toolResult answers".into());
    }
    if messages.last().is_some_and(|m| m["role"] == "assistant") {
        return Err(
            "This model does not support assistant message prefill. The conversation must end with a user message."
                .into(),
        );
    }
    let images = count_images(&Value::Array(messages.clone()));
    if images > 20 {
        return Err(format!(
            "Too many images and documents: {images} images and 0 documents were provided; a request takes at most 20 images."
        ));
    }
    match request.get("toolConfig") {
        None if uses_tools => {
            Err("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into())
        }
        None => Ok(()),
        Some(config) => check_tools(config),
    }
}

fn check_tools(config: &Value) -> Result<(), String> {
    let tools = config["tools"].as_array().cloned().unwrap_or_default();
    if tools.is_empty() {
        return Err("toolConfig.tools must hold at least one tool".into());
    }
    let mut names = BTreeSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let spec = &tool["toolSpec"];
        if !spec.is_object() {
            return Err(format!("toolConfig.tools.{i} must be a toolSpec"));
        }
        let name = spec["name"].as_str().unwrap_or_default();
        if !valid_tool_name(name) {
            return Err(format!(
                "1 validation error detected: Value '{name}' at 'toolConfig.tools.{i}.member.toolSpec.name' failed to satisfy constraint: Member must satisfy regular expression pattern: ^[a-zA-Z0-9_-]{{1,64}}$"
            ));
        }
        if !names.insert(name.to_owned()) {
            return Err(format!(
                "The toolConfig tool names must be unique: {name} appears twice"
            ));
        }
        if let Some(description) = spec.get("description")
            && description.as_str().is_none_or(str::is_empty)
        {
            return Err(format!(
                "1 validation error detected: Value at 'toolConfig.tools.{i}.member.toolSpec.description' failed to satisfy constraint: Member must have length greater than or equal to 1"
            ));
        }
        if !spec["inputSchema"]["json"].is_object() {
            return Err(format!(
                "toolConfig.tools.{i}.toolSpec.inputSchema.json must be a JSON object"
            ));
        }
        if spec["inputSchema"]["json"]["type"] != "object" {
            return Err(format!(
                "The value at toolConfig.tools.{i}.toolSpec.inputSchema.json.type must be one of the following: object."
            ));
        }
    }
    Ok(())
}

/// The largest request body the stand-in reads.
pub const REQUEST_BODY_LIMIT: usize = 128 * 1024 * 1024;

impl ConverseStandIn {
    pub async fn start() -> anyhow::Result<Self> {
        let script = Arc::new(Mutex::new(Script::new()));
        // Bedrock takes requests far above axum's 2 MB default (20 images
        // of up to 3.75 MB each): the stand-in reads what a run may send.
        let app = Router::new()
            .route("/model/{model}/converse", post(converse))
            .layer(axum::extract::DefaultBodyLimit::max(REQUEST_BODY_LIMIT))
            .with_state(script.clone());
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, script, server })
    }

    /// The value for `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Queues the next answers, in order.
    pub async fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.script.lock().await.replies.extend(replies);
    }

    /// Every request answered from the script: (model id, JSON body). Refused
    /// and throttled requests are not among them.
    pub async fn requests(&self) -> Vec<(String, Value)> {
        self.script.lock().await.requests.clone()
    }

    /// Every request refused as invalid, with Bedrock's message.
    pub async fn refused(&self) -> Vec<Refusal> {
        self.script.lock().await.refused.clone()
    }

    /// How many requests got a throttle or a fault instead of an answer.
    pub async fn faulted(&self) -> usize {
        self.script.lock().await.faulted
    }

    /// Serves at most `limit` requests per window and throttles the rest
    /// (`ThrottlingException`); `None` lifts the throttle.
    pub async fn throttle(&self, rate: Option<(usize, Window)>) {
        self.script.lock().await.rate = rate.map(|(limit, window)| Rate {
            limit,
            window,
            current: u64::MAX,
            served: 0,
        });
    }

    /// Starts the next window of a [`Window::Manual`] throttle.
    pub async fn next_window(&self) {
        self.script.lock().await.manual_window += 1;
    }

    /// Answers every request with `fault` until it is cleared with `None`.
    pub async fn fault(&self, fault: Option<Fault>) {
        self.script.lock().await.fault = fault;
    }
}

impl Drop for ConverseStandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}
