//! The run use case (SPEC §7): one runs-queue message becomes at most one
//! effective run of its occurrence, whatever Scheduler and SQS redeliver.
//!
//! 1. **Door** before any read: worker flag, lateness. A skip is recorded.
//! 2. **Claim**: one conditional write on the task item claims the occurrence
//!    (a lease until the function's deadline), reserves the run's maximum
//!    against the task's period budget, and returns the task, so the claim is
//!    also the task read. Refused, the old task says why: finished (a
//!    duplicate: acknowledged, nothing else), running
//!    under a live lease (retry later), running under an expired lease (take
//!    over), missing, or over budget.
//! 3. **Door** again with the task (and the install of a connector task).
//! 4. **Procedure**: a reminder's instruction, or `prompts/get` on the
//!    connector's server with the approved arguments, at every run. Any MCP
//!    error fails the run; it never withdraws the task.
//! 5. **Agent loop** on the model, offering exactly the approved tools,
//!    within the turn, tool-call, output-token, wall-time and budget limits.
//! 6. **Settle**: one transaction writes the run record, finishes the claim,
//!    settles the budget to the actual cost and charges the account; it is
//!    fenced on this execution still holding the claim. A run the model kept
//!    throttled before any tool call is released instead (claim removed,
//!    reservation returned) and its message goes back to the queue.
//!
//! A run's limits are its spec's bounded by the current `SCHEDULE_CEILINGS`;
//! a taken-over occurrence pays for the crashed attempt's reservation.
//! 7. **Notify**: the settle's run record is the outbox. The table's stream
//!    carries a succeeded or failed record to the bus through an EventBridge
//!    Pipe (`domain::notification`): after accounting by construction, one
//!    event per settled run, none for a skip, and nothing for a duplicate
//!    delivery or a crash after the settle to get wrong.
//!
//! DynamoDB requests: 2 for a run (claim, settle; a connector task adds its
//! install read), 1 for a duplicate, 1 for a skip at the first door, 2 for a
//! skip after the claim.

use std::collections::BTreeMap;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use crate::domain::agent::{
    Block, Message, ModelRequest, Role, SYSTEM_PROMPT, StopReason, ToolSpec, hashed_name, offered_name,
    prompt_conversation, tool_result,
};
use crate::domain::budget::{self, Price, Prices};
use crate::domain::door::{Facts, SkipReason, TaskFacts, Verdict, verdict};
use crate::domain::install::Install;
use crate::domain::limits::{Ceilings, Limits};
use crate::domain::occurrence::{
    Claim, ClaimOutcome, Delivery, RunMessage, RunRecord, RunStatus, Usage, cap_output, cap_reason, claim_retention,
    diagnose, prunable, run_id, ttl_for,
};
use crate::domain::task::{Provenance, Task, TaskKind};
use crate::ports::{
    ClaimAnswer, ClaimRequest, Connectors, McpError, McpSession, Model, ModelErrorKind, Release, RunStore, Settled,
    Settlement, StoreError,
};

/// What the runner reads besides its ports.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub worker_enabled: bool,
    /// `CATCH_UP_SECONDS`: deliveries later than this after their scheduled
    /// time are skipped as missed.
    pub catch_up: Duration,
    pub model_id: String,
    pub prices: Prices,
    /// `SCHEDULE_CEILINGS` as the runner reads it now: a run's limits are
    /// its spec's, bounded by these.
    pub ceilings: Ceilings,
}

/// Kept past the function's deadline on a lease, so a slow settle after the
/// deadline is not mistaken for a crash.
pub const LEASE_MARGIN_SECONDS: i64 = 30;
/// Left for the settle at the end of an invocation.
pub const SETTLE_RESERVE_SECONDS: i64 = 10;

/// What became of one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Disposition {
    Ran(RunStatus),
    Skipped(SkipReason),
    /// A delivery of an occurrence that already finished (or that another
    /// execution took over): nothing done.
    Duplicate,
    /// Not a run message: recorded for an operator and acknowledged.
    Malformed(String),
    /// Another execution is running this occurrence: deliver again later.
    Busy,
    /// The model was throttled before the run called any tool: the claim
    /// and the reservation are released, nothing is recorded, and the
    /// message goes back to the queue to run again within the catch-up window.
    ReturnToQueue,
}

