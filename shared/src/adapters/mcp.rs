//! MCP connector sessions over streamable HTTP with `rmcp` (SPEC §7.4, §6).
//!
//! Every session: the client response cache off (a cached `prompts/list` or
//! `tools/list` would hide a release), a timeout on every request, and the
//! protocol version negotiated with fallback: 2026-07-28 first, then
//! 2025-11-25. A `prompts/get` answered with `InputRequiredResult` is an
//! error: an unattended run has nobody to give the input.
//!
//! MCP content becomes the domain's blocks here, faithfully (SPEC §7): text
//! as text; images in png, jpeg, gif or webp as image blocks; an embedded
//! text resource as text that names its URI; everything else (other image
//! types, audio, blob resources, resource links) named in a short text,
//! never dropped silently. A tool's `structuredContent` is a JSON block and
//! `isError` its status.
//!
//! A server is hostile until bounded (SPEC §7 "What a server sends is
//! bounded"): every text block is cut to [`MAX_TEXT_CHARS`], a prompt or a
//! result to [`MAX_TOTAL_CHARS`] of text, [`MAX_IMAGES`] images and (a prompt)
//! [`MAX_MESSAGES`] messages, a message or a
//! result keeps [`MAX_BLOCKS`] blocks, an image above Converse's 3.75 MB or
//! [`MAX_IMAGE_SIDE`] pixels a side, or whose bytes are no image of the four
//! formats, is named instead (one of the four is sent in the format its
//! header names), an error message is cut to [`MAX_ERROR_CHARS`], a
//! `tools/list` reads at most [`MAX_PAGES`] pages and [`MAX_TOOLS_READ`]
//! tools and keeps the approved ones among them (or, with no approval to
//! filter by, the first [`MAX_TOOLS`]), each description cut to
//! [`MAX_DESCRIPTION_CHARS`] and a schema above [`MAX_SCHEMA_BYTES`]
//! replaced by an open object schema. Every `tools/call` carries the run id
//! and the call's key in `_meta` (`agent::RUN_ID_META`,
//! `journal::CALL_KEY_META`), and, when traces are on, the W3C
//! `traceparent` of its `execute_tool` span (`crate::trace`).
//!
//! A connector's credential is read from Secrets Manager on first use (the
//! one reader, `adapters::secrets`) and kept for [`CREDENTIAL_TTL`] in a warm process, so a run costs no
//! Secrets Manager call and a rotated secret is picked up within minutes.
//!
//! Trust (SPEC §6): before anything is sent or read, the install's URL is
//! checked (`domain::connector::endpoint`), its host resolved here and every address it
//! resolves to checked, and the HTTP client pinned to the checked address
//! (`reqwest`'s `resolve`), with no proxy and no redirects, so DNS cannot
//! swap the address after the check. Each connection's client is built on
//! the process's one TLS configuration (`adapters::tls`): no root is loaded
//! per connection. The credential is read only if its ARN
//! is the install's own (`<CONNECTOR_SECRET_PREFIX><workspace>/<install_id>`),
//! after the address passed; a refused install costs no secret read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams, GetPromptResponse, Implementation,
    JsonObject, MetaObject, PaginatedRequestParams, Prompt, ProtocolVersion, RequestMetaObject, Role as McpRole,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError};
use serde_json::Value;

use base64::Engine;

use crate::adapters::secrets::SecretsReader;
use crate::adapters::tls::Tls;
use crate::domain::connector::declaration::MARKER;
use crate::domain::connector::endpoint::{Endpoint, EndpointPolicy, connect_endpoint};
use crate::domain::connector::reconcile::ListedPrompt;
use crate::domain::connector::webhook::InstallRules;
use crate::domain::run::agent::{Block, ImageFormat, Message, RUN_ID_META, Role};
use crate::domain::run::journal::CALL_KEY_META;
use crate::domain::task::install::Install;
use crate::ports::{CallMeta, Connectors, McpError, McpSession, ServerTool, ToolOutput};
use crate::trace;

