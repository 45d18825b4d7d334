//! The lifecycle model check (issue: a reminder's whole life holds): random
//! sequences of an owner's operations (create one-time, daily or monthly on
//! a late day, update of each field, pause, resume, cancel, skip next,
//! unskip, run now and its replay), an admin's (pause, resume, delete, restore), deliveries
//! (on time, late, duplicate, stale, throttled and returned), the worker
//! flag, clock moves and owner/admin races, driven through the real
//! schedules app, admin and runner against moto and the Converse stand-in,
//! and held after every step to a small reference model:
//!
//! - what `get` shows (state, title, instruction, version) is the model's;
//! - every delivered occurrence has one outcome, the model's, and keeps it;
//! - a stale occurrence never completes a reminder (the state check);
//! - the Scheduler schedule exists, and is enabled, exactly when the model
//!   says the reminder can still run (or, when writers raced, as the task
//!   that won says);
//! - the cap counts exactly the model's active reminders.
//!
//! CI runs a small number of sequences from a seed derived from the commit
//! under test (each commit explores sequences of its own; the seed and the
//! command that replays it are printed); a long run:
//! `LIFECYCLE_CASES=1000 cargo test -p tests --test suite lifecycle -- --nocapture`
//! (`LIFECYCLE_SEED=<n>` replays a seed).

use std::collections::BTreeMap;

use chrono::{DateTime, Datelike, Duration, DurationRound, Timelike, Utc};
use local::converse::Window;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::app::admin::{Admin, AdminSettings};
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::occurrence::occurrence_key;
use shared::ports::TaskStore;
use tests::{AdminFunction, ENABLED, RunStack, run_settings, schedules_create};

/// Places one principal may hold (`MAX_ACTIVE_REMINDERS`).
const CAP: usize = 3;
/// Reminder slots a sequence addresses.
const SLOTS: usize = 3;
const CATCH_UP: i64 = 3600;

#[derive(Debug, Clone)]
enum When {
    /// Minutes after the clock.
    At(i64),
    /// Daily at this hour, UTC.
    Daily(u32),
    /// Monthly on this day (28 to 31: some months lack it), at this hour, UTC.
    Monthly(u32, u32),
}

#[derive(Debug, Clone)]
enum Op {
    Create(usize, When),
    Title(usize),
    Instruction(usize),
    Move(usize, When),
    Pause(usize),
    Resume(usize),
    Cancel(usize),
    AdminPause(usize),
    AdminResume(usize),
    AdminDelete(usize),
    AdminRestore(usize),
    /// Scheduler delivers the current occurrence (if its schedule fires),
    /// this many minutes after its time.
    Deliver(usize, i64),
    /// A moved reminder's old occurrence, delivered on time.
    Stale(usize),
    /// The last delivered occurrence, once more.
    Duplicate(usize),
    /// The current occurrence, the model throttled: it goes back.
    Throttled(usize),
    Worker(bool),
    Advance(i64),
    /// The owner pauses while an admin resumes, both at the version read.
    Race(usize),
    SkipNext(usize),
    Unskip(usize),
    /// The owner asks for a run now with a new key.
    RunNow(usize),
    /// The last run now's key again, with the version it was asked at.
    RunNowAgain(usize),
    /// The last run now's message is delivered, this many seconds after it.
    DeliverRunNow(usize, i64),
}

