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

use anyhow::Context as _;
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
    /// How many times the cold starts are measured (each `starts` rounds):
    /// the table gives the first run and every run's ratio.
    pub runs: usize,
    /// Only these sections (`requests`, `passes`, `caching`, `cold`,
    /// `instructions`, `sizes`; `binaries` is the last three); all when
    /// empty.
    pub only: Vec<String>,
    /// docs/benchmarks.md, whose marked sections the measured ones replace.
    pub doc: Option<PathBuf>,
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
    /// The commit measured (`git describe --always --dirty`), and the day.
    pub commit: String,
    pub date: String,
    /// What `bench.sh` was asked (`--invocations`, `--starts`, `--runs`), for the stamps.
    pub invocations: usize,
    pub starts: usize,
    pub runs: usize,
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

/// The commit of the working tree measured, `-dirty` when it has changes
/// not committed (a figure of those names no commit that reproduces it);
/// docs/benchmarks.md itself, which the bench writes, does not count.
pub fn commit() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    let Some(head) = git(&["rev-parse", "--short=7", "HEAD"]) else {
        return "unknown".to_owned();
    };
    let changes = git(&[
        "status",
        "--porcelain",
        "--untracked-files=no",
        "--",
        ".",
        ":(exclude)docs/benchmarks.md",
    ]);
    match changes {
        Some(changes) if changes.is_empty() => head,
        _ => format!("{head}-dirty"),
    }
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
            let bench = binaries::Bench::start(logs).await?;
            let mut runs = Vec::new();
            for run in 1..=options.runs.max(1) {
                eprintln!(
                    "bench: cold starts, run {run} of {} ({} starts of each) ...",
                    options.runs.max(1),
                    options.starts
                );
                runs.push(binaries::cold_starts(&bench, &options.functions, options.starts).await?);
            }
            cold_start = binaries::over_runs(runs);
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
        commit: commit(),
        date: chrono::Utc::now().format("%Y-%m-%d").to_string(),
        invocations: options.invocations,
        starts: options.starts,
        runs: options.runs.max(1),
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

/// The sections of docs/benchmarks.md that `bench --doc` writes, each
/// between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, in this order.
pub const SECTIONS: [&str; 6] = ["requests", "passes", "caching", "cold", "instructions", "sizes"];

/// The cold-start goal: a function's cold start less its warm answer at
/// most this many times the bare binary's (ARCHITECTURE, "Start").
pub const COLD_GOAL: f64 = 3.0;

/// The size bound per binary, MB (ARCHITECTURE, "Start").
pub const SIZE_BOUND_MB: f64 = 10.0;

/// The report as docs/benchmarks.md's tables, for the terminal.
pub fn markdown(report: &Report) -> String {
    let mut out = format!("Machine: {}. Commit {}.\n", report.machine, report.commit);
    for (_, table) in sections(report) {
        let _ = write!(out, "\n{table}");
    }
    for skipped in &report.skipped {
        let _ = writeln!(out, "\nNot measured: {skipped}.");
    }
    out
}

/// Where each measured section's figures came from: the command, the
/// commit, the day and the machine.
fn stamp(report: &Report, section: &str) -> String {
    let options = match section {
        "cold" if report.runs > 1 => format!(" --starts {} --runs {}", report.starts, report.runs),
        "cold" => format!(" --starts {}", report.starts),
        "instructions" => format!(" --invocations {}", report.invocations),
        _ => String::new(),
    };
    format!(
        "*Written by `infra/scripts/bench.sh --only {section}{options}` at commit `{}` on {}, {}.*\n",
        report.commit, report.date, report.machine
    )
}

/// Replaces what stands between `section`'s markers in `doc` with `body`;
/// an error when the markers are missing or out of order, so a section is
/// never appended where no reader looks.
pub fn splice(doc: &str, section: &str, body: &str) -> anyhow::Result<String> {
    let open = format!("<!-- bench:{section} -->");
    let close = format!("<!-- /bench:{section} -->");
    let start = doc.find(&open).with_context(|| format!("no {open} in the document"))? + open.len();
    let end = doc[start..]
        .find(&close)
        .with_context(|| format!("no {close} after {open}"))?
        + start;
    Ok(format!("{}\n{}\n{}", &doc[..start], body.trim_end(), &doc[end..]))
}

/// Writes each measured section of `report` into `doc` (docs/benchmarks.md),
/// stamped; the sections not measured keep what they had, with their own
/// stamps.
pub fn write_doc(report: &Report, doc: &std::path::Path) -> anyhow::Result<()> {
    let mut text = std::fs::read_to_string(doc).with_context(|| format!("reading {}", doc.display()))?;
    for (section, table) in sections(report) {
        text = splice(&text, section, &format!("{}\n{table}", stamp(report, section)))?;
    }
    std::fs::write(doc, text).with_context(|| format!("writing {}", doc.display()))
}

