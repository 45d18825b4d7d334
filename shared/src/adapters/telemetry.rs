//! Logging set-up shared by every Lambda: JSON lines without timestamps
//! (CloudWatch stamps each line), the level from `RUST_LOG` or `info`; and
//! the traces' exporter ([`tracer`], below).
//! Spans carry ids (`task_id`, `workspace`, `occurrence`) as fields; no
//! instruction text, output or token ever goes to a log.
//!
//! `RUST_LOG` takes `Targets` directives (`warn`, `shared=debug,info`): a
//! level per target, without `EnvFilter`'s span and field matchers, whose
//! regex engines would add to every binary. Release builds stop at `debug`:
//! trace-level call sites are compiled out (`tracing`'s
//! `release_max_level_debug`), so `trace` there is `debug`.

use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the subscriber; `directives` are `RUST_LOG`'s, as
/// `config::log_directives` reads them.
pub fn init(directives: Option<String>) {
    // A directive that does not parse falls back to `info`, as before.
    let filter = directives
        .and_then(|directives| directives.parse::<Targets>().ok())
        .unwrap_or_else(|| Targets::new().with_default(LevelFilter::INFO));
    let format = tracing_subscriber::fmt::layer()
        .json()
        .with_current_span(true)
        .with_span_list(false)
        .without_time()
        .with_target(false);
    // A second init (tests that build several apps) keeps the first subscriber.
    let _ = tracing_subscriber::registry().with(format).with(filter).try_init();
}

// ---- Traces ---------------------------------------------------------------
//
// SPEC §14 and docs/design.md "Traces": the spans of `crate::trace`, sent as
// OTLP/HTTP protobuf to `TRACES_ENDPOINT` (the CloudWatch OTLP endpoint,
// `https://xray.<region>.amazonaws.com/v1/traces`), signed with SigV4 as
// `xray` with the function's own credentials. Spans wait in memory (at most
// [`MAX_BUFFERED_SPANS`]) until the handler flushes them, before it
// answers: a Lambda is frozen after its answer, so nothing is sent in the
// background. A flush is bounded (`trace::flush_budget`); what it cannot
// send is logged and dropped, never the invocation's failure.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanProcessor};
use prost::Message as _;

use crate::config::TracesConfig;
use crate::trace::{Export, Tracer};

/// The most finished spans kept between two flushes; more are dropped and
/// counted (a batch of five connector runs at the ceilings' 20 tool calls
/// and 10 turns each makes about 200).
pub const MAX_BUFFERED_SPANS: usize = 4096;
/// The SigV4 signing name of the CloudWatch OTLP traces endpoint.
pub const SIGNING_NAME: &str = "xray";

/// The longest span name sent, in characters (a name carries a server's
/// tool name).
pub const MAX_NAME_CHARS: usize = 256;
/// The longest string attribute value sent, in characters.
pub const MAX_VALUE_CHARS: usize = 1024;
/// Refusals of the request's credentials or permission (401, 403) in a row
/// after which a process sends no more: one is a credential's hiccup, a
/// few in a row are a role or an account that is not set up.
pub const REFUSALS_BEFORE_STOP: u32 = 3;

fn cut(text: &str, max: usize) -> Option<String> {
    (text.chars().count() > max).then(|| text.chars().take(max).collect())
}

/// `span` with its name and string values cut to [`MAX_NAME_CHARS`] and
/// [`MAX_VALUE_CHARS`].
fn capped(span: &mut SpanData) {
    if let Some(name) = cut(&span.name, MAX_NAME_CHARS) {
        span.name = name.into();
    }
    for attribute in &mut span.attributes {
        if let opentelemetry::Value::String(value) = &attribute.value
            && let Some(value) = cut(value.as_str(), MAX_VALUE_CHARS)
        {
            attribute.value = opentelemetry::Value::String(value.into());
        }
    }
}

/// Finished spans, until a flush takes them.
#[derive(Debug, Default)]
struct Buffer {
    spans: Mutex<Vec<SpanData>>,
    dropped: AtomicU64,
}

impl Buffer {
    fn take(&self) -> (Vec<SpanData>, u64) {
        let spans = self
            .spans
            .lock()
            .map(|mut spans| std::mem::take(&mut *spans))
            .unwrap_or_default();
        (spans, self.dropped.swap(0, Ordering::Relaxed))
    }
}

