//! Steps 4 and 5 begun: the procedure a run starts from, the sessions and
//! tools it is offered, and the agent loop set up within the run's limits.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::agent::RunIds;
use super::clock::RunClock;
use super::{RunSettings, Runner, SETTLE_RESERVE_SECONDS};
use crate::app::mcp_step;
use crate::domain::run::agent::{Message, ModelRequest, ToolSpec, prompt_conversation};
use crate::domain::run::agent_loop::{self, AgentLoop, Ended, Toolbox, reminder_prompt, time_left};
use crate::domain::run::journal::Journal;
use crate::domain::run::occurrence::{Delivery, Outcome, Usage, run_id};
use crate::domain::task::install::Install;
use crate::domain::task::{Provenance, Task, TaskKind};
use crate::ports::{Connectors, McpError, McpSession, Model, RunStore, ServerTool};
use crate::trace::{AgentFacts, key};

/// What a run starts from: its first messages, the tools it is offered, and
/// the open sessions they lead to (a route's `session` indexes `sessions`).
struct Setup<T> {
    messages: Vec<Message>,
    toolbox: Toolbox,
    sessions: Vec<T>,
}

impl<T> Setup<T> {
    fn new(messages: Vec<Message>) -> Self {
        Self {
            messages,
            toolbox: Toolbox::default(),
            sessions: Vec::new(),
        }
    }

    /// Keeps `session` and offers the tools of `server` it listed that pass
    /// `admit`, gating those its annotations or `ask_first` gate.
    fn offer(
        &mut self,
        (install, server): (&str, &str),
        listed: Vec<ServerTool>,
        admit: impl Fn(&str) -> bool,
        ask_first: &BTreeSet<String>,
        session: T,
    ) {
        let index = self.sessions.len();
        self.sessions.push(session);
        let destructive: BTreeSet<String> = listed
            .iter()
            .filter(|t| t.destructive)
            .map(|t| t.name.clone())
            .collect();
        let listed = listed
            .into_iter()
            .map(|tool| ToolSpec {
                name: tool.name,
                description: tool.description,
                input_schema: tool.input_schema,
            })
            .collect();
        self.toolbox.offer((install, server), index, listed, admit);
        self.toolbox.gate(index, |tool, offered| {
            crate::domain::run::gate::gated(destructive.contains(tool), ask_first, tool, offered)
        });
    }
}

/// The tools an admin gated at approval (`Approval::ask_first`).
fn ask_first(task: &Task) -> BTreeSet<String> {
    task.approval.as_ref().map(|a| a.ask_first.clone()).unwrap_or_default()
}

fn connect_failed(message: String) -> McpError {
    McpError {
        operation: "connect",
        code: None,
        message,
    }
}

/// A prompt's messages as a run's conversation starts (`prompts/get`'s
/// answer made one Converse takes); a prompt with nothing to run fails.
fn prompt_messages(prompt: Vec<Message>) -> Result<Vec<Message>, McpError> {
    let messages = prompt_conversation(prompt);
    if messages.is_empty() {
        return Err(McpError {
            operation: "prompts/get",
            code: None,
            message: "the prompt has no content to run".into(),
        });
    }
    Ok(messages)
}

/// The agent loop of a run: its limits bounded by the current ceilings,
/// its per-run budget, the model's price and `maxTokens` ceiling. `Err`
/// when the model has no price (the run fails at its start).
fn agent_loop_of(
    task: &Task,
    messages: Vec<Message>,
    toolbox: Toolbox,
    settings: &RunSettings,
    wall_deadline: DateTime<Utc>,
) -> Result<AgentLoop, String> {
    let price = settings.prices.of(&settings.model_id).map_err(|e| e.to_string())?;
    let limits = settings.ceilings.bound(task.spec.limits);
    // What the claim reserved in the workspace: the run never passes it.
    let run_budget = crate::domain::task::budget::run_ceiling(task);
    Ok(
        AgentLoop::new(messages, toolbox, limits, run_budget, price, wall_deadline)
            .with_model_max_tokens(crate::domain::run::model::max_output_tokens(&settings.model_id))
            .with_cache_minimum(crate::domain::run::model::cache_minimum(&settings.model_id)),
    )
}

/// A connector task's first model request, as a run at `now` would send it
/// to Converse, from what its server answered: `prompts/get` with the
/// approved arguments and `tools/list` of its own tools (connectors bound to
/// its needs left out). No model is called; `sat check --dry-run` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstRequest {
    pub request: ModelRequest,
    /// What could not be offered, and why (as the run record would say).
    pub left_out: Vec<String>,
}

