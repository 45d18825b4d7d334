//! The model: Bedrock Runtime `Converse` with tool use (SPEC §7.5).
//!
//! Translates the domain's messages and tools to the SDK's types and back.
//! Locally and in tests the client is pointed at the scripted stand-in by the
//! SDK's own `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`; nothing here knows it.
//!
//! The SDK's own retries are off: a throttled call comes back at once,
//! classified ([`ModelErrorKind::Throttled`] for `ThrottlingException`,
//! `ServiceUnavailableException`, `ModelNotReadyException`,
//! `ServiceQuotaExceededException`; [`ModelErrorKind::Unavailable`] for
//! [`UNAVAILABLE_CODES`]), and the run
//! retries it with jittered backoff within its own time (SPEC §7).

use aws_sdk_bedrockruntime::Client;
use aws_sdk_bedrockruntime::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_bedrockruntime::types::{
    AutoToolChoice, CachePointBlock, CachePointType, ContentBlock, ConversationRole, ConverseOutput, ImageBlock,
    ImageFormat as SdkImageFormat, ImageSource, InferenceConfiguration, Message as SdkMessage, StopReason as SdkStop,
    SystemContentBlock, Tool, ToolChoice, ToolConfiguration, ToolInputSchema, ToolResultBlock, ToolResultContentBlock,
    ToolResultStatus, ToolSpecification, ToolUseBlock,
};
use aws_smithy_types::{Blob, Document, Number};
use serde_json::Value;

use crate::domain::run::agent::{Block, ImageFormat, Message, ModelReply, ModelRequest, Role, StopReason};
use crate::ports::{Model, ModelError, ModelErrorKind};

/// The error codes that mean load, not a bad request: retried by the run.
/// `ServiceQuotaExceededException` is the account's quota of requests or
/// tokens for now (Bedrock counts both), as a throttle is.
pub const THROTTLED_CODES: [&str; 4] = [
    "ThrottlingException",
    "ServiceUnavailableException",
    "ModelNotReadyException",
    "ServiceQuotaExceededException",
];

#[derive(Clone)]
pub struct BedrockModel {
    client: Client,
}

impl BedrockModel {
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        let config = aws_sdk_bedrockruntime::config::Builder::from(sdk)
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build();
        Self {
            client: Client::from_conf(config),
        }
    }
}

fn error(message: impl Into<String>) -> ModelError {
    ModelError {
        kind: ModelErrorKind::Other,
        code: None,
        message: message.into(),
        source: None,
    }
}

/// The error codes that mean "not now" rather than "no": a server error, a
/// model that took too long, and the access a fresh account is denied while
/// its model subscription (AWS Marketplace) completes, for minutes; and
/// `ModelErrorException` (424), an error while the model processed the
/// request, which Bedrock documents as worth a retry.
pub const UNAVAILABLE_CODES: [&str; 4] = [
    "InternalServerException",
    "ModelTimeoutException",
    "AccessDeniedException",
    "ModelErrorException",
];

/// Whether a failed call is load (retry), for now (retry), or anything else
/// (fail), from the error code and HTTP status it was answered with.
pub fn classify(code: Option<&str>, status: Option<u16>) -> ModelErrorKind {
    match (code, status) {
        (Some(code), _) if THROTTLED_CODES.contains(&code) => ModelErrorKind::Throttled,
        (Some(code), _) if UNAVAILABLE_CODES.contains(&code) => ModelErrorKind::Unavailable,
        (None, Some(429 | 503)) => ModelErrorKind::Throttled,
        (None, Some(500..=599)) => ModelErrorKind::Unavailable,
        _ => ModelErrorKind::Other,
    }
}

/// [`classify`] for the SDK's error: a request sent and not answered (the
/// connection failed or reset, the response did not come or could not be
/// read, a timeout) is for now too; one that could not be built is not.
fn classify_sdk<E: ProvideErrorMetadata, R>(
    error: &aws_sdk_bedrockruntime::error::SdkError<E, R>,
    status: Option<u16>,
) -> ModelErrorKind {
    use aws_sdk_bedrockruntime::error::SdkError;
    match error {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            ModelErrorKind::Unavailable
        }
        SdkError::ServiceError(e) => classify(e.err().code(), status),
        _ => classify(None, status),
    }
}

fn image(format: ImageFormat, data: &[u8]) -> Result<ImageBlock, ModelError> {
    let format = match format {
        ImageFormat::Png => SdkImageFormat::Png,
        ImageFormat::Jpeg => SdkImageFormat::Jpeg,
        ImageFormat::Gif => SdkImageFormat::Gif,
        ImageFormat::Webp => SdkImageFormat::Webp,
    };
    ImageBlock::builder()
        .format(format)
        .source(ImageSource::Bytes(Blob::new(data.to_vec())))
        .build()
        .map_err(|e| error(e.to_string()))
}

