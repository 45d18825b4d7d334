//! The main job, locally (README, "Set up on a fresh machine"; SPEC §10): the whole system on one machine.
//! moto stands in for AWS, a scripted stand-in for Bedrock `Converse`, and
//! the five real function binaries run under Lambda Runtime API emulators.
//! A local dispatcher does what Scheduler, the SQS event sources and the
//! platform would. It walks a reminder and a connector's standing work
//! through their lives and prints a timeline and the final task items.
//! It also plays the platform's chat backend (SPEC §12, `local::backend`):
//! every result it shows came through `RunFinishedQueue` and was read back
//! through schedules `run` or admin `runs`, never from the table.
//! `--serve` keeps everything up afterwards for `cargo lambda invoke`.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use shared::adapters::keys::Key;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{FixedOffset, SecondsFormat, Utc};
use local::backend::{ChatBackend, Handled};
use local::converse::ConverseStandIn;
use local::dispatcher::Dispatcher;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::runtime::{Function, Launch};
use local::{LocalAws, Stack};
use serde_json::{Value, json};
use shared::domain::task::TaskId;

const MODEL: &str = "anthropic.claude-3-5-haiku-20241022-v1:0";

struct Clock(Instant);

impl Clock {
    fn step(&self, text: &str) {
        println!("\n[t+{:>5.1}s] == {text}", self.0.elapsed().as_secs_f64());
    }
}

fn say(text: impl AsRef<str>) {
    println!("           {}", text.as_ref());
}

fn show(label: &str, value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    println!("           {label}:");
    for line in text.lines() {
        println!("             {line}");
    }
}

/// The function binaries are built beside this one.
fn binary(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    anyhow::ensure!(
        path.exists(),
        "{} is missing: build with `cargo build --workspace --bins`",
        path.display()
    );
    Ok(path)
}

/// The five functions, each a real binary under its Runtime API emulator;
/// JSON logs and EMF metrics go to `target/local-logs/<name>.log`.
struct Functions {
    create: Function,
    runner: Function,
    reconcile: Function,
    admin: Function,
    schedules: Function,
}

impl Functions {
    async fn start(aws: &LocalAws, stack: &Stack, model: &ConverseStandIn) -> anyhow::Result<Self> {
        let logs = local::moto::repo_root().join("target/local-logs");
        std::fs::create_dir_all(&logs)?;
        let start = |name: &'static str| {
            let logs = &logs;
            async move {
                Launch::new(name, aws, stack)?
                    .model(&model.endpoint(), MODEL, 0.8, 4.0)
                    .set("RUST_LOG", "info")
                    .timeout(Duration::from_secs(120))
                    .log_to(logs.join(format!("{name}.log")))
                    .start(&binary(name)?)
                    .await
            }
        };
        Ok(Self {
            create: start("create").await?,
            runner: start("runner").await?,
            reconcile: start("reconcile").await?,
            admin: start("admin").await?,
            schedules: start("schedules").await?,
        })
    }

    /// Every variable any function was started with, once: the env file
    /// `cargo lambda watch` gives all of them.
    fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = Vec::new();
        for f in [
            &self.create,
            &self.runner,
            &self.reconcile,
            &self.admin,
            &self.schedules,
        ] {
            for (k, v) in &f.env {
                if !env.iter().any(|(seen, _)| seen == k) {
                    env.push((k.clone(), v.clone()));
                }
            }
        }
        env
    }
}

fn weekly_marker(budget: f64, tools: &[&str]) -> Value {
    json!({"version": 1,
           "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
           "tools": tools,
           "limits": {"max_turns": 6, "max_tool_calls": 6, "max_output_tokens": 2000, "timeout_seconds": 120},
           "budget": {"max_usd_per_run": budget, "max_usd_per_month": 5.0},
           "needs": [{"id": "summary_channel", "description": "a chat channel to post the weekly summary in"}]})
}

fn weekly(marker: Value) -> local::mcp_fixture::FixturePrompt {
    scheduled_prompt(
        "weekly_summary",
        marker,
        &[("repo", true)],
        "Summarise this week's new issues in {{repo}} and post the summary.",
    )
}

fn sweep() -> local::mcp_fixture::FixturePrompt {
    scheduled_prompt(
        "stale_issue_sweep",
        json!({"version": 1, "schedule": {"cron": "0 18 * * FRI", "timezone": "America/New_York"},
               "tools": ["list_issues"], "budget": {"max_usd_per_run": 0.1, "max_usd_per_month": 2.0}}),
        &[],
        "List issues untouched for 30 days.",
    )
}

