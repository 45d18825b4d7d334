//! A connector server written with the Python `mcp` SDK
//! (`infra/python/scheduled_prompts_server.py`), on loopback: a third-party
//! implementation of the scheduled-prompts marker.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

use crate::moto::{python_path, repo_root};

pub struct PythonMcp {
    child: Child,
    url: String,
}

impl PythonMcp {
    /// Starts the server on a port the OS picks and waits for its
    /// `READY <url>` line.
    pub fn start() -> anyhow::Result<Self> {
        let script = repo_root().join("infra/python/scheduled_prompts_server.py");
        let mut child = Command::new(python_path())
            .arg(&script)
            .arg("0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", script.display()))?;
        let stdout = child.stdout.take().context("server stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(url) = line.strip_prefix("READY ") {
                    let _ = tx.send(url.to_owned());
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => Ok(Self { child, url }),
            Err(_) => {
                let _ = child.kill();
                bail!("the Python MCP server did not become ready")
            }
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for PythonMcp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
