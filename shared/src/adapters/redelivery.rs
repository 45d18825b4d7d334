//! Returning run messages sooner: `ChangeMessageVisibility` on the record's
//! own queue (named by the record's `eventSourceARN`), so a record the
//! runner returns comes back after `domain::run::redelivery::return_delay`, not
//! the queue's visibility timeout. Best effort by design: when the call
//! fails the message still comes back, at the queue's timeout, which the
//! catch-up window covers (template `CatchUpSeconds`).

use aws_sdk_sqs::Client;

use super::FirstUse;
use crate::ports::BoxError;

/// Its client is built at its first return ([`FirstUse`]): most runs
/// return nothing.
#[derive(Clone)]
pub struct Returns {
    client: FirstUse<Client>,
}

/// A return that could not be shortened.
#[derive(Debug, thiserror::Error)]
pub enum ReturnError {
    #[error("`{0}` is not an SQS queue ARN")]
    NotAQueue(String),
    #[error("ChangeMessageVisibility failed")]
    Sqs(#[source] BoxError),
}

impl Returns {
    pub fn from_sdk(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            client: FirstUse::new(sdk, Client::new),
        }
    }

    /// Makes the received message visible again after `seconds`.
    pub async fn return_after(&self, queue_arn: &str, receipt_handle: &str, seconds: i32) -> Result<(), ReturnError> {
        let url = crate::domain::run::redelivery::queue_url_of_arn(queue_arn)
            .ok_or_else(|| ReturnError::NotAQueue(queue_arn.to_owned()))?;
        self.client
            .get()
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(|e| ReturnError::Sqs(Box::new(e)))?;
        Ok(())
    }
}
