//! Reading a secret's string value from Secrets Manager: the one reader of
//! secrets (the webhook intake's signing secret at start-up, a connector's
//! credential when the runner opens it).

use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::error::DisplayErrorContext;

use super::FirstUse;

/// Why a secret could not be read. `message` says which; the secret's
/// value never appears in it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SecretError {
    /// `false`: the read failed; `true`: the secret has no string value.
    pub no_string: bool,
    pub message: String,
}

impl SecretError {
    /// A read that failed (not a secret without a string value).
    pub fn failed(message: impl Into<String>) -> Self {
        Self {
            no_string: false,
            message: message.into(),
        }
    }
}

/// Its client is built at its first read ([`FirstUse`]): the runner
/// delivering a reminder and the reconcile worker for installs without a
/// credential never read a secret.
#[derive(Clone)]
pub struct SecretsReader {
    client: FirstUse<Client>,
}

impl SecretsReader {
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            client: FirstUse::new(sdk, Client::new),
        }
    }

    /// The secret's string value.
    pub async fn read(&self, arn: &str) -> Result<String, SecretError> {
        let out = self
            .client
            .get()
            .get_secret_value()
            .secret_id(arn)
            .send()
            .await
            .map_err(|e| SecretError::failed(DisplayErrorContext(&e).to_string()))?;
        out.secret_string().map(str::to_owned).ok_or_else(|| SecretError {
            no_string: true,
            message: format!("secret {arn} has no string value"),
        })
    }
}
