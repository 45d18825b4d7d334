//! The benchmarks of `infra/scripts/bench.sh`: measured and reported, never
//! asserted (docs/benchmarks.md). DynamoDB requests per operation come
//! from the store adapter's counter with the use cases in process
//! ([`requests`]); the daily pass per invocation, requests and time
//! ([`pass`]); cold start, instructions and size from the release function
//! binaries ([`binaries`]).

pub mod binaries;
pub mod caching;
pub mod pass;
pub mod requests;

use std::fmt::Write as _;
use std::path::PathBuf;

use serde::Serialize;

/// What to measure, from the command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// The function binaries built with symbols (`--profile bench-sym`),
    /// and `bare_lambda`, for cold start and callgrind.
    pub functions: PathBuf,
    /// The release binaries whose sizes are reported, and their arch.
    pub sizes: PathBuf,
    pub arch: String,
    pub out: PathBuf,
    pub invocations: usize,
    pub starts: usize,
    /// Only these sections (`requests`, `passes`, `caching`, `cold`,
    /// `instructions`, `sizes`; `binaries` is the last three); all when
    /// empty.
    pub only: Vec<String>,
}

impl Options {
    fn wants(&self, section: &str) -> bool {
        let binaries = ["cold", "instructions", "sizes"].contains(&section);
        self.only.is_empty() || self.only.iter().any(|s| s == section || (binaries && s == "binaries"))
    }
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub machine: String,
    pub requests: Vec<requests::Requests>,
    /// The daily pass: requests and time per invocation.
    pub passes: Vec<pass::PassRow>,
    /// A six-turn run's billed input with and without prompt caching.
    pub caching: Vec<caching::CacheRow>,
    /// Process start to the first answered invocation, beside the bare binary.
    pub cold_start: Vec<binaries::ColdStart>,
    pub instructions: Vec<binaries::Instructions>,
    pub size_arch: String,
    pub sizes: Vec<binaries::Size>,
    /// Sections not measured, and why.
    pub skipped: Vec<String>,
}