fn when() -> impl Strategy<Value = When> {
    prop_oneof![
        (10i64..600).prop_map(When::At),
        (0u32..24).prop_map(When::Daily),
        (28u32..=31, 0u32..24).prop_map(|(d, h)| When::Monthly(d, h)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let slot = 0..SLOTS;
    prop_oneof![
        4 => (slot.clone(), when()).prop_map(|(s, w)| Op::Create(s, w)),
        1 => slot.clone().prop_map(Op::Title),
        1 => slot.clone().prop_map(Op::Instruction),
        3 => (slot.clone(), when()).prop_map(|(s, w)| Op::Move(s, w)),
        1 => slot.clone().prop_map(Op::Pause),
        1 => slot.clone().prop_map(Op::Resume),
        1 => slot.clone().prop_map(Op::Cancel),
        1 => slot.clone().prop_map(Op::AdminPause),
        1 => slot.clone().prop_map(Op::AdminResume),
        1 => slot.clone().prop_map(Op::AdminDelete),
        1 => slot.clone().prop_map(Op::AdminRestore),
        7 => (slot.clone(), prop_oneof![Just(0i64), Just(1), Just(90)]).prop_map(|(s, m)| Op::Deliver(s, m)),
        4 => slot.clone().prop_map(Op::Stale),
        1 => slot.clone().prop_map(Op::Duplicate),
        1 => slot.clone().prop_map(Op::Throttled),
        1 => any::<bool>().prop_map(Op::Worker),
        1 => (1i64..1500).prop_map(Op::Advance),
        1 => slot.clone().prop_map(Op::Race),
        2 => slot.clone().prop_map(Op::SkipNext),
        1 => slot.clone().prop_map(Op::Unskip),
        2 => slot.clone().prop_map(Op::RunNow),
        1 => slot.clone().prop_map(Op::RunNowAgain),
        2 => (slot, prop_oneof![Just(2i64), Just(5400)]).prop_map(|(s, late)| Op::DeliverRunNow(s, late)),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    At(DateTime<Utc>),
    Daily(u32),
    /// Day of the month, hour.
    Monthly(u32, u32),
}

impl Sched {
    /// The first occurrence at or after `from`.
    fn next(self, from: DateTime<Utc>) -> DateTime<Utc> {
        match self {
            Sched::At(at) => at,
            Sched::Daily(hour) => {
                let day = from.duration_trunc(Duration::days(1)).unwrap();
                let today = day + Duration::hours(i64::from(hour));
                if today >= from {
                    today
                } else {
                    today + Duration::days(1)
                }
            }
            Sched::Monthly(_, hour) => {
                let mut day = from.duration_trunc(Duration::days(1)).unwrap() + Duration::hours(i64::from(hour));
                while day < from || !self.occurs_at(day) {
                    day += Duration::days(1);
                }
                day
            }
        }
    }

    fn occurs_at(self, t: DateTime<Utc>) -> bool {
        match self {
            Sched::At(at) => at == t,
            Sched::Daily(hour) => t.hour() == hour && t.minute() == 0 && t.second() == 0,
            Sched::Monthly(day, hour) => t.day() == day && t.hour() == hour && t.minute() == 0 && t.second() == 0,
        }
    }
}

/// The model of one reminder.
#[derive(Debug, Clone)]
struct Rem {
    task_id: String,
    title: String,
    instruction: String,
    sched: Sched,
    /// Paused, and whether by its owner.
    paused: Option<bool>,
    deleted: bool,
    /// Deleted first by its owner (a cancel): no admin restores it.
    cancelled_by_owner: bool,
    completed: bool,
    version: u64,
    /// A one-time schedule that fired deleted itself.
    fired: bool,
    /// Occurrences of schedules it had before.
    old: Vec<DateTime<Utc>>,
    /// Delivered occurrences and their outcome (status, reason).
    outcomes: BTreeMap<DateTime<Utc>, (String, Option<String>)>,
    last: Option<DateTime<Utc>>,
    /// The occurrence its owner skips next.
    skip: Option<DateTime<Utc>>,
    /// Run-now occurrences the task still holds as its own.
    extras: std::collections::BTreeSet<DateTime<Utc>>,
    /// The last run now asked: its key, the version it was asked at, its
    /// run id and occurrence.
    run_now: Option<(String, u64, String, DateTime<Utc>)>,
}

impl Rem {
    fn state(&self) -> &'static str {
        if self.deleted {
            "deleted"
        } else if self.completed {
            "completed"
        } else if self.paused.is_some() {
            "paused"
        } else {
            "scheduled"
        }
    }

    fn active(&self) -> bool {
        matches!(self.state(), "scheduled" | "paused")
    }

    fn open(&self) -> bool {
        !matches!(self.state(), "deleted" | "completed")
    }

    /// What Scheduler holds: `None` none, else enabled or not.
    fn schedule(&self) -> Option<bool> {
        match self.state() {
            "deleted" | "completed" => None,
            _ if self.fired => None,
            "paused" => Some(false),
            _ => Some(true),
        }
    }

    /// A write by a change at `now`: version, its schedule put again, and
    /// a skip whose time has passed forgotten.
    fn wrote(&mut self, now: DateTime<Utc>) {
        self.version += 1;
        self.fired = false;
        self.skip = self.skip.filter(|s| *s > now);
        // A run now is stale once the task stopped running.
        if self.state() != "scheduled" {
            self.extras.clear();
        }
    }
}

struct World {
    s: RunStack,
    app: schedules::App,
    admin:
        AdminFunction<shared::adapters::dynamo::DynamoStore, EventBridgeSchedules, shared::adapters::queue::RunsQueue>,
    workspace: String,
    now: DateTime<Utc>,
    worker: bool,
    keys: usize,
    rems: BTreeMap<usize, Rem>,
}

fn fail(what: String) -> TestCaseError {
    TestCaseError::fail(what)
}

impl World {
    fn owner(&self) -> Value {
        json!({"id": "usr_1", "workspace": self.workspace, "scopes": ["schedule.read", "schedule.write"]})
    }

    fn admin_principal(&self) -> Value {
        json!({"id": "adm_1", "workspace": self.workspace, "scopes": ["schedule.admin"]})
    }

    fn key(&mut self) -> String {
        self.keys += 1;
        format!("k{}", self.keys)
    }

    async fn owner_op(&mut self, name: &str, slot: usize, extra: Value) -> Value {
        let rem = &self.rems[&slot];
        let mut request = json!({"op": name, "principal": self.owner(), "task_id": rem.task_id,
                                 "expected_version": rem.version});
        if let (Some(r), Some(extra)) = (request.as_object_mut(), extra.as_object()) {
            r.extend(extra.clone());
        }
        self.app.handle(request, self.now).await.expect("schedules answers")
    }

    async fn admin_op(&self, name: &str, slot: usize) -> Value {
        let rem = &self.rems[&slot];
        let request = json!({"op": name, "principal": self.admin_principal(), "task_id": rem.task_id,
                             "expected_version": rem.version});
        self.admin.handle(request, self.now).await.expect("admin answers")
    }

    fn schedule_input(&self, when: &When) -> (Value, Sched) {
        match *when {
            When::At(minutes) => {
                let at = self.now + Duration::minutes(minutes);
                (json!({"at": occurrence_key(at)}), Sched::At(at))
            }
            When::Daily(hour) => (
                json!({"daily": {"time": format!("{hour:02}:00"), "timezone": "UTC"}}),
                Sched::Daily(hour),
            ),
            When::Monthly(day, hour) => (
                json!({"monthly": {"day": day, "time": format!("{hour:02}:00"), "timezone": "UTC"}}),
                Sched::Monthly(day, hour),
            ),
        }
    }

    fn active(&self) -> usize {
        self.rems.values().filter(|r| r.active()).count()
    }

    /// Delivers `at` of `slot` through the real runner at `now`.
    async fn deliver(
        &mut self,
        slot: usize,
        at: DateTime<Utc>,
        now: DateTime<Utc>,
        deadline: DateTime<Utc>,
    ) -> Disposition {
        let body = json!({"task_id": self.rems[&slot].task_id, "workspace": self.workspace,
                          "scheduled_time": occurrence_key(at),
                          "execution_id": format!("e{}", now.timestamp_millis()), "attempt": "1"})
        .to_string();
        self.s
            .runner_on(self.s.store(), run_settings(self.worker))
            .deliver("m", &body, now, deadline)
            .await
            .expect("the delivery answers")
    }

    /// The outcome the door and the settle give `at` of `rem` at `now`.
    fn expected(&self, rem: &Rem, at: DateTime<Utc>, now: DateTime<Utc>) -> (String, Option<String>) {
        let skip = |r: SkipReason| ("skipped".to_owned(), Some(r.describe()));
        if !self.worker {
            return skip(SkipReason::WorkerDisabled);
        }
        if (now - at).num_seconds() > CATCH_UP {
            return skip(SkipReason::Missed);
        }
        if rem.deleted {
            return skip(SkipReason::Deleted);
        }
        if rem.paused.is_some() {
            return skip(SkipReason::Paused);
        }
        if rem.completed {
            return skip(SkipReason::Completed);
        }
        if !rem.sched.occurs_at(at) && !rem.extras.contains(&at) {
            return skip(SkipReason::Rescheduled);
        }
        if rem.skip == Some(at) {
            return skip(SkipReason::SkippedByOwner);
        }
        ("succeeded".to_owned(), None)
    }

    /// Delivers and checks the outcome against the model, then applies it.
    async fn delivered(&mut self, slot: usize, at: DateTime<Utc>, now: DateTime<Utc>) -> Result<(), TestCaseError> {
        let rem = self.rems[&slot].clone();
        let first = !rem.outcomes.contains_key(&at);
        let expected = self.expected(&rem, at, now);
        let got = self.deliver(slot, at, now, now + Duration::minutes(5)).await;
        let rem = self.rems.get_mut(&slot).unwrap();
        rem.last = Some(at);
        if !first {
            // A duplicate, or a skip at the first door (late, or the
            // worker off) that finds the occurrence's record and claim: it
            // never runs again, and its record stays (`check`).
            prop_assert!(
                matches!(got, Disposition::Duplicate | Disposition::Skipped(_)),
                "a second delivery of {at} runs nothing: {got:?}"
            );
            return Ok(());
        }
        prop_assert!(
            !matches!(
                got,
                Disposition::Duplicate | Disposition::Busy | Disposition::ReturnToQueue
            ),
            "{at}: {got:?}"
        );
        let finishes = expected.0 == "succeeded" || matches!(expected.1.as_deref(), Some("worker disabled" | "missed"));
        if finishes && rem.sched == Sched::At(at) && !rem.deleted && rem.paused.is_none() && !rem.completed {
            rem.completed = true;
            rem.version += 1;
        }
        rem.outcomes.insert(at, expected);
        Ok(())
    }

    async fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Create(slot, when) => {
                if self.rems.contains_key(slot) {
                    return Ok(());
                }
                let (input, sched) = self.schedule_input(when);
                let key = self.key();
                let answer = self
                    .app
                    .handle(schedules_create(&self.owner(), &key, "Title 0", input), self.now)
                    .await
                    .expect("schedules answers");
                if self.active() >= CAP {
                    prop_assert_eq!(tests::code(&answer), "too_many_active", "{}", answer);
                    return Ok(());
                }
                prop_assert_eq!(&answer["ok"], true, "{}", answer);
                self.rems.insert(
                    *slot,
                    Rem {
                        task_id: answer["task"]["task_id"].as_str().unwrap().to_owned(),
                        title: "Title 0".into(),
                        instruction: "Remind me: Title 0.".into(),
                        sched,
                        paused: None,
                        deleted: false,
                        cancelled_by_owner: false,
                        completed: false,
                        version: 1,
                        fired: false,
                        old: Vec::new(),
                        outcomes: BTreeMap::new(),
                        last: None,
                        skip: None,
                        extras: Default::default(),
                        run_now: None,
                    },
                );
            }
            Op::Title(slot) | Op::Instruction(slot) | Op::Move(slot, _) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let text = format!("Edit {}", self.keys);
                let (input, sched) = match op {
                    Op::Title(_) => (json!({"title": text}), None),
                    Op::Instruction(_) => (json!({"instruction": text}), None),
                    Op::Move(_, when) => {
                        let (input, sched) = self.schedule_input(when);
                        (input, Some(sched))
                    }
                    _ => unreachable!(),
                };
                let key = self.key();
                let answer = self
                    .owner_op("update", *slot, json!({"idempotency_key": key, "input": input}))
                    .await;
                if !rem.open() {
                    prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer);
                    return Ok(());
                }
                prop_assert_eq!(&answer["ok"], true, "{}", answer);
                let rem = self.rems.get_mut(slot).unwrap();
                match op {
                    Op::Title(_) => rem.title = text,
                    Op::Instruction(_) => rem.instruction = text,
                    _ => {}
                }
                let now = self.now;
                if let Some(sched) = sched
                    && sched != rem.sched
                {
                    let from = now - Duration::hours(1);
                    rem.old.push(rem.sched.next(from));
                    rem.sched = sched;
                    // A run now is stale once its task moved.
                    rem.extras.clear();
                    // A skip still to come moves to the new schedule's next one.
                    rem.skip = rem.skip.filter(|s| *s > now).and_then(|_| match sched {
                        Sched::At(_) => None,
                        other => Some(other.next(now + Duration::seconds(1))),
                    });
                }
                rem.wrote(now);
            }
            Op::Pause(slot) | Op::Resume(slot) | Op::Cancel(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let name = match op {
                    Op::Pause(_) => "pause",
                    Op::Resume(_) => "resume",
                    _ => "cancel",
                };
                let answer = self.owner_op(name, *slot, json!({})).await;
                let rem_now = self.rems.get_mut(slot).unwrap();
                match name {
                    "cancel" if rem.deleted => prop_assert_eq!(&answer["ok"], true),
                    "cancel" => {
                        prop_assert_eq!(&answer["ok"], true, "{}", answer);
                        rem_now.deleted = true;
                        rem_now.cancelled_by_owner = true;
                        rem_now.wrote(self.now);
                    }
                    _ if !rem.open() => prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer),
                    "pause" if rem.paused.is_some() => prop_assert_eq!(&answer["ok"], true),
                    "pause" => {
                        prop_assert_eq!(&answer["ok"], true, "{}", answer);
                        rem_now.paused = Some(true);
                        rem_now.wrote(self.now);
                    }
                    _ if rem.paused.is_none() => prop_assert_eq!(&answer["ok"], true),
                    _ if rem.paused == Some(false) => {
                        prop_assert_eq!(tests::code(&answer), "invalid_request", "an admin's pause: {}", answer)
                    }
                    _ if matches!(rem.sched, Sched::At(at) if at <= self.now) => {
                        prop_assert_eq!(tests::code(&answer), "instant_in_past", "{}", answer)
                    }
                    _ => {
                        prop_assert_eq!(&answer["ok"], true, "{}", answer);
                        rem_now.paused = None;
                        rem_now.wrote(self.now);
                    }
                }
            }
            Op::AdminPause(slot) | Op::AdminResume(slot) | Op::AdminDelete(slot) | Op::AdminRestore(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let name = match op {
                    Op::AdminPause(_) => "pause",
                    Op::AdminResume(_) => "resume",
                    Op::AdminDelete(_) => "delete",
                    _ => "restore",
                };
                let over_cap = name == "restore" && rem.deleted && !rem.completed && self.active() >= CAP;
                // Nothing brings back what its owner cancelled, or a
                // reminder whose time has passed (it could never run).
                let owners = name == "restore" && rem.deleted && rem.cancelled_by_owner;
                let passed =
                    matches!(name, "resume" | "restore") && matches!(rem.sched, Sched::At(at) if at <= self.now);
                let answer = self.admin_op(name, *slot).await;
                if over_cap || owners || passed {
                    prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer);
                    return Ok(());
                }
                prop_assert_eq!(&answer["ok"], true, "{}", answer);
                let rem = self.rems.get_mut(slot).unwrap();
                match name {
                    "pause" => rem.paused = Some(false),
                    "resume" => rem.paused = None,
                    "delete" => rem.deleted = true,
                    _ => {
                        rem.deleted = false;
                        rem.cancelled_by_owner = false;
                    }
                }
                rem.wrote(self.now);
            }
            Op::Deliver(slot, late) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let at = rem.sched.next(self.now);
                // Scheduler fires only an enabled schedule, and a one-time
                // one once.
                if rem.schedule() != Some(true) || rem.outcomes.contains_key(&at) {
                    self.now = self.now.max(at) + Duration::minutes(1);
                    return Ok(());
                }
                let now = self.now.max(at) + Duration::minutes(*late) + Duration::seconds(3);
                if let Sched::At(_) = rem.sched {
                    self.s.t.scheduler_delete(&rem.task_id).await;
                    self.rems.get_mut(slot).unwrap().fired = true;
                }
                self.delivered(*slot, at, now).await?;
                self.now = now;
            }
            Op::Stale(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let Some(at) = rem.old.last().copied().filter(|at| !rem.sched.occurs_at(*at)) else {
                    return Ok(());
                };
                let now = self.now.max(at) + Duration::seconds(20);
                self.delivered(*slot, at, now).await?;
                self.now = now;
            }
            Op::Duplicate(slot) => {
                let Some(at) = self.rems.get(slot).and_then(|r| r.last) else {
                    return Ok(());
                };
                let now = self.now + Duration::seconds(1);
                self.delivered(*slot, at, now).await?;
                self.now = now;
            }
            Op::Throttled(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let at = rem.sched.next(self.now);
                let (status, _) = self.expected(&rem, at, self.now.max(at));
                if status != "succeeded" || rem.outcomes.contains_key(&at) || rem.schedule() != Some(true) {
                    return Ok(());
                }
                self.s.model.throttle(Some((0, Window::Manual))).await;
                // The invocation's deadline in real time, a moment away:
                // the throttled run gives up at once and goes back.
                let deadline = Utc::now() + Duration::milliseconds(12_000);
                let got = self
                    .deliver(*slot, at, self.now.max(at) + Duration::seconds(2), deadline)
                    .await;
                self.s.model.throttle(None).await;
                prop_assert_eq!(got, Disposition::ReturnToQueue);
            }
            Op::SkipNext(slot) | Op::Unskip(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let skip = matches!(op, Op::SkipNext(_));
                let answer = self
                    .owner_op(if skip { "skip_next" } else { "unskip" }, *slot, json!({}))
                    .await;
                if !rem.open() {
                    prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer);
                    return Ok(());
                }
                let now = self.now;
                let pending = rem.skip.filter(|s| *s > now);
                let rem_now = self.rems.get_mut(slot).unwrap();
                match (skip, rem.sched) {
                    (true, Sched::At(_)) => prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer),
                    (true, sched) => {
                        prop_assert_eq!(&answer["ok"], true, "{}", answer);
                        let next = sched.next(now + Duration::seconds(1));
                        if pending != Some(next) {
                            rem_now.skip = Some(next);
                            rem_now.wrote(now);
                        }
                    }
                    (false, _) => {
                        prop_assert_eq!(&answer["ok"], true, "{}", answer);
                        if pending.is_some() {
                            rem_now.skip = None;
                            rem_now.wrote(now);
                        }
                    }
                }
            }
            Op::RunNow(slot) | Op::RunNowAgain(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                let again = matches!(op, Op::RunNowAgain(_));
                let (key, version) = match (&rem.run_now, again) {
                    (Some((key, version, _, _)), true) => (key.clone(), *version),
                    (None, true) => return Ok(()),
                    (_, false) => (self.key(), rem.version),
                };
                let request = json!({"op": "run_now", "principal": self.owner(), "task_id": rem.task_id,
                                     "expected_version": version, "idempotency_key": key});
                let answer = self.app.handle(request, self.now).await.expect("schedules answers");
                if again {
                    let (_, _, run_id, _) = rem.run_now.clone().unwrap();
                    prop_assert_eq!(&answer["ok"], true, "{}", answer);
                    prop_assert_eq!(&answer["replayed"], true);
                    prop_assert_eq!(&answer["run_id"], run_id.as_str());
                    return Ok(());
                }
                if matches!(rem.sched, Sched::At(_)) || rem.state() != "scheduled" {
                    prop_assert_eq!(tests::code(&answer), "invalid_request", "{}", answer);
                    return Ok(());
                }
                prop_assert_eq!(&answer["ok"], true, "{}", answer);
                prop_assert_eq!(&answer["replayed"], false);
                let run_id = answer["run_id"].as_str().unwrap().to_owned();
                let at = DateTime::parse_from_rfc3339(run_id.split_once('@').unwrap().1)
                    .unwrap()
                    .with_timezone(&Utc);
                prop_assert!(at >= self.now && !rem.sched.occurs_at(at), "{}", run_id);
                let rem = self.rems.get_mut(slot).unwrap();
                rem.run_now = Some((key, version, run_id, at));
                rem.extras.insert(at);
                rem.wrote(self.now);
            }
            Op::DeliverRunNow(slot, late) => {
                let Some(at) = self.rems.get(slot).and_then(|r| r.run_now.as_ref()).map(|r| r.3) else {
                    return Ok(());
                };
                let now = self.now.max(at) + Duration::seconds(*late);
                self.delivered(*slot, at, now).await?;
                self.now = now;
            }
            Op::Worker(on) => self.worker = *on,
            Op::Advance(minutes) => self.now += Duration::minutes(*minutes),
            Op::Race(slot) => {
                let Some(rem) = self.rems.get(slot).cloned() else {
                    return Ok(());
                };
                if !rem.open() || rem.paused.is_some() {
                    return Ok(());
                }
                let pause = json!({"op": "pause", "principal": self.owner(), "task_id": rem.task_id,
                                   "expected_version": rem.version});
                let resume = json!({"op": "resume", "principal": self.admin_principal(), "task_id": rem.task_id,
                                    "expected_version": rem.version});
                let (paused, resumed) =
                    tokio::join!(self.app.handle(pause, self.now), self.admin.handle(resume, self.now));
                let (paused, resumed) = (paused.expect("answers"), resumed.expect("answers"));
                let won = [&paused, &resumed].iter().filter(|a| a["ok"] == true).count();
                prop_assert_eq!(won, 1, "one writer wins at a version: {} {}", paused, resumed);
                let rem = self.rems.get_mut(slot).unwrap();
                if paused["ok"] == true {
                    rem.paused = Some(true);
                } else {
                    prop_assert_eq!(tests::code(&paused), "version_conflict");
                }
                rem.wrote(self.now);
            }
        }
        Ok(())
    }

    /// The checks that hold after every step.
    async fn check(&self, after: &Op) -> Result<(), TestCaseError> {
        let names = self.s.t.schedule_names().await;
        for rem in self.rems.values() {
            let got = self
                .app
                .handle(
                    json!({"op": "get", "principal": self.owner(), "task_id": rem.task_id}),
                    self.now,
                )
                .await
                .expect("schedules answers");
            let task = &got["task"];
            prop_assert_eq!(&task["state"], rem.state(), "after {:?}: {}", after, got);
            prop_assert_eq!(&task["version"], rem.version, "after {:?}: {}", after, got);
            prop_assert_eq!(&task["title"], rem.title.as_str());
            prop_assert_eq!(&task["instruction"], rem.instruction.as_str());
            let schedule = if names.contains(&rem.task_id) {
                let s = self.s.t.schedule(&rem.task_id).await;
                Some(s.state().map(|s| s.as_str()) == Some("ENABLED"))
            } else {
                None
            };
            prop_assert_eq!(
                schedule,
                rem.schedule(),
                "the schedule of {} after {:?}",
                rem.task_id,
                after
            );
            for (at, (status, reason)) in &rem.outcomes {
                let record = self
                    .s
                    .t
                    .item_at(Key::run(&rem.task_id, &occurrence_key(*at)))
                    .await
                    .ok_or_else(|| fail(format!("{at}: no record after {after:?}")))?;
                prop_assert_eq!(&record["status"], status.as_str(), "{}: {}", at, record);
                prop_assert_eq!(record["reason"].as_str(), reason.as_deref(), "{}: {}", at, record);
            }
        }
        let counted = self
            .s
            .store()
            .owner_reminders(&self.workspace, "usr_1")
            .await
            .expect("owner reminders")
            .active();
        prop_assert_eq!(counted, self.active(), "the cap's count after {:?}", after);
        Ok(())
    }
}

