//! Step 5, the agent loop's I/O: each model call and each tool call, around
//! the decisions of `domain::run::agent_loop::AgentLoop` (what may be called,
//! when the loop stops, what the run used) and, with a model pace, of
//! `domain::run::pace` (the slot a call waits for, how a throttle slows the pace).

use std::sync::atomic::Ordering;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::clock::RunClock;
use super::{Runner, backoff};
use crate::domain::run::agent::{Block, ModelReply, tool_result};
use crate::domain::run::agent_loop::Route;
use crate::domain::run::agent_loop::{AgentLoop, Ended, Next, ToolCall, Turn};
use crate::domain::run::gate::{self, CallApproval, Gate, GatedCall, Target};
use crate::domain::run::journal::{self, Journal, JournaledCall};
use crate::domain::run::pace::{self, Lane, Pace, Refusal, Slots, Try};
use crate::ports::{
    CallMeta, Connectors, McpSession, Model, ModelError, ModelErrorKind, PaceAnswer, RunStore, StoreError,
};
use crate::trace::key;

/// Writes one booking may take (a start and a booking that raced others).
const PACE_ATTEMPTS: usize = 3;

/// The ids a run's gated calls are bound to (`domain::run::gate`).
pub(super) struct RunIds<'a> {
    pub workspace: &'a str,
    pub task_id: &'a str,
    pub run_id: &'a str,
    /// The occurrence's key within its task.
    pub occurrence: &'a str,
    pub execution_id: &'a str,
    /// The approved request this run resumes (`RunMessage::resume`).
    pub resume: Option<&'a str>,
    /// The delivery's time.
    pub clock: &'a RunClock<'a>,
    /// The position of the occurrence's next call: after every call its
    /// journal holds (`domain::run::journal`).
    pub next_call: std::sync::atomic::AtomicU32,
    /// When what this attempt journals expires (`journal::expiry`).
    pub journal_ttl: i64,
}

impl<'a> RunIds<'a> {
    /// The ids of `occ`'s run `run_id` of `task`, its calls placed after
    /// those `journal` holds.
    pub(super) fn of(
        task: &'a crate::domain::task::Task,
        occ: &'a crate::domain::run::occurrence::Delivery,
        run_id: &'a str,
        (clock, journal): (&'a RunClock<'a>, &Journal),
        settings: &super::RunSettings,
    ) -> Self {
        Self {
            workspace: &task.workspace,
            task_id: task.task_id.as_str(),
            run_id,
            occurrence: &occ.key,
            execution_id: &occ.message.execution_id,
            resume: occ.message.resume.as_deref(),
            clock,
            next_call: std::sync::atomic::AtomicU32::new(journal.next_position()),
            journal_ttl: journal::expiry(clock.now(), settings.approval_hours, settings.retention),
        }
    }

    fn target(route: &Route) -> Target<'_> {
        Target {
            install: &route.install,
            server: &route.server,
            tool: &route.tool,
        }
    }
}

/// Where a lane's last seen next free slot is kept (`Runner::pace_seen`).
pub(super) fn lane_index(lane: Lane) -> usize {
    match lane {
        Lane::Connectors => 0,
        Lane::Reminders => 1,
    }
}

/// Workspaces' credits this process keeps the last seen next slot of
/// (`Runner::shares_seen`); past it, the map starts again.
const SHARES_SEEN: usize = 1_024;

/// One pace item a call books on: its id, its pace, where this process
/// keeps its last seen next slot.
struct Item<'a> {
    id: String,
    pace: Pace,
    seen: Seen<'a>,
}

enum Seen<'a> {
    Lane(&'a std::sync::atomic::AtomicI64),
    Share,
}

/// Says why a call that is not load on the quota is asked again.
fn unavailable(error: &crate::ports::ModelError, attempt: u32) {
    if error.code.as_deref() == Some("AccessDeniedException") {
        tracing::warn!(attempt, error = %error, "the model refused access: a fresh account's model subscription completes within minutes, and the run is asked again; if it lasts, the runner's role lacks bedrock:InvokeModel or aws-marketplace:Subscribe");
    } else {
        tracing::warn!(attempt, error = %error, "the model did not answer (a server error, a reset, a timeout); retrying");
    }
}

