//! A scheduled prompt's declaration: the `ai.nimblebrain/scheduled-prompts`
//! object a connector server puts in a prompt's `_meta` (SPEC §5). The JSON
//! Schema in `shared/schemas/scheduled-prompts.schema.json` publishes it.
//!
//! Invariants: the marker is accepted from the wire because it widens
//! nothing until an admin approves it; a declaration names only its own
//! server's tools (as its `tools/list` shows them), never another server;
//! needs are words for the admin to bind; an event trigger is refused for a
//! connector; limits stay within the ceilings; a schedule is accepted only
//! if EventBridge fires exactly as declared. Every refusal says precisely why.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::schedule::cron::{Cron, CronError};
use crate::domain::schedule::{RateUnit, Schedule};
use crate::domain::task::budget::Budget;
use crate::domain::task::limits::{Ceilings, LimitError, RequestedLimits};

pub const MARKER: &str = "ai.nimblebrain/scheduled-prompts";
/// The published JSON Schema of the marker (`shared/schemas/`), which
/// [`parse`] agrees with (tested); `sat check` validates against it too.
pub const SCHEMA: &str = include_str!("../../../schemas/scheduled-prompts.schema.json");
pub const VERSION: u64 = 1;
/// The largest declaration, as compact JSON (SPEC §13).
pub const MAX_DECLARATION_BYTES: usize = 16 * 1024;
/// The longest need description, in characters (SPEC §13).
pub const MAX_DESCRIPTION_CHARS: usize = 1024;
/// The longest tool or prompt name, in characters (SPEC §13; MCP names run
/// to 128).
pub const MAX_NAME_CHARS: usize = 128;

/// A need, in words, for an admin to bind to a workspace connector.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Need {
    pub id: String,
    pub description: String,
}

