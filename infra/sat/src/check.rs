//! `sat check <url>`: what a connector's server declares, read as reconcile
//! reads it (SPEC §5, §6, §13), before a release.
//!
//! It connects with the same MCP client reconcile uses (`adapters::mcp`:
//! its timeouts, version negotiation and bounds), reads the whole
//! `prompts/list` and `tools/list`, and plans the server as a fresh
//! workspace install with `domain::connector::reconcile::plan`, the one function that
//! decides: each scheduled prompt either becomes a task (held until an
//! admin approves it) or is refused with reconcile's own reason. Each
//! marker is also validated against the published JSON Schema, whose
//! errors point into the marker. The URL rule a deployed reconcile applies
//! (`domain::connector::endpoint`: public `https://` only) is reported, not enforced:
//! the author's server may be on this machine.
//!
//! `--dry-run <prompt>` runs the first step of a run: `prompts/get` with
//! the given arguments, `tools/list` of the approved tools, and the first
//! Converse request as `app::run::first_request` builds it and the Bedrock
//! adapter serializes it (`adapters::bedrock::render`); no model is called.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use shared::adapters::mcp::{McpClient, McpConnectors};
use shared::domain::connector::declaration::{MARKER, SCHEMA};
use shared::domain::connector::endpoint::{EndpointPolicy, connect_endpoint};
use shared::domain::connector::reconcile::{self, ListedPrompt, ServerView};
use shared::domain::schedule::Schedule;
use shared::domain::schedule::preview::{Fire, dst_changes, next_fires};
use shared::domain::task::Task;
use shared::domain::task::budget::{Budget, Price, Prices};
use shared::domain::task::ceiling::{CostCeiling, cost_ceiling};
use shared::domain::task::install::{Install, InstallScope, InstallStatus};
use shared::domain::task::limits::{Ceilings, Limits};
use shared::ports::McpSession;

use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// The template's default `ScheduleCeilings` (a test holds them together).
pub const DEFAULT_CEILINGS: Limits = shared::domain::task::limits::EXAMPLE_CEILINGS;
/// The template's default `ModelId`.
pub const DEFAULT_MODEL_ID: &str = "global.anthropic.claude-haiku-4-5-20251001-v1:0";
/// The template's default `ModelPrices`.
pub const DEFAULT_MODEL_PRICES: &str = r#"{"global.anthropic.claude-haiku-4-5-20251001-v1:0": {"input_per_mtok": 1.0, "output_per_mtok": 5.0, "cache_write_per_mtok": 1.25, "cache_read_per_mtok": 0.1}}"#;

/// The workspace and install a checked server is planned as.
const CHECK_WORKSPACE: &str = "sat-check";
const CHECK_INSTALL: &str = "sat-check";

#[derive(Debug, Clone, clap::Args)]
pub struct CheckArgs {
    /// The server's MCP endpoint (streamable HTTP), as an install would name it.
    pub url: String,
    /// A bearer token the server needs, as the install's credential would hold it.
    #[arg(long, env = "SAT_CHECK_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// The server's name as the platform would install it (default: the
    /// name the server gives itself). Task ids derive from it.
    #[arg(long)]
    pub server: Option<String>,
    /// Render the first Converse request of this scheduled prompt's run,
    /// without calling a model.
    #[arg(long, value_name = "PROMPT")]
    pub dry_run: Option<String>,
    /// A prompt argument's value for the dry run, as an admin would approve
    /// it (repeat for each).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = name_value)]
    pub arguments: Vec<(String, String)>,
    /// SCHEDULE_CEILINGS to check limits against, as JSON (default: the
    /// stack's when one is named, else the template's default).
    #[arg(long, value_name = "JSON")]
    pub ceilings: Option<String>,
    /// MODEL_ID of the dry run (default: the stack's, else the template's).
    #[arg(long)]
    pub model: Option<String>,
    /// MODEL_PRICES of the dry run, as JSON (default: the stack's, else the template's).
    #[arg(long, value_name = "JSON")]
    pub prices: Option<String>,
    /// The workspace the task ids are derived for (they derive from
    /// workspace, server and prompt).
    #[arg(long, default_value = CHECK_WORKSPACE)]
    pub workspace: String,
    /// How many next fire times to show per task.
    #[arg(long, default_value_t = 5)]
    pub fires: usize,
}