/// The first wait after a throttled model call; it doubles up to
/// [`THROTTLE_BACKOFF_CAP_MS`], each wait jittered (half fixed, half random).
pub const THROTTLE_BACKOFF_MS: u64 = 200;
pub const THROTTLE_BACKOFF_CAP_MS: u64 = 4000;
/// The reason of a run throttled after it called a tool.
pub const MODEL_THROTTLED: &str = "model throttled";

/// The wait before retry `attempt` (0-based) of a throttled call.
fn backoff(attempt: u32) -> StdDuration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = THROTTLE_BACKOFF_MS
        .saturating_mul(1 << attempt.min(10))
        .min(THROTTLE_BACKOFF_CAP_MS);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    let random = hasher.finish() % (ceiling / 2 + 1);
    StdDuration::from_millis(ceiling / 2 + random)
}

/// A run that must go back to the queue rather than be recorded.
struct Requeue {
    /// What it spent before (model answers that called no tool).
    usage: Usage,
    cost: f64,
}

/// A transient failure: the message is returned to the queue.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
}

pub struct Runner<S, M, C> {
    store: S,
    model: M,
    connectors: C,
    settings: RunSettings,
}

/// A message that parsed into an occurrence (`RunMessage::parse`).
type Occurrence = Delivery;

/// How a run ended, before it is recorded.
struct Outcome {
    status: RunStatus,
    reason: Option<String>,
    usage: Usage,
    output: Option<String>,
    cost: f64,
}

impl Outcome {
    fn failed(reason: impl Into<String>, usage: Usage, cost: f64, output: Option<String>) -> Self {
        Self {
            status: RunStatus::Failed,
            reason: Some(cap_reason(&reason.into())),
            usage,
            output,
            cost,
        }
    }
}

/// Where an offered tool name leads: a session and the server's own name.
struct Route {
    session: usize,
    tool: String,
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    pub fn new(store: S, model: M, connectors: C, settings: RunSettings) -> Self {
        Self {
            store,
            model,
            connectors,
            settings,
        }
    }

    pub fn store(&self) -> &S {
        &self.store
    }

    pub fn connectors(&self) -> &C {
        &self.connectors
    }