/// Every MCP request ends within this, or fails the step that made it.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The protocol version `initialize` offers: the newest that opens with it
/// (a server that does not know `server/discover` speaks one of those).
const LEGACY_VERSION: ProtocolVersion = ProtocolVersion::V_2025_11_25;
/// `prompts/list` and `tools/list` stop after this many pages.
pub const MAX_PAGES: usize = 50;
/// The most a whole list read (every page of `prompts/list` or
/// `tools/list`) may take, whatever each page's request takes.
pub const LIST_DEADLINE: Duration = Duration::from_secs(45);
/// How long a warm process keeps a connector credential it read.
pub const CREDENTIAL_TTL: Duration = Duration::from_secs(300);
/// The most characters kept of one text block a server sends.
pub const MAX_TEXT_CHARS: usize = 32_768;
/// The most blocks kept of one prompt message or tool result.
pub const MAX_BLOCKS: usize = 32;
/// The most text characters kept of a whole prompt, and of one tool result.
pub const MAX_TOTAL_CHARS: usize = 131_072;
/// The most images kept of a whole prompt, and of one tool result.
pub const MAX_IMAGES: usize = 8;
/// The most messages kept of a prompt.
pub const MAX_MESSAGES: usize = 64;
/// The most characters kept of a server's error message.
pub const MAX_ERROR_CHARS: usize = 1_000;
/// The most tools kept of one server's `tools/list` when no approval
/// filters it (a bound connector, reconcile). Filtered by an approval, the
/// approval bounds what is kept.
pub const MAX_TOOLS: usize = 128;
/// The most tools read of one server's `tools/list`, over all its pages; the
/// approved filter is applied while reading, so an approved tool listed
/// within this bound is kept wherever it stands.
pub const MAX_TOOLS_READ: usize = 16_384;
/// The most characters kept of a tool's description.
pub const MAX_DESCRIPTION_CHARS: usize = 2_048;
/// The largest tool input schema offered as it is (JSON bytes).
pub const MAX_SCHEMA_BYTES: usize = 16_384;
/// Converse's largest image.
pub const MAX_IMAGE_BYTES: usize = 3_932_160;
/// Converse's largest image side, in pixels (each of width and height).
pub const MAX_IMAGE_SIDE: usize = 8_000;
/// The longest tool or prompt name kept as a server's list is read (MCP
/// 2025-11-25 names are at most 128 characters): a longer one is cut as it
/// is read, so 16,384 names hold at most 2 MB.
pub const MAX_NAME_CHARS: usize = 128;
/// The most one whole list read (every page of `prompts/list` or
/// `tools/list`) keeps, counted as the kept items' JSON: past it the read
/// fails, whatever each page's size.
pub const MAX_LIST_BYTES: usize = 4 * 1024 * 1024;

/// What a session reads from its server, which bounds every response in
/// bytes before rmcp parses it (its transport's `max_json_response_size`
/// and `max_sse_event_size`, 16 MiB each by default). rmcp decodes a
/// message twice (as `Content`, then as `serde_json::Value`), and a JSON
/// scalar costs about 32 bytes in each: a hostile array of numbers takes
/// some 32 times its bytes while it is parsed. Lists read a page at a time,
/// so theirs is small; a run's call may carry an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Reconcile's and `sat check`'s sessions: list pages (1 MiB each).
    Lists,
    /// A run's sessions: a prompt, a list, tool results (4 MiB each: an
    /// image of 3 MB in base64).
    Runs,
}

impl Reading {
    /// The most bytes of one response (a JSON body, or one SSE event).
    pub fn response_bytes(self) -> usize {
        match self {
            Reading::Lists => 1024 * 1024,
            Reading::Runs => 4 * 1024 * 1024,
        }
    }
}

fn cap(text: &str, max: usize) -> String {
    crate::domain::run::occurrence::cap_chars(text, max)
}

fn failed(operation: &'static str, error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(data) => McpError {
            operation,
            code: Some(i64::from(data.code.0)),
            message: cap(&data.message, MAX_ERROR_CHARS),
        },
        other => McpError {
            operation,
            code: None,
            message: cap(&other.to_string(), MAX_ERROR_CHARS),
        },
    }
}

fn list_timed_out(operation: &'static str) -> McpError {
    McpError {
        operation,
        code: None,
        message: format!("the whole list was not read within {} s", LIST_DEADLINE.as_secs()),
    }
}

fn timed_out(operation: &'static str) -> McpError {
    McpError {
        operation,
        code: None,
        message: format!("no answer within {} s", REQUEST_TIMEOUT.as_secs()),
    }
}

async fn timed<T>(
    operation: &'static str,
    call: impl std::future::Future<Output = Result<T, ServiceError>>,
) -> Result<T, McpError> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| failed(operation, e)),
        Err(_) => Err(timed_out(operation)),
    }
}

/// Opens sessions to installed connectors, reading their credential from
/// Secrets Manager when they have one.
#[derive(Clone)]
pub struct McpConnectors {
    secrets: SecretsReader,
    /// Secret ARN -> (token, when it was read).
    tokens: Arc<Mutex<HashMap<String, (String, Instant)>>>,
    reads: Arc<AtomicU64>,
    rules: InstallRules,
    tls: Tls,
    reading: Reading,
}

fn refused(message: String) -> McpError {
    McpError {
        operation: "connect",
        code: None,
        message,
    }
}