async fn run_case(s: RunStack, case: usize, ops: Vec<Op>) -> (RunStack, Result<(), TestCaseError>) {
    let config = s.t.create_config(ENABLED);
    let admin = AdminFunction(Admin::new(
        s.t.admin_store(),
        EventBridgeSchedules::from_sdk(&s.t.aws.sdk, config.target),
        s.t.runs_queue(),
        AdminSettings {
            max_active: CAP,
            retention: Duration::days(90),
        },
    ));
    let mut world = World {
        app: s.t.schedules_app_with(ENABLED, CAP),
        admin,
        s,
        workspace: format!("ws_case{case}"),
        now: (Utc::now() + Duration::days(1))
            .duration_trunc(Duration::minutes(1))
            .unwrap(),
        worker: true,
        keys: 0,
        rems: BTreeMap::new(),
    };
    let mut result = Ok(());
    for op in &ops {
        if let Err(e) = world.step(op).await {
            result = Err(e);
            break;
        }
        if let Err(e) = world.check(op).await {
            result = Err(e);
            break;
        }
    }
    (world.s, result)
}

/// The proptest seed of this run: `LIFECYCLE_SEED` to replay one, else
/// derived from the commit under test, so every commit explores sequences
/// of its own.
fn lifecycle_seed() -> u64 {
    std::env::var("LIFECYCLE_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            tests::sim::seeds_of_commit(&tests::sim::commit_under_test(), 1)
                .expect("a commit id")
                .0
        })
}

