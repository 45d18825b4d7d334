//! The function binaries themselves, under the Lambda Runtime API emulator
//! (`local::runtime`) against moto, the Converse stand-in and the rmcp
//! fixture: cold start (process start to the first answered invocation)
//! beside a bare `lambda_runtime` binary, instructions per invocation under
//! callgrind, and file sizes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::Utc;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::runtime::{FunctionProcess, Outcome, RuntimeApi};
use serde::Serialize;
use serde_json::{Value, json};

use crate::{RunStack, installed, reminder, run_message};

/// The functions of `template.yaml`, and the baseline.
pub const FUNCTIONS: [&str; 5] = ["create", "runner", "reconcile", "admin", "schedules"];
pub const BARE: &str = "bare_lambda";

/// The local stack the binaries run against, and their environment.
pub struct Bench {
    pub s: RunStack,
    pub fixture: McpFixture,
    pub env: Vec<(String, String)>,
    pub logs: PathBuf,
}

impl Bench {
    pub async fn start(logs: PathBuf) -> anyhow::Result<Self> {
        let s = RunStack::start().await?;
        let fixture = McpFixture::start(FixtureState {
            prompts: vec![scheduled_prompt(
                "weekly_summary",
                json!({"version": 1, "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
                       "tools": ["list_issues"],
                       "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
                &[("repo", true)],
                "Summarise the week's issues in {{repo}}.",
            )],
            tools: vec![tool("list_issues"), tool("post_summary")],
            ..Default::default()
        })
        .await?;
        let mut env = s.t.aws.sdk_env();
        env.extend(s.t.stack.function_env().into_iter().map(|(k, v)| (k.to_owned(), v)));
        env.extend(
            [
                ("AGENT_SCHEDULE_API_ENABLED", "true".to_owned()),
                ("AGENT_SCHEDULE_WORKER_ENABLED", "true".to_owned()),
                (
                    "SCHEDULE_CEILINGS",
                    serde_json::to_string(&shared::domain::task::limits::EXAMPLE_CEILINGS)?,
                ),
                ("MODEL_ID", crate::MODEL.to_owned()),
                (
                    "MODEL_PRICES",
                    json!({crate::MODEL: {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}).to_string(),
                ),
                ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", s.model.endpoint()),
                ("RUST_LOG", "warn".to_owned()),
            ]
            .map(|(k, v)| (k.to_owned(), v)),
        );
        std::fs::create_dir_all(&logs)?;
        Ok(Self { s, fixture, env, logs })
    }
}

// ---- Cold start ---------------------------------------------------------------------

/// A function as `template.yaml` deploys it: its binary, the variables its
/// deployment leaves out, and the invocation its cold start answers.
struct Deployed {
    label: &'static str,
    binary: &'static str,
    unset: &'static [&'static str],
    invocation: &'static str,
}

/// Reconcile is one binary deployed twice: the worker (`SCHEDULE_GROUP`,
/// no webhook secret) and the webhook intake (`WEBHOOK_SECRET_ARN`, whose
/// read starts with the process and which the first webhook waits for,
/// and no worker variables).
const DEPLOYED: [Deployed; 7] = [
    Deployed {
        label: BARE,
        binary: BARE,
        unset: &[],
        invocation: "an echo",
    },
    Deployed {
        label: "create",
        binary: "create",
        unset: &[],
        invocation: "create a reminder",
    },
    Deployed {
        label: "runner",
        binary: "runner",
        unset: &[],
        invocation: "run a reminder (one model turn)",
    },
    Deployed {
        label: "reconcile (worker)",
        binary: "reconcile",
        unset: &["WEBHOOK_SECRET_ARN"],
        invocation: "reconcile pass, unchanged install",
    },
    Deployed {
        label: "reconcile (intake)",
        binary: "reconcile",
        unset: &["SCHEDULE_GROUP"],
        invocation: "a signed webhook, queued",
    },
    Deployed {
        label: "admin",
        binary: "admin",
        unset: &[],
        invocation: "admin list",
    },
    Deployed {
        label: "schedules",
        binary: "schedules",
        unset: &[],
        invocation: "an owner's list",
    },
];

#[derive(Debug, Clone, Serialize)]
pub struct ColdStart {
    pub function: String,
    pub invocation: String,
    /// Process start to its first answered invocation, median over the
    /// starts: the cold start. Work moved from init to the first request
    /// stays in it.
    pub median_ms: f64,
    pub starts_ms: Vec<f64>,
    /// `median_ms` over the bare binary's in the same run.
    pub ratio: f64,
    /// Process start to its first `invocation/next` (init alone), median.
    pub init_ms: f64,
    /// The same invocation answered by the warm process right after,
    /// median: what the services it calls (moto, the stand-ins) take.
    pub warm_ms: f64,
    /// The first answer less the warm one, median over the starts: what
    /// the cold process adds (init, and every first-use cost the first
    /// request pays), without the services' time for the requests the warm
    /// answer makes too (the intake's secret read stays in).
    pub cold_extra_ms: f64,
    /// `cold_extra_ms` over the bare binary's in the same run.
    pub cold_extra_ratio: f64,
    /// `cold_extra_ratio` in each run of the bench (`--runs`), the first
    /// (this row's) included.
    pub run_ratios: Vec<f64>,
}

/// The first run's rows, each with every run's ratio (`--runs`): one run's
/// median moves by a few tenths of a millisecond from run to run, so
/// whether a function holds the goal is read over all of them.
pub fn over_runs(runs: Vec<Vec<ColdStart>>) -> Vec<ColdStart> {
    let mut runs = runs.into_iter();
    let Some(mut first) = runs.next() else {
        return Vec::new();
    };
    for run in runs {
        for (row, later) in first.iter_mut().zip(run) {
            row.run_ratios.push(later.cold_extra_ratio);
        }
    }
    first
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// A Lambda cold start finds its `/tmp` empty, where every local process
/// shares the machine's one: the endpoint partitions file each function
/// writes at start (ARCHITECTURE, "Start") goes to a folder made for this
/// start alone, so the start creates it as in Lambda rather than replacing
/// the one an earlier start left (infra/FIDELITY.md). The folder, and the
/// variable naming the file in it.
fn empty_tmp() -> anyhow::Result<(tempfile::TempDir, (String, String))> {
    let tmp = tempfile::tempdir()?;
    let file = tmp.path().join(shared::adapters::partitions::FILE_NAME);
    Ok((
        tmp,
        (
            shared::adapters::partitions::VARIABLE.to_owned(),
            file.display().to_string(),
        ),
    ))
}

/// One start: (init, first answer, warm answer).
async fn start_once(
    bench: &Bench,
    dir: &Path,
    deployed: &Deployed,
    first: &Value,
    warm: &Value,
) -> anyhow::Result<(f64, f64, f64)> {
    let name = deployed.binary;
    let api = RuntimeApi::start(name, Duration::from_secs(60)).await?;
    let binary = dir.join(name);
    let log = bench
        .logs
        .join(format!("cold-{}.log", deployed.label.replace([' ', '(', ')'], "")));
    let (_tmp, partitions) = empty_tmp()?;
    let mut env: Vec<(String, String)> = bench
        .env
        .iter()
        .filter(|(k, _)| !deployed.unset.contains(&k.as_str()) && *k != partitions.0)
        .cloned()
        .collect();
    env.push(partitions);
    let started = Instant::now();
    let _process = FunctionProcess::spawn(&binary, &api, name, &env, Some(&log))?;
    // Queued before the process polls: it is handed over at the first poll.
    let answer = match tokio::time::timeout(Duration::from_secs(60), api.invoke(first)).await {
        Ok(answer) => answer?,
        Err(_) => match api.init_error().await {
            Some(error) => bail!("{} failed its init: {error}", deployed.label),
            None => bail!("{} did not answer", deployed.label),
        },
    };
    let answered = started.elapsed();
    match answer {
        Outcome::Response(answer) => check(deployed.label, &answer)?,
        Outcome::Error(error) => bail!("{} failed its first invocation: {error}", deployed.label),
    }
    let init = api.first_poll().context("answered without polling")? - started;
    let again = Instant::now();
    match api.invoke(warm).await? {
        Outcome::Response(answer) => check(deployed.label, &answer)?,
        Outcome::Error(error) => bail!("{} failed a warm invocation: {error}", deployed.label),
    }
    Ok((ms(init), ms(answered), ms(again.elapsed())))
}

/// The workspace the create and runner starts write their reminders in:
/// not the admin's (`ws_1`, the install and its connector task), so the
/// admin's list answers the same few tasks in every round rather than a
/// list that grows with the other functions' rounds.
const PEOPLE: &str = "ws_people";

/// A due reminder in [`PEOPLE`].
fn person_reminder(at: chrono::DateTime<Utc>, n: usize) -> shared::domain::task::Task {
    let mut task = reminder(at);
    task.workspace = PEOPLE.to_owned();
    task.task_id = shared::domain::task::TaskId::for_reminder(PEOPLE, "usr_123", &format!("bench-cold-{n}"));
    task
}

/// Each deployment's invocations: two for each start (the first answer,
/// then a warm one), each able to succeed in its turn.
async fn cold_payloads(bench: &Bench, deployed: &Deployed, n: usize) -> anyhow::Result<Vec<Value>> {
    let now = Utc::now();
    Ok(match deployed.label {
        BARE => (0..n).map(|i| json!({"echo": i})).collect(),
        "create" => (0..n)
            .map(|i| {
                let mut request = crate::create_request(
                    &format!("bench-cold-{}-{i}", uuid::Uuid::new_v4()),
                    now,
                    chrono::Duration::hours(1),
                );
                request["principal"]["workspace"] = json!(PEOPLE);
                request
            })
            .collect(),
        "runner" => {
            let mut runs = Vec::new();
            for i in 0..n {
                let at = now - chrono::Duration::seconds(5 + i as i64);
                let task = person_reminder(at, i);
                bench.s.store().insert_task(&task).await?;
                runs.push(sqs_event(&[(
                    format!("c{i}"),
                    run_message(&task, at, &format!("cold-{i}")),
                    "",
                )]));
            }
            runs
        }
        "reconcile (worker)" => {
            let pass =
                json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
            (0..n)
                .map(|i| sqs_event(&[(format!("cw{i}"), pass.clone(), "ws_1/ins_1")]))
                .collect()
        }
        "reconcile (intake)" => {
            let secret = shared::domain::connector::webhook::WebhookSecret::parse(&bench.s.t.stack.webhook_secret)
                .context("the stack's webhook secret")?;
            let body =
                json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
            (0..n)
                .map(|_| {
                    let id = format!("wh_{}", uuid::Uuid::new_v4().simple());
                    let at = Utc::now().timestamp();
                    json!({
                        "version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
                        "headers": {"content-type": "application/json", "webhook-id": id,
                                    "webhook-timestamp": at.to_string(),
                                    "webhook-signature": secret.sign(&id, at, body.as_bytes())},
                        "requestContext": {"accountId": "anonymous", "apiId": "local", "domainName": "localhost",
                                           "domainPrefix": "local", "requestId": id, "routeKey": "$default",
                                           "stage": "$default", "time": "", "timeEpoch": at * 1000,
                                           "http": {"method": "POST", "path": "/", "protocol": "HTTP/1.1",
                                                    "sourceIp": "127.0.0.1", "userAgent": "platform"}},
                        "body": body, "isBase64Encoded": false
                    })
                })
                .collect()
        }
        "admin" => (0..n)
            .map(|_| json!({"op": "list", "principal": crate::admin_principal()}))
            .collect(),
        "schedules" => (0..n)
            .map(|_| json!({"op": "list", "principal": crate::owner("u_bench")}))
            .collect(),
        other => bail!("no invocation for {other}"),
    })
}

/// `starts` rounds, each starting the bare binary and every deployment
/// once, so load on the machine falls on all of them alike.
pub async fn cold_starts(bench: &Bench, dir: &Path, starts: usize) -> anyhow::Result<Vec<ColdStart>> {
    bench
        .s
        .t
        .reconciler()
        .apply(
            &installed("ins_1", "issues", &bench.fixture.url(), "workspace"),
            Utc::now(),
        )
        .await?;
    let mut payloads = Vec::new();
    for deployed in &DEPLOYED {
        payloads.push(cold_payloads(bench, deployed, 2 * starts).await?);
    }
    let mut times: Vec<Vec<(f64, f64, f64)>> = vec![Vec::new(); DEPLOYED.len()];
    for round in 0..starts {
        for (k, deployed) in DEPLOYED.iter().enumerate() {
            let (first, warm) = (&payloads[k][2 * round], &payloads[k][2 * round + 1]);
            times[k].push(start_once(bench, dir, deployed, first, warm).await?);
        }
    }
    let column = |t: &[(f64, f64, f64)], f: fn(&(f64, f64, f64)) -> f64| median(&t.iter().map(f).collect::<Vec<_>>());
    let bare = column(&times[0], |t| t.1);
    let bare_extra = column(&times[0], |t| t.1 - t.2);
    Ok(DEPLOYED
        .iter()
        .zip(times)
        .map(|(deployed, t)| {
            let median_ms = column(&t, |t| t.1);
            let cold_extra_ms = column(&t, |t| t.1 - t.2);
            let cold_extra_ratio = if bare_extra > 0.0 {
                cold_extra_ms / bare_extra
            } else {
                0.0
            };
            ColdStart {
                function: deployed.label.to_owned(),
                invocation: deployed.invocation.to_owned(),
                median_ms,
                ratio: if bare > 0.0 { median_ms / bare } else { 0.0 },
                init_ms: column(&t, |t| t.0),
                warm_ms: column(&t, |t| t.2),
                cold_extra_ms,
                cold_extra_ratio,
                run_ratios: vec![cold_extra_ratio],
                starts_ms: t.iter().map(|t| t.1).collect(),
            }
        })
        .collect())
}

// ---- Instructions ------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct Instructions {
    pub function: String,
    /// What one invocation does.
    pub invocation: String,
    pub invocations: usize,
    /// (instructions with N invocations - with none) / N.
    pub per_invocation: u64,
    /// Instructions of the process that served none (its init and exit).
    pub init_and_exit: u64,
    /// The five functions with the most instructions of their own per
    /// invocation (self cost, not inclusive), with that count.
    pub top: Vec<(String, u64)>,
}

/// Runs `binary` under callgrind, serves it `payloads`, then ends it with
/// SIGTERM (callgrind writes its profile on a fatal signal).
async fn callgrind(bench: &Bench, binary: &Path, name: &str, payloads: &[Value], out: &Path) -> anyhow::Result<()> {
    // valgrind runs the code about 50 times slower: long limits.
    let api = RuntimeApi::start(name, Duration::from_secs(600)).await?;
    let (_tmp, partitions) = empty_tmp()?;
    let log = std::fs::File::create(bench.logs.join(format!("callgrind-{name}-{}.log", payloads.len())))?;
    let mut child = tokio::process::Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(binary)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("AWS_LAMBDA_RUNTIME_API", api.address())
        .env("AWS_LAMBDA_FUNCTION_NAME", name)
        .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
        .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
        .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
        .envs(bench.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env(&partitions.0, &partitions.1)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting valgrind")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    while api.first_poll().is_none() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "{name} under callgrind did not poll for work"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for payload in payloads {
        match api.invoke(payload).await? {
            Outcome::Response(answer) => check(name, &answer)?,
            Outcome::Error(error) => bail!("{name} failed an invocation: {error}"),
        }
    }
    // Let it finish the invocation's tail (drops, the next poll) as the
    // baseline's process finishes its init's.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pid = child.id().context("valgrind exited early")?;
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "could not signal {pid}");
    tokio::time::timeout(Duration::from_secs(300), child.wait()).await??;
    anyhow::ensure!(out.exists(), "callgrind wrote no profile for {name}");
    Ok(())
}

/// Each invocation must have done its work, or its instructions mean nothing.
fn check(name: &str, answer: &Value) -> anyhow::Result<()> {
    let failed = answer
        .get("batchItemFailures")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let refused = answer.get("ok").is_some_and(|ok| ok != true);
    anyhow::ensure!(!failed && !refused, "{name} answered {answer}");
    Ok(())
}

/// Self instructions per function, from `callgrind_annotate`'s function
/// table (`--auto=no`: without the annotated source, whose `=>` lines are
/// calls' inclusive costs, not a function's own).
fn functions(out: &Path) -> anyhow::Result<(u64, HashMap<String, u64>)> {
    let text = std::process::Command::new("callgrind_annotate")
        .args(["--inclusive=no", "--threshold=100", "--auto=no"])
        .arg(out)
        .output()
        .context("running callgrind_annotate")?;
    let text = String::from_utf8_lossy(&text.stdout);
    let mut total = 0;
    let mut by_function = HashMap::new();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(count) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        // "(12.34%)  file:function [object]"
        let rest = rest.trim_start();
        let rest = rest.split_once(')').map_or(rest, |(_, r)| r).trim();
        if rest.starts_with("=>") {
            continue;
        }
        if rest == "PROGRAM TOTALS" {
            total = count;
            continue;
        }
        let name = function_name(rest);
        *by_function.entry(name).or_insert(0) += count;
    }
    Ok((total, by_function))
}

