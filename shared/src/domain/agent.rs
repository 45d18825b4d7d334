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

/// Characters per token assumed when a request's input is estimated before
/// it is sent: fewer than tokenizers average on English or JSON, so the
/// estimate errs high and the per-run budget is kept before the call, not
/// found exceeded after it.
pub const CHARS_PER_TOKEN_ESTIMATE: u64 = 3;

impl ModelRequest {
    /// An estimate, on the high side, of the input tokens this request is
    /// charged: its system prompt, messages and tool specs.
    pub fn input_estimate(&self) -> u64 {
        let block = |b: &Block| match b {
            Block::Text(text) => text.len(),
            Block::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
            Block::ToolResult { text, .. } => text.len(),
        };
        let messages: usize = self.messages.iter().flat_map(|m| &m.content).map(block).sum();
        let tools: usize = self
            .tools
            .iter()
            .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
            .sum();
        ((self.system.len() + messages + tools) as u64).div_ceil(CHARS_PER_TOKEN_ESTIMATE)
    }
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

    #[test]
    fn the_input_estimate_counts_everything_sent_and_errs_high() {
        let mut request = ModelRequest {
            system: "s".repeat(30),
            messages: vec![Message::user_text("x".repeat(300))],
            tools: vec![],
            max_tokens: 100,
        };
        assert_eq!(request.input_estimate(), 110);
        request.messages.push(Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                id: "t1".into(),
                text: "r".repeat(30),
                is_error: false,
            }],
        });
        assert_eq!(request.input_estimate(), 120);
        request.tools.push(ToolSpec {
            name: "abc".into(),
            description: "d".repeat(27),
            input_schema: serde_json::json!({}),
        });
        assert!(request.input_estimate() > 120);
        // English prose runs near four characters a token: the estimate is above it.
        let prose = "The quick brown fox jumps over the lazy dog. ".repeat(20);
        let words = prose.split_whitespace().count() as u64;
        let estimate = ModelRequest {
            system: String::new(),
            messages: vec![Message::user_text(prose)],
            tools: vec![],
            max_tokens: 1,
        }
        .input_estimate();
        assert!(estimate > words, "{estimate} vs {words} words");
    }

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
