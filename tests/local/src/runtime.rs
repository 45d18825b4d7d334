//! A Lambda Runtime API emulator on loopback, and the function processes it
//! serves: the real binaries, started with nothing but their SPEC §9
//! variables, the SDK's endpoint variables and what Lambda itself sets.
//!
//! It implements the four Runtime API routes a runtime client uses
//! (`invocation/next`, `.../response`, `.../error`, `init/error`), one
//! invocation at a time per function, as Lambda does.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, anyhow, bail};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::{Mutex, mpsc, oneshot};

/// What an invocation ended with.
#[derive(Debug)]
pub enum Outcome {
    Response(Value),
    /// The function reported an error (a function error, as Lambda's
    /// `FunctionError` header would say).
    Error(Value),
}

struct Invocation {
    id: String,
    payload: Bytes,
    deadline_ms: u128,
    /// `Lambda-Runtime-Trace-Id`; `None`: a fresh root.
    trace: Option<String>,
}

struct Shared {
    function_name: String,
    /// When the function first asked for an invocation: its init is over.
    first_poll: std::sync::Mutex<Option<std::time::Instant>>,
    next: Mutex<mpsc::Receiver<Invocation>>,
    waiting: Mutex<HashMap<String, oneshot::Sender<Outcome>>>,
    init_error: Mutex<Option<Value>>,
}

/// The Runtime API of one function.
pub struct RuntimeApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    sender: mpsc::Sender<Invocation>,
    server: tokio::task::JoinHandle<()>,
    timeout: Duration,
}

async fn next(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    if let Ok(mut first) = shared.first_poll.lock() {
        first.get_or_insert_with(std::time::Instant::now);
    }
    let invocation = shared.next.lock().await.recv().await;
    let Some(invocation) = invocation else {
        return (StatusCode::GONE, HeaderMap::new(), Bytes::new());
    };
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(name, v);
        }
    };
    set("lambda-runtime-aws-request-id", invocation.id);
    set("lambda-runtime-deadline-ms", invocation.deadline_ms.to_string());
    set(
        "lambda-runtime-invoked-function-arn",
        format!(
            "arn:aws:lambda:us-east-1:123456789012:function:{}",
            shared.function_name
        ),
    );
    // The invocation's trace header, as Lambda passes it on: the runtime
    // sets `_X_AMZN_TRACE_ID` from it and the SDK sends it with each
    // request, so a message the function sends carries it (its lineage).
    set(
        "lambda-runtime-trace-id",
        invocation
            .trace
            .unwrap_or_else(|| "Root=1-00000000-000000000000000000000000;Sampled=0".to_owned()),
    );
    set("content-type", "application/json".to_owned());
    (StatusCode::OK, headers, invocation.payload)
}

fn parse(body: &Bytes) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

async fn respond(State(shared): State<Arc<Shared>>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    match shared.waiting.lock().await.remove(&id) {
        Some(tx) => {
            let _ = tx.send(Outcome::Response(parse(&body)));
            StatusCode::ACCEPTED
        }
        None => StatusCode::NOT_FOUND,
    }
}

async fn error(State(shared): State<Arc<Shared>>, UrlPath(id): UrlPath<String>, body: Bytes) -> StatusCode {
    match shared.waiting.lock().await.remove(&id) {
        Some(tx) => {
            let _ = tx.send(Outcome::Error(parse(&body)));
            StatusCode::ACCEPTED
        }
        None => StatusCode::NOT_FOUND,
    }
}

async fn init_error(State(shared): State<Arc<Shared>>, body: Bytes) -> StatusCode {
    *shared.init_error.lock().await = Some(parse(&body));
    StatusCode::ACCEPTED
}

