//! The seeded fault simulation (`infra/scripts/sim.sh`, and a small fixed
//! seed slice in `tests/suite/sim.rs`).
//!
//! What runs is the real runner use case (`app::run::Runner::deliver`) on
//! the real adapters against the real local services: DynamoDB through moto
//! (behind `moto_serial.py`, as the stack runs it) on a client that can
//! fail on demand (`local::faults`), `prompts/get` and `tools/call` on the
//! project's rmcp fixture server (the tool `post_summary` is the side
//! effect), `Converse` on the strict stand-in, and three more stand-ins that
//! answer every request with `ThrottlingException`, `ServiceUnavailableException`
//! or `ModelNotReadyException` (`ConverseStandIn::fault`).
//!
//! **A seed** (`fastrand`'s seeded generator) makes reminder tasks (daily,
//! no tools) and connector tasks (one side-effecting tool), each with
//! several occurrences, and for each occurrence the messages SQS delivers
//! for it and a fault for some of their receives:
//! - duplicate deliveries of one message, concurrent (the same instant) or
//!   later; Scheduler retries with a new execution id;
//! - a first delivery just inside or just outside the catch-up window;
//! - crashes at every port call of a delivery, before the call (never made)
//!   or after it (made, then the process dies), named after the runner's
//!   steps: claim, take-over, install read, connect, prompts/get,
//!   tools/list, each model call, each tool call, settle, release, the
//!   unclaimed record; a crash drops the delivery future, as a killed
//!   process does, and its message comes back after the queue's
//!   visibility timeout;
//! - DynamoDB faults on those same store calls: an SDK error (nothing
//!   sent), a ghost write (applied, the caller sees a timeout) and a ghost
//!   write the SDK's own retry sends again;
//! - throttling: the first one or two model calls of a delivery, or all of
//!   them until the run gives up and goes back to the queue.
//!
//! **The clock.** The runner takes `now` and `deadline` per delivery and
//! measures a run's wall time against the real clock. Each occurrence has
//! its own simulated timeline anchored at the real time of its first
//! delivery (its scheduled time is set that far in the past that the first
//! delivery has the planned lateness); a later delivery's `now` is the
//! anchor plus the simulated time that passed (a return's visibility, a
//! crashed attempt's lease), or the real time when the machine is slower
//! than that plan: never behind the real clock, so a loaded machine does
//! not fail runs on their wall time. Nothing waits in real time for
//! simulated time: redeliveries are the simulated clock, and the SDK
//! clients retry with no backoff (`no_backoff`). A lease expires when a
//! later delivery's `now` is past it. Occurrences of one task run one after
//! another, tasks concurrently.
//!
//! **After each seed** it checks, from the table, the fixture's record of
//! `tools/call` (its `_meta` run id) and the notifications the local pipe
//! put on the bus, not from what the deliveries answered: at most one
//! settled outcome per occurrence; tool side effects per run id no more
//! than the calls the attempts made and exactly the recorded calls where no
//! attempt was lost; each task's committed budget is its records' costs
//! plus the reservations running claims hold, each workspace's month
//! holds the sum of its tasks' (`budget::WorkspaceBudget`), and each
//! account's charges are its charged records' costs and count; one bus event per succeeded or
//! failed record and none for a skip; every delivered occurrence recorded.
//!
//! Replays: a seed's plan is a function of its number and the size, so
//! `--seeds 17..17` runs the same faults again (the interleaving of
//! concurrent deliveries is the machine's, not the seed's).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::Context;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Duration, SubsecRound, Utc};
use local::converse::{ConverseStandIn, Fault as ModelFault};
use local::faults::DynamoFault;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::adapters::bedrock::BedrockModel;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::mcp::McpConnectors;
use shared::app::run::{Disposition, RunSettings, Runner, SETTLE_RESERVE_SECONDS};
use shared::domain::run::agent::{Message, ModelReply, ModelRequest};
use shared::domain::run::journal::{Journal, JournaledCall, JournaledOutcome};
use shared::domain::run::occurrence::{RunRecord, occurrence_key, run_id};
use shared::domain::run::pace::Slots;
use shared::domain::schedule::Schedule;
use shared::domain::task::budget;
use shared::domain::task::install::{Install, InstallScope};
use shared::domain::task::{Task, TaskId};
use shared::ports::{
    CallMeta, ClaimAnswer, ClaimRequest, Connectors, McpError, McpSession, Model, ModelError, PaceAnswer, Release,
    RunStore, ServerTool, Settled, Settlement, StoreError, TakeOver, ToolOutput, Unclaimed,
};

use crate::{RunStack, connector_task, install, reminder, run_message};

/// The catch-up window the runner is given (the template's default).
pub const CATCH_UP_SECONDS: i64 = 3600;
/// The template's runner timeout: a delivery's deadline after its `now`.
pub const INVOCATION_SECONDS: i64 = 360;
/// The runs queue's visibility timeout: a crashed delivery's message comes
/// back after it (nothing shortened it).
pub const VISIBILITY_SECONDS: i64 = 2160;
/// The runs queue's `maxReceiveCount` (template.yaml, as the local stack
/// keeps it): then the message is dead-lettered.
pub const MAX_RECEIVES: u32 = local::STACK.runs_max_receive_count;
/// Only the first receives of a message get faults, so the later ones can
/// finish what the faults left.
const FAULTY_RECEIVES: usize = 2;
/// A first delivery later than this after its time is "at the edge": its
/// faults can bring it back past the window, where a skip must find and
/// pay for whatever claim the faults left (counted in the table).
const EDGE_SECONDS: i64 = CATCH_UP_SECONDS - VISIBILITY_SECONDS - 600;
/// A give-up delivery's run time: its invocation ends this long (real
/// time) after the settle's reserve, so the runner's backoff gives up.
const GIVE_UP_SECONDS: i64 = 4;
/// The side-effecting tool of every connector task.
pub const TOOL: &str = "post_summary";
const SERVER: &str = "issues";
const INSTALL: &str = "ins_1";

// ---- The plan --------------------------------------------------------------

/// Where in a delivery a fault strikes: a port call, named after the
/// runner's step that makes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Point {
    Claim,
    TakeOver,
    Install,
    Connect,
    PromptsGet,
    ToolsList,
    /// The n-th model call of the delivery, from 1.
    Model(u32),
    /// The n-th tool call of the delivery, from 1.
    Tool(u32),
    /// A tool call's journal write (`RunStore::journal_call`).
    Journal,
    Settle,
    Release,
    RecordUnclaimed,
}

impl Point {
    pub fn name(self) -> String {
        match self {
            Point::Claim => "claim".into(),
            Point::TakeOver => "take-over".into(),
            Point::Install => "install read".into(),
            Point::Connect => "connect".into(),
            Point::PromptsGet => "prompts/get".into(),
            Point::ToolsList => "tools/list".into(),
            Point::Model(n) => format!("model call {n}"),
            Point::Tool(n) => format!("tool call {n}"),
            Point::Journal => "journal write".into(),
            Point::Settle => "settle".into(),
            Point::Release => "release".into(),
            Point::RecordUnclaimed => "unclaimed record".into(),
        }
    }
}

/// One fault of one receive of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The process dies at `point`: before the call (`after: false`) or
    /// once it was made (`after: true`).
    Crash { point: Point, after: bool },
    /// The DynamoDB request of the store call at `point` fails so.
    Dynamo { point: Point, fault: DynamoFault },
    /// The first `calls` model calls are answered with `kind`.
    Throttle { kind: ModelFault, calls: u32 },
    /// Every model call is answered with `kind`, in a short invocation:
    /// the run gives up (back to the queue before a tool call).
    GiveUp { kind: ModelFault },
}

