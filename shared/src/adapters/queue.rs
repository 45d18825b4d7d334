//! The reconcile work queue on SQS FIFO, and the runs queue (SQS
//! standard) for a run now's message.

use aws_sdk_sqs::Client;

use super::FirstUse;
use crate::domain::run::occurrence::RunMessage;
use crate::ports::{QueueError, RunQueue, WorkQueue};

/// Its client is built at its first send ([`FirstUse`]): an install's
/// pass that changes nothing, and most webhooks' intake, send nothing.
#[derive(Clone)]
pub struct FifoQueue {
    client: FirstUse<Client>,
    url: String,
}

impl FifoQueue {
    pub fn from_sdk(sdk: &aws_config::SdkConfig, url: impl Into<String>) -> Self {
        Self {
            client: FirstUse::new(sdk, Client::new),
            url: url.into(),
        }
    }
}

/// A message group or deduplication id SQS accepts: up to 128 characters,
/// ASCII letters, digits and punctuation. One that is not (a long or
/// non-ASCII workspace, install or webhook id) is replaced by its SHA-256,
/// which keeps it distinct and stable.
pub fn sqs_id(text: &str) -> String {
    if !text.is_empty() && text.len() <= 128 && text.bytes().all(|b| b.is_ascii_graphic()) {
        return text.to_owned();
    }
    use sha2::{Digest, Sha256};
    format!("sha256-{}", hex::encode(Sha256::digest(text.as_bytes())))
}

impl WorkQueue for FifoQueue {
    async fn enqueue(&self, group: &str, dedup_id: &str, body: &str) -> Result<(), QueueError> {
        self.client
            .get()
            .send_message()
            .queue_url(&self.url)
            .message_group_id(sqs_id(group))
            .message_deduplication_id(sqs_id(dedup_id))
            .message_body(body)
            .send()
            .await
            .map_err(send_failed)?;
        Ok(())
    }
}

/// A message that could not be sent (or, for a run, serialized to send).
fn send_failed<E: std::error::Error + Send + Sync + 'static>(error: E) -> QueueError {
    QueueError {
        operation: "SendMessage",
        source: Box::new(error),
    }
}

/// The runs queue, which Scheduler also sends every occurrence to.
#[derive(Clone)]
pub struct RunsQueue {
    client: Client,
    url: String,
}

impl RunsQueue {
    pub fn from_sdk(sdk: &aws_config::SdkConfig, url: impl Into<String>) -> Self {
        Self {
            client: Client::new(sdk),
            url: url.into(),
        }
    }
}

impl RunQueue for RunsQueue {
    async fn send_run(&self, message: &RunMessage) -> Result<(), QueueError> {
        let body = serde_json::to_string(message).map_err(send_failed)?;
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(send_failed)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::sqs_id;

    #[test]
    fn ids_sqs_refuses_are_hashed_and_others_kept() {
        assert_eq!(sqs_id("ws_1/ins_1"), "ws_1/ins_1");
        let long = format!("{}/{}", "w".repeat(128), "i".repeat(128));
        for odd in [long.as_str(), "wörkspace/ins_1", "ws 1/ins", ""] {
            let id = sqs_id(odd);
            assert!(id.len() <= 128 && id.bytes().all(|b| b.is_ascii_graphic()), "{id}");
            assert_eq!(id, sqs_id(odd), "stable");
        }
        assert_ne!(sqs_id("wörkspace/a"), sqs_id("wörkspace/b"));
    }
}
