//! A scripted stand-in for Bedrock Runtime `Converse` on loopback. Bedrock
//! cannot be reached here, so tests and the local main job point the SDK at
//! this with `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`; it speaks the Converse wire
//! format (`POST /model/{id}/converse`) and answers from a script, or, when
//! the script is empty, with a deterministic default: call the first offered
//! tool once, then finish. Token counts are deterministic too.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::post;
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

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    requests: Vec<(String, Value)>,
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
        .find_map(|c| c["toolResult"]["content"][0]["text"].as_str().map(str::to_owned));
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

async fn converse(
    State(script): State<Arc<Mutex<Script>>>,
    Path(model): Path<String>,
    request: axum::Json<Value>,
) -> impl IntoResponse {
    let mut script = script.lock().await;
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
            if let Ok(v) = HeaderValue::from_str(&code) {
                headers.insert("x-amzn-errortype", v);
            }
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                json!({"message": format!("{code} from the stand-in")}),
            )
        }
    };
    (status, headers, axum::Json(value))
}

impl ConverseStandIn {
    pub async fn start() -> anyhow::Result<Self> {
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new()
            .route("/model/{model}/converse", post(converse))
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

    /// Every request received: (model id, JSON body).
    pub async fn requests(&self) -> Vec<(String, Value)> {
        self.script.lock().await.requests.clone()
    }
}

impl Drop for ConverseStandIn {
    fn drop(&mut self) {
        self.server.abort();
    }
}
