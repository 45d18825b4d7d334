//! moto and the SDK pointed at it: the local AWS every part of the stack
//! and every test stands on.

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::Credentials;

use crate::moto::{Moto, REGION};
use crate::stack::{Stack, StackNames};

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
