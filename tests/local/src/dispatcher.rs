//! The local dispatcher: what EventBridge Scheduler, SQS event source
//! mappings and the platform do in AWS, done by hand against moto so the real
//! function binaries run the whole loop locally (SPEC §10).
//!
//! - due schedules to the runs queue: moto stores schedules but never fires
//!   them, so the dispatcher reads each schedule, fills in Scheduler's
//!   context attributes and sends its input to the target queue (and deletes
//!   a fired one-time schedule, as `ActionAfterCompletion=DELETE` would);
//! - queue batches to the handlers: receive from the runs queue or the
//!   reconcile FIFO queue, invoke the function with an SQS event, delete
//!   what it acknowledged, and leave what it returned to its visibility
//!   timeout, as the event source mapping does: a returned message comes
//!   back only when its visibility (the queue's, or what the function set
//!   with `ChangeMessageVisibility`) has passed on SQS's clock, which
//!   [`Dispatcher::advance_clock`] moves (moto's own clock is the wall's);
//! - Lambda's recursive loop detection: each invocation gets a trace header
//!   with a lineage (`Lineage=<function>:<hops>`) one hop past the deepest
//!   of its records' (`AWSTraceHeader`, which SQS keeps from the header the
//!   function's SDK sent, `moto_serial.py`); a record that would make the
//!   17th hop of a chain through the same function goes to the queue's
//!   dead-letter queue uninvoked, unless the function allows recursion in
//!   `template.yaml` (`RecursiveLoop: Allow`), as Lambda stops such a loop;
//! - webhooks to reconcile: sign an event with the stack's Standard
//!   Webhooks secret and invoke reconcile with a function URL request;
//! - settled runs to the bus: the stack's stand-in for the notification
//!   pipe (`crate::pipe`) reads the table's stream ([`Dispatcher::notify`]);
//!   from the bus, moto's own rules copy each event to `RunFinishedQueue`
//!   (`RunFinishedRule`, its pattern read from `template.yaml`), where the
//!   chat backend (`crate::backend`) reads it.

use anyhow::Context;
use aws_config::SdkConfig;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use shared::domain::connector::webhook::WebhookSecret;
use shared::domain::schedule::Expression;
use shared::domain::schedule::preview::next_cron_fire;

use crate::runtime::RuntimeApi;
use crate::stack::Stack;

/// The most hops Lambda lets a chain Lambda -> SQS -> the same Lambda make
/// before it stops it (about 16; the 17th is not invoked).
pub const MAX_RECURSIVE_HOPS: u32 = 16;

/// The lineage of `function` in a trace header (`Lineage=<id>:<hops>`), 0
/// when it names none or another function's.
pub fn lineage_hops(trace: &str, function: &str) -> u32 {
    trace
        .split(';')
        .filter_map(|field| field.trim().strip_prefix("Lineage="))
        .filter_map(|lineage| lineage.split_once(':'))
        .filter(|(id, _)| *id == lineage_id(function))
        .filter_map(|(_, hops)| hops.parse().ok())
        .max()
        .unwrap_or(0)
}

