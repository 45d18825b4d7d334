//! Logging set-up shared by every Lambda: JSON lines without timestamps
//! (CloudWatch stamps each line), the level from `RUST_LOG` or `info`; and
//! the traces' exporter ([`tracer`], below).
//! Spans carry ids (`task_id`, `workspace`, `occurrence`) as fields; no
//! instruction text, output or token ever goes to a log.
//!
//! `RUST_LOG` takes `Targets` directives (`warn`, `shared=debug,info`): a
//! level per target, without `EnvFilter`'s span and field matchers, whose
//! regex engines would add to every binary.

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
// SPEC §14 and ARCHITECTURE "Traces": the spans of `crate::trace`, sent as
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

    fn on_end(&self, span: SpanData) {
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
    /// The endpoint refused the request for good (a 4xx other than 408 and
    /// 429: no permission, Transaction Search off, a malformed request).
    Refused(reqwest::StatusCode),
    /// Anything else (a timeout, a 5xx, a throttle, no connection).
    Failed(String),
}

/// Sends a flush's spans to the OTLP endpoint.
struct OtlpExport {
    /// Set once the endpoint refused a request for good: this process
    /// sends no more (a cold start tries again), so a deployment the
    /// endpoint refuses costs one request and one log line per process.
    refused: std::sync::atomic::AtomicBool,
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
        refused: std::sync::atomic::AtomicBool::new(false),
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
            if spans.is_empty() || self.refused.load(Ordering::Relaxed) {
                return;
            }
            let count = spans.len();
            let request = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(spans, &self.resource),
            };
            match tokio::time::timeout(within, self.send(request.encode_to_vec())).await {
                Ok(Ok(())) => {}
                Ok(Err(SendError::Refused(status))) => {
                    self.refused.store(true, Ordering::Relaxed);
                    tracing::error!(
                        spans = count,
                        status = status.as_u16(),
                        "the traces endpoint refused the spans: no more are sent from this process (is Transaction Search on, and may the role xray:PutSpans and xray:PutSpansForIndexing?)"
                    );
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