/// The span processor: keeps each finished span for the next flush.
#[derive(Debug)]
struct Collect(Arc<Buffer>);

impl SpanProcessor for Collect {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, mut span: SpanData) {
        capped(&mut span);
        match self.0.spans.lock() {
            Ok(mut spans) if spans.len() < MAX_BUFFERED_SPANS => spans.push(span),
            _ => {
                self.0.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Why a flush's request did not deliver its spans.
enum SendError {
    /// The endpoint refused the request's credentials or permission (401,
    /// 403: no permission, Transaction Search off, a credential's hiccup).
    Denied(reqwest::StatusCode),
    /// The request was too large (413): its spans are sent again in halves.
    TooLarge,
    /// Another refusal (a 4xx other than 408 and 429): these spans are not
    /// sent again.
    Refused(reqwest::StatusCode),
    /// Anything else (a timeout, a 5xx, a throttle, no connection).
    Failed(String),
}

/// Sends a flush's spans to the OTLP endpoint.
struct OtlpExport {
    /// 401s and 403s in a row; at [`REFUSALS_BEFORE_STOP`] this process
    /// sends no more (a cold start tries again), so a deployment the
    /// endpoint refuses costs a few requests and log lines per process.
    denied: std::sync::atomic::AtomicU32,
    buffer: Arc<Buffer>,
    resource: ResourceAttributesWithSchema,
    endpoint: url::Url,
    http: reqwest::Client,
    credentials: Option<aws_credential_types::provider::SharedCredentialsProvider>,
    region: Option<String>,
}

/// The tracer a function's use case opens its spans on: off (nothing
/// recorded, nothing sent) without `TRACES_ENDPOINT`.
pub fn tracer(sdk: &aws_config::SdkConfig, config: &TracesConfig) -> Tracer {
    let Some(endpoint) = &config.endpoint else {
        return Tracer::off();
    };
    let mut attributes = vec![
        KeyValue::new("service.name", config.service_name.clone()),
        KeyValue::new("cloud.provider", "aws"),
        KeyValue::new("cloud.platform", "aws_lambda"),
    ];
    if let Some(region) = sdk.region() {
        attributes.push(KeyValue::new("cloud.region", region.to_string()));
    }
    // No resource detectors: what the resource says is what this names.
    let resource = Resource::builder_empty().with_attributes(attributes).build();
    let buffer = Arc::new(Buffer::default());
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::AlwaysOn)
        .with_resource(resource.clone())
        .with_span_processor(Collect(buffer.clone()))
        .build();
    // The process's one TLS configuration (`adapters::tls`): no root
    // store is loaded for the exporter.
    let http = match crate::adapters::tls::Tls::process().reqwest().build() {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!(error = %e, "no HTTP client for the traces' exporter: traces are off");
            return Tracer::off();
        }
    };
    let export = OtlpExport {
        denied: std::sync::atomic::AtomicU32::new(0),
        buffer,
        resource: (&resource).into(),
        endpoint: endpoint.clone(),
        http,
        credentials: sdk.credentials_provider(),
        region: sdk.region().map(ToString::to_string),
    };
    Tracer::new(provider.tracer("scheduled-agent-tasks"), Arc::new(export))
}

impl Export for OtlpExport {
    fn flush(&self, within: Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let (spans, dropped) = self.buffer.take();
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    "spans dropped: more finished between two flushes than are kept"
                );
            }
            if spans.is_empty() || self.denied.load(Ordering::Relaxed) >= REFUSALS_BEFORE_STOP {
                return;
            }
            let count = spans.len();
            match tokio::time::timeout(within, self.send_spans(spans)).await {
                Ok(Ok(())) => {
                    self.denied.store(0, Ordering::Relaxed);
                }
                Ok(Err(SendError::Denied(status))) => {
                    let denied = self.denied.fetch_add(1, Ordering::Relaxed) + 1;
                    if denied >= REFUSALS_BEFORE_STOP {
                        tracing::error!(
                            spans = count,
                            status = status.as_u16(),
                            refusals = denied,
                            "the traces endpoint refused the spans again: no more are sent from this process (is Transaction Search on, and may the role xray:PutSpans and xray:PutSpansForIndexing?)"
                        );
                    } else {
                        tracing::warn!(
                            spans = count,
                            status = status.as_u16(),
                            "the traces endpoint refused the spans"
                        );
                    }
                }
                Ok(Err(SendError::Refused(status))) => {
                    tracing::warn!(
                        spans = count,
                        status = status.as_u16(),
                        "the traces endpoint refused the spans: they are not sent again"
                    )
                }
                Ok(Err(SendError::TooLarge)) => {
                    tracing::warn!(
                        spans = count,
                        "a span is larger than the traces endpoint takes: not sent"
                    )
                }
                Ok(Err(SendError::Failed(error))) => {
                    tracing::warn!(spans = count, error = %error, "spans not delivered")
                }
                Err(_) => tracing::warn!(
                    spans = count,
                    ms = within.as_millis() as u64,
                    "spans not delivered within the flush's time"
                ),
            }
        })
    }
}

