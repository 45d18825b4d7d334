//! The local stack (SPEC §10): moto on loopback standing in for AWS, the
//! resources of `template.yaml` created on it, and a Lambda Runtime API
//! emulator that runs the real function binaries. The README's main job and
//! the tests both stand on this crate.

pub mod backend;
pub mod converse;
pub mod dispatcher;
pub mod everything;
pub mod faults;
pub mod handwritten;
pub mod invoke;
pub mod mcp_fixture;
pub mod moto;
pub mod otlp;
pub mod pipe;
pub mod python_mcp;
pub mod runtime;
pub mod stack;
pub mod strict;
pub mod tls;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

pub use moto::Moto;
pub use stack::{STACK, Stack, StackNames};

pub const REGION: &str = "us-east-1";

/// moto and an SDK configuration pointed at it.
pub struct LocalAws {
    pub moto: Moto,
    pub sdk: SdkConfig,
}

impl LocalAws {
    pub async fn start() -> anyhow::Result<Self> {
        let moto = Moto::start()?;
        let sdk = sdk_config(&moto.endpoint()).await;
        Ok(Self { moto, sdk })
    }

    /// Starts moto and creates a stack with unique names on it.
    pub async fn with_stack(prefix: &str) -> anyhow::Result<(Self, Stack)> {
        let aws = Self::start().await?;
        let stack = Stack::create(&aws.sdk, StackNames::unique(prefix)).await?;
        Ok((aws, stack))
    }

    /// The SDK's own variables that point a process at this moto: endpoint,
    /// region and dummy credentials, as a Lambda environment would have them.
    pub fn sdk_env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT_URL", self.moto.endpoint()),
            ("AWS_REGION", REGION.to_owned()),
            ("AWS_ACCESS_KEY_ID", "testing".to_owned()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// An SDK configuration for the harness itself (the functions get theirs
/// from the environment, see [`LocalAws::sdk_env`]).
pub async fn sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new("testing", "testing", None, None, "local"))
        .endpoint_url(endpoint)
        // The functions' HTTP client (`shared::adapters::sdk_config`), so
        // every test's SDK request goes through it.
        .http_client(shared::adapters::tls::sdk_http_client(
            &shared::adapters::tls::Tls::process(),
        ))
        .load()
        .await
}

/// A DynamoDB item as plain JSON, for printing and for assertions.
pub fn item_json(
    item: std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
) -> serde_json::Value {
    serde_dynamo::from_item(item).unwrap_or(serde_json::Value::Null)
}
