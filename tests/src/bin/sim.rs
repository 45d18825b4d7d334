//! The seeded fault simulation (`infra/scripts/sim.sh`, `tests::sim`):
//! runs the seeds of a range, each on its own local stack, prints one
//! table, and exits non-zero when a check found a violation. One seed
//! (`--seeds 17..17`) also prints its fault schedule.
//!
//! `sim [--seeds A..B] [--size N] [--per-task M] [--concurrency K] [--parallel P] [--schedule] [--tamper] [--doc]`
//!
//! `--doc` writes the table into docs/benchmarks.md (its `sim` section),
//! stamped with the command, the commit, the day and the machine.
//! `--parallel` runs that many seeds at once (each its own moto);
//! `--tamper` deletes a run record and overcharges an account behind the
//! runner's back before the checks, to see them fail.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use anyhow::Context;
use tests::sim::{SimConfig, run};

const USAGE: &str = "sim [--seeds A..B] [--size N] [--per-task M] [--concurrency K] [--parallel P] [--schedule] [--tamper] [--doc]\n\nThe seeded fault simulation (infra/scripts/sim.sh): each seed on its own local stack; one table; non-zero when a check found a violation.";

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
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let doc = args.iter().any(|a| a == "--doc");
    args.retain(|a| a != "--doc");
    let config = parse(&args)?;
    eprintln!(
        "sim: seeds {}..{}, {} occurrences each, on moto, the rmcp fixture and the Converse stand-in (not Bedrock)",
        config.first_seed, config.last_seed, config.size
    );
    let report = run(&config).await?;
    println!("{}", report.table());
    if doc {
        write_doc(&args, &report)?;
    }
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

/// Writes `report`'s table into docs/benchmarks.md's `sim` section, stamped.
fn write_doc(args: &[String], report: &tests::sim::SimReport) -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let stamp = format!(
        "*Written by `infra/scripts/sim.sh {} --doc` at commit `{}` on {}, {}, in {:.0} s.*",
        args.join(" "),
        tests::bench::commit(),
        chrono::Utc::now().format("%Y-%m-%d"),
        tests::bench::machine(),
        report.real_seconds
    );
    let body = format!("{stamp}\n\n| | |\n|---|---:|\n{}", report.table());
    let text = tests::bench::splice(&text, "sim", &body)?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("sim: wrote the table into {}", path.display());
    Ok(())
}
