//! Traces (SPEC §14): the spans the use cases open, named and attributed as
//! the OpenTelemetry GenAI semantic conventions say, and never any content.
//!
//! One trace per occurrence: a runs-queue delivery is the root (`deliver`,
//! kind CONSUMER), whatever else its Lambda invocation carries; under it,
//! when the occurrence runs, `invoke_agent <agent>`; under that, the MCP
//! set-up calls (`initialize`, `prompts/get <prompt>`, `tools/list`), each
//! Converse call (`chat <model>`, kind CLIENT) and each tool call
//! (`execute_tool <tool>`). A `tools/call` is sent while its `execute_tool`
//! span is current, so the W3C `traceparent` in its `params._meta` names
//! that span (`adapters::mcp`). Create's call and reconcile's work items are
//! roots of their own traces too.
//!
//! What a span may carry: ids (task, workspace, occurrence, message,
//! install), names (model, agent, prompt, tool, server), counts, token
//! usage, finish reasons and low-cardinality error types. Never an
//! instruction, a title, a prompt, a model's output, a tool's arguments or
//! result, nor an error message a server wrote: a failed span's status
//! carries its error type only.
//!
//! The [`Tracer`] is given to each use case (off unless configured:
//! `config::traces`); the adapters export what it records
//! (`adapters::telemetry::Traces`), and the handler flushes it before it
//! answers, within a bound ([`Tracer::flush`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::global::BoxedTracer;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue, StringValue, Value};

pub use opentelemetry::context::FutureExt;

/// Attribute keys: the semantic conventions' (GenAI, MCP, messaging,
/// error), then this system's own, under `agent_schedule.`.
pub mod key {
    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const PROVIDER: &str = "gen_ai.provider.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    pub const AGENT_ID: &str = "gen_ai.agent.id";
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    pub const AGENT_VERSION: &str = "gen_ai.agent.version";
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    pub const TOOL_TYPE: &str = "gen_ai.tool.type";
    pub const PROMPT_NAME: &str = "gen_ai.prompt.name";
    pub const MCP_METHOD: &str = "mcp.method.name";
    pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const ERROR_TYPE: &str = "error.type";
    pub const MESSAGING_SYSTEM: &str = "messaging.system";
    pub const MESSAGING_OPERATION: &str = "messaging.operation.type";
    pub const MESSAGE_ID: &str = "messaging.message.id";
    pub const TASK_ID: &str = "agent_schedule.task_id";
    pub const WORKSPACE: &str = "agent_schedule.workspace";
    pub const OCCURRENCE: &str = "agent_schedule.occurrence";
    pub const INSTALL_ID: &str = "agent_schedule.install_id";
    pub const SERVER: &str = "agent_schedule.server";
    /// What became of a delivery, a create or a work item, as a code.
    pub const OUTCOME: &str = "agent_schedule.outcome";
    pub const TASKS_WRITTEN: &str = "agent_schedule.tasks_written";
    pub const DECLARATIONS_REFUSED: &str = "agent_schedule.declarations_refused";
    /// Occurrences the missed-occurrence check found and recorded.
    pub const OCCURRENCES_OVERDUE: &str = "agent_schedule.occurrences_overdue";
}

/// `gen_ai.provider.name` for Bedrock.
pub const PROVIDER_BEDROCK: &str = "aws.bedrock";
/// `gen_ai.tool.type` of a tool an MCP server runs: an extension of the
/// agent, executed elsewhere.
pub const TOOL_TYPE_EXTENSION: &str = "extension";

/// The most a handler's flush takes: the in-region endpoint answers in tens
/// of milliseconds, and a slow one must not hold the answer up.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);
/// Kept back before the invocation's deadline, for the answer itself.
pub const FLUSH_MARGIN: Duration = Duration::from_secs(1);

/// How long a flush may take with `left` before the invocation's deadline:
/// at most [`FLUSH_LIMIT`], and never into the last [`FLUSH_MARGIN`] (a
/// Lambda that times out fails its whole batch).
pub fn flush_budget(left: Duration) -> Duration {
    left.saturating_sub(FLUSH_MARGIN).min(FLUSH_LIMIT)
}

