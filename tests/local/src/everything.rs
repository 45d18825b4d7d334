//! `@modelcontextprotocol/server-everything`, the MCP reference server, on
//! loopback: a third-party peer for `prompts/get` interop and its error
//! codes. Installed by `infra/scripts/test.sh` from `infra/node` (pinned,
//! with its lock file); bound to 127.0.0.1 by the preload in
//! `infra/node/bind-localhost.cjs`, since the server itself listens on every
//! interface.

use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::moto::{free_port, repo_root};

pub struct ServerEverything {
    child: Child,
    port: u16,
}

impl ServerEverything {
    pub fn start() -> anyhow::Result<Self> {
        let node_dir = repo_root().join("infra/node");
        let entry = node_dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        if !entry.exists() {
            bail!(
                "{} not found: run `npm ci` in infra/node (infra/scripts/test.sh does)",
                entry.display()
            );
        }
        let port = free_port()?;
        let child = Command::new("node")
            .arg("--require")
            .arg(node_dir.join("bind-localhost.cjs"))
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting server-everything with node")?;
        let mut server = Self { child, port };
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Some(status) = server.child.try_wait()? {
                bail!("server-everything exited during start-up: {status}");
            }
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        bail!("server-everything did not listen on {addr}")
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }
}

impl Drop for ServerEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
