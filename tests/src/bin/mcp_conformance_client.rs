//! The MCP conformance suite's client under test (npm
//! `@modelcontextprotocol/conformance`, `client --command`): our MCP client
//! adapter (`shared::adapters::mcp`), as the runner and reconcile use it.
//! The suite starts a server for one scenario, runs
//! `mcp-conformance-client <server-url>` with `MCP_CONFORMANCE_SCENARIO`
//! set, and judges what the server saw (`tests/tests/suite/conformance.rs`).
//!
//! - `initialize`: connect (the handshake, falling back from
//!   `server/discover` to `initialize`), list the tools.
//! - `tools_call`: connect, list the tools, call `add_numbers`.
//! - `sse-retry`: connect, list the tools, call `test_reconnection`, whose
//!   answer comes on a resumed stream.
//!
//! Exits non-zero, saying why, when a step fails.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use anyhow::{Context, bail};
use serde_json::json;
use shared::adapters::mcp::McpConnectors;
use shared::domain::connector::endpoint::EndpointPolicy;
use shared::ports::McpSession;

/// The run id a call carries (a scheduled run's, here a fixed one).
const RUN_ID: &str = "conformance";

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    tests::answer_help(
        "mcp-conformance-client <server-url>\n\nThe MCP conformance suite's client under test; MCP_CONFORMANCE_SCENARIO names the scenario (initialize, tools_call, sse-retry).",
    );
    let url = std::env::args()
        .nth(1)
        .context("usage: mcp-conformance-client <server-url>")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_else(|_| "initialize".to_owned());
    // The suite names its server `localhost`; it listens on IPv4 loopback
    // only (tests/tests/suite/conformance.rs binds it so).
    let url = url.replacen("://localhost:", "://127.0.0.1:", 1);
    let session = McpConnectors::open(&url, None, EndpointPolicy { allow_loopback: true })
        .await
        .map_err(|e| anyhow::anyhow!("connect: {e}"))?;
    println!(
        "connected: protocol {}, server {}",
        session.protocol_version().unwrap_or_default(),
        session.server_name().unwrap_or_default()
    );
    let tools = session
        .list_tools(None)
        .await
        .map_err(|e| anyhow::anyhow!("tools/list: {e}"))?;
    println!("tools: {:?}", tools.iter().map(|t| &t.name).collect::<Vec<_>>());
    let call = match scenario.as_str() {
        "initialize" => None,
        "tools_call" => Some(("add_numbers", json!({"a": 5, "b": 3}))),
        "sse-retry" => Some(("test_reconnection", json!({}))),
        other => bail!("scenario {other} is not one this client plays"),
    };
    if let Some((name, input)) = call {
        if !tools.iter().any(|t| t.name == name) {
            bail!("the server lists no tool {name}");
        }
        let out = session
            .call_tool(
                name,
                input,
                shared::ports::CallMeta {
                    run_id: RUN_ID,
                    call_key: "ck_conformance",
                },
            )
            .await
            .map_err(|e| anyhow::anyhow!("tools/call {name}: {e}"))?;
        println!("{name}: {:?}", out.content);
        if out.is_error {
            bail!("tools/call {name} answered an error");
        }
    }
    Ok(())
}