fn name_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.trim().to_owned(), v.to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE"))
}

/// What `check` found.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub url: String,
    /// The workspace the task ids are derived for.
    pub workspace: String,
    /// The server name tasks are keyed by.
    pub server: String,
    pub protocol_version: Option<String>,
    pub checked_at: String,
    /// Why a deployed reconcile would refuse this URL, if it would.
    pub url_refused: Option<String>,
    pub ceilings: Limits,
    /// Whether the server declared the `prompts` capability; one that serves
    /// tools alone (most do) is not asked for prompts and declares nothing.
    pub serves_prompts: bool,
    /// The server's tools, as `tools/list` names them.
    pub tools: Vec<String>,
    /// Every prompt `prompts/list` showed without the marker.
    pub unmarked: Vec<String>,
    /// Every prompt with the marker, by name.
    pub declarations: Vec<Declared>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRun>,
}

/// One declared scheduled prompt and its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct Declared {
    pub prompt: String,
    /// `accepted` (it would become the task below) or `refused`.
    pub verdict: &'static str,
    /// Reconcile's reason, in its words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Where the marker breaks the published schema.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema_errors: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<WouldBe>,
}

/// The task a declaration would become.
#[derive(Debug, Clone, Serialize)]
pub struct WouldBe {
    pub task_id: String,
    /// `held`, awaiting an admin's approval: a new declaration never runs before.
    pub state: String,
    pub hold: Vec<&'static str>,
    pub schedule: Schedule,
    pub schedule_words: String,
    /// The EventBridge Scheduler expression and zone it is scheduled with.
    pub expression: String,
    pub timezone: String,
    pub next_fires: Vec<FireView>,
    /// The first local time of the coming year a DST change skips, and the
    /// first it repeats, as Scheduler fires them.
    pub dst: Vec<FireView>,
    pub tools: BTreeSet<String>,
    pub limits: Limits,
    pub budget: Option<Budget>,
    pub cost_ceiling: Option<CostCeiling>,
    /// need id -> description: an admin binds each to a workspace connector.
    pub needs: BTreeMap<String, String>,
    /// argument -> required: an admin gives the values at approval.
    pub arguments: BTreeMap<String, bool>,
}

