//! Fault injection at one method of a port: [`Intercepted`] wraps the real
//! adapter and a hook; every call goes through the hook, whose methods all
//! forward to the adapter unless the hook overrides one. A test writes only
//! the method it breaks (a crash after the write, a gate before it, a
//! refusal instead of it), so a port that gains a method changes this file
//! and no test.

use std::future::Future;

use chrono::{DateTime, Utc};
use shared::domain::run::definition::{ScheduleDefinition, ScheduleStatus};
use shared::domain::run::gate::CallApproval;
use shared::domain::run::journal::{Journal, JournaledCall, JournaledOutcome};
use shared::domain::run::occurrence::RunRecord;
use shared::domain::run::pace::Slots;
use shared::domain::task::idempotency::IdempotencyRecord;
use shared::domain::task::install::Install;
use shared::domain::task::{Task, TaskId};
use shared::ports::{
    ClaimAnswer, ClaimRequest, OwnerReminders, PaceAnswer, Release, ReminderInserted, RunStore, ScheduleError,
    Schedules, Settled, Settlement, StoreError, TakeOver, TaskStore, Unclaimed,
};

/// A port `inner` with `hook` in front of it.
pub struct Intercepted<P, H> {
    pub inner: P,
    pub hook: H,
}

impl<P, H> Intercepted<P, H> {
    pub fn new(inner: P, hook: H) -> Self {
        Self { inner, hook }
    }
}

/// What a hook on a [`RunStore`] may change; each method forwards unless
/// overridden.
pub trait RunStoreHook<P: RunStore>: Send + Sync {
    fn claim(&self, inner: &P, r: &ClaimRequest<'_>) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send {
        inner.claim(r)
    }
    fn take_over(
        &self,
        inner: &P,
        r: &ClaimRequest<'_>,
        from: TakeOver,
    ) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send {
        inner.take_over(r, from)
    }
    fn install(
        &self,
        inner: &P,
        workspace: &str,
        install_id: &str,
    ) -> impl Future<Output = Result<Option<Install>, StoreError>> + Send {
        inner.install(workspace, install_id)
    }
    fn settle(&self, inner: &P, s: &Settlement<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        inner.settle(s)
    }
    fn release(&self, inner: &P, r: &Release<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        inner.release(r)
    }
    fn record_unclaimed(
        &self,
        inner: &P,
        r: &RunRecord,
        prune: &[String],
    ) -> impl Future<Output = Result<Unclaimed, StoreError>> + Send {
        inner.record_unclaimed(r, prune)
    }
    fn park(&self, inner: &P, p: &shared::ports::Park<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        inner.park(p)
    }
    fn use_approval(
        &self,
        inner: &P,
        a: &CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        inner.use_approval(a, execution_id, now)
    }
    fn keep_call_result(
        &self,
        inner: &P,
        a: &CallApproval,
        result: &str,
        is_error: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        inner.keep_call_result(a, result, is_error)
    }
    fn journal_call(&self, inner: &P, c: &JournaledCall) -> impl Future<Output = Result<(), StoreError>> + Send {
        inner.journal_call(c)
    }
    fn journal_outcome(&self, inner: &P, o: &JournaledOutcome) -> impl Future<Output = Result<(), StoreError>> + Send {
        inner.journal_outcome(o)
    }
    fn record_malformed(
        &self,
        inner: &P,
        message_id: &str,
        body: &str,
        reason: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        inner.record_malformed(message_id, body, reason, now)
    }
}