/// Builds [`FirstRequest`] the way [`Runner`] starts a run: the prompt made
/// one Converse takes, the approved tools offered under Converse's names,
/// the limits and budget of the spec within the ceilings. `Err` says why
/// the run would fail before its first model call, in the run's words.
pub fn first_request(
    task: &Task,
    server: &str,
    prompt: Vec<Message>,
    own_tools: Vec<ServerTool>,
    settings: &RunSettings,
    now: DateTime<Utc>,
) -> Result<FirstRequest, String> {
    let messages = prompt_messages(prompt).map_err(|e| e.to_string())?;
    let mut setup = Setup::new(messages);
    setup.offer(
        ("", server),
        own_tools,
        |name| task.spec.tools.contains(name),
        &ask_first(task),
        (),
    );
    let limits = settings.ceilings.bound(task.spec.limits);
    let wall_deadline = agent_loop::wall_deadline(&limits, now, now + Duration::seconds(limits.timeout_seconds.into()));
    let left_out = setup.toolbox.left_out().to_vec();
    let turns = agent_loop_of(task, setup.messages, setup.toolbox, settings, wall_deadline)?;
    match turns.next_turn() {
        Ok(turn) => Ok(FirstRequest {
            request: turn.request,
            left_out,
        }),
        Err(Ended::Run(outcome)) => Err(outcome
            .reason
            .unwrap_or_else(|| "the run stops before its first model call".into())),
        Err(Ended::Requeue(_) | Ended::Awaiting(_)) => {
            Err("the run would go back to the queue before its first model call".into())
        }
    }
}

