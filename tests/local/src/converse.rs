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
//! `ModelNotReadyException` (429), `InternalServerException` (500), a
//! first-use `AccessDeniedException` (403), or no answer at all (a stall).

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
    /// Ask for several tool calls in one turn, answered together.
    ToolUses {
        calls: Vec<(String, Value)>,
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
    /// A model that calls each offered tool it has not seen called in the
    /// conversation, one a turn, in the order offered, with no arguments;
    /// once it has seen every one called, it finishes with a text. What a
    /// run's conversation shows it decides whether a call is asked again.
    EachToolOnce,
    /// Never answer (a model call that hangs): the request is recorded,
    /// then nothing comes back.
    Stall,
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
    /// `InternalServerException`, HTTP 500: Bedrock's own failure.
    InternalServer,
    /// `AccessDeniedException`, HTTP 403: what a fresh account's first
    /// calls answer for minutes while its model subscription completes.
    AccessDenied,
    /// The request is read and never answered (the connection stays open):
    /// an answer that stalls. The caller's own time is all that ends it.
    Stalled,
}

impl Fault {
    pub fn code(self) -> &'static str {
        match self {
            Fault::Throttling => "ThrottlingException",
            Fault::ServiceUnavailable => "ServiceUnavailableException",
            Fault::ModelNotReady => "ModelNotReadyException",
            Fault::InternalServer => "InternalServerException",
            Fault::AccessDenied => "AccessDeniedException",
            Fault::Stalled => "Stalled",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Fault::Throttling | Fault::ModelNotReady => 429,
            Fault::ServiceUnavailable => 503,
            Fault::InternalServer => 500,
            Fault::AccessDenied => 403,
            Fault::Stalled => 504,
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
    /// The prompt cache: a cached prefix (its digest) and when it was last
    /// written or read (Bedrock keeps one five minutes past its last use).
    cache: std::collections::HashMap<u64, Instant>,
}

/// How long Bedrock keeps a cached prefix after its last use.
pub const CACHE_TTL: Duration = Duration::from_secs(300);

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
            cache: std::collections::HashMap::new(),
        }
    }

    /// Bedrock's cache accounting of `request`'s `input` tokens: each cache
    /// point whose prefix (tools, then system, then messages, up to the
    /// point) reaches the model's minimum is a cache entry; the longest
    /// prefix already cached at a block boundary within
    /// [`CACHE_LOOKBACK_BLOCKS`] of such a point is read, the rest up to
    /// the last point is written, and what lies after it is plain input.
    /// Answers (input, cache write, cache read).
    fn cache_usage(&mut self, model: &str, request: &Value, input: u64) -> (u64, u64, u64) {
        let Some(minimum) = shared::domain::run::model::cache_minimum(model) else {
            return (input, 0, 0);
        };
        let now = Instant::now();
        self.cache.retain(|_, used| now.duration_since(*used) < CACHE_TTL);
        let boundaries = cache_boundaries(request);
        let points: Vec<usize> = (0..boundaries.len())
            .filter(|&i| boundaries[i].2 && boundaries[i].0 >= minimum)
            .collect();
        // The longest cached prefix at a boundary within the lookback of a point.
        let read = points
            .iter()
            .flat_map(|&p| p.saturating_sub(CACHE_LOOKBACK_BLOCKS)..=p)
            .filter(|&i| self.cache.contains_key(&boundaries[i].1))
            .map(|i| boundaries[i].0)
            .max()
            .unwrap_or(0);
        let longest = points.iter().map(|&p| boundaries[p].0).max().unwrap_or(0);
        for &p in &points {
            self.cache.insert(boundaries[p].1, now);
        }
        let write = longest.saturating_sub(read);
        let read = read.min(input);
        let write = write.min(input - read);
        (input - read - write, write, read)
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

/// Splits a body's input tokens as the cache read and wrote them:
/// `inputTokens` is then the uncached input, and the cache's fields appear
/// when the cache was used, as Bedrock reports them.
fn with_cache(mut body: Value, (input, write, read): (u64, u64, u64)) -> Value {
    if write + read > 0 {
        let output = body["usage"]["outputTokens"].as_u64().unwrap_or_default();
        body["usage"] = json!({
            "inputTokens": input,
            "outputTokens": output,
            "cacheWriteInputTokens": write,
            "cacheReadInputTokens": read,
            "totalTokens": input + output + write + read,
        });
    }
    body
}

/// Anthropic's models look for a cached prefix at the block boundaries up
/// to this many blocks before each cache point.
pub const CACHE_LOOKBACK_BLOCKS: usize = 20;

/// A request read in the order the model reads it (tools, system,
/// messages): after each content block, the prefix's tokens and digest,
/// and whether a cache point follows it.
fn cache_boundaries(request: &Value) -> Vec<(u64, u64, bool)> {
    use std::hash::{Hash, Hasher};
    let mut read = String::new();
    let mut out: Vec<(u64, u64, bool)> = Vec::new();
    let mut visit = |block: &Value, out: &mut Vec<(u64, u64, bool)>| {
        if block.get("cachePoint").is_some() {
            if let Some(last) = out.last_mut() {
                last.2 = true;
            }
            return;
        }
        read.push_str(&block.to_string());
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        read.hash(&mut hasher);
        out.push((tokens(&read), hasher.finish(), false));
    };
    for section in [&request["toolConfig"]["tools"], &request["system"]] {
        for block in section.as_array().into_iter().flatten() {
            visit(block, &mut out);
        }
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        for block in message["content"].as_array().into_iter().flatten() {
            let mut block = block.clone();
            if block.get("cachePoint").is_none() {
                // The role is part of what the model reads.
                block = json!({"role": message["role"], "block": block});
            }
            visit(&block, &mut out);
        }
    }
    out
}

/// Every `cachePoint` block of a request, with where it is.
fn cache_points(request: &Value) -> Vec<(String, Value)> {
    let mut points = Vec::new();
    for (i, block) in request["system"].as_array().into_iter().flatten().enumerate() {
        if let Some(point) = block.get("cachePoint") {
            points.push((format!("system.{i}"), point.clone()));
        }
    }
    for (i, tool) in request["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(point) = tool.get("cachePoint") {
            points.push((format!("toolConfig.tools.{i}"), point.clone()));
        }
    }
    for (i, message) in request["messages"].as_array().into_iter().flatten().enumerate() {
        for (j, block) in message["content"].as_array().into_iter().flatten().enumerate() {
            if let Some(point) = block.get("cachePoint") {
                points.push((format!("messages.{i}.content.{j}"), point.clone()));
            }
        }
    }
    points
}

