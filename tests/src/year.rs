//! A year of a workspace on a virtual clock (`infra/scripts/year.sh`, the
//! suite's `bounded::a_year_of_a_workspace_keeps_every_item_and_the_table_bounded`):
//! the real runner, admin and reconcile use cases against moto, the MCP
//! fixture and the Converse stand-in, each delivery handed the time
//! Scheduler would deliver it at. One install's tasks fire every minute
//! (a burst each month), every hour, every day, every month and every week
//! (a gated call nobody decides); a second install comes in spring and is
//! uninstalled in autumn; a one-time reminder falls due each month. The
//! workspace's month is spent at its start and raised on its sixth day,
//! the worker is off for ten days, an outage makes six days late, Scheduler
//! loses three days of the daily task's deliveries, and at each day's end
//! the approvals' expiry and the missed-occurrence check run as the
//! reconcile worker runs them; DynamoDB's TTL sweeps weekly. Every task
//! carries its `due` as create and reconcile write it, on a schedule the
//! year delivers whole (the frequent ones are crons of their bursts).
//!
//! Every delivery answers what its causes say (`expected`): the tasks run
//! again on the first day each cause is gone. Each day's check finds
//! exactly the lost deliveries, records them `never_delivered` and leaves
//! no backlog. At each sweep the table is measured: the largest item
//! (never near 64 KB) and each kind of item held to what the retention
//! keeps of the deliveries before it, never what the year wrote. The
//! approvals' backlog ends at zero.

use std::collections::BTreeMap;

use anyhow::{Context, ensure};
use chrono::{DateTime, Datelike, Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::schedule::{RateUnit, Schedule};
use shared::domain::task::Task;
use shared::domain::task::budget::BudgetLevel;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;

use crate::{RunStack, TestRunner, connector_task, deadline, install, run_message, run_settings};

/// How much of the year to drive.
#[derive(Debug, Clone, Copy)]
pub struct YearConfig {
    pub days: i64,
    /// Days of each month, from its sixth, the hourly task fires every hour.
    pub hourly_days: u32,
    /// Minutes of the minute task's burst, on each month's twentieth.
    pub minute_burst: i64,
    /// Days between the missed-occurrence checks (it runs every 15 minutes
    /// in production; a check judges at most 60 occurrences of a task).
    pub check_every_days: i64,
}

impl YearConfig {
    /// What CI runs: the year, with the frequent tasks in samples.
    pub const SHORT: Self = Self {
        days: 365,
        hourly_days: 1,
        minute_burst: 15,
        check_every_days: 7,
    };
    /// The harness's: every hour of every day, an hour of minutes a month.
    pub const FULL: Self = Self {
        days: 365,
        hourly_days: 31,
        minute_burst: 60,
        check_every_days: 1,
    };
}

/// What the year did and the most the table held.
#[derive(Debug, Default, Clone)]
pub struct YearReport {
    pub config: Option<(i64, u32, i64, i64)>,
    /// Deliveries by task, and what they answered.
    pub deliveries: BTreeMap<String, BTreeMap<String, usize>>,
    pub largest_item: usize,
    pub most_items: usize,
    /// The items by kind at the fullest sweep.
    pub fullest: BTreeMap<String, usize>,
    /// Occurrences whose undecided requests expiry ended.
    pub expired: usize,
    /// `ApprovalsLapsedBacklog` after the year's last expiry.
    pub backlog_seconds: i64,
    /// Occurrences the missed-occurrence check recorded `never_delivered`.
    pub never_delivered: usize,
    /// The oldest `OverdueBacklogSeconds` any day's check left.
    pub overdue_backlog_seconds: i64,
    pub real_seconds: f64,
}

impl YearReport {
    /// The report as one table.
    pub fn table(&self) -> String {
        let mut rows: Vec<(String, String)> = Vec::new();
        if let Some((days, hourly, minutes, checks)) = self.config {
            rows.push((
                "days".into(),
                format!(
                    "{days} (hourly {hourly} days a month, {minutes} minutes a month every minute, \
                     the missed-occurrence check every {checks} days)"
                ),
            ));
        }
        for (task, answers) in &self.deliveries {
            let total: usize = answers.values().sum();
            rows.push((format!("{task}: deliveries"), total.to_string()));
            for (answer, n) in answers {
                rows.push((format!("  {answer}"), n.to_string()));
            }
        }
        rows.push((
            "largest item (bytes, limit 65,536)".into(),
            self.largest_item.to_string(),
        ));
        rows.push(("most items in the table at a sweep".into(), self.most_items.to_string()));
        for (entity, n) in &self.fullest {
            rows.push((format!("  {entity}"), n.to_string()));
        }
        rows.push((
            "occurrences ended by approvals' expiry".into(),
            self.expired.to_string(),
        ));
        rows.push((
            "ApprovalsLapsedBacklog at the end (s)".into(),
            self.backlog_seconds.to_string(),
        ));
        rows.push((
            "occurrences the check found never delivered".into(),
            self.never_delivered.to_string(),
        ));
        rows.push((
            "OverdueBacklogSeconds after any day's check, at most".into(),
            self.overdue_backlog_seconds.to_string(),
        ));
        rows.push(("real time".into(), format!("{:.0} s", self.real_seconds)));
        crate::table_rows(rows)
    }
}

/// The worker switched off for ten days in spring.
pub const WORKER_OFF: std::ops::Range<i64> = 100..110;
/// Deliveries an outage made late, in summer.
pub const LATE: std::ops::Range<i64> = 200..206;
/// Each month the workspace's budget is spent until this day, then raised.
pub const SPENT_UNTIL_DAY: u32 = 5;
/// Days Scheduler loses the daily task's delivery, in autumn.
pub const LOST: std::ops::Range<i64> = 300..303;
/// The second install's days.
const TRACKER: std::ops::Range<i64> = 60..240;

/// What a delivery on `day` of an occurrence at `at` answers when the
/// task would run (`runs`: `Ran(Succeeded)`, or a gated run's wait).
pub fn expected(day: i64, at: DateTime<Utc>, runs: Disposition) -> Disposition {
    if WORKER_OFF.contains(&day) {
        Disposition::Skipped(SkipReason::WorkerDisabled)
    } else if LATE.contains(&day) {
        Disposition::Skipped(SkipReason::Missed)
    } else if at.day() <= SPENT_UNTIL_DAY {
        Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace))
    } else {
        runs
    }
}

