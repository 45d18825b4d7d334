//! The reconcile work queue on SQS FIFO, and reading secrets at start-up.

use aws_sdk_sqs::Client;

use crate::ports::{QueueError, WorkQueue};

#[derive(Clone)]
pub struct FifoQueue {
    client: Client,
    url: String,
}

impl FifoQueue {
    pub fn from_sdk(sdk: &aws_config::SdkConfig, url: impl Into<String>) -> Self {
        Self {
            client: Client::new(sdk),
            url: url.into(),
        }
    }
}

impl WorkQueue for FifoQueue {
    async fn enqueue(&self, group: &str, dedup_id: &str, body: &str) -> Result<(), QueueError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_group_id(group)
            .message_deduplication_id(dedup_id)
            .message_body(body)
            .send()
            .await
            .map_err(|e| QueueError {
                operation: "SendMessage",
                source: Box::new(e),
            })?;
        Ok(())
    }
}

/// A secret's string value, read once at start-up.
pub async fn secret_string(sdk: &aws_config::SdkConfig, arn: &str) -> Result<String, crate::ports::BoxError> {
    let out = aws_sdk_secretsmanager::Client::new(sdk)
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await?;
    out.secret_string()
        .map(str::to_owned)
        .ok_or_else(|| format!("secret {arn} has no string value").into())
}
