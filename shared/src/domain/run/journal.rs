//! An occurrence's journal (SPEC §7, "A call made is made once"): every
//! tool call it made, written before the model sees the answer, and, when
//! its settle runs into trouble, the outcome it settles.
//!
//! Invariants: a call is journaled once, at its position in the occurrence
//! (the calls made before it, every attempt counted), with its install,
//! tool, canonical argument hash and a capped answer; a later attempt of
//! the occurrence (a redelivery, a take-over after a crash, an approval's
//! resume, a settle that ran out of time) reads the journal back into its
//! conversation ([`JournaledCall::input`], [`JournaledCall::answer`]) and
//! never makes a journaled call again. The call key ([`call_key`]) is the
//! same for the same call (position, install, tool, arguments) on every
//! attempt, so a server can refuse the one repeat a journal cannot
//! prevent: a crash after the server acted and before the journal write.
//! An item stays far below DynamoDB's 400 KB (arguments at most
//! [`MAX_ARGUMENT_BYTES`], the answer at most [`MAX_ANSWER_CHARS`]), an
//! occurrence has at most its run's tool calls of them, and every item
//! expires with the run ([`expiry`]).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::agent::Block;
use super::gate::{self, canonical};
use super::occurrence::{Outcome, Usage, cap_chars};
use crate::domain::task::claim::RunStatus;

/// The `_meta` key of a `tools/call` that names the call (beside the run id).
pub const CALL_KEY_META: &str = "ai.nimblebrain/call-key";
/// What a journal keeps of a call's arguments, as canonical JSON; larger
/// ones are kept as a note of their size (the call is still made once).
pub const MAX_ARGUMENT_BYTES: usize = gate::MAX_ARGUMENT_BYTES;
/// What a journal keeps of a call's answer, in characters.
pub const MAX_ANSWER_CHARS: usize = 16_000;

/// The key of one call of an occurrence: the same run, position, install,
/// tool and arguments give the same key on every attempt.
pub fn call_key(run_id: &str, position: u32, install: &str, tool: &str, arguments_sha256: &str) -> String {
    let digest = Sha256::digest(format!("{run_id}\n{position}\n{install}\n{tool}\n{arguments_sha256}").as_bytes());
    format!("ck_{}", &hex::encode(digest)[..32])
}

/// When an occurrence's journal expires, written at `now`: after the
/// longest an occurrence can still be settled (its approvals' waits, each
/// at most `approval_hours`) and then `retention`, as its record does.
pub fn expiry(now: DateTime<Utc>, approval_hours: i64, retention: Duration) -> i64 {
    let asks = i64::try_from(gate::MAX_ASKS).unwrap_or(i64::MAX);
    let waits = Duration::hours(approval_hours.max(1).saturating_mul(asks + 1));
    (now + waits + retention).timestamp()
}

/// A call about to be made: where it goes and what it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Call<'a> {
    pub task_id: &'a str,
    /// The occurrence's key within its task.
    pub occurrence: &'a str,
    pub run_id: &'a str,
    pub position: u32,
    /// The install the call goes to (the declaring server's or a bound one).
    pub install: &'a str,
    pub server: &'a str,
    /// The tool as its server names it.
    pub tool: &'a str,
    pub arguments: &'a Value,
}

impl Call<'_> {
    pub fn arguments_sha256(&self) -> String {
        gate::arguments_hash(self.arguments)
    }

    /// This call's key ([`call_key`]).
    pub fn key(&self) -> String {
        call_key(
            self.run_id,
            self.position,
            self.install,
            self.tool,
            &self.arguments_sha256(),
        )
    }
}

/// One call an occurrence made, as its journal keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournaledCall {
    pub task_id: String,
    pub scheduled_time: String,
    pub position: u32,
    pub install: String,
    pub server: String,
    pub tool: String,
    /// Canonical JSON, or a note of their size past [`MAX_ARGUMENT_BYTES`].
    pub arguments: String,
    pub arguments_sha256: String,
    pub call_key: String,
    /// The answer's text, cut at [`MAX_ANSWER_CHARS`].
    pub answer: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    pub made_at: DateTime<Utc>,
    /// Unix seconds ([`expiry`]).
    pub ttl: i64,
}

impl JournaledCall {
    /// `call` as made at `now`, answered `answer` (`is_error` as the server said).
    pub fn new(call: &Call<'_>, answer: &[Block], is_error: bool, now: DateTime<Utc>, ttl: i64) -> Self {
        let hash = call.arguments_sha256();
        let mut arguments = canonical(call.arguments);
        if arguments.len() > MAX_ARGUMENT_BYTES {
            arguments = json!({"journaled": format!("arguments of {} bytes, not kept", arguments.len())}).to_string();
        }
        Self {
            task_id: call.task_id.to_owned(),
            scheduled_time: call.occurrence.to_owned(),
            position: call.position,
            install: call.install.to_owned(),
            server: call.server.to_owned(),
            tool: call.tool.to_owned(),
            arguments,
            call_key: call_key(call.run_id, call.position, call.install, call.tool, &hash),
            arguments_sha256: hash,
            answer: cap_chars(&answer_text(answer), MAX_ANSWER_CHARS),
            is_error,
            made_at: now,
            ttl,
        }
    }