impl RuntimeApi {
    /// Serves the Runtime API for `function_name` on a free loopback port.
    pub async fn start(function_name: &str, timeout: Duration) -> anyhow::Result<Self> {
        let (sender, receiver) = mpsc::channel(64);
        let shared = Arc::new(Shared {
            function_name: function_name.to_owned(),
            first_poll: std::sync::Mutex::new(None),
            next: Mutex::new(receiver),
            waiting: Mutex::default(),
            init_error: Mutex::default(),
        });
        let app = Router::new()
            .route("/2018-06-01/runtime/invocation/next", get(next))
            .route("/2018-06-01/runtime/invocation/{id}/response", post(respond))
            .route("/2018-06-01/runtime/invocation/{id}/error", post(error))
            .route("/2018-06-01/runtime/init/error", post(init_error))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            shared,
            sender,
            server,
            timeout,
        })
    }

    /// `host:port`, for `AWS_LAMBDA_RUNTIME_API`.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// When the function first polled for work (its init finished), once it has.
    pub fn first_poll(&self) -> Option<std::time::Instant> {
        self.shared.first_poll.lock().ok().and_then(|f| *f)
    }

    /// The error the function reported at start, if any.
    pub async fn init_error(&self) -> Option<Value> {
        self.shared.init_error.lock().await.clone()
    }

    /// Invokes the function with a payload and waits for its outcome.
    pub async fn invoke(&self, payload: &Value) -> anyhow::Result<Outcome> {
        self.invoke_text(&serde_json::to_string(payload)?).await
    }

    /// Invokes the function with a payload's exact text (which a `Value`
    /// could not carry: a repeated key, say) and waits for its outcome.
    pub async fn invoke_text(&self, payload: &str) -> anyhow::Result<Outcome> {
        self.invoker().invoke_text(payload).await
    }

    /// A handle that invokes this function from elsewhere (the local
    /// Lambda Invoke API, `crate::invoke`), while this API lives.
    pub fn invoker(&self) -> Invoker {
        Invoker {
            shared: self.shared.clone(),
            sender: self.sender.clone(),
            timeout: self.timeout,
        }
    }

    /// Invokes and expects a response, not a function error.
    pub async fn invoke_ok(&self, payload: &Value) -> anyhow::Result<Value> {
        self.invoke_ok_traced(payload, None).await
    }

    /// [`RuntimeApi::invoke_ok`] with the trace header Lambda would pass
    /// (`Lambda-Runtime-Trace-Id`; a lineage among its fields).
    pub async fn invoke_ok_traced(&self, payload: &Value, trace: Option<String>) -> anyhow::Result<Value> {
        match self
            .invoker()
            .invoke_traced(&serde_json::to_string(payload)?, trace)
            .await?
        {
            Outcome::Response(value) => Ok(value),
            Outcome::Error(error) => bail!("function error: {error}"),
        }
    }
}

/// Invokes one function through its [`RuntimeApi`].
#[derive(Clone)]
pub struct Invoker {
    shared: Arc<Shared>,
    sender: mpsc::Sender<Invocation>,
    timeout: Duration,
}

impl Invoker {
    /// The function's name.
    pub fn function_name(&self) -> &str {
        &self.shared.function_name
    }

    /// Invokes with a payload's exact text and waits for the outcome.
    pub async fn invoke_text(&self, payload: &str) -> anyhow::Result<Outcome> {
        self.invoke_traced(payload, None).await
    }

    /// [`Invoker::invoke_text`] with a trace header for the invocation.
    pub async fn invoke_traced(&self, payload: &str, trace: Option<String>) -> anyhow::Result<Outcome> {
        let id = uuid::Uuid::new_v4().to_string();
        let (tx, rx) = oneshot::channel();
        self.shared.waiting.lock().await.insert(id.clone(), tx);
        let deadline = SystemTime::now() + self.timeout;
        let deadline_ms = deadline.duration_since(UNIX_EPOCH)?.as_millis();
        self.sender
            .send(Invocation {
                id: id.clone(),
                payload: Bytes::from(payload.to_owned()),
                deadline_ms,
                trace,
            })
            .await
            .map_err(|_| anyhow!("the runtime API is closed"))?;
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(outcome)) => Ok(outcome),
            Ok(Err(_)) => bail!("invocation {id} was dropped"),
            Err(_) => {
                self.shared.waiting.lock().await.remove(&id);
                bail!("invocation {id} timed out after {:?}", self.timeout)
            }
        }
    }
}

