//! A year of a workspace (`infra/scripts/year.sh`, `tests::year`): every
//! hour of every day from each month's sixth, an hour of minutes a month,
//! and the rest as the suite's shortened year. Prints one table; with
//! `--doc` writes it into docs/benchmarks.md (its `year` section), stamped
//! with the command, the commit, the day and the machine. Exits non-zero
//! when anything that must hold did not (the error names it).
//!
//! `year [--short] [--doc]`

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use anyhow::Context;
use tests::year::{YearConfig, run};

const USAGE: &str = "year [--short] [--doc]\n\nA year of a workspace on a virtual clock (infra/scripts/year.sh): one table; non-zero when anything that must hold did not.";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tests::answer_help(USAGE);
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(other) = args.iter().find(|a| *a != "--short" && *a != "--doc") {
        anyhow::bail!("unknown flag {other}\n\n{USAGE}");
    }
    let config = if args.iter().any(|a| a == "--short") {
        YearConfig::SHORT
    } else {
        YearConfig::FULL
    };
    eprintln!("year: {config:?} on moto, the rmcp fixture and the Converse stand-in");
    let report = run(config).await?;
    println!("{}", report.table());
    if args.iter().any(|a| a == "--doc") {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/benchmarks.md");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let stamp = format!(
            "*Written by `infra/scripts/year.sh {}` at commit `{}` on {}, {}.*",
            args.join(" "),
            tests::bench::commit(),
            chrono::Utc::now().format("%Y-%m-%d"),
            tests::bench::machine(),
        );
        let body = format!("{stamp}\n\n| | |\n|---|---:|\n{}", report.table());
        std::fs::write(&path, tests::bench::splice(&text, "year", &body)?)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("year: wrote the table into {}", path.display());
    }
    Ok(())
}
