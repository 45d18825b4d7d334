//! An occurrence is one firing of a task: (task, scheduled time). The run
//! ledger keeps one record per occurrence, and the runner claims it so that
//! exactly one run happens whatever Scheduler and SQS redeliver.
//!
//! This module owns the wire shape of the runs-queue message (SPEC §7): the
//! input every Scheduler schedule carries, with Scheduler's context attributes
//! filled in at delivery. Invariant: the message names the task and its
//! workspace only; no title, instruction or other content travels on the queue.

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::run::gate::MAX_APPROVAL_HOURS;
use crate::domain::task::budget::Tokens;
use crate::domain::task::claim::RunStatus;
use crate::domain::task::{Task, TaskId};

/// The runs-queue message, as Scheduler delivers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunMessage {
    pub task_id: String,
    pub workspace: String,
    /// `<aws.scheduler.scheduled-time>`: the occurrence's identity with the task.
    pub scheduled_time: String,
    /// `<aws.scheduler.execution-id>`: changes on every Scheduler retry.
    pub execution_id: String,
    /// `<aws.scheduler.attempt-number>`.
    pub attempt: String,
    /// Set by an admin's approval of a gated call (`domain::run::gate`):
    /// the request whose occurrence this message resumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<String>,
}

/// The schedule input with Scheduler's context-attribute placeholders, which
/// Scheduler replaces at each delivery.
pub fn schedule_input(task_id: &TaskId, workspace: &str) -> String {
    serde_json::json!({
        "task_id": task_id.as_str(),
        "workspace": workspace,
        "scheduled_time": "<aws.scheduler.scheduled-time>",
        "execution_id": "<aws.scheduler.execution-id>",
        "attempt": "<aws.scheduler.attempt-number>",
    })
    .to_string()
}

impl RunMessage {
    /// The occurrence's scheduled time, as Scheduler filled it in.
    pub fn scheduled(&self) -> Option<DateTime<Utc>> {
        DateTime::parse_from_rfc3339(&self.scheduled_time)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }

    /// Reads a runs-queue message body into the occurrence it names; the
    /// error says why the body is no run message (the runner records it as
    /// malformed).
    pub fn parse(body: &str) -> Result<Delivery, String> {
        let message: RunMessage = serde_json::from_str(body).map_err(|e| format!("not a run message: {e}"))?;
        let task_id = TaskId::parse(&message.task_id)
            .ok_or_else(|| format!("`{}` is not a task id", cap_reason(&message.task_id)))?;
        let scheduled = message.scheduled().ok_or_else(|| {
            format!(
                "scheduled_time `{}` is not an RFC 3339 instant",
                cap_reason(&message.scheduled_time)
            )
        })?;
        if message.workspace.is_empty() || message.workspace.contains('#') || message.workspace.len() > MAX_ID_LEN {
            return Err(format!("`{}` is not a workspace id", cap_reason(&message.workspace)));
        }
        // Kept on the task item's claim and the record: bounded like an id.
        if message.execution_id.is_empty() || message.execution_id.len() > MAX_ID_LEN {
            return Err("execution_id is empty or longer than an id".to_owned());
        }
        Ok(Delivery {
            key: occurrence_key(scheduled),
            message,
            task_id,
            scheduled,
        })
    }
}

/// The longest workspace or execution id a run message may carry (Scheduler's
/// execution ids are UUIDs).
pub const MAX_ID_LEN: usize = 256;

/// A runs-queue message that parsed into an occurrence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub message: RunMessage,
    pub task_id: TaskId,
    pub scheduled: DateTime<Utc>,
    /// The occurrence's key within its task ([`occurrence_key`]).
    pub key: String,
}

/// The key of an occurrence within its task: the scheduled time in UTC,
/// RFC 3339, whole seconds (the run record's sort key and the claim's name).
pub fn occurrence_key(scheduled: DateTime<Utc>) -> String {
    crate::domain::schedule::format_utc(scheduled)
}

/// The id of a run, as the notification names it.
pub fn run_id(task_id: &str, scheduled: DateTime<Utc>) -> String {
    format!("{task_id}@{}", occurrence_key(scheduled))
}

