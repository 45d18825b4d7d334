//! Reading a secret's string value from Secrets Manager: the one reader of
//! secrets (the webhook intake's signing secret at start-up, a connector's
//! credential when the runner opens it).

use std::sync::{Arc, OnceLock};

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::DisplayErrorContext;

/// Why a secret could not be read. `message` says which; the secret's
/// value never appears in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SecretError {
    /// `false`: the read failed; `true`: the secret has no string value.
    pub no_string: bool,
    pub message: String,
}

/// Its client is built at its first read, and shared by its clones: a
/// function that may never read a secret (the runner delivering a
/// reminder, the reconcile worker for installs without a credential) does
/// not parse the Secrets Manager crate's endpoint partitions at start
/// (about 0.7 M instructions, README "Benchmarks").
#[derive(Clone)]
pub struct SecretsReader {
    sdk: aws_config::SdkConfig,
    client: Arc<OnceLock<Client>>,
}

impl SecretsReader {
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            sdk: sdk.clone(),
            client: Arc::default(),
        }
    }

    fn client(&self) -> &Client {
        self.client.get_or_init(|| Client::new(&self.sdk))
    }

    /// The secret's string value.
    pub async fn read(&self, arn: &str) -> Result<String, SecretError> {
        let out = self
            .client()
            .get_secret_value()
            .secret_id(arn)
            .send()
            .await
            .map_err(|e| SecretError {
                no_string: false,
                message: DisplayErrorContext(&e).to_string(),
            })?;
        out.secret_string().map(str::to_owned).ok_or_else(|| SecretError {
            no_string: true,
            message: format!("secret {arn} has no string value"),
        })
    }
}