fn label(answer: &Disposition) -> String {
    match answer {
        Disposition::Ran(status) => format!("ran: {}", status.as_str()),
        Disposition::Skipped(reason) => format!("skipped: {}", reason.describe()),
        Disposition::AwaitingApproval => "awaiting approval".to_owned(),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn admin() -> Value {
    json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]})
}

/// A connector task of `server`'s `prompt` on `install_id`, at `schedule`,
/// approved with `ask_first` gated.
fn task(server: &str, install_id: &str, prompt: &str, schedule: Schedule, ask_first: &[&str]) -> Task {
    let mut task = connector_task(server, prompt, &["list_issues"], &[]);
    if let shared::domain::task::Provenance::Connector { install_id: id, .. } = &mut task.provenance {
        *id = install_id.to_owned();
    }
    task.spec.schedule = schedule;
    task.spec.budget = Some(shared::domain::task::budget::Budget {
        max_usd_per_run: 0.25,
        max_usd_per_month: 1000.0,
    });
    task.approval = Some(shared::domain::task::Approval {
        id: "admin:adm_1:1".into(),
        approved_at: Utc::now(),
        by: Some("adm_1".into()),
        ask_first: ask_first.iter().map(|t| (*t).to_owned()).collect(),
    });
    task
}

fn every(every: u32, unit: RateUnit) -> Schedule {
    Schedule::Rate { every, unit }
}

fn cron(expression: &str) -> Schedule {
    Schedule::Cron {
        cron: expression.to_owned(),
        timezone: "UTC".to_owned(),
        until: None,
    }
}

/// `task` as create or reconcile stores it at `now`: with its first `due`.
fn due_from(mut task: Task, now: DateTime<Utc>) -> Task {
    shared::domain::operations::overdue::refresh_due(None, &mut task, now);
    task
}