/// Bedrock's prompt caching rules: a model that has it, at most four
/// points, each `{"type": "default"}` (with an optional `ttl` of `5m` or
/// `1h`), among the tools only for a Claude model.
fn check_cache_points(model: &str, request: &Value) -> Result<(), String> {
    let points = cache_points(request);
    if points.is_empty() {
        return Ok(());
    }
    if shared::domain::run::model::cache_minimum(model).is_none() {
        return Err(format!(
            "You invoked an unsupported model or your request did not allow prompt caching: {model} does not support prompt caching (cachePoint at {}).",
            points[0].0
        ));
    }
    if points.len() > shared::domain::run::agent::MAX_CACHE_POINTS {
        return Err(format!(
            "A maximum of {} blocks with cache_control may be provided. Found {}.",
            shared::domain::run::agent::MAX_CACHE_POINTS,
            points.len()
        ));
    }
    for (at, point) in &points {
        let fields = point.as_object().map_or(0, |o| o.len());
        let ttl_ok = point.get("ttl").is_none_or(|t| matches!(t.as_str(), Some("5m" | "1h")));
        if point["type"] != "default" || !ttl_ok || fields > 1 + usize::from(point.get("ttl").is_some()) {
            return Err(format!(
                "{at}.cachePoint must be {{\"type\": \"default\"}} (and an optional ttl of 5m or 1h)"
            ));
        }
        if at.starts_with("toolConfig") && !shared::domain::run::model::caches_tools(model) {
            return Err(format!(
                "{at}: this model does not support a cachePoint among its tools"
            ));
        }
    }
    Ok(())
}

/// Deterministic token estimate: a token per four characters, at least one.
fn tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4).max(1)
}

