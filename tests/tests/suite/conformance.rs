//! The official MCP conformance suite against our MCP client
//! (`local::conformance`): each client scenario that applies to a client
//! like ours, with `mcp-conformance-client` (the shared adapter,
//! `tests/src/bin/mcp_conformance_client.rs`) as the client command.

/// Runs one client scenario with our client (`local::conformance`).
fn scenario(name: &str) {
    local::conformance::client_scenario(name, env!("CARGO_BIN_EXE_mcp-conformance-client")).unwrap();
}

/// The handshake: `server/discover`, answered with an empty result by the
/// suite's server, then `initialize` offering a version that has it.
#[test]
fn the_conformance_suites_initialize_scenario_passes() {
    scenario("initialize");
}

/// A tool called with its arguments, its result read.
#[test]
fn the_conformance_suites_tools_call_scenario_passes() {
    scenario("tools_call");
}

/// A tool call's answer stream closed after its priming event: the client
/// waits the event's `retry`, resumes with `Last-Event-ID`, and reads the
/// answer on the resumed stream.
#[test]
fn the_conformance_suites_sse_retry_scenario_passes() {
    scenario("sse-retry");
}
