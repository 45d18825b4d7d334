//! Benchmarks of the function binaries, measured, never asserted: binary
//! size, init time (process start to its first Runtime API poll), and CPU
//! time per invocation of create and per run of the runner, against moto and
//! the Converse stand-in on this machine. DynamoDB requests per run are held
//! by the tests (`tests/tests/suite/runner.rs` counts them).
//!
//! `infra/scripts/bench.sh` builds release binaries and runs this.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::{SecondsFormat, Utc};
use local::LocalAws;
use local::converse::ConverseStandIn;
use local::dispatcher::Dispatcher;
use local::runtime::{FunctionProcess, RuntimeApi};
use serde_json::json;

const RUNS: usize = 40;

struct Measured {
    name: &'static str,
    api: RuntimeApi,
    process: FunctionProcess,
    init: Duration,
    size: u64,
}

async fn start(name: &'static str, env: &[(String, String)]) -> anyhow::Result<Measured> {
    let path: PathBuf = std::env::current_exe()?.with_file_name(name);
    let size = std::fs::metadata(&path)
        .with_context(|| format!("{} is not built", path.display()))?
        .len();
    let api = RuntimeApi::start(name, Duration::from_secs(60)).await?;
    let started = Instant::now();
    let process = FunctionProcess::spawn(
        &path,
        &api,
        name,
        env,
        Some(&std::env::temp_dir().join(format!("bench-{name}.log"))),
    )?;
    let deadline = started + Duration::from_secs(30);
    let init = loop {
        if let Some(first) = api.first_poll() {
            break first - started;
        }
        anyhow::ensure!(Instant::now() < deadline, "{name} did not poll for work");
        tokio::time::sleep(Duration::from_millis(2)).await;
    };
    Ok(Measured {
        name,
        api,
        process,
        init,
        size,
    })
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (aws, stack) = LocalAws::with_stack("bench").await?;
    let model = ConverseStandIn::start().await?;
    let mut env = aws.sdk_env();
    env.extend(stack.function_env().into_iter().map(|(k, v)| (k.to_owned(), v)));
    env.extend(
        [
            ("AGENT_SCHEDULE_API_ENABLED", "true".to_owned()),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "true".to_owned()),
            (
                "SCHEDULE_CEILINGS",
                r#"{"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#
                    .to_owned(),
            ),
            ("MODEL_ID", "bench.model".to_owned()),
            (
                "MODEL_PRICES",
                r#"{"bench.model": {"input_per_mtok": 1.0, "output_per_mtok": 5.0}}"#.to_owned(),
            ),
            ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", model.endpoint()),
            ("RUST_LOG", "warn".to_owned()),
        ]
        .map(|(k, v)| (k.to_owned(), v)),
    );
    let create = start("create", &env).await?;
    let runner = start("runner", &env).await?;
    let reconcile = start("reconcile", &env).await?;
    let admin = start("admin", &env).await?;

    // create: RUNS reminders due two seconds from now.
    let cpu_before = create.process.cpu_time().unwrap_or_default();
    let now = Utc::now();
    for i in 0..RUNS {
        let answer = create
            .api
            .invoke_ok(&json!({
                "op": "create",
                "principal": {"id": "usr_bench", "workspace": "ws_bench", "scopes": ["schedule.write"]},
                "idempotency_key": format!("bench-{i}"),
                "agent": {"id": "agt", "version": "1", "policy_profile": "standard"},
                "approval": {"id": "apr", "approved_at": now.to_rfc3339_opts(SecondsFormat::Secs, true)},
                "input": {"title": "bench", "instruction": "Say hello.",
                          "at": (now + chrono::Duration::seconds(2)).to_rfc3339_opts(SecondsFormat::Secs, true)}
            }))
            .await?;
        anyhow::ensure!(answer["ok"] == true, "create refused: {answer}");
    }
    let create_cpu = create.process.cpu_time().unwrap_or_default().saturating_sub(cpu_before);

    // runner: the RUNS occurrences, delivered as Scheduler and SQS would.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let dispatch = Dispatcher {
        sdk: &aws.sdk,
        stack: &stack,
        runner: &runner.api,
        reconcile: &reconcile.api,
    };
    let fired = dispatch.fire_due(Utc::now()).await?.len();
    let cpu_before = runner.process.cpu_time().unwrap_or_default();
    let wall = Instant::now();
    dispatch.drain_runs().await?;
    let run_wall = wall.elapsed();
    let runner_cpu = runner.process.cpu_time().unwrap_or_default().saturating_sub(cpu_before);

    println!(
        "Function binaries ({}), against moto and the Converse stand-in on this machine:",
        std::env::current_exe()?
            .parent()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    );
    println!("{:<10} {:>12} {:>12}", "function", "size (MiB)", "init (ms)");
    for f in [&create, &runner, &reconcile, &admin] {
        println!(
            "{:<10} {:>12.1} {:>12.1}",
            f.name,
            f.size as f64 / 1_048_576.0,
            f.init.as_secs_f64() * 1000.0
        );
    }
    println!(
        "create: {RUNS} reminders, CPU {:.2} ms per invocation",
        create_cpu.as_secs_f64() * 1000.0 / RUNS as f64
    );
    println!(
        "runner: {fired} runs (one model turn each), CPU {:.2} ms per run, {:.1} ms wall per run through moto",
        runner_cpu.as_secs_f64() * 1000.0 / fired.max(1) as f64,
        run_wall.as_secs_f64() * 1000.0 / fired.max(1) as f64
    );
    println!("(CPU from /proc in 10 ms ticks: a figure per run is meaningful over many runs only.)");
    Ok(())
}