/// Each measured section's table, by its name in [`SECTIONS`].
pub fn sections(report: &Report) -> Vec<(&'static str, String)> {
    let mut sections = Vec::new();
    if !report.requests.is_empty() {
        let mut out = String::from("| Operation | DynamoDB requests | Outcome |\n|---|---:|---|\n");
        for r in &report.requests {
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                r.operation,
                r.dynamodb,
                r.outcome.replace('|', "/")
            );
        }
        sections.push(("requests", out));
    }
    if !report.passes.is_empty() {
        let mut out = String::from(
            "| Pass invocation | Items | Invocations (whole pass) | DynamoDB each | Scheduler each | SQS messages each | ms each, mean (max) |\n|---|---:|---:|---:|---:|---:|---:|\n",
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
        sections.push(("passes", out));
    }
    if !report.caching.is_empty() {
        let mut out = String::from(
            "| Six-turn run, prompt ~3,000 tokens | Cache minimum | Input / cache write / cache read tokens | Billed input, cached | Same tokens uncached | Ratio |\n|---|---:|---:|---:|---:|---:|\n",
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
        sections.push(("caching", out));
    }
    if !report.cold_start.is_empty() {
        let bare = report.cold_start.iter().find(|c| c.function == binaries::BARE);
        let bare_ms = bare.map_or(0.0, |c| c.median_ms);
        let bare_extra = bare.map_or(0.0, |c| c.cold_extra_ms);
        let runs = report.runs;
        let mut out = format!(
            "| Function | First invocation | Cold start, median (ms) | Ratio to bare ({bare_ms:.1} ms) | Init alone (ms) | Same invocation warm (ms) | Cold start less warm (ms) | Ratio to bare's ({bare_extra:.1} ms) | That ratio, lowest to highest of {runs} runs | Within {COLD_GOAL} times in every run |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n"
        );
        for c in report.cold_start.iter().filter(|c| c.function != binaries::BARE) {
            let (lowest, highest) = c
                .run_ratios
                .iter()
                .fold((f64::INFINITY, 0.0_f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let _ = writeln!(
                out,
                "| {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} to {:.2} | {} |",
                c.function,
                c.invocation,
                c.median_ms,
                c.ratio,
                c.init_ms,
                c.warm_ms,
                c.cold_extra_ms,
                c.cold_extra_ratio,
                lowest,
                highest,
                if highest <= COLD_GOAL { "yes" } else { "**no**" }
            );
        }
        sections.push(("cold", out));
    }
    if !report.instructions.is_empty() {
        let mut out = String::from(
            "| Invocation | Start and exit, no invocation | Instructions each | Top five functions (self instructions each) |\n|---|---:|---:|---|\n",
        );
        for i in &report.instructions {
            let top: Vec<String> = i
                .top
                .iter()
                .map(|(f, c)| format!("`{}` {}", f.replace('|', "/"), millions(*c)))
                .collect();
            let _ = writeln!(
                out,
                "| {} ({}) | {} | {} | {} |",
                i.invocation,
                i.function,
                millions(i.init_and_exit),
                millions(i.per_invocation),
                top.join("; ")
            );
        }
        sections.push(("instructions", out));
    }
    if !report.sizes.is_empty() {
        let mut out = format!(
            "| Function | Size, {} (MB) | Within {SIZE_BOUND_MB} MB |\n|---|---:|---|\n",
            report.size_arch
        );
        for s in &report.sizes {
            let mb = s.bytes as f64 / 1e6;
            let within = if mb <= SIZE_BOUND_MB { "yes" } else { "**no**" };
            let _ = writeln!(out, "| {} | {mb:.2} | {within} |", s.function);
        }
        sections.push(("sizes", out));
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_is_replaced_between_its_markers_and_nothing_else_moves() {
        let doc = "intro\n<!-- bench:cold -->\nold table\n<!-- /bench:cold -->\nafter\n<!-- bench:sizes -->\nkept\n<!-- /bench:sizes -->\n";
        let out = splice(doc, "cold", "new table\n").unwrap();
        assert_eq!(
            out,
            "intro\n<!-- bench:cold -->\nnew table\n<!-- /bench:cold -->\nafter\n<!-- bench:sizes -->\nkept\n<!-- /bench:sizes -->\n"
        );
        assert_eq!(
            splice(&out, "cold", "new table").unwrap(),
            out,
            "writing the same twice changes nothing"
        );
    }

    #[test]
    fn a_section_without_its_markers_is_an_error_not_an_append() {
        assert!(splice("no markers", "cold", "t").is_err());
        assert!(splice("<!-- /bench:cold --> <!-- bench:cold -->", "cold", "t").is_err());
    }
}
