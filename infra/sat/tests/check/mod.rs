//! `sat check` as a connector author runs it, against the project's
//! fixture, the Python `mcp` SDK's server and server-everything.

use serde_json::{Value, json};

use crate::{fixture, sat};

fn declaration<'a>(report: &'a Value, prompt: &str) -> &'a Value {
    report["declarations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["prompt"] == prompt)
        .unwrap_or_else(|| panic!("{prompt} is not in {report}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_declaration_is_shown_as_the_task_it_becomes_or_refused_in_words() {
    let server = fixture().await;
    let ran = sat(&["check", &server.url(), "--server", "issues"]).await;
    assert_eq!(ran.status, 3, "a refused declaration is a finding: {ran:?}");
    let text = &ran.stdout;
    // The good one: its task, schedule in words, bounds, ceiling, fires.
    assert!(text.contains("weekly_summary: accepted"), "{text}");
    assert!(text.contains("at 09:00, on Monday to Friday (Europe/Berlin)"), "{text}");
    assert!(text.contains("cron(0 9 ? * 2-6 *) in Europe/Berlin"), "{text}");
    assert!(
        text.contains("at most USD 5.00 a month: up to 23 runs at USD 0.25, capped by the monthly budget"),
        "{text}"
    );
    assert!(text.contains("summary_channel"), "{text}");
    assert!(text.contains("team (required)"), "{text}");
    assert!(
        text.contains(" CET ") || text.contains(" CEST "),
        "local times beside UTC: {text}"
    );
    // The bad ones, each with reconcile's reason in words.
    assert!(
        text.contains(
            "`github.create_issue` is not one of this server's tools; a declaration names only its own server's tools"
        ),
        "{text}"
    );
    assert!(text.contains("max_turns"), "{text}");
    assert!(
        text.contains("only user and agent provenances may have event triggers"),
        "{text}"
    );
    assert!(text.contains("1 declaration would become a task"), "{text}");
    assert!(text.contains("3 refused"), "{text}");
    assert!(text.contains("not scheduled (plain)"), "{text}");
    // A loopback http:// URL is what a deployed reconcile refuses: said, not enforced.
    assert!(text.contains("a deployed reconcile would refuse this URL"), "{text}");

    let report = sat(&["--json", "check", &server.url(), "--server", "issues"])
        .await
        .json();
    let good = declaration(&report, "weekly_summary");
    assert_eq!(good["verdict"], "accepted");
    let task = &good["task"];
    assert_eq!(
        task["task_id"],
        shared::domain::task::TaskId::for_connector("sat-check", "issues", "weekly_summary").as_str()
    );
    assert_eq!(task["state"], "held");
    assert_eq!(task["hold"], json!(["awaiting_approval"]));
    assert_eq!(task["expression"], "cron(0 9 ? * 2-6 *)");
    assert_eq!(task["next_fires"].as_array().unwrap().len(), 5);
    assert_eq!(task["cost_ceiling"]["usd_per_month"], 5.0);
    assert_eq!(task["limits"]["max_turns"], 8);
    // The first spring-forward skip and fall-back repeat of the coming year
    // are none at 09:00 in Berlin.
    assert_eq!(task["dst"], json!([]));
    let foreign = declaration(&report, "foreign_tool");
    assert_eq!(foreign["verdict"], "refused");
    assert!(foreign["task"].is_null());
    let turns = declaration(&report, "too_many_turns");
    assert!(turns["refusal"].as_str().unwrap().contains("max_turns"), "{turns}");
    // The ceilings are the deployment's, not the schema's: the schema
    // holds it well-formed, reconcile refuses it.
    assert!(turns["schema_errors"].is_null(), "{turns}");
    // The published schema says where the marker breaks it.
    let event = declaration(&report, "on_event");
    let errors = event["schema_errors"].as_array().unwrap();
    assert!(
        errors.iter().any(|e| e.as_str().unwrap().contains("trigger")),
        "{event}"
    );
    assert_eq!(report["unmarked"], json!(["plain"]));
    assert_eq!(report["ceilings"]["max_turns"], 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_deployment_s_ceilings_decide_and_a_dry_run_renders_the_first_request() {
    let server = fixture().await;
    // Under lower ceilings the good declaration is refused too.
    let ceilings = r#"{"max_turns": 4, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#;
    let report = sat(&[
        "--json",
        "check",
        &server.url(),
        "--server",
        "issues",
        "--ceilings",
        ceilings,
    ])
    .await
    .json();
    assert_eq!(declaration(&report, "weekly_summary")["verdict"], "refused");

    // A required argument must be given, as an admin would at approval.
    let missing = sat(&[
        "check",
        &server.url(),
        "--server",
        "issues",
        "--dry-run",
        "weekly_summary",
    ])
    .await;
    assert_eq!(missing.status, 1, "{missing:?}");
    assert!(missing.stderr.contains("`team`"), "{missing:?}");
    let unknown = sat(&["check", &server.url(), "--server", "issues", "--dry-run", "no_such"]).await;
    assert_eq!(unknown.status, 1);
    assert!(unknown.stderr.contains("accepted: weekly_summary"), "{unknown:?}");

    let ran = sat(&[
        "--json",
        "check",
        &server.url(),
        "--server",
        "issues",
        "--dry-run",
        "weekly_summary",
        "--arg",
        "team=platform",
    ])
    .await;
    let dry = &ran.json()["dry_run"];
    let request = &dry["request"];
    assert_eq!(request["modelId"], sat::check::DEFAULT_MODEL_ID);
    assert_eq!(request["system"][0]["text"], shared::domain::run::agent::SYSTEM_PROMPT);
    assert_eq!(request["messages"][0]["role"], "user");
    assert!(
        request["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Summarise the open issues of platform."),
        "{request}"
    );
    let tools: Vec<&str> = request["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["issues__list_issues", "issues__post_summary"]);
    assert_eq!(request["inferenceConfig"]["maxTokens"], 4000);
    // The server saw one prompts/get with the value, and no tool call.
    let state = server.state().read().await;
    assert_eq!(
        state
            .prompt_gets
            .last()
            .map(|(p, a)| (p.as_str(), a.get("team").cloned())),
        Some(("weekly_summary", Some("platform".to_owned())))
    );
    assert!(state.calls.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_sdk_server_s_declaration_reads_the_same() {
    let server = local::python_mcp::PythonMcp::start().unwrap();
    let ran = sat(&["check", server.url()]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("python-digest"),
        "the server's own name: {}",
        ran.stdout
    );
    assert!(ran.stdout.contains("daily_digest: accepted"), "{}", ran.stdout);
    assert!(
        ran.stdout.contains("at 08:00, every day (Europe/Berlin)"),
        "{}",
        ran.stdout
    );
    let report = sat(&[
        "--json",
        "check",
        server.url(),
        "--dry-run",
        "daily_digest",
        "--arg",
        "topic=rust",
    ])
    .await
    .json();
    assert_eq!(report["protocol_version"], "2026-07-28");
    let text = report["dry_run"]["request"]["messages"][0]["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(text.contains("rust"), "{report}");
}

#[tokio::test(flavor = "multi_thread")]
async fn server_everything_declares_nothing_and_a_dead_server_is_a_clear_error() {
    let server = local::everything::ServerEverything::start().unwrap();
    let ran = sat(&["check", &server.url()]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    assert!(ran.stdout.contains("0 scheduled"), "{}", ran.stdout);
    assert!(ran.stdout.contains("nothing would be scheduled"), "{}", ran.stdout);
    assert!(ran.stdout.contains("MCP 2025-11-25"), "{}", ran.stdout);

    let port = local::moto::free_port().unwrap();
    let dead = sat(&["check", &format!("http://127.0.0.1:{port}/mcp")]).await;
    assert_eq!(dead.status, 1, "{dead:?}");
    assert!(
        dead.stderr.starts_with("sat: the connector at http://127.0.0.1:"),
        "{dead:?}"
    );
    let bad = sat(&["check", "ftp://example.com/mcp"]).await;
    assert_eq!(bad.status, 1, "{bad:?}");
    assert!(bad.stderr.contains("https://"), "{bad:?}");
}

/// A server that serves tools alone (no `prompts` capability, as most
/// MCP servers; asked anyway, it answers `-32601`): `sat check` exits 0,
/// says it declares nothing scheduled, and never asks it for prompts.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_serves_tools_alone_declares_nothing_and_exits_0() {
    use local::mcp_fixture::{FixtureState, McpFixture, tool};
    let server = McpFixture::start(FixtureState {
        tools: vec![tool("search")],
        tools_only: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let ran = sat(&["check", &server.url(), "--server", "search"]).await;
    assert_eq!(ran.status, 0, "{ran:?}");
    assert!(
        ran.stdout.contains("serves tools alone and declares nothing scheduled"),
        "{}",
        ran.stdout
    );
    assert_eq!(server.state().read().await.prompt_lists, 0, "never asked for prompts");
}

/// The official MCP conformance suite's `initialize` scenario with `sat
/// check` as the client command: the handshake passes, and the suite's
/// server, which declares no prompts, is read as declaring nothing.
#[test]
fn the_conformance_suites_initialize_scenario_passes_with_sat_check_as_its_client() {
    let command = format!("{} check", env!("CARGO_BIN_EXE_sat"));
    local::conformance::client_scenario("initialize", &command).unwrap();
}
