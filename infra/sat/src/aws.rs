//! `sat`'s own AWS calls, beside the shared adapters it reads tasks and
//! runs through: the stack's outputs (CloudFormation), the dead-letter
//! queues' messages (SQS) and the create function's invoke (Lambda).

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};

use crate::error::SatError;

/// A stack as CloudFormation describes it.
#[derive(Debug, Clone, Default)]
pub struct DescribedStack {
    pub outputs: BTreeMap<String, String>,
    pub parameters: BTreeMap<String, String>,
}

/// `DescribeStacks` of one stack: its outputs and parameters.
pub async fn describe_stack(sdk: &SdkConfig, stack: &str) -> Result<DescribedStack, SatError> {
    let client = aws_sdk_cloudformation::Client::new(sdk);
    let out = client.describe_stacks().stack_name(stack).send().await.map_err(|e| {
        let missing = e
            .as_service_error()
            .and_then(aws_sdk_cloudformation::error::ProvideErrorMetadata::message)
            .is_some_and(|m| m.contains("does not exist"));
        if missing {
            SatError::Stack {
                stack: stack.to_owned(),
                reason: "no such stack in this account and region (check --region and --profile)".into(),
            }
        } else {
            SatError::aws(
                format!("reading stack {stack}'s outputs (cloudformation:DescribeStacks)"),
                e,
            )
        }
    })?;
    let Some(described) = out.stacks().first() else {
        return Err(SatError::Stack {
            stack: stack.to_owned(),
            reason: "CloudFormation described no stack".into(),
        });
    };
    Ok(DescribedStack {
        outputs: described
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_owned(), o.output_value()?.to_owned())))
            .collect(),
        parameters: described
            .parameters()
            .iter()
            .filter_map(|p| Some((p.parameter_key()?.to_owned(), p.parameter_value()?.to_owned())))
            .collect(),
    })
}

/// One message received from a queue.
#[derive(Debug, Clone)]
pub struct Received {
    pub message_id: String,
    pub receipt_handle: String,
    pub body: String,
    /// The FIFO message group, on a FIFO queue.
    pub group: Option<String>,
    /// How many times it was received (SQS's count).
    pub receives: Option<u32>,
    /// What the sender that dead-lettered it said (Scheduler and
    /// EventBridge set `ERROR_CODE` and `ERROR_MESSAGE`).
    pub error: Option<String>,
}

/// A queue, by URL, through the SDK's SQS client.
#[derive(Clone)]
pub struct Queues {
    client: aws_sdk_sqs::Client,
}

impl Queues {
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            client: aws_sdk_sqs::Client::new(sdk),
        }
    }

    /// Up to ten messages, kept invisible to others for `hold_seconds`.
    pub async fn receive(&self, url: &str, hold_seconds: i32, wait_seconds: i32) -> Result<Vec<Received>, SatError> {
        let out = self
            .client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(hold_seconds)
            .wait_time_seconds(wait_seconds)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| SatError::aws(format!("receiving from {url}"), e))?;
        Ok(out
            .messages()
            .iter()
            .map(|m| {
                let attribute = |name: &str| {
                    m.message_attributes()
                        .and_then(|a| a.get(name))
                        .and_then(|v| v.string_value())
                        .map(str::to_owned)
                };
                let error = match (attribute("ERROR_CODE"), attribute("ERROR_MESSAGE")) {
                    (None, None) => None,
                    (code, message) => Some([code, message].into_iter().flatten().collect::<Vec<_>>().join(": ")),
                };
                Received {
                    message_id: m.message_id().unwrap_or_default().to_owned(),
                    receipt_handle: m.receipt_handle().unwrap_or_default().to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    group: m
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                        .cloned(),
                    receives: m
                        .attributes()
                        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
                        .and_then(|n| n.parse().ok()),
                    error,
                }
            })
            .collect())
    }

    /// Sends a body; on a FIFO queue in `group`, deduplicated by `dedup`.
    pub async fn send(&self, url: &str, body: &str, fifo: Option<(&str, &str)>) -> Result<(), SatError> {
        let mut send = self.client.send_message().queue_url(url).message_body(body);
        if let Some((group, dedup)) = fifo {
            send = send.message_group_id(group).message_deduplication_id(dedup);
        }
        send.send()
            .await
            .map_err(|e| SatError::aws(format!("sending to {url}"), e))?;
        Ok(())
    }

    pub async fn delete(&self, url: &str, receipt_handle: &str) -> Result<(), SatError> {
        self.client
            .delete_message()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map_err(|e| SatError::aws(format!("deleting from {url}"), e))?;
        Ok(())
    }

    /// Keeps a received message invisible for `seconds` from now; fails
    /// when its receipt no longer holds it (its visibility ran out).
    pub async fn hold(&self, url: &str, receipt_handle: &str, seconds: i32) -> Result<(), SatError> {
        self.client
            .change_message_visibility()
            .queue_url(url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(|e| SatError::aws(format!("holding a message of {url}"), e))?;
        Ok(())
    }

    /// Makes a received message visible again at once.
    pub async fn release(&self, url: &str, receipt_handle: &str) -> Result<(), SatError> {
        self.hold(url, receipt_handle, 0).await
    }

    /// How many messages wait in the queue (SQS's approximate count).
    pub async fn depth(&self, url: &str) -> Result<u64, SatError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| SatError::aws(format!("reading {url}'s attributes"), e))?;
        Ok(out
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }
}