/// A failed connection's error and what caused it: rmcp keeps the
/// transport's error as a field, not as a source, and reqwest's text leaves
/// out its cause, so a refused certificate is read from reqwest's sources.
fn with_causes(error: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let mut text = error.to_string();
    if let rmcp::service::ClientInitializeError::TransportError { error, .. } = error
        && let Some(StreamableHttpError::Client(client)) =
            error.error.downcast_ref::<StreamableHttpError<reqwest::Error>>()
    {
        for cause in crate::adapters::tls::error_chain(client).skip(1) {
            let cause = cause.to_string();
            if !text.contains(&cause) {
                text.push_str(": ");
                text.push_str(&cause);
            }
        }
    }
    text
}

/// Resolves the endpoint's host (when it names one) and picks an address
/// that the rule admits; every resolved address must pass.
async fn checked_address(endpoint: &Endpoint) -> Result<std::net::IpAddr, McpError> {
    if let Some(address) = endpoint.address {
        return Ok(address);
    }
    let name = endpoint.name.clone().unwrap_or_default();
    let resolved: Vec<std::net::IpAddr> =
        tokio::time::timeout(REQUEST_TIMEOUT, tokio::net::lookup_host((name.as_str(), endpoint.port)))
            .await
            .map_err(|_| timed_out("connect"))?
            .map_err(|e| refused(format!("the connector host `{name}` did not resolve: {e}")))?
            .map(|a| a.ip())
            .collect();
    endpoint.pick(&resolved).map_err(|e| refused(e.to_string()))
}

impl McpConnectors {
    /// `rules`: where a connector may be (`ALLOW_LOOPBACK_CONNECTORS`) and
    /// which credential it may have (`CONNECTOR_SECRET_PREFIX`).
    pub fn from_sdk(sdk: &aws_config::SdkConfig, rules: InstallRules) -> Self {
        Self {
            secrets: SecretsReader::from_sdk(sdk),
            tokens: Arc::default(),
            reads: Arc::default(),
            rules,
            tls: Tls::process(),
            reading: Reading::Runs,
        }
    }

    /// Its sessions read lists only (reconcile): each response bounded as
    /// [`Reading::Lists`] says.
    pub fn for_lists(mut self) -> Self {
        self.reading = Reading::Lists;
        self
    }

    /// Verifies connectors' certificates with `tls` instead of the
    /// process's configuration (a test's server with a root made at test
    /// time: `Tls::trusting`).
    pub fn with_tls(mut self, tls: Tls) -> Self {
        self.tls = tls;
        self
    }

    /// Secrets Manager reads so far (tests count them).
    pub fn secret_reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    async fn token(&self, arn: &str) -> Result<String, McpError> {
        let cached = self
            .tokens
            .lock()
            .ok()
            .and_then(|tokens| tokens.get(arn).cloned())
            .filter(|(_, read_at)| read_at.elapsed() < CREDENTIAL_TTL);
        if let Some((token, _)) = cached {
            return Ok(token);
        }
        let token = self.read_token(arn).await?;
        if let Ok(mut tokens) = self.tokens.lock() {
            tokens.insert(arn.to_owned(), (token.clone(), Instant::now()));
        }
        Ok(token)
    }

    async fn read_token(&self, arn: &str) -> Result<String, McpError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.secrets.read(arn).await.map_err(|e| McpError {
            operation: "connect",
            code: None,
            message: if e.no_string {
                "the install's credential secret has no string value".into()
            } else {
                format!("the install's credential could not be read: {}", e.message)
            },
        })
    }

    /// Connects to `url` with an optional bearer token, if the endpoint
    /// rule admits it (and the address its host resolves to).
    pub async fn open(url: &str, token: Option<String>, policy: EndpointPolicy) -> Result<McpClient, McpError> {
        Self::open_with(url, token, policy, &Tls::process()).await
    }

    /// [`McpConnectors::open`], verifying the server's certificate with `tls`.
    pub async fn open_with(
        url: &str,
        token: Option<String>,
        policy: EndpointPolicy,
        tls: &Tls,
    ) -> Result<McpClient, McpError> {
        let endpoint = connect_endpoint(url, policy).map_err(|e| refused(e.to_string()))?;
        let address = Box::pin(checked_address(&endpoint)).await?;
        Box::pin(Self::open_pinned(&endpoint, address, token, tls, Reading::Runs)).await
    }

    /// Connects to a checked endpoint at the checked address only, every
    /// response bounded in bytes as `reading` says.
    async fn open_pinned(
        endpoint: &Endpoint,
        address: std::net::IpAddr,
        token: Option<String>,
        tls: &Tls,
        reading: Reading,
    ) -> Result<McpClient, McpError> {
        let http = pinned_http(endpoint, address, tls)?;
        let config = transport_config(endpoint, token, reading);
        let client_config = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("scheduled-agent-tasks", env!("CARGO_PKG_VERSION")),
        );
        let serve = |lifecycle: ClientLifecycleMode| {
            let transport = StreamableHttpClientTransport::with_client(http.clone(), config.clone());
            // `initialize` offers the newest version that has it, as rmcp's
            // own fall-back does; the newer ones open with `server/discover`.
            let client_config = match lifecycle {
                ClientLifecycleMode::Initialize => client_config.clone().with_protocol_version(LEGACY_VERSION),
                _ => client_config.clone(),
            };
            async move {
                tokio::time::timeout(
                    REQUEST_TIMEOUT,
                    client_config.serve_with_lifecycle(transport, lifecycle),
                )
                .await
            }
        };
        let auto = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28, ProtocolVersion::V_2025_11_25],
            legacy_version: Some(LEGACY_VERSION),
        };
        let connected = match serve(auto).await.map_err(|_| timed_out("connect"))? {
            // A server written by hand often answers a method it does not
            // know with an empty result rather than an error, `server/discover`
            // too: it speaks the older protocol, so the handshake goes on
            // with `initialize` on a session of its own.
            Err(rmcp::service::ClientInitializeError::ExpectedInitResult(Some(
                rmcp::model::ServerResult::EmptyResult(_),
            ))) => {
                tracing::info!("the server answered server/discover with an empty result: connecting with initialize");
                serve(ClientLifecycleMode::Initialize)
                    .await
                    .map_err(|_| timed_out("connect"))?
            }
            other => other,
        };
        let client = connected.map_err(|e| McpError {
            operation: "connect",
            code: None,
            message: cap(&with_causes(&e), MAX_ERROR_CHARS),
        })?;
        client.set_response_cache_config(ClientCacheConfig::disabled()).await;
        let host = endpoint.url.host_str().unwrap_or_default().to_owned();
        Ok(McpClient {
            client,
            server: (host, endpoint.port),
        })
    }
}