/// The occurrence key of `run_id` if it is a run id of `task_id` as
/// [`run_id`] builds it (the key exactly as [`occurrence_key`] writes it).
pub fn occurrence_of_run<'a>(run_id: &'a str, task_id: &str) -> Option<&'a str> {
    run_id
        .strip_prefix(task_id)
        .and_then(|rest| rest.strip_prefix('@'))
        .filter(|key| crate::domain::schedule::parse_instant(key).is_some_and(|at| occurrence_key(at) == *key))
}

/// What the claim request's answer means.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The occurrence finished before: a duplicate delivery.
    Finished {
        status: RunStatus,
    },
    /// Another execution holds a live lease: retry later.
    Busy {
        lease_until: i64,
    },
    /// A running claim whose lease ran out: take it over.
    Expired,
    /// A claim given back before it ran: claim it again, carrying what it
    /// committed.
    Released,
    /// The occurrence waits for an approval (`domain::run::gate`): only the
    /// approval's resume takes it over.
    AwaitingApproval,
    Missing,
    /// The reservation does not fit the period budget.
    BudgetExhausted,
}

/// Why a claim was refused, read from the task as it was (`ALL_OLD`).
pub fn diagnose(old: Option<&Task>, occurrence: &str, now: DateTime<Utc>) -> ClaimOutcome {
    let Some(task) = old else {
        return ClaimOutcome::Missing;
    };
    match task.claims.get(occurrence) {
        Some(claim) if claim.status == RunStatus::Released => ClaimOutcome::Released,
        Some(claim) if claim.status == RunStatus::AwaitingApproval => ClaimOutcome::AwaitingApproval,
        Some(claim) if claim.status != RunStatus::Running => ClaimOutcome::Finished { status: claim.status },
        Some(claim) if claim.lease_until >= now.timestamp() => ClaimOutcome::Busy {
            lease_until: claim.lease_until,
        },
        Some(_) => ClaimOutcome::Expired,
        None => ClaimOutcome::BudgetExhausted,
    }
}

/// How long past its occurrence a claim is kept: the catch-up window (any
/// later delivery is skipped as missed before it claims, and a skip's
/// record never overwrites a run's) plus a margin for clocks.
pub fn claim_retention(catch_up: Duration) -> Duration {
    catch_up + Duration::minutes(10)
}

/// At most this many claims are pruned by one write: each is a name in the
/// update expression, which DynamoDB caps at 4 KB.
pub const MAX_PRUNED_PER_SETTLE: usize = 40;

/// Claims older than `keep` that are dead, pruned beside `occurrence`'s by
/// every write that adds or ends a claim (a claim, a settle, a skip with or
/// without a claim, a park, a denial or an expiry), oldest first: finished
/// ones, released ones, and running ones whose lease expired (a crash or a
/// release whose message was never delivered again within the window; what
/// it committed stays committed as spent, `Claim::committed`). Each write
/// adds at most one claim and removes up to [`MAX_PRUNED_PER_SETTLE`], so
/// with `keep` bounded by the catch-up window a task item holds at most the
/// claims of that window, those waiting for a person (at most
/// [`MAX_AWAITING`], the door's `awaiting_approval_limit`) and the running
/// ones an approval resumed.
pub fn prunable(task: &Task, occurrence: &str, now: DateTime<Utc>, keep: Duration) -> Vec<String> {
    task.claims
        .iter()
        .filter(|(key, claim)| {
            // An approval's occurrence is kept while it may still be
            // resumed: a dead claim that carries a request goes once no
            // request can wait any longer (a resume whose message was
            // lost); one that waits goes only when it ends.
            let kept = match &claim.request_id {
                Some(_) if !claim.status.is_finished() => keep + Duration::hours(MAX_APPROVAL_HOURS),
                _ => keep,
            };
            key.as_str() != occurrence
                && claim.status != RunStatus::AwaitingApproval
                && (claim.status != RunStatus::Running || claim.lease_until < now.timestamp())
                && DateTime::parse_from_rfc3339(key).is_ok_and(|t| now - t.with_timezone(&Utc) > kept)
        })
        .map(|(key, _)| key.clone())
        .take(MAX_PRUNED_PER_SETTLE)
        .collect()
}

/// At most this many of a task's occurrences wait for a person at once
/// (SPEC §7 "Nothing a task accumulates outlives its window"): a waiting
/// claim is never pruned, so past this an occurrence is skipped
/// `awaiting_approval_limit` at the door, before the model is called.
pub const MAX_AWAITING: usize = 20;

