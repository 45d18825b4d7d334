//! The tool descriptor a chat backend advertises to its model for create:
//! `schedule.create`, its classification, and the JSON Schema of its input.
//!
//! Invariant: the classification is exactly SPEC §4's (EXTERNAL_WRITE, HIGH,
//! CONDITIONALLY_IDEMPOTENT, not parallel, required scopes exactly
//! `["schedule.write"]`), and the schema matches what `reminder` accepts.

use serde_json::{Value, json};

use super::reminder::{MAX_INSTRUCTION_CHARS, MAX_TITLE_CHARS, WRITE_SCOPE};

pub const TOOL_NAME: &str = "schedule.create";

pub fn tool_descriptor() -> Value {
    json!({
        "name": TOOL_NAME,
        "description": "Create a one-time reminder: at the given instant, an agent run with no tools and no delegated scopes carries out the instruction and the user is notified that it ran. Resolve one exact instant with a UTC offset before calling: read the current time, and ask the user whenever the date, the time or the time zone is unclear. Never guess a zone.",
        "classification": {
            "effect": "EXTERNAL_WRITE",
            "risk": "HIGH",
            "idempotency": "CONDITIONALLY_IDEMPOTENT",
            "parallel": false,
            "required_scopes": [WRITE_SCOPE],
        },
        "input_schema": {
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
    }
}