/// The transport of one connection: the endpoint's URL, its credential,
/// and every response bounded in bytes as `reading` says (rmcp's default
/// is 16 MiB, buffered twice while decoding).
fn transport_config(
    endpoint: &Endpoint,
    token: Option<String>,
    reading: Reading,
) -> StreamableHttpClientTransportConfig {
    let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url.as_str().to_owned())
        .max_json_response_size(reading.response_bytes())
        .max_sse_event_size(reading.response_bytes());
    match token {
        Some(token) => config.auth_header(token),
        None => config,
    }
}

/// The HTTP client of one connection: the endpoint's name resolves to the
/// checked address and nothing else, no proxy, no redirect, no pooled
/// connection, verified with the process's TLS configuration.
fn pinned_http(endpoint: &Endpoint, address: std::net::IpAddr, tls: &Tls) -> Result<reqwest::Client, McpError> {
    let mut http = tls
        .reqwest()
        .pool_max_idle_per_host(0)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy();
    if let Some(name) = &endpoint.name {
        http = http.resolve(name, std::net::SocketAddr::new(address, endpoint.port));
    }
    http.build()
        .map_err(|e| refused(format!("no HTTP client for the connector: {e}")))
}

impl Connectors for McpConnectors {
    type Session = McpClient;

    async fn connect(&self, install: &Install) -> Result<McpClient, McpError> {
        let endpoint = connect_endpoint(&install.url, self.rules.endpoint).map_err(|e| refused(e.to_string()))?;
        // Boxed: the resolver's and the session's futures are large, and
        // callers nest this deep in debug builds.
        let address = Box::pin(checked_address(&endpoint)).await?;
        let token = match &install.credential_secret_arn {
            Some(arn) => {
                self.rules
                    .credentials
                    .check(arn, &install.workspace, &install.install_id)
                    .map_err(|e| refused(e.to_string()))?;
                Some(Box::pin(self.token(arn)).await?)
            }
            None => None,
        };
        Box::pin(Self::open_pinned(&endpoint, address, token, &self.tls, self.reading)).await
    }
}

/// One open MCP session.
pub struct McpClient {
    client: RunningService<RoleClient, ClientConfig>,
    /// The server's host and port, as its URL names them (for spans).
    server: (String, u16),
}

/// Writes a propagator's fields into a request's `_meta`.
struct MetaInjector<'a>(&'a mut JsonObject);

impl opentelemetry::propagation::Injector for MetaInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_owned(), Value::String(value));
    }
}

impl McpClient {
    /// The current span's W3C trace context into `meta` (`traceparent`, and
    /// `tracestate` when it has one), as the MCP semantic conventions carry
    /// it, and the session's details on that span; nothing when no span
    /// records (traces off).
    fn trace_call(&self, meta: &mut JsonObject) {
        use opentelemetry::propagation::TextMapPropagator;
        let cx = opentelemetry::Context::current();
        opentelemetry_sdk::propagation::TraceContextPropagator::new().inject_context(&cx, &mut MetaInjector(meta));
        let mut attributes = vec![
            opentelemetry::KeyValue::new(trace::key::SERVER_ADDRESS, self.server.0.clone()),
            opentelemetry::KeyValue::new(trace::key::SERVER_PORT, i64::from(self.server.1)),
        ];
        if let Some(version) = self.protocol_version() {
            attributes.push(opentelemetry::KeyValue::new(trace::key::MCP_PROTOCOL_VERSION, version));
        }
        trace::annotate_current(attributes);
    }

