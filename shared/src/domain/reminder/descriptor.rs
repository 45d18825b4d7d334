//! The tool descriptor a chat backend advertises to its model for create:
//! `schedule.create`, its classification, and the JSON Schema of its input.
//!
//! Invariant: the classification is exactly SPEC §4's (EXTERNAL_WRITE, HIGH,
//! CONDITIONALLY_IDEMPOTENT, not parallel, required scopes exactly
//! `["schedule.write"]`), and the schema matches what `reminder` accepts.
//!
//! `schedule.create` is the capability id; model APIs (Bedrock, OpenAI,
//! Anthropic) refuse a `.` in a tool name (`^[a-zA-Z0-9_-]{1,64}$`), so the
//! model sees [`MODEL_TOOL_NAME`], and `formats` holds the descriptor ready
//! to paste as an MCP tool, a Bedrock Converse `toolSpec`, an OpenAI
//! function tool and an Anthropic tool.

use serde_json::{Value, json};

use crate::domain::reminder::{MAX_INSTRUCTION_CHARS, MAX_TITLE_CHARS, WRITE_SCOPE};

/// The capability id.
pub const TOOL_NAME: &str = "schedule.create";
/// The name a model calls the tool by.
pub const MODEL_TOOL_NAME: &str = "schedule_create";

const DESCRIPTION: &str = "Create a one-time reminder: at the given instant, an agent run with no tools and no delegated scopes carries out the instruction and the user is notified that it ran. Resolve one exact instant with a UTC offset before calling: read the current time, and ask the user whenever the date, the time or the time zone is unclear. Never guess a zone.";

pub fn tool_descriptor() -> Value {
    let schema = input_schema();
    // The model APIs take a plain JSON Schema object; the `$schema` keyword
    // stays in the descriptor's own copy.
    let mut model_schema = schema.clone();
    if let Some(o) = model_schema.as_object_mut() {
        o.remove("$schema");
    }
    json!({
        "name": TOOL_NAME,
        "model_name": MODEL_TOOL_NAME,
        "description": DESCRIPTION,
        "classification": {
            "effect": "EXTERNAL_WRITE",
            "risk": "HIGH",
            "idempotency": "CONDITIONALLY_IDEMPOTENT",
            "parallel": false,
            "required_scopes": [WRITE_SCOPE],
        },
        "input_schema": schema,
        "formats": {
            "mcp": {"name": MODEL_TOOL_NAME, "description": DESCRIPTION, "inputSchema": model_schema},
            "bedrock_converse": {"toolSpec": {
                "name": MODEL_TOOL_NAME, "description": DESCRIPTION, "inputSchema": {"json": model_schema}
            }},
            "openai": {"type": "function", "function": {
                "name": MODEL_TOOL_NAME, "description": DESCRIPTION, "parameters": model_schema
            }},
            "anthropic": {"name": MODEL_TOOL_NAME, "description": DESCRIPTION, "input_schema": model_schema},
        }
    })
}

fn input_schema() -> Value {
    json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "additionalProperties": false,
            "required": ["title", "instruction", "at"],
            "properties": {
                "title": {
                    "type": "string", "minLength": 1, "maxLength": MAX_TITLE_CHARS,
                    "description": "A short title the user will recognise. No control characters."
                },
                "instruction": {
                    "type": "string", "minLength": 1, "maxLength": MAX_INSTRUCTION_CHARS,
                    "description": "What to do at that time, in the user's words. No control characters."
                },
                "at": {
                    "type": "string", "format": "date-time",
                    "pattern": "^\\d{4}-\\d{2}-\\d{2}[Tt ]\\d{2}:\\d{2}(:\\d{2}(\\.\\d+)?)?([Zz]|[+-]\\d{2}:?\\d{2})$",
                    "description": "One exact instant in RFC 3339 / ISO 8601 with an offset (`Z` or `±hh:mm`), after now and at most 366 days ahead, e.g. 2026-12-24T19:00:00+01:00. A time without an offset is refused: resolve the user's time zone first, asking the user when unsure."
                }
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification_is_exactly_the_contract() {
        let d = tool_descriptor();
        assert_eq!(d["name"], "schedule.create");
        assert_eq!(
            d["classification"],
            json!({"effect": "EXTERNAL_WRITE", "risk": "HIGH", "idempotency": "CONDITIONALLY_IDEMPOTENT",
                   "parallel": false, "required_scopes": ["schedule.write"]})
        );
        assert_eq!(d["input_schema"]["required"], json!(["title", "instruction", "at"]));
        assert_eq!(d["input_schema"]["properties"]["title"]["maxLength"], 200);
        assert_eq!(d["input_schema"]["properties"]["instruction"]["maxLength"], 4000);
        assert_eq!(d["model_name"], "schedule_create");
    }

    /// `^[a-zA-Z0-9_-]{1,64}$`: Bedrock's, OpenAI's and Anthropic's rule.
    fn model_safe(name: &Value) -> bool {
        name.as_str().is_some_and(|n| {
            (1..=64).contains(&n.len()) && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
    }

    /// A JSON Schema the API takes: an object schema that compiles, accepts
    /// a good call and refuses one without an offset.
    fn object_schema(schema: &Value) {
        assert_eq!(schema["type"], "object", "{schema}");
        assert!(schema.get("$schema").is_none(), "model APIs take the plain schema");
        let validator = jsonschema::validator_for(schema).expect("a valid JSON Schema");
        let good = json!({"title": "Call mom", "instruction": "Call mom.", "at": "2026-12-24T19:00:00+01:00"});
        assert!(validator.is_valid(&good));
        let naive = json!({"title": "Call mom", "instruction": "Call mom.", "at": "2026-12-24T19:00:00"});
        assert!(!validator.is_valid(&naive));
    }

    #[test]
    fn every_pasteable_shape_meets_its_apis_name_and_schema_rules() {
        let d = tool_descriptor();
        let f = &d["formats"];
        assert!(!model_safe(&d["name"]), "the capability id keeps its dot");

        let mcp = &f["mcp"];
        assert!(model_safe(&mcp["name"]));
        assert!(mcp["description"].as_str().is_some_and(|s| !s.is_empty()));
        object_schema(&mcp["inputSchema"]);

        let bedrock = &f["bedrock_converse"]["toolSpec"];
        assert_eq!(f["bedrock_converse"].as_object().map(|o| o.len()), Some(1));
        assert!(model_safe(&bedrock["name"]));
        assert!(bedrock["description"].as_str().is_some_and(|s| !s.is_empty()));
        object_schema(&bedrock["inputSchema"]["json"]);

        let openai = &f["openai"];
        assert_eq!(openai["type"], "function");
        assert!(model_safe(&openai["function"]["name"]));
        assert!(openai["function"]["description"].is_string());
        object_schema(&openai["function"]["parameters"]);

        let anthropic = &f["anthropic"];
        assert!(model_safe(&anthropic["name"]));
        assert!(anthropic["description"].is_string());
        object_schema(&anthropic["input_schema"]);
    }
}