/// Why a run's procedure could not be set up.
enum SetupError {
    /// The server answered with an error, or could not be reached: the run fails.
    Mcp(McpError),
    /// The setup did not finish within the run's time: the run goes back.
    TooSlow,
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    /// The procedure and the agent loop. Every failure here is the run's
    /// outcome, never an error of the delivery.
    pub(super) async fn run(
        &self,
        task: &Task,
        install: Option<&Install>,
        occ: &Delivery,
        (clock, journal): (&RunClock<'_>, &Journal),
        deadline: DateTime<Utc>,
    ) -> Ended {
        let now = clock.handled_at();
        let failed = |reason: String| Ended::Run(Box::new(Outcome::failed(reason, Usage::default(), 0.0, None)));
        // A run on a model without a price fails before anything is sent.
        if let Err(e) = self.settings.prices.of(&self.settings.model_id) {
            return failed(e.to_string());
        }
        // Ceilings bind at run time: lowering one brakes every task.
        let limits = self.settings.ceilings.bound(task.spec.limits);
        let latest = deadline - Duration::seconds(SETTLE_RESERVE_SECONDS);
        let wall_deadline = agent_loop::wall_deadline(&limits, now, latest);
        let setup = match self.procedure(task, install, (clock, wall_deadline)).await {
            Ok(setup) => setup,
            // Slow under load before any model call: load, not failure. The
            // occurrence goes back to run within its catch-up window.
            Err(SetupError::TooSlow) => {
                tracing::warn!("the connector setup did not finish within the run's time; the run goes back");
                return Ended::Requeue(agent_loop::Requeue {
                    usage: Usage::default(),
                    cost: 0.0,
                    room_at: None,
                });
            }
            Err(SetupError::Mcp(e)) => return failed(e.to_string()),
        };
        let notes = setup.toolbox.left_out().to_vec();
        let turns = match agent_loop_of(task, setup.messages, setup.toolbox, &self.settings, wall_deadline) {
            Ok(turns) => turns,
            Err(e) => return failed(e),
        };
        let run = run_id(task.task_id.as_str(), occ.scheduled);
        let ids = RunIds::of(task, occ, &run, (clock, journal), &self.settings);
        let lane = crate::domain::run::pace::Lane::of(task.kind);
        match self.agent_loop(turns, &setup.sessions, (&ids, journal), lane).await {
            // What could not be offered is on the record, whatever the outcome.
            Ended::Run(mut outcome) => {
                outcome.notes = notes;
                Ended::Run(outcome)
            }
            requeue => requeue,
        }
    }

    /// [`Runner::run`] in the occurrence's `invoke_agent` span, which
    /// records what the run used and how it ended (a code, never its
    /// reason's words).
    pub(super) async fn run_agent(
        &self,
        task: &Task,
        install: Option<&Install>,
        occ: &Delivery,
        (clock, journal): (&RunClock<'_>, &Journal),
        deadline: DateTime<Utc>,
    ) -> Ended {
        let name = match &task.provenance {
            Provenance::Connector { server, prompt, .. } => format!("{server}/{prompt}"),
            Provenance::User { .. } => "reminder".to_owned(),
        };
        let run = run_id(task.task_id.as_str(), occ.scheduled);
        let span = self.tracer.invoke_agent(&AgentFacts {
            name: &name,
            pinned: task.spec.agent.as_ref().map(|a| (a.id.as_str(), a.version.as_str())),
            model: &self.settings.model_id,
            run_id: &run,
        });
        let ended = span.run(self.run(task, install, occ, (clock, journal), deadline)).await;
        let usage = match &ended {
            Ended::Run(outcome) => {
                span.set(key::OUTCOME, outcome.status.as_str());
                if outcome.status == crate::domain::task::claim::RunStatus::Failed {
                    span.fail("run_failed");
                }
                outcome.usage
            }
            Ended::Requeue(requeue) => {
                span.set(
                    key::OUTCOME,
                    if requeue.room_at.is_some() { "paced" } else { "returned" },
                );
                requeue.usage
            }
            Ended::Awaiting(parked) => {
                span.set(key::OUTCOME, "awaiting_approval");
                parked.usage
            }
        };
        span.set(key::INPUT_TOKENS, usage.input_tokens as i64);
        span.set(key::OUTPUT_TOKENS, usage.output_tokens as i64);
        span.end();
        ended
    }

    /// Step 4: a reminder's instruction, or the connector's prompt and tools.
    async fn procedure(
        &self,
        task: &Task,
        install: Option<&Install>,
        (clock, wall_deadline): (&RunClock<'_>, DateTime<Utc>),
    ) -> Result<Setup<C::Session>, SetupError> {
        match task.kind {
            TaskKind::Reminder => {
                let instruction = task.instruction.as_deref().unwrap_or_default();
                Ok(Setup::new(vec![reminder_prompt(&task.title, instruction)]))
            }
            // The setup (connects, prompts/get, tools/list per binding) is
            // bounded by the run's wall time too, so the settle still fits.
            TaskKind::Connector => {
                let left = time_left(wall_deadline, clock.now());
                match tokio::time::timeout(left, self.connector_setup(task, install)).await {
                    Ok(setup) => setup.map_err(SetupError::Mcp),
                    Err(_) => Err(SetupError::TooSlow),
                }
            }
        }
    }

    /// The declaring server: `connect`, `prompts/get` with the approved
    /// arguments, `tools/list` (its approved tools offered); then the
    /// connectors bound to the task's needs.
    async fn connector_setup(&self, task: &Task, install: Option<&Install>) -> Result<Setup<C::Session>, McpError> {
        let (Provenance::Connector { prompt, .. }, Some(install)) = (&task.provenance, install) else {
            return Err(connect_failed("the connector task has no install".into()));
        };
        let session = mcp_step(self.tracer.mcp("initialize", None), self.connectors.connect(install)).await?;
        let messages = prompt_messages(
            mcp_step(
                self.tracer.mcp("prompts/get", Some(prompt)),
                session.get_prompt(prompt, &task.spec.arguments),
            )
            .await?,
        )?;
        let mut setup = Setup::new(messages);
        let own = mcp_step(
            self.tracer.mcp("tools/list", None),
            session.list_tools(Some(&task.spec.tools)),
        )
        .await?;
        let ask_first = ask_first(task);
        setup.offer(
            (&install.install_id, &install.server),
            own,
            |name| task.spec.tools.contains(name),
            &ask_first,
            session,
        );
        for install_id in task.spec.bindings.values().flatten() {
            let Some(bound) = self.bound_install(task, install_id).await? else {
                continue;
            };
            let session = mcp_step(self.tracer.mcp("initialize", None), self.connectors.connect(&bound)).await?;
            let tools = mcp_step(self.tracer.mcp("tools/list", None), session.list_tools(None)).await?;
            setup.offer((&bound.install_id, &bound.server), tools, |_| true, &ask_first, session);
        }
        Ok(setup)
    }

    /// A bound install as stored now (`RunStore::install`), if it may serve
    /// a need: the binding rule again, an installed workspace install of
    /// another server only (a stored binding that breaks it lends nothing).
    async fn bound_install(&self, task: &Task, install_id: &str) -> Result<Option<Install>, McpError> {
        match self.store.install(&task.workspace, install_id).await {
            Ok(Some(bound))
                if crate::domain::connector::binding::check_binding(
                    task,
                    install_id,
                    &BTreeMap::from([(install_id.to_owned(), bound.clone())]),
                )
                .is_ok() =>
            {
                Ok(Some(bound))
            }
            Ok(_) => {
                tracing::warn!(install_id = %install_id, "a bound install that may not serve a need is not offered");
                Ok(None)
            }
            Err(e) => Err(connect_failed(format!(
                "bound install {install_id} could not be read: {e}"
            ))),
        }
    }
}