/// How many of `task`'s occurrences other than `occurrence` wait for a
/// person (`awaiting_approval`).
pub fn awaiting_beside(task: &Task, occurrence: &str) -> usize {
    task.claims
        .iter()
        .filter(|(key, claim)| key.as_str() != occurrence && claim.status == RunStatus::AwaitingApproval)
        .count()
}

/// What a run used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input billed at the plain input price (not read from or written to the cache).
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input Bedrock wrote to its prompt cache, billed at the cache write price.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_input_tokens: u64,
    /// Input Bedrock read from its prompt cache, billed at the cache read price.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_input_tokens: u64,
    pub tool_calls: u32,
    /// Calls to tools the task may not use: refused, and counted.
    pub refused_tool_calls: u32,
    pub turns: u32,
}

impl Usage {
    pub fn tokens(&self) -> Tokens {
        Tokens {
            input: self.input_tokens,
            output: self.output_tokens,
            cache_write: self.cache_write_input_tokens,
            cache_read: self.cache_read_input_tokens,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The most output text a run record keeps.
pub const MAX_OUTPUT_CHARS: usize = 4000;
/// The most notes a run record keeps.
pub const MAX_NOTES: usize = 16;
/// The most reason text a run record keeps (a server's error message can be
/// any size).
pub const MAX_REASON_CHARS: usize = 1000;

/// Caps a reason to [`MAX_REASON_CHARS`] characters, marking the cut.
pub fn cap_reason(text: &str) -> String {
    cap_chars(text, MAX_REASON_CHARS)
}

/// Caps `text` to `max` characters, the last one `…` when it was cut.
pub fn cap_chars(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut capped: String = text.chars().take(max.saturating_sub(1)).collect();
    capped.push('…');
    capped
}

/// The ledger's record of one occurrence (`pk=TASK#<id>`, `sk=RUN#<time>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub task_id: String,
    pub workspace: String,
    pub scheduled_time: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub attempts: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_id: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// Unix seconds: DynamoDB's TTL removes the record `RETENTION_DAYS`
    /// after it finished.
    pub ttl: i64,
    /// What the run could not do as asked (`Outcome::notes`), capped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The approval request an `awaiting_approval` occurrence waits for,
    /// or the one its denial or expiry ended it on (`domain::run::gate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl RunRecord {
    /// The record of `delivery`'s outcome: the one place a run record is
    /// made, for a skip before the claim and for a settle alike. `crashed_usd`
    /// (what taken-over attempts reserved) is added to the outcome's cost; a
    /// skip names no model.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        delivery: &Delivery,
        outcome: &Outcome,
        attempts: u32,
        crashed_usd: f64,
        model_id: &str,
        started_at: DateTime<Utc>,
        finished_at: DateTime<Utc>,
        retention: Duration,
    ) -> Self {
        Self {
            run_id: run_id(delivery.task_id.as_str(), delivery.scheduled),
            task_id: delivery.task_id.to_string(),
            workspace: delivery.message.workspace.clone(),
            scheduled_time: delivery.key.clone(),
            status: outcome.status,
            reason: outcome.reason.clone(),
            attempts,
            usage: outcome.usage,
            cost_usd: outcome.cost + crashed_usd,
            output: outcome.output.clone(),
            model_id: (outcome.status != RunStatus::Skipped).then(|| model_id.to_owned()),
            execution_id: Some(delivery.message.execution_id.clone()),
            started_at,
            finished_at,
            ttl: (finished_at + retention).timestamp(),
            notes: outcome.notes.iter().take(MAX_NOTES).map(|n| cap_reason(n)).collect(),
            request_id: None,
        }
    }
}

/// How an occurrence ended, before it is recorded ([`RunRecord::new`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: RunStatus,
    pub reason: Option<String>,
    pub usage: Usage,
    pub output: Option<String>,
    /// This attempt's cost in USD.
    pub cost: f64,
    /// What the run could not do as asked, in words (a tool left out for
    /// its schema); recorded on the run.
    pub notes: Vec<String>,
}

impl Outcome {
    /// A skip, `reason` in words: nothing used, nothing spent.
    pub fn skipped(reason: String) -> Self {
        Self {
            status: RunStatus::Skipped,
            reason: Some(reason),
            usage: Usage::default(),
            output: None,
            cost: 0.0,
            notes: Vec::new(),
        }
    }

