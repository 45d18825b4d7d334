//! Step 5, the agent loop's I/O: each model call and each tool call, around
//! the decisions of `domain::agent_loop::AgentLoop` (what may be called,
//! when the loop stops, what the run used).

use chrono::Utc;
use serde_json::Value;

use super::{Runner, backoff};
use crate::domain::agent::{Block, ModelReply, tool_result};
use crate::domain::agent_loop::{AgentLoop, Ended, Next, ToolCall, Turn};
use crate::ports::{Connectors, McpSession, Model, ModelErrorKind, RunStore};
use crate::trace::key;

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    /// Turns until the loop ends: a model call, then the tool calls it asks
    /// for, answered in one message, until [`AgentLoop`] says stop.
    pub(super) async fn agent_loop(&self, mut turns: AgentLoop, sessions: &[C::Session], run_id: &str) -> Ended {
        loop {
            let turn = match turns.next_turn() {
                Ok(turn) => turn,
                Err(ended) => return ended,
            };
            let reply = match self.model_call(&turns, &turn).await {
                Ok(reply) => reply,
                Err(ended) => return ended,
            };
            let calls = match turns.answered(&turn, reply) {
                Next::Stop(ended) => return ended,
                Next::CallTools(calls) => calls,
            };
            let mut results = Vec::new();
            for (id, name, input) in calls {
                let route = match turns.tool_call(&id, &name) {
                    ToolCall::Allowed(route) => route,
                    ToolCall::Refused(result) => {
                        tracing::warn!(tool = %name, "refused a call to a tool this task is not offered");
                        results.push(result);
                        continue;
                    }
                    ToolCall::OverLimit(ended) => return ended,
                };
                let session = &sessions[route.session];
                match self.tool_call(&turns, session, &route.tool, id, input, run_id).await {
                    Ok(result) => results.push(result),
                    Err(ended) => return ended,
                }
            }
            if let Err(ended) = turns.tool_results(results) {
                return ended;
            }
        }
    }

    /// One model call (`Model::converse`) within the run's wall time,
    /// retried with jittered backoff while it is throttled and a retry
    /// still fits.
    async fn model_call(&self, turns: &AgentLoop, turn: &Turn) -> Result<ModelReply, Ended> {
        let mut throttled = 0u32;
        loop {
            let remaining = turns.time_left(Utc::now());
            if remaining.is_zero() {
                // Out of time while the model kept it throttled: load, as
                // `throttled` says (back to the queue before any tool call).
                if throttled > 0
                    && let Some(ended) = turns.throttled(Utc::now(), std::time::Duration::ZERO)
                {
                    return Err(ended);
                }
                return Err(turns.out_of_time());
            }
            let call = self.model.converse(&self.settings.model_id, &turn.request);
            let span = self.tracer.chat(&self.settings.model_id, turn.request.max_tokens);
            let answered = span.run(tokio::time::timeout(remaining, call)).await;
            match &answered {
                Err(_) => span.fail("timeout"),
                Ok(Ok(reply)) => {
                    span.set(key::INPUT_TOKENS, reply.input_tokens as i64);
                    span.set(key::OUTPUT_TOKENS, reply.output_tokens as i64);
                    span.set_list(key::FINISH_REASONS, [reply.stop.code().to_owned()]);
                }
                Ok(Err(e)) => span.fail(e.code.clone().unwrap_or_else(|| "model_error".to_owned())),
            }
            span.end();
            match answered {
                Err(_) => return Err(turns.out_of_time()),
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) if e.kind == ModelErrorKind::Throttled => {
                    let wait = backoff(throttled);
                    throttled += 1;
                    if let Some(ended) = turns.throttled(Utc::now(), wait) {
                        return Err(ended);
                    }
                    tracing::info!(attempt = throttled, wait_ms = wait.as_millis() as u64, error = %e, "model throttled; retrying");
                    tokio::time::sleep(wait).await;
                }
                Ok(Err(e)) => return Err(turns.model_failed(e.to_string())),
            }
        }
    }

    /// One tool call (`McpSession::call_tool`, carrying the run id) within
    /// the run's wall time, in its `execute_tool` span (which the request's
    /// `traceparent` names); a failed call is an error result the model reads.
    async fn tool_call(
        &self,
        turns: &AgentLoop,
        session: &C::Session,
        tool: &str,
        id: String,
        input: Value,
        run_id: &str,
    ) -> Result<Block, Ended> {
        let left = turns.time_left(Utc::now());
        let span = self.tracer.execute_tool(tool, &id);
        let answered = span
            .run(tokio::time::timeout(left, session.call_tool(tool, input, run_id)))
            .await;
        match &answered {
            Err(_) => span.fail("timeout"),
            Ok(Ok(out)) if out.is_error => span.fail("tool_error"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => span.fail(crate::app::mcp_error_type(e)),
        }
        span.end();
        match answered {
            Err(_) => Err(turns.out_of_time()),
            Ok(Ok(out)) => Ok(Block::ToolResult {
                id,
                content: tool_result(out.content),
                is_error: out.is_error,
            }),
            Ok(Err(e)) => Ok(Block::ToolResult {
                id,
                content: vec![Block::Text(e.to_string())],
                is_error: true,
            }),
        }
    }
}
