//! The seeded fault simulation (`infra/scripts/sim.sh`, `tests::sim`):
//! runs the seeds of a range, each on its own local stack, prints one
//! table, and exits non-zero when a check found a violation. One seed
//! (`--seeds 17..17`) also prints its fault schedule.
//!
//! `sim [--seeds A..B] [--size N] [--per-task M] [--concurrency K] [--parallel P] [--schedule] [--tamper]`
//!
//! `--parallel` runs that many seeds at once (each its own moto);
//! `--tamper` deletes a run record and overcharges an account behind the
//! runner's back before the checks, to see them fail.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use anyhow::Context;
use tests::sim::{SimConfig, run};

const USAGE: &str = "sim [--seeds A..B] [--size N] [--per-task M] [--concurrency K] [--parallel P] [--schedule] [--tamper]\n\nThe seeded fault simulation (infra/scripts/sim.sh): each seed on its own local stack; one table; non-zero when a check found a violation.";

fn parse(args: &[String]) -> anyhow::Result<SimConfig> {
    let mut config = SimConfig::default();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        if flag == "--schedule" {
            config.print_schedule = true;
            continue;
        }
        if flag == "--tamper" {
            config.tamper = true;
            continue;
        }
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        let number =
            || -> anyhow::Result<usize> { value.parse().with_context(|| format!("{flag} takes a whole number")) };
        match flag.as_str() {
            "--seeds" => {
                let (a, b) = value
                    .split_once("..")
                    .with_context(|| "--seeds takes a range A..B (inclusive)")?;
                config.first_seed = a.parse().context("--seeds: the first seed")?;
                config.last_seed = b.parse().context("--seeds: the last seed")?;
                anyhow::ensure!(config.first_seed <= config.last_seed, "--seeds: an empty range");
            }
            "--size" => config.size = number()?,
            "--per-task" => config.per_task = number()?,
            "--concurrency" => config.concurrency = number()?,
            "--parallel" => config.parallel = number()?,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    if config.first_seed == config.last_seed {
        config.print_schedule = true;
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tests::answer_help(USAGE);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = parse(&args)?;
    eprintln!(
        "sim: seeds {}..{}, {} occurrences each, on moto, the rmcp fixture and the Converse stand-in (not Bedrock)",
        config.first_seed, config.last_seed, config.size
    );
    let report = run(&config).await?;
    println!("{}", report.table());
    if report.violation_count() == 0 {
        println!("every check held");
        Ok(())
    } else {
        print!("{}", report.details());
        println!(
            "replay a failing seed with: infra/scripts/sim.sh --seeds N..N --size {}",
            config.size
        );
        std::process::exit(1);
    }
}