/// The default when the script is empty: one call of the first offered tool,
/// then a short summary that quotes the last tool result.
/// [`Reply::EachToolOnce`]'s answer to `request`.
fn each_tool_once(request: &Value) -> Reply {
    let input_tokens = tokens(&request.to_string());
    let seen: std::collections::BTreeSet<String> = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["toolUse"]["name"].as_str().map(str::to_owned))
        .collect();
    let unseen = request["toolConfig"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["toolSpec"]["name"].as_str())
        .find(|name| !seen.contains(*name));
    match unseen {
        Some(tool) => Reply::tool(tool, json!({}), input_tokens, 20),
        None => Reply::text("Every tool was called once.", input_tokens, 8),
    }
}

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
        if fault == Fault::Stalled {
            drop(script);
            std::future::pending::<()>().await;
        }
        return error_response(
            fault.status(),
            fault.code(),
            format!("{} (the stand-in's throttle or fault)", fault.code()),
        );
    }
    script.requests.push((model.clone(), request.0.clone()));
    let reply = match script.replies.pop_front() {
        Some(Reply::Stall) => {
            drop(script);
            std::future::pending::<()>().await;
            unreachable!("a stalled answer never comes")
        }
        Some(Reply::EachToolOnce) => each_tool_once(&request.0),
        Some(reply) => reply,
        None => default_reply(&request.0),
    };
    // The reply's input tokens are the request's whole input: what the
    // cache read or wrote of it is billed apart, as Bedrock reports it.
    let cached = |script: &mut Script, input: u64| script.cache_usage(&model, &request.0, input);
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    let (status, value) = match reply {
        Reply::Text {
            text,
            input_tokens,
            output_tokens,
        } => (
            StatusCode::OK,
            with_cache(
                body(vec![json!({"text": text})], "end_turn", input_tokens, output_tokens),
                cached(&mut script, input_tokens),
            ),
        ),
        Reply::ToolUse {
            name,
            input,
            input_tokens,
            output_tokens,
        } => {
            let id = format!("tooluse_{}", script.requests.len());
            let content = vec![json!({"toolUse": {"toolUseId": id, "name": name, "input": input}})];
            (
                StatusCode::OK,
                with_cache(
                    body(content, "tool_use", input_tokens, output_tokens),
                    cached(&mut script, input_tokens),
                ),
            )
        }
        Reply::ToolUses {
            calls,
            input_tokens,
            output_tokens,
        } => {
            let turn = script.requests.len();
            let content = calls
                .iter()
                .enumerate()
                .map(|(i, (name, input))| {
                    json!({"toolUse": {"toolUseId": format!("tooluse_{turn}_{i}"), "name": name, "input": input}})
                })
                .collect();
            (
                StatusCode::OK,
                with_cache(
                    body(content, "tool_use", input_tokens, output_tokens),
                    cached(&mut script, input_tokens),
                ),
            )
        }
        Reply::Stop {
            reason,
            text,
            input_tokens,
            output_tokens,
        } => (
            StatusCode::OK,
            with_cache(
                body(vec![json!({"text": text})], &reason, input_tokens, output_tokens),
                cached(&mut script, input_tokens),
            ),
        ),
        Reply::Error { status, code } => {
            return error_response(status, &code, format!("{code} from the stand-in"));
        }
        Reply::EachToolOnce | Reply::Stall => unreachable!("answered above"),
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
/// Converse's largest image side, in pixels.
pub const MAX_IMAGE_SIDE: usize = 8_000;

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
    // The model reads the bytes as the format named: bytes of another
    // format, or of none, are refused, and so is a side above 8,000 px.
    let actual = match imagesize::image_type(&bytes) {
        Ok(imagesize::ImageType::Png) => "png",
        Ok(imagesize::ImageType::Jpeg) => "jpeg",
        Ok(imagesize::ImageType::Gif) => "gif",
        Ok(imagesize::ImageType::Webp) => "webp",
        _ => "",
    };
    if actual != format {
        return Err(format!(
            "{at}.image.source.bytes: Image does not match the provided media type image/{format}"
        ));
    }
    match imagesize::blob_size(&bytes) {
        Ok(size) if size.width <= MAX_IMAGE_SIDE && size.height <= MAX_IMAGE_SIDE => Ok(()),
        Ok(_) => Err(format!(
            "{at}.image.source.bytes: image dimensions exceed max allowed size: {MAX_IMAGE_SIDE} pixels"
        )),
        Err(_) => Err(format!("{at}.image.source.bytes: Could not process image")),
    }
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
    let ceiling = i64::from(shared::domain::run::model::max_output_tokens(model));
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
            if block.get("cachePoint").is_some() {
                continue;
            }
            check_block(block, &format!("messages.{i}.content.{j}"))?;
            if block["toolResult"].get("status").is_some()
                && !shared::domain::run::model::takes_tool_result_status(model)
            {
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
    check_cache_points(model, request)?;
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
        if tool.get("cachePoint").is_some() {
            continue;
        }
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