impl Drop for RuntimeApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A function binary running against a [`RuntimeApi`]. Killed when dropped.
pub struct FunctionProcess {
    child: tokio::process::Child,
}

impl FunctionProcess {
    /// Starts `binary` with a cleared environment: only `env`, the Runtime
    /// API address and the variables Lambda itself provides. Its log lines go
    /// to `log` when given (tests read them), else to this process's stderr.
    pub fn spawn(
        binary: &Path,
        api: &RuntimeApi,
        name: &str,
        env: &[(String, String)],
        log: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let mut command = tokio::process::Command::new(binary);
        command
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", api.address())
            .env("AWS_LAMBDA_FUNCTION_NAME", name)
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_LOG_GROUP_NAME", format!("/aws/lambda/{name}"))
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "local")
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(path) = log {
            let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
            command.stdout(file.try_clone()?).stderr(file);
        }
        let child = command
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        Ok(Self { child })
    }

    /// Kills the process as a crash does (SIGKILL: no handler runs, nothing
    /// is flushed) and waits for it to end.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("killing the function's process")
    }

    /// The process id, to read its CPU time from `/proc`.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The most memory the process has held so far (`VmHWM`, Linux), in bytes.
    pub fn peak_rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    }

    /// User plus system CPU time the process has used so far (Linux).
    pub fn cpu_time(&self) -> Option<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid()?)).ok()?;
        // Fields after the command name (which may hold spaces) start after ')'.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        // Linux reports in clock ticks of 1/100 s (USER_HZ).
        Some(Duration::from_millis(ticks * 10))
    }

    /// Waits for the process to exit (it only does on a start-up failure).
    pub async fn wait_exit(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        Ok(tokio::time::timeout(limit, self.child.wait()).await??)
    }
}

/// The access key `function`'s process signs with locally: its template
/// resources' roles, which `infra/python/local_iam.py` holds its requests
/// to (the local reconcile process is both the intake and the worker).
pub fn role_key(function: &str) -> anyhow::Result<&'static str> {
    Ok(match function {
        "create" => "iam-CreateFunction",
        "runner" => "iam-RunnerFunction",
        "reconcile" => "iam-ReconcileFunction+WebhookFunction",
        "admin" => "iam-AdminFunction",
        "schedules" => "iam-SchedulesFunction",
        other => bail!("no function `{other}` in template.yaml"),
    })
}

/// The variables `template.yaml` sets on `function` (the function's
/// `VARIABLES` in `shared::config`, which `tests/suite/template.rs` holds
/// to the template) and the template's globals' endpoint partitions file
/// (`adapters::partitions`), plus `ALLOW_LOOPBACK_CONNECTORS`, which only
/// local runs set. Locally one reconcile process is both the webhook intake and
/// the worker, so it gets both functions' variables.
pub fn template_variables(function: &str) -> anyhow::Result<Vec<&'static str>> {
    use shared::config::{AdminConfig, CreateConfig, ReconcileConfig, RunnerConfig, SchedulesConfig};
    let mut names: Vec<&'static str> = match function {
        "create" => CreateConfig::VARIABLES.to_vec(),
        "runner" => RunnerConfig::VARIABLES.to_vec(),
        "reconcile" => [
            ReconcileConfig::VARIABLES.as_slice(),
            &ReconcileConfig::INTAKE_VARIABLES,
        ]
        .concat(),
        "admin" => AdminConfig::VARIABLES.to_vec(),
        "schedules" => SchedulesConfig::VARIABLES.to_vec(),
        other => bail!("no function `{other}` in template.yaml"),
    };
    names.push(shared::adapters::partitions::VARIABLE);
    names.push("ALLOW_LOOPBACK_CONNECTORS");
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// A function binary to start under its own [`RuntimeApi`], with the
/// environment the template gives it on this stack ([`template_variables`]
/// with their values from [`crate::stack::Stack::function_env`], and the SDK's
/// variables pointing at moto), and the caller's overrides on top.
pub struct Launch {
    name: String,
    env: Vec<(String, String)>,
    timeout: Duration,
    log: Option<std::path::PathBuf>,
}

