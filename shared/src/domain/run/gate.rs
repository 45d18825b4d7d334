//! Approval of high-impact tool calls in unattended runs (SPEC §15), as
//! pure code: which tools are gated, the request a gated call becomes, what
//! an approver may decide, and what a run does with a gated call given the
//! requests its occurrence already has.
//!
//! Invariants: a gated call is made only under an approved request of the
//! same run, server, tool and canonical argument hash ([`CallApproval::serves`]),
//! and at most once under it: the request is used in a conditional write
//! before the call (`RunStore::use_approval`), and a later attempt of the
//! occurrence reads what the call answered instead of making it again
//! ([`Gate::Made`]). A server's annotations add gating and never remove an
//! admin's `ask_first`. An occurrence asks at most [`MAX_ASKS`] times.
//!
//! The resume is a re-run carrying the one pre-approved call (docs/design.md,
//! "A gated call is made only under its approval"): the re-run makes the
//! approved call before its first model call, with the arguments asked, and
//! its conversation starts from the prompt, that call and its answer. No
//! conversation is stored; a request item stays small ([`MAX_ARGUMENT_BYTES`],
//! [`MAX_RESULT_CHARS`]). A later call with other arguments is a new request.

use std::collections::BTreeSet;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::occurrence::cap_chars;

/// The most arguments a gated call may carry, as canonical JSON: its
/// request keeps them whole, for the approver to read and for the resumed
/// run to call with; a call with more is never put to an approver (the
/// run fails), so a request item stays far below DynamoDB's 400 KB.
pub const MAX_ARGUMENT_BYTES: usize = 64 * 1024;
/// What an approval item keeps of the approved call's answer, so a later
/// attempt of the occurrence reads it instead of calling again.
pub const MAX_RESULT_CHARS: usize = 4000;
/// The requests one occurrence may make: past it, the run fails.
pub const MAX_ASKS: usize = 3;
/// The expiry index's partitions of requests that hold an occurrence
/// ([`expiry_shard`]), so no index partition takes every open request of
/// the fleet; the last release's requests sit in one partition of their
/// own until they end.
pub const EXPIRY_SHARDS: u8 = 16;
/// `APPROVAL_HOURS`' default.
pub const DEFAULT_APPROVAL_HOURS: i64 = 24;
/// `APPROVAL_HOURS`' greatest value: a week. No request waits longer.
pub const MAX_APPROVAL_HOURS: i64 = 168;

/// Whether a tool is gated in a scheduled run: its server annotates it
/// `destructiveHint: true` without `readOnlyHint: true`, or the task's
/// admin named it in `ask_first` (by the server's name for it, or the name
/// the run offers it under).
pub fn gated(annotated_destructive: bool, ask_first: &BTreeSet<String>, tool: &str, offered: &str) -> bool {
    annotated_destructive || ask_first.contains(tool) || ask_first.contains(offered)
}

/// What a server's `tools/list` annotations say for gating: destructive,
/// and not read-only. Absent hints gate nothing.
pub fn annotated_destructive(destructive_hint: Option<bool>, read_only_hint: Option<bool>) -> bool {
    destructive_hint == Some(true) && read_only_hint != Some(true)
}

/// `value` as canonical JSON: object keys sorted at every depth, no
/// whitespace, numbers and strings as `serde_json` writes them.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The SHA-256 of the canonical form of `arguments`, hex.
pub fn arguments_hash(arguments: &Value) -> String {
    hex::encode(Sha256::digest(canonical(arguments).as_bytes()))
}

/// A request's id: the same for the same run, install, server, tool and
/// arguments. It begins with its run's [`run_requests`] prefix, so a run
/// reads its own requests by key, whatever else its workspace asked.
pub fn request_id(run_id: &str, target: Target<'_>, hash: &str) -> String {
    let Target { install, server, tool } = target;
    let digest = Sha256::digest(format!("{run_id}\n{install}\n{server}\n{tool}\n{hash}").as_bytes());
    format!("{}{}", run_requests(run_id), &hex::encode(digest)[..24])
}

/// The prefix every request id of a run begins with.
pub fn run_requests(run_id: &str) -> String {
    format!("apr_{}_", &hex::encode(Sha256::digest(run_id.as_bytes()))[..12])
}

/// A request's expiry shard: the first hex digit of its call's digest.
pub fn expiry_shard(request_id: &str) -> u8 {
    request_id
        .rsplit('_')
        .next()
        .and_then(|digest| digest.chars().next())
        .and_then(|c| c.to_digit(16))
        .map_or(0, |d| d as u8)
        % EXPIRY_SHARDS
}