    /// A failure, its reason capped ([`cap_reason`]).
    pub fn failed(reason: impl Into<String>, usage: Usage, cost: f64, output: Option<String>) -> Self {
        Self {
            status: RunStatus::Failed,
            reason: Some(cap_reason(&reason.into())),
            usage,
            output,
            cost,
            notes: Vec::new(),
        }
    }
}

/// Caps a run's output to [`MAX_OUTPUT_CHARS`] characters, marking the cut.
pub fn cap_output(text: &str) -> String {
    cap_chars(text, MAX_OUTPUT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_input_filled_in_by_scheduler_is_a_run_message() {
        let id = TaskId::for_reminder("ws_1", "usr_1", "k");
        let filled = schedule_input(&id, "ws_1")
            .replace("<aws.scheduler.scheduled-time>", "2026-12-24T18:00:00Z")
            .replace("<aws.scheduler.execution-id>", "exec-1")
            .replace("<aws.scheduler.attempt-number>", "1");
        let message: RunMessage = serde_json::from_str(&filled).unwrap();
        assert_eq!(message.task_id, id.as_str());
        assert_eq!(message.workspace, "ws_1");
        assert_eq!(message.scheduled_time, "2026-12-24T18:00:00Z");
        assert_eq!(message.execution_id, "exec-1");
        assert_eq!(message.attempt, "1");
    }

    #[test]
    fn a_run_id_reads_back_as_its_occurrence_of_its_task_only() {
        use chrono::TimeZone;
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let id = run_id("rem_1", at);
        assert_eq!(occurrence_of_run(&id, "rem_1"), Some("2026-12-24T18:00:00Z"));
        assert_eq!(occurrence_of_run(&id, "rem_2"), None, "another task's");
        assert_eq!(
            occurrence_of_run("rem_1@2026-12-24T19:00:00+01:00", "rem_1"),
            None,
            "not as built"
        );
        assert_eq!(occurrence_of_run("rem_1@soon", "rem_1"), None);
        assert_eq!(occurrence_of_run("rem_12026-12-24T18:00:00Z", "rem_1"), None);
    }
}

#[cfg(test)]
mod claim_tests {
    use super::*;
    use crate::domain::task::claim::Claim;
    use crate::domain::task::tests_support::reminder_task;
    use chrono::TimeZone;

    fn claim(status: RunStatus, lease_until: i64) -> Claim {
        let t = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        Claim {
            status,
            lease_until,
            execution_id: "e1".into(),
            attempts: 1,
            started_at: t,
            crashed_usd: 0.0,
            workspace_usd: 0.0,
            request_id: None,
        }
    }

    #[test]
    fn a_refused_claim_is_diagnosed_from_the_old_task() {
        let now = Utc.with_ymd_and_hms(2026, 12, 24, 18, 1, 0).unwrap();
        let occ = "2026-12-24T18:00:00Z";
        assert_eq!(diagnose(None, occ, now), ClaimOutcome::Missing);
        let mut task = reminder_task(now);
        assert_eq!(diagnose(Some(&task), occ, now), ClaimOutcome::BudgetExhausted);
        task.claims.insert(occ.into(), claim(RunStatus::Succeeded, 0));
        assert_eq!(
            diagnose(Some(&task), occ, now),
            ClaimOutcome::Finished {
                status: RunStatus::Succeeded
            }
        );
        task.claims
            .insert(occ.into(), claim(RunStatus::Running, now.timestamp() + 10));
        assert_eq!(
            diagnose(Some(&task), occ, now),
            ClaimOutcome::Busy {
                lease_until: now.timestamp() + 10
            }
        );
        task.claims
            .insert(occ.into(), claim(RunStatus::Running, now.timestamp() - 1));
        assert_eq!(diagnose(Some(&task), occ, now), ClaimOutcome::Expired);
    }

    #[test]
    fn only_old_finished_claims_are_pruned() {
        let now = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let mut task = reminder_task(now);
        task.claims
            .insert("2026-12-24T10:00:00Z".into(), claim(RunStatus::Succeeded, 0));
        task.claims
            .insert("2026-12-24T09:00:00Z".into(), claim(RunStatus::Running, 0));
        task.claims
            .insert("2026-12-24T17:30:00Z".into(), claim(RunStatus::Failed, 0));
        task.claims.insert(
            "2026-12-24T08:00:00Z".into(),
            claim(RunStatus::Running, now.timestamp() + 60),
        );
        assert_eq!(
            prunable(&task, "2026-12-24T18:00:00Z", now, Duration::hours(2)),
            vec!["2026-12-24T09:00:00Z".to_owned(), "2026-12-24T10:00:00Z".to_owned()],
            "finished and crashed (lease expired) claims go; a live lease stays"
        );
        assert_eq!(
            prunable(&task, "2026-12-24T10:00:00Z", now, Duration::hours(2)),
            vec!["2026-12-24T09:00:00Z".to_owned()],
            "never the claim the write itself is writing"
        );
        // A resumed run's claim no execution holds stays while a resume
        // could still come, and goes once no request can wait longer.
        let mut resumed = claim(RunStatus::Released, 0);
        resumed.request_id = Some("req_1".into());
        let mut waiting = claim(RunStatus::AwaitingApproval, 0);
        waiting.request_id = Some("req_2".into());
        let mut task = reminder_task(now);
        task.claims.insert("2026-12-20T18:00:00Z".into(), resumed.clone());
        task.claims.insert("2026-12-01T18:00:00Z".into(), waiting);
        assert!(prunable(&task, "x", now, Duration::hours(2)).is_empty());
        task.claims.insert("2026-12-10T18:00:00Z".into(), resumed);
        assert_eq!(
            prunable(&task, "x", now, Duration::hours(2)),
            vec!["2026-12-10T18:00:00Z".to_owned()],
            "past the longest wait; one waiting is never pruned"
        );
        for minute in 0..100 {
            task.claims.insert(
                occurrence_key(now - Duration::hours(5) + Duration::minutes(minute)),
                claim(RunStatus::Succeeded, 0),
            );
        }
        assert_eq!(
            prunable(&task, "2026-12-24T18:00:00Z", now, Duration::hours(2)).len(),
            MAX_PRUNED_PER_SETTLE
        );
    }

    #[test]
    fn a_run_record_adds_crashed_attempts_to_the_cost_and_a_skip_names_no_model() {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let task = reminder_task(at);
        let body = schedule_input(&task.task_id, "ws_1")
            .replace("<aws.scheduler.scheduled-time>", "2026-12-24T18:00:00Z")
            .replace("<aws.scheduler.execution-id>", "e2")
            .replace("<aws.scheduler.attempt-number>", "1");
        let delivery = RunMessage::parse(&body).unwrap();
        let ran = Outcome {
            status: RunStatus::Succeeded,
            reason: None,
            usage: Usage::default(),
            output: Some("done".into()),
            cost: 0.25,
            notes: Vec::new(),
        };
        let finished = at + Duration::seconds(5);
        let record = RunRecord::new(&delivery, &ran, 2, 0.5, "m1", at, finished, Duration::days(30));
        assert_eq!(record.run_id, run_id(task.task_id.as_str(), at));
        assert_eq!(record.scheduled_time, "2026-12-24T18:00:00Z");
        assert_eq!((record.attempts, record.cost_usd), (2, 0.75));
        assert_eq!(record.model_id.as_deref(), Some("m1"));
        assert_eq!(record.execution_id.as_deref(), Some("e2"));
        assert_eq!(
            record.ttl,
            (finished + Duration::days(30)).timestamp(),
            "RETENTION_DAYS after it finished"
        );
        let skipped = RunRecord::new(
            &delivery,
            &Outcome::skipped("paused".into()),
            0,
            0.0,
            "m1",
            at,
            at,
            Duration::days(30),
        );
        assert_eq!(skipped.status, RunStatus::Skipped);
        assert_eq!(skipped.reason.as_deref(), Some("paused"));
        assert_eq!((skipped.model_id, skipped.output, skipped.cost_usd), (None, None, 0.0));
        let failed = Outcome::failed("x".repeat(MAX_REASON_CHARS + 5), Usage::default(), 0.0, None);
        assert_eq!(failed.reason.map(|r| r.chars().count()), Some(MAX_REASON_CHARS));
    }

    #[test]
    fn output_is_capped_in_characters() {
        assert_eq!(cap_output("short"), "short");
        let long = "é".repeat(MAX_OUTPUT_CHARS + 10);
        let capped = cap_output(&long);
        assert_eq!(capped.chars().count(), MAX_OUTPUT_CHARS);
        assert!(capped.ends_with('…'));
    }
}