    /// The negotiated protocol version.
    pub fn protocol_version(&self) -> Option<String> {
        self.client.peer_info().map(|p| p.protocol_version.to_string())
    }

    /// The name the server gives itself (`serverInfo.name`).
    pub fn server_name(&self) -> Option<String> {
        self.client
            .peer_info()
            .and_then(|p| p.server_info.as_ref().map(|s| s.name.clone()))
    }

    /// Whether the server declared the `prompts` capability at
    /// `initialize`. Most servers serve tools alone and declare none: they
    /// declare no scheduled prompts, and are never asked for a list.
    pub fn serves_prompts(&self) -> bool {
        self.client.peer_info().is_none_or(|p| p.capabilities.prompts.is_some())
    }

    /// The full `prompts/list`, every page, as the server sent it, within
    /// [`LIST_DEADLINE`]; none, unasked, from a server without the
    /// `prompts` capability ([`McpClient::serves_prompts`]).
    pub async fn raw_prompts(&self) -> Result<Vec<Prompt>, McpError> {
        if !self.serves_prompts() {
            return Ok(Vec::new());
        }
        match tokio::time::timeout(LIST_DEADLINE, self.all_prompts()).await {
            Ok(prompts) => prompts,
            Err(_) => Err(list_timed_out("prompts/list")),
        }
    }

    /// Every page of `tools/list` up to [`MAX_TOOLS_READ`] tools: unfiltered,
    /// every name (what reconcile checks a declaration against), with the
    /// description and schema of the first [`MAX_TOOLS`] only (what a bound
    /// connector may offer); filtered by an approval, those tools whole.
    async fn all_tools(&self, approved: Option<&BTreeSet<String>>) -> Result<Vec<ServerTool>, McpError> {
        let mut tools = Vec::new();
        let mut kept = ListBytes::new("tools/list");
        let mut read = 0usize;
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let page = timed("tools/list", self.client.list_tools(Some(params))).await?;
            let room = MAX_TOOLS_READ.saturating_sub(read);
            read += page.tools.len().min(room);
            let listed = page
                .tools
                .into_iter()
                .take(room)
                .filter(|t| approved.is_none_or(|a| a.contains(t.name.as_ref())));
            for t in listed {
                // Names are cut as they are read: a longer one is no MCP name.
                let name = cap(&t.name, MAX_NAME_CHARS);
                // Past the first MAX_TOOLS of an unfiltered list, names alone.
                if approved.is_none() && tools.len() >= MAX_TOOLS {
                    kept.add(name.len())?;
                    tools.push(ServerTool {
                        name,
                        description: String::new(),
                        input_schema: serde_json::json!({"type": "object"}),
                        destructive: destructive(&t),
                    });
                    continue;
                }
                let schema = Value::Object((*t.input_schema).clone());
                let schema_bytes = schema.to_string().len();
                let oversized = schema_bytes > MAX_SCHEMA_BYTES;
                let description = cap(t.description.as_deref().unwrap_or_default(), MAX_DESCRIPTION_CHARS);
                kept.add(name.len() + description.len() + if oversized { 0 } else { schema_bytes })?;
                tools.push(ServerTool {
                    destructive: destructive(&t),
                    name,
                    description,
                    input_schema: if oversized {
                        serde_json::json!({"type": "object"})
                    } else {
                        schema
                    },
                });
            }
            cursor = page.next_cursor;
            if cursor.is_none() || read >= MAX_TOOLS_READ {
                return Ok(tools);
            }
        }
        Err(McpError {
            operation: "tools/list",
            code: None,
            message: format!("more than {MAX_PAGES} pages"),
        })
    }

    async fn all_prompts(&self) -> Result<Vec<Prompt>, McpError> {
        let mut prompts = Vec::new();
        let mut kept = ListBytes::new("prompts/list");
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = PaginatedRequestParams::default().with_cursor(cursor.clone());
            let page = timed("prompts/list", self.client.list_prompts(Some(params))).await?;
            for prompt in page.prompts {
                kept.add(serde_json::to_string(&prompt).map_or(0, |json| json.len()))?;
                prompts.push(prompt);
            }
            cursor = page.next_cursor;
            if cursor.is_none() {
                return Ok(prompts);
            }
        }
        Err(McpError {
            operation: "prompts/list",
            code: None,
            message: format!("more than {MAX_PAGES} pages"),
        })
    }
}