/// Whether a request id is of the form releases before the run prefix
/// wrote (`apr_` and 24 hex digits): such a request is read by its id.
pub fn is_unprefixed(request_id: &str) -> bool {
    request_id.strip_prefix("apr_").is_some_and(|rest| !rest.contains('_'))
}

/// A tool result's text as a request keeps it: its text blocks, cut at
/// [`MAX_RESULT_CHARS`]; other blocks named by their kind.
pub fn result_text(content: &[super::agent::Block]) -> String {
    use super::agent::Block;
    let text: Vec<String> = content
        .iter()
        .map(|block| match block {
            Block::Text(text) => text.clone(),
            Block::Json(value) => value.to_string(),
            _ => "[a non-text block]".to_owned(),
        })
        .collect();
    cap_chars(&text.join("\n"), MAX_RESULT_CHARS)
}

/// Where a call goes: the install (two installs of one server are two
/// targets), its server as the run names it, the tool as the server names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target<'a> {
    pub install: &'a str,
    pub server: &'a str,
    pub tool: &'a str,
}

/// Where a request stands (SPEC §15's `state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalState {
    Open,
    Approved,
    Denied,
    Expired,
}

impl ApprovalState {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalState::Open => "open",
            ApprovalState::Approved => "approved",
            ApprovalState::Denied => "denied",
            ApprovalState::Expired => "expired",
        }
    }
}

/// One gated call put to the workspace's admins: bound to its run, server,
/// tool and argument hash; kept on its own item (`adapters::approvals`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallApproval {
    pub request_id: String,
    pub workspace: String,
    pub task_id: String,
    pub run_id: String,
    /// The occurrence's key within its task (`occurrence::occurrence_key`).
    pub scheduled_time: String,
    /// The install the call goes to; empty on a request an earlier
    /// release put, which named its server alone.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub install: String,
    pub server: String,
    /// The tool as its server names it.
    pub tool: String,
    /// The arguments as canonical JSON, whole (at most [`MAX_ARGUMENT_BYTES`]).
    pub arguments: String,
    pub arguments_sha256: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub state: ApprovalState,
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// When the approved call was made (at most once), and by which execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_by: Option<String>,
    /// What the call answered, cut at [`MAX_RESULT_CHARS`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_is_error: bool,
    /// Unix seconds: DynamoDB's TTL removes the request `RETENTION_DAYS`
    /// after its expiry, as its run's record goes.
    #[serde(default)]
    pub ttl: i64,
}

/// A gated call as the run saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct GatedCall<'a> {
    pub workspace: &'a str,
    pub task_id: &'a str,
    pub run_id: &'a str,
    pub scheduled_time: &'a str,
    pub target: Target<'a>,
    pub arguments: &'a Value,
}

impl CallApproval {
    /// The open request for `call` at `now`, expiring after `hours`, kept
    /// `retention` past that; `None` when its arguments exceed
    /// [`MAX_ARGUMENT_BYTES`].
    pub fn ask(call: &GatedCall<'_>, now: DateTime<Utc>, hours: i64, retention: Duration) -> Option<Self> {
        let expires_at = now + Duration::hours(hours.max(1));
        let hash = arguments_hash(call.arguments);
        let arguments = canonical(call.arguments);
        if arguments.len() > MAX_ARGUMENT_BYTES {
            return None;
        }
        Some(Self {
            request_id: request_id(call.run_id, call.target, &hash),
            workspace: call.workspace.to_owned(),
            task_id: call.task_id.to_owned(),
            run_id: call.run_id.to_owned(),
            scheduled_time: call.scheduled_time.to_owned(),
            install: call.target.install.to_owned(),
            server: call.target.server.to_owned(),
            tool: call.target.tool.to_owned(),
            arguments,
            arguments_sha256: hash,
            requested_at: now,
            expires_at,
            ttl: (expires_at + retention).timestamp(),
            state: ApprovalState::Open,
            version: 1,
            decided_by: None,
            decided_at: None,
            note: None,
            used_at: None,
            used_by: None,
            result: None,
            result_is_error: false,
        })
    }

    /// The arguments the approved call is made with: the ones asked,
    /// read back and checked against their hash (`None`: they do not match,
    /// and nothing is called).
    pub fn approved_arguments(&self) -> Option<Value> {
        let arguments: Value = serde_json::from_str(&self.arguments).ok()?;
        (arguments_hash(&arguments) == self.arguments_sha256).then_some(arguments)
    }

