//! The benchmarks (`infra/scripts/bench.sh`; `tests::bench`): prints
//! docs/benchmarks.md's tables and writes them as JSON. Reports; asserts nothing.
//!
//! `bench --functions DIR --sizes DIR --arch NAME [--out FILE] [--doc FILE] [--invocations N]
//! [--starts K] [--runs R] [--only requests,passes,caching,cold,instructions,sizes]` (`binaries`: the
//! last three). `--doc` writes each measured section into that file
//! (docs/benchmarks.md), stamped with the command, commit and machine.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use std::path::PathBuf;

use anyhow::Context;
use tests::bench::{Options, markdown, run};

const USAGE: &str = "bench --functions DIR --sizes DIR --arch NAME [--out FILE] [--doc FILE] [--invocations N] [--starts K] [--runs R] [--only requests,passes,caching,cold,instructions,sizes]\n\nThe benchmarks (infra/scripts/bench.sh): prints the tables of docs/benchmarks.md, writes them as JSON, and with --doc into that file's marked sections, stamped with the command, commit and machine.";

fn parse(args: &[String]) -> anyhow::Result<Options> {
    let mut options = Options {
        functions: PathBuf::from("target/bench-sym"),
        sizes: PathBuf::from("target/release"),
        arch: std::env::consts::ARCH.to_owned(),
        out: PathBuf::from("target/bench.json"),
        invocations: 5,
        starts: 31,
        runs: 1,
        only: Vec::new(),
        doc: None,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let value = args.next().with_context(|| format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<usize>()
                .with_context(|| format!("{flag} takes a whole number"))
        };
        match flag.as_str() {
            "--functions" => options.functions = value.into(),
            "--sizes" => options.sizes = value.into(),
            "--arch" => options.arch.clone_from(value),
            "--out" => options.out = value.into(),
            "--doc" => options.doc = Some(value.into()),
            "--invocations" => options.invocations = number()?,
            "--starts" => options.starts = number()?,
            "--runs" => options.runs = number()?,
            "--only" => options.only = value.split(',').map(str::to_owned).collect(),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(options)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tests::answer_help(USAGE);
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = parse(&args)?;
    let report = run(&options).await?;
    std::fs::write(&options.out, serde_json::to_string_pretty(&report)?)
        .with_context(|| format!("writing {}", options.out.display()))?;
    println!("{}", markdown(&report));
    eprintln!("bench: wrote {}", options.out.display());
    if let Some(doc) = &options.doc {
        tests::bench::write_doc(&report, doc)?;
        eprintln!("bench: wrote the measured sections of {}", doc.display());
    }
    Ok(())
}
