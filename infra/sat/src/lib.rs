//! `sat`, the operator CLI (SPEC §14): what an operator and a connector
//! author ask of a deployment, answered with the system's own rules.
//!
//! - `sat check <url>`: connects to an MCP server as reconcile does, and
//!   shows what each scheduled-prompt declaration would become (or why it
//!   is refused); `--dry-run <prompt>` renders the first Converse request
//!   of its run without calling a model.
//! - `sat describe <task_id>`: a task as an admin reads it (state, why in
//!   words, next fires with DST notes, pending bounds, cost ceiling) with
//!   its recent runs and its Scheduler schedule.
//! - `sat overdue`: the missed-occurrence check on demand: every
//!   occurrence that was due and never ran, named, task and time.
//! - `sat redrive`: every dead-letter queue's messages, each back to where
//!   it belongs.
//! - `sat verify`: after a deploy, a reminder end to end (created, run on
//!   the model, recorded, notified), a chain through the reconcile queue
//!   past Lambda's loop detection, and the functions' spans accepted.
//! - `sat upgrade`: once, after deploying over a release from before due
//!   times: its tasks get one, and their place in the schedulable index.
//!
//! Nothing is decided here that the system decides elsewhere: declarations
//! go through `domain::connector::reconcile::plan`, a task's explanation through
//! `app::admin`, the first request through `app::run::first_request` and
//! the Bedrock adapter. Reports are serde structs (`--json`) with a human
//! form ([`render::Report`]).

pub mod args;
pub mod aws;
pub mod check;
pub mod describe;
pub mod error;
pub mod overdue;
pub mod redrive;
pub mod render;
pub mod resources;
pub mod upgrade;
pub mod verify;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use error::SatError;
use render::Report;
use resources::{Resources, Where};

#[derive(Debug, Parser)]
#[command(
    name = "sat",
    version,
    about = "Operate scheduled agent tasks: check a connector's declarations, describe a task, find missed occurrences, redrive the dead-letter queues, verify a deployment",
    after_help = "Exit status: 0 done, 1 error, 2 usage, 3 done but found something wrong (a refused declaration, a failed verification, messages left in a queue)."
)]
pub struct Cli {
    #[command(flatten)]
    pub place: Place,
    /// The machine form: one JSON document, stable field names.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Where the stack is (not needed by `check`, which may use its settings).
#[derive(Debug, Clone, Args)]
pub struct Place {
    /// A deployed stack's name: its outputs are read from CloudFormation
    /// with your AWS credentials (environment, profile, SSO, credential_process).
    #[arg(long, global = true, env = "SAT_STACK")]
    pub stack: Option<String>,
    /// The local stack's environment file instead (infra/scripts/local.sh
    /// --serve writes target/local.env).
    #[arg(long, global = true, env = "SAT_ENV_FILE")]
    pub env_file: Option<PathBuf>,
    /// The AWS profile to use with --stack.
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// The AWS region of --stack.
    #[arg(long, global = true)]
    pub region: Option<String>,
}

impl Place {
    fn place(&self) -> Where {
        Where {
            stack: self.stack.clone(),
            env_file: self.env_file.clone(),
            profile: self.profile.clone(),
            region: self.region.clone(),
        }
    }

    fn given(&self) -> bool {
        self.stack.is_some() || self.env_file.is_some()
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// What a connector's MCP server declares, as reconcile would read it:
    /// the tasks its scheduled prompts would become, and why any is refused.
    Check(check::CheckArgs),
    /// A task at a glance: state, why in words, next fires, recent runs, cost.
    Describe(describe::DescribeArgs),
    /// The missed-occurrence check now: every occurrence that was due and
    /// never ran (a lost schedule, a dead-lettered message), recorded once.
    Overdue(overdue::OverdueArgs),
    /// Every dead-letter queue's messages, each to where it belongs.
    Redrive(redrive::RedriveArgs),
    /// After a deploy: a reminder due shortly, created through the create
    /// function, run, recorded and notified on RunFinishedQueue.
    Verify(verify::VerifyArgs),
    /// Once, after deploying over a release from before due times: the
    /// tasks it wrote get one, so the missed-occurrence check and the daily
    /// pass see them.
    Upgrade(upgrade::UpgradeArgs),
}

/// Runs one command; answers the text to print and the exit status.
pub async fn run(cli: Cli) -> Result<(String, u8), SatError> {
    match &cli.command {
        Command::Check(args) => {
            // The deployment's ceilings and model, when a stack is named.
            let resources = if cli.place.given() {
                Some(Resources::locate(&cli.place.place()).await?)
            } else {
                None
            };
            let report = check::run(args, resources.as_ref()).await?;
            Ok(answer(&report, cli.json))
        }
        Command::Describe(args) => {
            let resources = Resources::locate(&cli.place.place()).await?;
            let report = describe::run(args, &resources).await?;
            Ok(answer(&report, cli.json))
        }
        Command::Overdue(args) => {
            let resources = Resources::locate(&cli.place.place()).await?;
            let report = overdue::run(args, &resources).await?;
            Ok(answer(&report, cli.json))
        }
        Command::Redrive(args) => {
            let resources = Resources::locate(&cli.place.place()).await?;
            let report = redrive::run(args, &resources).await?;
            Ok(answer(&report, cli.json))
        }
        Command::Verify(args) => {
            let resources = Resources::locate(&cli.place.place()).await?;
            let report = verify::run(args, &resources, !cli.json).await?;
            Ok(answer(&report, cli.json))
        }
        Command::Upgrade(args) => {
            let resources = Resources::locate(&cli.place.place()).await?;
            let report = upgrade::run(args, &resources).await?;
            Ok(answer(&report, cli.json))
        }
    }
}

fn answer<R: Report>(report: &R, json: bool) -> (String, u8) {
    let text = if json {
        serde_json::to_string_pretty(report).unwrap_or_default() + "\n"
    } else {
        render::terminal_safe(&report.human())
    };
    (text, if report.findings() { error::EXIT_FINDINGS } else { 0 })
}

pub use args::duration;
