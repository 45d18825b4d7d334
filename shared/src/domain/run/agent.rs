//! The agent loop's vocabulary, independent of Bedrock: messages, content
//! blocks, tools as offered, why the model stopped, and the names tools are
//! offered under. What a run offers and the bookkeeping that enforces its
//! limits are `agent_loop`'s.
//!
//! Invariants: a tool is offered under a name that says which server it
//! belongs to (`<server>__<tool>`), so no two servers' tools can be confused.
//! What reaches the model is valid as Bedrock documents Converse (SPEC §7):
//! [`prompt_conversation`] merges a prompt's consecutive same-role messages,
//! starts it with the user and drops blank text; [`tool_result`] is never
//! empty; [`offered_name`] is always `^[a-zA-Z0-9_-]{1,64}$`, reversible
//! through the run's route table, and distinct per (server, tool).

use serde_json::Value;
use sha2::{Digest, Sha256};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

/// The image formats Converse takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl ImageFormat {
    /// The format of a MIME type, when Converse takes it.
    pub fn from_mime(mime: &str) -> Option<Self> {
        let essence = mime.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        match essence.as_str() {
            "image/png" => Some(Self::Png),
            "image/jpeg" | "image/jpg" => Some(Self::Jpeg),
            "image/gif" => Some(Self::Gif),
            "image/webp" => Some(Self::Webp),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Png => "png",
            Self::Jpeg => "jpeg",
            Self::Gif => "gif",
            Self::Webp => "webp",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Block {
    Text(String),
    /// An image, its bytes decoded.
    Image {
        format: ImageFormat,
        data: Vec<u8>,
    },
    /// Structured content (a tool's `structuredContent`).
    Json(Value),
    ToolUse {
        id: String,
        name: String,
        input: Value,
    },
    /// A tool's answer: text, JSON and image blocks, never empty.
    ToolResult {
        id: String,
        content: Vec<Block>,
        is_error: bool,
    },
}

impl Block {
    /// Whether the block says nothing (a text that is blank): Converse
    /// refuses a blank text block.
    pub fn is_blank(&self) -> bool {
        matches!(self, Block::Text(t) if t.trim().is_empty())
    }

    /// The length this block adds to a request, for the input estimate.
    fn estimate_len(&self) -> usize {
        match self {
            Block::Text(text) => text.len(),
            Block::Image { data, .. } => data.len(),
            Block::Json(value) => value.to_string().len(),
            Block::ToolUse { name, input, .. } => name.len() + input.to_string().len(),
            Block::ToolResult { content, .. } => content.iter().map(Block::estimate_len).sum(),
        }
    }
}

/// The `tools/call` `_meta` key that carries the run id (SPEC §7 "A re-run
/// is visible to the server").
pub const RUN_ID_META: &str = "ai.nimblebrain/run-id";

/// Said to the model in front of a prompt that starts with an assistant
/// message: Converse wants the user first.
pub const PROMPT_OPENING: &str = "Here is the scheduled task's prompt.";
/// Said to the model after a prompt that ends with the assistant's message.
pub const PROMPT_CONTINUE: &str = "Continue from there.";
/// A tool result with nothing in it becomes this: Converse refuses an empty one.
pub const EMPTY_RESULT: &str = "(the tool returned an empty result)";

/// A prompt's messages as Converse takes them: blank text blocks and empty
/// messages dropped, consecutive messages of one role merged, and a short
/// user text in front when the prompt starts with the assistant. Empty when
/// the prompt said nothing at all.
pub fn prompt_conversation(messages: Vec<Message>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for message in messages {
        let content: Vec<Block> = message.content.into_iter().filter(|b| !b.is_blank()).collect();
        if content.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.role == message.role => last.content.extend(content),
            _ => out.push(Message {
                role: message.role,
                content,
            }),
        }
    }
    if out.first().is_some_and(|m| m.role == Role::Assistant) {
        out.insert(0, Message::user_text(PROMPT_OPENING));
    }
    // A prompt that ends with the assistant's message would be an assistant
    // prefill (models such as Claude Opus 4.6 refuse it), and the model's
    // reply would follow it as a second assistant message: the user speaks
    // last.
    if out.last().is_some_and(|m| m.role == Role::Assistant) {
        out.push(Message::user_text(PROMPT_CONTINUE));
    }
    out
}

/// The most a run holds from servers, all told (prompt text, tool results,
/// images), in bytes (SPEC §13): each item is capped on its own by the MCP
/// adapter, and this caps their sum, so one hostile server cannot exhaust
/// the runner's memory and kill the other runs of its batch.
pub const MAX_HELD_BYTES: usize = 8 * 1024 * 1024;
/// What stands in for content past [`MAX_HELD_BYTES`].
pub const HELD_LEFT_OUT: &str = "(left out: this run already holds all it may keep from its servers)";

/// The bytes a block holds (text, image data, JSON, results within).
pub fn held_bytes(block: &Block) -> usize {
    match block {
        Block::Text(t) => t.len(),
        Block::Image { data, .. } => data.len(),
        Block::Json(v) => v.to_string().len(),
        Block::ToolUse { input, .. } => input.to_string().len(),
        Block::ToolResult { content, .. } => content.iter().map(held_bytes).sum(),
    }
}

/// Keeps what fits of `blocks` in `room` bytes, in order; a block that does
/// not fit becomes [`HELD_LEFT_OUT`] (a tool result keeps its id and what
/// of its content fits). Answers the room left.
pub fn bound_held(blocks: &mut [Block], mut room: usize) -> usize {
    for block in blocks.iter_mut() {
        match block {
            Block::ToolResult { content, .. } => {
                room = bound_held(content, room);
            }
            other => {
                let size = held_bytes(other);
                if size <= room {
                    room -= size;
                } else {
                    *other = Block::Text(HELD_LEFT_OUT.to_owned());
                    room = room.saturating_sub(HELD_LEFT_OUT.len());
                }
            }
        }
    }
    room
}

/// The most images Bedrock takes in one Converse request.
pub const MAX_IMAGES_PER_REQUEST: usize = 20;
/// What stands in for an image past [`MAX_IMAGES_PER_REQUEST`].
pub const IMAGE_LEFT_OUT: &str = "(an image was left out: a request carries at most 20 images)";

/// Keeps at most [`MAX_IMAGES_PER_REQUEST`] images in the messages, the
/// latest ones: each earlier image (in a message or a tool result) becomes
/// a short text saying so. Answers how many were left out.
pub fn bound_images(messages: &mut [Message]) -> usize {
    fn count(blocks: &[Block]) -> usize {
        blocks
            .iter()
            .map(|b| match b {
                Block::Image { .. } => 1,
                Block::ToolResult { content, .. } => count(content),
                _ => 0,
            })
            .sum()
    }
    fn drop_first(blocks: &mut [Block], excess: &mut usize) {
        for block in blocks.iter_mut() {
            if *excess == 0 {
                return;
            }
            match block {
                Block::Image { .. } => {
                    *block = Block::Text(IMAGE_LEFT_OUT.to_owned());
                    *excess -= 1;
                }
                Block::ToolResult { content, .. } => drop_first(content, excess),
                _ => {}
            }
        }
    }
    let total: usize = messages.iter().map(|m| count(&m.content)).sum();
    let mut excess = total.saturating_sub(MAX_IMAGES_PER_REQUEST);
    let left_out = excess;
    for message in messages.iter_mut() {
        drop_first(&mut message.content, &mut excess);
    }
    left_out
}

/// A tool result's content as Converse takes it: blank text dropped, and
/// never empty.
pub fn tool_result(content: Vec<Block>) -> Vec<Block> {
    let content: Vec<Block> = content.into_iter().filter(|b| !b.is_blank()).collect();
    if content.is_empty() {
        return vec![Block::Text(EMPTY_RESULT.to_owned())];
    }
    content
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

impl StopReason {
    /// As Converse names it (`end_turn`, `tool_use`, ...).
    pub fn code(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ToolUse => "tool_use",
            StopReason::MaxTokens => "max_tokens",
            StopReason::Other(code) => code,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_tokens: u32,
    /// Where the request's prompt cache points go ([`CachePoints::place`]).
    pub cache: CachePoints,
}

/// The most cache points Bedrock takes in one request.
pub const MAX_CACHE_POINTS: usize = 4;

/// Where a request marks its prompt cache points (Bedrock's `cachePoint`
/// blocks). The model reads a request as tools, then system, then
/// messages; a point caches everything before it, and a later request that
/// starts with the same prefix reads it at the cache read price.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachePoints {
    /// After the system prompt: the tools and the system prompt.
    pub after_system: bool,
    /// After each of these messages (indices, ascending).
    pub after_messages: Vec<usize>,
}

impl CachePoints {
    /// The points of `request` for a model whose cache takes a prefix of at
    /// least `minimum` tokens (`None`: no caching): after the system prompt,
    /// after the task's own messages (`stable`: the prompt's, the same at
    /// every turn), and after the conversation's last message, which the
    /// next turn extends; each only where the prefix before it reaches the
    /// minimum (estimated on the high side: a point Bedrock finds short
    /// caches nothing and costs nothing).
    pub fn place(request: &ModelRequest, minimum: Option<u64>, stable: usize) -> Self {
        let Some(minimum) = minimum else {
            return Self::default();
        };
        let tokens = |chars: usize| (chars as u64).div_ceil(CHARS_PER_TOKEN_ESTIMATE);
        let mut prefix = tokens(request.system.len() + tools_len(&request.tools));
        let mut points = Self {
            after_system: prefix >= minimum,
            after_messages: Vec::new(),
        };
        let last = request.messages.len().checked_sub(1);
        for (i, message) in request.messages.iter().enumerate() {
            prefix += tokens(message.content.iter().map(Block::estimate_len).sum());
            if (i + 1 == stable || Some(i) == last) && prefix >= minimum {
                points.after_messages.push(i);
            }
        }
        points
    }

    pub fn count(&self) -> usize {
        usize::from(self.after_system) + self.after_messages.len()
    }
}

fn tools_len(tools: &[ToolSpec]) -> usize {
    tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.input_schema.to_string().len())
        .sum()
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
        let messages: usize = self
            .messages
            .iter()
            .flat_map(|m| &m.content)
            .map(Block::estimate_len)
            .sum();
        ((self.system.len() + messages + tools_len(&self.tools)) as u64).div_ceil(CHARS_PER_TOKEN_ESTIMATE)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub message: Message,
    pub stop: StopReason,
    /// Input billed at the plain price.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input written to and read from the prompt cache.
    pub cache_write_tokens: u64,
    pub cache_read_tokens: u64,
}

/// The longest tool name Bedrock (and OpenAI, Anthropic) take.
pub const MAX_TOOL_NAME: usize = 64;

/// Bedrock's tool name rule: `^[a-zA-Z0-9_-]{1,64}$`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len()) && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The name a server's tool is offered under: `<server>__<tool>` when that
/// is a valid tool name as it is, else [`hashed_name`]. The run keeps a
/// route table from the offered name back to (server, tool).
pub fn offered_name(server: &str, tool: &str) -> String {
    let plain = format!("{server}__{tool}");
    if valid_tool_name(&plain) {
        return plain;
    }
    hashed_name(server, tool)
}

/// A valid name for (server, tool) whatever they hold: the sanitised
/// `<server>__<tool>` (anything outside `[a-zA-Z0-9_-]` becomes `_`), cut to
/// fit, and `_` plus ten hex digits of SHA-256 over the real pair, so two
/// pairs that sanitise or cut alike still get different names.
pub fn hashed_name(server: &str, tool: &str) -> String {
    let digest = Sha256::digest(format!("{server}\n{tool}").as_bytes());
    let hash = hex::encode(digest);
    let clean: String = format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME - 11)
        .collect();
    format!("{clean}_{}", &hash[..10])
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
            cache: CachePoints::default(),
        };
        assert_eq!(request.input_estimate(), 110);
        request.messages.push(Message {
            role: Role::User,
            content: vec![Block::ToolResult {
                id: "t1".into(),
                content: vec![Block::Text("r".repeat(30))],
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
            cache: CachePoints::default(),
        }
        .input_estimate();
        assert!(estimate > words, "{estimate} vs {words} words");
    }

    #[test]
    fn cache_points_follow_the_stable_prefix_and_the_last_message_once_long_enough() {
        let reply = |n: usize| Message {
            role: Role::Assistant,
            content: vec![Block::Text("a".repeat(n))],
        };
        let mut request = ModelRequest {
            system: "s".repeat(300),
            messages: vec![Message::user_text("p".repeat(3000))],
            tools: vec![ToolSpec {
                name: "t".into(),
                description: "d".repeat(2700),
                input_schema: serde_json::json!({"type": "object"}),
            }],
            max_tokens: 100,
            cache: CachePoints::default(),
        };
        // Tools and system: about 1,000 tokens; with the prompt, 2,000.
        let points = CachePoints::place(&request, Some(1024), 1);
        assert_eq!(
            points,
            CachePoints {
                after_system: false,
                after_messages: vec![0]
            }
        );
        let points = CachePoints::place(&request, Some(900), 1);
        assert_eq!(
            points,
            CachePoints {
                after_system: true,
                after_messages: vec![0]
            }
        );
        // No model minimum, or a prefix below it: no point at all.
        assert_eq!(CachePoints::place(&request, None, 1), CachePoints::default());
        assert_eq!(CachePoints::place(&request, Some(4096), 1), CachePoints::default());
        // Turns later the conversation has grown past the minimum: a point
        // after the prompt and one after the last message, never more than
        // Bedrock takes.
        request.messages.push(reply(3000));
        request.messages.push(Message::user_text("r".repeat(6000)));
        let points = CachePoints::place(&request, Some(4096), 1);
        assert_eq!(
            points,
            CachePoints {
                after_system: false,
                after_messages: vec![2]
            }
        );
        let points = CachePoints::place(&request, Some(1024), 1);
        assert_eq!(points.after_messages, vec![0, 2]);
        assert!(points.count() <= MAX_CACHE_POINTS);
    }

    use super::*;

    #[test]
    fn offered_names_are_namespaced_valid_and_distinct() {
        assert_eq!(offered_name("issues", "list_issues"), "issues__list_issues");
        let cases = [
            ("my.server", "post summary"),
            ("my_server", "post_summary."),
            ("github", "repos.issues.list"),
            ("github", "repos_issues_list."),
            ("s", &"t".repeat(100)),
            ("s", &format!("{}x", "t".repeat(100))),
            (&"s".repeat(40), &"t".repeat(40)),
            ("ünï", "cödé"),
        ];
        let names: Vec<String> = cases.iter().map(|(s, t)| offered_name(s, t)).collect();
        for (name, (server, tool)) in names.iter().zip(cases) {
            assert!(valid_tool_name(name), "{name} for {server} / {tool}");
        }
        let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        assert!(names[2].starts_with("github__repos_issues_list_"), "{}", names[2]);
        assert!(!valid_tool_name("a.b") && !valid_tool_name("") && !valid_tool_name(&"a".repeat(65)));
    }

    #[test]
    fn a_prompt_is_merged_by_role_starts_with_the_user_and_has_no_blank_text() {
        let assistant = |t: &str| Message {
            role: Role::Assistant,
            content: vec![Block::Text(t.into())],
        };
        let got = prompt_conversation(vec![
            assistant("I am the expert."),
            assistant("   "),
            Message::user_text("First."),
            Message::user_text(""),
            Message::user_text("Second."),
            assistant("Noted."),
        ]);
        assert_eq!(
            got,
            vec![
                Message::user_text(PROMPT_OPENING),
                assistant("I am the expert."),
                Message {
                    role: Role::User,
                    content: vec![Block::Text("First.".into()), Block::Text("Second.".into())],
                },
                assistant("Noted."),
                Message::user_text(PROMPT_CONTINUE),
            ],
            "the user speaks last: no assistant prefill"
        );
        assert!(prompt_conversation(vec![Message::user_text(" \n")]).is_empty());
    }

    #[test]
    fn a_tool_result_is_never_empty_or_blank() {
        assert_eq!(tool_result(vec![]), vec![Block::Text(EMPTY_RESULT.into())]);
        assert_eq!(
            tool_result(vec![Block::Text(" ".into())]),
            vec![Block::Text(EMPTY_RESULT.into())]
        );
        let json = Block::Json(serde_json::json!({"a": 1}));
        assert_eq!(tool_result(vec![Block::Text("".into()), json.clone()]), vec![json]);
        assert_eq!(ImageFormat::from_mime("IMAGE/JPEG; q=1"), Some(ImageFormat::Jpeg));
        assert_eq!(ImageFormat::from_mime("image/svg+xml"), None);
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
