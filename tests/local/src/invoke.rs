//! The Lambda `Invoke` API on loopback, for the local stack's functions:
//! what `aws lambda invoke` and the SDK's `Invoke` call in AWS, here in
//! front of the Runtime API emulators (`crate::runtime`), so a client that
//! invokes a function by its ARN (`sat verify`, the create function's
//! callers) runs unchanged against the local stack, its SDK pointed here by
//! `AWS_ENDPOINT_URL_LAMBDA`.
//!
//! As strict as Lambda where a caller can tell: `POST
//! /2015-03-31/functions/{name, ARN or partial ARN}/invocations`;
//! `RequestResponse` (the default) answers 200 with the function's payload,
//! and a function error as 200 with `X-Amz-Function-Error: Unhandled`;
//! `Event` answers 202 at once and runs it after; `DryRun` 204. An unknown
//! function is 404 `ResourceNotFoundException`, a payload that is not JSON
//! 400 `InvalidRequestContentException`, one above 6 MB 413
//! `RequestTooLargeException`, another invocation type 400
//! `InvalidParameterValueException`.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use crate::runtime::{Invoker, Outcome};

/// A synchronous invoke's largest request payload (Lambda's quota).
pub const MAX_PAYLOAD_BYTES: usize = 6 * 1024 * 1024;
/// The account and region of local ARNs (moto's).
const ARN_PREFIX: &str = "arn:aws:lambda:us-east-1:123456789012:function:";

/// The ARN Lambda would give a local function.
pub fn function_arn(name: &str) -> String {
    format!("{ARN_PREFIX}{name}")
}

/// The function a `FunctionName` names: a name, an ARN or a partial ARN
/// (`123456789012:function:name`), with or without a qualifier.
fn function_of(name: &str) -> &str {
    let rest = name.rsplit_once(":function:").map_or(name, |(_, rest)| rest);
    rest.split(':').next().unwrap_or(rest)
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = serde_json::json!({"Type": "User", "message": message}).to_string();
    (
        status,
        [
            ("x-amzn-errortype", kind.to_owned()),
            ("content-type", "application/json".to_owned()),
        ],
        body,
    )
        .into_response()
}

type Functions = Arc<BTreeMap<String, Invoker>>;

async fn invoke(
    State(functions): State<Functions>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(invoker) = functions.get(function_of(&name)).cloned() else {
        return error(
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            &format!("Function not found: {}", function_arn(function_of(&name))),
        );
    };
    if body.len() > MAX_PAYLOAD_BYTES {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestTooLargeException",
            &format!("Request must be smaller than {MAX_PAYLOAD_BYTES} bytes for the InvokeFunction operation"),
        );
    }
    let payload = if body.is_empty() {
        Bytes::from_static(b"{}")
    } else {
        body
    };
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&payload) {
        return error(
            StatusCode::BAD_REQUEST,
            "InvalidRequestContentException",
            &format!("Could not parse request body into json: {e}"),
        );
    }
    let text = String::from_utf8_lossy(&payload).into_owned();
    let kind = headers
        .get("x-amz-invocation-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("RequestResponse");
    match kind {
        "RequestResponse" => match invoker.invoke_text(&text).await {
            Ok(Outcome::Response(value)) => (
                StatusCode::OK,
                [
                    ("x-amz-executed-version", "$LATEST"),
                    ("content-type", "application/json"),
                ],
                value.to_string(),
            )
                .into_response(),
            Ok(Outcome::Error(value)) => (
                StatusCode::OK,
                [
                    ("x-amz-executed-version", "$LATEST"),
                    ("x-amz-function-error", "Unhandled"),
                    ("content-type", "application/json"),
                ],
                value.to_string(),
            )
                .into_response(),
            // The emulator's own timeout: Lambda answers a timed-out
            // invocation as a function error.
            Err(e) => (
                StatusCode::OK,
                [
                    ("x-amz-executed-version", "$LATEST"),
                    ("x-amz-function-error", "Unhandled"),
                    ("content-type", "application/json"),
                ],
                serde_json::json!({"errorType": "Sandbox.Timedout", "errorMessage": e.to_string()}).to_string(),
            )
                .into_response(),
        },
        "Event" => {
            tokio::spawn(async move {
                let _ = invoker.invoke_text(&text).await;
            });
            StatusCode::ACCEPTED.into_response()
        }
        "DryRun" => StatusCode::NO_CONTENT.into_response(),
        other => error(
            StatusCode::BAD_REQUEST,
            "InvalidParameterValueException",
            &format!("Unsupported invocation type: {other}"),
        ),
    }
}

/// The Invoke API of a set of functions, on a free loopback port. Stops
/// when dropped.
pub struct InvokeApi {
    port: u16,
    server: tokio::task::JoinHandle<()>,
}

impl InvokeApi {
    pub async fn start(functions: impl IntoIterator<Item = Invoker>) -> anyhow::Result<Self> {
        let functions: Functions = Arc::new(
            functions
                .into_iter()
                .map(|f| (f.function_name().to_owned(), f))
                .collect(),
        );
        let app = Router::new()
            .route("/2015-03-31/functions/{name}/invocations", post(invoke))
            // Lambda's own bound is answered as Lambda answers it, above.
            .layer(DefaultBodyLimit::max(MAX_PAYLOAD_BYTES * 2))
            .with_state(functions);
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { port, server })
    }

    /// The endpoint for `AWS_ENDPOINT_URL_LAMBDA`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for InvokeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}