impl<P: RunStore, H: RunStoreHook<P>> RunStore for Intercepted<P, H> {
    fn claim(&self, r: &ClaimRequest<'_>) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send {
        self.hook.claim(&self.inner, r)
    }
    fn take_over(
        &self,
        r: &ClaimRequest<'_>,
        from: TakeOver,
    ) -> impl Future<Output = Result<ClaimAnswer, StoreError>> + Send {
        self.hook.take_over(&self.inner, r, from)
    }
    fn install(&self, w: &str, i: &str) -> impl Future<Output = Result<Option<Install>, StoreError>> + Send {
        self.hook.install(&self.inner, w, i)
    }
    fn settle(&self, s: &Settlement<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.hook.settle(&self.inner, s)
    }
    fn release(&self, r: &Release<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.hook.release(&self.inner, r)
    }
    fn park(&self, p: &shared::ports::Park<'_>) -> impl Future<Output = Result<Settled, StoreError>> + Send {
        self.hook.park(&self.inner, p)
    }
    fn run_approvals(
        &self,
        workspace: &str,
        run_id: &str,
        named: Option<&str>,
    ) -> impl Future<Output = Result<Vec<CallApproval>, StoreError>> + Send {
        self.inner.run_approvals(workspace, run_id, named)
    }
    fn journal(&self, task_id: &str, occurrence: &str) -> impl Future<Output = Result<Journal, StoreError>> + Send {
        self.inner.journal(task_id, occurrence)
    }
    fn journal_call(&self, c: &JournaledCall) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.hook.journal_call(&self.inner, c)
    }
    fn journal_outcome(&self, o: &JournaledOutcome) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.hook.journal_outcome(&self.inner, o)
    }
    fn use_approval(
        &self,
        a: &CallApproval,
        execution_id: &str,
        now: DateTime<Utc>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.hook.use_approval(&self.inner, a, execution_id, now)
    }
    fn keep_call_result(
        &self,
        a: &CallApproval,
        result: &str,
        is_error: bool,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.hook.keep_call_result(&self.inner, a, result, is_error)
    }
    fn mark_budget_reached(
        &self,
        workspace: &str,
        month: &str,
        budget_usd: f64,
        now: chrono::DateTime<chrono::Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.mark_budget_reached(workspace, month, budget_usd, now)
    }
    fn record_unclaimed(
        &self,
        r: &RunRecord,
        prune: &[String],
    ) -> impl Future<Output = Result<Unclaimed, StoreError>> + Send {
        self.hook.record_unclaimed(&self.inner, r, prune)
    }
    fn record_over_dead(
        &self,
        r: &RunRecord,
        dead: &shared::domain::task::claim::Claim,
        account: Option<&shared::domain::task::budget::Account>,
        period: &str,
        prune: &[String],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.record_over_dead(r, dead, account, period, prune)
    }
    fn current_task(&self, w: &str, t: &TaskId) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send {
        self.inner.current_task(w, t)
    }
    fn complete_unclaimed(
        &self,
        w: &str,
        t: &TaskId,
        e: &str,
        c: &shared::domain::run::settlement::Completion,
        n: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.complete_unclaimed(w, t, e, c, n)
    }
    fn record_malformed(
        &self,
        m: &str,
        b: &str,
        r: &str,
        n: DateTime<Utc>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.hook.record_malformed(&self.inner, m, b, r, n)
    }
    fn pace_book(&self, m: &str, n: i64, l: i64) -> impl Future<Output = Result<PaceAnswer, StoreError>> + Send {
        self.inner.pace_book(m, n, l)
    }
    fn pace_start(&self, m: &str, n: i64, g: i64) -> impl Future<Output = Result<PaceAnswer, StoreError>> + Send {
        self.inner.pace_start(m, n, g)
    }
    fn pace_gap(&self, m: &str, s: &Slots, g: i64, n: i64) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.pace_gap(m, s, g, n)
    }
    fn pace_charge(&self, m: &str, n: i64, c: i64) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.pace_charge(m, n, c)
    }
}

/// What a hook on [`Schedules`] may change; each method forwards unless
/// overridden.
pub trait SchedulesHook<P: Schedules>: Send + Sync {
    fn put(&self, inner: &P, schedule: &ScheduleDefinition) -> impl Future<Output = Result<(), ScheduleError>> + Send {
        inner.put(schedule)
    }
    fn status(
        &self,
        inner: &P,
        name: &str,
    ) -> impl Future<Output = Result<Option<ScheduleStatus>, ScheduleError>> + Send {
        inner.status(name)
    }
    fn delete(&self, inner: &P, name: &str) -> impl Future<Output = Result<(), ScheduleError>> + Send {
        inner.delete(name)
    }
}

impl<P: Schedules, H: SchedulesHook<P>> Schedules for Intercepted<P, H> {
    fn put(&self, schedule: &ScheduleDefinition) -> impl Future<Output = Result<(), ScheduleError>> + Send {
        self.hook.put(&self.inner, schedule)
    }
    fn status(&self, name: &str) -> impl Future<Output = Result<Option<ScheduleStatus>, ScheduleError>> + Send {
        self.hook.status(&self.inner, name)
    }
    fn delete(&self, name: &str) -> impl Future<Output = Result<(), ScheduleError>> + Send {
        self.hook.delete(&self.inner, name)
    }
}