fn lineage_id(function: &str) -> String {
    function.bytes().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Whether `template.yaml` lets the function behind `function` (the local
/// name) recurse through its queue (`RecursiveLoop: Allow`).
pub fn recursion_allowed(function: &str) -> anyhow::Result<bool> {
    let resource = match function {
        "reconcile" => "ReconcileFunction",
        "runner" => "RunnerFunction",
        "create" => "CreateFunction",
        "admin" => "AdminFunction",
        "schedules" => "SchedulesFunction",
        other => anyhow::bail!("no function `{other}` in template.yaml"),
    };
    let path = crate::moto::repo_root().join("template.yaml");
    let template: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
    Ok(template["Resources"][resource]["Properties"]["RecursiveLoop"].as_str() == Some("Allow"))
}

/// The message ids a partial batch response (`SqsBatchResponse`) returns.
pub fn batch_failures(response: &Value) -> Vec<String> {
    response["batchItemFailures"]
        .as_array()
        .map(|failures| {
            failures
                .iter()
                .filter_map(|f| f["itemIdentifier"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

pub struct Dispatcher<'a> {
    pub sdk: &'a SdkConfig,
    pub stack: &'a Stack,
    pub runner: &'a RuntimeApi,
    pub reconcile: &'a RuntimeApi,
}

/// One received message, as the event source mapping holds it.
struct Received {
    id: String,
    handle: String,
    body: String,
    group: Option<String>,
    /// Its `AWSTraceHeader`, if it was sent with one.
    trace: Option<String>,
}

/// A schedule the dispatcher fired.
#[derive(Debug, Clone)]
pub struct Fired {
    pub schedule: String,
    pub scheduled_time: DateTime<Utc>,
}

fn at_time(expression: &str) -> Option<DateTime<Utc>> {
    let inner = expression.strip_prefix("at(")?.strip_suffix(')')?;
    chrono::NaiveDateTime::parse_from_str(inner, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|t| t.and_utc())
}

impl Dispatcher<'_> {
    fn scheduler(&self) -> aws_sdk_scheduler::Client {
        aws_sdk_scheduler::Client::new(self.sdk)
    }

    async fn schedule(
        &self,
        name: &str,
    ) -> anyhow::Result<aws_sdk_scheduler::operation::get_schedule::GetScheduleOutput> {
        Ok(self
            .scheduler()
            .get_schedule()
            .group_name(&self.stack.names.schedule_group)
            .name(name)
            .send()
            .await?)
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(self.sdk)
    }

    /// Sends one occurrence of a schedule to its target, as Scheduler would.
    async fn deliver(&self, name: &str, scheduled: DateTime<Utc>) -> anyhow::Result<()> {
        let schedule = self.schedule(name).await?;
        let target = schedule.target().context("schedule without target")?;
        let input = target
            .input()
            .unwrap_or_default()
            .replace(
                "<aws.scheduler.scheduled-time>",
                &shared::domain::schedule::format_utc(scheduled),
            )
            .replace("<aws.scheduler.execution-id>", &uuid::Uuid::new_v4().to_string())
            .replace("<aws.scheduler.attempt-number>", "1");
        // Scheduler sends at the occurrence: one fast-forwarded is sent with
        // SQS's clock put there (its `SentTimestamp`, which the runner
        // reads as the delivery's time), then put back.
        let endpoint = self
            .sdk
            .endpoint_url()
            .context("the dispatcher's SDK has no local endpoint")?;
        let offset = crate::moto::sqs_clock_offset(endpoint)?;
        let ahead = (scheduled - Utc::now()).num_milliseconds() as f64 / 1000.0;
        let travel = ahead > offset;
        if travel {
            crate::moto::set_sqs_clock(endpoint, ahead)?;
        }
        let sent = self
            .sqs()
            .send_message()
            .queue_url(&self.stack.runs_queue_url)
            .message_body(input)
            .send()
            .await;
        if travel {
            crate::moto::set_sqs_clock(endpoint, offset)?;
        }
        sent?;
        Ok(())
    }

    /// Runs `send` with SQS's clock at `scheduled` when that lies ahead:
    /// what another function sends about a fast-forwarded occurrence (an
    /// admin's approval resuming it) is sent after its time, as on AWS.
    pub async fn after_occurrence<T>(
        &self,
        scheduled: DateTime<Utc>,
        send: impl std::future::Future<Output = T>,
    ) -> anyhow::Result<T> {
        let endpoint = self
            .sdk
            .endpoint_url()
            .context("the dispatcher's SDK has no local endpoint")?;
        let offset = crate::moto::sqs_clock_offset(endpoint)?;
        let ahead = (scheduled - Utc::now()).num_milliseconds() as f64 / 1000.0 + 1.0;
        let travel = ahead > offset;
        if travel {
            crate::moto::set_sqs_clock(endpoint, ahead)?;
        }
        let sent = send.await;
        if travel {
            crate::moto::set_sqs_clock(endpoint, offset)?;
        }
        Ok(sent)
    }

    /// Fires every enabled one-time schedule whose instant has come.
    pub async fn fire_due(&self, now: DateTime<Utc>) -> anyhow::Result<Vec<Fired>> {
        let listed = self
            .scheduler()
            .list_schedules()
            .group_name(&self.stack.names.schedule_group)
            .send()
            .await?;
        let mut fired = Vec::new();
        for summary in listed.schedules() {
            let name = summary.name().unwrap_or_default();
            let schedule = self.schedule(name).await?;
            let enabled = schedule.state().is_some_and(|s| s.as_str() == "ENABLED");
            let Some(at) = schedule.schedule_expression().and_then(at_time) else {
                continue;
            };
            if enabled && at <= now {
                self.deliver(name, at).await?;
                self.scheduler()
                    .delete_schedule()
                    .group_name(&self.stack.names.schedule_group)
                    .name(name)
                    .send()
                    .await?;
                fired.push(Fired {
                    schedule: name.to_owned(),
                    scheduled_time: at,
                });
            }
        }
        Ok(fired)
    }

    /// Fast-forwards a recurring schedule: delivers its next occurrence
    /// after `after` now, whether or not its time has come. `None` when the
    /// schedule is disabled (Scheduler would not fire it) or has no
    /// occurrence left before its `EndDate`. A schedule with an `EndDate`
    /// and `ActionAfterCompletion=DELETE` is deleted after its last
    /// delivery, as Scheduler does.
    pub async fn fire_next(&self, name: &str, after: DateTime<Utc>) -> anyhow::Result<Option<Fired>> {
        let schedule = self.schedule(name).await?;
        if schedule.state().is_none_or(|s| s.as_str() != "ENABLED") {
            return Ok(None);
        }
        let expression = Expression {
            expression: schedule.schedule_expression().unwrap_or_default().to_owned(),
            timezone: schedule.schedule_expression_timezone().unwrap_or("UTC").to_owned(),
            end_date: schedule
                .end_date()
                .and_then(|end| DateTime::from_timestamp(end.secs(), 0)),
        };
        let deletes = schedule
            .action_after_completion()
            .is_some_and(|a| a.as_str() == "DELETE");
        let next = if expression.expression.starts_with("cron(") {
            // Past any local time DST skips or day a month lacks.
            let Some(next) = next_cron_fire(&expression, after)? else {
                return Ok(None);
            };
            if deletes && expression.end_date.is_some() && next_cron_fire(&expression, next)?.is_none() {
                self.deliver(name, next).await?;
                self.scheduler()
                    .delete_schedule()
                    .group_name(&self.stack.names.schedule_group)
                    .name(name)
                    .send()
                    .await?;
                return Ok(Some(Fired {
                    schedule: name.to_owned(),
                    scheduled_time: next,
                }));
            }
            next
        } else {
            let rate = expression
                .expression
                .strip_prefix("rate(")
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_default();
            let (every, unit) = shared::domain::connector::declaration::parse_rate(rate).context("a rate schedule")?;
            let minutes = i64::from(every)
                * match unit {
                    shared::domain::schedule::RateUnit::Minutes => 1,
                    shared::domain::schedule::RateUnit::Hours => 60,
                    shared::domain::schedule::RateUnit::Days => 1440,
                };
            after + chrono::Duration::minutes(minutes)
        };
        self.deliver(name, next).await?;
        Ok(Some(Fired {
            schedule: name.to_owned(),
            scheduled_time: next,
        }))
    }

    /// Receives up to ten messages of a queue: the SQS event's records and
    /// the messages as received.
    async fn receive(&self, queue_url: &str, arn: &str) -> anyhow::Result<(Vec<Value>, Vec<Received>)> {
        let out = self
            .sqs()
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::AwsTraceHeader)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await?;
        let mut received = Vec::new();
        let records: Vec<Value> = out
            .messages()
            .iter()
            .map(|m| {
                let id = m.message_id().unwrap_or_default().to_owned();
                let attribute = |name: &MessageSystemAttributeName| m.attributes().and_then(|a| a.get(name)).cloned();
                let receives =
                    attribute(&MessageSystemAttributeName::ApproximateReceiveCount).unwrap_or_else(|| "1".to_owned());
                let mut attributes = json!({"ApproximateReceiveCount": receives});
                if let Some(sent) = attribute(&MessageSystemAttributeName::SentTimestamp) {
                    attributes["SentTimestamp"] = json!(sent);
                }
                let group = attribute(&MessageSystemAttributeName::MessageGroupId);
                if let Some(group) = &group {
                    attributes["MessageGroupId"] = json!(group);
                }
                let trace = attribute(&MessageSystemAttributeName::AwsTraceHeader);
                if let Some(trace) = &trace {
                    attributes["AWSTraceHeader"] = json!(trace);
                }
                received.push(Received {
                    id: id.clone(),
                    handle: m.receipt_handle().unwrap_or_default().to_owned(),
                    body: m.body().unwrap_or_default().to_owned(),
                    group,
                    trace,
                });
                json!({"messageId": id, "receiptHandle": m.receipt_handle(), "body": m.body(),
                       "attributes": attributes,
                       "messageAttributes": {}, "eventSource": "aws:sqs", "eventSourceARN": arn,
                       "awsRegion": crate::moto::REGION})
            })
            .collect();
        Ok((records, received))
    }

    /// Stops a recursive loop as Lambda does: each record that would make
    /// the function's hop past [`MAX_RECURSIVE_HOPS`] goes to `dlq_url`
    /// uninvoked (and off the queue) unless the function allows recursion.
    /// Answers the records to invoke, theirs, and the invocation's trace
    /// header (one hop past the deepest).
    async fn stop_loops(
        &self,
        queue_url: &str,
        dlq_url: &str,
        (function, allowed): (&str, bool),
        records: Vec<Value>,
        received: Vec<Received>,
    ) -> anyhow::Result<(Vec<Value>, Vec<Received>, Option<String>)> {
        let mut kept = (Vec::new(), Vec::new());
        let mut deepest = 0;
        for (record, message) in records.into_iter().zip(received) {
            let hops = message.trace.as_deref().map_or(0, |t| lineage_hops(t, function));
            if hops >= MAX_RECURSIVE_HOPS && !allowed {
                tracing::warn!(
                    function,
                    hops,
                    "a recursive loop stopped: the message goes to the DLQ uninvoked"
                );
                let mut send = self.sqs().send_message().queue_url(dlq_url).message_body(&message.body);
                if let Some(group) = &message.group {
                    send = send.message_group_id(group).message_deduplication_id(&message.id);
                }
                send.send().await?;
                self.delete(queue_url, &message.handle).await?;
                continue;
            }
            deepest = deepest.max(hops);
            kept.0.push(record);
            kept.1.push(message);
        }
        let root = kept
            .1
            .iter()
            .filter_map(|m| m.trace.as_deref())
            .flat_map(|t| t.split(';'))
            .find(|f| f.trim().starts_with("Root="))
            .map(|f| f.trim().to_owned())
            .unwrap_or_else(|| {
                format!(
                    "Root=1-{:08x}-{}",
                    Utc::now().timestamp(),
                    uuid::Uuid::new_v4().simple()
                )
            });
        let trace = format!("{root};Sampled=0;Lineage={}:{}", lineage_id(function), deepest + 1);
        Ok((kept.0, kept.1, Some(trace)))
    }

    /// Feeds a queue to a function until it is empty or nothing is
    /// acknowledged; returns the batch responses. What the function returns
    /// stays invisible until its visibility passes.
    async fn drain(
        &self,
        queue_url: &str,
        arn: &str,
        dlq_url: &str,
        function: &RuntimeApi,
        recursion: Option<bool>,
    ) -> anyhow::Result<Vec<Value>> {
        let mut responses = Vec::new();
        let name = function.invoker().function_name().to_owned();
        let allowed = match recursion {
            Some(allowed) => allowed,
            None => recursion_allowed(&name)?,
        };
        for _ in 0..200 {
            let (records, received) = self.receive(queue_url, arn).await?;
            if received.is_empty() {
                break;
            }
            let (records, received, trace) = self
                .stop_loops(queue_url, dlq_url, (&name, allowed), records, received)
                .await?;
            if received.is_empty() {
                continue;
            }
            let response = function.invoke_ok_traced(&json!({"Records": records}), trace).await?;
            let failed = batch_failures(&response);
            for message in &received {
                if !failed.contains(&message.id) {
                    self.delete(queue_url, &message.handle).await?;
                }
            }
            let stuck = failed.len() == received.len();
            responses.push(response);
            if stuck {
                break;
            }
        }
        Ok(responses)
    }

    /// Deletes a received message, as the event source mapping does for
    /// one the function acknowledged.
    async fn delete(&self, queue_url: &str, handle: &str) -> anyhow::Result<()> {
        self.sqs()
            .delete_message()
            .queue_url(queue_url)
            .receipt_handle(handle)
            .send()
            .await?;
        Ok(())
    }

    /// Moves SQS's clock forward: returned messages whose visibility passes
    /// within `seconds` can be received again.
    pub fn advance_clock(&self, seconds: u32) -> anyhow::Result<()> {
        let endpoint = self
            .sdk
            .endpoint_url()
            .context("the dispatcher's SDK has no local endpoint")?;
        crate::moto::advance_sqs_clock(endpoint, seconds)
    }

    /// Delivers the runs queue to the runner.
    pub async fn drain_runs(&self) -> anyhow::Result<Vec<Value>> {
        self.drain(
            &self.stack.runs_queue_url,
            &self.stack.runs_queue_arn,
            &self.stack.runs_dlq_url,
            self.runner,
            None,
        )
        .await
    }

    /// Delivers the reconcile work queue to reconcile.
    pub async fn drain_reconcile(&self) -> anyhow::Result<Vec<Value>> {
        self.drain_reconcile_recursing(None).await
    }

    /// [`Dispatcher::drain_reconcile`], with reconcile's `RecursiveLoop`
    /// as given (`None`: as `template.yaml` sets it).
    pub async fn drain_reconcile_recursing(&self, allowed: Option<bool>) -> anyhow::Result<Vec<Value>> {
        self.drain(
            &self.stack.reconcile_queue_url,
            "arn:aws:sqs:us-east-1:123456789012:reconcile.fifo",
            &self.stack.reconcile_dlq_url,
            self.reconcile,
            allowed,
        )
        .await
    }

    /// Carries the runs settled since the last call to the bus, as
    /// `RunFinishedPipe` would; the bus's rules deliver each event to
    /// `RunFinishedQueue` (and the local capture queue). Answers how many
    /// events it put.
    pub async fn notify(&self) -> anyhow::Result<usize> {
        self.stack.pipe.pump(self.sdk).await
    }

    /// Signs an event as the platform would and posts it to reconcile's
    /// function URL; returns the HTTP status it answered.
    pub async fn webhook(&self, event: &Value) -> anyhow::Result<u16> {
        let secret = WebhookSecret::parse(&self.stack.webhook_secret).context("the stack's webhook secret")?;
        let body = event.to_string();
        let id = format!("wh_{}", uuid::Uuid::new_v4().simple());
        let now = Utc::now().timestamp();
        let request = json!({
            "version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
            "headers": {"content-type": "application/json", "webhook-id": id, "webhook-timestamp": now.to_string(),
                        "webhook-signature": secret.sign(&id, now, body.as_bytes())},
            "requestContext": {"accountId": "anonymous", "apiId": "local", "domainName": "localhost", "domainPrefix": "local",
                               "requestId": id, "routeKey": "$default", "stage": "$default", "time": "", "timeEpoch": now * 1000,
                               "http": {"method": "POST", "path": "/", "protocol": "HTTP/1.1", "sourceIp": "127.0.0.1", "userAgent": "platform"}},
            "body": body, "isBase64Encoded": false
        });
        let response = self.reconcile.invoke_ok(&request).await?;
        Ok(response["statusCode"].as_u64().unwrap_or_default() as u16)
    }
}