/// What one list read has kept so far, in bytes, against [`MAX_LIST_BYTES`].
struct ListBytes {
    operation: &'static str,
    bytes: usize,
}

impl ListBytes {
    fn new(operation: &'static str) -> Self {
        Self { operation, bytes: 0 }
    }

    /// Counts `bytes` more kept; past the bound, the read fails.
    fn add(&mut self, bytes: usize) -> Result<(), McpError> {
        self.bytes = self.bytes.saturating_add(bytes);
        if self.bytes > MAX_LIST_BYTES {
            return Err(McpError {
                operation: self.operation,
                code: None,
                message: format!(
                    "the list is larger than {} MiB over its pages",
                    MAX_LIST_BYTES / (1024 * 1024)
                ),
            });
        }
        Ok(())
    }
}

/// An MCP image (base64 with a MIME type) as a Converse image block, or a
/// text that says what it was.
fn image_block(data: &str, mime: &str, what: &str) -> Block {
    let Some(format) = ImageFormat::from_mime(mime) else {
        return Block::Text(format!(
            "[{what} of type {mime} left out: the model takes png, jpeg, gif or webp images]"
        ));
    };
    // Base64 is a third larger than the bytes: decode nothing that cannot fit.
    if data.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
        return Block::Text(format!("[{what} of type {mime} left out: larger than 3.75 MB]"));
    }
    match base64::engine::general_purpose::STANDARD.decode(data.trim()) {
        Ok(bytes) if bytes.len() > MAX_IMAGE_BYTES => {
            Block::Text(format!("[{what} of type {mime} left out: larger than 3.75 MB]"))
        }
        Ok(bytes) if !bytes.is_empty() => checked_image(bytes, format, mime, what),
        _ => Block::Text(format!("[{what} of type {mime} left out: its data is not base64]")),
    }
}

/// An image's decoded bytes as Converse takes them, or a text that says
/// why not: its format read from its own header (Bedrock refuses an image
/// whose bytes are not of the format it is sent as, and a server's MIME
/// type may be wrong: the header's format is sent when it is one of the
/// four), and at most [`MAX_IMAGE_SIDE`] pixels a side.
fn checked_image(bytes: Vec<u8>, declared: ImageFormat, mime: &str, what: &str) -> Block {
    let format = match imagesize::image_type(&bytes) {
        Ok(imagesize::ImageType::Png) => ImageFormat::Png,
        Ok(imagesize::ImageType::Jpeg) => ImageFormat::Jpeg,
        Ok(imagesize::ImageType::Gif) => ImageFormat::Gif,
        Ok(imagesize::ImageType::Webp) => ImageFormat::Webp,
        _ => {
            return Block::Text(format!(
                "[{what} of type {mime} left out: its data is not a png, jpeg, gif or webp image]"
            ));
        }
    };
    if format != declared {
        tracing::info!(
            declared = declared.as_str(),
            format = format.as_str(),
            "an image sent in the format its header names"
        );
    }
    match imagesize::blob_size(&bytes) {
        Ok(size) if (1..=MAX_IMAGE_SIDE).contains(&size.width) && (1..=MAX_IMAGE_SIDE).contains(&size.height) => {
            Block::Image { format, data: bytes }
        }
        Ok(size) => Block::Text(format!(
            "[{what} of type {mime} left out: {} x {} pixels; the model takes at most {MAX_IMAGE_SIDE} a side]",
            size.width, size.height
        )),
        Err(_) => Block::Text(format!(
            "[{what} of type {mime} left out: its size in pixels could not be read]"
        )),
    }
}

/// MCP content blocks as the domain's blocks; nothing dropped silently.
pub fn blocks_of(content: &[rmcp::model::ContentBlock]) -> Vec<Block> {
    use rmcp::model::{ContentBlock as Mcp, ResourceContents};
    let mut blocks: Vec<Block> = content
        .iter()
        .take(MAX_BLOCKS)
        .map(|c| match c {
            Mcp::Text(t) => Block::Text(cap(&t.text, MAX_TEXT_CHARS)),
            Mcp::Image(i) => image_block(&i.data, &i.mime_type, "an image"),
            Mcp::Audio(a) => Block::Text(format!(
                "[audio of type {} left out: the model takes no audio]",
                a.mime_type
            )),
            Mcp::Resource(r) => match &r.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    Block::Text(cap(&format!("Resource {}:\n{text}", cap(uri, 500)), MAX_TEXT_CHARS))
                }
                ResourceContents::BlobResourceContents {
                    uri, mime_type, blob, ..
                } => {
                    let mime = mime_type.as_deref().unwrap_or("application/octet-stream");
                    match ImageFormat::from_mime(mime) {
                        Some(_) => image_block(blob, mime, &format!("resource {uri}")),
                        None => Block::Text(format!("[resource {uri} of type {mime} left out: binary content]")),
                    }
                }
                _ => Block::Text("[a resource of a kind this client does not know, left out]".to_owned()),
            },
            Mcp::ResourceLink(link) => Block::Text(format!(
                "[a link to resource {} <{}>]",
                cap(&link.name, 200),
                cap(&link.uri, 500)
            )),
            _ => Block::Text("[content of a kind this client does not know, left out]".to_owned()),
        })
        .collect();
    if content.len() > MAX_BLOCKS {
        blocks.push(Block::Text(format!(
            "[{} more content blocks left out]",
            content.len() - MAX_BLOCKS
        )));
    }
    blocks
}