fn result_content(block: &Block) -> Result<ToolResultContentBlock, ModelError> {
    Ok(match block {
        Block::Text(text) => ToolResultContentBlock::Text(text.clone()),
        Block::Json(value) => ToolResultContentBlock::Json(to_document(value)),
        Block::Image { format, data } => ToolResultContentBlock::Image(image(*format, data)?),
        Block::ToolUse { .. } | Block::ToolResult { .. } => {
            return Err(error("a tool result cannot hold a tool use or result"));
        }
    })
}

/// JSON to the SDK's document type (the SDK offers no stable conversion).
pub fn to_document(value: &Value) -> Document {
    match value {
        Value::Null => Document::Null,
        Value::Bool(b) => Document::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Document::Number(Number::PosInt(u)),
            (None, Some(i)) => Document::Number(Number::NegInt(i)),
            _ => Document::Number(Number::Float(n.as_f64().unwrap_or_default())),
        },
        Value::String(s) => Document::String(s.clone()),
        Value::Array(a) => Document::Array(a.iter().map(to_document).collect()),
        Value::Object(o) => Document::Object(o.iter().map(|(k, v)| (k.clone(), to_document(v))).collect()),
    }
}

pub fn from_document(document: &Document) -> Value {
    match document {
        Document::Null => Value::Null,
        Document::Bool(b) => Value::Bool(*b),
        Document::Number(Number::PosInt(u)) => Value::from(*u),
        Document::Number(Number::NegInt(i)) => Value::from(*i),
        Document::Number(Number::Float(f)) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Document::String(s) => Value::String(s.clone()),
        Document::Array(a) => Value::Array(a.iter().map(from_document).collect()),
        Document::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), from_document(v))).collect()),
    }
}

/// A message as the SDK sends it; a tool result's `status` only where the
/// model family takes one (`model::takes_tool_result_status`).
fn to_sdk(message: &Message, result_status: bool) -> Result<SdkMessage, ModelError> {
    let role = match message.role {
        Role::User => ConversationRole::User,
        Role::Assistant => ConversationRole::Assistant,
    };
    let mut builder = SdkMessage::builder().role(role);
    for block in &message.content {
        let content = match block {
            Block::Text(text) => ContentBlock::Text(text.clone()),
            Block::Image { format, data } => ContentBlock::Image(image(*format, data)?),
            Block::Json(value) => ContentBlock::Text(value.to_string()),
            Block::ToolUse { id, name, input } => ContentBlock::ToolUse(
                ToolUseBlock::builder()
                    .tool_use_id(id)
                    .name(name)
                    .input(to_document(input))
                    .build()
                    .map_err(|e| error(e.to_string()))?,
            ),
            Block::ToolResult { id, content, is_error } => ContentBlock::ToolResult(
                ToolResultBlock::builder()
                    .tool_use_id(id)
                    .set_content(Some(content.iter().map(result_content).collect::<Result<Vec<_>, _>>()?))
                    .set_status(result_status.then_some(if *is_error {
                        ToolResultStatus::Error
                    } else {
                        ToolResultStatus::Success
                    }))
                    .build()
                    .map_err(|e| error(e.to_string()))?,
            ),
        };
        builder = builder.content(content);
    }
    builder.build().map_err(|e| error(e.to_string()))
}

fn from_sdk(message: &SdkMessage) -> Message {
    let content = message
        .content()
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(text) => Some(Block::Text(text.clone())),
            ContentBlock::ToolUse(tool) => Some(Block::ToolUse {
                id: tool.tool_use_id().to_owned(),
                name: tool.name().to_owned(),
                input: from_document(tool.input()),
            }),
            _ => None,
        })
        .collect();
    Message {
        role: Role::Assistant,
        content,
    }
}

fn stop(reason: &SdkStop) -> StopReason {
    match reason {
        SdkStop::EndTurn => StopReason::EndTurn,
        SdkStop::StopSequence => StopReason::StopSequence,
        SdkStop::ToolUse => StopReason::ToolUse,
        SdkStop::MaxTokens => StopReason::MaxTokens,
        other => StopReason::Other(other.as_str().to_owned()),
    }
}