impl Launch {
    /// `function` on the stack: its template variables that have a local
    /// value, no log file (lines go to this process's stderr), 60 seconds
    /// per invocation.
    pub fn new(function: &str, aws: &crate::aws::LocalAws, stack: &crate::stack::Stack) -> anyhow::Result<Self> {
        let names = template_variables(function)?;
        let mut env = aws.sdk_env();
        // Its role's key: moto_serial.py refuses what the role in
        // template.yaml does not allow (infra/python/local_iam.py).
        env.retain(|(k, _)| k != "AWS_ACCESS_KEY_ID");
        env.push(("AWS_ACCESS_KEY_ID".to_owned(), role_key(function)?.to_owned()));
        env.extend(
            stack
                .function_env()
                .into_iter()
                .filter(|(name, _)| names.contains(name))
                .map(|(name, value)| (name.to_owned(), value)),
        );
        Ok(Self {
            name: function.to_owned(),
            env,
            timeout: Duration::from_secs(60),
            log: None,
        })
    }

    /// Sets a variable, replacing the stack's value if it has one.
    pub fn set(mut self, name: &str, value: impl Into<String>) -> Self {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_owned(), value.into()));
        self
    }

    /// Sets every pair, as [`Launch::set`] does.
    pub fn set_all<K: AsRef<str>, V: Into<String>>(self, vars: impl IntoIterator<Item = (K, V)>) -> Self {
        vars.into_iter().fold(self, |launch, (k, v)| launch.set(k.as_ref(), v))
    }

    /// Points the function at a Converse endpoint (the stand-in) with one
    /// priced model: `MODEL_ID`, `MODEL_PRICES` (USD per million input and
    /// output tokens) and the SDK's `AWS_ENDPOINT_URL_BEDROCK_RUNTIME`.
    pub fn model(self, endpoint: &str, model_id: &str, input_per_mtok: f64, output_per_mtok: f64) -> Self {
        let prices =
            serde_json::json!({model_id: {"input_per_mtok": input_per_mtok, "output_per_mtok": output_per_mtok}});
        self.set("MODEL_ID", model_id)
            .set("MODEL_PRICES", prices.to_string())
            .set("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", endpoint)
    }

    /// Leaves a variable out (a start-up failure to see).
    pub fn unset(mut self, name: &str) -> Self {
        self.env.retain(|(k, _)| k != name);
        self
    }

    /// How long an invocation may take before the emulator gives up.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Writes the function's log lines to `path` (tests read them).
    pub fn log_to(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// Writes the log lines to a new file in `dir`, named after the function.
    pub fn log_in(self, dir: &Path) -> Self {
        let file = dir.join(format!("{}-{}.log", self.name, uuid::Uuid::new_v4().simple()));
        self.log_to(file)
    }

    /// The environment as it stands.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Starts the Runtime API and `binary` against it.
    pub async fn start(self, binary: &Path) -> anyhow::Result<Function> {
        let api = RuntimeApi::start(&self.name, self.timeout).await?;
        let process = FunctionProcess::spawn(binary, &api, &self.name, &self.env, self.log.as_deref())?;
        Ok(Function {
            api,
            process,
            log: self.log,
            env: self.env,
        })
    }
}

/// A started function: its Runtime API and its process (killed when dropped).
pub struct Function {
    pub api: RuntimeApi,
    pub process: FunctionProcess,
    /// Where its log lines go, when not to stderr.
    pub log: Option<std::path::PathBuf>,
    /// The environment it was started with.
    pub env: Vec<(String, String)>,
}

impl Function {
    /// Its log lines so far (empty without a log file).
    pub fn logs(&self) -> anyhow::Result<String> {
        match &self.log {
            Some(path) => std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display())),
            None => Ok(String::new()),
        }
    }
}

impl std::ops::Deref for Function {
    type Target = RuntimeApi;

    fn deref(&self) -> &RuntimeApi {
        &self.api
    }
}
