//! The project's MCP fixture server (rmcp, streamable HTTP on loopback): it
//! declares prompts, some with the `ai.nimblebrain/scheduled-prompts` marker,
//! and tools that echo their input and record every call. Tests change its
//! declarations between calls through [`McpFixture::state`].
//!
//! [`McpFixture::start_https`] serves the same over TLS (rustls on
//! aws-lc-rs) with a certificate from a [`crate::tls::TestCa`], a root and a server
//! certificate made when the test runs; the client trusts that root only
//! where a test gives it (`shared::adapters::tls::Tls::trusting`).

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, JsonObject, ListPromptsResult, ListToolsResult, MetaObject,
    PaginatedRequestParams, Prompt, PromptArgument, PromptMessage, Role, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::RwLock;

use crate::tls::{TestCa, TlsListener};

/// The `_meta` key a scheduled prompt carries (SPEC §5).
pub const MARKER: &str = "ai.nimblebrain/scheduled-prompts";

#[derive(Debug, Clone)]
pub struct FixturePrompt {
    pub name: String,
    pub description: String,
    /// (name, required)
    pub arguments: Vec<(String, bool)>,
    /// The `_meta` object, marker included, if any.
    pub meta: Option<Value>,
    /// The prompt text; `{{arg}}` is replaced by the argument's value.
    pub template: String,
}

#[derive(Debug, Clone)]
pub struct FixtureTool {
    pub name: String,
    pub description: String,
    /// Its input schema as listed (`None`: an object with one text field).
    pub schema: Option<JsonObject>,
    /// Its `annotations` as listed, as JSON (`destructiveHint`, `readOnlyHint`).
    pub annotations: Option<Value>,
}

#[derive(Debug, Default)]
pub struct FixtureState {
    pub prompts: Vec<FixturePrompt>,
    pub tools: Vec<FixtureTool>,
    /// Every `tools/call`: (tool, arguments).
    pub calls: Vec<(String, Value)>,
    /// Every `prompts/get`: (prompt, arguments).
    pub prompt_gets: Vec<(String, BTreeMap<String, String>)>,
    /// The `Authorization` headers seen.
    pub authorizations: Vec<String>,
    /// Items per page of `prompts/list` and `tools/list` (0: all at once).
    pub page_size: usize,
    /// How long `prompts/get` takes to answer (a slow server).
    pub get_prompt_delay: Option<std::time::Duration>,
    /// Prompts answered with these messages as they are (shaped like real
    /// servers': runs of one role, an assistant first, images, resources),
    /// instead of their template.
    pub prompt_messages: BTreeMap<String, Vec<PromptMessage>>,
    /// Tools answered with this result instead of the echo (empty,
    /// structured, images, a huge text, an error).
    pub tool_answers: BTreeMap<String, CallToolResult>,
    /// The `_meta` of every `tools/call`, in order (`None` when absent).
    pub call_metas: Vec<Option<Value>>,
    /// Serves tools alone, as most MCP servers do: no `prompts` capability,
    /// and a `prompts/list` asked anyway answers `-32601`.
    pub tools_only: bool,
    /// Every `prompts/list` asked.
    pub prompt_lists: usize,
}

#[derive(Clone)]
struct Handler {
    state: Arc<RwLock<FixtureState>>,
    tools_only: bool,
}

fn page<T: Clone>(items: &[T], size: usize, cursor: Option<String>) -> Result<(Vec<T>, Option<String>), ErrorData> {
    let start: usize = match cursor {
        None => 0,
        Some(c) => c.parse().map_err(|_| ErrorData::invalid_params("bad cursor", None))?,
    };
    let size = if size == 0 { items.len().max(1) } else { size };
    let end = (start + size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items.get(start..end).unwrap_or_default().to_vec(), next))
}

fn to_prompt(p: &FixturePrompt) -> Prompt {
    let arguments = p
        .arguments
        .iter()
        .map(|(name, required)| PromptArgument::new(name.clone()).with_required(*required))
        .collect();
    let prompt = Prompt::new(p.name.clone(), Some(p.description.clone()), Some(arguments));
    match &p.meta {
        Some(Value::Object(meta)) => prompt.with_meta(MetaObject(meta.clone())),
        _ => prompt,
    }
}

