//! The agent loop's decisions (SPEC §7 step 5), as pure code: which tools a
//! run offers and where each offered name leads ([`Toolbox`]), what the next
//! model call may produce, whether a tool call is allowed, refused or over
//! the limit, when the loop must stop and with which reason, and what the run
//! used ([`AgentLoop`]). `app::run` does the I/O around it: the model and
//! tool calls, the clock, the backoff's sleep.
//!
//! Invariants: the tools offered are exactly the ones the caller admits (the
//! approved tools of the declaring server, and the tools of the workspace
//! connectors bound to its needs), each under a name that says which server
//! it belongs to (`agent::offered_name`), with a description and an object
//! schema; a call to a name that was not offered is refused and counted,
//! never routed. Reminders get no tools. The loop stops at the first limit it
//! reaches: turns, tool calls, output tokens (what is left is the next call's
//! `max_tokens`), wall time, and the per-run budget (the next call's input,
//! estimated high, is paid for before its output is allowed). A run the
//! model kept throttled, or the model pace had no slot for in its time,
//! before any tool call goes back to the queue ([`Ended::Requeue`]); after
//! one it fails as [`MODEL_THROTTLED`].

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::agent::{Block, Message, ModelReply, ModelRequest, Role, SYSTEM_PROMPT, StopReason, ToolSpec};
use super::agent::{hashed_name, offered_name};
use super::occurrence::{Outcome, Usage, cap_output};
use crate::domain::task::budget::Price;
use crate::domain::task::claim::RunStatus;
use crate::domain::task::limits::Limits;

/// The reason of a run throttled after it called a tool.
pub const MODEL_THROTTLED: &str = "model throttled";

/// Where an offered tool name leads: the index of a session the caller
/// keeps, and the server's own name for the tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub session: usize,
    pub tool: String,
    /// The install the session is with: two installs of one server are
    /// two routes, and an approval serves the one it names.
    pub install: String,
    /// The server the session is with, as the run names it.
    pub server: String,
    /// A call waits for an approval (`domain::run::gate`).
    pub gated: bool,
}

/// The tools a run offers, and the route table back to their servers.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Toolbox {
    tools: Vec<ToolSpec>,
    routes: BTreeMap<String, Route>,
    /// Tools left out, and why (the run record says so).
    left_out: Vec<String>,
}

/// The most tools one run offers the model, all servers together.
pub const MAX_OFFERED_TOOLS: usize = 128;

/// A tool's input schema as Converse takes it: a JSON object schema with
/// `"type": "object"` at its root. A schema without a type (a server's
/// `{}`, or properties alone) gets it; anything else at the root (a root
/// `anyOf`, `oneOf`, `allOf` or `$ref`, another type) cannot be offered,
/// and the reason says why. A schema that is no JSON object at all is read
/// as the open object schema.
pub fn converse_schema(schema: Value) -> Result<Value, &'static str> {
    let mut object = match schema {
        Value::Object(object) => object,
        _ => serde_json::Map::new(),
    };
    if ["anyOf", "oneOf", "allOf", "$ref"]
        .iter()
        .any(|k| object.contains_key(*k))
    {
        return Err("has a combinator or reference at its root, not an object");
    }
    match object.get("type") {
        None => {
            object.insert("type".to_owned(), Value::String("object".to_owned()));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => return Err("describes something other than an object at its root"),
    }
    Ok(Value::Object(object))
}

impl Toolbox {
    /// Offers the tools of `server` (as it lists them, under its own names)
    /// that pass `admit`, reached through session `session`. Each is offered
    /// as `<server>__<tool>`, or its hashed form when another pair already
    /// took that name (a pair that collides both ways is not offered); an
    /// empty description becomes the name (Converse refuses it empty), and a
    /// schema that is not an object becomes the open object schema.
    pub fn offer(
        &mut self,
        (install, server): (&str, &str),
        session: usize,
        listed: Vec<ToolSpec>,
        admit: impl Fn(&str) -> bool,
    ) {
        for tool in listed.into_iter().filter(|t| admit(&t.name)) {
            if self.tools.len() >= MAX_OFFERED_TOOLS {
                self.left_out.push(format!(
                    "tools of {server} past the first {MAX_OFFERED_TOOLS} offered were left out"
                ));
                break;
            }
            let mut name = offered_name(server, &tool.name);
            if self.routes.contains_key(&name) {
                // Two pairs that read alike: the hashed form tells them apart.
                name = hashed_name(server, &tool.name);
                if self.routes.contains_key(&name) {
                    continue;
                }
            }
            let description = if tool.description.trim().is_empty() {
                tool.name.clone()
            } else {
                tool.description
            };
            let input_schema = match converse_schema(tool.input_schema) {
                Ok(schema) => schema,
                Err(why) => {
                    // One unusable schema never refuses the whole request.
                    self.left_out.push(format!(
                        "tool `{}` of {server} left out: its input schema {why}",
                        tool.name
                    ));
                    continue;
                }
            };
            self.tools.push(ToolSpec {
                name: name.clone(),
                description,
                input_schema,
            });
            self.routes.insert(
                name,
                Route {
                    session,
                    tool: tool.name,
                    install: install.to_owned(),
                    server: server.to_owned(),
                    gated: false,
                },
            );
        }
    }