#[test]
fn a_reminders_life_holds_to_the_model() {
    let cases: u32 = std::env::var("LIFECYCLE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed = lifecycle_seed();
    println!(
        "lifecycle: {cases} sequences from seed {seed}; replay with: \
         LIFECYCLE_SEED={seed} LIFECYCLE_CASES={cases} cargo test -p tests --test suite lifecycle -- --nocapture"
    );
    // Its own thread, on a stack deep enough for the debug build's nested
    // futures while proptest shrinks a failing sequence.
    let checked = std::thread::Builder::new()
        .name("lifecycle".into())
        .stack_size(256 << 20)
        .spawn(move || check_lives(cases, seed))
        .expect("the model check's thread")
        .join();
    if let Err(panic) = checked {
        std::panic::resume_unwind(panic);
    }
}

fn check_lives(cases: u32, seed: u64) {
    use proptest::test_runner::{RngAlgorithm, TestRng};
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let stack = std::sync::Mutex::new(Some(rt.block_on(RunStack::start()).unwrap()));
    let counter = std::sync::atomic::AtomicUsize::new(0);
    let mut bytes = [0u8; 32];
    for chunk in bytes.chunks_mut(8) {
        chunk.copy_from_slice(&seed.to_le_bytes());
    }
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            max_shrink_iters: 64,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let result = runner.run(&proptest::collection::vec(op(), 1..60), |ops| {
        let case = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let s = stack.lock().unwrap().take().expect("the stack");
        let (s, result) = rt.block_on(run_case(s, case, ops));
        *stack.lock().unwrap() = Some(s);
        result
    });
    if let Err(e) = result {
        panic!("seed {seed}: {e}");
    }
}