/// What a booking came to.
enum Slot {
    /// This slot is the call's (`Slots::taken_ms`).
    At(Slots),
    /// No slot within the run's reach; room from then.
    Full(DateTime<Utc>),
    /// Every write raced another: the call waits as for a full pace.
    Unbooked,
}

impl<S: RunStore, M: Model, C: Connectors> Runner<S, M, C> {
    /// Turns until the loop ends: a model call, then the tool calls it asks
    /// for, answered in one message, until [`AgentLoop`] says stop. The
    /// calls earlier attempts made come first, read back from the journal
    /// (`AgentLoop::replay`), never made again. A turn
    /// that asks for a gated call without its approval stops the run before
    /// any call of the turn is made (`gate_turn`).
    pub(super) async fn agent_loop(
        &self,
        mut turns: AgentLoop,
        sessions: &[C::Session],
        (run, journal): (&RunIds<'_>, &Journal),
        lane: Lane,
    ) -> Ended {
        for call in &journal.calls {
            turns.replay(call);
        }
        if !journal.calls.is_empty() {
            tracing::info!(
                calls = journal.calls.len(),
                "the calls earlier attempts made, read back from the journal; none is made again"
            );
        }
        // The occurrence's approval requests, read at the first gated call.
        let mut requests: Option<Vec<CallApproval>> = None;
        if let Some(request_id) = run.resume
            && let Err(ended) = self
                .carry_approved(&mut turns, sessions, (run, journal), request_id, &mut requests)
                .await
        {
            return ended;
        }
        loop {
            let turn = match turns.next_turn() {
                Ok(turn) => turn,
                Err(ended) => return ended,
            };
            let reply = match self.model_call(&turns, &turn, lane, run).await {
                Ok(reply) => reply,
                Err(ended) => return ended,
            };
            let calls = match turns.answered(&turn, reply) {
                Next::Stop(ended) => return ended,
                Next::CallTools(calls) => calls,
            };
            if let Err(ended) = self.gate_turn(&turns, &calls, run, &mut requests).await {
                return ended;
            }
            let mut results = Vec::new();
            for call in calls {
                match self.one_call(&mut turns, sessions, run, &mut requests, call).await {
                    // Bounded as it arrives, not once the turn's results are all in.
                    Ok(result) => results.push(turns.held(result)),
                    Err(ended) => return ended,
                }
            }
            if let Err(ended) = turns.tool_results(results) {
                return ended;
            }
        }
    }

    /// One call the model asked for: refused when the task does not offer
    /// its tool, made under its approval when gated, else made.
    async fn one_call(
        &self,
        turns: &mut AgentLoop,
        sessions: &[C::Session],
        run: &RunIds<'_>,
        requests: &mut Option<Vec<CallApproval>>,
        (id, name, input): (String, String, Value),
    ) -> Result<Block, Ended> {
        let route = match turns.tool_call(&id, &name) {
            ToolCall::Allowed(route) => route,
            ToolCall::Refused(result) => {
                tracing::warn!(tool = %name, "refused a call to a tool this task is not offered");
                return Ok(result);
            }
            ToolCall::OverLimit(ended) => return Err(ended),
        };
        let session = &sessions[route.session];
        if route.gated {
            let approvals = requests.as_deref_mut().unwrap_or_default();
            let (answer, called) = self
                .approved_call(turns, session, &route, (id, input), (run, true), approvals)
                .await?;
            if !called {
                // Answered without a call: not a call of this run.
                turns.not_made();
            }
            Ok(answer)
        } else {
            self.tool_call(turns, session, &route, (id, input), (run, true)).await
        }
    }

    /// A resumed run's approved call, before its first model call: the
    /// request read (`RunStore::run_approvals`), the call made once under
    /// it (`approved_call`: used first, then called, its answer kept), or
    /// its kept answer when an earlier attempt made it; the conversation
    /// then goes on from it (`AgentLoop::carry`). A call the journal holds
    /// was read back with the others and is not carried again. A request
    /// that is not approved carries nothing (the gate asks as usual); an
    /// approved tool no longer offered on its install, or arguments that
    /// do not read back as hashed, fail the run with nothing called.
    async fn carry_approved(
        &self,
        turns: &mut AgentLoop,
        sessions: &[C::Session],
        (run, journal): (&RunIds<'_>, &Journal),
        request_id: &str,
        requests: &mut Option<Vec<CallApproval>>,
    ) -> Result<(), Ended> {
        let read = match self
            .store
            .run_approvals(run.workspace, run.run_id, Some(request_id))
            .await
        {
            Ok(read) => read,
            Err(e) => {
                return Err(turns.model_failed(format!(
                    "the run's approval requests could not be read: {}",
                    crate::error_chain(&e)
                )));
            }
        };
        let approval = read
            .iter()
            .find(|r| r.request_id == request_id && r.state == gate::ApprovalState::Approved)
            .cloned();
        *requests = Some(read);
        let Some(approval) = approval else {
            return Ok(());
        };
        if journal.made(approval.target(), &approval.arguments_sha256).is_some() {
            tracing::info!(
                request_id,
                "the approved call was made and journaled by an earlier attempt"
            );
            return Ok(());
        }
        let Some((offered, route)) = turns.offered(approval.target()) else {
            return Err(turns.approved_call_failed(format!(
                "the approved call's tool `{}` of {} is no longer offered to this task on the install it was asked for; nothing was called",
                approval.tool, approval.server
            )));
        };
        let Some(input) = approval.approved_arguments() else {
            return Err(turns.approved_call_failed(
                "the approved call's arguments do not read back as approved; nothing was called".to_owned(),
            ));
        };
        let id = format!("approved_{}", approval.request_id);
        let approvals = requests.as_deref_mut().unwrap_or_default();
        let (result, called) = self
            .approved_call(
                turns,
                &sessions[route.session],
                &route,
                (id.clone(), input.clone()),
                // Counted by `carry` once made.
                (run, false),
                approvals,
            )
            .await?;
        tracing::info!(tool = %route.tool, request_id, called, "the resumed run's approved call, before its first model call");
        turns.carry(&offered, &id, input, result, called);
        Ok(())
    }

    /// The gate on a turn's calls (`gate::gate`): a gated call without an
    /// approval of exactly it puts a request and stops the run
    /// (`AgentLoop::ask`) before any call of the turn is made; past
    /// `gate::MAX_ASKS` requests the run fails. The occurrence's requests
    /// are read once, at its first gated call (`RunStore::run_approvals`);
    /// a read that fails fails the run (nothing gated is made unread).
    async fn gate_turn(
        &self,
        turns: &AgentLoop,
        calls: &[(String, String, Value)],
        run: &RunIds<'_>,
        requests: &mut Option<Vec<CallApproval>>,
    ) -> Result<(), Ended> {
        for (_, name, input) in calls {
            let Some(route) = turns.route(name).filter(|r| r.gated) else {
                continue;
            };
            if requests.is_none() {
                match self.store.run_approvals(run.workspace, run.run_id, None).await {
                    Ok(read) => *requests = Some(read),
                    Err(e) => {
                        return Err(turns.model_failed(format!(
                            "the run's approval requests could not be read: {}",
                            crate::error_chain(&e)
                        )));
                    }
                }
            }
            let approvals = requests.as_deref().unwrap_or_default();
            let hash = gate::arguments_hash(input);
            match gate::gate(approvals, run.run_id, RunIds::target(route), &hash) {
                Gate::Ask => {
                    let call = GatedCall {
                        workspace: run.workspace,
                        task_id: run.task_id,
                        run_id: run.run_id,
                        scheduled_time: run.occurrence,
                        target: RunIds::target(route),
                        arguments: input,
                    };
                    let Some(approval) = CallApproval::ask(
                        &call,
                        run.clock.now(),
                        self.settings.approval_hours,
                        self.settings.retention,
                    ) else {
                        return Err(turns.too_large_to_ask(&route.tool));
                    };
                    tracing::info!(tool = %route.tool, request_id = %approval.request_id, "a gated tool call waits for an approval");
                    return Err(turns.ask(approval));
                }
                Gate::TooManyAsks => return Err(turns.asked_too_often()),
                Gate::Make(_) | Gate::Made { .. } | Gate::Refused(_) => {}
            }
        }
        Ok(())
    }

    /// A gated call the gate let through: made once under its approval (the
    /// approval used first, in a conditional write, then the call, then its
    /// answer kept on the request), or, made by an earlier attempt, its
    /// answer as kept, and whether the call was made now. Never made
    /// without an approval of exactly it.
    async fn approved_call(
        &self,
        turns: &AgentLoop,
        session: &C::Session,
        route: &crate::domain::run::agent_loop::Route,
        (id, input): (String, Value),
        (run, counted): (&RunIds<'_>, bool),
        approvals: &mut [CallApproval],
    ) -> Result<(Block, bool), Ended> {
        let hash = gate::arguments_hash(&input);
        let at = match approval_of(approvals, run.run_id, route, &hash, &id) {
            Ok(at) => at,
            Err(answer) => return Ok((answer, false)),
        };
        let approval = approvals[at].clone();
        let now = run.clock.now();
        match self.store.use_approval(&approval, run.execution_id, now).await {
            Ok(true) => {}
            Ok(false) => {
                return Ok((
                    refused_call(id, "refused: this call's approval was already used"),
                    false,
                ));
            }
            Err(e) => {
                return Err(turns.model_failed(format!(
                    "the approval of a gated call could not be used: {}",
                    crate::error_chain(&e)
                )));
            }
        }
        let result = self
            .tool_call(turns, session, route, (id, input), (run, counted))
            .await?;
        if let Block::ToolResult { content, is_error, .. } = &result {
            let text = gate::result_text(content);
            if let Err(e) = self.store.keep_call_result(&approval, &text, *is_error).await {
                tracing::warn!(error = %crate::error_chain(&e), "the approved call's answer was not kept on its request");
            }
            // Asked again in this run, the call is answered from here.
            let used = &mut approvals[at];
            used.used_at = Some(now);
            used.result = Some(text);
            used.result_is_error = *is_error;
        }
        Ok((result, true))
    }

    /// One model call (`Model::converse`) within the run's wall time: at a
    /// slot of the fleet's pace when there is one, else retried with backoff.
    async fn model_call(
        &self,
        turns: &AgentLoop,
        turn: &Turn,
        lane: Lane,
        run: &RunIds<'_>,
    ) -> Result<ModelReply, Ended> {
        match &self.settings.pace {
            Some(pace) => {
                self.paced_call(pace, (lane, run.workspace), (turns, turn), run.clock)
                    .await
            }
            None => self.backoff_call(turns, turn, run.clock).await,
        }
    }

    /// One model call at a slot the fleet's pace gave it (`domain::run::pace`),
    /// in the run's lane or, that one full, the other's as far as
    /// `Lane::borrow_reach_ms` lets it, and as far as the workspace's
    /// credit lets it: booked, waited for, then sent; answered, the tokens
    /// it counted move the lane on; throttled, that lane's pace slows and
    /// the call books again. No slot within the run's reach, visibly (the
    /// pace as this process last saw it) or by a refused write: the run
    /// ends as `AgentLoop::paced` says, before the call. A booking that
    /// could not be written (throttled, unreachable, raced every time)
    /// counts as full.
    async fn paced_call(
        &self,
        pace: &Pace,
        (lane, workspace): (Lane, &str),
        (turns, turn): (&AgentLoop, &Turn),
        clock: &RunClock<'_>,
    ) -> Result<ModelReply, Ended> {
        let mut throttled = 0u32;
        let own = lane.under(pace);
        loop {
            let now = clock.now();
            if throttled > 0 && turns.time_left(now).as_millis() < pace::MIN_CALL_MS.unsigned_abs().into() {
                return Err(turns.paced(now));
            }
            // A booking that could not be made counts as full, never as a
            // pass: an unpaced call is what the pace exists to prevent.
            let unbooked = || clock.now() + chrono::Duration::milliseconds(own.pace(pace).gap_ms());
            let (booked, slots) = match self.lane_slot(pace, own, workspace, (turns, clock)).await {
                Ok((booked, Slot::At(slots))) => (booked, slots),
                Ok((_, Slot::Full(room_at))) => return Err(turns.paced(room_at)),
                Ok((_, Slot::Unbooked)) => return Err(turns.paced(unbooked())),
                Err(error) => {
                    tracing::warn!(error = %crate::error_chain(&error), "the model pace could not be booked (throttled or unreachable); the call waits as for a full pace");
                    return Err(turns.paced(unbooked()));
                }
            };
            let wait = slots.taken_ms().saturating_sub(clock.now_ms()).max(0);
            tokio::time::sleep(std::time::Duration::from_millis(wait.unsigned_abs())).await;
            let remaining = turns.time_left(clock.now());
            if remaining.is_zero() {
                return Err(turns.out_of_time());
            }
            match self.converse(turn, remaining).await {
                Err(_) => return Err(turns.unanswered()),
                Ok(Ok(reply)) => {
                    self.charge_tokens(&booked.pace(pace), booked, &slots, &reply, clock.now_ms())
                        .await;
                    return Ok(reply);
                }
                Ok(Err(e)) if e.kind == ModelErrorKind::Throttled => {
                    throttled += 1;
                    tracing::info!(attempt = throttled, error = %e, "model throttled at its paced slot; booking another");
                    self.slow_pace(&booked.pace(pace), booked, &slots, clock.now_ms()).await;
                }
                // Not load on the quota: the pace stays, the call waits
                // its backoff, then books again.
                Ok(Err(e)) if e.kind.is_load() => {
                    let wait = backoff(throttled);
                    throttled += 1;
                    unavailable(&e, throttled);
                    if let Some(ended) = turns.throttled(clock.now(), wait) {
                        return Err(ended);
                    }
                    tokio::time::sleep(wait).await;
                }
                Ok(Err(e)) => return Err(turns.model_failed(e.to_string())),
            }
        }
    }

    /// A slot in the run's own lane, or, that one full, in the other lane
    /// within what the run may borrow (`Lane::borrow_reach_ms`; a connector
    /// run takes an idle reminder slot first); the lane it was booked in. First the workspace's credit in its lane: without it,
    /// only within `pace::past_share_reach_ms`. Full everywhere: the
    /// earlier of the own lane's room and the credit's.
    async fn lane_slot(
        &self,
        pace: &Pace,
        own: Lane,
        workspace: &str,
        (turns, clock): (&AgentLoop, &RunClock<'_>),
    ) -> Result<(Lane, Slot), StoreError> {
        let now = clock.now();
        let now_ms = now.timestamp_millis();
        let left_ms = i64::try_from(turns.time_left(now).as_millis()).unwrap_or(i64::MAX);
        let latest_ms = pace::latest_slot(now_ms, left_ms);
        let lane_item = |lane: Lane| Item {
            id: lane.pace_id(&self.settings.model_id),
            pace: lane.pace(pace),
            seen: Seen::Lane(&self.pace_seen[lane_index(lane)]),
        };
        let credit = Item {
            id: pace::share_id(&own.pace_id(&self.settings.model_id), workspace),
            pace: own.pace(pace).share(),
            seen: Seen::Share,
        };
        // A credit that could not be booked is no credit; the lane decides.
        let (reach_ms, credit_room) = match self.slot(&credit, now_ms, latest_ms).await {
            Ok(Slot::At(_)) => (latest_ms, None),
            Ok(Slot::Full(room_at)) => (pace::past_share_reach_ms(now_ms, latest_ms), Some(room_at)),
            Ok(Slot::Unbooked) | Err(_) => (pace::past_share_reach_ms(now_ms, latest_ms), None),
        };
        let other = own.other();
        let borrow_ms = own.borrow_reach_ms(pace, now_ms, reach_ms);
        // A connector run takes a reminder slot left idle (due within one
        // of their gaps) before its own lane's later one, so the idle
        // reminder lane is used, not wasted; seen busy, this costs no write.
        if own == Lane::Connectors
            && Lane::split(pace)
            && let Slot::At(slots) = self.slot(&lane_item(other), now_ms, borrow_ms).await?
        {
            return Ok((other, Slot::At(slots)));
        }
        let full = match self.slot(&lane_item(own), now_ms, reach_ms).await? {
            Slot::Full(room_at) => credit_room.map_or(room_at, |credit| credit.min(room_at)),
            other => return Ok((own, other)),
        };
        if !Lane::split(pace) || own == Lane::Connectors {
            return Ok((own, Slot::Full(full)));
        }
        match self.slot(&lane_item(other), now_ms, borrow_ms).await? {
            Slot::At(slots) => {
                tracing::info!(lane = ?own, "the run's lane of the model pace is full; it borrows the other's slot");
                Ok((other, Slot::At(slots)))
            }
            Slot::Full(_) | Slot::Unbooked => Ok((own, Slot::Full(full))),
        }
    }

    /// The next slot this process last saw on `item` (`None`: never).
    fn seen(&self, item: &Item<'_>) -> Option<i64> {
        let seen = match item.seen {
            Seen::Lane(at) => at.load(Ordering::Relaxed),
            Seen::Share => self
                .shares_seen
                .lock()
                .map(|seen| seen.get(&item.id).copied().unwrap_or(0))
                .unwrap_or(0),
        };
        (seen > 0).then_some(seen)
    }

    fn saw(&self, item: &Item<'_>, next_ms: i64) {
        match item.seen {
            Seen::Lane(at) => at.store(next_ms, Ordering::Relaxed),
            Seen::Share => {
                if let Ok(mut seen) = self.shares_seen.lock() {
                    if seen.len() >= SHARES_SEEN && !seen.contains_key(&item.id) {
                        seen.clear();
                    }
                    seen.insert(item.id.clone(), next_ms);
                }
            }
        }
    }

    /// Books a slot of `item` between `now_ms` and `latest_ms`: the write
    /// `pace::first_try` says, then what a refusal says (`pace::refusal`);
    /// none when this process already saw it full (`pace::seen_full`); a
    /// booking also eases the item's pace after a window without a throttle.
    async fn slot(&self, item: &Item<'_>, now_ms: i64, latest_ms: i64) -> Result<Slot, StoreError> {
        let (id, lane_pace) = (&item.id, item.pace);
        let now = DateTime::<Utc>::from_timestamp_millis(now_ms).unwrap_or_default();
        let seen = self.seen(item);
        // Visibly full: refused here, without a write (a herd's refusals
        // would be writes to one item, past its partition's rate).
        if let Some(room_at_ms) = pace::seen_full(seen, now_ms, latest_ms) {
            let room_at = DateTime::<Utc>::from_timestamp_millis(room_at_ms).unwrap_or(now);
            return Ok(Slot::Full(room_at));
        }
        let mut attempt = pace::first_try(seen, now_ms);
        for _ in 0..PACE_ATTEMPTS {
            let answer = match attempt {
                Try::Book => self.store.pace_book(id, now_ms, latest_ms).await?,
                Try::Start => self.store.pace_start(id, now_ms, lane_pace.gap_ms()).await?,
            };
            let old = match answer {
                PaceAnswer::Taken(slots) => {
                    self.saw(item, slots.next_ms);
                    if let Some(gap) = pace::eased(&lane_pace, &slots, now_ms) {
                        self.set_gap(id, &slots, gap, now_ms, "eased").await;
                    }
                    return Ok(Slot::At(slots));
                }
                PaceAnswer::Refused(old) => old,
            };
            if let Some(old) = &old {
                self.saw(item, old.next_ms);
            }
            attempt = match pace::refusal(old.as_ref(), now_ms, latest_ms) {
                Refusal::Idle => Try::Start,
                Refusal::Moved => Try::Book,
                Refusal::Full { room_at_ms } => {
                    let room_at = DateTime::<Utc>::from_timestamp_millis(room_at_ms).unwrap_or(now);
                    return Ok(Slot::Full(room_at));
                }
            };
        }
        tracing::warn!("the model pace moved under every booking; the call waits as for a full pace");
        Ok(Slot::Unbooked)
    }

    /// After a throttle at a slot booked under `slots` in `lane`: that
    /// lane's pace (`lane_pace`) slows (`pace::slowed`), once for the round
    /// that booked under that gap.
    async fn slow_pace(&self, lane_pace: &Pace, lane: Lane, slots: &Slots, now_ms: i64) {
        if let Some(gap) = pace::slowed(lane_pace, slots) {
            let id = lane.pace_id(&self.settings.model_id);
            self.set_gap(&id, slots, gap, now_ms, "slowed").await;
        }
    }

    /// After an answered call at a slot booked under `slots` in `lane`: the
    /// tokens it counted beyond a gap's worth move the lane's next free
    /// slot on (`Pace::token_charge_ms`). Best effort, as the gap's changes.
    async fn charge_tokens(&self, lane_pace: &Pace, lane: Lane, slots: &Slots, reply: &ModelReply, now_ms: i64) {
        let counted = pace::counted_tokens(reply.input_tokens, reply.cache_write_tokens, reply.output_tokens);
        let Some(charge_ms) = lane_pace.token_charge_ms(counted, slots.gap_ms) else {
            return;
        };
        let id = lane.pace_id(&self.settings.model_id);
        match self.store.pace_charge(&id, now_ms, charge_ms).await {
            Ok(charged) => tracing::debug!(
                counted,
                charge_ms,
                charged,
                "the model pace moved on for the call's tokens"
            ),
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), "the model pace could not be moved on for the call's tokens");
            }
        }
    }

    /// Sets pace item `id`'s gap if it is still as `seen` (`RunStore::pace_gap`);
    /// best effort: a failure leaves the pace as it was.
    async fn set_gap(&self, id: &str, seen: &Slots, gap_ms: i64, now_ms: i64, how: &'static str) {
        match self.store.pace_gap(id, seen, gap_ms, now_ms).await {
            Ok(true) => tracing::info!(gap_ms, was_ms = seen.gap_ms, pace = %id, "the model pace {how}"),
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(error = %crate::error_chain(&error), "the model pace's gap could not be changed");
            }
        }
    }

