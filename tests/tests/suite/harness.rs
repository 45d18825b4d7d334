//! The harness binaries (`tests/src/bin`) as a person meets them.

use std::process::Command;

/// Every harness binary answers `--help` with its usage, before anything
/// starts.
#[test]
fn every_harness_binary_answers_help() {
    for (name, binary) in [
        ("sim", env!("CARGO_BIN_EXE_sim")),
        ("herd", env!("CARGO_BIN_EXE_herd")),
        ("bench", env!("CARGO_BIN_EXE_bench")),
        ("mcp-conformance-client", env!("CARGO_BIN_EXE_mcp-conformance-client")),
    ] {
        let out = Command::new(binary).arg("--help").output().unwrap();
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {out:?}");
        assert!(said.starts_with(name), "{name}: {said}");
    }
}
