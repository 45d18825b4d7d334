//! The platform's chat backend, as the main job plays it (SPEC §12): it
//! consumes `RunFinishedQueue` and, for each content-free `Scheduled run
//! finished` event, reads the result back through the authenticated
//! surface, then says what the person sees.
//!
//! - a reminder: schedules `run` with the reminder's owner as principal
//!   (scope `schedule.read`); the backend learned the owner when it created
//!   the reminder (`remember`), as a real backend learns it from create's
//!   or schedules' answer;
//! - a connector task: admin `runs` as a workspace admin, the run the event
//!   names.
//!
//! The person sees the run's `output`, or, when there is none (a failed
//! run), its `explanation`. Invariant: the backend never reads the table;
//! the event carries ids and status only, and the text comes back only
//! through the functions, to whoever they let read it.
//!
//! A message is deleted once handled (shown, or with nothing to show); one
//! whose read failed (a function error, an unreadable body) is left to its
//! visibility timeout, so SQS delivers it again and, after five receives,
//! moves it to `RunFinishedQueueDeadLetterQueue`.

use std::cell::RefCell;
use std::collections::HashMap;

use aws_config::SdkConfig;
use serde_json::{Value, json};
use shared::domain::run::notification::RunFinished;

use crate::runtime::RuntimeApi;

/// A reminder's owner, as the backend knows them.
#[derive(Debug, Clone)]
struct Owner {
    id: String,
    workspace: String,
}

/// What the backend did with one notification.
#[derive(Debug, Clone, PartialEq)]
pub enum Handled {
    /// The result reached its person: `to` sees `text` (the run's output,
    /// or the explanation of a run without one), read through `via`.
    Shown {
        event: RunFinished,
        via: String,
        to: String,
        text: String,
    },
    /// Nothing to show (a reminder this backend did not create, or the
    /// surface answered that it has no such run): deleted, and why.
    Dropped { event: RunFinished, why: String },
    /// The read failed: the message stays for SQS to deliver again.
    Kept { message_id: String, why: String },
}

/// The chat backend: the queue it consumes, the two functions it reads
/// through, the admin it acts as for connector tasks, and the owners of
/// the reminders it created.
pub struct ChatBackend<'a> {
    pub sdk: &'a SdkConfig,
    pub queue_url: String,
    pub schedules: &'a RuntimeApi,
    pub admin: &'a RuntimeApi,
    /// The workspace admin's id it reads connector tasks' runs as.
    pub admin_id: String,
    owners: RefCell<HashMap<String, Owner>>,
}

impl<'a> ChatBackend<'a> {
    pub fn new(
        sdk: &'a SdkConfig,
        queue_url: &str,
        schedules: &'a RuntimeApi,
        admin: &'a RuntimeApi,
        admin_id: &str,
    ) -> Self {
        Self {
            sdk,
            queue_url: queue_url.to_owned(),
            schedules,
            admin,
            admin_id: admin_id.to_owned(),
            owners: RefCell::new(HashMap::new()),
        }
    }

    /// Notes whose a reminder is: the principal that created it (its `id`
    /// and `workspace`), for the task id create or schedules answered.
    pub fn remember(&self, task_id: &str, principal: &Value) {
        let owner = Owner {
            id: principal["id"].as_str().unwrap_or_default().to_owned(),
            workspace: principal["workspace"].as_str().unwrap_or_default().to_owned(),
        };
        self.owners.borrow_mut().insert(task_id.to_owned(), owner);
    }

    fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(self.sdk)
    }

    /// Receives every notification waiting in the queue, handles each and
    /// deletes what it handled. Answers what it did, in the queue's order.
    pub async fn receive(&self) -> anyhow::Result<Vec<Handled>> {
        let mut handled = Vec::new();
        loop {
            let out = self
                .sqs()
                .receive_message()
                .queue_url(&self.queue_url)
                .max_number_of_messages(10)
                .send()
                .await?;
            if out.messages().is_empty() {
                return Ok(handled);
            }
            for message in out.messages() {
                let message_id = message.message_id().unwrap_or_default().to_owned();
                let outcome = match notification(message.body().unwrap_or_default()) {
                    Ok(event) => self.handle(event, message_id).await,
                    Err(why) => Handled::Kept { message_id, why },
                };
                if !matches!(outcome, Handled::Kept { .. })
                    && let Some(handle) = message.receipt_handle()
                {
                    self.sqs()
                        .delete_message()
                        .queue_url(&self.queue_url)
                        .receipt_handle(handle)
                        .send()
                        .await?;
                }
                handled.push(outcome);
            }
        }
    }

    /// Reads one run's result through the surface that may show it.
    async fn handle(&self, event: RunFinished, message_id: String) -> Handled {
        let reminder = event.task_id.starts_with("rem_");
        let read = if reminder {
            let owner = self.owners.borrow().get(&event.task_id).cloned();
            let Some(owner) = owner else {
                return Handled::Dropped {
                    why: "a reminder this backend did not create: it knows no owner to read it as".to_owned(),
                    event,
                };
            };
            self.reminder_result(&event, &owner).await
        } else {
            self.connector_result(&event).await
        };
        match read {
            Ok(Read::Result { via, to, text }) => Handled::Shown { event, via, to, text },
            Ok(Read::Nothing(why)) => Handled::Dropped { event, why },
            Err(error) => Handled::Kept {
                message_id,
                why: format!("{error:#}"),
            },
        }
    }

    /// schedules `run` as the reminder's owner, with `schedule.read` only.
    async fn reminder_result(&self, event: &RunFinished, owner: &Owner) -> anyhow::Result<Read> {
        let answer = self
            .schedules
            .invoke_ok(&json!({
                "op": "run",
                "principal": {"id": owner.id, "workspace": owner.workspace, "scopes": ["schedule.read"]},
                "task_id": event.task_id,
                "run_id": event.run_id,
            }))
            .await?;
        if answer["ok"] != true {
            return Ok(Read::Nothing(format!("schedules run answered {}", error_code(&answer))));
        }
        Ok(Read::Result {
            via: format!("schedules run as {}", owner.id),
            to: owner.id.clone(),
            text: shown(&answer["run"]),
        })
    }

    /// admin `runs` as a workspace admin: the run the event names.
    async fn connector_result(&self, event: &RunFinished) -> anyhow::Result<Read> {
        let answer = self
            .admin
            .invoke_ok(&json!({
                "op": "runs",
                "principal": {"id": self.admin_id, "workspace": event.workspace, "scopes": ["schedule.admin"]},
                "task_id": event.task_id,
            }))
            .await?;
        if answer["ok"] != true {
            return Ok(Read::Nothing(format!("admin runs answered {}", error_code(&answer))));
        }
        let runs = answer["runs"].as_array().cloned().unwrap_or_default();
        let Some(run) = runs.iter().find(|r| r["run_id"] == event.run_id.as_str()) else {
            return Ok(Read::Nothing(format!(
                "admin runs does not list {} among the {} newest runs",
                event.run_id,
                runs.len()
            )));
        };
        Ok(Read::Result {
            via: format!("admin runs as {}", self.admin_id),
            to: format!("the admins of {}", event.workspace),
            text: shown(run),
        })
    }
}

/// What one read found.
enum Read {
    Result { via: String, to: String, text: String },
    Nothing(String),
}

/// The event in an SQS message the rule delivered: EventBridge's envelope
/// with the five fields as its `detail`.
fn notification(body: &str) -> Result<RunFinished, String> {
    let envelope: Value = serde_json::from_str(body).map_err(|e| format!("not JSON: {e}"))?;
    serde_json::from_value(envelope["detail"].clone()).map_err(|e| format!("not a run notification: {e}"))
}

/// What the person sees of a run: its output, or why there is none.
fn shown(run: &Value) -> String {
    run["output"]
        .as_str()
        .or_else(|| run["explanation"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn error_code(answer: &Value) -> String {
    answer["error"]["code"].as_str().unwrap_or("no error code").to_owned()
}