    /// Gates the offered tools of `session` that `gated(tool, offered)`
    /// says (`gate::gated`): their calls wait for an approval.
    pub fn gate(&mut self, session: usize, gated: impl Fn(&str, &str) -> bool) {
        for (offered, route) in &mut self.routes {
            if route.session == session && gated(&route.tool, offered) {
                route.gated = true;
            }
        }
    }

    /// Whether any offered tool is gated.
    pub fn any_gated(&self) -> bool {
        self.routes.values().any(|r| r.gated)
    }

    /// The tools as offered to the model.
    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    /// The tools that could not be offered, each with why.
    pub fn left_out(&self) -> &[String] {
        &self.left_out
    }

    /// Where an offered name leads; `None` for a name that was not offered.
    pub fn route(&self, offered: &str) -> Option<&Route> {
        self.routes.get(offered)
    }
}

/// The first message of a reminder's run: its title and instruction.
pub fn reminder_prompt(title: &str, instruction: &str) -> Message {
    Message::user_text(format!(
        "It is time for the reminder the user set, titled \"{title}\". Their instruction: {instruction}\n\
         Write the reminder message to send them."
    ))
}

/// When a run's wall time ends: its timeout after `now`, or `latest` (the
/// invocation's deadline less what the settle needs), whichever comes first.
pub fn wall_deadline(limits: &Limits, now: DateTime<Utc>, latest: DateTime<Utc>) -> DateTime<Utc> {
    (now + Duration::seconds(i64::from(limits.timeout_seconds))).min(latest)
}

/// What is left of the time until `deadline` at `now`; zero once it passed.
pub fn time_left(deadline: DateTime<Utc>, now: DateTime<Utc>) -> StdDuration {
    (deadline - now).to_std().unwrap_or(StdDuration::ZERO)
}

/// A run that must go back to the queue rather than be recorded, with what
/// it spent before (model answers that called no tool).
#[derive(Debug, Clone, PartialEq)]
pub struct Requeue {
    pub usage: Usage,
    pub cost: f64,
    /// When the model pace has room for the run again (`domain::run::pace`):
    /// it goes back until then. `None`: back after the growing return of
    /// `domain::run::redelivery`.
    pub room_at: Option<DateTime<Utc>>,
}

/// How the loop ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Succeeded or failed: recorded by the settle.
    /// Boxed: an outcome is large beside the requeue.
    Run(Box<Outcome>),
    /// Given back unrecorded.
    Requeue(Requeue),
    /// Stopped at a gated tool call (`domain::run::gate`), before any call
    /// of its turn: the occurrence waits for an approver.
    Awaiting(Box<Parked>),
}

/// A run stopped at a gated call: the request it puts, and what it spent.
#[derive(Debug, Clone, PartialEq)]
pub struct Parked {
    pub approval: super::gate::CallApproval,
    pub usage: Usage,
    pub cost: f64,
}

/// One model call the loop allows: the request, its `max_tokens` the least
/// of the output tokens left and what the per-run budget still pays for.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub request: ModelRequest,
    /// The output tokens the per-run budget pays for (`u64::MAX` without one).
    affordable: u64,
}

/// What the loop does after a model answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    Stop(Ended),
    /// The model asked for tools: these `(id, offered name, input)` calls,
    /// in order, each to be passed to [`AgentLoop::tool_call`].
    CallTools(Vec<(String, String, Value)>),
}

/// What becomes of one tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolCall {
    /// Counted; make the call on this route.
    Allowed(Route),
    /// Not a tool of this run: counted as refused, answered with this result.
    Refused(Block),
    /// The tool-call limit is reached: the run stops.
    OverLimit(Ended),
}

/// A run's conversation and the bookkeeping that enforces its limits.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentLoop {
    messages: Vec<Message>,
    toolbox: Toolbox,
    limits: Limits,
    /// The per-run budget in USD, when the task has one.
    run_budget: Option<f64>,
    price: Price,
    wall_deadline: DateTime<Utc>,
    /// The model's own `maxTokens` ceiling (`model::max_output_tokens`).
    model_max_tokens: u32,
    /// The shortest prefix the model's prompt cache takes
    /// (`model::cache_minimum`), when the run caches (its price has cache
    /// prices); `None`: no cache point is placed.
    cache_minimum: Option<u64>,
    /// How many messages the task's own prompt is: the same every turn.
    stable_messages: usize,
    /// What the run may still hold from its servers
    /// (`agent::MAX_HELD_BYTES` less the prompt and results so far).
    held_room: usize,
    usage: Usage,
    /// The latest non-empty text the model wrote: a failed run's output.
    last_text: Option<String>,
    /// The last call's input and output: the next input is at least this.
    input_floor: u64,
}