/// A fire time, in its zone beside UTC.
#[derive(Debug, Clone, Serialize)]
pub struct FireView {
    /// When it fires (UTC); absent for a local time DST skips.
    pub utc: Option<String>,
    /// The wall-clock time in the schedule's zone.
    pub local: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl FireView {
    pub fn of(fire: &Fire, zone: &str) -> Self {
        Self {
            utc: fire.at.map(render::utc),
            local: match fire.at {
                Some(at) => render::local(at, zone),
                // A local time DST skips, or a day its month lacks (no weekday).
                None => match chrono::NaiveDateTime::parse_from_str(&fire.local, "%Y-%m-%dT%H:%M:%S") {
                    Ok(local) => format!("{} {zone}", local.format("%a %Y-%m-%d %H:%M")),
                    Err(_) => format!(
                        "{} {zone}",
                        fire.local.replacen('T', " ", 1).get(..16).unwrap_or_default()
                    ),
                },
            },
            note: fire.note.clone(),
        }
    }
}

/// The dry run's first Converse request.
#[derive(Debug, Clone, Serialize)]
pub struct DryRun {
    pub prompt: String,
    pub model_id: String,
    pub arguments: BTreeMap<String, String>,
    /// The request body as the SDK sends it to `Converse`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// Tools that could not be offered, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<String>,
    /// Why the run would fail before its first model call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fails: Option<String>,
}

/// The deployment settings `check` applies.
struct Settings {
    ceilings: Ceilings,
    model_id: String,
    prices: Prices,
}

fn settings(args: &CheckArgs, resources: Option<&Resources>) -> Result<Settings, SatError> {
    let setting = |name: &str| resources.and_then(|r| r.setting(name)).map(str::to_owned);
    let ceilings = match args.ceilings.clone().or_else(|| setting("SCHEDULE_CEILINGS")) {
        Some(json) => {
            let lookup = move |name: &str| (name == "SCHEDULE_CEILINGS").then(|| json.clone());
            shared::config::ceilings(&shared::config::Env::from_lookup(lookup)).map_err(|e| SatError::Setting {
                setting: "the ceilings",
                reason: e.to_string(),
            })?
        }
        None => Ceilings::new(DEFAULT_CEILINGS).map_err(|e| SatError::Setting {
            setting: "the default ceilings",
            reason: e.to_string(),
        })?,
    };
    let model_id = args
        .model
        .clone()
        .or_else(|| setting("MODEL_ID"))
        .unwrap_or_else(|| DEFAULT_MODEL_ID.to_owned());
    let prices_json = args
        .prices
        .clone()
        .or_else(|| setting("MODEL_PRICES"))
        .unwrap_or_else(|| DEFAULT_MODEL_PRICES.to_owned());
    let malformed = |reason: String| SatError::Setting {
        setting: "the model prices",
        reason,
    };
    let prices: BTreeMap<String, Price> = serde_json::from_str(&prices_json).map_err(|e| malformed(e.to_string()))?;
    let prices = Prices::new(prices).map_err(|e| malformed(e.to_string()))?;
    Ok(Settings {
        ceilings,
        model_id,
        prices,
    })
}

/// The install a checked server is planned as: a workspace install, the
/// only kind whose prompts reconcile reads.
fn install(workspace: &str, server: &str, url: &str, now: DateTime<Utc>) -> Install {
    Install {
        install_id: CHECK_INSTALL.to_owned(),
        workspace: workspace.to_owned(),
        server: server.to_owned(),
        url: url.to_owned(),
        scope: InstallScope::Workspace,
        account: workspace.to_owned(),
        credential_secret_arn: None,
        status: InstallStatus::Installed,
        updated_at: now,
        declaration_errors: BTreeMap::new(),
        last_error: None,
        lifecycle_at: None,
        lifecycle_id: None,
    }
}

/// The marker's breaks of the published schema, each with where it is.
fn schema_errors(marker: &Value) -> Vec<String> {
    let Ok(schema) = serde_json::from_str::<Value>(SCHEMA) else {
        return vec!["the published schema does not parse".into()];
    };
    match jsonschema::validator_for(&schema) {
        Ok(validator) => validator
            .iter_errors(marker)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "(the marker)".to_owned() } else { at };
                format!("{at}: {e}")
            })
            .collect(),
        Err(e) => vec![format!("the published schema is not a schema: {e}")],
    }
}

fn would_be(task: &Task, count: usize, now: DateTime<Utc>) -> WouldBe {
    let schedule = &task.spec.schedule;
    let (expression, timezone) = schedule
        .expression()
        .map(|e| (e.expression, e.timezone))
        .unwrap_or_default();
    let fires = next_fires(schedule, now, count).unwrap_or_default();
    WouldBe {
        task_id: task.task_id.to_string(),
        state: task.state().as_str().to_owned(),
        hold: task.hold.entries().map(|(r, _)| r.as_str()).collect(),
        schedule: schedule.clone(),
        schedule_words: schedule.in_words(),
        next_fires: fires.iter().map(|f| FireView::of(f, &timezone)).collect(),
        dst: dst_changes(schedule, now)
            .iter()
            .map(|f| FireView::of(f, &timezone))
            .collect(),
        expression,
        timezone,
        tools: task.spec.tools.clone(),
        limits: task.spec.limits,
        budget: task.spec.budget,
        cost_ceiling: task.spec.budget.map(|b| cost_ceiling(schedule, b, now)),
        needs: task.spec.needs.clone(),
        arguments: task.prompt_arguments.clone(),
    }
}