/// A valid declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct Declaration {
    pub schedule: Schedule,
    pub tools: BTreeSet<String>,
    pub limits: crate::domain::task::limits::Limits,
    pub budget: Budget,
    /// need id -> description
    pub needs: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeclarationError {
    #[error("the marker must be a JSON object")]
    NotAnObject,
    #[error("the declaration is {0} bytes of JSON; at most {MAX_DECLARATION_BYTES} are read")]
    TooLarge(usize),
    #[error("version {0} is not supported (this runtime reads version {VERSION})")]
    Version(String),
    #[error(
        "an event trigger was declared: only user and agent provenances may have event triggers, \
         a connector declares a schedule"
    )]
    EventTrigger,
    #[error("malformed declaration: {0}")]
    Malformed(String),
    #[error("schedule: give exactly one of {{\"cron\", \"timezone\"}} or {{\"rate\"}}")]
    Schedule,
    #[error("schedule.cron: {0}")]
    Cron(#[from] CronError),
    #[error("schedule.timezone: `{0}` is not an IANA time zone")]
    Timezone(String),
    #[error("schedule.rate: `{0}` is not `<n> minutes|hours|days` with n >= 1")]
    Rate(String),
    #[error("tools: `{0}` is not one of this server's tools; a declaration names only its own server's tools")]
    ForeignTool(String),
    #[error("limits: {0}")]
    Limits(#[from] LimitError),
    #[error("budget: {0}")]
    Budget(String),
    #[error("needs: {0}")]
    Needs(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    version: Value,
    #[serde(default)]
    schedule: Option<RawSchedule>,
    #[serde(default)]
    tools: Vec<String>,
    #[serde(default)]
    limits: RequestedLimits,
    #[serde(default)]
    budget: Option<Budget>,
    #[serde(default)]
    needs: Vec<Need>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSchedule {
    #[serde(default)]
    cron: Option<String>,
    #[serde(default)]
    timezone: Option<String>,
    #[serde(default)]
    rate: Option<String>,
}

/// `<n> minute(s)|hour(s)|day(s)`.
pub fn parse_rate(text: &str) -> Option<(u32, RateUnit)> {
    let mut parts = text.split_whitespace();
    let every: u32 = parts.next()?.parse().ok().filter(|n| *n >= 1)?;
    let unit = match parts.next()? {
        "minute" | "minutes" => RateUnit::Minutes,
        "hour" | "hours" => RateUnit::Hours,
        "day" | "days" => RateUnit::Days,
        _ => return None,
    };
    parts.next().is_none().then_some((every, unit))
}

fn schedule(raw: Option<RawSchedule>) -> Result<Schedule, DeclarationError> {
    match raw {
        Some(RawSchedule {
            cron: Some(cron),
            timezone: Some(tz),
            rate: None,
        }) => {
            Cron::parse(&cron)?;
            crate::domain::schedule::zone::Zone::from_str(&tz).map_err(|_| DeclarationError::Timezone(tz.clone()))?;
            Ok(Schedule::Cron {
                cron,
                timezone: tz,
                until: None,
            })
        }
        Some(RawSchedule {
            cron: None,
            timezone: None,
            rate: Some(rate),
        }) => {
            let (every, unit) = parse_rate(&rate).ok_or(DeclarationError::Rate(rate))?;
            Ok(Schedule::Rate { every, unit })
        }
        _ => Err(DeclarationError::Schedule),
    }
}

/// Reads and checks a marker value against the server's own tools and the
/// operator's ceilings.
pub fn parse(
    marker: &Value,
    server_tools: &BTreeSet<String>,
    ceilings: &Ceilings,
) -> Result<Declaration, DeclarationError> {
    let object = marker.as_object().ok_or(DeclarationError::NotAnObject)?;
    // Bounded before anything in it is read or echoed in a refusal.
    let size = serde_json::to_vec(marker).map_or(usize::MAX, |b| b.len());
    if size > MAX_DECLARATION_BYTES {
        return Err(DeclarationError::TooLarge(size));
    }
    match object.get("version") {
        Some(Value::Number(n)) if n.as_u64() == Some(VERSION) => {}
        Some(other) => return Err(DeclarationError::Version(other.to_string())),
        None => return Err(DeclarationError::Version("(missing)".into())),
    }
    let trigger_keys = ["trigger", "triggers", "event", "events", "on"];
    let schedule_has_event = object
        .get("schedule")
        .and_then(Value::as_object)
        .is_some_and(|s| trigger_keys.iter().any(|k| s.contains_key(*k)));
    if schedule_has_event || trigger_keys.iter().any(|k| object.contains_key(*k)) {
        return Err(DeclarationError::EventTrigger);
    }
    let raw: Raw = serde_json::from_value(marker.clone()).map_err(|e| DeclarationError::Malformed(e.to_string()))?;
    let schedule = schedule(raw.schedule)?;
    let tools = own_tools(raw.tools, server_tools)?;
    raw.limits.check()?;
    // Declared limits stand as declared (a missing one takes the ceiling)
    // and must be within the ceilings.
    let limits = ceilings.fill(&raw.limits);
    limits.check_within(ceilings)?;
    Ok(Declaration {
        schedule,
        tools,
        limits,
        budget: budget(raw.budget)?,
        needs: needs(raw.needs)?,
    })
}

/// The declared tools: each a tool of the declaring server, by a name of
/// bounded length.
fn own_tools(declared: Vec<String>, server_tools: &BTreeSet<String>) -> Result<BTreeSet<String>, DeclarationError> {
    let mut tools = BTreeSet::new();
    for tool in declared {
        if tool.chars().count() > MAX_NAME_CHARS {
            return Err(DeclarationError::Malformed(format!(
                "a tool name is longer than {MAX_NAME_CHARS} characters"
            )));
        }
        if !server_tools.contains(&tool) {
            return Err(DeclarationError::ForeignTool(tool));
        }
        tools.insert(tool);
    }
    Ok(tools)
}

/// The declared budget: required, both amounts positive, a run's within a
/// month's.
fn budget(declared: Option<Budget>) -> Result<Budget, DeclarationError> {
    let budget = declared.ok_or_else(|| DeclarationError::Budget("a budget is required".into()))?;
    let ok = |v: f64| v.is_finite() && v > 0.0;
    if !ok(budget.max_usd_per_run) || !ok(budget.max_usd_per_month) {
        return Err(DeclarationError::Budget("amounts must be positive".into()));
    }
    if budget.max_usd_per_run > budget.max_usd_per_month {
        return Err(DeclarationError::Budget(
            "max_usd_per_run exceeds max_usd_per_month".into(),
        ));
    }
    Ok(budget)
}

/// The declared needs by id: ids of `[A-Za-z0-9_-]{1,64}`, each once, each
/// with a description of bounded length.
fn needs(declared: Vec<Need>) -> Result<BTreeMap<String, String>, DeclarationError> {
    let mut needs = BTreeMap::new();
    for need in declared {
        let valid_id = !need.id.is_empty()
            && need.id.len() <= 64
            && need
                .id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_id {
            return Err(DeclarationError::Needs(format!(
                "`{}` is not an id ([A-Za-z0-9_-]{{1,64}})",
                need.id
            )));
        }
        if need.description.trim().is_empty() {
            return Err(DeclarationError::Needs(format!("`{}` has no description", need.id)));
        }
        if need.description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(DeclarationError::Needs(format!(
                "`{}`'s description is longer than {MAX_DESCRIPTION_CHARS} characters",
                need.id
            )));
        }
        if needs.insert(need.id.clone(), need.description).is_some() {
            return Err(DeclarationError::Needs(format!("`{}` is declared twice", need.id)));
        }
    }
    Ok(needs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::task::limits::tests_support::ceilings;
    use serde_json::json;

    fn tools() -> BTreeSet<String> {
        ["list_issues", "post_summary"].into_iter().map(str::to_owned).collect()
    }

    fn example() -> Value {
        json!({"version": 1,
               "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
               "tools": ["list_issues", "post_summary"],
               "limits": {"max_turns": 8, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300},
               "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0},
               "needs": [{"id": "summary_channel", "description": "a chat channel to post the weekly summary in"}]})
    }

    fn refused(mutate: impl FnOnce(&mut Value)) -> DeclarationError {
        let mut v = example();
        mutate(&mut v);
        parse(&v, &tools(), &ceilings()).unwrap_err()
    }

    #[test]
    fn the_spec_example_is_valid() {
        let d = parse(&example(), &tools(), &ceilings()).unwrap();
        assert_eq!(
            d.schedule,
            Schedule::Cron {
                cron: "0 9 * * MON-FRI".into(),
                timezone: "Europe/Berlin".into(),
                until: None,
            }
        );
        assert_eq!(d.limits.max_turns, 8);
        assert_eq!(d.needs.len(), 1);
    }

    #[test]
    fn every_refusal_says_why() {
        assert_eq!(
            refused(|v| v["version"] = json!(2)),
            DeclarationError::Version("2".into())
        );
        assert_eq!(
            refused(|v| v["trigger"] = json!({"event": "issue.opened"})),
            DeclarationError::EventTrigger
        );
        assert_eq!(
            refused(|v| v["schedule"] = json!({"event": "issue.opened"})),
            DeclarationError::EventTrigger
        );
        assert_eq!(
            refused(|v| v["tools"] = json!(["list_issues", "github.create_issue"])),
            DeclarationError::ForeignTool("github.create_issue".into())
        );
        assert_eq!(
            refused(|v| v["schedule"] = json!({"cron": "0 9 * * *"})),
            DeclarationError::Schedule
        );
        assert_eq!(
            refused(|v| v["schedule"] = json!({"cron": "0 9 * * *", "timezone": "UTC", "rate": "5 minutes"})),
            DeclarationError::Schedule
        );
        assert_eq!(
            refused(|v| v["schedule"]["timezone"] = json!("Mars/Olympus")),
            DeclarationError::Timezone("Mars/Olympus".into())
        );
        assert_eq!(
            refused(|v| v["schedule"]["cron"] = json!("0 9 1 * MON")),
            DeclarationError::Cron(CronError::DomAndDow)
        );
        assert_eq!(
            refused(|v| v["schedule"] = json!({"rate": "0 minutes"})),
            DeclarationError::Rate("0 minutes".into())
        );
        assert!(matches!(
            refused(|v| v["limits"]["max_turns"] = json!(11)),
            DeclarationError::Limits(LimitError::AboveCeiling { name: "max_turns", .. })
        ));
        assert!(matches!(
            refused(|v| v["budget"]["max_usd_per_run"] = json!(6.0)),
            DeclarationError::Budget(_)
        ));
        assert!(matches!(
            refused(|v| {
                v.as_object_mut().unwrap().remove("budget");
            }),
            DeclarationError::Budget(_)
        ));
        assert!(matches!(
            refused(|v| v["needs"] = json!([{"id": "a b", "description": "x"}])),
            DeclarationError::Needs(_)
        ));
        assert!(matches!(
            refused(|v| v["needs"] = json!([{"id": "a", "description": "x"}, {"id": "a", "description": "y"}])),
            DeclarationError::Needs(_)
        ));
        assert!(matches!(
            refused(|v| v["extra"] = json!(1)),
            DeclarationError::Malformed(_)
        ));
        assert_eq!(
            parse(&json!("x"), &tools(), &ceilings()).unwrap_err(),
            DeclarationError::NotAnObject
        );
    }

    /// The published schema and the parser agree on what is well-formed.
    #[test]
    fn the_published_schema_agrees_with_the_parser() {
        let schema: Value = serde_json::from_str(SCHEMA).unwrap();
        let validator = jsonschema::validator_for(&schema).unwrap();
        let mut cases: Vec<(Value, bool)> = vec![(example(), true)];
        let mut push = |mutate: fn(&mut Value), valid: bool| {
            let mut v = example();
            mutate(&mut v);
            cases.push((v, valid));
        };
        push(|v| v["schedule"] = json!({"rate": "5 minutes"}), true);
        push(
            |v| {
                v.as_object_mut().unwrap().remove("needs");
                v.as_object_mut().unwrap().remove("limits");
            },
            true,
        );
        push(|v| v["version"] = json!(2), false);
        push(
            |v| {
                v.as_object_mut().unwrap().remove("budget");
            },
            false,
        );
        push(|v| v["schedule"] = json!({"cron": "0 9 * * *"}), false);
        push(
            |v| v["schedule"] = json!({"cron": "0 9 * * *", "timezone": "UTC", "rate": "1 day"}),
            false,
        );
        push(|v| v["schedule"] = json!({"rate": "0 minutes"}), false);
        push(|v| v["schedule"] = json!({"cron": "0 9 * *", "timezone": "UTC"}), false);
        push(|v| v["limits"]["max_turns"] = json!(0), false);
        push(|v| v["budget"]["max_usd_per_run"] = json!(-1), false);
        push(|v| v["needs"] = json!([{"id": "a b", "description": "x"}]), false);
        push(|v| v["trigger"] = json!({"event": "x"}), false);
        push(|v| v["extra"] = json!(true), false);
        for (value, valid) in cases {
            assert_eq!(validator.is_valid(&value), valid, "schema on {value}");
            assert_eq!(parse(&value, &tools(), &ceilings()).is_ok(), valid, "parser on {value}");
        }
    }

    #[test]
    fn rates_and_missing_limits() {
        let mut v = example();
        v["schedule"] = json!({"rate": "1 hour"});
        v.as_object_mut().unwrap().remove("limits");
        let d = parse(&v, &tools(), &ceilings()).unwrap();
        assert_eq!(
            d.schedule,
            Schedule::Rate {
                every: 1,
                unit: RateUnit::Hours
            }
        );
        assert_eq!(d.limits, ceilings().limits(), "a missing limit takes the ceiling");
        assert_eq!(parse_rate("15 minutes"), Some((15, RateUnit::Minutes)));
        assert_eq!(parse_rate("2 weeks"), None);
    }
}