/// `file:function [object]` -> `function`, without its symbol hash.
fn function_name(entry: &str) -> String {
    let entry = entry.rsplit_once(" [").map_or(entry, |(e, _)| e);
    let bytes = entry.as_bytes();
    let split = (0..bytes.len())
        .find(|&i| bytes[i] == b':' && bytes.get(i + 1) != Some(&b':') && (i == 0 || bytes[i - 1] != b':'));
    let name = split.map_or(entry, |i| &entry[i + 1..]);
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => head.to_owned(),
        _ => name.to_owned(),
    }
}

async fn profile(
    bench: &Bench,
    dir: &Path,
    name: &str,
    invocation: &str,
    payloads: Vec<Value>,
) -> anyhow::Result<Instructions> {
    let binary = dir.join(name);
    let none = bench.logs.join(format!("callgrind.{name}.0.out"));
    let some = bench.logs.join(format!("callgrind.{name}.{}.out", payloads.len()));
    for file in [&none, &some] {
        let _ = std::fs::remove_file(file);
    }
    callgrind(bench, &binary, name, &[], &none).await?;
    callgrind(bench, &binary, name, &payloads, &some).await?;
    let (base, base_functions) = functions(&none)?;
    let (total, mut by_function) = functions(&some)?;
    let n = payloads.len().max(1) as u64;
    for (function, count) in base_functions {
        if let Some(c) = by_function.get_mut(&function) {
            *c = c.saturating_sub(count);
        }
    }
    let mut top: Vec<(String, u64)> = by_function.into_iter().map(|(f, c)| (f, c / n)).collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    top.truncate(5);
    Ok(Instructions {
        function: name.to_owned(),
        invocation: invocation.to_owned(),
        invocations: payloads.len(),
        per_invocation: total.saturating_sub(base) / n,
        init_and_exit: base,
        top,
    })
}