async fn connect(args: &CheckArgs) -> Result<McpClient, SatError> {
    // The author's server may be on this machine: connect to loopback too
    // (the deployed rule is reported, below, not applied).
    McpConnectors::open(&args.url, args.token.clone(), EndpointPolicy { allow_loopback: true })
        .await
        .map_err(|e| SatError::Connector {
            url: args.url.clone(),
            message: e.to_string(),
        })
}

/// Each listed prompt once, by name: a scheduled one with reconcile's
/// verdict on it (and, accepted, the task it would be), or its name among
/// those not scheduled.
fn verdicts(
    prompts: &[ListedPrompt],
    created: &BTreeMap<&str, &Task>,
    refused: &BTreeMap<String, String>,
    fires: usize,
    now: DateTime<Utc>,
) -> (Vec<Declared>, Vec<String>) {
    let mut listed: Vec<&ListedPrompt> = prompts.iter().collect();
    listed.sort_by(|a, b| a.name.cmp(&b.name));
    listed.dedup_by(|a, b| a.name == b.name);
    let mut declarations = Vec::new();
    let mut unmarked = Vec::new();
    for prompt in listed {
        let Some(marker) = &prompt.marker else {
            unmarked.push(prompt.name.clone());
            continue;
        };
        let task = created.get(prompt.name.as_str());
        declarations.push(Declared {
            prompt: prompt.name.clone(),
            verdict: if task.is_some() { "accepted" } else { "refused" },
            refusal: refused.get(&prompt.name).cloned().or_else(|| {
                task.is_none()
                    .then(|| "refused by reconcile (past the bounds on what one server may declare)".to_owned())
            }),
            schema_errors: schema_errors(marker),
            task: task.map(|t| would_be(t, fires, now)),
        });
    }
    (declarations, unmarked)
}

/// The name the server is installed as: `--server`, else its own.
fn server_name(args: &CheckArgs, session: &McpClient) -> Result<String, SatError> {
    args.server
        .clone()
        .or_else(|| session.server_name())
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| {
            SatError::Usage("the server gives itself no name: say what it is installed as with --server".into())
        })
}

pub async fn run(args: &CheckArgs, resources: Option<&Resources>) -> Result<CheckReport, SatError> {
    let settings = settings(args, resources)?;
    let now = Utc::now();
    let url_refused = connect_endpoint(&args.url, EndpointPolicy { allow_loopback: false })
        .err()
        .map(|e| e.to_string());
    let session = connect(args).await?;
    let failed = |e: shared::ports::McpError| SatError::Connector {
        url: args.url.clone(),
        message: e.to_string(),
    };
    let prompts = session.list_prompts().await.map_err(failed)?;
    let tools: BTreeSet<String> = session
        .list_tools(None)
        .await
        .map_err(failed)?
        .into_iter()
        .map(|t| t.name)
        .collect();
    let server = server_name(args, &session)?;
    let install = install(&args.workspace, &server, &args.url, now);
    let installs = BTreeMap::from([(install.install_id.clone(), install.clone())]);
    // One server alone in a workspace: the workspace cap is all its room.
    let view = ServerView {
        install: &install,
        prompts: &prompts,
        tools: &tools,
        room: reconcile::MAX_WORKSPACE_TASKS,
    };
    let plan = reconcile::plan(&view, &[], &installs, &settings.ceilings, now);
    let created: BTreeMap<&str, &Task> = plan
        .writes
        .iter()
        .filter_map(|w| w.task.provenance.prompt().map(|prompt| (prompt, &w.task)))
        .collect();

    let (declarations, unmarked) = verdicts(&prompts, &created, &plan.refused, args.fires, now);
    let dry_run = match &args.dry_run {
        Some(prompt) => Some(dry_run(args, &settings, &session, &server, prompt, &created, now).await?),
        None => None,
    };
    Ok(CheckReport {
        url: args.url.clone(),
        workspace: args.workspace.clone(),
        server,
        protocol_version: session.protocol_version(),
        checked_at: render::utc(now),
        url_refused,
        ceilings: settings.ceilings.limits(),
        serves_prompts: session.serves_prompts(),
        tools: tools.into_iter().collect(),
        unmarked,
        declarations,
        dry_run,
    })
}

