//! The herd (`infra/scripts/herd.sh`): connector tasks all due at one
//! instant against a model quota per minute, on a compressed clock
//! (`tests::herd`). Prints one table; exits non-zero when an invariant
//! fails (a run failed, ran twice, or an occurrence was missed).
//!
//! `herd [--tasks N] [--reminders M] [--rpm R] [--pace P] [--compression C] [--concurrency K] [--batch B] [--duplicate-every D]`
//! (`--reminders`: another workspace's one-time reminders due at the same instant)
//! (`--pace`: the runner's model pace, requests per minute; R unless given, 0 for none)

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use anyhow::Context;
use tests::herd::{HerdConfig, run};

const USAGE: &str = "herd [--tasks N] [--reminders M] [--rpm R] [--pace P] [--compression C] [--concurrency K] [--batch B] [--duplicate-every D]\n\nThe herd (infra/scripts/herd.sh): connector tasks due at one instant against a model quota, on a compressed clock; one table; non-zero when an invariant fails.";

fn parse(args: &[String]) -> anyhow::Result<HerdConfig> {
    let mut config = HerdConfig::default();
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let number: usize = args
            .next()
            .with_context(|| format!("{flag} needs a value"))?
            .parse()
            .with_context(|| format!("{flag} takes a whole number"))?;
        match flag.as_str() {
            "--tasks" => config.tasks = number,
            "--reminders" => config.reminders = number,
            "--rpm" => config.rpm = number,
            "--pace" => config.pace = Some(number),
            "--compression" => config.compression = u32::try_from(number)?,
            "--concurrency" => config.concurrency = number,
            "--batch" => config.batch = number,
            "--duplicate-every" => config.duplicate_every = number,
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(config)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tests::answer_help(USAGE);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = parse(&args)?;
    eprintln!(
        "herd: {} connector tasks and another workspace's {} reminders due at one instant, the Converse stand-in (not Bedrock) limited to {} requests per simulated minute, the runner's pace {}, clock compressed {}x",
        config.tasks,
        config.reminders,
        config.rpm,
        match config.pace_rpm() {
            0 => "off".to_owned(),
            p => format!("{p} requests per simulated minute"),
        },
        config.compression
    );
    let report = run(config).await?;
    println!("{}", report.table());
    let violations = report.violations();
    if violations.is_empty() {
        println!("every invariant held");
        Ok(())
    } else {
        for v in &violations {
            println!("VIOLATION: {v}");
        }
        std::process::exit(1);
    }
}