impl Fault {
    /// The kind, as the table counts it.
    pub fn label(self) -> String {
        match self {
            Fault::Crash { point, after } => {
                format!("crash {} {}", if after { "after" } else { "before" }, point.name())
            }
            Fault::Dynamo { point, fault } => format!("{} at {}", fault.label(), point.name()),
            Fault::Throttle { kind, calls } => format!("model {} x{calls}", kind.code()),
            Fault::GiveUp { kind } => format!("model {} until the run gives up", kind.code()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Reminder,
    Connector,
}

/// One SQS message of an occurrence.
#[derive(Debug, Clone)]
pub struct MessagePlan {
    pub execution_id: String,
    /// Seconds after the occurrence's first delivery that it is first seen.
    pub at: i64,
    /// What it is: the first, a duplicate, a Scheduler retry.
    pub what: &'static str,
    /// The faults of each of its first receives (empty: none).
    pub faults: Vec<Vec<Fault>>,
}

#[derive(Debug, Clone)]
pub struct OccurrencePlan {
    /// Seconds after its scheduled time that the first delivery comes.
    pub lateness: i64,
    pub messages: Vec<MessagePlan>,
    /// `TransactionConflictException`s armed as the occurrence starts
    /// (`local::moto::arm_transaction_conflicts`) on its task's journal
    /// partition or, in a gated seed, its workspace's approvals:
    /// the next plain writes there meet them, as writes racing a
    /// transaction on AWS do, and must retry them. Arming again replaces
    /// what is left there.
    pub conflicts: u32,
}

#[derive(Debug, Clone)]
pub struct TaskPlan {
    pub name: String,
    pub kind: Kind,
    pub occurrences: Vec<OccurrencePlan>,
}

#[derive(Debug, Clone)]
pub struct SeedPlan {
    pub seed: u64,
    pub tasks: Vec<TaskPlan>,
    /// The workspace's monthly budget, for a third of the seeds: low enough
    /// (under $0.60) that the reservations of runs under way, or what they
    /// spent, reach it, so claims, take-overs and dead claims meet a month
    /// that is spent (`budget_reached`).
    pub workspace_budget: Option<f64>,
    /// For a third of the seeds, the connector tasks' tool is gated (the
    /// admin's `ask_first`, SPEC §15): each run stops at its tool call and
    /// waits; the simulation's admin denies a third of the requests and
    /// approves the rest, whose resumes meet faults as any delivery does.
    pub gated: bool,
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, items: &[T]) -> T {
    items[rng.usize(..items.len())]
}

/// Answers the model gives instead of a reply: load (throttling, 5xx, a
/// fresh account's first-use refusal).
const MODEL_FAULTS: [ModelFault; 5] = [
    ModelFault::Throttling,
    ModelFault::ServiceUnavailable,
    ModelFault::ModelNotReady,
    ModelFault::InternalServer,
    ModelFault::AccessDenied,
];
/// Those a run may meet until it gives up: the above, and no answer at all
/// (a stall lasts the whole invocation, so only a short one meets it).
const GIVE_UP_FAULTS: [ModelFault; 6] = [
    ModelFault::Throttling,
    ModelFault::ServiceUnavailable,
    ModelFault::ModelNotReady,
    ModelFault::InternalServer,
    ModelFault::AccessDenied,
    ModelFault::Stalled,
];
const DYNAMO_FAULTS: [DynamoFault; 3] = [DynamoFault::Error, DynamoFault::Ghost, DynamoFault::GhostRetried];

fn fault(rng: &mut fastrand::Rng, kind: Kind) -> Fault {
    let crash_points: &[Point] = match kind {
        Kind::Connector => &[
            Point::Claim,
            Point::TakeOver,
            Point::Install,
            Point::Connect,
            Point::PromptsGet,
            Point::ToolsList,
            Point::Model(1),
            Point::Tool(1),
            Point::Journal,
            Point::Model(2),
            Point::Settle,
            Point::Release,
            Point::RecordUnclaimed,
        ],
        Kind::Reminder => &[
            Point::Claim,
            Point::TakeOver,
            Point::Model(1),
            Point::Settle,
            Point::Release,
            Point::RecordUnclaimed,
        ],
    };
    let store_points: &[Point] = match kind {
        Kind::Connector => &[
            Point::Claim,
            Point::TakeOver,
            Point::Install,
            Point::Journal,
            Point::Settle,
            Point::Release,
            Point::RecordUnclaimed,
        ],
        Kind::Reminder => &[
            Point::Claim,
            Point::TakeOver,
            Point::Settle,
            Point::Release,
            Point::RecordUnclaimed,
        ],
    };
    match rng.u8(..10) {
        0..=4 => Fault::Crash {
            point: pick(rng, crash_points),
            after: rng.bool(),
        },
        5..=7 => Fault::Dynamo {
            point: pick(rng, store_points),
            fault: pick(rng, &DYNAMO_FAULTS),
        },
        8 => Fault::Throttle {
            kind: pick(rng, &MODEL_FAULTS),
            calls: rng.u32(1..=2),
        },
        _ => Fault::GiveUp {
            kind: pick(rng, &GIVE_UP_FAULTS),
        },
    }
}

/// The faults of a message's first receives: half of the first receives
/// get one, a third of the second ones. A give-up may be followed by a
/// fault at its release, and a crash or ghost write that leaves a claim
/// running by one at the take-over that follows its lease.
fn receive_faults(rng: &mut fastrand::Rng, kind: Kind) -> Vec<Vec<Fault>> {
    let mut out: Vec<Vec<Fault>> = (0..FAULTY_RECEIVES)
        .map(|r| {
            let mut faults = Vec::new();
            if rng.u8(..6) < [3, 2][r.min(1)] {
                let f = fault(rng, kind);
                faults.push(f);
                if matches!(f, Fault::GiveUp { .. }) && rng.bool() {
                    faults.push(if rng.bool() {
                        Fault::Crash {
                            point: Point::Release,
                            after: rng.bool(),
                        }
                    } else {
                        Fault::Dynamo {
                            point: Point::Release,
                            fault: pick(rng, &DYNAMO_FAULTS),
                        }
                    });
                }
            }
            faults
        })
        .collect();
    let leaves_claim = out[0].iter().any(|f| {
        matches!(
            f,
            Fault::Crash { point, after: true } if *point != Point::Settle && *point != Point::RecordUnclaimed
        ) || matches!(f, Fault::Crash { point, after: false } if *point > Point::Claim && *point != Point::RecordUnclaimed)
            || matches!(
                f,
                Fault::Dynamo {
                    point: Point::Claim,
                    fault: DynamoFault::Ghost | DynamoFault::GhostRetried
                }
            )
    });
    if leaves_claim && rng.bool() {
        out[1] = vec![if rng.bool() {
            Fault::Crash {
                point: Point::TakeOver,
                after: rng.bool(),
            }
        } else {
            Fault::Dynamo {
                point: Point::TakeOver,
                fault: pick(rng, &DYNAMO_FAULTS),
            }
        }];
    }
    out
}

/// The plan of one seed: `size` occurrences, `per_task` per task.
pub fn plan(seed: u64, size: usize, per_task: usize) -> SeedPlan {
    let mut rng = fastrand::Rng::with_seed(seed);
    let per_task = per_task.max(1);
    let mut tasks = Vec::new();
    let mut left = size;
    // Drawn apart from the faults, so a seed's faults stay what they were.
    let mut clash = fastrand::Rng::with_seed(seed ^ 0xC0_4F11C7);
    while left > 0 {
        let index = tasks.len();
        let kind = if rng.u8(..3) == 0 {
            Kind::Reminder
        } else {
            Kind::Connector
        };
        let count = left.min(per_task);
        left -= count;
        let mut occurrences = Vec::new();
        for o in 0..count {
            let lateness = match rng.u8(..10) {
                0 => CATCH_UP_SECONDS - rng.i64(2..=30),
                1 => CATCH_UP_SECONDS + rng.i64(2..=30),
                _ => rng.i64(0..=5),
            };
            let exec = |n: usize| format!("s{seed}-t{index}-o{o}-e{n}");
            let faults = |rng: &mut fastrand::Rng| receive_faults(rng, kind);
            let mut messages = vec![MessagePlan {
                execution_id: exec(0),
                at: 0,
                what: "first",
                faults: faults(&mut rng),
            }];
            if rng.u8(..4) == 0 {
                messages.push(MessagePlan {
                    execution_id: exec(0),
                    at: 0,
                    what: "concurrent duplicate",
                    faults: faults(&mut rng),
                });
            }
            if rng.u8(..5) == 0 {
                messages.push(MessagePlan {
                    execution_id: exec(0),
                    at: rng.i64(1..=600),
                    what: "later duplicate",
                    faults: faults(&mut rng),
                });
            }
            if rng.u8(..5) == 0 {
                messages.push(MessagePlan {
                    execution_id: exec(1),
                    at: rng.i64(0..=300),
                    what: "Scheduler retry",
                    faults: faults(&mut rng),
                });
            }
            let conflicts = if clash.u8(..6) == 0 { clash.u32(1..=2) } else { 0 };
            occurrences.push(OccurrencePlan {
                lateness,
                messages,
                conflicts,
            });
        }
        tasks.push(TaskPlan {
            name: format!("sim_{seed}_{index:04}"),
            kind,
            occurrences,
        });
    }
    // Drawn apart from the faults, so a seed's faults stay what they were.
    let mut side = fastrand::Rng::with_seed(seed ^ 0x5EED_B0D6);
    let workspace_budget = (side.u8(..3) == 0).then(|| (side.f64() * 0.6 * 100.0).round() / 100.0);
    let gated = side.u8(..3) == 0;
    SeedPlan {
        seed,
        tasks,
        workspace_budget,
        gated,
    }
}

impl SeedPlan {
    /// The fault schedule, one line per message that has a fault.
    pub fn schedule(&self) -> String {
        let mut out = format!(
            "seed {}: fault schedule; workspace budget {}{}\n",
            self.seed,
            self.workspace_budget
                .map_or_else(|| "none".to_owned(), |b| format!("${b:.2} a month")),
            if self.gated { "; connector tools gated" } else { "" }
        );
        for task in &self.tasks {
            for (o, occ) in task.occurrences.iter().enumerate() {
                for m in &occ.messages {
                    let faults: Vec<String> = m
                        .faults
                        .iter()
                        .enumerate()
                        .filter(|(_, f)| !f.is_empty())
                        .map(|(r, f)| {
                            let labels: Vec<String> = f.iter().map(|f| f.label()).collect();
                            format!("receive {}: {}", r + 1, labels.join(", then "))
                        })
                        .collect();
                    let _ = writeln!(
                        out,
                        "  {} ({:?}) occurrence {o} late {} s, {} {} at +{} s: {}",
                        task.name,
                        task.kind,
                        occ.lateness,
                        m.what,
                        m.execution_id,
                        m.at,
                        if faults.is_empty() {
                            "-".to_owned()
                        } else {
                            faults.join("; ")
                        }
                    );
                }
            }
        }
        out
    }
}

// ---- Faults at the ports ------------------------------------------------------

/// What one delivery carries into the ports it calls.
struct Delivery {
    faults: Vec<Fault>,
    /// The faults as they struck (a planned fault at a point the delivery
    /// never reached strikes nothing).
    hit: Mutex<Vec<Fault>>,
    /// Whether it took over an expired lease.
    took_over: std::sync::atomic::AtomicBool,
    crashed: tokio::sync::Notify,
    model_calls: AtomicU32,
    tool_calls: AtomicU32,
}

tokio::task_local! {
    static DELIVERY: Arc<Delivery>;
}

impl Delivery {
    fn new(faults: Vec<Fault>) -> Self {
        Self {
            faults,
            hit: Mutex::new(Vec::new()),
            took_over: std::sync::atomic::AtomicBool::new(false),
            crashed: tokio::sync::Notify::new(),
            model_calls: AtomicU32::new(0),
            tool_calls: AtomicU32::new(0),
        }
    }

    fn current() -> Option<Arc<Delivery>> {
        DELIVERY.try_with(Arc::clone).ok()
    }

    fn strike(&self, fault: Fault) {
        if let Ok(mut hit) = self.hit.lock()
            && !hit.contains(&fault)
        {
            hit.push(fault);
        }
    }

    fn struck(&self) -> Vec<Fault> {
        self.hit.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// The planned fault at `point`, if any.
    fn at(&self, point: Point) -> Option<Fault> {
        self.faults
            .iter()
            .copied()
            .find(|f| matches!(f, Fault::Crash { point: p, .. } | Fault::Dynamo { point: p, .. } if *p == point))
    }
}

/// A port call at `point`, with the delivery's fault if it strikes there.
async fn at<T>(point: Point, call: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = at_unmeasured(point, call).await;
    let took = started.elapsed();
    if took >= SLOW_CALL {
        eprintln!("sim: a {point:?} call took {:.1} s of real time", took.as_secs_f64());
    }
    out
}

/// A port call slower than this in real time is printed: nothing in the
/// plan waits that long, so it is the machine or a stall to find.
const SLOW_CALL: std::time::Duration = std::time::Duration::from_secs(5);

async fn at_unmeasured<T>(point: Point, call: impl Future<Output = T>) -> T {
    let Some(delivery) = Delivery::current() else {
        return call.await;
    };
    match delivery.at(point) {
        // A store fault strikes the delivery's first call at its point: a
        // call sent again (the settle, in the invocation's time) is answered.
        Some(fault @ Fault::Dynamo { point: p, fault: f }) if p == point && !delivery.struck().contains(&fault) => {
            // A claim's and a take-over's write comes after the task's read:
            // the fault is the write's.
            let armed = match point {
                Point::Claim | Point::TakeOver => local::faults::arm_write(f),
                _ => local::faults::arm(f),
            };
            if armed {
                delivery.strike(fault);
            }
            call.await
        }
        Some(fault @ Fault::Crash { point: p, after }) if p == point => {
            if after {
                let _ = call.await;
            }
            delivery.strike(fault);
            delivery.crashed.notify_one();
            std::future::pending().await
        }
        _ => call.await,
    }
}

/// The store, with faults at its calls.
pub struct SimStore<S>(pub S);

impl<S: RunStore> RunStore for SimStore<S> {
    async fn pace_book(&self, model_id: &str, now_ms: i64, latest_ms: i64) -> Result<PaceAnswer, StoreError> {
        self.0.pace_book(model_id, now_ms, latest_ms).await
    }
    async fn pace_start(&self, model_id: &str, now_ms: i64, gap_ms: i64) -> Result<PaceAnswer, StoreError> {
        self.0.pace_start(model_id, now_ms, gap_ms).await
    }
    async fn pace_gap(&self, model_id: &str, seen: &Slots, gap_ms: i64, now_ms: i64) -> Result<bool, StoreError> {
        self.0.pace_gap(model_id, seen, gap_ms, now_ms).await
    }
    async fn pace_charge(&self, model_id: &str, now_ms: i64, charge_ms: i64) -> Result<bool, StoreError> {
        self.0.pace_charge(model_id, now_ms, charge_ms).await
    }
    async fn claim(&self, request: &ClaimRequest<'_>) -> Result<ClaimAnswer, StoreError> {
        at(Point::Claim, self.0.claim(request)).await
    }
    async fn take_over(&self, request: &ClaimRequest<'_>, from: TakeOver) -> Result<ClaimAnswer, StoreError> {
        let answer = at(Point::TakeOver, self.0.take_over(request, from)).await;
        if let (Ok(ClaimAnswer::Claimed(_)), Some(d)) = (&answer, Delivery::current()) {
            d.took_over.store(true, Ordering::Relaxed);
        }
        answer
    }
    async fn install(&self, workspace: &str, install_id: &str) -> Result<Option<Install>, StoreError> {
        at(Point::Install, self.0.install(workspace, install_id)).await
    }
    async fn settle(&self, settlement: &Settlement<'_>) -> Result<Settled, StoreError> {
        at(Point::Settle, self.0.settle(settlement)).await
    }
    async fn release(&self, release: &Release<'_>) -> Result<Settled, StoreError> {
        at(Point::Release, self.0.release(release)).await
    }
    async fn park(&self, park: &shared::ports::Park<'_>) -> Result<Settled, StoreError> {
        self.0.park(park).await
    }
    async fn run_approvals(
        &self,
        workspace: &str,
        run_id: &str,
        named: Option<&str>,
    ) -> Result<Vec<shared::domain::run::gate::CallApproval>, StoreError> {
        self.0.run_approvals(workspace, run_id, named).await
    }
    async fn journal(&self, task_id: &str, occurrence: &str) -> Result<Journal, StoreError> {
        self.0.journal(task_id, occurrence).await
    }
    async fn journal_call(&self, call: &JournaledCall) -> Result<(), StoreError> {
        at(Point::Journal, self.0.journal_call(call)).await
    }
    async fn journal_outcome(&self, outcome: &JournaledOutcome) -> Result<(), StoreError> {
        self.0.journal_outcome(outcome).await
    }
    async fn use_approval(
        &self,
        approval: &shared::domain::run::gate::CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        self.0.use_approval(approval, execution_id, now).await
    }
    async fn keep_call_result(
        &self,
        approval: &shared::domain::run::gate::CallApproval,
        result: &str,
        is_error: bool,
    ) -> Result<(), StoreError> {
        self.0.keep_call_result(approval, result, is_error).await
    }
    async fn mark_budget_reached(
        &self,
        workspace: &str,
        month: &str,
        budget_usd: f64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.0.mark_budget_reached(workspace, month, budget_usd, now).await
    }
    async fn record_unclaimed(&self, record: &RunRecord, prune: &[String]) -> Result<Unclaimed, StoreError> {
        at(Point::RecordUnclaimed, self.0.record_unclaimed(record, prune)).await
    }
    async fn record_over_dead(
        &self,
        record: &RunRecord,
        dead: &shared::domain::task::claim::Claim,
        account: Option<&budget::Account>,
        period: &str,
        prune: &[String],
    ) -> Result<(), StoreError> {
        self.0.record_over_dead(record, dead, account, period, prune).await
    }
    async fn current_task(&self, workspace: &str, task_id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.0.current_task(workspace, task_id).await
    }
    async fn complete_unclaimed(
        &self,
        workspace: &str,
        task_id: &TaskId,
        execution_id: &str,
        completion: &shared::domain::run::settlement::Completion,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.0
            .complete_unclaimed(workspace, task_id, execution_id, completion, now)
            .await
    }
    async fn record_malformed(
        &self,
        message_id: &str,
        body: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.0.record_malformed(message_id, body, reason, now).await
    }
}

/// The model: the strict stand-in, or for a throttled call one of the
/// stand-ins that answers only faults.
pub struct SimModel {
    pub normal: BedrockModel,
    pub faulty: Vec<(ModelFault, BedrockModel)>,
}

impl Model for SimModel {
    async fn converse(&self, model_id: &str, request: &ModelRequest) -> Result<ModelReply, ModelError> {
        let delivery = Delivery::current();
        let n = delivery
            .as_ref()
            .map_or(0, |d| d.model_calls.fetch_add(1, Ordering::Relaxed) + 1);
        let routed = delivery
            .iter()
            .flat_map(|d| d.faults.iter().copied())
            .find_map(|f| match f {
                Fault::Throttle { kind, calls } if n <= calls => Some((f, kind)),
                Fault::GiveUp { kind } => Some((f, kind)),
                _ => None,
            });
        let model = match routed {
            Some((fault, kind)) => {
                if let Some(d) = &delivery {
                    d.strike(fault);
                }
                self.faulty
                    .iter()
                    .find(|(k, _)| *k == kind)
                    .map_or(&self.normal, |(_, m)| m)
            }
            None => &self.normal,
        };
        at(Point::Model(n), model.converse(model_id, request)).await
    }
}

/// The connectors, with faults at their calls, counting the `tools/call`s
/// sent per run id.
pub struct SimConnectors<C> {
    pub inner: C,
    pub sent: Arc<Mutex<HashMap<String, u32>>>,
}

pub struct SimSession<T> {
    inner: T,
    sent: Arc<Mutex<HashMap<String, u32>>>,
}

impl<C: Connectors> Connectors for SimConnectors<C> {
    type Session = SimSession<C::Session>;
    async fn connect(&self, install: &Install) -> Result<Self::Session, McpError> {
        let inner = at(Point::Connect, self.inner.connect(install)).await?;
        Ok(SimSession {
            inner,
            sent: self.sent.clone(),
        })
    }
}

impl<T: McpSession> McpSession for SimSession<T> {
    async fn get_prompt(&self, name: &str, arguments: &BTreeMap<String, String>) -> Result<Vec<Message>, McpError> {
        at(Point::PromptsGet, self.inner.get_prompt(name, arguments)).await
    }
    async fn list_tools(
        &self,
        approved: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Vec<ServerTool>, McpError> {
        at(Point::ToolsList, self.inner.list_tools(approved)).await
    }
    async fn list_prompts(&self) -> Result<Vec<shared::domain::connector::reconcile::ListedPrompt>, McpError> {
        self.inner.list_prompts().await
    }
    async fn call_tool(&self, name: &str, input: Value, meta: CallMeta<'_>) -> Result<ToolOutput, McpError> {
        let n = Delivery::current().map_or(0, |d| d.tool_calls.fetch_add(1, Ordering::Relaxed) + 1);
        let sent = self.sent.clone();
        at(Point::Tool(n), async move {
            if let Ok(mut sent) = sent.lock() {
                *sent.entry(meta.run_id.to_owned()).or_default() += 1;
            }
            self.inner.call_tool(name, input, meta).await
        })
        .await
    }
}

pub type SimRunner = Runner<SimStore<DynamoStore>, SimModel, SimConnectors<McpConnectors>>;

// ---- Running a seed -------------------------------------------------------------

/// How one delivery ended, as the simulated SQS sees it.
enum Answer {
    Done(Disposition),
    Back(Disposition),
    Error,
    Crashed,
}

impl Answer {
    /// How the table counts it.
    fn label(&self) -> &'static str {
        match self {
            Answer::Done(Disposition::Ran(_)) => "ran and settled",
            Answer::Done(Disposition::Skipped(_)) => "skipped",
            Answer::Done(Disposition::Duplicate) => "duplicate, acknowledged",
            Answer::Done(Disposition::Malformed(_)) => "malformed",
            Answer::Done(Disposition::NotYet) => "not due yet, acknowledged",
            Answer::Done(Disposition::AwaitingApproval) => "awaiting approval",
            Answer::Back(Disposition::ReturnToQueue) | Answer::Done(Disposition::ReturnToQueue) => {
                "throttled, returned"
            }
            Answer::Back(Disposition::Paced(_)) | Answer::Done(Disposition::Paced(_)) => "paced, returned",
            Answer::Back(_) | Answer::Done(Disposition::Busy) => "busy, returned",
            Answer::Error => "store error, returned",
            Answer::Crashed => "crashed",
        }
    }
}

/// What became of one occurrence, for the checks.
struct Ran {
    task: usize,
    key: String,
    run_id: String,
    scheduled: DateTime<Utc>,
    /// An attempt was lost after it may have called a tool (a crash, a
    /// failed settle or release): the tool may rightly run again.
    lossy: bool,
    dead_lettered: bool,
    deliveries: usize,
    /// Deliveries that took over an expired lease.
    took_over: usize,
    answers: BTreeMap<&'static str, usize>,
    faults: Vec<Fault>,
    /// The admin's decisions of its gated calls' requests.
    decided: Decided,
    /// Decisions the store refused (each a violation).
    admin_errors: Vec<String>,
}

/// The report of a run over seeds.
#[derive(Debug, Default, Clone)]
pub struct SimReport {
    pub seeds: Vec<u64>,
    pub size: usize,
    pub tasks: usize,
    pub occurrences: usize,
    pub deliveries: usize,
    /// What the deliveries answered, by kind.
    pub answers: BTreeMap<String, usize>,
    /// Faults that struck, by kind.
    pub faults: BTreeMap<String, usize>,
    /// Outcomes by status and reason.
    pub outcomes: BTreeMap<String, usize>,
    /// Violations by check: each a line naming its seed.
    pub violations: BTreeMap<&'static str, Vec<String>>,
    pub failing_seeds: BTreeSet<u64>,
    pub real_seconds: f64,
    /// `tools/call` requests the server got.
    pub calls_sent: usize,
    /// Effects at a server that honours the call key: one per key.
    pub effects: usize,
    /// Calls sent again under a key already sent (an attempt lost between
    /// a call and its journal entry: a server that honours the key
    /// refuses the repeat).
    pub resent: usize,
    /// `TransactionConflictException`s armed on plain writes, and how
    /// many writes met one (each retried, then written, or answered as
    /// the store's error).
    pub conflicts_armed: usize,
    pub conflicts_met: usize,
}

pub const CHECKS: [&str; 8] = [
    ONE_OUTCOME,
    SIDE_EFFECTS,
    CALLED_ONCE,
    ACCOUNTING,
    CAPS,
    ONE_EVENT,
    NONE_LOST,
    GATED,
];
pub const ONE_OUTCOME: &str = "at most one settled outcome per occurrence";
pub const SIDE_EFFECTS: &str = "tool side effects by run id";
pub const CALLED_ONCE: &str = "no call made twice for one occurrence";
pub const ACCOUNTING: &str = "budget_used, workspace months and account charges";
pub const CAPS: &str = "no month of a budget spends past its limit";
pub const ONE_EVENT: &str = "one bus event per settled run, none for a skip";
pub const NONE_LOST: &str = "every delivered occurrence recorded";
pub const GATED: &str = "a gated call made only under its approval, each decision applied";

impl SimReport {
    pub fn violation_count(&self) -> usize {
        self.violations.values().map(Vec::len).sum()
    }

    fn merge(&mut self, other: SimReport) {
        self.calls_sent += other.calls_sent;
        self.effects += other.effects;
        self.resent += other.resent;
        self.conflicts_armed += other.conflicts_armed;
        self.conflicts_met += other.conflicts_met;
        self.seeds.extend(other.seeds);
        self.tasks += other.tasks;
        self.occurrences += other.occurrences;
        self.deliveries += other.deliveries;
        for (k, v) in other.answers {
            *self.answers.entry(k).or_default() += v;
        }
        for (k, v) in other.faults {
            *self.faults.entry(k).or_default() += v;
        }
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        for (k, v) in other.violations {
            self.violations.entry(k).or_default().extend(v);
        }
        self.failing_seeds.extend(other.failing_seeds);
    }

    /// The report as one table.
    pub fn table(&self) -> String {
        let seeds = match (self.seeds.iter().min(), self.seeds.iter().max()) {
            (Some(a), Some(b)) => format!("{a}..{b} ({} seeds, size {})", self.seeds.len(), self.size),
            _ => "-".to_owned(),
        };
        let mut rows: Vec<(String, String)> = vec![
            ("seeds".into(), seeds),
            ("tasks".into(), self.tasks.to_string()),
            ("occurrences".into(), self.occurrences.to_string()),
            ("deliveries".into(), self.deliveries.to_string()),
        ];
        for (k, v) in &self.answers {
            rows.push((format!("  {k}"), v.to_string()));
        }
        rows.extend([(
            "faults injected".into(),
            self.faults.values().sum::<usize>().to_string(),
        )]);
        for (k, v) in &self.faults {
            rows.push((format!("  {k}"), v.to_string()));
        }
        rows.extend([
            (
                "TransactionConflict armed on plain writes".into(),
                self.conflicts_armed.to_string(),
            ),
            ("  met by a write (retried)".into(), self.conflicts_met.to_string()),
        ]);
        rows.extend([
            ("tools/call sent".into(), self.calls_sent.to_string()),
            (
                "  effects at a server honouring the call key".into(),
                self.effects.to_string(),
            ),
            (
                "  sent again under its key (lost before its journal)".into(),
                self.resent.to_string(),
            ),
        ]);
        rows.push(("outcomes".into(), String::new()));
        for (k, v) in &self.outcomes {
            rows.push((format!("  {k}"), v.to_string()));
        }
        rows.push(("violations (must be 0)".into(), self.violation_count().to_string()));
        for check in CHECKS {
            let n = self.violations.get(check).map_or(0, Vec::len);
            rows.push((format!("  {check}"), n.to_string()));
        }
        rows.push((
            "failing seeds".into(),
            if self.failing_seeds.is_empty() {
                "-".into()
            } else {
                self.failing_seeds
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        ));
        rows.push(("real time".into(), format!("{:.0} s", self.real_seconds)));
        crate::table_rows(rows)
    }

    /// Each violation, one per line.
    pub fn details(&self) -> String {
        let mut out = String::new();
        for (check, lines) in &self.violations {
            for line in lines {
                let _ = writeln!(out, "VIOLATION ({check}): {line}");
            }
        }
        out
    }
}

/// Options of a run over seeds.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub first_seed: u64,
    pub last_seed: u64,
    /// Occurrences per seed.
    pub size: usize,
    /// Occurrences per task.
    pub per_task: usize,
    /// Tasks delivered at once.
    pub concurrency: usize,
    /// Print each seed's fault schedule.
    pub print_schedule: bool,
    /// Seeds run at once, each on its own stack.
    pub parallel: usize,
    /// Tamper with the table after the deliveries, before the checks (one
    /// run record deleted, one account overcharged): the checks must find it.
    pub tamper: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            first_seed: 1,
            last_seed: 20,
            size: 500,
            per_task: 10,
            concurrency: 16,
            print_schedule: false,
            parallel: 1,
            tamper: false,
        }
    }
}

/// Seeds a commit explores: `count` seeds from the first 12 hex digits of
/// its id, far above the fixed seeds any test names, so every commit CI
/// tests runs seeds nobody tuned to, and anyone replays them from the id.
/// The commit under test: `SIM_COMMIT` (`infra/scripts/test.sh` sets it
/// from git), else what git says of this checkout.
pub fn commit_under_test() -> String {
    if let Ok(commit) = std::env::var("SIM_COMMIT")
        && !commit.is_empty()
    {
        return commit;
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("git rev-parse HEAD (or set SIM_COMMIT)");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub fn seeds_of_commit(commit: &str, count: u64) -> anyhow::Result<(u64, u64)> {
    let hex = commit.get(..12).filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    let hex = hex.with_context(|| format!("{commit:?} is no commit id (12 hex digits at least)"))?;
    let first = 1_000_000 + u64::from_str_radix(hex, 16)? % 1_000_000_000_000;
    Ok((first, first + count.max(1) - 1))
}

/// Runs every seed of the range, `parallel` at once, each on its own stack.
pub async fn run(config: &SimConfig) -> anyhow::Result<SimReport> {
    use futures::StreamExt;
    let started = Instant::now();
    let mut report = SimReport {
        size: config.size,
        ..Default::default()
    };
    let mut seeds = futures::stream::iter(config.first_seed..=config.last_seed)
        .map(|seed| async move {
            let plan = plan(seed, config.size, config.per_task);
            if config.print_schedule {
                println!("{}", plan.schedule());
            }
            run_seed(&plan, config.concurrency, config.tamper)
                .await
                .with_context(|| format!("seed {seed}"))
        })
        .buffer_unordered(config.parallel.max(1));
    while let Some(one) = seeds.next().await {
        let one = one?;
        let seed = one.seeds.first().copied().unwrap_or_default();
        eprintln!(
            "seed {seed}: {} occurrences, {} deliveries, {} violations",
            one.occurrences,
            one.deliveries,
            one.violation_count()
        );
        report.merge(one);
    }
    report.seeds.sort_unstable();
    report.real_seconds = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The simulated SQS of one occurrence: its messages, received until
/// acknowledged or dead-lettered.
/// What the simulation's admin decided of the requests of gated calls.
#[derive(Debug, Clone, Copy, Default)]
struct Decided {
    approved: usize,
    denied: usize,
}

/// The simulation's workspace admin: decides a parked occurrence's open
/// request at once, a third denied (its occurrence ends skipped `denied`),
/// the rest approved (the resume's body answered, to be delivered). Not
/// faulted: the admin function's own failures are its tests'.
async fn decide(
    admin: &DynamoStore,
    run_id: &str,
    rng: &mut fastrand::Rng,
    decided: &mut Decided,
) -> anyhow::Result<Option<String>> {
    use shared::domain::run::gate::{ApprovalState, CallDecision};
    use shared::ports::CallApprovals;
    let requests = admin.run_approvals("ws_1", run_id, None).await?;
    let Some(open) = requests.iter().find(|r| r.state == ApprovalState::Open) else {
        return Ok(None);
    };
    let now = Utc::now();
    if rng.u8(..3) == 0 {
        let denied = open.decide(CallDecision::Deny, "sim", None, open.version, now)?;
        let ended =
            shared::app::approvals::end_occurrence(admin, &denied, open.version, now, Duration::days(30)).await?;
        anyhow::ensure!(ended.is_ok(), "a parked occurrence could not be denied: {ended:?}");
        decided.denied += 1;
        return Ok(None);
    }
    let approved = open.decide(CallDecision::Approve, "sim", None, open.version, now)?;
    anyhow::ensure!(
        admin.approve_call(&approved, open.version).await?,
        "a parked occurrence's request could not be approved"
    );
    decided.approved += 1;
    Ok(Some(serde_json::to_string(&shared::app::approvals::resume_message(
        &approved,
    ))?))
}

#[allow(clippy::too_many_arguments)]
async fn run_occurrence(
    runner: &SimRunner,
    admin: &DynamoStore,
    task: &Task,
    index: usize,
    plan: &OccurrencePlan,
    scheduled: DateTime<Utc>,
    anchor: DateTime<Utc>,
    rng: &mut fastrand::Rng,
) -> Ran {
    let key = occurrence_key(scheduled);
    let mut ran = Ran {
        task: index,
        key,
        run_id: run_id(task.task_id.as_str(), scheduled),
        scheduled,
        lossy: false,
        dead_lettered: false,
        deliveries: 0,
        took_over: 0,
        answers: BTreeMap::new(),
        faults: Vec::new(),
        decided: Decided::default(),
        admin_errors: Vec::new(),
    };
    // (simulated seconds after the anchor, message, receives so far); a
    // message past the plan's is an approval's resume (`resumes`).
    let mut queue: Vec<(i64, usize, u32)> = plan.messages.iter().enumerate().map(|(i, m)| (m.at, i, 0)).collect();
    let mut resumes: Vec<(String, String, Vec<Vec<Fault>>)> = Vec::new();
    while !queue.is_empty() {
        queue.sort();
        let t = queue[0].0;
        let batch: Vec<(i64, usize, u32)> = queue.iter().copied().filter(|e| e.0 == t).collect();
        queue.retain(|e| e.0 != t);
        let real = Utc::now();
        // The planned time, or the real one when the machine is slower than
        // the plan: a run's wall time is measured against the real clock.
        let now = (anchor + Duration::seconds(t)).max(real);
        let deliveries = batch.iter().map(|&(_, m, receives)| {
            let (execution_id, body, planned) = match plan.messages.get(m) {
                Some(message) => (
                    message.execution_id.clone(),
                    run_message(task, scheduled, &message.execution_id),
                    &message.faults,
                ),
                None => {
                    let (execution_id, body, faults) = &resumes[m - plan.messages.len()];
                    (execution_id.clone(), body.clone(), faults)
                }
            };
            let mut faults = planned.get(receives as usize).cloned().unwrap_or_default();
            // A give-up needs a run whose wall time is short in real time:
            // only a delivery whose `now` is not ahead of the real clock.
            for f in &mut faults {
                if let Fault::GiveUp { kind } = *f
                    && now - real > Duration::seconds(1)
                {
                    // A stall would last the whole long invocation.
                    let kind = if kind == ModelFault::Stalled {
                        ModelFault::ServiceUnavailable
                    } else {
                        kind
                    };
                    *f = Fault::Throttle { kind, calls: 2 };
                }
            }
            let deadline = if faults.iter().any(|f| matches!(f, Fault::GiveUp { .. })) {
                now.max(real) + Duration::seconds(SETTLE_RESERVE_SECONDS) + Duration::seconds(GIVE_UP_SECONDS)
            } else {
                now + Duration::seconds(INVOCATION_SECONDS)
            };
            let id = format!("{execution_id}-{m}-{receives}");
            async move {
                let delivery = Arc::new(Delivery::new(faults));
                let fut = DELIVERY.scope(
                    delivery.clone(),
                    local::faults::scope(runner.deliver(&id, &body, now, deadline)),
                );
                let answer = tokio::select! {
                    answer = fut => match answer {
                        Ok(d @ (Disposition::Busy | Disposition::ReturnToQueue | Disposition::Paced(_))) => {
                            Answer::Back(d)
                        }
                        Ok(d) => Answer::Done(d),
                        Err(_) => Answer::Error,
                    },
                    () = delivery.crashed.notified() => Answer::Crashed,
                };
                let took_over = delivery.took_over.load(Ordering::Relaxed);
                (m, receives, answer, delivery.struck(), took_over)
            }
        });
        for (m, receives, answer, struck, took_over) in futures::future::join_all(deliveries).await {
            ran.deliveries += 1;
            ran.took_over += usize::from(took_over);
            *ran.answers.entry(answer.label()).or_default() += 1;
            for f in struck {
                ran.faults.push(f);
                let lossy = matches!(f, Fault::Crash { .. })
                    || matches!(
                        f,
                        Fault::Dynamo {
                            point: Point::Settle | Point::Release,
                            ..
                        }
                    );
                ran.lossy |= lossy;
            }
            let receives = receives + 1;
            if let Answer::Done(Disposition::AwaitingApproval) = answer {
                match decide(admin, &ran.run_id, rng, &mut ran.decided).await {
                    Ok(Some(body)) => {
                        let execution_id = format!("resume-{}-{}", ran.run_id, resumes.len());
                        resumes.push((execution_id, body, receive_faults(rng, Kind::Connector)));
                        queue.push((t + 30, plan.messages.len() + resumes.len() - 1, 0));
                    }
                    Ok(None) => {}
                    Err(error) => ran.admin_errors.push(format!("{error:#}")),
                }
                continue;
            }
            let delay = match answer {
                Answer::Done(_) => continue,
                Answer::Crashed => VISIBILITY_SECONDS,
                Answer::Back(_) | Answer::Error => {
                    i64::from(shared::domain::run::redelivery::return_delay(receives, rng.f64()))
                }
            };
            if receives >= MAX_RECEIVES {
                ran.dead_lettered = true;
            } else {
                queue.push((t + delay, m, receives));
            }
        }
    }
    ran
}

/// The tasks of a plan, as create and reconcile would have written them.
fn tasks_of(plan: &SeedPlan) -> Vec<Task> {
    plan.tasks
        .iter()
        .map(|t| match t.kind {
            Kind::Connector => {
                let mut task = connector_task(SERVER, &t.name, &[TOOL], &[]);
                if plan.gated {
                    task.approval = Some(shared::domain::task::Approval {
                        id: "admin:sim:1".into(),
                        approved_at: Utc::now(),
                        by: Some("sim".into()),
                        ask_first: BTreeSet::from([TOOL.to_owned()]),
                    });
                }
                task
            }
            Kind::Reminder => {
                let mut task = reminder(Utc::now());
                task.task_id = TaskId::for_reminder("ws_1", "usr_123", &t.name);
                task.title = t.name.clone();
                // Recurring, and every instant the plan delivers is one of
                // its occurrences (the door skips any other as rescheduled).
                task.spec.schedule = Schedule::Rate {
                    every: 1,
                    unit: shared::domain::schedule::RateUnit::Minutes,
                };
                task
            }
        })
        .collect()
}

/// The SDK's retry as configured (standard, three attempts) with no wait
/// between attempts: the SDK's backoff after an injected error or a
/// throttled model call is real time the simulation has no use for, and
/// what is retried, and how often, stays the same.
fn no_backoff(sdk: &aws_config::SdkConfig) -> aws_config::SdkConfig {
    let retry = sdk
        .retry_config()
        .cloned()
        .unwrap_or_else(aws_config::retry::RetryConfig::standard);
    sdk.to_builder()
        .retry_config(
            retry
                .with_initial_backoff(std::time::Duration::ZERO)
                .with_max_backoff(std::time::Duration::ZERO),
        )
        .build()
}

/// Runs one seed on a fresh stack and checks it.
pub async fn run_seed(plan: &SeedPlan, concurrency: usize, tamper: bool) -> anyhow::Result<SimReport> {
    let s = RunStack::start().await?;
    let prompts = plan
        .tasks
        .iter()
        .filter(|t| t.kind == Kind::Connector)
        .map(|t| {
            scheduled_prompt(
                &t.name,
                json!({"version": 1}),
                &[],
                &format!("Post the summary of the open issues ({}).", t.name),
            )
        })
        .collect();
    let fixture = McpFixture::start(FixtureState {
        prompts,
        tools: vec![tool(TOOL)],
        ..Default::default()
    })
    .await?;
    let store = DynamoStore::new(
        local::faults::dynamodb(&no_backoff(&s.t.aws.sdk)),
        &s.t.stack.names.table,
    );
    store
        .put_install(&install(INSTALL, SERVER, &fixture.url(), InstallScope::Workspace))
        .await?;
    let tasks = tasks_of(plan);
    for task in &tasks {
        store.insert_task(task).await?;
    }
    if let Some(limit) = plan.workspace_budget {
        use shared::ports::WorkspaceBudgets;
        let now = Utc::now();
        let set = s
            .store()
            .set_workspace_budget("ws_1", Some(limit), 0, "sim", now, &budget::period(now))
            .await?;
        anyhow::ensure!(set.is_ok(), "the workspace budget of a fresh table is at version 0");
    }
    let mut faulty = Vec::new();
    let mut stand_ins = Vec::new();
    for kind in GIVE_UP_FAULTS {
        let stand_in = ConverseStandIn::start().await?;
        stand_in.fault(Some(kind)).await;
        let sdk = no_backoff(&local::sdk_config(&stand_in.endpoint()).await);
        faulty.push((kind, BedrockModel::from_sdk(&sdk)));
        stand_ins.push(stand_in);
    }
    let admin = s.store();
    let sent = Arc::new(Mutex::new(HashMap::new()));
    let runner: SimRunner = Runner::new(
        SimStore(store),
        SimModel {
            normal: BedrockModel::from_sdk(&no_backoff(&s.model_sdk)),
            faulty,
        },
        SimConnectors {
            inner: McpConnectors::from_sdk(&s.t.aws.sdk, s.t.rules()),
            sent: sent.clone(),
        },
        RunSettings {
            catch_up: Duration::seconds(CATCH_UP_SECONDS),
            ..crate::run_settings(true)
        },
    );

    // Each task walks its occurrences; tasks run concurrently.
    let endpoint = s.t.aws.moto.endpoint();
    let armed = std::sync::atomic::AtomicUsize::new(0);
    let ran: Vec<Vec<Ran>> = {
        use futures::StreamExt;
        let runner = &runner;
        let admin = &admin;
        let tasks = &tasks;
        let (endpoint, armed) = (&endpoint, &armed);
        futures::stream::iter(plan.tasks.iter().enumerate())
            .map(|(index, tp)| async move {
                let mut rng = fastrand::Rng::with_seed(plan.seed ^ ((index as u64) << 20));
                let mut used = BTreeSet::new();
                let mut out = Vec::new();
                for occ in &tp.occurrences {
                    let real = Utc::now();
                    let mut scheduled = real.trunc_subsecs(0) - Duration::seconds(occ.lateness);
                    while !used.insert(scheduled) {
                        scheduled -= Duration::seconds(1);
                    }
                    let anchor = scheduled + Duration::seconds(occ.lateness) + (real - real.trunc_subsecs(0));
                    if occ.conflicts > 0 {
                        // The plain writes of a run: its journal's, and
                        // a gated run's use of its approval (a request the
                        // admin's transactions write too).
                        use shared::adapters::keys::Key;
                        let task = &tasks[index];
                        let partition = if plan.gated && occ.conflicts == 2 {
                            Key::approval(&task.workspace, "").pk
                        } else {
                            Key::journal_call(task.task_id.as_str(), "", 0).pk
                        };
                        if local::moto::arm_transaction_conflicts(endpoint, &partition, occ.conflicts).is_ok() {
                            armed.fetch_add(occ.conflicts as usize, Ordering::Relaxed);
                        }
                    }
                    out.push(
                        run_occurrence(runner, admin, &tasks[index], index, occ, scheduled, anchor, &mut rng).await,
                    );
                }
                out
            })
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await
    };
    let ran: Vec<Ran> = ran.into_iter().flatten().collect();
    // What no write met is disarmed: the checks and the tampering write
    // with a bare client.
    if let Some(left) = local::moto::armed_transaction_conflicts(&endpoint)?.as_object() {
        for pk in left.keys() {
            local::moto::arm_transaction_conflicts(&endpoint, pk, 0)?;
        }
    }
    let sent = sent.lock().map(|s| s.clone()).unwrap_or_default();
    let calls: Vec<Option<Value>> = fixture.state().read().await.call_metas.clone();
    if tamper {
        tamper_with(&s, &tasks, &ran).await?;
    }
    let mut report = check(plan, &s, &tasks, &ran, &sent, &calls).await?;
    report.conflicts_armed = armed.load(Ordering::Relaxed);
    report.conflicts_met = usize::try_from(local::moto::transaction_conflicts_met(&endpoint)?)?;
    drop(stand_ins);
    Ok(report)
}

/// Deletes the first succeeded run record and overcharges an account by a
/// dollar, behind the runner's back.
async fn tamper_with(s: &RunStack, tasks: &[Task], ran: &[Ran]) -> anyhow::Result<()> {
    use shared::adapters::keys::Key;
    for r in ran {
        let task = &tasks[r.task];
        let Some(record) = s.run_record(&task.task_id, &r.key).await else {
            continue;
        };
        if record["status"] != "succeeded" {
            continue;
        }
        let run = Key::run(task.task_id.as_str(), &r.key);
        s.t.dynamo
            .delete_item()
            .table_name(&s.t.stack.names.table)
            .set_key(Some(run.to_map()))
            .send()
            .await?;
        let account = match task.kind {
            shared::domain::task::TaskKind::Reminder => budget::account_of_principal("ws_1", "usr_123"),
            shared::domain::task::TaskKind::Connector => budget::Account::Install(format!("acct_{INSTALL}")),
        };
        s.t.dynamo
            .update_item()
            .table_name(&s.t.stack.names.table)
            .set_key(Some(Key::account(&account, &budget::period(r.scheduled)).to_map()))
            .update_expression("ADD spent_usd :one")
            .expression_attribute_values(":one", AttributeValue::N("1".into()))
            .send()
            .await?;
        return Ok(());
    }
    anyhow::bail!("nothing succeeded to tamper with")
}

fn f(value: &Value) -> f64 {
    value.as_f64().unwrap_or_default()
}

/// Whether a fault loses an attempt between a tool call and its journal
/// entry: a crash once the call was made, or at the journal's write before
/// it was sent.
fn before_its_journal(fault: &Fault) -> bool {
    matches!(
        fault,
        Fault::Crash {
            point: Point::Tool(_),
            after: true
        } | Fault::Crash {
            point: Point::Journal,
            after: false
        }
    )
}

/// The checks of one seed, from the table, the fixture and the bus.
async fn check(
    plan: &SeedPlan,
    s: &RunStack,
    tasks: &[Task],
    ran: &[Ran],
    sent: &HashMap<String, u32>,
    calls: &[Option<Value>],
) -> anyhow::Result<SimReport> {
    let seed = plan.seed;
    let mut report = SimReport {
        seeds: vec![seed],
        size: ran.len(),
        tasks: tasks.len(),
        occurrences: ran.len(),
        deliveries: ran.iter().map(|r| r.deliveries).sum(),
        ..Default::default()
    };
    let mut shapes: BTreeMap<String, usize> = BTreeMap::new();
    for task in &plan.tasks {
        for occ in &task.occurrences {
            if occ.lateness > CATCH_UP_SECONDS {
                *shapes
                    .entry("late: just outside the catch-up window".into())
                    .or_default() += 1;
            } else if occ.lateness > EDGE_SECONDS {
                *shapes
                    .entry("late: just inside the catch-up window".into())
                    .or_default() += 1;
            }
            for m in &occ.messages[1..] {
                *shapes.entry(format!("delivery: {}", m.what)).or_default() += 1;
            }
        }
    }
    report.faults.extend(shapes);
    for r in ran {
        for (label, n) in [
            ("gated call: approved", r.decided.approved),
            ("gated call: denied", r.decided.denied),
        ] {
            if n > 0 {
                *report.faults.entry(label.into()).or_default() += n;
            }
        }
        if r.took_over > 0 {
            *report.faults.entry("lease expired, taken over".into()).or_default() += r.took_over;
        }
        for fault in &r.faults {
            *report.faults.entry(fault.label()).or_default() += 1;
        }
        for (k, v) in &r.answers {
            *report.answers.entry((*k).to_owned()).or_default() += v;
        }
    }
    let items = s.t.scan_all().await?;
    let events = s.events().await;
    let mut events_of: HashMap<String, usize> = HashMap::new();
    for e in events
        .iter()
        .filter(|e| e["detail-type"] == shared::domain::run::notification::DETAIL_TYPE)
    {
        if let Some(id) = e["detail"]["run_id"].as_str() {
            *events_of.entry(id.to_owned()).or_default() += 1;
        }
    }
    let mut effects: HashMap<String, u32> = HashMap::new();
    // Each run's call keys, and how often each was sent.
    let mut keys_of: HashMap<String, HashMap<String, u32>> = HashMap::new();
    for meta in calls.iter().flatten() {
        if let Some(id) = meta["ai.nimblebrain/run-id"].as_str() {
            *effects.entry(id.to_owned()).or_default() += 1;
            let key = meta[shared::domain::run::journal::CALL_KEY_META]
                .as_str()
                .unwrap_or("(no key)")
                .to_owned();
            *keys_of.entry(id.to_owned()).or_default().entry(key).or_default() += 1;
        }
    }
    report.calls_sent = calls.iter().flatten().count();
    report.effects = keys_of.values().map(HashMap::len).sum();
    report.resent = report.calls_sent - report.effects;
    let mut records: HashMap<(String, String), &Value> = HashMap::new();
    let mut task_items: HashMap<String, &Value> = HashMap::new();
    let mut accounts: Vec<&Value> = Vec::new();
    let mut workspaces: Vec<&Value> = Vec::new();
    // Each run's requests: (state, used).
    let mut requests: HashMap<String, Vec<(String, bool)>> = HashMap::new();
    for item in &items {
        match item["entity"].as_str() {
            Some(shared::adapters::approvals::ENTITY) => {
                requests
                    .entry(item["run_id"].as_str().unwrap_or_default().to_owned())
                    .or_default()
                    .push((
                        item["state"].as_str().unwrap_or_default().to_owned(),
                        item["used_at"].is_string(),
                    ));
            }
            Some("run") => {
                records.insert(
                    (
                        item["task_id"].as_str().unwrap_or_default().to_owned(),
                        item["scheduled_time"].as_str().unwrap_or_default().to_owned(),
                    ),
                    item,
                );
            }
            Some("task") => {
                task_items.insert(item["task_id"].as_str().unwrap_or_default().to_owned(), item);
            }
            Some("account") => accounts.push(item),
            Some("workspace_budget") => workspaces.push(item),
            _ => {}
        }
    }
    let mut violate = |check: &'static str, line: String| {
        report
            .violations
            .entry(check)
            .or_default()
            .push(format!("seed {seed}: {line}"));
    };
    // Expected per (task, period) and per (account key, period).
    let mut budget_expected: BTreeMap<(String, String), f64> = BTreeMap::new();
    // What live claims hold in their workspace's month beyond their task's.
    let mut workspace_beyond: BTreeMap<(String, String), f64> = BTreeMap::new();
    // Keyed by the account item's (pk, sk).
    let mut account_expected: BTreeMap<(String, String), (f64, i64)> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    // Each task's occurrences as the table left them, for a violation's line.
    let mut traces: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in ran {
        let task = &tasks[r.task];
        let id = task.task_id.as_str();
        let period = budget::period(r.scheduled);
        let record = records.get(&(id.to_owned(), r.key.clone())).copied();
        let claim = task_items.get(id).map(|t| &t["claims"][&r.key]);
        let status = record.and_then(|rec| rec["status"].as_str()).unwrap_or("");
        // Every task's budget is checked, whatever its occurrences left.
        budget_expected.entry((id.to_owned(), period.clone())).or_default();
        let what = format!("{} {} ({})", task.task_id, r.key, describe(&r.faults));
        traces.entry(id.to_owned()).or_default().push(format!(
            "{} [{}]: record {} ${:.6}, claim {} ${:.6}; {}",
            r.key,
            task.title,
            if status.is_empty() { "none" } else { status },
            record.map_or(0.0, |rec| f(&rec["cost_usd"])),
            claim.and_then(|c| c["status"].as_str()).unwrap_or("none"),
            claim.map_or(0.0, |c| f(&c["crashed_usd"])),
            describe(&r.faults)
        ));
        match record {
            Some(rec) => {
                let reason = rec["reason"].as_str().map(|r| format!(": {r}")).unwrap_or_default();
                *outcomes.entry(format!("{status}{reason}")).or_default() += 1;
            }
            None if r.dead_lettered => *outcomes.entry("dead-lettered, unrecorded".into()).or_default() += 1,
            None => *outcomes.entry("unrecorded".into()).or_default() += 1,
        }
        // 1. At most one settled outcome.
        let events = events_of.get(&r.run_id).copied().unwrap_or_default();
        if events > 1 {
            violate(ONE_OUTCOME, format!("{what}: settled {events} times (bus events)"));
        }
        if let Some(claim) = claim.filter(|c| c.is_object()) {
            let claim_status = claim["status"].as_str().unwrap_or_default();
            if !matches!(claim_status, "running" | "released") && claim_status != status {
                violate(
                    ONE_OUTCOME,
                    format!("{what}: the claim finished as {claim_status}, the record says {status:?}"),
                );
            }
            // What a claim holds beyond its record: a running one its
            // reservation and crashed attempts', a released one what it carries.
            let task_side = match claim_status {
                "running" => f(&claim["crashed_usd"]) + budget::reservation(task.spec.budget),
                "released" | "awaiting_approval" => f(&claim["crashed_usd"]),
                _ => 0.0,
            };
            *budget_expected.entry((id.to_owned(), period.clone())).or_default() += task_side;
            // A live claim holds its workspace reservation there: a
            // connector task's is its task's, a reminder's its run's most
            // (`budget::workspace_reservation`), which its task does not.
            if matches!(claim_status, "running" | "released" | "awaiting_approval") {
                *workspace_beyond.entry((id.to_owned(), period.clone())).or_default() +=
                    f(&claim["workspace_usd"]) - task_side;
            }
        }
        // 2. Tool side effects, at the fixture, by run id.
        let done = effects.get(&r.run_id).copied().unwrap_or_default();
        let made = sent.get(&r.run_id).copied().unwrap_or_default();
        let recorded_calls = record
            .filter(|_| matches!(status, "succeeded" | "failed"))
            .map_or(0, |rec| rec["usage"]["tool_calls"].as_u64().unwrap_or_default() as u32);
        if done > made {
            violate(
                SIDE_EFFECTS,
                format!("{what}: {done} side effects at the server for {made} calls the attempts made"),
            );
        }
        if done < recorded_calls {
            violate(
                SIDE_EFFECTS,
                format!("{what}: {done} side effects at the server, the record counts {recorded_calls} calls"),
            );
        }
        if !r.lossy && done != recorded_calls {
            violate(
                SIDE_EFFECTS,
                format!("{what}: no attempt lost, yet {done} side effects for {recorded_calls} recorded calls"),
            );
        }
        // 2b. No call made twice: at a server that honours the call key,
        // each key is one effect, and the occurrence's record counts every
        // one; a key is sent again only after an attempt was lost between
        // its call and the call's journal entry.
        let keys = keys_of.get(&r.run_id);
        let distinct = keys.map_or(0, |k| u32::try_from(k.len()).unwrap_or(u32::MAX));
        let resent: u32 = keys.map_or(0, |k| k.values().map(|n| n - 1).sum());
        let window = u32::try_from(r.faults.iter().filter(|f| before_its_journal(f)).count()).unwrap_or(u32::MAX);
        if resent > window {
            violate(
                CALLED_ONCE,
                format!(
                    "{what}: {resent} calls sent again under a key already sent, {window} attempts lost between a call and its journal"
                ),
            );
        }
        // An attempt lost between a call and its journal entry may leave
        // an effect no record can count (its approval used, its answer
        // unknown): at most one for each such loss.
        if matches!(status, "succeeded" | "failed")
            && !(recorded_calls <= distinct && distinct <= recorded_calls + window)
        {
            violate(
                CALLED_ONCE,
                format!(
                    "{what}: {distinct} effects at a server honouring the call key, the record counts {recorded_calls} calls, {window} attempts lost between a call and its journal"
                ),
            );
        }
        // 3. Accounting: what the records cost. A record awaiting approval
        // is not an outcome: its claim holds what it shows.
        if let Some(rec) = record.filter(|_| status != "awaiting_approval") {
            let cost = f(&rec["cost_usd"]);
            *budget_expected.entry((id.to_owned(), period.clone())).or_default() += cost;
            if status != "skipped" || cost > 0.0 {
                let account = match task.kind {
                    shared::domain::task::TaskKind::Reminder => budget::account_of_principal("ws_1", "usr_123"),
                    shared::domain::task::TaskKind::Connector => budget::Account::Install(format!("acct_{INSTALL}")),
                };
                let key = shared::adapters::keys::Key::account(&account, &period);
                let account = (key.pk, key.sk);
                let entry = account_expected.entry(account).or_default();
                entry.0 += cost;
                entry.1 += 1;
            }
        }
        // 4. One bus event per succeeded or failed record, none for a skip.
        let want = usize::from(matches!(status, "succeeded" | "failed"));
        if events != want {
            violate(
                ONE_EVENT,
                format!("{what}: {events} bus events for a record {status:?}"),
            );
        }
        // 6. Gated calls: a call at the server only under an approved and
        // used request of its run; every decision the admin made applied.
        if plan.gated && task.kind == shared::domain::task::TaskKind::Connector {
            let of_run = requests.get(&r.run_id).map(Vec::as_slice).unwrap_or_default();
            let used = of_run
                .iter()
                .filter(|(state, used)| state == "approved" && *used)
                .count();
            if done > used as u32 {
                violate(
                    GATED,
                    format!("{what}: {done} calls at the server, {used} approved requests used"),
                );
            }
            if r.decided.denied > 0 && !(status == "skipped" && record.is_some_and(|rec| rec["reason"] == "denied")) {
                violate(GATED, format!("{what}: denied, yet the record is {status:?}"));
            }
        }
        for error in &r.admin_errors {
            violate(GATED, format!("{what}: {error}"));
        }
        // 5. None lost.
        if record.is_none() {
            let running = claim.is_some_and(|c| c["status"] == "running");
            violate(
                NONE_LOST,
                format!(
                    "{what}: no record after {} deliveries ({}{})",
                    r.deliveries,
                    if running { "claim running" } else { "no claim" },
                    if r.dead_lettered { ", dead-lettered" } else { "" }
                ),
            );
        }
    }
    for ((id, period), expected) in &budget_expected {
        let used = task_items
            .get(id.as_str())
            .map_or(0.0, |t| f(&t["budget_used"][period.as_str()]));
        // 8. A task's month stays within its own budget too.
        let monthly = tasks
            .iter()
            .find(|t| t.task_id.as_str() == id)
            .and_then(|t| t.spec.budget)
            .map(|b| b.max_usd_per_month);
        if let Some(monthly) = monthly
            && used > monthly + 1e-9
        {
            violate(
                CAPS,
                format!("task {id} {period}: budget_used {used:.6}, its monthly {monthly:.6}"),
            );
        }
        if (used - expected).abs() > 1e-6 {
            violate(
                ACCOUNTING,
                format!(
                    "task {id} {period}: budget_used {used:.6}, records and running claims {expected:.6}\n    {}",
                    traces.get(id.as_str()).map(|t| t.join("\n    ")).unwrap_or_default()
                ),
            );
        }
    }
    // A workspace's month holds what its tasks' months hold, to the cent's
    // millionth: every write of one moves the other in the same transaction.
    let mut workspace_expected: BTreeMap<(String, String), f64> = BTreeMap::new();
    for ((id, period), expected) in &budget_expected {
        let workspace = task_items
            .get(id.as_str())
            .and_then(|t| t["workspace"].as_str())
            .unwrap_or_default();
        *workspace_expected
            .entry((workspace.to_owned(), period.clone()))
            .or_default() += expected
            + workspace_beyond
                .get(&(id.clone(), period.clone()))
                .copied()
                .unwrap_or(0.0);
    }
    for ((workspace, period), expected) in &workspace_expected {
        let held = workspaces
            .iter()
            .find(|w| w["workspace"].as_str() == Some(workspace.as_str()))
            .map_or(0.0, |w| f(&w[shared::adapters::budgets::committed_of(period).as_str()]));
        if (held - expected).abs() > 1e-6 {
            violate(
                ACCOUNTING,
                format!("workspace {workspace} {period}: holds {held:.6}, its tasks' months {expected:.6}"),
            );
        }
        // 8. No month spends past its limit: what it holds (its records'
        // costs and its live claims' reservations) stays at or below it.
        if let Some(limit) = plan.workspace_budget
            && held > limit + 1e-9
        {
            violate(
                CAPS,
                format!("workspace {workspace} {period}: holds {held:.6}, its limit {limit:.6}"),
            );
        }
    }
    for a in &accounts {
        let key = (
            a["pk"].as_str().unwrap_or_default().to_owned(),
            a["sk"].as_str().unwrap_or_default().to_owned(),
        );
        if !account_expected.contains_key(&key) {
            violate(
                ACCOUNTING,
                format!("account {} {} charged with no record to charge", key.0, key.1),
            );
        }
    }
    for ((pk, sk), (spent, runs)) in &account_expected {
        let item = accounts
            .iter()
            .find(|a| a["pk"].as_str() == Some(pk.as_str()) && a["sk"].as_str() == Some(sk.as_str()));
        let (got_spent, got_runs) = item.map_or((0.0, 0), |a| {
            (f(&a["spent_usd"]), a["runs"].as_i64().unwrap_or_default())
        });
        if (got_spent - spent).abs() > 1e-6 || got_runs != *runs {
            violate(
                ACCOUNTING,
                format!(
                    "account {pk} {sk}: charged {got_runs} runs, ${got_spent:.6}; the records: {runs} runs, ${spent:.6}"
                ),
            );
        }
    }
    report.outcomes = outcomes;
    if report.violation_count() > 0 {
        report.failing_seeds.insert(seed);
    }
    Ok(report)
}

fn describe(faults: &[Fault]) -> String {
    if faults.is_empty() {
        "no fault struck".to_owned()
    } else {
        faults.iter().map(|f| f.label()).collect::<Vec<_>>().join("; ")
    }
}