async fn server(prompts: &[&str]) -> anyhow::Result<McpFixture> {
    McpFixture::start(FixtureState {
        prompts: prompts
            .iter()
            .map(|p| scheduled_prompt(p, json!({"version": 1}), &[], "Summarise the open issues."))
            .collect(),
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
}

struct Year<'a> {
    s: &'a RunStack,
    runner: TestRunner,
    off: TestRunner,
    /// The store as the reconcile worker signs: expiry and the check.
    worker: shared::adapters::dynamo::DynamoStore,
    report: YearReport,
    /// Run records each day's deliveries may leave, and approval requests.
    written: Vec<(usize, usize)>,
}

impl Year<'_> {
    /// Delivers `task`'s occurrence at `at` on `day`, late or with the
    /// worker off as the day says, and checks its answer.
    async fn deliver(&mut self, day: i64, task: &Task, at: DateTime<Utc>, runs: Disposition) -> anyhow::Result<()> {
        let expect = expected(day, at, runs);
        match expect {
            Disposition::Ran(_) => self.s.model.script([Reply::text("done", 1000, 100)]).await,
            Disposition::AwaitingApproval => {
                self.s
                    .model
                    .script([Reply::tool("issues__list_issues", json!({}), 1000, 50)])
                    .await;
            }
            _ => {}
        }
        let (runner, now) = if LATE.contains(&day) {
            (&self.runner, at + Duration::hours(3))
        } else if WORKER_OFF.contains(&day) {
            (&self.off, at + Duration::seconds(5))
        } else {
            (&self.runner, at + Duration::seconds(5))
        };
        let execution = format!("e-{}", at.timestamp());
        let answer = runner
            .deliver("m1", &run_message(task, at, &execution), now, deadline())
            .await
            .context("the delivery answers")?;
        ensure!(
            answer == expect,
            "{} on day {day} ({at}): {answer:?}, not {expect:?}",
            task.title
        );
        self.count(&task.title, &answer);
        Ok(())
    }

    fn count(&mut self, task: &str, answer: &Disposition) {
        *self
            .report
            .deliveries
            .entry(task.to_owned())
            .or_default()
            .entry(label(answer))
            .or_default() += 1;
        if let Some(last) = self.written.last_mut() {
            last.0 += 1;
            last.1 += usize::from(*answer == Disposition::AwaitingApproval);
        }
    }

    /// The missed-occurrence check at `now`, as the worker runs it: it
    /// finds `lost` (the occurrences Scheduler lost since the last check)
    /// and nothing else, records them, and leaves no backlog.
    async fn check(&mut self, now: DateTime<Utc>, lost: &[(&Task, DateTime<Utc>)]) -> anyhow::Result<()> {
        let settings = shared::app::overdue::CheckSettings {
            catch_up: Duration::seconds(shared::config::DEFAULT_CATCH_UP_SECONDS),
            retention: Duration::days(shared::config::DEFAULT_RETENTION_DAYS),
            write: true,
        };
        let checked = shared::app::overdue::check(&self.worker, settings, now, crate::far_deadline()).await?;
        ensure!(
            checked.complete && checked.unjudged.is_empty(),
            "the check at {now}: {checked:?}"
        );
        let mut found: Vec<(String, DateTime<Utc>, &str)> = checked
            .missed
            .iter()
            .map(|m| (m.task_id.clone(), m.scheduled_time, m.reason))
            .collect();
        found.sort();
        let mut expect: Vec<(String, DateTime<Utc>, &str)> = lost
            .iter()
            .map(|(task, at)| (task.task_id.to_string(), *at, "never_delivered"))
            .collect();
        expect.sort();
        ensure!(found == expect, "the check at {now} found {found:?}, not {expect:?}");
        ensure!(
            checked.backlog.is_zero(),
            "the check at {now} left a backlog of {}",
            checked.backlog
        );
        self.report.never_delivered += found.len();
        self.report.overdue_backlog_seconds = self.report.overdue_backlog_seconds.max(checked.backlog.num_seconds());
        if let Some(last) = self.written.last_mut() {
            last.0 += found.len();
        }
        Ok(())
    }

    /// DynamoDB's TTL by `now`, then the table measured against what the
    /// retention keeps of the deliveries before it.
    async fn sweep(&mut self, now: DateTime<Utc>) -> anyhow::Result<()> {
        let s = self.s;
        local::moto::expire_ttl(&s.t.aws.moto.endpoint(), &s.t.stack.names.table, now.timestamp())?;
        let items = s.t.items().await;
        let biggest = items.iter().map(|i| i.to_string().len()).max().unwrap_or(0);
        self.report.largest_item = self.report.largest_item.max(biggest);
        let mut held = BTreeMap::<String, usize>::new();
        for item in &items {
            *held
                .entry(item["entity"].as_str().unwrap_or("?").to_owned())
                .or_default() += 1;
        }
        // What the retention keeps: the records and requests of its days
        // (and the week a sweep may lag), a month's items for a year past it.
        let days = usize::try_from(shared::config::DEFAULT_RETENTION_DAYS)? + 8;
        let kept = self.written.iter().rev().take(days);
        let (runs, requests) = kept.fold((0, 0), |(r, q), (dr, dq)| (r + dr, q + dq));
        let bounds = [
            ("run", runs),
            ("call_approval", requests),
            // Six connector tasks and the reminders of the kept days.
            ("task", 6 + days / 28 + 1),
            ("account", 3 * 13),
            ("budget_reached", 13),
            ("install", 2),
            ("workspace_budget", 1),
            // Where each shard's check stopped: one per family and shard.
            (
                "check_cursor",
                2 * usize::from(shared::domain::run::definition::REMINDER_SHARDS),
            ),
        ];
        for (entity, n) in &held {
            let bound = bounds.iter().find(|(e, _)| e == entity).map(|(_, b)| *b);
            ensure!(
                bound.is_some_and(|b| *n <= b),
                "{n} {entity} items at {now}, at most {bound:?} (the retention's): {held:?}"
            );
        }
        if items.len() > self.report.most_items {
            self.report.most_items = items.len();
            self.report.fullest = held;
        }
        Ok(())
    }
}