/// Keeps blocks in order within [`MAX_TOTAL_CHARS`] of text and
/// [`MAX_IMAGES`] images, saying what was left out. `used` carries the
/// budget across the messages of one prompt.
fn within_budget(blocks: Vec<Block>, used: &mut (usize, usize)) -> Vec<Block> {
    let mut kept = Vec::new();
    let mut dropped = 0usize;
    for block in blocks {
        match &block {
            Block::Image { .. } if used.1 >= MAX_IMAGES => dropped += 1,
            Block::Image { .. } => {
                used.1 += 1;
                kept.push(block);
            }
            Block::Text(text) => {
                let room = MAX_TOTAL_CHARS.saturating_sub(used.0);
                if room == 0 {
                    dropped += 1;
                    continue;
                }
                let text = cap(text, room);
                used.0 += text.chars().count();
                kept.push(Block::Text(text));
            }
            Block::Json(value) if used.0 + value.to_string().len() > MAX_TOTAL_CHARS => dropped += 1,
            Block::Json(value) => {
                used.0 += value.to_string().len();
                kept.push(block);
            }
            Block::ToolUse { .. } | Block::ToolResult { .. } => kept.push(block),
        }
    }
    if dropped > 0 {
        kept.push(Block::Text(format!(
            "[{dropped} more content blocks left out: the server sent more than a run takes]"
        )));
    }
    kept
}

/// A `tools/call` result as the domain's tool output: its content, then its
/// `structuredContent` as a JSON block (its text copy, which the MCP spec
/// asks servers to send too, not repeated).
pub fn tool_output(result: &rmcp::model::CallToolResult) -> ToolOutput {
    let mut content = blocks_of(&result.content);
    if let Some(structured) = result
        .structured_content
        .as_ref()
        .filter(|v| v.to_string().len() <= MAX_TEXT_CHARS)
    {
        content.retain(
            |b| !matches!(b, Block::Text(t) if serde_json::from_str::<Value>(t).ok().as_ref() == Some(structured)),
        );
        let json = match structured {
            Value::Object(_) => structured.clone(),
            other => serde_json::json!({ "result": other }),
        };
        content.push(Block::Json(json));
    }
    ToolOutput {
        content: within_budget(content, &mut (0, 0)),
        is_error: result.is_error.unwrap_or(false),
    }
}

impl McpSession for McpClient {
    async fn get_prompt(&self, name: &str, arguments: &BTreeMap<String, String>) -> Result<Vec<Message>, McpError> {
        let args: JsonObject = arguments
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        let params = GetPromptRequestParams::new(name.to_owned()).with_arguments(args);
        match timed("prompts/get", self.client.get_prompt_once(params)).await? {
            GetPromptResponse::Complete(result) => {
                let mut used = (0, 0);
                let mut messages: Vec<Message> = result
                    .messages
                    .iter()
                    .take(MAX_MESSAGES)
                    .map(|m| Message {
                        role: match m.role {
                            McpRole::Assistant => Role::Assistant,
                            _ => Role::User,
                        },
                        content: within_budget(blocks_of(std::slice::from_ref(&m.content)), &mut used),
                    })
                    .collect();
                if result.messages.len() > MAX_MESSAGES {
                    messages.push(Message::user_text(format!(
                        "[{} more prompt messages left out: the server sent more than a run takes]",
                        result.messages.len() - MAX_MESSAGES
                    )));
                }
                Ok(messages)
            }
            _ => Err(McpError {
                operation: "prompts/get",
                code: None,
                message: "the server asked for input (InputRequiredResult); an unattended run cannot give it".into(),
            }),
        }
    }

    async fn list_tools(&self, approved: Option<&BTreeSet<String>>) -> Result<Vec<ServerTool>, McpError> {
        match tokio::time::timeout(LIST_DEADLINE, self.all_tools(approved)).await {
            Ok(tools) => tools,
            Err(_) => Err(list_timed_out("tools/list")),
        }
    }