impl BedrockModel {
    /// The `Converse` call for `request`, built as every run sends it.
    fn call(
        &self,
        model_id: &str,
        request: &ModelRequest,
    ) -> Result<aws_sdk_bedrockruntime::operation::converse::builders::ConverseFluentBuilder, ModelError> {
        let status = crate::domain::run::model::takes_tool_result_status(model_id);
        let cache_point = || {
            CachePointBlock::builder()
                .r#type(CachePointType::Default)
                .build()
                .map_err(|e| error(e.to_string()))
        };
        let mut messages = Vec::with_capacity(request.messages.len());
        for (i, message) in request.messages.iter().enumerate() {
            let mut sdk = to_sdk(message, status)?;
            if request.cache.after_messages.contains(&i) {
                sdk.content.push(ContentBlock::CachePoint(cache_point()?));
            }
            messages.push(sdk);
        }
        let mut system = vec![SystemContentBlock::Text(request.system.clone())];
        if request.cache.after_system {
            system.push(SystemContentBlock::CachePoint(cache_point()?));
        }
        let mut call = self
            .client
            .converse()
            .model_id(model_id)
            .set_system(Some(system))
            .set_messages(Some(messages))
            .inference_config(
                InferenceConfiguration::builder()
                    .max_tokens(i32::try_from(request.max_tokens).unwrap_or(i32::MAX))
                    .build(),
            );
        if !request.tools.is_empty() {
            let mut config =
                ToolConfiguration::builder().tool_choice(ToolChoice::Auto(AutoToolChoice::builder().build()));
            for tool in &request.tools {
                config = config.tools(Tool::ToolSpec(
                    ToolSpecification::builder()
                        .name(&tool.name)
                        .description(&tool.description)
                        .input_schema(ToolInputSchema::Json(to_document(&tool.input_schema)))
                        .build()
                        .map_err(|e| error(e.to_string()))?,
                ));
            }
            call = call.tool_config(config.build().map_err(|e| error(e.to_string()))?);
        }
        Ok(call)
    }
}

/// The body of a `Converse` request exactly as the SDK serializes it, and
/// the request's path, for [`render`]; the request is stopped before it is
/// signed or sent.
#[derive(Debug, Default)]
struct Capture(std::sync::Mutex<Option<(String, Vec<u8>)>>);

#[derive(Debug, Clone)]
struct Captured(std::sync::Arc<Capture>);

/// The error that stops a rendered request before it is sent.
const RENDERED: &str = "rendered, not sent";

impl aws_sdk_bedrockruntime::config::Intercept for Captured {
    fn name(&self) -> &'static str {
        "RenderConverse"
    }

    fn read_after_serialization(
        &self,
        context: &aws_sdk_bedrockruntime::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
        _components: &aws_sdk_bedrockruntime::config::RuntimeComponents,
        _cfg: &mut aws_sdk_bedrockruntime::config::ConfigBag,
    ) -> Result<(), aws_sdk_bedrockruntime::error::BoxError> {
        let request = context.request();
        let body = request.body().bytes().unwrap_or_default().to_vec();
        if let Ok(mut captured) = self.0.0.lock() {
            *captured = Some((request.uri().to_owned(), body));
        }
        Err(RENDERED.into())
    }
}

/// A `Converse` request as a run would send it for `model_id`, rendered
/// without calling a model: the SDK builds and serializes it exactly as
/// [`BedrockModel::converse`] does, and it is stopped before it is signed
/// or sent, so no credentials or network are needed. Answers the wire
/// body (JSON) with the model id the URL names (`modelId`).
pub async fn render(model_id: &str, request: &ModelRequest) -> Result<Value, ModelError> {
    let config = aws_sdk_bedrockruntime::Config::builder()
        .behavior_version(aws_sdk_bedrockruntime::config::BehaviorVersion::latest())
        .region(aws_sdk_bedrockruntime::config::Region::new("us-east-1"))
        // Never used (the request stops before it is sent), but a client
        // has no default one: the SDK's is not linked.
        .http_client(super::tls::sdk_http_client(&super::tls::Tls::process()))
        .build();
    let model = BedrockModel {
        client: Client::from_conf(config),
    };
    let capture = Captured(std::sync::Arc::default());
    let sent = model
        .call(model_id, request)?
        .customize()
        .interceptor(capture.clone())
        .send()
        .await;
    let captured = capture.0.0.lock().ok().and_then(|mut c| c.take());
    match (captured, sent) {
        (Some((_, body)), Err(_)) => {
            let mut value: Value =
                serde_json::from_slice(&body).map_err(|e| error(format!("the rendered request is not JSON: {e}")))?;
            if let Value::Object(object) = &mut value {
                object.insert("modelId".to_owned(), Value::String(model_id.to_owned()));
            }
            Ok(value)
        }
        (_, Ok(_)) => Err(error("the request was sent; it should only have been rendered")),
        (None, Err(e)) => Err(error(format!(
            "the request could not be built: {}",
            DisplayErrorContext(&e)
        ))),
    }
}