/// The `--arg` values for `prompt`, as an admin gives them at approval:
/// none the prompt does not have, every one it requires.
fn given_arguments(args: &CheckArgs, prompt: &str, task: &Task) -> Result<BTreeMap<String, String>, SatError> {
    let arguments: BTreeMap<String, String> = args.arguments.iter().cloned().collect();
    let unknown: Vec<&String> = arguments
        .keys()
        .filter(|a| !task.prompt_arguments.contains_key(*a))
        .collect();
    if !unknown.is_empty() {
        return Err(SatError::Usage(format!(
            "--arg {}: {prompt} has no such argument (it has: {})",
            unknown.iter().map(|a| a.as_str()).collect::<Vec<_>>().join(", "),
            listed(task.prompt_arguments.keys().map(String::as_str))
        )));
    }
    let missing: Vec<&String> = task
        .prompt_arguments
        .iter()
        .filter(|(name, required)| **required && !arguments.contains_key(*name))
        .map(|(name, _)| name)
        .collect();
    if !missing.is_empty() {
        return Err(SatError::Usage(format!(
            "--dry-run {prompt}: give a value for its required argument{} {} with --arg NAME=VALUE, as an admin would at approval",
            if missing.len() == 1 { "" } else { "s" },
            missing.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(arguments)
}

/// Names joined, or "none".
fn listed<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let names: Vec<&str> = names.collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

/// The run settings a first request is rendered with: the model, prices
/// and ceilings the operator gave.
fn rendering(settings: &Settings) -> shared::app::run::RunSettings {
    shared::app::run::RunSettings {
        worker_enabled: true,
        catch_up: chrono::Duration::seconds(shared::config::DEFAULT_CATCH_UP_SECONDS),
        model_id: settings.model_id.clone(),
        prices: settings.prices.clone(),
        ceilings: settings.ceilings,
        retention: chrono::Duration::days(90),
        // A rendering sends no request: nothing to pace or to cap.
        pace: None,
        person_monthly_usd: None,
        approval_hours: shared::domain::run::gate::DEFAULT_APPROVAL_HOURS,
    }
}

/// The dry run of one accepted declaration: its approved bounds as
/// declared, the given argument values, the run's first request.
async fn dry_run(
    args: &CheckArgs,
    settings: &Settings,
    session: &McpClient,
    server: &str,
    prompt: &str,
    created: &BTreeMap<&str, &Task>,
    now: DateTime<Utc>,
) -> Result<DryRun, SatError> {
    let Some(task) = created.get(prompt) else {
        return Err(SatError::Usage(format!(
            "--dry-run {prompt}: not an accepted scheduled prompt of this server (accepted: {})",
            listed(created.keys().copied())
        )));
    };
    let mut task = (*task).clone();
    let arguments = given_arguments(args, prompt, &task)?;
    task.spec.arguments = arguments.clone();
    let mut report = DryRun {
        prompt: prompt.to_owned(),
        model_id: settings.model_id.clone(),
        arguments,
        request: None,
        left_out: Vec::new(),
        fails: None,
    };
    // As the run's step 4: prompts/get with the approved values, then the
    // approved tools; an MCP error there fails the run.
    let messages = match session.get_prompt(prompt, &task.spec.arguments).await {
        Ok(messages) => messages,
        Err(e) => {
            report.fails = Some(e.to_string());
            return Ok(report);
        }
    };
    let own = match session.list_tools(Some(&task.spec.tools)).await {
        Ok(tools) => tools,
        Err(e) => {
            report.fails = Some(e.to_string());
            return Ok(report);
        }
    };
    match shared::app::run::first_request(&task, server, messages, own, &rendering(settings), now) {
        Ok(first) => {
            report.left_out = first.left_out;
            report.request = Some(
                shared::adapters::bedrock::render(&settings.model_id, &first.request)
                    .await
                    .map_err(|e| SatError::Usage(format!("rendering the request: {e}")))?,
            );
        }
        Err(why) => report.fails = Some(why),
    }
    Ok(report)
}

fn limits_words(limits: &Limits) -> String {
    format!(
        "{} turns, {} tool calls, {} output tokens, {} s",
        limits.max_turns, limits.max_tool_calls, limits.max_output_tokens, limits.timeout_seconds
    )
}

fn list_or_none<'a>(items: impl IntoIterator<Item = &'a String>) -> String {
    let items: Vec<&str> = items.into_iter().map(String::as_str).collect();
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// The fire table of a task, its zone beside UTC.
pub fn fires_table(fires: &[FireView], zone: &str) -> String {
    let mut table = render::table(&[&format!("local ({zone})"), "UTC", "note"]);
    for fire in fires {
        table.add_row(vec![
            fire.local.clone(),
            fire.utc.clone().unwrap_or_else(|| "(skipped)".to_owned()),
            fire.note.clone().unwrap_or_default(),
        ]);
    }
    table.to_string()
}

impl WouldBe {
    fn human(&self) -> String {
        let budget = render::budget(self.budget);
        let needs = if self.needs.is_empty() {
            "none".to_owned()
        } else {
            self.needs
                .iter()
                .map(|(id, d)| format!("{id} ({d}): an admin binds it to a workspace connector"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let arguments = if self.arguments.is_empty() {
            "none".to_owned()
        } else {
            self.arguments
                .iter()
                .map(|(a, required)| format!("{a} ({})", if *required { "required" } else { "optional" }))
                .collect::<Vec<_>>()
                .join(", ")
                + ": an admin gives the values at approval"
        };
        let mut text = render::fields(&[
            (
                "task",
                format!("{} ({}: {})", self.task_id, self.state, self.hold.join(", ")),
            ),
            ("schedule", self.schedule_words.clone()),
            ("expression", format!("{} in {}", self.expression, self.timezone)),
            ("tools", list_or_none(&self.tools)),
            ("limits", limits_words(&self.limits)),
            ("budget", budget),
            (
                "cost ceiling",
                self.cost_ceiling
                    .as_ref()
                    .map_or_else(|| "none".to_owned(), |c| c.words.clone()),
            ),
            ("needs", needs),
            ("arguments", arguments),
        ]);
        text.push_str(&fires_table(&self.next_fires, &self.timezone));
        text.push('\n');
        for fire in &self.dst {
            text.push_str(&format!(
                "DST: {}{}\n",
                fire.note.clone().unwrap_or_default(),
                fire.utc.as_ref().map(|u| format!(" ({u})")).unwrap_or_default()
            ));
        }
        text
    }
}

impl DryRun {
    fn human(&self) -> String {
        let mut text = render::heading(&format!(
            "Dry run of {} (model {}, no model called)",
            self.prompt, self.model_id
        ));
        if let Some(why) = &self.fails {
            text.push_str(&format!("The run would fail before its first model call: {why}\n"));
            return text;
        }
        let Some(request) = &self.request else {
            return text;
        };
        text.push_str(&format!(
            "system: {}\n",
            request["system"][0]["text"].as_str().unwrap_or_default()
        ));
        text.push_str(&format!("maxTokens: {}\n", request["inferenceConfig"]["maxTokens"]));
        let mut messages = render::table(&["#", "role", "content"]);
        for (i, message) in request["messages"].as_array().into_iter().flatten().enumerate() {
            let content: Vec<String> = message["content"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|block| match block.get("text").and_then(Value::as_str) {
                    Some(text) => text.to_owned(),
                    None => block.to_string(),
                })
                .collect();
            messages.add_row(vec![
                (i + 1).to_string(),
                message["role"].as_str().unwrap_or_default().to_owned(),
                content.join("\n"),
            ]);
        }
        text.push_str(&format!("{messages}\n"));
        let tools = request["toolConfig"]["tools"].as_array().cloned().unwrap_or_default();
        if tools.is_empty() {
            text.push_str("tools: none offered\n");
        } else {
            let mut table = render::table(&["tool (as the model sees it)", "description", "input schema"]);
            for tool in &tools {
                let spec = &tool["toolSpec"];
                table.add_row(vec![
                    spec["name"].as_str().unwrap_or_default().to_owned(),
                    spec["description"].as_str().unwrap_or_default().to_owned(),
                    spec["inputSchema"]["json"].to_string(),
                ]);
            }
            text.push_str(&format!("{table}\n"));
        }
        for note in &self.left_out {
            text.push_str(&format!("left out: {note}\n"));
        }
        text.push_str("(the whole request body: sat --json check ... --dry-run ...)\n");
        text
    }
}

impl CheckReport {
    /// The server, what it offers, the ceilings and how it is planned.
    fn fields(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "server",
                format!(
                    "{} at {} (MCP {})",
                    self.server,
                    self.url,
                    self.protocol_version.as_deref().unwrap_or("unknown")
                ),
            ),
            ("tools", list_or_none(&self.tools)),
            (
                "prompts",
                format!(
                    "{} scheduled, {} not scheduled{}",
                    self.declarations.len(),
                    self.unmarked.len(),
                    if self.unmarked.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", self.unmarked.join(", "))
                    }
                ),
            ),
            ("ceilings", limits_words(&self.ceilings)),
            (
                "planned as",
                format!(
                    "a workspace install in workspace {} (task ids derive from workspace, server and prompt)",
                    self.workspace
                ),
            ),
            ("checked at", self.checked_at.clone()),
        ]
    }

    /// One row a scheduled prompt: its verdict, schedule and task or reason.
    fn summary(&self) -> comfy_table::Table {
        let mut summary = render::table(&["scheduled prompt", "verdict", "schedule", "task or reason"]);
        for d in &self.declarations {
            summary.add_row(vec![
                d.prompt.clone(),
                d.verdict.to_owned(),
                d.task.as_ref().map(|t| t.schedule_words.clone()).unwrap_or_default(),
                match (&d.task, &d.refusal) {
                    (Some(t), _) => t.task_id.clone(),
                    (None, Some(why)) => why.clone(),
                    (None, None) => String::new(),
                },
            ]);
        }
        summary
    }
}

impl Report for CheckReport {
    fn human(&self) -> String {
        let accepted = self.declarations.iter().filter(|d| d.task.is_some()).count();
        let refused = self.declarations.len() - accepted;
        let mut text = render::fields(&self.fields());
        if let Some(why) = &self.url_refused {
            text.push_str(&format!(
                "\nNote: a deployed reconcile would refuse this URL: {why}. Install the server at a public https:// address.\n"
            ));
        }
        if !self.declarations.is_empty() {
            text.push_str(&format!("\n{}\n", self.summary()));
        }
        for d in &self.declarations {
            text.push_str(&render::heading(&format!("{}: {}", d.prompt, d.verdict)));
            if let Some(why) = &d.refusal {
                text.push_str(&format!("refused: {why}\n"));
            }
            for error in &d.schema_errors {
                text.push_str(&format!("schema: {error}\n"));
            }
            if let Some(task) = &d.task {
                text.push_str(&task.human());
            }
        }
        if let Some(dry) = &self.dry_run {
            text.push_str(&dry.human());
        }
        text.push_str(&format!(
            "\n{accepted} declaration{} would become {} held for an admin's approval; {refused} refused.\n",
            if accepted == 1 { "" } else { "s" },
            if accepted == 1 { "a task" } else { "tasks" },
        ));
        if !self.serves_prompts {
            text.push_str(
                "The server declares no `prompts` capability: it serves tools alone and declares nothing scheduled.\n",
            );
        } else if self.declarations.is_empty() {
            text.push_str(&format!(
                "No prompt carries the `{MARKER}` marker in its _meta: nothing would be scheduled.\n"
            ));
        }
        text
    }

    fn findings(&self) -> bool {
        self.declarations
            .iter()
            .any(|d| d.task.is_none() || !d.schema_errors.is_empty())
            || self.dry_run.as_ref().is_some_and(|d| d.fails.is_some())
    }
}