    /// Handles one runs-queue message at `now`, in an invocation that must
    /// end by `deadline`.
    #[tracing::instrument(skip_all, fields(message_id, task_id, workspace, occurrence))]
    pub async fn deliver(
        &self,
        message_id: &str,
        body: &str,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<Disposition, RunError> {
        let span = tracing::Span::current();
        span.record("message_id", message_id);
        let occ = match RunMessage::parse(body) {
            Ok(occ) => occ,
            Err(reason) => {
                self.store.record_malformed(message_id, body, &reason, now).await?;
                tracing::warn!(reason = %reason, "malformed message recorded and acknowledged");
                return Ok(Disposition::Malformed(reason));
            }
        };
        span.record("task_id", occ.task_id.as_str());
        span.record("workspace", occ.message.workspace.as_str());
        span.record("occurrence", occ.key.as_str());

        let facts = self.facts(&occ, now, TaskFacts::Unknown);
        if let Verdict::Skip(reason) = verdict(&facts) {
            return self.skip_unclaimed(&occ, reason, now, 0).await;
        }

        let period = budget::period(occ.scheduled);
        let claim = Claim {
            status: RunStatus::Running,
            lease_until: (deadline + Duration::seconds(LEASE_MARGIN_SECONDS)).timestamp(),
            execution_id: occ.message.execution_id.clone(),
            attempts: 1,
            started_at: now,
            crashed_usd: 0.0,
        };
        let request = ClaimRequest {
            workspace: &occ.message.workspace,
            task_id: &occ.task_id,
            occurrence: &occ.key,
            period: &period,
            claim: &claim,
            now,
        };
        let task = match self.store.claim(&request).await? {
            ClaimAnswer::Claimed(task) => task,
            ClaimAnswer::Refused(old) => match diagnose(old.as_deref(), &occ.key, now) {
                ClaimOutcome::Finished { status } => {
                    tracing::info!(status = status.as_str(), "duplicate delivery of a finished occurrence");
                    return Ok(Disposition::Duplicate);
                }
                ClaimOutcome::Busy { lease_until } => {
                    tracing::info!(lease_until, "occurrence is running elsewhere; retry later");
                    return Ok(Disposition::Busy);
                }
                ClaimOutcome::Expired => match self.store.take_over(&request).await? {
                    ClaimAnswer::Claimed(task) => {
                        tracing::warn!("took over an expired lease");
                        task
                    }
                    ClaimAnswer::Refused(_) => return Ok(Disposition::Busy),
                },
                ClaimOutcome::Missing => return self.skip_unclaimed(&occ, SkipReason::Missing, now, 1).await,
                ClaimOutcome::BudgetExhausted => {
                    // The door speaks first: a paused task is skipped as paused.
                    let reason = match old.as_deref() {
                        Some(old) => {
                            let install = self.install_of(old).await?;
                            let facts = self.facts(
                                &occ,
                                now,
                                TaskFacts::Present {
                                    task: old,
                                    install: install.as_ref(),
                                },
                            );
                            match verdict(&facts) {
                                Verdict::Skip(reason) => reason,
                                Verdict::Run => SkipReason::BudgetExhausted,
                            }
                        }
                        None => SkipReason::Missing,
                    };
                    return self.skip_unclaimed(&occ, reason, now, 1).await;
                }
            },
        };

        let attempts = task.claims.get(&occ.key).map_or(1, |c| c.attempts);
        // What crashed attempts of this occurrence reserved, committed at
        // take-over: charged to the account with this attempt's cost.
        let crashed = task.claims.get(&occ.key).map_or(0.0, |c| c.crashed_usd);
        let install = self.install_of(&task).await?;
        let facts = self.facts(
            &occ,
            now,
            TaskFacts::Present {
                task: &task,
                install: install.as_ref(),
            },
        );
        let outcome = match verdict(&facts) {
            Verdict::Skip(reason) => {
                tracing::info!(reason = reason.code(), "skipped at the door");
                Outcome {
                    status: RunStatus::Skipped,
                    reason: Some(reason.describe()),
                    usage: Usage::default(),
                    output: None,
                    cost: 0.0,
                }
            }
            Verdict::Run => match self.run(&task, install.as_ref(), occ.scheduled, now, deadline).await {
                Ok(outcome) => outcome,
                Err(mut requeue) => {
                    requeue.cost += crashed;
                    return self
                        .return_to_queue(&task, &occ, &period, install.as_ref(), requeue, crashed)
                        .await;
                }
            },
        };
        let finished_at = Utc::now().max(now);
        let record = RunRecord {
            run_id: run_id(occ.task_id.as_str(), occ.scheduled),
            task_id: occ.task_id.to_string(),
            workspace: occ.message.workspace.clone(),
            scheduled_time: occ.key.clone(),
            status: outcome.status,
            reason: outcome.reason.clone(),
            attempts,
            usage: outcome.usage,
            cost_usd: outcome.cost + crashed,
            output: outcome.output.clone(),
            model_id: (outcome.status != RunStatus::Skipped).then(|| self.settings.model_id.clone()),
            execution_id: Some(occ.message.execution_id.clone()),
            started_at: now,
            finished_at,
            ttl: ttl_for(finished_at),
        };
        let account = account_of(&task, install.as_ref());
        let settlement = Settlement {
            task: &task,
            occurrence: &occ.key,
            execution_id: &occ.message.execution_id,
            period: &period,
            reserved_usd: budget::reservation(&task) + crashed,
            account: account
                .as_ref()
                .filter(|_| outcome.status != RunStatus::Skipped || crashed > 0.0),
            record: &record,
            complete: task.spec.schedule.is_one_time() && outcome.status != RunStatus::Skipped,
            prune: prunable(&task, now, claim_retention(self.settings.catch_up)),
        };
        let (settled, recorded) = match self.store.settle(&settlement).await {
            Ok(settled) => (settled, outcome.status),
            // A settle the store refuses as invalid would fail the same way on
            // every redelivery: it is tried once more with the outcome alone
            // (no output), recorded as failed, so a claim does not stay running
            // and a reservation held because a record could not be written. A
            // transient failure sends the message back (a take-over later).
            Err(error @ StoreError::Rejected { .. }) => {
                tracing::error!(error = %crate::error_chain(&error), "the settle failed; recording the outcome without its content");
                let mut minimal = record.clone();
                if minimal.status != RunStatus::Skipped {
                    minimal.status = RunStatus::Failed;
                }
                minimal.output = None;
                minimal.reason = Some(cap_reason(&format!(
                    "the run's outcome could not be recorded ({}); was: {}",
                    crate::error_chain(&error),
                    record.reason.as_deref().unwrap_or(record.status.as_str())
                )));
                let fallback = Settlement {
                    record: &minimal,
                    ..settlement.clone()
                };
                (self.store.settle(&fallback).await?, minimal.status)
            }
            Err(error) => return Err(error.into()),
        };
        if settled == Settled::LostClaim {
            tracing::warn!("the claim was taken over before this run settled; its outcome is not recorded");
            return Ok(Disposition::Duplicate);
        }
        tracing::info!(
            status = recorded.as_str(),
            cost_usd = outcome.cost,
            "occurrence settled"
        );
        if recorded == RunStatus::Skipped {
            let reason = match verdict(&facts) {
                Verdict::Skip(reason) => reason,
                Verdict::Run => SkipReason::Missing,
            };
            return Ok(Disposition::Skipped(reason));
        }
        Ok(Disposition::Ran(recorded))
    }

    /// Releases the claim and the reservation (charging what was spent) so
    /// the message can come back and run as if it never had.
    async fn return_to_queue(
        &self,
        task: &Task,
        occ: &Occurrence,
        period: &str,
        install: Option<&Install>,
        requeue: Requeue,
        crashed: f64,
    ) -> Result<Disposition, RunError> {
        let account = account_of(task, install);
        let release = Release {
            task,
            occurrence: &occ.key,
            execution_id: &occ.message.execution_id,
            period,
            reserved_usd: budget::reservation(task) + crashed,
            spent_usd: requeue.cost,
            account: account.as_ref().filter(|_| requeue.cost > 0.0),
        };
        if self.store.release(&release).await? == Settled::LostClaim {
            tracing::warn!("the claim was taken over before this run was released");
            return Ok(Disposition::Duplicate);
        }
        tracing::warn!(
            turns = requeue.usage.turns,
            "the model stayed throttled before any tool call; returned to the queue"
        );
        Ok(Disposition::ReturnToQueue)
    }

    fn facts<'a>(&self, occ: &Occurrence, now: DateTime<Utc>, task: TaskFacts<'a>) -> Facts<'a> {
        Facts {
            worker_enabled: self.settings.worker_enabled,
            scheduled: occ.scheduled,
            now,
            catch_up: self.settings.catch_up,
            task,
        }
    }

    async fn install_of(&self, task: &Task) -> Result<Option<Install>, StoreError> {
        match &task.provenance {
            Provenance::Connector { install_id, .. } => self.store.install(&task.workspace, install_id).await,
            Provenance::User { .. } => Ok(None),
        }
    }

    async fn skip_unclaimed(
        &self,
        occ: &Occurrence,
        reason: SkipReason,
        now: DateTime<Utc>,
        attempts: u32,
    ) -> Result<Disposition, RunError> {
        let record = RunRecord {
            run_id: run_id(occ.task_id.as_str(), occ.scheduled),
            task_id: occ.task_id.to_string(),
            workspace: occ.message.workspace.clone(),
            scheduled_time: occ.key.clone(),
            status: RunStatus::Skipped,
            reason: Some(reason.describe()),
            attempts,
            usage: Usage::default(),
            cost_usd: 0.0,
            output: None,
            model_id: None,
            execution_id: Some(occ.message.execution_id.clone()),
            started_at: now,
            finished_at: now,
            ttl: ttl_for(now),
        };
        self.store.record_unclaimed(&record).await?;
        tracing::info!(reason = reason.code(), "skipped at the door");
        Ok(Disposition::Skipped(reason))
    }

    /// The procedure and the agent loop. Every failure here is the run's
    /// outcome, never an error of the delivery.
    async fn run(
        &self,
        task: &Task,
        install: Option<&Install>,
        scheduled: DateTime<Utc>,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Result<Outcome, Requeue> {
        let price = match self.settings.prices.of(&self.settings.model_id) {
            Ok(price) => price,
            Err(e) => return Ok(Outcome::failed(e.to_string(), Usage::default(), 0.0, None)),
        };
        // Ceilings bind at run time: lowering one brakes every task.
        let limits = self.settings.ceilings.bound(task.spec.limits);
        let wall_deadline = (now + Duration::seconds(i64::from(limits.timeout_seconds)))
            .min(deadline - Duration::seconds(SETTLE_RESERVE_SECONDS));
        let setup = match task.kind {
            TaskKind::Reminder => Ok(Conversation::reminder(task)),
            // The setup (connects, prompts/get, tools/list per binding) is
            // bounded by the run's wall time too, so the settle still fits.
            TaskKind::Connector => {
                let left = (wall_deadline - Utc::now()).to_std().unwrap_or_default();
                match tokio::time::timeout(left, self.connector_conversation(task, install)).await {
                    Ok(setup) => setup,
                    Err(_) => Err(McpError {
                        operation: "connect",
                        code: None,
                        message: "the connector setup did not finish within the run's time limit".into(),
                    }),
                }
            }
        };
        let conversation = match setup {
            Ok(conversation) => conversation,
            Err(e) => return Ok(Outcome::failed(e.to_string(), Usage::default(), 0.0, None)),
        };
        let run = run_id(task.task_id.as_str(), scheduled);
        self.agent_loop(task, limits, &run, conversation, price, wall_deadline)
            .await
    }

    async fn connector_conversation(
        &self,
        task: &Task,
        install: Option<&Install>,
    ) -> Result<Conversation<C::Session>, McpError> {
        let (Provenance::Connector { prompt, .. }, Some(install)) = (&task.provenance, install) else {
            return Err(McpError {
                operation: "connect",
                code: None,
                message: "the connector task has no install".into(),
            });
        };
        let session = self.connectors.connect(install).await?;
        let messages = prompt_conversation(session.get_prompt(prompt, &task.spec.arguments).await?);
        if messages.is_empty() {
            return Err(McpError {
                operation: "prompts/get",
                code: None,
                message: "the prompt has no content to run".into(),
            });
        }
        let mut conversation = Conversation {
            messages,
            tools: Vec::new(),
            routes: BTreeMap::new(),
            sessions: Vec::new(),
        };
        let own = session.list_tools().await?;
        conversation.offer(&install.server, own, |name| task.spec.tools.contains(name), session);
        for install_id in task.spec.bindings.values().flatten() {
            let bound = match self.store.install(&task.workspace, install_id).await {
                // The binding rule again, on what is stored now: a need is
                // served by an installed workspace install of another server
                // only (a stored binding that breaks it lends nothing).
                Ok(Some(bound))
                    if crate::domain::approval::check_binding(
                        task,
                        install_id,
                        &BTreeMap::from([(install_id.clone(), bound.clone())]),
                    )
                    .is_ok() =>
                {
                    bound
                }
                Ok(_) => {
                    tracing::warn!(install_id = %install_id, "a bound install that may not serve a need is not offered");
                    continue;
                }
                Err(e) => {
                    return Err(McpError {
                        operation: "connect",
                        code: None,
                        message: format!("bound install {install_id} could not be read: {e}"),
                    });
                }
            };
            let session = self.connectors.connect(&bound).await?;
            let tools = session.list_tools().await?;
            conversation.offer(&bound.server, tools, |_| true, session);
        }
        Ok(conversation)
    }

    async fn agent_loop(
        &self,
        task: &Task,
        limits: Limits,
        run_id: &str,
        mut conversation: Conversation<C::Session>,
        price: Price,
        wall_deadline: DateTime<Utc>,
    ) -> Result<Outcome, Requeue> {
        let run_budget = task.spec.budget.map(|b| b.max_usd_per_run);
        let mut usage = Usage::default();
        let mut last_text: Option<String> = None;
        // The last call's input and output: the next input is at least this.
        let mut input_floor = 0u64;
        let fail = |reason: String, usage: Usage, text: &Option<String>| {
            Outcome::failed(
                reason,
                usage,
                price.cost(usage.tokens()),
                text.as_deref().map(cap_output),
            )
        };
        loop {
            if usage.turns >= limits.max_turns {
                return Ok(fail(
                    format!("turn limit of {} reached", limits.max_turns),
                    usage,
                    &last_text,
                ));
            }
            let tokens_left = u64::from(limits.max_output_tokens).saturating_sub(usage.output_tokens);
            let mut request = ModelRequest {
                system: SYSTEM_PROMPT.to_owned(),
                messages: conversation.messages.clone(),
                tools: conversation.tools.clone(),
                max_tokens: 0,
            };
            // The call is charged for its input too: what is left of the
            // per-run budget after that pays for its output.
            let affordable = run_budget.map_or(u64::MAX, |b| {
                let input = request.input_estimate().max(input_floor);
                price.affordable_output(b - price.cost(usage.tokens()), input)
            });
            if affordable == 0 {
                return Ok(fail(
                    format!("per-run budget of ${:.4} reached", run_budget.unwrap_or_default()),
                    usage,
                    &last_text,
                ));
            }
            if tokens_left == 0 {
                return Ok(fail(
                    format!("output token limit of {} reached", limits.max_output_tokens),
                    usage,
                    &last_text,
                ));
            }
            let max_tokens = u32::try_from(tokens_left.min(affordable)).unwrap_or(u32::MAX);
            request.max_tokens = max_tokens;
            let mut throttled = 0u32;
            let reply = loop {
                let Some(remaining) = (wall_deadline - Utc::now()).to_std().ok().filter(|d| !d.is_zero()) else {
                    return Ok(fail(
                        format!("time limit of {} s reached", limits.timeout_seconds),
                        usage,
                        &last_text,
                    ));
                };
                match tokio::time::timeout(remaining, self.model.converse(&self.settings.model_id, &request)).await {
                    Err(_) => {
                        return Ok(fail(
                            format!("time limit of {} s reached", limits.timeout_seconds),
                            usage,
                            &last_text,
                        ));
                    }
                    Ok(Ok(reply)) => break reply,
                    Ok(Err(e)) if e.kind == ModelErrorKind::Throttled => {
                        let wait = backoff(throttled);
                        throttled += 1;
                        let in_time = chrono::Duration::from_std(wait)
                            .ok()
                            .is_some_and(|w| Utc::now() + w < wall_deadline);
                        if !in_time {
                            // Load, not failure: a run with no side effect yet
                            // goes back to the queue; after a tool call it
                            // cannot be repeated and fails.
                            if usage.tool_calls == 0 {
                                let cost = price.cost(usage.tokens());
                                return Err(Requeue { usage, cost });
                            }
                            return Ok(fail(MODEL_THROTTLED.to_owned(), usage, &last_text));
                        }
                        tracing::info!(attempt = throttled, wait_ms = wait.as_millis() as u64, error = %e, "model throttled; retrying");
                        tokio::time::sleep(wait).await;
                    }
                    Ok(Err(e)) => return Ok(fail(e.to_string(), usage, &last_text)),
                }
            };
            usage.turns += 1;
            usage.input_tokens += reply.input_tokens;
            usage.output_tokens += reply.output_tokens;
            input_floor = reply.input_tokens + reply.output_tokens;
            let text = reply.message.text();
            if !text.is_empty() {
                last_text = Some(text.clone());
            }
            conversation.messages.push(reply.message.clone());
            if let Some(b) = run_budget
                && price.cost(usage.tokens()) > b
            {
                return Ok(fail(format!("per-run budget of ${b:.4} exceeded"), usage, &last_text));
            }
            match reply.stop {
                StopReason::EndTurn | StopReason::StopSequence => {
                    return Ok(Outcome {
                        status: RunStatus::Succeeded,
                        reason: None,
                        usage,
                        output: Some(cap_output(&text)),
                        cost: price.cost(usage.tokens()),
                    });
                }
                StopReason::MaxTokens if max_tokens as u64 == affordable && run_budget.is_some() => {
                    return Ok(fail(
                        format!("per-run budget of ${:.4} reached", run_budget.unwrap_or_default()),
                        usage,
                        &last_text,
                    ));
                }
                StopReason::MaxTokens => {
                    return Ok(fail(
                        format!("output token limit of {} reached", limits.max_output_tokens),
                        usage,
                        &last_text,
                    ));
                }
                StopReason::Other(reason) => {
                    return Ok(fail(format!("the model stopped: {reason}"), usage, &last_text));
                }
                StopReason::ToolUse => {
                    let mut results = Vec::new();
                    for block in &reply.message.content {
                        let Block::ToolUse { id, name, input } = block else {
                            continue;
                        };
                        let Some(route) = conversation.routes.get(name) else {
                            usage.refused_tool_calls += 1;
                            tracing::warn!(tool = %name, "refused a call to a tool this task is not offered");
                            results.push(Block::ToolResult {
                                id: id.clone(),
                                content: vec![Block::Text(format!("refused: `{name}` is not a tool of this task"))],
                                is_error: true,
                            });
                            continue;
                        };
                        if usage.tool_calls >= limits.max_tool_calls {
                            return Ok(fail(
                                format!("tool call limit of {} reached", limits.max_tool_calls),
                                usage,
                                &last_text,
                            ));
                        }
                        usage.tool_calls += 1;
                        let left = (wall_deadline - Utc::now()).to_std().unwrap_or(StdDuration::ZERO);
                        let session = &conversation.sessions[route.session];
                        let result =
                            match tokio::time::timeout(left, session.call_tool(&route.tool, input.clone(), run_id))
                                .await
                            {
                                Err(_) => {
                                    return Ok(fail(
                                        format!("time limit of {} s reached", limits.timeout_seconds),
                                        usage,
                                        &last_text,
                                    ));
                                }
                                Ok(Ok(out)) => Block::ToolResult {
                                    id: id.clone(),
                                    content: tool_result(out.content),
                                    is_error: out.is_error,
                                },
                                Ok(Err(e)) => Block::ToolResult {
                                    id: id.clone(),
                                    content: vec![Block::Text(e.to_string())],
                                    is_error: true,
                                },
                            };
                        results.push(result);
                    }
                    if results.is_empty() {
                        return Ok(fail(
                            "the model asked for tools but named none".to_owned(),
                            usage,
                            &last_text,
                        ));
                    }
                    conversation.messages.push(Message {
                        role: Role::User,
                        content: results,
                    });
                }
            }
        }
    }
}