/// What a hook on a [`TaskStore`] may change; each method forwards unless
/// overridden.
pub trait TaskStoreHook<P: TaskStore>: Send + Sync {
    fn idempotency_record(
        &self,
        inner: &P,
        workspace: &str,
        principal: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send {
        inner.idempotency_record(workspace, principal, key)
    }
    fn task(
        &self,
        inner: &P,
        workspace: &str,
        task_id: &TaskId,
    ) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send {
        inner.task(workspace, task_id)
    }
    fn insert_with_idempotency(
        &self,
        inner: &P,
        task: &Task,
        record: &IdempotencyRecord,
        owner: Option<&OwnerReminders>,
    ) -> impl Future<Output = Result<ReminderInserted, StoreError>> + Send {
        inner.insert_with_idempotency(task, record, owner)
    }
    fn owner_reminders(
        &self,
        inner: &P,
        workspace: &str,
        principal: &str,
    ) -> impl Future<Output = Result<OwnerReminders, StoreError>> + Send {
        inner.owner_reminders(workspace, principal)
    }
}

impl<P: TaskStore, H: TaskStoreHook<P>> TaskStore for Intercepted<P, H> {
    fn idempotency_record(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
    ) -> impl Future<Output = Result<Option<IdempotencyRecord>, StoreError>> + Send {
        self.hook.idempotency_record(&self.inner, workspace, principal, key)
    }
    fn expire_idempotency(
        &self,
        workspace: &str,
        principal: &str,
        key: &str,
        ttl: i64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.expire_idempotency(workspace, principal, key, ttl)
    }
    fn task(&self, workspace: &str, task_id: &TaskId) -> impl Future<Output = Result<Option<Task>, StoreError>> + Send {
        self.hook.task(&self.inner, workspace, task_id)
    }
    fn insert_with_idempotency(
        &self,
        task: &Task,
        record: &IdempotencyRecord,
        owner: Option<&OwnerReminders>,
    ) -> impl Future<Output = Result<ReminderInserted, StoreError>> + Send {
        self.hook.insert_with_idempotency(&self.inner, task, record, owner)
    }
    fn owner_reminders(
        &self,
        workspace: &str,
        principal: &str,
    ) -> impl Future<Output = Result<OwnerReminders, StoreError>> + Send {
        self.hook.owner_reminders(&self.inner, workspace, principal)
    }
}

/// A first schedule put that waits at a gate, as a slow Lambda's
/// UpdateSchedule would, so another writer's whole change lands first.
pub struct GatedPut {
    entered: tokio::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    gate: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

impl GatedPut {
    /// The hook, a signal that the first put reached the gate, and the
    /// gate's key.
    pub fn new() -> (
        Self,
        tokio::sync::oneshot::Receiver<()>,
        tokio::sync::oneshot::Sender<()>,
    ) {
        let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
        let (gate_tx, gate_rx) = tokio::sync::oneshot::channel();
        let hook = Self {
            entered: tokio::sync::Mutex::new(Some(entered_tx)),
            gate: tokio::sync::Mutex::new(Some(gate_rx)),
        };
        (hook, entered_rx, gate_tx)
    }
}

impl<P: Schedules> SchedulesHook<P> for GatedPut {
    async fn put(&self, inner: &P, schedule: &ScheduleDefinition) -> Result<(), ScheduleError> {
        let gate = self.gate.lock().await.take();
        if let Some(gate) = gate {
            if let Some(entered) = self.entered.lock().await.take() {
                let _ = entered.send(());
            }
            let _ = gate.await;
        }
        inner.put(schedule).await
    }
}

/// The due index of the adapter behind a [`RunStore`] hook, as it is: a
/// use case that needs both (the missed-occurrence check) meets the hook's
/// faults at its run-store calls.
impl<P: RunStore + shared::ports::DueIndex, H: RunStoreHook<P>> shared::ports::DueIndex for Intercepted<P, H> {
    fn due_page(
        &self,
        family: shared::ports::Family,
        shard: u8,
        before: DateTime<Utc>,
        after: Option<&shared::ports::Cursor>,
        limit: usize,
    ) -> impl Future<Output = Result<shared::ports::Page<Task>, StoreError>> + Send {
        self.inner.due_page(family, shard, before, after, limit)
    }
    fn recorded_times(
        &self,
        task_id: &TaskId,
        from: DateTime<Utc>,
        before: DateTime<Utc>,
    ) -> impl Future<Output = Result<Vec<DateTime<Utc>>, StoreError>> + Send {
        self.inner.recorded_times(task_id, from, before)
    }
    fn move_due(
        &self,
        task: &Task,
        to: Option<DateTime<Utc>>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        self.inner.move_due(task, to)
    }
    fn check_cursor(
        &self,
        family: shared::ports::Family,
        shard: u8,
    ) -> impl Future<Output = Result<Option<shared::ports::Cursor>, StoreError>> + Send {
        self.inner.check_cursor(family, shard)
    }
    fn save_check_cursor(
        &self,
        family: shared::ports::Family,
        shard: u8,
        cursor: Option<&shared::ports::Cursor>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        self.inner.save_check_cursor(family, shard, cursor)
    }
    fn undue_page(
        &self,
        after: Option<&shared::ports::TableCursor>,
        limit: usize,
    ) -> impl Future<Output = Result<shared::ports::ScanPage, StoreError>> + Send {
        self.inner.undue_page(after, limit)
    }
}