impl ServerHandler for Handler {
    fn get_info(&self) -> ServerConfig {
        let capabilities = if self.tools_only {
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        } else {
            ServerCapabilities::builder()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_tools()
                .enable_tool_list_changed()
                .build()
        };
        ServerConfig::new(capabilities).with_server_info(Implementation::new("fixture", "1.0.0"))
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let mut state = self.state.write().await;
        state.prompt_lists += 1;
        if self.tools_only {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "Method not found",
                None,
            ));
        }
        let all: Vec<Prompt> = state.prompts.iter().map(to_prompt).collect();
        let (items, next) = page(&all, state.page_size, request.and_then(|r| r.cursor))?;
        let mut result = ListPromptsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _cx: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let delay = self.state.read().await.get_prompt_delay;
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        let mut state = self.state.write().await;
        let args: BTreeMap<String, String> = request
            .arguments
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())))
            .collect();
        state.prompt_gets.push((request.name.to_string(), args.clone()));
        let prompt = state
            .prompts
            .iter()
            .find(|p| p.name == request.name)
            .ok_or_else(|| ErrorData::invalid_params(format!("unknown prompt: {}", request.name), None))?;
        if let Some(messages) = state.prompt_messages.get(request.name.as_str()) {
            return Ok(GetPromptResult::new(messages.clone()).into());
        }
        let mut text = prompt.template.clone();
        for (name, required) in &prompt.arguments {
            match args.get(name) {
                Some(value) => text = text.replace(&format!("{{{{{name}}}}}"), value),
                None if *required => {
                    return Err(ErrorData::invalid_params(
                        format!("missing required argument: {name}"),
                        None,
                    ));
                }
                None => {}
            }
        }
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).into())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let state = self.state.read().await;
        let schema: JsonObject = match json!({"type": "object", "properties": {"text": {"type": "string"}}}) {
            Value::Object(o) => o,
            _ => JsonObject::new(),
        };
        let all: Vec<Tool> = state
            .tools
            .iter()
            .map(|t| {
                let listed = t.schema.clone().unwrap_or_else(|| schema.clone());
                let mut tool = Tool::new(t.name.clone(), t.description.clone(), Arc::new(listed));
                // An empty description is a tool without one, as many servers list them.
                if t.description.is_empty() {
                    tool.description = None;
                }
                tool.annotations = t.annotations.clone().and_then(|a| serde_json::from_value(a).ok());
                tool
            })
            .collect();
        let (items, next) = page(&all, state.page_size, request.and_then(|r| r.cursor))?;
        let mut result = ListToolsResult::with_all_items(items);
        result.next_cursor = next;
        Ok(result)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut state = self.state.write().await;
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        state.calls.push((request.name.to_string(), args.clone()));
        // rmcp hands the request's `_meta` to the handler in its context.
        let meta = request.meta.as_ref().unwrap_or(&cx.meta);
        state
            .call_metas
            .push((!meta.0.0.is_empty()).then(|| Value::Object(meta.0.0.clone())));
        if !state.tools.iter().any(|t| t.name == request.name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {}", request.name),
                None,
            ));
        }
        if let Some(answer) = state.tool_answers.get(&*request.name) {
            return Ok(answer.clone().into());
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!("{} done with {args}", request.name))]).into())
    }
}

/// A running fixture server. Dropping it stops it.
pub struct McpFixture {
    port: u16,
    https: bool,
    state: Arc<RwLock<FixtureState>>,
    server: tokio::task::JoinHandle<()>,
    refused: Arc<std::sync::Mutex<Vec<String>>>,
}

impl McpFixture {
    pub async fn start(initial: FixtureState) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let (state, app) = Self::app(initial);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            port,
            https: false,
            state,
            server,
            refused: Arc::default(),
        })
    }

    /// The same server over https, with `ca`'s server certificate.
    pub async fn start_https(initial: FixtureState, ca: &TestCa) -> anyhow::Result<Self> {
        let tcp = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = tcp.local_addr()?.port();
        let listener = TlsListener::new(tcp, ca)?;
        let refused = listener.refused.clone();
        let (state, app) = Self::app(initial);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            port,
            https: true,
            state,
            server,
            refused,
        })
    }

    /// The TLS handshakes this server saw fail, with their errors.
    pub fn refused_handshakes(&self) -> Vec<String> {
        self.refused.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn app(initial: FixtureState) -> (Arc<RwLock<FixtureState>>, Router) {
        let tools_only = initial.tools_only;
        let state = Arc::new(RwLock::new(initial));
        let for_service = state.clone();
        let service = StreamableHttpService::new(
            move || {
                Ok(Handler {
                    state: for_service.clone(),
                    tools_only,
                })
            },
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let for_auth = state.clone();
        let record_auth = move |request: Request, next: Next| {
            let state = for_auth.clone();
            async move {
                if let Some(value) = request.headers().get("authorization").and_then(|v| v.to_str().ok()) {
                    state.write().await.authorizations.push(value.to_owned());
                }
                let response: Response = next.run(request).await;
                response
            }
        };
        let app = Router::new()
            .nest_service("/mcp", service)
            .layer(axum::middleware::from_fn(record_auth));
        (state, app)
    }

    pub fn url(&self) -> String {
        self.url_at("127.0.0.1")
    }

    /// Its URL with `host` (a name that resolves to loopback, or an address).
    pub fn url_at(&self, host: &str) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{host}:{}/mcp", self.port)
    }

    /// The declarations and the record of calls, to read or change.
    pub fn state(&self) -> &Arc<RwLock<FixtureState>> {
        &self.state
    }
}

impl Drop for McpFixture {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A prompt with a scheduled-prompts marker.
pub fn scheduled_prompt(name: &str, marker: Value, arguments: &[(&str, bool)], template: &str) -> FixturePrompt {
    FixturePrompt {
        name: name.to_owned(),
        description: format!("{name} (scheduled)"),
        arguments: arguments.iter().map(|(n, r)| ((*n).to_owned(), *r)).collect(),
        meta: Some(json!({ MARKER: marker })),
        template: template.to_owned(),
    }
}

pub fn tool(name: &str) -> FixtureTool {
    FixtureTool {
        name: name.to_owned(),
        description: format!("The fixture's {name} tool"),
        schema: None,
        annotations: None,
    }
}

/// A tool listed with these annotations (`{"destructiveHint": true}`, ...).
pub fn annotated_tool(name: &str, annotations: Value) -> FixtureTool {
    FixtureTool {
        annotations: Some(annotations),
        ..tool(name)
    }
}

/// A tool listed with this input schema, as it is (real servers list `{}`,
/// a root `anyOf`, a schema without a type).
pub fn tool_with_schema(name: &str, schema: Value) -> FixtureTool {
    FixtureTool {
        schema: match schema {
            Value::Object(object) => Some(object),
            _ => Some(JsonObject::new()),
        },
        ..tool(name)
    }
}

/// A tool listed without a description.
pub fn undescribed_tool(name: &str) -> FixtureTool {
    FixtureTool {
        name: name.to_owned(),
        description: String::new(),
        schema: None,
        annotations: None,
    }
}

/// A 1x1 transparent PNG, base64: the smallest image a prompt or a tool
/// can carry.
pub const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