    /// Whether this request is for exactly `call`: its run, install,
    /// server, tool and arguments (a request of an earlier release, which
    /// names no install, by its server's name).
    pub fn serves(&self, run_id: &str, target: Target<'_>, hash: &str) -> bool {
        self.run_id == run_id
            && (self.install.is_empty() || self.install == target.install)
            && self.server == target.server
            && self.tool == target.tool
            && self.arguments_sha256 == hash
    }

    /// The call's target as asked.
    pub fn target(&self) -> Target<'_> {
        Target {
            install: &self.install,
            server: &self.server,
            tool: &self.tool,
        }
    }

    /// Past its expiry at `now`, undecided.
    pub fn lapsed(&self, now: DateTime<Utc>) -> bool {
        self.state == ApprovalState::Open && now >= self.expires_at
    }

    /// An admin's decision, if the request is still as `expected_version`
    /// says, open, and within its expiry: the request as it is then.
    pub fn decide(
        &self,
        decision: CallDecision,
        by: &str,
        note: Option<String>,
        expected_version: u64,
        now: DateTime<Utc>,
    ) -> Result<CallApproval, Undecidable> {
        if self.version != expected_version {
            return Err(Undecidable::VersionMoved { current: self.version });
        }
        if self.lapsed(now) {
            return Err(Undecidable::State(ApprovalState::Expired));
        }
        if self.state != ApprovalState::Open {
            return Err(Undecidable::State(self.state));
        }
        let mut decided = self.clone();
        decided.state = match decision {
            CallDecision::Approve => ApprovalState::Approved,
            CallDecision::Deny => ApprovalState::Denied,
        };
        decided.decided_by = Some(by.to_owned());
        decided.decided_at = Some(now);
        decided.note = note.map(|n| cap_chars(&n, 500));
        decided.version += 1;
        Ok(decided)
    }

    /// The request ended by its expiry (the periodic check).
    pub fn expire(&self, now: DateTime<Utc>) -> CallApproval {
        let mut expired = self.clone();
        expired.state = ApprovalState::Expired;
        expired.decided_at = Some(now);
        expired.version += 1;
        expired
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallDecision {
    Approve,
    Deny,
}

/// Why a decision is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undecidable {
    #[error("the request changed (now version {current}): read it again")]
    VersionMoved { current: u64 },
    #[error("the request is {}, not open", .0.as_str())]
    State(ApprovalState),
}

/// What a run does with one gated call, given its occurrence's requests.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Approved and not used: use it, then make the call.
    Make(String),
    /// Made under its approval by an earlier attempt: its answer, as kept
    /// (`None`: the attempt stopped before the answer was kept).
    Made { result: Option<String>, is_error: bool },
    /// Not approved: put it to an approver; the occurrence waits.
    Ask,
    /// The occurrence asked [`MAX_ASKS`] times already: the run fails.
    TooManyAsks,
    /// Decided against (denied, expired): never made.
    Refused(ApprovalState),
}

