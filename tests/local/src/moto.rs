//! A moto server on a free loopback port: the local AWS for tests and the
//! local main job (SPEC §10). Started from the project's pinned venv, waited
//! for until it answers, and stopped by its PID when dropped.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// The region of the local AWS.
pub const REGION: &str = "us-east-1";

/// The repository root, where `.venv` lives.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's Python, from `infra/scripts/venv.sh`, or `MOTO_PYTHON` when set.
pub fn python_path() -> PathBuf {
    std::env::var_os("MOTO_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"))
}

/// moto's server behind a lock, so each request is atomic as on AWS (see
/// the script's docstring).
pub fn launcher_path() -> PathBuf {
    repo_root().join("infra/python/moto_serial.py")
}

/// A free port on 127.0.0.1, as the OS hands it out.
pub fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// A running moto server. Dropping it kills the process.
pub struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    /// Starts moto on 127.0.0.1 and waits until it accepts connections.
    pub fn start() -> anyhow::Result<Self> {
        let path = python_path();
        if !path.exists() {
            bail!(
                "{} not found: run infra/scripts/venv.sh (the test and local scripts do) or set MOTO_PYTHON",
                path.display()
            );
        }
        // A port picked free can be taken before moto binds it: try a few.
        let mut last = None;
        for _ in 0..5 {
            let port = free_port()?;
            let child = Command::new(&path)
                .arg(launcher_path())
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", path.display()))?;
            let mut moto = Moto { child, port };
            match moto.wait_ready(Duration::from_secs(30)) {
                Ok(()) => return Ok(moto),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("moto did not start")))
    }

    fn wait_ready(&mut self, limit: Duration) -> anyhow::Result<()> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait()? {
                bail!("moto exited during start-up: {status}");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("moto did not answer on {addr} within {limit:?}")
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The endpoint for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Moves SQS's clock on the moto at `endpoint` (`http://127.0.0.1:<port>`)
/// forward by `seconds`: received messages become visible again, and
/// delayed ones deliverable, as that much time had passed on AWS
/// (`infra/python/moto_serial.py`). Only SQS's clock moves.
pub fn advance_sqs_clock(endpoint: &str, seconds: u32) -> anyhow::Result<()> {
    sqs_clock(endpoint, &format!("advance={seconds}")).map(|_| ())
}

/// How far SQS's clock on the moto at `endpoint` is ahead of the wall's,
/// in seconds.
pub fn sqs_clock_offset(endpoint: &str) -> anyhow::Result<f64> {
    sqs_clock(endpoint, "advance=0")
}

/// Puts SQS's clock on the moto at `endpoint` `seconds` ahead of the wall's
/// (back too, to where it was).
pub fn set_sqs_clock(endpoint: &str, seconds: f64) -> anyhow::Result<()> {
    sqs_clock(endpoint, &format!("set={seconds}")).map(|_| ())
}

/// One request to moto's SQS clock; its offset after it.
fn sqs_clock(endpoint: &str, query: &str) -> anyhow::Result<f64> {
    use std::io::{Read, Write};
    let address = endpoint
        .strip_prefix("http://")
        .with_context(|| format!("{endpoint} is not an http:// endpoint"))?;
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "POST /_local/sqs-clock?{query} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("moto's SQS clock answered {status}: {answer}");
    }
    // The JSON object of the body (which may come chunked).
    let body = match (answer.find('{'), answer.rfind('}')) {
        (Some(start), Some(end)) if start < end => &answer[start..=end],
        _ => bail!("moto's SQS clock said {answer}"),
    };
    let offset: serde_json::Value =
        serde_json::from_str(body).with_context(|| format!("moto's SQS clock said {body}"))?;
    offset["offset_seconds"]
        .as_f64()
        .with_context(|| format!("moto's SQS clock said {body}"))
}

/// Makes the next `count` plain writes (`PutItem`, `UpdateItem`,
/// `DeleteItem`) of partition `pk` on the moto at `endpoint` meet a
/// `TransactionConflictException`, nothing written, as a transaction
/// writing the item at that moment would (`infra/python/moto_serial.py`);
/// answers how many are armed, by partition.
pub fn arm_transaction_conflicts(endpoint: &str, pk: &str, count: u32) -> anyhow::Result<serde_json::Value> {
    local_request(
        endpoint,
        "/_local/dynamodb-conflict",
        &serde_json::json!({"pk": pk, "count": count}).to_string(),
    )
}

/// How many plain writes met an armed conflict since moto started.
pub fn transaction_conflicts_met(endpoint: &str) -> anyhow::Result<u64> {
    let met = local_request(endpoint, "/_local/dynamodb-conflict?met", "")?;
    met["met"]
        .as_u64()
        .with_context(|| format!("the conflicts met were {met}"))
}

/// The conflicts still armed, by partition.
pub fn armed_transaction_conflicts(endpoint: &str) -> anyhow::Result<serde_json::Value> {
    local_request(endpoint, "/_local/dynamodb-conflict", "")
}

/// Deletes what DynamoDB's TTL would have deleted from `table` by `now`
/// (Unix seconds): every item whose TTL attribute is before it, each a
/// delete with its stream record (moto_serial.py's `_expire`). How many.
pub fn expire_ttl(endpoint: &str, table: &str, now: i64) -> anyhow::Result<u64> {
    let answer = local_request(endpoint, &format!("/_local/dynamodb-ttl?now={now}&table={table}"), "{}")?;
    answer["deleted"]
        .as_u64()
        .with_context(|| format!("the TTL sweep answered {answer}"))
}

/// One request to a `/_local/` endpoint of moto_serial.py: a POST with
/// `body`, or a GET without one; its JSON answer.
fn local_request(endpoint: &str, path: &str, body: &str) -> anyhow::Result<serde_json::Value> {
    use std::io::{Read, Write};
    let address = endpoint
        .strip_prefix("http://")
        .with_context(|| format!("{endpoint} is not an http:// endpoint"))?;
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let method = if body.is_empty() { "GET" } else { "POST" };
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let status = answer.split_whitespace().nth(1).unwrap_or_default();
    if status != "200" {
        bail!("{path} answered {status}: {answer}");
    }
    let json = match (answer.find('{'), answer.rfind('}')) {
        (Some(start), Some(end)) if start < end => &answer[start..=end],
        _ => bail!("{path} said {answer}"),
    };
    serde_json::from_str(json).with_context(|| format!("{path} said {json}"))
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