/// The account a run is charged to: one per install, a principal's for a
/// reminder.
fn account_of(task: &Task, install: Option<&Install>) -> Option<budget::Account> {
    match (&task.provenance, install) {
        (Provenance::User { principal }, _) => Some(budget::account_of_principal(principal)),
        (Provenance::Connector { .. }, Some(install)) => Some(budget::Account::Install(install.account.clone())),
        (Provenance::Connector { .. }, None) => None,
    }
}

/// The run's conversation: messages, offered tools and where each leads.
struct Conversation<T> {
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    routes: BTreeMap<String, Route>,
    sessions: Vec<T>,
}

impl<T> Conversation<T> {
    fn reminder(task: &Task) -> Self {
        let instruction = task.instruction.as_deref().unwrap_or_default();
        Self {
            messages: vec![Message::user_text(format!(
                "It is time for the reminder the user set, titled \"{}\". Their instruction: {instruction}\n\
                 Write the reminder message to send them.",
                task.title
            ))],
            tools: Vec::new(),
            routes: BTreeMap::new(),
            sessions: Vec::new(),
        }
    }

    /// Offers a server's tools that pass `allowed`, under namespaced names.
    fn offer(
        &mut self,
        server: &str,
        tools: Vec<crate::ports::ServerTool>,
        allowed: impl Fn(&str) -> bool,
        session: T,
    ) {
        let index = self.sessions.len();
        self.sessions.push(session);
        for tool in tools.into_iter().filter(|t| allowed(&t.name)) {
            let mut name = offered_name(server, &tool.name);
            if self.routes.contains_key(&name) {
                // Two pairs that read alike: the hashed form tells them apart.
                name = hashed_name(server, &tool.name);
                if self.routes.contains_key(&name) {
                    continue;
                }
            }
            // Converse refuses an empty description: the name stands in.
            let description = if tool.description.trim().is_empty() {
                tool.name.clone()
            } else {
                tool.description
            };
            self.tools.push(ToolSpec {
                name: name.clone(),
                description,
                input_schema: if tool.input_schema.is_object() {
                    tool.input_schema
                } else {
                    Value::Object(Default::default())
                },
            });
            self.routes.insert(
                name,
                Route {
                    session: index,
                    tool: tool.name,
                },
            );
        }
    }
}