impl AgentLoop {
    pub fn new(
        messages: Vec<Message>,
        toolbox: Toolbox,
        limits: Limits,
        run_budget: Option<f64>,
        price: Price,
        wall_deadline: DateTime<Utc>,
    ) -> Self {
        let mut messages = messages;
        let mut room = super::agent::MAX_HELD_BYTES;
        for message in &mut messages {
            room = super::agent::bound_held(&mut message.content, room);
        }
        Self {
            stable_messages: messages.len(),
            messages,
            toolbox,
            limits,
            run_budget,
            price,
            wall_deadline,
            model_max_tokens: u32::MAX,
            cache_minimum: None,
            usage: Usage::default(),
            last_text: None,
            input_floor: 0,
            held_room: room,
        }
    }

    pub fn usage(&self) -> Usage {
        self.usage
    }

    /// The run's conversation so far.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    fn cost(&self) -> f64 {
        self.price.cost(self.usage.tokens())
    }

    /// The run fails with `reason`, keeping what it used and its last text.
    fn fail(&self, reason: String) -> Ended {
        Ended::Run(Box::new(Outcome::failed(
            reason,
            self.usage,
            self.cost(),
            self.last_text.as_deref().map(cap_output),
        )))
    }

    fn budget_reached(&self) -> Ended {
        self.fail(format!(
            "per-run budget of ${:.4} reached",
            self.run_budget.unwrap_or_default()
        ))
    }

    fn output_limit_reached(&self) -> Ended {
        self.fail(format!(
            "output token limit of {} reached",
            self.limits.max_output_tokens
        ))
    }

    /// The next model call, or why there is none: the turn limit, the
    /// per-run budget (checked before the output tokens), the output tokens.
    pub fn next_turn(&self) -> Result<Turn, Ended> {
        if self.usage.turns >= self.limits.max_turns {
            return Err(self.fail(format!("turn limit of {} reached", self.limits.max_turns)));
        }
        let tokens_left = u64::from(self.limits.max_output_tokens).saturating_sub(self.usage.output_tokens);
        let mut request = ModelRequest {
            system: SYSTEM_PROMPT.to_owned(),
            messages: self.messages.clone(),
            tools: self.toolbox.tools.clone(),
            max_tokens: 0,
            cache: super::agent::CachePoints::default(),
        };
        // The call is charged for its input too: what is left of the
        // per-run budget after that pays for its output.
        let affordable = self.run_budget.map_or(u64::MAX, |b| {
            let input = request.input_estimate().max(self.input_floor);
            self.price.affordable_output(b - self.cost(), input)
        });
        if affordable == 0 {
            return Err(self.budget_reached());
        }
        if tokens_left == 0 {
            return Err(self.output_limit_reached());
        }
        // Never above the model's own ceiling (Bedrock refuses it).
        request.max_tokens = u32::try_from(tokens_left.min(affordable))
            .unwrap_or(u32::MAX)
            .min(self.model_max_tokens);
        // At most 20 images in one request: the latest ones.
        super::agent::bound_images(&mut request.messages);
        request.cache = super::agent::CachePoints::place(&request, self.cache_minimum, self.stable_messages);
        Ok(Turn { request, affordable })
    }

    /// The model's own `maxTokens` ceiling, which no request exceeds.
    pub fn with_model_max_tokens(mut self, max: u32) -> Self {
        self.model_max_tokens = max.max(1);
        self
    }

    /// Prompt caching for a model whose cache takes a prefix of at least
    /// `minimum` tokens (`model::cache_minimum`): only when the run's price
    /// has cache prices, so no cached token goes unpriced.
    pub fn with_cache_minimum(mut self, minimum: Option<u64>) -> Self {
        self.cache_minimum = minimum.filter(|_| self.price.caches());
        self
    }

    /// What is left of the run's wall time at `now`; zero once it is over.
    pub fn time_left(&self, now: DateTime<Utc>) -> StdDuration {
        time_left(self.wall_deadline, now)
    }

    /// The run's wall time is over.
    pub fn out_of_time(&self) -> Ended {
        self.fail(format!("time limit of {} s reached", self.limits.timeout_seconds))
    }

    /// The model did not answer within the run's time (an answer that
    /// stalled, or one slower than the run may wait): as a run throttled
    /// to its end, back to the queue if it called no tool yet (the
    /// occurrence runs again within its catch-up window), and out of time
    /// after one (it cannot be repeated safely).
    pub fn unanswered(&self) -> Ended {
        if self.usage.tool_calls == 0 {
            return self.no_answer_in_time(None);
        }
        self.out_of_time()
    }

    /// A model call was throttled at `now` and the next try would wait
    /// `wait`: `None` to retry, when that still ends inside the wall time;
    /// else the run goes back to the queue if it called no tool yet (load,
    /// not failure), and fails as [`MODEL_THROTTLED`] after one (it cannot
    /// be repeated safely).
    pub fn throttled(&self, now: DateTime<Utc>, wait: StdDuration) -> Option<Ended> {
        let in_time = Duration::from_std(wait)
            .ok()
            .is_some_and(|w| now + w < self.wall_deadline);
        if in_time {
            return None;
        }
        Some(self.no_answer_in_time(None))
    }

    /// The model pace has no slot for the next call within the run's reach
    /// (`pace::Refusal::Full`; room from `room_at`): as a run throttled to
    /// its end, it goes back to the queue until then if it called no tool
    /// yet, and fails as [`MODEL_THROTTLED`] after one.
    pub fn paced(&self, room_at: DateTime<Utc>) -> Ended {
        self.no_answer_in_time(Some(room_at))
    }

    /// No model answer within the run's time: back to the queue before any
    /// tool call, failed after one.
    fn no_answer_in_time(&self, room_at: Option<DateTime<Utc>>) -> Ended {
        if self.usage.tool_calls == 0 {
            return Ended::Requeue(Requeue {
                usage: self.usage,
                cost: self.cost(),
                room_at,
            });
        }
        self.fail(MODEL_THROTTLED.to_owned())
    }

    /// Where an offered name leads (`None`: not offered).
    pub fn route(&self, offered: &str) -> Option<&Route> {
        self.toolbox.route(offered)
    }

    /// Whether any offered tool is gated.
    pub fn any_gated(&self) -> bool {
        self.toolbox.any_gated()
    }

    /// The offered name and route of `target`'s tool, if offered: on its
    /// install, or, for a target that names none (a request of an earlier
    /// release), on its server.
    pub fn offered(&self, target: super::gate::Target<'_>) -> Option<(String, Route)> {
        self.toolbox
            .routes
            .iter()
            .find(|(_, r)| {
                (target.install.is_empty() || r.install == target.install)
                    && r.server == target.server
                    && r.tool == target.tool
            })
            .map(|(name, r)| (name.clone(), r.clone()))
    }

    /// A call made before this attempt's first model call (the resumed
    /// run's approved call, `domain::run::gate`, or a journaled one,
    /// [`AgentLoop::replay`]): counted as a call of the occurrence when
    /// `counted`, and the conversation goes on from it (`offered` with
    /// `input`, as the model asked it) and its answer (`result`, bounded as any).
    pub fn carry(&mut self, offered: &str, id: &str, input: Value, result: Block, counted: bool) {
        self.usage.tool_calls += u32::from(counted);
        self.messages.push(Message {
            role: Role::Assistant,
            content: vec![Block::ToolUse {
                id: id.to_owned(),
                name: offered.to_owned(),
                input,
            }],
        });
        let result = self.held(result);
        self.messages.push(Message {
            role: Role::User,
            content: vec![result],
        });
    }

    /// A call an earlier attempt of the occurrence made, read back from
    /// its journal (`domain::run::journal`) before this attempt's first
    /// model call: counted as a call of the occurrence and put in the
    /// conversation as the model asked it and as the server answered
    /// (bounded as any answer), so the model goes on from it and never asks
    /// for it as new. A tool no longer offered is told in words (Converse
    /// takes no `toolUse` of a tool it is not offered).
    pub fn replay(&mut self, call: &super::journal::JournaledCall) {
        let id = format!("journaled_{}", call.position);
        let target = super::gate::Target {
            install: &call.install,
            server: &call.server,
            tool: &call.tool,
        };
        if let Some((offered, _)) = self.offered(target) {
            self.carry(&offered, &id, call.input(), call.answer(&id), true);
            return;
        }
        self.usage.tool_calls += 1;
        self.messages.push(Message {
            role: Role::Assistant,
            content: vec![Block::Text(format!(
                "Earlier in this run I called `{}` of {} with {}.",
                call.tool, call.server, call.arguments
            ))],
        });
        let answer = self.held(Block::Text(format!(
            "That call was made once and is not made again; it answered{}: {}",
            if call.is_error { " with an error" } else { "" },
            call.answer
        )));
        self.messages.push(Message {
            role: Role::User,
            content: vec![answer],
        });
    }

    /// The run stops at a gated call and puts `approval` to an approver,
    /// with what it spent.
    pub fn ask(&self, approval: super::gate::CallApproval) -> Ended {
        Ended::Awaiting(Box::new(Parked {
            approval,
            usage: self.usage,
            cost: self.cost(),
        }))
    }

    /// A gated call whose arguments are too large to put to an approver
    /// (`gate::MAX_ARGUMENT_BYTES`): the run fails, the call not made.
    pub fn too_large_to_ask(&self, tool: &str) -> Ended {
        self.fail(format!(
            "a call of `{tool}` waits for an approval, and its arguments exceed the {} bytes an approver is shown",
            super::gate::MAX_ARGUMENT_BYTES
        ))
    }

    /// The approved call cannot be made: the run fails, saying why.
    pub fn approved_call_failed(&self, why: String) -> Ended {
        self.fail(why)
    }

    /// The occurrence asked as often as it may (`gate::MAX_ASKS`): the run fails.
    pub fn asked_too_often(&self) -> Ended {
        self.fail(format!(
            "the run asked for approval of a tool call {} times in this occurrence",
            super::gate::MAX_ASKS
        ))
    }

    /// The model call failed otherwise: the run fails with its message.
    pub fn model_failed(&self, message: String) -> Ended {
        self.fail(message)
    }

    /// Counts the model's answer to `turn` into the usage and the
    /// conversation, then decides: succeeded (its text the output), failed
    /// (the per-run budget exceeded, the output tokens or the budget
    /// reached, another stop reason), or the tools it asks for.
    pub fn answered(&mut self, turn: &Turn, reply: ModelReply) -> Next {
        self.usage.turns += 1;
        self.usage.input_tokens += reply.input_tokens;
        self.usage.output_tokens += reply.output_tokens;
        self.usage.cache_write_input_tokens += reply.cache_write_tokens;
        self.usage.cache_read_input_tokens += reply.cache_read_tokens;
        self.input_floor =
            reply.input_tokens + reply.cache_write_tokens + reply.cache_read_tokens + reply.output_tokens;
        let text = reply.message.text();
        if !text.is_empty() {
            self.last_text = Some(text.clone());
        }
        let calls: Vec<(String, String, Value)> = reply
            .message
            .content
            .iter()
            .filter_map(|block| match block {
                Block::ToolUse { id, name, input } => Some((id.clone(), name.clone(), input.clone())),
                _ => None,
            })
            .collect();
        self.messages.push(reply.message);
        if let Some(b) = self.run_budget
            && self.cost() > b
        {
            return Next::Stop(self.fail(format!("per-run budget of ${b:.4} exceeded")));
        }
        let stop = match reply.stop {
            StopReason::EndTurn | StopReason::StopSequence => Ended::Run(Box::new(Outcome {
                status: RunStatus::Succeeded,
                reason: None,
                usage: self.usage,
                output: Some(cap_output(&text)),
                cost: self.cost(),
                notes: Vec::new(),
            })),
            StopReason::MaxTokens
                if u64::from(turn.request.max_tokens) == turn.affordable && self.run_budget.is_some() =>
            {
                self.budget_reached()
            }
            StopReason::MaxTokens => self.output_limit_reached(),
            StopReason::Other(reason) => self.fail(format!("the model stopped: {reason}")),
            StopReason::ToolUse => return Next::CallTools(calls),
        };
        Next::Stop(stop)
    }

    /// Decides one tool call the model asked for, by its offered `name`.
    pub fn tool_call(&mut self, id: &str, name: &str) -> ToolCall {
        let Some(route) = self.toolbox.route(name).cloned() else {
            self.usage.refused_tool_calls += 1;
            return ToolCall::Refused(Block::ToolResult {
                id: id.to_owned(),
                content: vec![Block::Text(format!("refused: `{name}` is not a tool of this task"))],
                is_error: true,
            });
        };
        if self.usage.tool_calls >= self.limits.max_tool_calls {
            return ToolCall::OverLimit(
                self.fail(format!("tool call limit of {} reached", self.limits.max_tool_calls)),
            );
        }
        self.usage.tool_calls += 1;
        ToolCall::Allowed(route)
    }

    /// A call was made and its journal entry could not be written: the run
    /// fails (a later attempt could not tell it was made), the call counted,
    /// also when it was made outside a model's turn (`uncounted`: the
    /// resumed run's approved call, which [`AgentLoop::carry`] counts after).
    pub fn unjournaled(&self, why: String, uncounted: bool) -> Ended {
        let mut usage = self.usage;
        usage.tool_calls += u32::from(uncounted);
        Ended::Run(Box::new(Outcome::failed(
            why,
            usage,
            self.cost(),
            self.last_text.as_deref().map(cap_output),
        )))
    }

    /// A gated call [`AgentLoop::tool_call`] allowed was answered without
    /// being made (made by an earlier attempt, or refused): not counted as
    /// a call of this run.
    pub fn not_made(&mut self) {
        self.usage.tool_calls = self.usage.tool_calls.saturating_sub(1);
    }

    /// One tool result as it arrives, bounded against what the run may
    /// still hold (`agent::MAX_HELD_BYTES` over the whole run): what does
    /// not fit is left out and says so, so a turn of many large results
    /// never holds more than the run's room at once.
    pub fn held(&mut self, result: Block) -> Block {
        let mut one = [result];
        self.held_room = super::agent::bound_held(&mut one, self.held_room);
        let [result] = one;
        result
    }

    /// Answers the model's tool calls with their results (each already
    /// [`AgentLoop::held`]), in one user message; a run whose model asked
    /// for tools but named none fails.
    pub fn tool_results(&mut self, results: Vec<Block>) -> Result<(), Ended> {
        if results.is_empty() {
            return Err(self.fail("the model asked for tools but named none".to_owned()));
        }
        self.messages.push(Message {
            role: Role::User,
            content: results,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap()
    }

    fn limits() -> Limits {
        Limits {
            max_turns: 3,
            max_tool_calls: 1,
            max_output_tokens: 100,
            timeout_seconds: 60,
        }
    }

    const PRICE: Price = Price {
        input_per_mtok: 1_000.0,
        output_per_mtok: 10_000.0,
        cache_write_per_mtok: None,
        cache_read_per_mtok: None,
    };

    fn tool(name: &str, description: &str, schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: schema,
        }
    }

    fn with_tools(limits: Limits, run_budget: Option<f64>) -> AgentLoop {
        let mut toolbox = Toolbox::default();
        toolbox.offer(
            ("ins_issues", "issues"),
            0,
            vec![tool("list", "Lists.", json!({"type": "object"}))],
            |_| true,
        );
        AgentLoop::new(
            vec![Message::user_text("go")],
            toolbox,
            limits,
            run_budget,
            PRICE,
            now() + Duration::seconds(60),
        )
    }

    fn reply(stop: StopReason, content: Vec<Block>, input: u64, output: u64) -> ModelReply {
        ModelReply {
            message: Message {
                role: Role::Assistant,
                content,
            },
            stop,
            input_tokens: input,
            output_tokens: output,
            cache_write_tokens: 0,
            cache_read_tokens: 0,
        }
    }

    fn use_tool(id: &str, name: &str) -> Block {
        Block::ToolUse {
            id: id.into(),
            name: name.into(),
            input: json!({}),
        }
    }

    fn reason(ended: &Ended) -> Option<&str> {
        match ended {
            Ended::Run(outcome) => outcome.reason.as_deref(),
            Ended::Requeue(_) | Ended::Awaiting(_) => None,
        }
    }

    #[test]
    fn a_schema_gets_its_root_object_type_or_its_tool_is_left_out_and_said_why() {
        assert_eq!(converse_schema(json!({})), Ok(json!({"type": "object"})));
        assert_eq!(
            converse_schema(json!({"properties": {"q": {"type": "string"}}})),
            Ok(json!({"type": "object", "properties": {"q": {"type": "string"}}}))
        );
        assert_eq!(converse_schema(json!(null)), Ok(json!({"type": "object"})));
        assert!(converse_schema(json!({"anyOf": [{"type": "object"}]})).is_err());
        assert!(converse_schema(json!({"type": "string"})).is_err());
        assert!(converse_schema(json!({"type": ["object", "null"]})).is_err());
        let mut toolbox = Toolbox::default();
        toolbox.offer(
            ("ins_s", "s"),
            0,
            vec![
                tool("ok", "d", json!({})),
                tool("union", "d", json!({"oneOf": [{"type": "object"}]})),
            ],
            |_| true,
        );
        assert_eq!(toolbox.tools().len(), 1);
        assert!(toolbox.left_out()[0].contains("`union`"), "{:?}", toolbox.left_out());
    }

    #[test]
    fn only_admitted_tools_are_offered_namespaced_described_and_with_an_object_schema() {
        let mut toolbox = Toolbox::default();
        let listed = vec![
            tool("list", "", json!("not a schema")),
            tool("delete", "Deletes.", json!({"type": "object"})),
        ];
        toolbox.offer(("ins_issues", "issues"), 0, listed, |name| name == "list");
        toolbox.offer(
            ("ins_chat", "chat"),
            1,
            vec![tool("post", "Posts.", json!({"type": "object"}))],
            |_| true,
        );
        assert_eq!(
            toolbox.tools(),
            &[
                tool("issues__list", "list", json!({"type": "object"})),
                tool("chat__post", "Posts.", json!({"type": "object"})),
            ]
        );
        assert_eq!(
            toolbox.route("chat__post"),
            Some(&Route {
                session: 1,
                tool: "post".into(),
                install: "ins_chat".into(),
                server: "chat".into(),
                gated: false,
            })
        );
        assert_eq!(toolbox.route("issues__delete"), None, "not admitted, not routed");
    }

    #[test]
    fn two_pairs_that_read_alike_are_told_apart_and_a_third_is_not_offered() {
        let mut toolbox = Toolbox::default();
        toolbox.offer(("ins_a", "a"), 0, vec![tool("b__c", "1", json!({}))], |_| true);
        toolbox.offer(("ins_a__b", "a__b"), 1, vec![tool("c", "2", json!({}))], |_| true);
        toolbox.offer(("ins_a__b", "a__b"), 2, vec![tool("c", "3", json!({}))], |_| true);
        let names: Vec<&str> = toolbox.tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a__b__c", hashed_name("a__b", "c").as_str()]);
        assert_eq!(toolbox.route(names[1]).map(|r| r.session), Some(1));
    }

    #[test]
    fn a_call_to_a_tool_not_offered_is_refused_and_counted_and_the_limit_stops_the_run() {
        let mut run = with_tools(limits(), None);
        let turn = run.next_turn().unwrap();
        assert_eq!(turn.request.tools.len(), 1);
        assert_eq!(turn.request.max_tokens, 100);
        let asked = run.answered(
            &turn,
            reply(
                StopReason::ToolUse,
                vec![
                    use_tool("1", "shell__exec"),
                    use_tool("2", "issues__list"),
                    use_tool("3", "issues__list"),
                ],
                10,
                5,
            ),
        );
        let Next::CallTools(calls) = asked else {
            panic!("{asked:?}")
        };
        assert_eq!(calls.len(), 3);
        assert!(matches!(
            run.tool_call("1", "shell__exec"),
            ToolCall::Refused(Block::ToolResult { is_error: true, .. })
        ));
        assert_eq!(
            run.tool_call("2", "issues__list"),
            ToolCall::Allowed(Route {
                session: 0,
                tool: "list".into(),
                install: "ins_issues".into(),
                server: "issues".into(),
                gated: false,
            })
        );
        let ToolCall::OverLimit(ended) = run.tool_call("3", "issues__list") else {
            panic!("the second call is over the limit of one")
        };
        assert_eq!(reason(&ended), Some("tool call limit of 1 reached"));
        let usage = run.usage();
        assert_eq!((usage.tool_calls, usage.refused_tool_calls, usage.turns), (1, 1, 1));
    }

    #[test]
    fn the_loop_stops_at_the_turn_limit_with_the_last_text_as_output() {
        let mut run = with_tools(
            Limits {
                max_turns: 1,
                ..limits()
            },
            None,
        );
        let turn = run.next_turn().unwrap();
        let next = run.answered(
            &turn,
            reply(
                StopReason::ToolUse,
                vec![Block::Text("working".into()), use_tool("1", "issues__list")],
                1,
                1,
            ),
        );
        assert!(matches!(next, Next::CallTools(_)));
        assert!(matches!(run.tool_call("1", "issues__list"), ToolCall::Allowed(_)));
        run.tool_results(vec![Block::Text("ok".into())]).unwrap();
        let Err(Ended::Run(outcome)) = run.next_turn() else {
            panic!("the turn limit stops the run")
        };
        assert_eq!(outcome.status, RunStatus::Failed);
        assert_eq!(outcome.reason.as_deref(), Some("turn limit of 1 reached"));
        assert_eq!(outcome.output.as_deref(), Some("working"));
        assert_eq!(run.messages().len(), 3, "prompt, answer, results");
    }

    #[test]
    fn tool_results_are_bounded_as_they_arrive_against_the_runs_room() {
        use crate::domain::run::agent::{HELD_LEFT_OUT, MAX_HELD_BYTES};
        let mut run = with_tools(limits(), None);
        let big = || Block::ToolResult {
            id: "1".into(),
            content: vec![Block::Text("x".repeat(MAX_HELD_BYTES / 5 * 2))],
            is_error: false,
        };
        let kept: Vec<Block> = (0..4).map(|_| run.held(big())).collect();
        let texts: Vec<bool> = kept
            .iter()
            .map(|b| match b {
                Block::ToolResult { content, .. } => matches!(&content[0], Block::Text(t) if t != HELD_LEFT_OUT),
                _ => false,
            })
            .collect();
        assert_eq!(
            texts,
            [true, true, false, false],
            "the third result no longer fits beside two others, nor any after it"
        );
    }

    #[test]
    fn an_end_turn_succeeds_with_its_text_and_its_cost() {
        let mut run = with_tools(limits(), None);
        let turn = run.next_turn().unwrap();
        let Next::Stop(Ended::Run(outcome)) = run.answered(
            &turn,
            reply(StopReason::EndTurn, vec![Block::Text("done".into())], 1_000, 100),
        ) else {
            panic!("an end turn stops the loop")
        };
        assert_eq!(outcome.status, RunStatus::Succeeded);
        assert_eq!(outcome.output.as_deref(), Some("done"));
        assert!((outcome.cost - 2.0).abs() < 1e-9, "{}", outcome.cost);
    }

    #[test]
    fn output_tokens_bound_each_call_and_their_end_stops_the_run() {
        let mut run = with_tools(limits(), None);
        let turn = run.next_turn().unwrap();
        let next = run.answered(&turn, reply(StopReason::ToolUse, vec![use_tool("1", "x")], 1, 60));
        assert!(matches!(next, Next::CallTools(_)));
        assert!(matches!(run.tool_call("1", "x"), ToolCall::Refused(_)));
        run.tool_results(vec![Block::Text("refused".into())]).unwrap();
        let turn = run.next_turn().unwrap();
        assert_eq!(turn.request.max_tokens, 40, "what is left of 100");
        let Next::Stop(ended) = run.answered(&turn, reply(StopReason::MaxTokens, vec![], 1, 40)) else {
            panic!()
        };
        assert_eq!(reason(&ended), Some("output token limit of 100 reached"));
        assert_eq!(
            reason(&run.next_turn().unwrap_err()),
            Some("output token limit of 100 reached"),
            "nothing left for a third call"
        );
    }

    #[test]
    fn the_per_run_budget_pays_for_the_input_first_and_bounds_the_output() {
        // At $0.001 an input token and $0.01 an output token, $1 pays for the
        // request's input estimate (about a hundred tokens) first, and what is
        // left for fewer than the hundred output tokens the limit allows.
        let run = with_tools(limits(), Some(0.0));
        assert_eq!(
            reason(&run.next_turn().unwrap_err()),
            Some("per-run budget of $0.0000 reached")
        );

        let mut run = with_tools(limits(), Some(1.0));
        let turn = run.next_turn().unwrap();
        let input = turn.request.input_estimate();
        let affordable = PRICE.affordable_output(1.0, input);
        assert_eq!(u64::from(turn.request.max_tokens), affordable.min(100));
        assert!(
            affordable < 100,
            "the budget binds before the output limit: {affordable}"
        );
        let Next::Stop(ended) = run.answered(&turn, reply(StopReason::MaxTokens, vec![], input, affordable)) else {
            panic!()
        };
        assert_eq!(reason(&ended), Some("per-run budget of $1.0000 reached"));

        let mut run = with_tools(limits(), Some(1.0));
        let turn = run.next_turn().unwrap();
        let Next::Stop(ended) = run.answered(
            &turn,
            reply(StopReason::EndTurn, vec![Block::Text("x".into())], 2_000, 0),
        ) else {
            panic!()
        };
        assert_eq!(reason(&ended), Some("per-run budget of $1.0000 exceeded"));
    }

    #[test]
    fn a_throttled_call_retries_in_time_then_requeues_before_a_tool_call_and_fails_after_one() {
        let mut run = with_tools(limits(), None);
        assert_eq!(run.throttled(now(), StdDuration::from_secs(1)), None);
        let late = run.throttled(now(), StdDuration::from_secs(60));
        assert_eq!(
            late,
            Some(Ended::Requeue(Requeue {
                usage: Usage::default(),
                cost: 0.0,
                room_at: None,
            }))
        );
        let room = now() + Duration::seconds(90);
        assert_eq!(
            run.paced(room),
            Ended::Requeue(Requeue {
                usage: Usage::default(),
                cost: 0.0,
                room_at: Some(room),
            }),
            "no slot within reach: back until the pace has room"
        );
        let turn = run.next_turn().unwrap();
        let _ = run.answered(
            &turn,
            reply(StopReason::ToolUse, vec![use_tool("1", "issues__list")], 1, 1),
        );
        assert!(matches!(run.tool_call("1", "issues__list"), ToolCall::Allowed(_)));
        assert_eq!(
            reason(&run.throttled(now(), StdDuration::from_secs(60)).unwrap()),
            Some(MODEL_THROTTLED)
        );
        assert_eq!(reason(&run.paced(room)), Some(MODEL_THROTTLED));
    }

    #[test]
    fn an_unanswered_call_requeues_before_a_tool_call_and_is_out_of_time_after_one() {
        let mut run = with_tools(limits(), None);
        assert_eq!(
            run.unanswered(),
            Ended::Requeue(Requeue {
                usage: Usage::default(),
                cost: 0.0,
                room_at: None,
            })
        );
        let turn = run.next_turn().unwrap();
        let _ = run.answered(
            &turn,
            reply(StopReason::ToolUse, vec![use_tool("1", "issues__list")], 1, 1),
        );
        assert!(matches!(run.tool_call("1", "issues__list"), ToolCall::Allowed(_)));
        assert_eq!(reason(&run.unanswered()), Some("time limit of 60 s reached"));
    }

    #[test]
    fn wall_time_ends_at_the_timeout_or_the_latest_instant_and_its_end_fails_the_run() {
        let limits = limits();
        assert_eq!(
            wall_deadline(&limits, now(), now() + Duration::hours(1)),
            now() + Duration::seconds(60)
        );
        assert_eq!(
            wall_deadline(&limits, now(), now() + Duration::seconds(5)),
            now() + Duration::seconds(5)
        );
        let run = with_tools(limits, None);
        assert_eq!(run.time_left(now()), StdDuration::from_secs(60));
        assert_eq!(run.time_left(now() + Duration::hours(1)), StdDuration::ZERO);
        assert_eq!(reason(&run.out_of_time()), Some("time limit of 60 s reached"));
    }

    #[test]
    fn other_stops_and_empty_tool_answers_fail_the_run() {
        let mut run = with_tools(limits(), None);
        let turn = run.next_turn().unwrap();
        let Next::Stop(ended) = run.answered(
            &turn,
            reply(StopReason::Other("guardrail_intervened".into()), vec![], 1, 1),
        ) else {
            panic!()
        };
        assert_eq!(reason(&ended), Some("the model stopped: guardrail_intervened"));
        assert_eq!(
            reason(&run.tool_results(vec![]).unwrap_err()),
            Some("the model asked for tools but named none")
        );
        assert_eq!(reason(&run.model_failed("boom".into())), Some("boom"));
    }
}
