//! `prompts/get` against a third-party MCP server: the reference
//! `server-everything` (npm), through the runner's real MCP client.

use chrono::{Duration, Utc};
use local::everything::ServerEverything;
use shared::adapters::mcp::McpConnectors;
use shared::app::run::Disposition;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::claim::RunStatus;
use shared::domain::task::install::InstallScope;
use shared::ports::McpSession;
use tests::{RunStack, connector_task, install, run_message};

/// The runners' and reconcile's client, on a loopback server.
async fn open_on_loopback(url: &str) -> shared::adapters::mcp::McpClient {
    McpConnectors::open(
        url,
        None,
        shared::domain::connector::endpoint::EndpointPolicy { allow_loopback: true },
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_negotiates_and_reads_prompts_and_errors() {
    let server = ServerEverything::start().unwrap();
    let client = open_on_loopback(&server.url()).await;
    assert_eq!(
        client.protocol_version().as_deref(),
        Some("2025-11-25"),
        "fell back from 2026-07-28"
    );
    let prompts = client.raw_prompts().await.unwrap();
    assert!(prompts.iter().any(|p| p.name == "args-prompt"));

    let ok = client
        .get_prompt("args-prompt", &[("city".to_owned(), "Berlin".to_owned())].into())
        .await
        .unwrap();
    assert!(ok.iter().any(|m| m.text().contains("Berlin")), "{ok:?}");
    let missing = client.get_prompt("args-prompt", &Default::default()).await.unwrap_err();
    assert_eq!(missing.code, Some(-32602), "{missing}");
    let unknown = client
        .get_prompt("no-such-prompt", &Default::default())
        .await
        .unwrap_err();
    assert_eq!(unknown.code, Some(-32602), "{unknown}");
    let tools = client.list_tools(None).await.unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_against_server_everything_fails_cleanly_on_a_missing_argument() {
    let server = ServerEverything::start().unwrap();
    let s = RunStack::start().await.unwrap();
    s.store()
        .put_install(&install("ins_1", "everything", &server.url(), InstallScope::Workspace))
        .await
        .unwrap();
    let good = connector_task("everything", "args-prompt", &["echo"], &[("city", "Berlin")]);
    let bad = connector_task(
        "everything",
        "completable-prompt",
        &["echo"],
        &[("department", "Sales")],
    );
    s.insert(&good).await;
    s.insert(&bad).await;
    let at = Utc::now() - Duration::seconds(5);
    let deadline = Utc::now() + Duration::minutes(5);
    let runner = s.runner();

    assert_eq!(
        runner
            .deliver("m1", &run_message(&good, at, "e1"), Utc::now(), deadline)
            .await
            .unwrap(),
        Disposition::Ran(RunStatus::Succeeded)
    );
    let first = &s.model.requests().await[0].1;
    assert!(
        first["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("Berlin")
    );

    assert_eq!(
        runner
            .deliver("m2", &run_message(&bad, at, "e2"), Utc::now(), deadline)
            .await
            .unwrap(),
        Disposition::Ran(RunStatus::Failed)
    );
    let record = s.run_record(&bad.task_id, &occurrence_key(at)).await.unwrap();
    assert!(record["reason"].as_str().unwrap().contains("-32602"), "{record}");
    assert!(s.task_item(&bad).await.get("hold").is_none());
}

/// A server written by hand that answers `server/discover` (a method it
/// does not know) with an empty result, as the MCP conformance suite's
/// server does: the client connects with `initialize` instead, and reads
/// its prompts. Before, the connect failed and such an install never
/// reconciled.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_answering_unknown_methods_with_an_empty_result_is_read_after_initialize() {
    let server = local::handwritten::Handwritten::start().await.unwrap();
    let client = open_on_loopback(&server.url()).await;
    assert_eq!(client.protocol_version().as_deref(), Some("2025-11-25"));
    let prompts = client.raw_prompts().await.unwrap();
    assert_eq!(prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["hello"]);
    let asked = server.asked();
    assert_eq!(asked.first().map(String::as_str), Some("server/discover"), "{asked:?}");
    assert!(asked.iter().any(|m| m == "initialize"), "{asked:?}");
    // `initialize` offers a version that has it, not the one that replaced
    // it (the conformance suite's `initialize` scenario checks this too).
    assert_eq!(server.offered(), ["2025-11-25"]);
}