fn sqs_event(records: &[(String, String, &str)]) -> Value {
    let records: Vec<Value> = records
        .iter()
        .map(|(id, body, group)| {
            json!({
                "messageId": id, "receiptHandle": format!("rh-{id}"), "body": body,
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1767225600000",
                               "SenderId": "scheduler", "ApproximateFirstReceiveTimestamp": "1767225600000",
                               "MessageGroupId": group},
                "messageAttributes": {}, "md5OfBody": "", "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:queue", "awsRegion": "us-east-1"
            })
        })
        .collect();
    json!({"Records": records})
}

/// Instructions per create, per run (a reminder, one model turn) and per
/// reconcile pass (an install whose declarations did not change).
pub async fn instructions(bench: &Bench, dir: &Path, n: usize) -> anyhow::Result<Vec<Instructions>> {
    let now = Utc::now();
    let creates = (0..n)
        .map(|i| crate::create_request(&format!("bench-cg-{i}"), now, chrono::Duration::hours(1)))
        .collect();
    let mut runs = Vec::new();
    for i in 0..n {
        let at = now - chrono::Duration::seconds(5 + i as i64);
        let task = reminder(at);
        bench.s.store().insert_task(&task).await?;
        runs.push(sqs_event(&[(
            format!("m{i}"),
            run_message(&task, at, &format!("cg-{i}")),
            "",
        )]));
    }
    bench
        .s
        .t
        .reconciler()
        .apply(
            &installed("ins_1", "issues", &bench.fixture.url(), "workspace"),
            Utc::now(),
        )
        .await?;
    let pass = json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
    let passes = (0..n)
        .map(|i| sqs_event(&[(format!("w{i}"), pass.clone(), "ws_1/ins_1")]))
        .collect();
    Ok(vec![
        profile(bench, dir, "create", "create a reminder", creates).await?,
        profile(bench, dir, "runner", "run a reminder (one model turn)", runs).await?,
        profile(bench, dir, "reconcile", "reconcile pass, unchanged install", passes).await?,
    ])
}

// ---- Size --------------------------------------------------------------------------

#[derive(Debug, Clone, Serialize)]
pub struct Size {
    pub function: String,
    pub bytes: u64,
}

/// Each function's binary in `dir`: `<dir>/<name>` (cargo's layout) or
/// `<dir>/<name>/bootstrap` (cargo-lambda's, what Lambda runs).
pub fn sizes(dir: &Path) -> anyhow::Result<Vec<Size>> {
    FUNCTIONS
        .iter()
        .map(|name| {
            let bootstrap = dir.join(name).join("bootstrap");
            let path = if bootstrap.is_file() { bootstrap } else { dir.join(name) };
            let bytes = std::fs::metadata(&path)
                .with_context(|| format!("{} is not built", path.display()))?
                .len();
            Ok(Size {
                function: (*name).to_owned(),
                bytes,
            })
        })
        .collect()
}
