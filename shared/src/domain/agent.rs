//! The agent loop's vocabulary, independent of Bedrock: messages, content
//! blocks, offered tools, why the model stopped, and the bookkeeping that
//! enforces a run's limits.
//!
//! Invariants: the tools offered are exactly the approved tools of the
//! declaring server plus the tools of the workspace connectors bound to its
//! needs; a tool is offered under a name that says which server it belongs to
//! (`<server>__<tool>`), so no two servers' tools can be confused; a call to
//! a name that was not offered is refused and counted. Reminders get no tools.

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    ToolUse { id: String, name: String, input: Value },
    ToolResult { id: String, text: String, is_error: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
}

impl Message {
    pub fn user_text(text: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: vec![Block::Text(text.into())],
        }
    }

    /// The message's text blocks, joined.
    pub fn text(&self) -> String {
        let parts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|b| match b {
                Block::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        parts.join("\n")
    }
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// The tool's JSON Schema for its input.
    pub input_schema: Value,
}

/// Why the model stopped its turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    StopSequence,
    ToolUse,
    MaxTokens,
    /// Guardrail, content filter, context window, or a reason this code does
    /// not know yet: the run stops and fails with it.
    Other(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub message: Message,
    pub stop: StopReason,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// The name a server's tool is offered under. Bedrock tool names allow
/// `[a-zA-Z0-9_-]{1,64}`; anything else becomes `_`.
pub fn offered_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let name = format!("{}__{}", clean(server), clean(tool));
    name.chars().take(64).collect()
}

/// The system prompt of every run: the run is unattended, bounded, and must
/// not ask questions nobody will answer.
pub const SYSTEM_PROMPT: &str = "You are carrying out a scheduled task on behalf of a workspace. Nobody is \
watching this run: do not ask questions, do the task with the tools you are given, and finish with a short \
summary of what you did.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offered_names_are_namespaced_and_valid() {
        assert_eq!(offered_name("issues", "list_issues"), "issues__list_issues");
        assert_eq!(offered_name("my.server", "post summary"), "my_server__post_summary");
        let long = offered_name(&"s".repeat(40), &"t".repeat(40));
        assert_eq!(long.chars().count(), 64);
    }

    #[test]
    fn text_joins_text_blocks_only() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text("a".into()),
                Block::ToolUse {
                    id: "1".into(),
                    name: "x".into(),
                    input: Value::Null,
                },
                Block::Text("b".into()),
            ],
        };
        assert_eq!(m.text(), "a\nb");
    }
}
