//! The CloudWatch OTLP traces endpoint's stand-in (`POST /v1/traces` on
//! loopback): it takes what the endpoint takes, an OTLP/HTTP protobuf
//! `ExportTraceServiceRequest` signed with SigV4 for `xray`, refuses the
//! rest as the endpoint would (415 for another body, 403 without such a
//! signature), and keeps every span it was sent for a test to read
//! (`infra/FIDELITY.md`). It can also hang, never answering, to stand for
//! an endpoint that does not answer in time, refuse requests above a size
//! (413, [`OtlpEndpoint::limit_body`]) and refuse the next requests' access
//! (403, [`OtlpEndpoint::deny_next`], a credential's hiccup). Started
//! [`OtlpEndpoint::with_transaction_search`], it also writes each span it
//! accepts to the `aws/spans` log group of the local CloudWatch Logs as
//! one JSON event, as Transaction Search keeps every span the endpoint
//! accepts, so a reader of that log group (`sat verify`) reads it there.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::Value;

/// One span as the endpoint received it: ids in lowercase hex (a root's
/// `parent_span_id` is empty), attributes as JSON values.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client, 4 producer, 5 consumer.
    pub kind: i32,
    pub attributes: BTreeMap<String, Value>,
    /// OTLP's status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    pub status_message: String,
    /// The resource's attributes (`service.name`, ...).
    pub resource: BTreeMap<String, Value>,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }

    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }
}

#[derive(Debug, Default)]
pub struct Received {
    pub spans: Vec<ReceivedSpan>,
    /// Every request's `Authorization` header, accepted or not.
    pub authorizations: Vec<String>,
    /// Why each refused request was refused.
    pub refused: Vec<String>,
    /// Requests larger than this many bytes are refused (413).
    max_body: Option<usize>,
    /// The next this many requests are refused (403).
    deny_next: u32,
}

#[derive(Clone)]
struct Endpoint {
    received: Arc<Mutex<Received>>,
    hang: bool,
    /// Where accepted spans are kept, as Transaction Search keeps them.
    spans_log: Option<aws_sdk_cloudwatchlogs::Client>,
}

/// Transaction Search's log group of accepted spans, and the stand-in's
/// one stream in it.
pub const SPANS_LOG_GROUP: &str = "aws/spans";
const SPANS_LOG_STREAM: &str = "default";

impl ReceivedSpan {
    /// The span as Transaction Search writes it to `aws/spans`: its
    /// resource's and its own attributes, W3C ids in hex, kind and status
    /// in words.
    pub fn as_logged(&self) -> Value {
        let kind = match self.kind {
            2 => "SERVER",
            3 => "CLIENT",
            4 => "PRODUCER",
            5 => "CONSUMER",
            _ => "INTERNAL",
        };
        let status = match self.status_code {
            1 => "OK",
            2 => "ERROR",
            _ => "UNSET",
        };
        serde_json::json!({
            "resource": {"attributes": self.resource},
            "traceId": self.trace_id,
            "spanId": self.span_id,
            "parentSpanId": self.parent_span_id,
            "name": self.name,
            "kind": kind,
            "attributes": self.attributes,
            "status": {"code": status},
        })
    }
}

/// Writes accepted spans to `aws/spans`, one event each.
async fn keep(logs: &aws_sdk_cloudwatchlogs::Client, spans: &[ReceivedSpan]) -> anyhow::Result<()> {
    use aws_sdk_cloudwatchlogs::types::InputLogEvent;
    if spans.is_empty() {
        return Ok(());
    }
    let now = chrono::Utc::now().timestamp_millis();
    let events = spans
        .iter()
        .map(|span| {
            InputLogEvent::builder()
                .timestamp(now)
                .message(span.as_logged().to_string())
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    logs.put_log_events()
        .log_group_name(SPANS_LOG_GROUP)
        .log_stream_name(SPANS_LOG_STREAM)
        .set_log_events(Some(events))
        .send()
        .await?;
    Ok(())
}

/// A running stand-in. Dropping it stops it.
pub struct OtlpEndpoint {
    port: u16,
    received: Arc<Mutex<Received>>,
    server: tokio::task::JoinHandle<()>,
}

fn json(value: Option<&AnyValue>) -> Value {
    match value.and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => Value::String(s.clone()),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(*b),
        Some(any_value::Value::IntValue(i)) => Value::from(*i),
        Some(any_value::Value::DoubleValue(d)) => Value::from(*d),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(|v| json(Some(v))).collect()),
        Some(other) => Value::String(format!("{other:?}")),
        None => Value::Null,
    }
}

fn attributes(pairs: &[KeyValue]) -> BTreeMap<String, Value> {
    pairs
        .iter()
        .map(|kv| (kv.key.clone(), json(kv.value.as_ref())))
        .collect()
}