    /// The arguments as the model's call carried them (an object: a
    /// size note where they were not kept).
    pub fn input(&self) -> Value {
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(value @ Value::Object(_)) => value,
            Ok(other) => json!({"arguments": other}),
            Err(_) => json!({"journaled": "arguments not readable"}),
        }
    }

    /// The answer as the model reads it again, under the call's `id`.
    pub fn answer(&self, id: &str) -> Block {
        let text = if self.answer.trim().is_empty() {
            "(the tool answered nothing)".to_owned()
        } else {
            self.answer.clone()
        };
        Block::ToolResult {
            id: id.to_owned(),
            content: vec![Block::Text(text)],
            is_error: self.is_error,
        }
    }

    /// Whether this is the call of `tool` on `install` with these arguments.
    pub fn is(&self, install: &str, tool: &str, arguments_sha256: &str) -> bool {
        self.install == install && self.tool == tool && self.arguments_sha256 == arguments_sha256
    }
}

/// A tool result's text as the journal keeps it: text blocks as they are,
/// JSON as written, anything else named by its kind.
fn answer_text(content: &[Block]) -> String {
    content
        .iter()
        .map(|block| match block {
            Block::Text(text) => text.clone(),
            Block::Json(value) => value.to_string(),
            Block::Image { .. } => "[an image]".to_owned(),
            _ => "[a non-text block]".to_owned(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The outcome an attempt settles, journaled when its settle failed once,
/// so an attempt after it settles this outcome instead of running again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournaledOutcome {
    pub task_id: String,
    pub scheduled_time: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    pub cost_usd: f64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    pub ttl: i64,
}

impl JournaledOutcome {
    pub fn new(task_id: &str, occurrence: &str, outcome: &Outcome, ttl: i64) -> Self {
        Self {
            task_id: task_id.to_owned(),
            scheduled_time: occurrence.to_owned(),
            status: outcome.status,
            reason: outcome.reason.clone(),
            usage: outcome.usage,
            output: outcome.output.clone(),
            cost_usd: outcome.cost,
            notes: outcome.notes.clone(),
            ttl,
        }
    }

    /// The outcome a later attempt settles: what happened, its cost
    /// already paid by the take-over's charge of the attempt that spent it
    /// (its reservation, committed as a crash), so charged nothing again.
    pub fn settled_again(&self) -> Outcome {
        Outcome {
            status: self.status,
            reason: self.reason.clone(),
            usage: self.usage,
            output: self.output.clone(),
            cost: 0.0,
            notes: self.notes.clone(),
        }
    }
}

/// An occurrence's journal as a later attempt reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Journal {
    /// By position.
    pub calls: Vec<JournaledCall>,
    pub outcome: Option<JournaledOutcome>,
}

impl Journal {
    pub fn new(mut calls: Vec<JournaledCall>, outcome: Option<JournaledOutcome>) -> Self {
        calls.sort_by_key(|c| c.position);
        calls.dedup_by_key(|c| c.position);
        Self { calls, outcome }
    }

    /// The position of the next call: after every journaled one.
    pub fn next_position(&self) -> u32 {
        self.calls.last().map_or(0, |c| c.position + 1)
    }

    /// The journaled call to `target` with these arguments (a target of
    /// an earlier release's request, which names no install, by its server).
    pub fn made(&self, target: gate::Target<'_>, arguments_sha256: &str) -> Option<&JournaledCall> {
        self.calls.iter().find(|c| {
            (target.install.is_empty() || c.install == target.install)
                && c.server == target.server
                && c.tool == target.tool
                && c.arguments_sha256 == arguments_sha256
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call<'a>(position: u32, install: &'a str, arguments: &'a Value) -> Call<'a> {
        Call {
            task_id: "tsk_1",
            occurrence: "2026-12-24T18:00:00Z",
            run_id: "tsk_1@2026-12-24T18:00:00Z",
            position,
            install,
            server: "github",
            tool: "close_issue",
            arguments,
        }
    }

    #[test]
    fn a_call_s_key_is_its_position_install_tool_and_arguments() {
        let a = json!({"issue": 7, "repo": "x"});
        let reordered = json!({"repo": "x", "issue": 7});
        let other = json!({"issue": 8, "repo": "x"});
        let base = call(0, "ins_a", &a).key();
        assert_eq!(base, call(0, "ins_a", &reordered).key(), "canonical arguments");
        assert!(base.starts_with("ck_") && base.len() == 35, "{base}");
        for differs in [
            call(1, "ins_a", &a).key(),
            call(0, "ins_b", &a).key(),
            call(0, "ins_a", &other).key(),
        ] {
            assert_ne!(base, differs);
        }
        let mut other_run = call(0, "ins_a", &a);
        other_run.run_id = "tsk_1@2026-12-25T18:00:00Z";
        assert_ne!(base, other_run.key());
    }

    #[test]
    fn a_journaled_call_reads_back_as_the_model_asked_it_and_as_answered() {
        let arguments = json!({"issue": 7});
        let now: DateTime<Utc> = "2026-12-24T18:00:05Z".parse().unwrap();
        let made = JournaledCall::new(
            &call(2, "ins_a", &arguments),
            &[Block::Text("closed".into()), Block::Json(json!({"n": 1}))],
            false,
            now,
            99,
        );
        assert_eq!(made.input(), arguments);
        assert_eq!(made.call_key, call(2, "ins_a", &arguments).key());
        assert_eq!(
            made.answer("t1"),
            Block::ToolResult {
                id: "t1".into(),
                content: vec![Block::Text("closed\n{\"n\":1}".into())],
                is_error: false
            }
        );
        assert!(made.is("ins_a", "close_issue", &gate::arguments_hash(&arguments)));
        assert!(!made.is("ins_b", "close_issue", &gate::arguments_hash(&arguments)));
        // An empty answer is never an empty tool result (Converse refuses it).
        let empty = JournaledCall::new(&call(0, "ins_a", &arguments), &[], false, now, 99);
        assert!(
            matches!(empty.answer("t").clone(), Block::ToolResult { content, .. } if content == vec![Block::Text("(the tool answered nothing)".into())])
        );
    }

    #[test]
    fn what_a_journal_keeps_is_bounded() {
        let huge = json!({"body": "x".repeat(MAX_ARGUMENT_BYTES + 1)});
        let now: DateTime<Utc> = "2026-12-24T18:00:05Z".parse().unwrap();
        let made = JournaledCall::new(
            &call(0, "ins_a", &huge),
            &[Block::Text("y".repeat(MAX_ANSWER_CHARS * 3))],
            false,
            now,
            99,
        );
        assert!(made.arguments.len() < 200, "{}", made.arguments);
        assert!(made.input().is_object());
        assert_eq!(
            made.arguments_sha256,
            gate::arguments_hash(&huge),
            "the hash is of what was called"
        );
        assert_eq!(made.answer.chars().count(), MAX_ANSWER_CHARS);
        let item = serde_json::to_string(&made).unwrap();
        assert!(item.len() < 200 * 1024, "{}", item.len());
    }

    #[test]
    fn the_next_position_follows_every_journaled_call_and_a_repeat_counts_once() {
        let arguments = json!({});
        let now: DateTime<Utc> = "2026-12-24T18:00:05Z".parse().unwrap();
        let at = |p| JournaledCall::new(&call(p, "ins_a", &arguments), &[], false, now, 1);
        assert_eq!(Journal::default().next_position(), 0);
        let journal = Journal::new(vec![at(1), at(0), at(1)], None);
        assert_eq!(journal.calls.len(), 2);
        assert_eq!(journal.next_position(), 2);
        let hash = gate::arguments_hash(&arguments);
        let target = |install| gate::Target {
            install,
            server: "github",
            tool: "close_issue",
        };
        assert!(journal.made(target("ins_a"), &hash).is_some());
        assert!(journal.made(target("ins_b"), &hash).is_none(), "another install's call");
        assert!(
            journal.made(target(""), &hash).is_some(),
            "an older request names its server"
        );
    }

    #[test]
    fn a_journal_expires_after_the_longest_wait_and_the_retention() {
        let now: DateTime<Utc> = "2026-12-24T18:00:00Z".parse().unwrap();
        let retention = Duration::days(30);
        let ttl = expiry(now, 24, retention);
        let asks = i64::try_from(gate::MAX_ASKS).unwrap();
        assert_eq!(ttl, (now + Duration::hours(24 * (asks + 1)) + retention).timestamp());
    }

    #[test]
    fn a_journaled_outcome_is_settled_again_without_a_second_charge() {
        let outcome = Outcome {
            status: RunStatus::Succeeded,
            reason: None,
            usage: Usage::default(),
            output: Some("done".into()),
            cost: 0.25,
            notes: vec!["a note".into()],
        };
        let journaled = JournaledOutcome::new("tsk_1", "2026-12-24T18:00:00Z", &outcome, 9);
        let again = journaled.settled_again();
        assert_eq!(again.status, RunStatus::Succeeded);
        assert_eq!(again.output.as_deref(), Some("done"));
        assert_eq!(again.notes, outcome.notes);
        assert_eq!(again.cost, 0.0);
    }
}