/// The machine, as `/proc` names it: CPU model, cores, memory.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .and_then(|r| r.split_once(':'))
                .map(|(_, m)| m.trim())
        })
        .unwrap_or("unknown CPU");
    let cores = cpuinfo.lines().filter(|l| l.starts_with("processor")).count();
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map(|kib| kib / 1_048_576.0)
        .unwrap_or_default();
    format!(
        "{model}, {cores} cores, {memory_gib:.0} GiB, {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

pub async fn run(options: &Options) -> anyhow::Result<Report> {
    let mut skipped = Vec::new();
    let requests = if options.wants("requests") {
        eprintln!("bench: DynamoDB requests per operation ...");
        requests::measure().await?
    } else {
        skipped.push("requests per operation: not asked for (--only)".to_owned());
        Vec::new()
    };
    let passes = if options.wants("passes") {
        pass::measure().await?
    } else {
        skipped.push("the daily pass per invocation: not asked for (--only)".to_owned());
        Vec::new()
    };
    let caching = if options.wants("caching") {
        caching::measure().await?
    } else {
        skipped.push("prompt caching: not asked for (--only)".to_owned());
        Vec::new()
    };
    let built = |dir: &std::path::Path, names: &[&str]| names.iter().all(|n| dir.join(n).exists());
    let mut names: Vec<&str> = binaries::FUNCTIONS.to_vec();
    names.push(binaries::BARE);
    let mut cold_start = Vec::new();
    let mut instructions = Vec::new();
    if !options.wants("cold") && !options.wants("instructions") {
        skipped.push("cold start and instructions: not asked for (--only)".to_owned());
    } else if !built(&options.functions, &names) {
        skipped.push(format!(
            "cold start and instructions: the binaries are not built in {}",
            options.functions.display()
        ));
    } else {
        // Each section on a stack of its own: what one writes (moto's query
        // time grows with the table) does not weigh on the other.
        let logs = options.out.with_file_name("bench-logs");
        if options.wants("instructions") {
            eprintln!(
                "bench: instructions under callgrind ({} invocations each; slow) ...",
                options.invocations
            );
            let bench = binaries::Bench::start(logs.clone()).await?;
            instructions = binaries::instructions(&bench, &options.functions, options.invocations).await?;
        }
        if options.wants("cold") {
            eprintln!("bench: cold starts ({} starts of each) ...", options.starts);
            let bench = binaries::Bench::start(logs).await?;
            cold_start = binaries::cold_starts(&bench, &options.functions, options.starts).await?;
        }
    }
    let sizes = if !options.wants("sizes") {
        skipped.push("sizes: not asked for (--only)".to_owned());
        Vec::new()
    } else if built(&options.sizes, &binaries::FUNCTIONS) {
        binaries::sizes(&options.sizes)?
    } else {
        skipped.push(format!(
            "sizes: the binaries are not built in {}",
            options.sizes.display()
        ));
        Vec::new()
    };
    Ok(Report {
        machine: machine(),
        requests,
        passes,
        caching,
        cold_start,
        instructions,
        size_arch: options.arch.clone(),
        sizes,
        skipped,
    })
}

fn millions(n: u64) -> String {
    format!("{:.2} M", n as f64 / 1e6)
}

/// The report as docs/benchmarks.md's tables.
pub fn markdown(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Machine: {}.", report.machine);
    if !report.requests.is_empty() {
        let _ = writeln!(out, "\n| Operation | DynamoDB requests | Outcome |\n|---|---:|---|");
        for r in &report.requests {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                r.operation,
                r.dynamodb,
                r.outcome.replace('|', "/")
            );
        }
    }
    if !report.passes.is_empty() {
        let _ = writeln!(
            out,
            "\n| Pass invocation | Items | Invocations (whole pass) | DynamoDB each | Scheduler each | SQS messages each | ms each, mean (max) |\n|---|---:|---:|---:|---:|---:|---:|"
        );
        for p in &report.passes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.0} ({:.0}) |",
                p.pass, p.items, p.invocations, p.dynamodb, p.scheduler, p.sqs_messages, p.ms_mean, p.ms_max
            );
        }
        for p in &report.passes {
            let _ = writeln!(out, "\n{}: {} ({} measured).", p.pass, p.note, p.measured);
        }
    }
    if !report.caching.is_empty() {
        let _ = writeln!(
            out,
            "\n| Six-turn run, prompt ~3,000 tokens | Cache minimum | Input / cache write / cache read tokens | Billed input, cached | Same tokens uncached | Ratio |\n|---|---:|---:|---:|---:|---:|"
        );
        for c in &report.caching {
            let _ = writeln!(
                out,
                "| {} | {} | {} / {} / {} | ${:.5} | ${:.5} | {:.2} |",
                c.model,
                c.cache_minimum,
                c.input_tokens,
                c.cache_write_tokens,
                c.cache_read_tokens,
                c.input_usd_cached,
                c.input_usd_uncached,
                c.ratio
            );
        }
    }
    if !report.cold_start.is_empty() {
        let bare = report
            .cold_start
            .iter()
            .find(|c| c.function == binaries::BARE)
            .map_or(0.0, |c| c.median_ms);
        let bare_extra = report
            .cold_start
            .iter()
            .find(|c| c.function == binaries::BARE)
            .map_or(0.0, |c| c.cold_extra_ms);
        let _ = writeln!(
            out,
            "\n| Function | First invocation | Cold start, median (ms) | Ratio to bare ({bare:.1} ms) | Init alone (ms) | Same invocation warm (ms) | Cold start less warm (ms) | Ratio to bare's ({bare_extra:.1} ms) |\n|---|---|---:|---:|---:|---:|---:|---:|"
        );
        for c in report.cold_start.iter().filter(|c| c.function != binaries::BARE) {
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} |",
                c.function,
                c.invocation,
                c.median_ms,
                c.ratio,
                c.init_ms,
                c.warm_ms,
                c.cold_extra_ms,
                c.cold_extra_ratio
            );
        }
    }
    if !report.instructions.is_empty() {
        let _ = writeln!(
            out,
            "\n| Invocation | Instructions each | Top five functions (self instructions each) |\n|---|---:|---|"
        );
        for i in &report.instructions {
            let top: Vec<String> = i
                .top
                .iter()
                .map(|(f, c)| format!("`{}` {}", f.replace('|', "/"), millions(*c)))
                .collect();
            let _ = writeln!(
                out,
                "| {} ({}) | {} | {} |",
                i.invocation,
                i.function,
                millions(i.per_invocation),
                top.join("; ")
            );
        }
    }
    if !report.sizes.is_empty() {
        let _ = writeln!(out, "\n| Function | Size, {} (MB) |\n|---|---:|", report.size_arch);
        for s in &report.sizes {
            let _ = writeln!(out, "| {} | {:.2} |", s.function, s.bytes as f64 / 1e6);
        }
    }
    for skipped in &report.skipped {
        let _ = writeln!(out, "\nNot measured: {skipped}.");
    }
    out
}