/// Exports what a [`Tracer`] recorded; the adapters' exporter.
pub trait Export: Send + Sync {
    /// Sends what was recorded so far, giving up after `within`. Never
    /// fails: a lost batch of spans is logged, never the caller's error.
    fn flush(&self, within: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Opens spans for a use case; off (spans that record nothing) unless an
/// exporter was configured.
#[derive(Clone)]
pub struct Tracer {
    tracer: Arc<BoxedTracer>,
    export: Option<Arc<dyn Export>>,
}

impl Default for Tracer {
    fn default() -> Self {
        Self::off()
    }
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer").field("on", &self.export.is_some()).finish()
    }
}

/// A use case that opens spans on its [`Tracer`], off until one is given.
pub trait Traced: Sized {
    /// The use case's tracer (its flush ends an invocation).
    fn tracer(&self) -> &Tracer;

    fn tracer_mut(&mut self) -> &mut Tracer;

    /// Opens its spans on `tracer` (off by default).
    fn with_tracer(mut self, tracer: Tracer) -> Self {
        *self.tracer_mut() = tracer;
        self
    }
}

/// Who runs an occurrence, for `invoke_agent`.
#[derive(Debug, Clone, Copy)]
pub struct AgentFacts<'a> {
    /// `reminder`, or a connector task's `<server>/<prompt>`.
    pub name: &'a str,
    /// The pinned agent, when the task has one: (id, version).
    pub pinned: Option<(&'a str, &'a str)>,
    pub model: &'a str,
    /// The run id (`<task_id>@<occurrence>`): the conversation.
    pub run_id: &'a str,
}

impl Tracer {
    /// Spans that record nothing, and nothing to flush.
    pub fn off() -> Self {
        Self {
            tracer: Arc::new(BoxedTracer::new(
                Box::new(opentelemetry::trace::noop::NoopTracer::new()),
            )),
            export: None,
        }
    }

    /// Spans of `tracer`, sent by `export`.
    pub fn new<T>(tracer: T, export: Arc<dyn Export>) -> Self
    where
        T: opentelemetry::trace::Tracer + Send + Sync + 'static,
        T::Span: Send + Sync + 'static,
    {
        Self {
            tracer: Arc::new(BoxedTracer::new(Box::new(tracer))),
            export: Some(export),
        }
    }

    /// Sends the spans recorded so far, within `within`; nothing when off.
    /// Handlers call it before they answer: a Lambda is frozen after its
    /// answer, and a span left in memory may never leave.
    pub async fn flush(&self, within: Duration) {
        if let Some(export) = &self.export {
            export.flush(within).await;
        }
    }