    async fn list_prompts(&self) -> Result<Vec<ListedPrompt>, McpError> {
        Ok(self
            .raw_prompts()
            .await?
            .into_iter()
            .map(|p| ListedPrompt {
                marker: p.meta.as_ref().and_then(|m| m.0.get(MARKER).cloned()),
                arguments: p
                    .arguments
                    .iter()
                    .flatten()
                    .map(|a| (a.name.clone(), a.required.unwrap_or(false)))
                    .collect(),
                name: p.name.to_string(),
            })
            .collect())
    }

    async fn call_tool(&self, name: &str, input: Value, call: CallMeta<'_>) -> Result<ToolOutput, McpError> {
        let mut params = CallToolRequestParams::new(name.to_owned());
        if let Value::Object(args) = input {
            params = params.with_arguments(args);
        }
        let mut meta = JsonObject::new();
        meta.insert(RUN_ID_META.to_owned(), Value::String(call.run_id.to_owned()));
        meta.insert(CALL_KEY_META.to_owned(), Value::String(call.call_key.to_owned()));
        self.trace_call(&mut meta);
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        let result = timed("tools/call", self.client.call_tool(params)).await?;
        Ok(tool_output(&result))
    }
}

/// Whether a listed tool's annotations gate it (`gate::annotated_destructive`).
fn destructive(tool: &rmcp::model::Tool) -> bool {
    let annotations = tool.annotations.as_ref();
    crate::domain::run::gate::annotated_destructive(
        annotations.and_then(|a| a.destructive_hint),
        annotations.and_then(|a| a.read_only_hint),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock as Mcp;

    #[test]
    fn a_flood_of_content_is_cut_to_the_budget_and_says_so() {
        let text = "x".repeat(MAX_TEXT_CHARS * 2);
        let flood: Vec<Mcp> = (0..MAX_BLOCKS * 3).map(|_| Mcp::text(text.clone())).collect();
        let result = rmcp::model::CallToolResult::success(flood);
        let out = tool_output(&result).content;
        let chars: usize = out
            .iter()
            .map(|b| match b {
                Block::Text(t) => t.chars().count(),
                _ => 0,
            })
            .sum();
        assert!(chars <= MAX_TOTAL_CHARS + 100, "{chars}");
        let Some(Block::Text(note)) = out.last() else {
            panic!("a note ends it")
        };
        assert!(note.contains("left out"), "{note}");

        let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
        let images: Vec<Mcp> = (0..MAX_IMAGES + 5).map(|_| Mcp::image(png, "image/png")).collect();
        let out = tool_output(&rmcp::model::CallToolResult::success(images)).content;
        let kept = out.iter().filter(|b| matches!(b, Block::Image { .. })).count();
        assert_eq!(kept, MAX_IMAGES);
        assert!(matches!(out.last(), Some(Block::Text(t)) if t.contains("5 more")));
    }

    /// A PNG's signature and header chunk, `width` x `height` pixels: what
    /// a reader of its size reads.
    fn png_header(width: u32, height: u32) -> Vec<u8> {
        let mut png = vec![0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13];
        png.extend(b"IHDR");
        png.extend(width.to_be_bytes());
        png.extend(height.to_be_bytes());
        png.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
        png
    }

    fn block_of(bytes: &[u8], mime: &str) -> Block {
        use base64::Engine;
        let data = base64::engine::general_purpose::STANDARD.encode(bytes);
        image_block(&data, mime, "an image")
    }

    #[test]
    fn an_image_is_sent_only_as_converse_takes_it() {
        // At most 8,000 pixels a side.
        assert!(matches!(
            block_of(&png_header(8_000, 8_000), "image/png"),
            Block::Image {
                format: ImageFormat::Png,
                ..
            }
        ));
        for (w, h) in [(8_001, 10), (10, 9_000)] {
            let Block::Text(note) = block_of(&png_header(w, h), "image/png") else {
                panic!("{w} x {h} is left out")
            };
            assert!(note.contains(&format!("{w} x {h} pixels")), "{note}");
            assert!(note.contains("at most 8000 a side"), "{note}");
        }
        // Sent in the format its own header names, whatever the server said.
        let mut gif = b"GIF89a".to_vec();
        gif.extend(20u16.to_le_bytes());
        gif.extend(10u16.to_le_bytes());
        gif.extend([0u8; 8]);
        assert!(matches!(
            block_of(&gif, "image/png"),
            Block::Image {
                format: ImageFormat::Gif,
                ..
            }
        ));
        // Bytes that are no image of the four: named, not sent.
        let Block::Text(note) = block_of(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "image/png") else {
            panic!("not an image")
        };
        assert!(note.contains("not a png, jpeg, gif or webp image"), "{note}");
        let mut bmp = b"BM".to_vec();
        bmp.extend([0u8; 40]);
        assert!(matches!(block_of(&bmp, "image/png"), Block::Text(_)));
    }
}