impl Model for BedrockModel {
    async fn converse(&self, model_id: &str, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let out = self.call(model_id, request)?.send().await.map_err(|e| {
            let code = e.as_service_error().and_then(|s| s.code()).map(str::to_owned);
            let status = e.raw_response().map(|r| r.status().as_u16());
            ModelError {
                kind: classify_sdk(&e, status),
                message: format!("{}: {}", code.as_deref().unwrap_or("unknown"), DisplayErrorContext(&e)),
                code,
                source: Some(Box::new(e)),
            }
        })?;
        let message = match out.output() {
            Some(ConverseOutput::Message(message)) => from_sdk(message),
            _ => return Err(error("Converse answered without a message")),
        };
        let usage = out.usage();
        Ok(ModelReply {
            message,
            stop: stop(out.stop_reason()),
            input_tokens: usage.map_or(0, |u| u.input_tokens().max(0) as u64),
            output_tokens: usage.map_or(0, |u| u.output_tokens().max(0) as u64),
            cache_write_tokens: usage
                .and_then(|u| u.cache_write_input_tokens())
                .map_or(0, |t| t.max(0) as u64),
            cache_read_tokens: usage
                .and_then(|u| u.cache_read_input_tokens())
                .map_or(0, |t| t.max(0) as u64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn load_is_told_from_failure() {
        for code in THROTTLED_CODES {
            assert_eq!(classify(Some(code), Some(400)), ModelErrorKind::Throttled);
        }
        assert_eq!(classify(None, Some(429)), ModelErrorKind::Throttled);
        assert_eq!(
            classify(Some("ServiceQuotaExceededException"), Some(400)),
            ModelErrorKind::Throttled,
            "the account's token or request quota, for now"
        );
        assert_eq!(
            classify(Some("ModelErrorException"), Some(424)),
            ModelErrorKind::Unavailable,
            "an error while the model processed the request"
        );
        assert_eq!(classify(Some("ValidationException"), Some(400)), ModelErrorKind::Other);
        for code in UNAVAILABLE_CODES {
            assert_eq!(classify(Some(code), Some(500)), ModelErrorKind::Unavailable, "{code}");
        }
        assert_eq!(
            classify(Some("AccessDeniedException"), Some(403)),
            ModelErrorKind::Unavailable,
            "a fresh account's subscription completes within minutes"
        );
        assert_eq!(classify(None, Some(502)), ModelErrorKind::Unavailable);
        assert_eq!(
            classify(Some("ResourceNotFoundException"), Some(404)),
            ModelErrorKind::Other
        );
        assert_eq!(classify(None, None), ModelErrorKind::Other);
        assert!(ModelErrorKind::Unavailable.is_load() && ModelErrorKind::Throttled.is_load());
        assert!(!ModelErrorKind::Other.is_load());
    }

    #[test]
    fn documents_round_trip() {
        let value = serde_json::json!({"a": [1, -2, 1.5, "x", null, true], "b": {"c": {}}});
        assert_eq!(from_document(&to_document(&value)), value);
    }

    /// A rendered request is the SDK's own serialization of what a run
    /// sends, and nothing is sent (there is no endpoint or credential here).
    #[tokio::test]
    async fn a_request_renders_as_the_wire_body_without_a_call() {
        use crate::domain::run::agent::{Message, ToolSpec};
        let request = ModelRequest {
            system: "be brief".into(),
            messages: vec![Message::user_text("hello")],
            tools: vec![ToolSpec {
                name: "issues__list".into(),
                description: "lists issues".into(),
                input_schema: serde_json::json!({"type": "object"}),
            }],
            max_tokens: 300,
            cache: Default::default(),
        };
        let body = render("anthropic.claude-haiku-4-5-20251001-v1:0", &request)
            .await
            .unwrap();
        assert_eq!(body["modelId"], "anthropic.claude-haiku-4-5-20251001-v1:0");
        assert_eq!(body["system"][0]["text"], "be brief");
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["messages"][0]["content"][0]["text"], "hello");
        assert_eq!(body["inferenceConfig"]["maxTokens"], 300);
        assert_eq!(body["toolConfig"]["tools"][0]["toolSpec"]["name"], "issues__list");
        assert_eq!(
            body["toolConfig"]["tools"][0]["toolSpec"]["inputSchema"]["json"]["type"],
            "object"
        );
        assert!(body["toolConfig"]["toolChoice"]["auto"].is_object(), "{body}");
    }
}