impl OtlpExport {
    /// `spans` in one request, or, when the endpoint says it is too large
    /// (413), in two halves, each split again as it needs; a single span
    /// too large is [`SendError::TooLarge`]. The first other failure ends it.
    fn send_spans(
        &self,
        spans: Vec<SpanData>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), SendError>> + Send + '_>> {
        Box::pin(async move {
            let request = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(spans.clone(), &self.resource),
            };
            match self.send(request.encode_to_vec()).await {
                Err(SendError::TooLarge) if spans.len() > 1 => {
                    let mut first = spans;
                    let second = first.split_off(first.len() / 2);
                    self.send_spans(first).await?;
                    self.send_spans(second).await
                }
                answered => answered,
            }
        })
    }

    /// One OTLP/HTTP request, SigV4-signed when the function has
    /// credentials and a region (a local collector ignores the signature).
    async fn send(&self, body: Vec<u8>) -> Result<(), SendError> {
        let failed = |e: &dyn std::fmt::Display| SendError::Failed(e.to_string());
        let mut request = self
            .http
            .post(self.endpoint.clone())
            .header("content-type", "application/x-protobuf")
            .body(body)
            .build()
            .map_err(|e| failed(&e))?;
        if let (Some(provider), Some(region)) = (&self.credentials, &self.region) {
            let credentials = provider.provide_credentials().await.map_err(|e| failed(&e))?;
            sign(&mut request, credentials, region).map_err(|e| failed(&e))?;
        }
        let response = self.http.execute(request).await.map_err(|e| failed(&e))?;
        match response.status() {
            status if status.is_success() => Ok(()),
            reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN => {
                Err(SendError::Denied(response.status()))
            }
            reqwest::StatusCode::PAYLOAD_TOO_LARGE => Err(SendError::TooLarge),
            status if status.is_client_error() && !matches!(status.as_u16(), 408 | 429) => {
                Err(SendError::Refused(status))
            }
            status => Err(SendError::Failed(format!("the endpoint answered {status}"))),
        }
    }
}

/// Signs `request` as SigV4 for [`SIGNING_NAME`] in `region`.
fn sign(
    request: &mut reqwest::Request,
    credentials: aws_credential_types::Credentials,
    region: &str,
) -> Result<(), String> {
    use aws_sigv4::http_request::{SignableBody, SignableRequest, SigningSettings, sign};
    let identity = credentials.into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(SIGNING_NAME)
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| e.to_string())?
        .into();
    let body = request.body().and_then(reqwest::Body::as_bytes).unwrap_or_default();
    let headers = request
        .headers()
        .iter()
        .filter_map(|(name, value)| value.to_str().ok().map(|value| (name.as_str(), value)));
    let signable = SignableRequest::new(
        request.method().as_str(),
        request.url().as_str(),
        headers,
        SignableBody::Bytes(body),
    )
    .map_err(|e| e.to_string())?;
    let (instructions, _signature) = sign(signable, &params).map_err(|e| e.to_string())?.into_parts();
    let mut signed = Vec::new();
    for (name, value) in instructions.headers() {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|e| e.to_string())?;
        let value = reqwest::header::HeaderValue::from_str(value).map_err(|e| e.to_string())?;
        signed.push((name, value));
    }
    request.headers_mut().extend(signed);
    Ok(())
}