    /// One model call within the run's wall time, retried with jittered
    /// backoff while it is throttled and a retry still fits, on the
    /// delivery's time (`clock`).
    async fn backoff_call(&self, turns: &AgentLoop, turn: &Turn, clock: &RunClock<'_>) -> Result<ModelReply, Ended> {
        let mut throttled = 0u32;
        loop {
            let remaining = turns.time_left(clock.now());
            if remaining.is_zero() {
                // Out of time while the model kept it throttled: load, as
                // `throttled` says (back to the queue before any tool call).
                if throttled > 0
                    && let Some(ended) = turns.throttled(clock.now(), std::time::Duration::ZERO)
                {
                    return Err(ended);
                }
                return Err(turns.out_of_time());
            }
            match self.converse(turn, remaining).await {
                Err(_) => return Err(turns.unanswered()),
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) if e.kind.is_load() => {
                    let wait = backoff(throttled);
                    throttled += 1;
                    if let Some(ended) = turns.throttled(clock.now(), wait) {
                        return Err(ended);
                    }
                    if e.kind == ModelErrorKind::Throttled {
                        tracing::info!(attempt = throttled, wait_ms = wait.as_millis() as u64, error = %e, "model throttled; retrying");
                    } else {
                        unavailable(&e, throttled);
                    }
                    tokio::time::sleep(wait).await;
                }
                Ok(Err(e)) => return Err(turns.model_failed(e.to_string())),
            }
        }
    }

    /// The model call itself (`Model::converse`), within `remaining`, in
    /// its `chat` span; `Err` when the time ran out first.
    async fn converse(
        &self,
        turn: &Turn,
        remaining: std::time::Duration,
    ) -> Result<Result<ModelReply, ModelError>, tokio::time::error::Elapsed> {
        let call = self.model.converse(&self.settings.model_id, &turn.request);
        let span = self.tracer.chat(&self.settings.model_id, turn.request.max_tokens);
        let answered = span.run(tokio::time::timeout(remaining, call)).await;
        match &answered {
            Err(_) => span.fail("timeout"),
            Ok(Ok(reply)) => {
                span.set(key::INPUT_TOKENS, reply.input_tokens as i64);
                span.set(key::OUTPUT_TOKENS, reply.output_tokens as i64);
                span.set_list(key::FINISH_REASONS, [reply.stop.code().to_owned()]);
            }
            Ok(Err(e)) => span.fail(e.code.clone().unwrap_or_else(|| "model_error".to_owned())),
        }
        span.end();
        answered
    }

    /// One tool call (`McpSession::call_tool`, carrying the run id and
    /// the call's key) within the run's wall time, in its `execute_tool`
    /// span (which the request's `traceparent` names); a failed call is an
    /// error result the model reads. Whatever it came to (an answer, an
    /// error, no answer in time) is journaled before the model sees it
    /// (`journal`), so no later attempt makes it again; a journal that
    /// cannot be written stops the run.
    async fn tool_call(
        &self,
        turns: &AgentLoop,
        session: &C::Session,
        route: &Route,
        (id, input): (String, Value),
        (run, counted): (&RunIds<'_>, bool),
    ) -> Result<Block, Ended> {
        let left = turns.time_left(run.clock.now());
        let arguments = input.clone();
        let call = journal::Call {
            task_id: run.task_id,
            occurrence: run.occurrence,
            run_id: run.run_id,
            position: run.next_call.load(Ordering::Relaxed),
            install: &route.install,
            server: &route.server,
            tool: &route.tool,
            arguments: &arguments,
        };
        let key = call.key();
        let meta = CallMeta {
            run_id: run.run_id,
            call_key: &key,
        };
        let span = self.tracer.execute_tool(&route.tool, &id);
        let answered = span
            .run(tokio::time::timeout(left, session.call_tool(&route.tool, input, meta)))
            .await;
        match &answered {
            Err(_) => span.fail("timeout"),
            Ok(Ok(out)) if out.is_error => span.fail("tool_error"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => span.fail(crate::app::mcp_error_type(e)),
        }
        span.end();
        let timed_out = answered.is_err();
        let (content, is_error) = match answered {
            Err(_) => (vec![Block::Text(NO_ANSWER_IN_TIME.to_owned())], true),
            Ok(Ok(out)) => (tool_result(out.content), out.is_error),
            Ok(Err(e)) => (vec![Block::Text(e.to_string())], true),
        };
        let made = JournaledCall::new(&call, &content, is_error, run.clock.now(), run.journal_ttl);
        if let Err(e) = self.store.journal_call(&made).await {
            tracing::error!(error = %crate::error_chain(&e), tool = %route.tool, "a call's answer could not be journaled; the run stops so no call is made twice");
            return Err(turns.unjournaled(
                format!(
                    "the answer of `{}` could not be journaled; the run stopped so that no call is made twice",
                    route.tool
                ),
                !counted,
            ));
        }
        run.next_call.fetch_add(1, Ordering::Relaxed);
        if timed_out {
            return Err(turns.out_of_time());
        }
        Ok(Block::ToolResult { id, content, is_error })
    }
}

/// What a journal keeps of a call that did not answer within the run's time.
const NO_ANSWER_IN_TIME: &str = "no answer within the run's time";

/// The approval a gated call is made under (its index in `approvals`), or
/// the answer it gets without a call: the kept answer of a call an earlier
/// attempt made, or a refusal.
fn approval_of(
    approvals: &[CallApproval],
    run_id: &str,
    route: &crate::domain::run::agent_loop::Route,
    hash: &str,
    id: &str,
) -> Result<usize, Block> {
    let request_id = match gate::gate(approvals, run_id, RunIds::target(route), hash) {
        Gate::Make(request_id) => request_id,
        Gate::Made { result, is_error } => {
            tracing::info!(tool = %route.tool, "an approved call made by an earlier attempt: its answer, not a second call");
            let text = result.unwrap_or_else(|| {
                "this approved call was already made once in this occurrence; its answer was not kept".to_owned()
            });
            return Err(Block::ToolResult {
                id: id.to_owned(),
                content: vec![Block::Text(text)],
                is_error,
            });
        }
        Gate::Refused(state) => {
            let why = format!("refused: this call was {} by an approver", state.as_str());
            return Err(refused_call(id.to_owned(), &why));
        }
        // `gate_turn` stopped the run for these before any call.
        Gate::Ask | Gate::TooManyAsks => return Err(refused_call(id.to_owned(), "refused: this call has no approval")),
    };
    approvals
        .iter()
        .position(|a| a.request_id == request_id)
        .ok_or_else(|| refused_call(id.to_owned(), "refused: this call has no approval"))
}

/// A tool call's answer when it was not made.
fn refused_call(id: String, why: &str) -> Block {
    Block::ToolResult {
        id,
        content: vec![Block::Text(why.to_owned())],
        is_error: true,
    }
}
