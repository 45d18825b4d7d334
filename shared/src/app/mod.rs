//! Use cases: each takes ports, the clock's `now` and a request, applies the
//! domain, and says what to write in which order. No AWS types here.

pub mod admin;
pub mod approvals;
pub mod change;
pub mod create;
pub mod overdue;
pub mod reconcile;
pub mod run;
pub mod run_now;
pub mod schedules;

use crate::ports::McpError;
use crate::trace;

/// Runs one MCP request in its span; a failure's span says its JSON-RPC
/// code (`error.type`), never the server's message.
pub(crate) async fn mcp_step<T>(
    span: trace::Span,
    request: impl std::future::Future<Output = Result<T, McpError>>,
) -> Result<T, McpError> {
    let answered = span.run(request).await;
    if let Err(e) = &answered {
        span.fail(mcp_error_type(e));
    }
    span.end();
    answered
}

/// `error.type` of a failed MCP request: its JSON-RPC code when the server
/// answered with one, else `transport` (unreachable, refused, timed out).
pub(crate) fn mcp_error_type(error: &McpError) -> String {
    error
        .code
        .map_or_else(|| "transport".to_owned(), |code| code.to_string())
}