/// Drives the year and measures it; an error names the first delivery or
/// sweep that broke what must hold.
pub async fn run(config: YearConfig) -> anyhow::Result<YearReport> {
    let started = std::time::Instant::now();
    let s = RunStack::start().await?;
    let issues = server(&["minutely", "hourly", "daily", "monthly", "weekly_review"]).await?;
    let tracker = server(&["tracker_daily"]).await?;
    let store = s.store();
    store
        .put_install(&install("ins_1", "issues", &issues.url(), InstallScope::Workspace))
        .await?;
    let approvals = s.reconcile_store();
    let retention = Duration::days(shared::config::DEFAULT_RETENTION_DAYS);
    // The first day of a month, over a year ago, at midnight.
    let start = (Utc::now() - Duration::days(config.days + 35))
        .date_naive()
        .with_day(1)
        .context("a month's first day")?
        .and_hms_opt(0, 0, 0)
        .context("midnight")?
        .and_utc();
    // The minute task's burst and the hourly task's days as crons, so every
    // occurrence its schedule has is delivered (or lost on purpose).
    let last_hourly_day = (SPENT_UNTIL_DAY + config.hourly_days).min(31);
    let minutely = task(
        "issues",
        "ins_1",
        "minutely",
        cron(&format!("0-{} 13 20 * *", config.minute_burst - 1)),
        &[],
    );
    let hourly = task(
        "issues",
        "ins_1",
        "hourly",
        cron(&format!("0 * {}-{last_hourly_day} * *", SPENT_UNTIL_DAY + 1)),
        &[],
    );
    let daily = task("issues", "ins_1", "daily", every(1, RateUnit::Days), &[]);
    let monthly = task("issues", "ins_1", "monthly", cron("0 10 15 * *"), &[]);
    let weekly = task(
        "issues",
        "ins_1",
        "weekly_review",
        every(7, RateUnit::Days),
        &["list_issues"],
    );
    let tracked = task("tracker", "ins_2", "tracker_daily", every(1, RateUnit::Days), &[]);
    for t in [&minutely, &hourly, &daily, &monthly, &weekly] {
        store.insert_task(&due_from(t.clone(), start)).await?;
    }
    let mut year = Year {
        s: &s,
        runner: s.runner(),
        off: s.runner_on(s.runner_store(), run_settings(false)),
        worker: s.reconcile_store(),
        report: YearReport {
            config: Some((
                config.days,
                config.hourly_days,
                config.minute_burst,
                config.check_every_days,
            )),
            ..YearReport::default()
        },
        written: Vec::new(),
    };
    let mut version = 0;
    let ran = Disposition::Ran(RunStatus::Succeeded);
    // Deliveries Scheduler lost since the last check.
    let mut lost = Vec::new();
    for day in 0..config.days {
        let midnight = start + Duration::days(day);
        year.written.push((0, 0));
        // The month's budget: spent at its start, raised on its sixth day.
        if midnight.day() == 1 || midnight.day() == SPENT_UNTIL_DAY + 1 {
            let limit = if midnight.day() == 1 { 0.0 } else { 50.0 };
            let request = json!({"op": "set_budget", "principal": admin(),
                                 "budget": {"max_usd_per_month": limit}, "expected_version": version});
            version += 1;
            let answer = s.t.admin().handle(request, midnight - Duration::minutes(1)).await?;
            ensure!(answer["ok"] == true, "set_budget: {answer}");
        }
        if day == TRACKER.start {
            store
                .put_install(&install("ins_2", "tracker", &tracker.url(), InstallScope::Workspace))
                .await?;
            store.insert_task(&due_from(tracked.clone(), midnight)).await?;
        }
        if day == TRACKER.end {
            s.t.reconciler()
                .apply(&crate::event("connector.uninstalled", "ins_2"), midnight)
                .await?;
        }
        let hourly_today = (SPENT_UNTIL_DAY + 1..=SPENT_UNTIL_DAY + config.hourly_days).contains(&midnight.day());
        for hour in 0..24 {
            let at = midnight + Duration::hours(hour);
            if hourly_today {
                year.deliver(day, &hourly, at, ran.clone()).await?;
            }
            match hour {
                // Scheduler loses these; the day's check finds them.
                9 if LOST.contains(&day) => lost.push((&daily, at)),
                9 => year.deliver(day, &daily, at, ran.clone()).await?,
                10 if midnight.day() == 15 => year.deliver(day, &monthly, at, ran.clone()).await?,
                11 if day % 7 == 3 => {
                    year.deliver(day, &weekly, at, Disposition::AwaitingApproval).await?;
                }
                12 if TRACKER.contains(&day) => year.deliver(day, &tracked, at, ran.clone()).await?,
                12 if day >= TRACKER.end => {
                    // Uninstalled: its schedule stays (SPEC §6), Scheduler
                    // goes on delivering, and the door skips every one.
                    let execution = format!("e-{}", at.timestamp());
                    let answer = year
                        .runner
                        .deliver("m1", &run_message(&tracked, at, &execution), at, deadline())
                        .await?;
                    ensure!(
                        matches!(answer, Disposition::Skipped(_)),
                        "the uninstalled install's task on day {day}: {answer:?}"
                    );
                    year.count(&tracked.title, &answer);
                }
                13 if midnight.day() == 20 => {
                    for minute in 0..config.minute_burst {
                        let at = at + Duration::minutes(minute);
                        year.deliver(day, &minutely, at, ran.clone()).await?;
                    }
                }
                15 if midnight.day() == 10 => {
                    // A one-time reminder, due this afternoon.
                    let mut reminder = crate::reminder(at);
                    reminder.task_id =
                        shared::domain::task::TaskId::for_reminder("ws_1", "usr_123", &format!("y{day}"));
                    store
                        .insert_task(&due_from(reminder.clone(), at - Duration::days(1)))
                        .await?;
                    let kind = "one-time reminder";
                    reminder.title = kind.to_owned();
                    year.deliver(day, &reminder, at, ran.clone()).await?;
                }
                _ => {}
            }
        }
        // The day's expiry: requests left undecided past their wait end.
        let end = midnight + Duration::hours(24) - Duration::seconds(1);
        let expiry = shared::app::approvals::expire_lapsed(&approvals, end, retention, crate::far_deadline()).await?;
        year.report.expired += expiry.ended;
        year.report.backlog_seconds = expiry.backlog_seconds;
        if day % config.check_every_days == config.check_every_days - 1 {
            year.check(end, &lost).await?;
            lost.clear();
        }
        if day % 7 == 6 {
            year.sweep(end).await?;
        }
    }
    // The check after the last day (nothing delivered after it), then the
    // approvals' expiry once the last requests lapsed.
    year.check(start + Duration::days(config.days) - Duration::seconds(1), &lost)
        .await?;
    let end = start + Duration::days(config.days + 2);
    let expiry = shared::app::approvals::expire_lapsed(&approvals, end, retention, crate::far_deadline()).await?;
    year.report.expired += expiry.ended;
    year.report.backlog_seconds = expiry.backlog_seconds;
    year.sweep(end).await?;
    ensure!(year.report.backlog_seconds == 0, "the approvals' backlog ends at zero");
    ensure!(
        year.report.never_delivered == LOST.clone().filter(|d| *d < config.days).count(),
        "the check found every lost delivery: {}",
        year.report.never_delivered
    );
    year.report.real_seconds = started.elapsed().as_secs_f64();
    drop((issues, tracker));
    Ok(year.report)
}