/// The gate's answer for the call `(target, hash)` of `run_id`.
pub fn gate(requests: &[CallApproval], run_id: &str, target: Target<'_>, hash: &str) -> Gate {
    match requests.iter().find(|r| r.serves(run_id, target, hash)) {
        Some(r) if r.state == ApprovalState::Approved && r.used_at.is_none() => Gate::Make(r.request_id.clone()),
        Some(r) if r.state == ApprovalState::Approved => Gate::Made {
            result: r.result.clone(),
            is_error: r.result_is_error,
        },
        Some(r) if r.state == ApprovalState::Open => Gate::Ask,
        Some(r) => Gate::Refused(r.state),
        None if requests.iter().filter(|r| r.run_id == run_id).count() >= MAX_ASKS => Gate::TooManyAsks,
        None => Gate::Ask,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 5, 9, 0, 0).unwrap()
    }

    fn target<'a>(install: &'a str, server: &'a str, tool: &'a str) -> Target<'a> {
        Target { install, server, tool }
    }

    fn call<'a>(arguments: &'a Value) -> GatedCall<'a> {
        GatedCall {
            workspace: "T1",
            task_id: "tsk_1",
            run_id: "tsk_1@2026-12-05T09:00:00Z",
            scheduled_time: "2026-12-05T09:00:00Z",
            target: target("ins_1", "issues", "delete_issue"),
            arguments,
        }
    }

    #[test]
    fn a_runs_request_ids_share_its_prefix_and_no_other_runs() {
        let (a, b) = ("tsk_1@2026-12-05T09:00:00Z", "tsk_1@2026-12-05T10:00:00Z");
        let one = request_id(a, target("ins_1", "issues", "delete_issue"), "h1");
        let two = request_id(a, target("ins_1", "issues", "close_issue"), "h1");
        let other = request_id(b, target("ins_1", "issues", "delete_issue"), "h1");
        assert!(one.starts_with(&run_requests(a)) && two.starts_with(&run_requests(a)));
        assert_ne!(one, two);
        assert!(!other.starts_with(&run_requests(a)));
        assert!(!is_unprefixed(&one));
        assert!(
            is_unprefixed("apr_0123456789abcdef01234567"),
            "an id of the last release"
        );
        assert_eq!(expiry_shard("apr_0123456789ab_f0123456789abcdef0123456"), 15);
        assert_eq!(expiry_shard("apr_a123456789abcdef01234567"), 10);
        let shards: BTreeSet<u8> = (0..200)
            .map(|i| expiry_shard(&request_id(a, target("ins_1", "issues", "t"), &i.to_string())))
            .collect();
        assert_eq!(
            shards.len(),
            usize::from(EXPIRY_SHARDS),
            "requests spread over every shard"
        );
    }

    #[test]
    fn gating_is_destructive_without_read_only_or_the_admins_ask_first() {
        assert!(annotated_destructive(Some(true), None));
        assert!(annotated_destructive(Some(true), Some(false)));
        assert!(!annotated_destructive(Some(true), Some(true)), "read-only wins");
        assert!(!annotated_destructive(None, None), "no hint gates nothing");
        assert!(!annotated_destructive(Some(false), None));
        let ask_first = BTreeSet::from(["post".to_owned()]);
        assert!(gated(false, &ask_first, "post", "chat__post"));
        assert!(
            gated(true, &BTreeSet::new(), "list", "issues__list"),
            "annotations add gating"
        );
        assert!(
            gated(false, &ask_first, "list", "post"),
            "an offered name in ask_first gates"
        );
        assert!(!gated(false, &ask_first, "list", "issues__list"));
    }

    #[test]
    fn the_hash_is_of_the_canonical_arguments_whatever_their_key_order() {
        let a = json!({"b": 1, "a": {"y": [1, {"d": 2, "c": 3}], "x": "é"}});
        let b: Value = serde_json::from_str(r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), r#"{"a":{"x":"é","y":[1,{"c":3,"d":2}]},"b":1}"#);
        assert_eq!(arguments_hash(&a), arguments_hash(&b));
        assert_ne!(arguments_hash(&a), arguments_hash(&json!({"b": 2, "a": {}})));
        assert_ne!(
            arguments_hash(&json!({"n": 1})),
            arguments_hash(&json!({"n": "1"})),
            "a number is not its text"
        );
    }

    #[test]
    fn a_request_is_bound_to_its_run_server_tool_and_arguments() {
        let args = json!({"id": 7});
        let asked = CallApproval::ask(&call(&args), now(), 24, Duration::days(30)).unwrap();
        assert_eq!(asked.state, ApprovalState::Open);
        assert_eq!(asked.expires_at, now() + Duration::hours(24));
        let hash = arguments_hash(&args);
        let run = asked.run_id.clone();
        assert!(asked.serves(&run, target("ins_1", "issues", "delete_issue"), &hash));
        assert!(!asked.serves(
            "tsk_1@2026-12-06T09:00:00Z",
            target("ins_1", "issues", "delete_issue"),
            &hash
        ));
        assert!(!asked.serves(&run, target("ins_1", "issues", "close_issue"), &hash));
        assert!(!asked.serves(&run, target("ins_1", "other", "delete_issue"), &hash));
        assert!(
            !asked.serves(&run, target("ins_2", "issues", "delete_issue"), &hash),
            "another install of the same server is another call"
        );
        assert!(!asked.serves(
            &run,
            target("ins_1", "issues", "delete_issue"),
            &arguments_hash(&json!({"id": 8}))
        ));
        let mut on_two = call(&args);
        on_two.target.install = "ins_2";
        assert_ne!(
            CallApproval::ask(&on_two, now(), 24, Duration::days(30))
                .unwrap()
                .request_id,
            asked.request_id,
            "a request names its install"
        );
        // A request an earlier release put names no install: its server's name serves.
        let mut older = asked.clone();
        older.install.clear();
        assert!(older.serves(&run, target("ins_2", "issues", "delete_issue"), &hash));
        assert_eq!(
            asked.request_id,
            CallApproval::ask(&call(&args), now() + Duration::hours(1), 24, Duration::days(30))
                .unwrap()
                .request_id,
            "the same call asks under the same id"
        );
    }

    #[test]
    fn arguments_are_kept_whole_and_read_back_only_as_hashed() {
        let args = json!({"body": "é".repeat(1000), "n": [1, 2.5, null]});
        let asked = CallApproval::ask(&call(&args), now(), 24, Duration::days(30)).unwrap();
        assert_eq!(asked.approved_arguments(), Some(args));
        let mut tampered = asked.clone();
        tampered.arguments = r#"{"body":"other","n":[1,2.5,null]}"#.into();
        assert_eq!(
            tampered.approved_arguments(),
            None,
            "arguments that do not hash as asked are never called"
        );
        let huge = json!({"body": "x".repeat(MAX_ARGUMENT_BYTES)});
        assert!(
            CallApproval::ask(&call(&huge), now(), 24, Duration::days(30)).is_none(),
            "too large to put to an approver"
        );
    }

    #[test]
    fn a_decision_needs_the_version_an_open_request_and_its_time() {
        let asked = CallApproval::ask(&call(&json!({})), now(), 24, Duration::days(30)).unwrap();
        let approved = asked
            .decide(CallDecision::Approve, "U1", None, 1, now() + Duration::hours(1))
            .unwrap();
        assert_eq!((approved.state, approved.version), (ApprovalState::Approved, 2));
        assert_eq!(
            asked.decide(CallDecision::Deny, "U1", None, 2, now()),
            Err(Undecidable::VersionMoved { current: 1 })
        );
        assert_eq!(
            approved.decide(CallDecision::Deny, "U1", None, 2, now()),
            Err(Undecidable::State(ApprovalState::Approved))
        );
        assert_eq!(
            asked.decide(CallDecision::Approve, "U1", None, 1, now() + Duration::hours(24)),
            Err(Undecidable::State(ApprovalState::Expired)),
            "an open request past its expiry is expired"
        );
        let denied = asked
            .decide(CallDecision::Deny, "U1", Some("no".into()), 1, now())
            .unwrap();
        assert_eq!(denied.state, ApprovalState::Denied);
        assert_eq!(denied.note.as_deref(), Some("no"));
    }

    #[test]
    fn the_gate_makes_an_approved_call_once_and_asks_for_any_other() {
        let args = json!({"id": 7});
        let hash = arguments_hash(&args);
        let asked = CallApproval::ask(&call(&args), now(), 24, Duration::days(30)).unwrap();
        let run = asked.run_id.clone();
        let g = |requests: &[CallApproval], h: &str| gate(requests, &run, target("ins_1", "issues", "delete_issue"), h);
        assert_eq!(g(&[], &hash), Gate::Ask);
        assert_eq!(g(std::slice::from_ref(&asked), &hash), Gate::Ask);
        let mut approved = asked.decide(CallDecision::Approve, "U1", None, 1, now()).unwrap();
        assert_eq!(
            g(std::slice::from_ref(&approved), &hash),
            Gate::Make(asked.request_id.clone())
        );
        assert_eq!(
            g(std::slice::from_ref(&approved), &arguments_hash(&json!({"id": 8}))),
            Gate::Ask,
            "a changed argument asks again"
        );
        approved.used_at = Some(now());
        approved.result = Some("deleted".into());
        assert_eq!(
            g(std::slice::from_ref(&approved), &hash),
            Gate::Made {
                result: Some("deleted".into()),
                is_error: false
            },
            "made once: a later attempt reads its answer"
        );
        let other_run = gate(
            std::slice::from_ref(&approved),
            "tsk_1@2026-12-06T09:00:00Z",
            target("ins_1", "issues", "delete_issue"),
            &hash,
        );
        assert_eq!(other_run, Gate::Ask, "an approval never serves another run");
        let denied = asked.decide(CallDecision::Deny, "U1", None, 1, now()).unwrap();
        assert_eq!(
            g(std::slice::from_ref(&denied), &hash),
            Gate::Refused(ApprovalState::Denied)
        );
        let many: Vec<CallApproval> = (0..MAX_ASKS)
            .filter_map(|i| CallApproval::ask(&call(&json!({"id": i})), now(), 24, Duration::days(30)))
            .collect();
        assert_eq!(g(&many, &arguments_hash(&json!({"id": 99}))), Gate::TooManyAsks);
    }
}