/// The endpoint's SigV4 check, without the secret: an `AWS4-HMAC-SHA256`
/// authorization scoped to the `xray` service, over `host` and
/// `x-amz-date`, and the date header itself. The signature is not verified.
fn signed_for_xray(headers: &HeaderMap) -> Result<(), String> {
    let authorization = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .ok_or("no Authorization header")?;
    let rest = authorization
        .strip_prefix("AWS4-HMAC-SHA256 Credential=")
        .ok_or("not a SigV4 authorization")?;
    let scope = rest.split(',').next().unwrap_or_default();
    let parts: Vec<&str> = scope.split('/').collect();
    if parts.len() != 5 || parts[3] != "xray" || parts[4] != "aws4_request" {
        return Err(format!("credential scope `{scope}` is not for the xray service"));
    }
    let signed = rest
        .split("SignedHeaders=")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .ok_or("no SignedHeaders")?;
    if !signed.split(';').any(|h| h == "host") || !signed.split(';').any(|h| h == "x-amz-date") {
        return Err(format!("signed headers `{signed}` leave out host or x-amz-date"));
    }
    if !headers.contains_key("x-amz-date") {
        return Err("no X-Amz-Date header".into());
    }
    Ok(())
}

async fn traces(State(endpoint): State<Endpoint>, headers: HeaderMap, body: Bytes) -> (StatusCode, Vec<u8>) {
    if endpoint.hang {
        std::future::pending::<()>().await;
    }
    let refuse = |status: StatusCode, why: String| {
        if let Ok(mut received) = endpoint.received.lock() {
            received.refused.push(why);
        }
        (status, Vec::new())
    };
    if let Some(authorization) = headers.get("authorization").and_then(|v| v.to_str().ok())
        && let Ok(mut received) = endpoint.received.lock()
    {
        received.authorizations.push(authorization.to_owned());
    }
    if let Err(why) = signed_for_xray(&headers) {
        return refuse(StatusCode::FORBIDDEN, why);
    }
    let (max_body, denied) = match endpoint.received.lock() {
        Ok(mut received) => {
            let denied = received.deny_next > 0;
            received.deny_next = received.deny_next.saturating_sub(1);
            (received.max_body, denied)
        }
        Err(_) => (None, false),
    };
    if denied {
        return refuse(StatusCode::FORBIDDEN, "denied on request (deny_next)".into());
    }
    if let Some(max) = max_body
        && body.len() > max
    {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{} bytes, more than {max}", body.len()),
        );
    }
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type != "application/x-protobuf" {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("content type `{content_type}`"),
        );
    }
    let request = match ExportTraceServiceRequest::decode(body) {
        Ok(request) => request,
        Err(e) => {
            return refuse(
                StatusCode::BAD_REQUEST,
                format!("not an ExportTraceServiceRequest: {e}"),
            );
        }
    };
    let mut spans = Vec::new();
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                let status = span.status.clone().unwrap_or_default();
                spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    kind: span.kind,
                    attributes: attributes(&span.attributes),
                    status_code: status.code,
                    status_message: status.message,
                    resource: resource.clone(),
                });
            }
        }
    }
    if let Some(logs) = &endpoint.spans_log
        && let Err(e) = keep(logs, &spans).await
    {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}").into_bytes());
    }
    if let Ok(mut received) = endpoint.received.lock() {
        received.spans.extend(spans);
    }
    // An empty ExportTraceServiceResponse: everything accepted.
    (StatusCode::OK, Vec::new())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl OtlpEndpoint {
    /// The stand-in, answering.
    pub async fn start() -> anyhow::Result<Self> {
        Self::serve(false, None).await
    }

    /// An endpoint that takes each request and never answers it.
    pub async fn hanging() -> anyhow::Result<Self> {
        Self::serve(true, None).await
    }

    /// The stand-in with Transaction Search on: each span it accepts is
    /// also written to `aws/spans` in the CloudWatch Logs `sdk` reaches
    /// (the local stack's), which it creates.
    pub async fn with_transaction_search(sdk: &aws_config::SdkConfig) -> anyhow::Result<Self> {
        let logs = aws_sdk_cloudwatchlogs::Client::new(sdk);
        let created = logs.create_log_group().log_group_name(SPANS_LOG_GROUP).send().await;
        if let Err(e) = created
            && !e
                .as_service_error()
                .is_some_and(|e| e.is_resource_already_exists_exception())
        {
            return Err(e.into());
        }
        let created = logs
            .create_log_stream()
            .log_group_name(SPANS_LOG_GROUP)
            .log_stream_name(SPANS_LOG_STREAM)
            .send()
            .await;
        if let Err(e) = created
            && !e
                .as_service_error()
                .is_some_and(|e| e.is_resource_already_exists_exception())
        {
            return Err(e.into());
        }
        Self::serve(false, Some(logs)).await
    }

    async fn serve(hang: bool, spans_log: Option<aws_sdk_cloudwatchlogs::Client>) -> anyhow::Result<Self> {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = Router::new().route("/v1/traces", post(traces)).with_state(Endpoint {
            received: received.clone(),
            hang,
            spans_log,
        });
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, received, server })
    }

    /// `TRACES_ENDPOINT` for this stand-in.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1/traces", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().map(|r| r.spans.clone()).unwrap_or_default()
    }

    /// What it received and refused.
    pub fn received(&self) -> &Arc<Mutex<Received>> {
        &self.received
    }

    /// Refuses (413) every request larger than `bytes`.
    pub fn limit_body(&self, bytes: usize) {
        if let Ok(mut received) = self.received.lock() {
            received.max_body = Some(bytes);
        }
    }

    /// Refuses (403) the next `requests` requests, signed or not.
    pub fn deny_next(&self, requests: u32) {
        if let Ok(mut received) = self.received.lock() {
            received.deny_next = requests;
        }
    }
}

impl Drop for OtlpEndpoint {
    fn drop(&mut self) {
        self.server.abort();
    }
}
