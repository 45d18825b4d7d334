//! An MCP server as people write one by hand: JSON-RPC over one HTTP POST
//! route, `initialize` and `prompts/list` answered, and every other method,
//! `server/discover` among them, answered with an empty result rather than
//! "method not found" (the MCP conformance suite's own server does the
//! same). Loopback only. Counts the methods it was asked and keeps the
//! protocol versions `initialize` offered.

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};

#[derive(Clone, Default)]
struct Asked(Arc<Mutex<Vec<String>>>, Arc<Mutex<Vec<String>>>);

pub struct Handwritten {
    port: u16,
    asked: Asked,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Handwritten {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(State(asked): State<Asked>, body: String) -> axum::response::Response {
    let Ok(request) = serde_json::from_str::<Value>(&body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let method = request["method"].as_str().unwrap_or_default().to_owned();
    if let Ok(mut asked) = asked.0.lock() {
        asked.push(method.clone());
    }
    if method == "initialize"
        && let Ok(mut offered) = asked.1.lock()
    {
        offered.push(
            request["params"]["protocolVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    let Some(id) = request.get("id").cloned() else {
        // A notification.
        return StatusCode::ACCEPTED.into_response();
    };
    let result = match method.as_str() {
        "initialize" => json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"prompts": {}},
            "serverInfo": {"name": "handwritten", "version": "0.1.0"}
        }),
        "prompts/list" => json!({"prompts": [{"name": "hello", "description": "Says hello."}]}),
        _ => json!({}),
    };
    axum::Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response()
}

impl Handwritten {
    pub async fn start() -> anyhow::Result<Self> {
        let asked = Asked::default();
        let app = axum::Router::new()
            .route("/mcp", post(answer))
            .with_state(asked.clone());
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, asked, server })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// The methods asked, in order.
    pub fn asked(&self) -> Vec<String> {
        self.asked.0.lock().map(|a| a.clone()).unwrap_or_default()
    }

    /// The protocol versions `initialize` offered, in order.
    pub fn offered(&self) -> Vec<String> {
        self.asked.1.lock().map(|a| a.clone()).unwrap_or_default()
    }
}