    fn start(&self, name: String, kind: SpanKind, parent: &Context, attributes: Vec<KeyValue>) -> Span {
        let span = self
            .tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes)
            .start_with_context(self.tracer.as_ref(), parent);
        Span {
            cx: parent.with_span(span),
        }
    }

    /// The root of a runs-queue delivery: a trace of its own, whatever
    /// else the invocation carries.
    pub fn delivery(&self, message_id: &str) -> Span {
        self.start(
            "deliver".into(),
            SpanKind::Consumer,
            &Context::new(),
            vec![
                KeyValue::new(key::MESSAGING_SYSTEM, "aws_sqs"),
                KeyValue::new(key::MESSAGING_OPERATION, "process"),
                KeyValue::new(key::MESSAGE_ID, message_id.to_owned()),
            ],
        )
    }

    /// The agent's run of an occurrence: the procedure and the loop.
    pub fn invoke_agent(&self, agent: &AgentFacts<'_>) -> Span {
        let mut attributes = vec![
            KeyValue::new(key::OPERATION, "invoke_agent"),
            KeyValue::new(key::PROVIDER, PROVIDER_BEDROCK),
            KeyValue::new(key::AGENT_NAME, agent.name.to_owned()),
            KeyValue::new(key::REQUEST_MODEL, agent.model.to_owned()),
            KeyValue::new(key::CONVERSATION_ID, agent.run_id.to_owned()),
        ];
        if let Some((id, version)) = agent.pinned {
            attributes.push(KeyValue::new(key::AGENT_ID, id.to_owned()));
            attributes.push(KeyValue::new(key::AGENT_VERSION, version.to_owned()));
        }
        self.start(
            format!("invoke_agent {}", agent.name),
            SpanKind::Internal,
            &Context::current(),
            attributes,
        )
    }

    /// One Converse call.
    pub fn chat(&self, model: &str, max_tokens: u32) -> Span {
        self.start(
            format!("chat {model}"),
            SpanKind::Client,
            &Context::current(),
            vec![
                KeyValue::new(key::OPERATION, "chat"),
                KeyValue::new(key::PROVIDER, PROVIDER_BEDROCK),
                KeyValue::new(key::REQUEST_MODEL, model.to_owned()),
                KeyValue::new(key::REQUEST_MAX_TOKENS, i64::from(max_tokens)),
            ],
        )
    }

    /// One tool call the model asked for, run on an MCP server: the span a
    /// `tools/call`'s `traceparent` names.
    pub fn execute_tool(&self, tool: &str, call_id: &str) -> Span {
        self.start(
            format!("execute_tool {tool}"),
            SpanKind::Internal,
            &Context::current(),
            vec![
                KeyValue::new(key::OPERATION, "execute_tool"),
                KeyValue::new(key::TOOL_NAME, tool.to_owned()),
                KeyValue::new(key::TOOL_CALL_ID, call_id.to_owned()),
                KeyValue::new(key::TOOL_TYPE, TOOL_TYPE_EXTENSION),
                KeyValue::new(key::MCP_METHOD, "tools/call"),
            ],
        )
    }

    /// An MCP request other than `tools/call` (`initialize`, `prompts/get`,
    /// `prompts/list`, `tools/list`), named `<method> <target>` when it has
    /// a target (a prompt's name).
    pub fn mcp(&self, method: &'static str, prompt: Option<&str>) -> Span {
        let mut attributes = vec![KeyValue::new(key::MCP_METHOD, method)];
        let name = match prompt {
            Some(prompt) => {
                attributes.push(KeyValue::new(key::PROMPT_NAME, prompt.to_owned()));
                format!("{method} {prompt}")
            }
            None => method.to_owned(),
        };
        self.start(name, SpanKind::Client, &Context::current(), attributes)
    }

    /// The root of a create call (an invocation by a chat backend).
    pub fn create(&self) -> Span {
        self.start("create".into(), SpanKind::Server, &Context::new(), Vec::new())
    }

    /// The root of one reconcile work item or pass (`what`: its kind).
    pub fn reconcile(&self, what: &str) -> Span {
        self.start(
            format!("reconcile {what}"),
            SpanKind::Consumer,
            &Context::new(),
            Vec::new(),
        )
    }
}

/// An open span: current for the futures run in it ([`Span::run`]), ended
/// by [`Span::end`] (or when the last of its contexts is dropped).
pub struct Span {
    cx: Context,
}

impl Span {
    /// Runs `future` with this span current: spans it opens are children,
    /// and an MCP request it sends names this span.
    pub fn run<F: Future>(&self, future: F) -> opentelemetry::context::WithContext<F> {
        future.with_context(self.cx.clone())
    }

    pub fn set(&self, key: &'static str, value: impl Into<Value>) {
        self.cx.span().set_attribute(KeyValue::new(key, value));
    }

    /// A string array attribute (`gen_ai.response.finish_reasons`).
    pub fn set_list(&self, key: &'static str, values: impl IntoIterator<Item = String>) {
        let values: Vec<StringValue> = values.into_iter().map(StringValue::from).collect();
        self.set(key, Value::Array(values.into()));
    }

    /// The operation failed: `error.type` and an error status that says the
    /// type only (never a message, which may carry a server's text).
    pub fn fail(&self, error_type: impl Into<String>) {
        let error_type: String = error_type.into();
        let span = self.cx.span();
        span.set_attribute(KeyValue::new(key::ERROR_TYPE, error_type.clone()));
        span.set_status(Status::error(error_type));
    }

    pub fn end(self) {
        self.cx.span().end();
    }
}

/// Adds attributes to the current span (an adapter's details of the
/// request the use case's span stands for).
pub fn annotate_current(attributes: impl IntoIterator<Item = KeyValue>) {
    let cx = Context::current();
    let span = cx.span();
    if span.is_recording() {
        for attribute in attributes {
            span.set_attribute(attribute);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flush_never_reaches_into_the_answer_s_margin() {
        for (left_ms, want_ms) in [(60_000, 2_000), (2_500, 1_500), (1_000, 0), (0, 0), (3_000, 2_000)] {
            assert_eq!(
                flush_budget(Duration::from_millis(left_ms)),
                Duration::from_millis(want_ms),
                "{left_ms} ms left"
            );
        }
    }
}