/// The widened release: a new tool and a higher budget per run.
fn widened() -> Vec<local::mcp_fixture::FixturePrompt> {
    vec![
        weekly(weekly_marker(0.5, &["list_issues", "post_summary", "close_issue"])),
        sweep(),
    ]
}

async fn invoke(f: &Function, payload: Value) -> anyhow::Result<Value> {
    f.api.invoke_ok(&payload).await
}

fn admin(op: &str, task_id: &str, extra: Value) -> Value {
    let mut request = json!({"op": op, "principal": {"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]}, "task_id": task_id});
    if let Some(map) = extra.as_object() {
        for (k, v) in map {
            request[k] = v.clone();
        }
    }
    request
}

/// What the chat backend did with the notifications it received: the
/// content-free event, and what its person sees.
fn say_handled(handled: &[Handled]) {
    for h in handled {
        match h {
            Handled::Shown { event, via, to, text } => {
                say(format!(
                    "RunFinishedQueue: {}",
                    serde_json::to_string(event).unwrap_or_default()
                ));
                let text = text.replace('\n', "\n             ");
                say(format!("  {via} -> shown to {to}: {text}"));
            }
            Handled::Dropped { event, why } => say(format!("RunFinishedQueue: {} dropped: {why}", event.run_id)),
            Handled::Kept { message_id, why } => {
                say(format!(
                    "RunFinishedQueue: message {message_id} left in the queue: {why}"
                ));
            }
        }
    }
}

fn explanation(answer: &Value) -> &str {
    answer["explanation"].as_str().unwrap_or_default()
}

/// The sample connector (two scheduled prompts) and a chat connector.
struct Connectors {
    issues: McpFixture,
    chat: McpFixture,
}

impl Connectors {
    async fn start() -> anyhow::Result<Self> {
        let issues = McpFixture::start(FixtureState {
            prompts: vec![weekly(weekly_marker(0.25, &["list_issues", "post_summary"])), sweep()],
            tools: vec![tool("list_issues"), tool("post_summary"), tool("close_issue")],
            ..Default::default()
        })
        .await?;
        let chat = McpFixture::start(FixtureState {
            tools: vec![tool("post_message")],
            ..Default::default()
        })
        .await?;
        Ok(Self { issues, chat })
    }
}

/// Everything the walk-through drives, and the ids it follows.
struct Walk<'a> {
    clock: Clock,
    aws: &'a LocalAws,
    stack: &'a Stack,
    model: &'a ConverseStandIn,
    connectors: &'a Connectors,
    functions: &'a Functions,
    dispatch: Dispatcher<'a>,
    /// The platform's chat backend: consumes RunFinishedQueue.
    backend: ChatBackend<'a>,
    /// Each fast-forward delivers the occurrence after the last one delivered.
    last_fired: std::cell::Cell<chrono::DateTime<Utc>>,
}

/// The connector tasks the walk follows.
struct ConnectorTasks {
    weekly: String,
    sweep: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().skip(1).any(|a| a == "-h" || a == "--help") {
        println!(
            "local [--serve]\n\nThe main job (infra/scripts/local.sh): the whole system on this machine, moto for AWS and a \
             stand-in for Bedrock; --serve keeps it up afterwards and writes target/local.env."
        );
        return Ok(());
    }
    let clock = Clock(Instant::now());
    clock.step("Starting the local AWS (moto on loopback), the stack, and the Bedrock stand-in");
    let (aws, stack) = LocalAws::with_stack("local").await?;
    let model = ConverseStandIn::start().await?;
    say_what_stands_in(&aws, &model);

    clock.step("Starting the sample connector (MCP, two scheduled prompts) and a chat connector");
    let connectors = Connectors::start().await?;
    say(format!(
        "issues connector: {}   chat connector: {}",
        connectors.issues.url(),
        connectors.chat.url()
    ));

    clock.step("Starting the five real function binaries under Lambda Runtime API emulators");
    let functions = Functions::start(&aws, &stack, &model).await?;
    let walk = Walk {
        clock,
        aws: &aws,
        stack: &stack,
        model: &model,
        connectors: &connectors,
        dispatch: Dispatcher {
            sdk: &aws.sdk,
            stack: &stack,
            runner: &functions.runner.api,
            reconcile: &functions.reconcile.api,
        },
        backend: ChatBackend::new(
            &aws.sdk,
            &stack.run_finished.url,
            &functions.schedules.api,
            &functions.admin.api,
            "adm_1",
        ),
        functions: &functions,
        last_fired: std::cell::Cell::new(Utc::now()),
    };
    say("their JSON logs and EMF metrics: target/local-logs/<function>.log");

    let reminder = walk.a_reminder().await?;
    let daily = walk.an_owner_s_schedules().await?;
    let tasks = walk.connectors_installed_and_approved().await?;
    walk.runs_and_releases(&tasks).await?;
    walk.final_items(&[
        ("reminder", &reminder),
        ("daily reminder", &daily),
        ("weekly_summary", &tasks.weekly),
        ("stale_issue_sweep", &tasks.sweep),
    ])
    .await?;

    if std::env::args().any(|a| a == "--serve") {
        return serve(&functions, &walk.dispatch, &walk.backend).await;
    }
    say("\nDone. Run with --serve to keep the stack up and invoke the functions yourself.");
    Ok(())
}

fn say_what_stands_in(aws: &LocalAws, model: &ConverseStandIn) {
    say(format!("moto: {} (pid {})", aws.moto.endpoint(), aws.moto.pid()));
    say(format!(
        "Bedrock is NOT called: Converse goes to a scripted stand-in at {} (AWS_ENDPOINT_URL_BEDROCK_RUNTIME). \
         It calls the first tool it is offered once, then finishes; its answers are not a model's.",
        model.endpoint()
    ));
    say(
        "Run notifications: moto keeps the table's stream but runs no EventBridge Pipe; a local stand-in \
         applies RunFinishedPipe's filter and input template from template.yaml to the stream.",
    );
    say(
        "The chat backend: the main job consumes RunFinishedQueue (RunFinishedRule on the bus, its pattern \
         from template.yaml) and reads each result through schedules `run` as the reminder's owner, or admin \
         `runs` for a connector task; it never reads the table to show a result.",
    );
}

impl Walk<'_> {
    async fn item(&self, key: Key) -> anyhow::Result<Value> {
        let out = aws_sdk_dynamodb::Client::new(&self.aws.sdk)
            .get_item()
            .table_name(&self.stack.names.table)
            .set_key(Some(key.to_map()))
            .send()
            .await?;
        Ok(out.item.map(local::item_json).unwrap_or(Value::Null))
    }

    /// A chat backend's reminder, due in five seconds, created and run.
    /// Answers its task id.
    async fn a_reminder(&self) -> anyhow::Result<String> {
        self.clock
            .step("A chat user approved \"remind me in five seconds\"; the chat backend invokes create");
        let now = Utc::now();
        let at = (now + chrono::Duration::seconds(5)).with_timezone(&FixedOffset::east_opt(3600).context("offset")?);
        let principal = json!({"id": "usr_123", "workspace": "ws_1", "scopes": ["schedule.write"]});
        let created = invoke(
            &self.functions.create,
            json!({
                "op": "create",
                "principal": principal,
                "idempotency_key": format!("call_{}", now.timestamp()),
                "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard", "limits": {"max_turns": 2}},
                "approval": {"id": "apr_9", "approved_at": now.to_rfc3339_opts(SecondsFormat::Secs, true)},
                "input": {"title": "Call mom", "instruction": "Remind me to call mom about Sunday.",
                          "at": at.to_rfc3339_opts(SecondsFormat::Secs, false)}
            }),
        )
        .await?;
        show("create answered", &created);
        let reminder_id = created["task"]["task_id"].as_str().context("task id")?.to_owned();
        self.backend.remember(&reminder_id, &principal);
        tokio::time::sleep(Duration::from_secs(6)).await;
        self.clock
            .step("The reminder is due: the dispatcher fires its at() schedule into the runs queue");
        for fired in self.dispatch.fire_due(Utc::now()).await? {
            say(format!("fired {} for {}", fired.schedule, fired.scheduled_time));
        }
        self.dispatch.drain_runs().await?;
        self.clock
            .step("The run's event reaches RunFinishedQueue; the chat backend reads the result as its owner");
        self.results().await?;
        Ok(reminder_id)
    }

    /// A user's app: two one-time reminders and a daily one, one moved,
    /// one cancelled, the daily one run on two fast-forwarded days.
    /// Answers the daily reminder's task id.
    async fn an_owner_s_schedules(&self) -> anyhow::Result<String> {
        self.clock
            .step("A user's app (the schedules function): two one-time reminders and a daily one");
        let user = json!({"id": "usr_456", "workspace": "ws_1", "scopes": ["schedule.read", "schedule.write"]});
        let made = self.create_three(&user).await?;
        self.clock
            .step("The user moves the dentist an hour later and cancels the parcel");
        self.move_and_cancel(&user, &made[0], &made[1]).await?;
        let water_id = made[2]["task_id"].as_str().context("daily task id")?.to_owned();
        let got = invoke(
            &self.functions.schedules,
            json!({"op": "get", "principal": user, "task_id": water_id}),
        )
        .await?;
        say(format!(
            "Water plants: {}",
            got["task"]["explanation"].as_str().unwrap_or_default()
        ));
        self.clock
            .step("Two days of the daily reminder, fast-forwarded: each occurrence runs once");
        self.two_days_of(&user, &water_id).await?;
        self.clock
            .step("A monthly reminder on the 31st: its next runs skip the months that have no 31st");
        self.a_monthly_reminder(&user).await?;
        Ok(water_id)
    }

    /// A monthly reminder on the 31st: one Scheduler expression, next runs
    /// that skip the months without the day, and the note that says so.
    async fn a_monthly_reminder(&self, user: &Value) -> anyhow::Result<()> {
        let created = invoke(
            &self.functions.schedules,
            json!({"op": "create", "principal": user, "idempotency_key": format!("app_rent_{}", Utc::now().timestamp()),
                   "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard", "limits": {"max_turns": 2}},
                   "input": {"title": "Rent", "instruction": "Remind me: pay the rent.",
                             "monthly": {"day": 31, "time": "09:00", "timezone": "Europe/Berlin"}}}),
        )
        .await?;
        let task_id = created["task"]["task_id"].as_str().context("monthly task id")?;
        self.backend.remember(task_id, user);
        let scheduler = aws_sdk_scheduler::Client::new(&self.aws.sdk);
        let schedule = scheduler
            .get_schedule()
            .group_name(&self.stack.names.schedule_group)
            .name(task_id)
            .send()
            .await?;
        say(format!(
            "Rent: {} in {} on Scheduler",
            schedule.schedule_expression().unwrap_or_default(),
            schedule.schedule_expression_timezone().unwrap_or_default()
        ));
        let got = invoke(
            &self.functions.schedules,
            json!({"op": "get", "principal": user, "task_id": task_id}),
        )
        .await?;
        let next: Vec<&str> = got["task"]["next_runs"]
            .as_array()
            .map(|runs| runs.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        say(format!("Rent next runs: {}", next.join(", ")));
        say(format!(
            "Rent: {}",
            got["task"]["explanation"].as_str().unwrap_or_default()
        ));
        Ok(())
    }

    /// The dentist, the parcel and the daily water-plants reminder, then the list.
    async fn create_three(&self, user: &Value) -> anyhow::Result<Vec<Value>> {
        let now = Utc::now();
        let mut made = Vec::new();
        for (key, title, when) in [
            (
                "app_dentist",
                "Dentist",
                json!({"at": (now + chrono::Duration::hours(3)).to_rfc3339_opts(SecondsFormat::Secs, true)}),
            ),
            (
                "app_parcel",
                "Parcel",
                json!({"at": (now + chrono::Duration::hours(4)).to_rfc3339_opts(SecondsFormat::Secs, true)}),
            ),
            (
                "app_water",
                "Water plants",
                json!({"daily": {"time": "08:00", "timezone": "Europe/Berlin"}}),
            ),
        ] {
            let mut input = json!({"title": title, "instruction": format!("Remind me: {title}.")});
            if let (Some(input), Some(when)) = (input.as_object_mut(), when.as_object()) {
                input.extend(when.clone());
            }
            let answer = invoke(
                &self.functions.schedules,
                json!({"op": "create", "principal": user, "idempotency_key": format!("{key}_{}", now.timestamp()),
                       "agent": {"id": "agt_1", "version": "7", "policy_profile": "standard", "limits": {"max_turns": 2}},
                       "input": input}),
            )
            .await?;
            if let Some(task_id) = answer["task"]["task_id"].as_str() {
                self.backend.remember(task_id, user);
            }
            made.push(answer["task"].clone());
        }
        let listed = invoke(&self.functions.schedules, json!({"op": "list", "principal": user})).await?;
        for task in listed["tasks"].as_array().cloned().unwrap_or_default() {
            say(format!(
                "list: {} {} {} next {}",
                task["title"], task["schedule"], task["state"], task["next_run_at"]
            ));
        }
        Ok(made)
    }

    async fn move_and_cancel(&self, user: &Value, dentist: &Value, parcel: &Value) -> anyhow::Result<()> {
        let now = Utc::now();
        let moved = invoke(
            &self.functions.schedules,
            json!({"op": "update", "principal": user, "task_id": dentist["task_id"], "expected_version": dentist["version"],
                   "idempotency_key": format!("app_move_{}", now.timestamp()),
                   "input": {"at": (now + chrono::Duration::hours(4)).to_rfc3339_opts(SecondsFormat::Secs, true)}}),
        )
        .await?;
        say(format!(
            "moved: {} now at {}",
            moved["task"]["title"].as_str().unwrap_or_default(),
            moved["task"]["schedule"]["at"].as_str().unwrap_or_default()
        ));
        let cancelled = invoke(
            &self.functions.schedules,
            json!({"op": "cancel", "principal": user, "task_id": parcel["task_id"], "expected_version": parcel["version"]}),
        )
        .await?;
        say(format!(
            "cancelled: {} is {}",
            cancelled["task"]["title"].as_str().unwrap_or_default(),
            cancelled["task"]["state"].as_str().unwrap_or_default()
        ));
        Ok(())
    }

    async fn two_days_of(&self, user: &Value, water_id: &str) -> anyhow::Result<()> {
        let mut after = Utc::now();
        for _ in 0..2 {
            let Some(fired) = self.dispatch.fire_next(water_id, after).await? else {
                anyhow::bail!("the daily reminder's schedule is not enabled");
            };
            after = fired.scheduled_time;
            say(format!("delivering the occurrence of {}", fired.scheduled_time));
            self.dispatch.drain_runs().await?;
            self.results().await?;
        }
        let runs = invoke(
            &self.functions.schedules,
            json!({"op": "runs", "principal": user, "task_id": water_id}),
        )
        .await?;
        for run in runs["runs"].as_array().cloned().unwrap_or_default() {
            say(format!(
                "run {}: {}",
                run["scheduled_time"].as_str().unwrap_or_default(),
                run["explanation"].as_str().unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// The platform installs both connectors, reconcile creates their
    /// tasks, and a workspace admin approves both.
    async fn connectors_installed_and_approved(&self) -> anyhow::Result<ConnectorTasks> {
        self.clock
            .step("The platform installs the chat and issues connectors (signed webhooks to reconcile)");
        let (chat, issues) = (&self.connectors.chat, &self.connectors.issues);
        for (id, server, url) in [("ins_chat", "chat", chat.url()), ("ins_issues", "issues", issues.url())] {
            let status = self
                .dispatch
                .webhook(&json!({"type": "connector.installed", "workspace": "ws_1",
                    "install": {"id": id, "server": server, "url": url, "scope": "workspace", "account": "acct_1"}}))
                .await?;
            say(format!("connector.installed {id}: HTTP {status}"));
        }
        self.dispatch.drain_reconcile().await?;
        let listed = invoke(
            &self.functions.admin,
            json!({"op": "list", "principal": {"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]}}),
        )
        .await?;
        show("admin list", &listed["tasks"]);
        let tasks = ConnectorTasks {
            weekly: TaskId::for_connector("ws_1", "issues", "weekly_summary").to_string(),
            sweep: TaskId::for_connector("ws_1", "issues", "stale_issue_sweep").to_string(),
        };
        let got = invoke(&self.functions.admin, admin("get", &tasks.weekly, json!({}))).await?;
        say(format!("weekly_summary: {}", explanation(&got)));

        self.clock
            .step("A workspace admin approves both, binding the need to the chat connector");
        self.approve_both(&tasks, &got["version"]).await?;
        Ok(tasks)
    }

    async fn approve_both(&self, tasks: &ConnectorTasks, weekly_version: &Value) -> anyhow::Result<()> {
        let admin_fn = &self.functions.admin;
        let approved = invoke(
            admin_fn,
            admin(
                "approve",
                &tasks.weekly,
                json!({"expected_version": weekly_version,
                       "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_chat"}}),
            ),
        )
        .await?;
        say(format!("weekly_summary: {}", explanation(&approved)));
        let sweep_task = invoke(admin_fn, admin("get", &tasks.sweep, json!({}))).await?;
        let approved = invoke(
            admin_fn,
            admin(
                "approve",
                &tasks.sweep,
                json!({"expected_version": sweep_task["version"]}),
            ),
        )
        .await?;
        say(format!("stale_issue_sweep: {}", explanation(&approved)));
        let fires: Vec<String> = sweep_task["next_fires"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|f| {
                format!(
                    "{} local{}",
                    f["local"].as_str().unwrap_or_default(),
                    f["note"].as_str().map(|n| format!(" ({n})")).unwrap_or_default()
                )
            })
            .collect();
        say(format!(
            "stale_issue_sweep fires next (America/New_York): {}",
            fires.join("; ")
        ));
        Ok(())
    }

    /// weekly_summary through its releases: it runs, a widening waits
    /// while the old bounds run, a withdrawal holds it, a restore lifts
    /// the hold and the admin approves the widening.
    async fn runs_and_releases(&self, tasks: &ConnectorTasks) -> anyhow::Result<()> {
        let weekly = &tasks.weekly;
        self.clock
            .step("weekly_summary runs on its schedule: prompts/get on the connector, then the agent loop");
        self.run_next("weekly_summary", weekly).await?;

        self.clock
            .step("A release widens the bounds (a new tool, a higher budget): it waits for the admin");
        self.release(widened(), weekly).await?;
        say("the old bounds keep running:");
        self.run_next("weekly_summary", weekly).await?;

        self.clock
            .step("The next release withdraws the prompt: the task is held, its schedule disabled");
        self.release(vec![sweep()], weekly).await?;
        self.run_next("weekly_summary", weekly).await?;

        self.clock
            .step("The prompt is restored: the hold lifts, the widening still waits; the admin approves it");
        let got = self.release(widened(), weekly).await?;
        let approved = invoke(
            &self.functions.admin,
            admin("approve", weekly, json!({"expected_version": got["version"]})),
        )
        .await?;
        say(format!("approved: {}", explanation(&approved)));
        self.run_next("weekly_summary", weekly).await?;

        self.clock
            .step("An admin runs weekly_summary now (run_now), asking twice with one key: it runs once");
        self.run_now(weekly).await?;

        self.clock.step(
            "The admin sets the workspace's monthly budget to nothing: the next run is skipped; a raise lets the one after run",
        );
        self.workspace_budget(weekly).await?;

        self.clock.step(
            "The admin gates weekly_summary's tools (ask_first): its next run waits at its tool call; an approval resumes it and the call is made once",
        );
        self.gated_call(weekly).await
    }

    /// A tool call that waits for a person (SPEC §15): the admin names the
    /// task's tools in `ask_first`; the next run stops at its first tool
    /// call, `awaiting_approval`, nothing called; the admin reads the
    /// request's exact arguments and approves it at its version; the
    /// occurrence's resume is delivered, and the call is made once.
    async fn gated_call(&self, weekly: &str) -> anyhow::Result<()> {
        let admin_fn = &self.functions.admin;
        let got = invoke(admin_fn, admin("get", weekly, json!({}))).await?;
        let tools = got["task"]["spec"]["tools"].clone();
        let gated = invoke(
            admin_fn,
            admin(
                "approve",
                weekly,
                json!({"expected_version": got["version"], "ask_first": tools}),
            ),
        )
        .await?;
        say(format!("approve with ask_first {tools}: {}", explanation(&gated)));
        let calls_before = self.connectors.issues.state().read().await.calls.len();
        self.run_next("weekly_summary", weekly).await?;
        self.latest_run(weekly).await?;
        let listed = invoke(admin_fn, admin("approvals", weekly, json!({}))).await?;
        let Some(request) = listed["approvals"].as_array().and_then(|a| a.first()).cloned() else {
            anyhow::bail!("no approval request after a gated run: {listed}");
        };
        say(format!(
            "approvals: {} asks to call {} on {} with {} ({}, version {}, expires {}); calls made meanwhile: {}",
            request["request_id"].as_str().unwrap_or_default(),
            request["tool"].as_str().unwrap_or_default(),
            request["server"].as_str().unwrap_or_default(),
            request["arguments"],
            request["state"].as_str().unwrap_or_default(),
            request["version"],
            request["expires_at"].as_str().unwrap_or_default(),
            self.connectors.issues.state().read().await.calls.len() - calls_before,
        ));
        // The clock is fast-forwarded to the occurrence: the approval's
        // resume is sent after it, as an approval always is on AWS.
        let approve = invoke(
            admin_fn,
            json!({"op": "approve_call", "principal": {"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]},
                   "request_id": request["request_id"], "expected_version": request["version"]}),
        );
        let approved = self.dispatch.after_occurrence(self.last_fired.get(), approve).await??;
        say(format!("approve_call: {}", approved["approval"]["state"]));
        self.dispatch.drain_runs().await?;
        self.results().await?;
        self.latest_run(weekly).await?;
        say(format!(
            "calls made on the issues server by the resumed run: {}",
            self.connectors.issues.state().read().await.calls.len() - calls_before
        ));
        Ok(())
    }

    /// The workspace's monthly budget (SPEC §15): set to nothing, the next
    /// weekly_summary is skipped `budget_reached` (and the
    /// month's one `Workspace budget reached` event goes to the bus); a
    /// raise lets the one after run.
    async fn workspace_budget(&self, weekly: &str) -> anyhow::Result<()> {
        let principal = json!({"id": "adm_1", "workspace": "ws_1", "scopes": ["schedule.admin"]});
        let read = invoke(
            &self.functions.admin,
            json!({"op": "workspace", "principal": principal}),
        )
        .await?;
        let spent = read["workspace"]["spent_usd"].as_f64().unwrap_or_default();
        let set = |max: f64, version: &Value| {
            json!({"op": "set_budget", "principal": principal,
                   "budget": {"max_usd_per_month": max}, "expected_version": version})
        };
        // Nothing a month: whichever month the fast-forwarded occurrence falls in.
        let low = invoke(&self.functions.admin, set(0.0, &read["workspace"]["version"])).await?;
        say(format!(
            "set_budget: USD 0 a month, this month holds USD {spent:.4}: reached {}",
            low["workspace"]["reached"]
        ));
        self.run_next("weekly_summary", weekly).await?;
        self.latest_run(weekly).await?;
        let raised = invoke(&self.functions.admin, set(spent + 5.0, &low["workspace"]["version"])).await?;
        say(format!(
            "set_budget: USD {:.4} a month: reached {}",
            spent + 5.0,
            raised["workspace"]["reached"]
        ));
        self.run_next("weekly_summary", weekly).await?;
        self.latest_run(weekly).await
    }

    /// The latest run of `task`, in words, as an admin reads it.
    async fn latest_run(&self, task: &str) -> anyhow::Result<()> {
        let runs = invoke(&self.functions.admin, admin("runs", task, json!({"limit": 1}))).await?;
        if let Some(run) = runs["runs"].as_array().and_then(|r| r.first()) {
            say(format!(
                "weekly_summary run {}: {}",
                run["run_id"].as_str().unwrap_or_default(),
                run["explanation"].as_str().unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// An admin's run now of a connector task: asked twice with one key,
    /// both messages delivered, one run through the door, claim and settle,
    /// read back as any run.
    async fn run_now(&self, weekly: &str) -> anyhow::Result<()> {
        let got = invoke(&self.functions.admin, admin("get", weekly, json!({}))).await?;
        let key = format!("admin_now_{}", Utc::now().timestamp());
        let ask = admin(
            "run_now",
            weekly,
            json!({"expected_version": got["version"], "idempotency_key": key}),
        );
        let first = invoke(&self.functions.admin, ask.clone()).await?;
        let again = invoke(&self.functions.admin, ask).await?;
        say(format!(
            "run_now: {} (replayed: {}), then {} (replayed: {})",
            first["run_id"].as_str().unwrap_or_default(),
            first["replayed"],
            again["run_id"].as_str().unwrap_or_default(),
            again["replayed"]
        ));
        self.dispatch.drain_runs().await?;
        self.results().await?;
        // Runs are listed by their scheduled time: the fast-forwarded ones
        // lie ahead of this one, asked for now.
        let runs = invoke(&self.functions.admin, admin("runs", weekly, json!({"limit": 10}))).await?;
        let asked: Vec<Value> = runs["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|run| run["run_id"] == first["run_id"])
            .collect();
        say(format!("runs recorded for that run id: {}", asked.len()));
        for run in asked {
            say(format!(
                "weekly_summary run {}: {}",
                run["run_id"].as_str().unwrap_or_default(),
                run["explanation"].as_str().unwrap_or_default()
            ));
        }
        Ok(())
    }

    /// Fast-forwards `task` to its next occurrence, delivers it, and shows
    /// what the chat backend reads of its result and the tools the model
    /// was offered.
    async fn run_next(&self, label: &str, task: &str) -> anyhow::Result<()> {
        let Some(fired) = self.dispatch.fire_next(task, self.last_fired.get()).await? else {
            say(format!(
                "{label}: its schedule is disabled; Scheduler would not fire it"
            ));
            return Ok(());
        };
        self.last_fired.set(fired.scheduled_time);
        say(format!(
            "{label}: delivering the occurrence of {} now (the dispatcher fast-forwards)",
            fired.scheduled_time
        ));
        self.dispatch.drain_runs().await?;
        self.results().await?;
        let offered: Vec<String> = self
            .model
            .requests()
            .await
            .last()
            .map(|(_, r)| {
                r["toolConfig"]["tools"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .filter_map(|t| t["toolSpec"]["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        say(format!("tools offered to the model: {}", offered.join(", ")));
        Ok(())
    }

    /// The chat backend's side of the runs just settled (SPEC §12): the pipe
    /// carries them to the bus, the rule to RunFinishedQueue, and the
    /// backend reads each result back and shows it. A skipped run sends no
    /// event, so nothing reaches the backend for it.
    async fn results(&self) -> anyhow::Result<()> {
        self.dispatch.notify().await?;
        say_handled(&self.backend.receive().await?);
        Ok(())
    }

    /// A release of the issues connector: new declarations, the platform's
    /// list_changed webhook, reconcile's work, and the admin's view after.
    async fn release(&self, prompts: Vec<local::mcp_fixture::FixturePrompt>, weekly: &str) -> anyhow::Result<Value> {
        self.connectors.issues.state().write().await.prompts = prompts;
        self.dispatch
            .webhook(&json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_issues"}}))
            .await?;
        self.dispatch.drain_reconcile().await?;
        let got = invoke(&self.functions.admin, admin("get", weekly, json!({}))).await?;
        say(format!("weekly_summary: {}", explanation(&got)));
        Ok(got)
    }

    /// The final task items (an operator's view of the table) and the
    /// notifications on the bus.
    async fn final_items(&self, tasks: &[(&str, &String)]) -> anyhow::Result<()> {
        self.clock.step("Final task items");
        for (label, task_id) in tasks {
            let task = self.item(Key::task("ws_1", task_id)).await?;
            show(
                label,
                &json!({"task_id": task["task_id"], "kind": task["kind"], "state": task["state"], "version": task["version"],
                "spec": {"schedule": task["spec"]["schedule"], "tools": task["spec"]["tools"], "budget": task["spec"]["budget"],
                         "arguments": task["spec"]["arguments"], "bindings": task["spec"]["bindings"]},
                "pending": task["pending"], "hold": task["hold"], "override": task["override"]}),
            );
        }
        let events = self.stack.received_events(&self.aws.sdk).await?;
        for kind in [
            shared::domain::run::notification::DETAIL_TYPE,
            "Workspace budget reached",
            "Tool call awaiting approval",
        ] {
            let of_kind: Vec<&Value> = events.iter().filter(|e| e["detail-type"] == kind).collect();
            say(format!("\"{kind}\" events on the bus: {}", of_kind.len()));
            for event in of_kind {
                say(event["detail"].to_string());
            }
        }
        Ok(())
    }
}

/// Keeps everything up: writes the functions' environment for
/// `cargo lambda watch --env-file`, and keeps dispatching due schedules and
/// queues to the running binaries, until Ctrl-C.
async fn serve(functions: &Functions, dispatch: &Dispatcher<'_>, backend: &ChatBackend<'_>) -> anyhow::Result<()> {
    // The Lambda Invoke API in front of the five binaries, for callers that
    // invoke a function by its ARN (`sat verify`).
    let invoke = local::invoke::InvokeApi::start(
        [
            &functions.create,
            &functions.runner,
            &functions.reconcile,
            &functions.admin,
            &functions.schedules,
        ]
        .map(|f| f.api.invoker()),
    )
    .await?;
    let path = local::moto::repo_root().join("target/local.env");
    let mut env = functions.env();
    // The stack's outputs, as template.yaml names them, and where to invoke
    // the functions: what `sat --env-file target/local.env` reads.
    env.extend(dispatch.stack.outputs().into_iter().map(|(k, v)| (k.to_owned(), v)));
    for (output, function) in [
        ("CreateFunctionArn", "create"),
        ("AdminFunctionArn", "admin"),
        ("SchedulesFunctionArn", "schedules"),
    ] {
        env.push((output.to_owned(), local::invoke::function_arn(function)));
    }
    env.push(("AWS_ENDPOINT_URL_LAMBDA".to_owned(), invoke.endpoint()));
    let text: String = env
        .iter()
        .filter(|(k, _)| k != "RUST_LOG" && k != shared::adapters::partitions::VARIABLE)
        .map(|(k, v)| format!("{k}='{v}'\n"))
        .collect();
    std::fs::write(&path, text)?;
    println!(
        "\n== Serving until Ctrl-C. The functions' environment and the stack's outputs are in {}.",
        path.display()
    );
    println!("   Operate it: cargo run -p sat -- --env-file target/local.env describe <task_id>  (docs/operations.md)");
    println!("   In another shell:");
    println!("     cargo lambda watch -A 127.0.0.1 --env-file target/local.env");
    println!("     cargo lambda invoke create --data-file infra/events/create-reminder.json");
    println!("     cargo lambda invoke admin --data-file infra/events/admin-get.json");
    println!("     cargo lambda invoke schedules --data-file infra/events/schedules-list.json");
    println!("   Due schedules and queued work keep flowing to the binaries started here; the chat backend");
    println!("   shows the results of the reminders it created (others: it knows no owner to read them as).");
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tick.tick() => {
                for fired in dispatch.fire_due(Utc::now()).await? {
                    println!("   fired {} for {}", fired.schedule, fired.scheduled_time);
                }
                dispatch.drain_runs().await?;
                dispatch.drain_reconcile().await?;
                for event in dispatch.stack.received_events(dispatch.sdk).await? {
                    println!("   event on the bus: {}", event["detail"]);
                }
                say_handled(&backend.receive().await?);
            }
        }
    }
}