/// What a synchronous Lambda invoke answered.
#[derive(Debug, Clone)]
pub struct Invoked {
    pub payload: serde_json::Value,
    /// Lambda's `X-Amz-Function-Error` (`Unhandled`): the function failed.
    pub function_error: Option<String>,
}

/// A synchronous invoke (`RequestResponse`) of `function` (a name or ARN).
/// `endpoint`: the local stack's Invoke API, when there is one.
pub async fn invoke(
    sdk: &SdkConfig,
    endpoint: Option<&str>,
    function: &str,
    payload: &serde_json::Value,
) -> Result<Invoked, SatError> {
    let mut config = aws_sdk_lambda::config::Builder::from(sdk);
    if let Some(endpoint) = endpoint {
        config = config.endpoint_url(endpoint);
    }
    let client = aws_sdk_lambda::Client::from_conf(config.build());
    let out = client
        .invoke()
        .function_name(function)
        .payload(aws_sdk_lambda::primitives::Blob::new(payload.to_string()))
        .send()
        .await
        .map_err(|e| SatError::aws(format!("invoking {function} (lambda:InvokeFunction)"), e))?;
    let bytes = out.payload().map(|b| b.as_ref().to_vec()).unwrap_or_default();
    let payload = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Ok(Invoked {
        payload,
        function_error: out.function_error().map(str::to_owned),
    })
}

/// A temporary subscription to one task's notifications on the stack's
/// bus: a queue of its own and a rule matching the task's events, so
/// `verify` sees its event whoever consumes `RunFinishedQueue`. Removed
/// with [`Subscription::remove`].
pub struct Subscription {
    pub queue_url: String,
    rule: String,
    bus: String,
    events: aws_sdk_eventbridge::Client,
    sqs: aws_sdk_sqs::Client,
}

impl Subscription {
    pub async fn create(sdk: &SdkConfig, bus: &str, task_id: &str) -> Result<Self, SatError> {
        let name = format!("sat-verify-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let sqs = aws_sdk_sqs::Client::new(sdk);
        let events = aws_sdk_eventbridge::Client::new(sdk);
        let queue_url = sqs
            .create_queue()
            .queue_name(&name)
            .send()
            .await
            .map_err(|e| SatError::aws(format!("creating the queue {name} (sqs:CreateQueue)"), e))?
            .queue_url
            .unwrap_or_default();
        let subscription = Self {
            queue_url,
            rule: name.clone(),
            bus: bus.to_owned(),
            events,
            sqs,
        };
        if let Err(e) = subscription.subscribe(task_id).await {
            subscription.remove().await;
            return Err(e);
        }
        Ok(subscription)
    }

    /// The verify queue's ARN.
    async fn queue_arn(&self) -> Result<String, SatError> {
        Ok(self
            .sqs
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|e| SatError::aws("reading the verify queue's ARN", e))?
            .attributes
            .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
            .unwrap_or_default())
    }

    async fn subscribe(&self, task_id: &str) -> Result<(), SatError> {
        let queue_arn = self.queue_arn().await?;
        let pattern = serde_json::json!({
            "source": [shared::domain::run::notification::SOURCE],
            "detail-type": [shared::domain::run::notification::DETAIL_TYPE],
            "detail": {"task_id": [task_id]},
        });
        let rule_arn = self
            .events
            .put_rule()
            .name(&self.rule)
            .event_bus_name(&self.bus)
            .event_pattern(pattern.to_string())
            .description("sat verify: one deployment check's notification, removed after it")
            .send()
            .await
            .map_err(|e| {
                SatError::aws(
                    format!("adding the rule {} on {} (events:PutRule)", self.rule, self.bus),
                    e,
                )
            })?
            .rule_arn
            .unwrap_or_default();
        // Only that rule may send to the queue.
        let policy = serde_json::json!({
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
                           "Action": "sqs:SendMessage", "Resource": queue_arn,
                           "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}}}]
        });
        self.sqs
            .set_queue_attributes()
            .queue_url(&self.queue_url)
            .attributes(QueueAttributeName::Policy, policy.to_string())
            .send()
            .await
            .map_err(|e| SatError::aws("letting the rule send to the verify queue (sqs:SetQueueAttributes)", e))?;
        self.events
            .put_targets()
            .rule(&self.rule)
            .event_bus_name(&self.bus)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("sat-verify")
                    .arn(queue_arn)
                    .build()
                    .map_err(|e| SatError::aws("the rule's target", e))?,
            )
            .send()
            .await
            .map_err(|e| SatError::aws("targeting the verify queue (events:PutTargets)", e))?;
        Ok(())
    }

    /// Removes the rule, its target and the queue; what cannot be removed
    /// is said on stderr (a leftover costs nothing but clutter).
    pub async fn remove(&self) {
        let targets = self
            .events
            .remove_targets()
            .rule(&self.rule)
            .event_bus_name(&self.bus)
            .ids("sat-verify")
            .send()
            .await;
        let rule = self
            .events
            .delete_rule()
            .name(&self.rule)
            .event_bus_name(&self.bus)
            .send()
            .await;
        let queue = self.sqs.delete_queue().queue_url(&self.queue_url).send().await;
        if targets.is_err() || rule.is_err() || queue.is_err() {
            eprintln!(
                "sat verify: could not remove all of rule {} on {} and queue {}: remove them by hand",
                self.rule, self.bus, self.queue_url
            );
        }
    }
}
