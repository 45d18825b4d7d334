//! TLS on loopback: a connector served over https with a certificate from a
//! root made when the test runs, reached through the pinned MCP client
//! (reconcile and a run's `tools/call`), and the AWS SDK's HTTPS client
//! through a TLS proxy in front of moto; both verify with the process's one
//! configuration (`shared::adapters::tls`), which trusts that root only
//! where the test gives it (`Tls::trusting`).

use chrono::{Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{FixturePrompt, FixtureState, McpFixture, scheduled_prompt, tool};
use local::tls::{TestCa, TlsProxy};
use serde_json::json;
use shared::adapters::mcp::McpConnectors;
use shared::adapters::tls::{Tls, sdk_http_client};
use shared::app::run::Disposition;
use shared::domain::connector::endpoint::EndpointPolicy;
use shared::domain::task::claim::RunStatus;
use tests::{RunStack, connector_task, installed};

const LOOPBACK: EndpointPolicy = EndpointPolicy { allow_loopback: true };

async fn https_fixture(ca: &TestCa) -> McpFixture {
    McpFixture::start_https(
        FixtureState {
            prompts: vec![
                scheduled_prompt(
                    "weekly_summary",
                    json!({"version": 1, "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
                           "tools": ["list_issues"],
                           "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
                    &[("repo", true)],
                    "Summarise the week's issues in {{repo}}.",
                ),
                FixturePrompt {
                    name: "triage".into(),
                    description: "an approved task's prompt".into(),
                    arguments: vec![("repo".into(), true)],
                    meta: None,
                    template: "Triage {{repo}}.".into(),
                },
            ],
            tools: vec![tool("list_issues"), tool("post_summary")],
            ..Default::default()
        },
        ca,
    )
    .await
    .unwrap()
}

/// What `read` answers once it holds `n` entries, or after 10 s: a server
/// records a refused handshake when the client's alert reaches it, after the
/// client has returned its error.
async fn settled(read: impl Fn() -> Vec<String>, n: usize) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while read().len() < n && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // Any further attempt would have been made before the client answered.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    read()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_over_https_is_reconciled_and_run_through_the_pinned_client() {
    let ca = TestCa::new(&["127.0.0.1"]).unwrap();
    let fixture = https_fixture(&ca).await;
    assert!(fixture.url().starts_with("https://127.0.0.1:"), "{}", fixture.url());
    let tls = Tls::trusting(ca.root()).unwrap();
    assert_eq!(tls.anchors(), Tls::process().anchors() + 1);
    let s = RunStack::start().await.unwrap();

    // Reconcile: the declaration read over https becomes a task.
    let rules = s.t.rules();
    let connectors = McpConnectors::from_sdk(&s.t.aws.sdk, rules.clone()).with_tls(tls.clone());
    let summary =
        s.t.reconciler_over(connectors, rules)
            .apply(&installed("ins_1", "issues", &fixture.url(), "workspace"), Utc::now())
            .await
            .unwrap();
    assert_eq!(summary.changes.get("created"), Some(&1), "{summary:?}");

    // A run of an approved task of this install: `prompts/get` and the
    // approved tool's `tools/call` over https.
    let task = connector_task("issues", "triage", &["list_issues"], &[("repo", "acme/web")]);
    s.insert(&task).await;
    s.model
        .script([
            Reply::tool("issues__list_issues", json!({"text": "open"}), 500, 50),
            Reply::text("Summarised.", 800, 40),
        ])
        .await;
    let at = Utc::now() - Duration::seconds(5);
    let got = s
        .runner_trusting(tls)
        .deliver(
            "m1",
            &tests::run_message(&task, at, "e1"),
            Utc::now(),
            tests::deadline(),
        )
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(RunStatus::Succeeded));
    let state = fixture.state().read().await;
    assert_eq!(state.prompt_gets.len(), 1);
    assert_eq!(state.calls.len(), 1, "{:?}", state.calls);
    assert_eq!(state.calls[0].0, "list_issues");
    assert!(
        fixture.refused_handshakes().is_empty(),
        "{:?}",
        fixture.refused_handshakes()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connector_whose_certificate_is_not_trusted_is_refused_with_the_reason() {
    let ca = TestCa::new(&["127.0.0.1", "localhost"]).unwrap();
    let fixture = https_fixture(&ca).await;

    // The process's configuration: Mozilla's roots only, not the test's.
    let error = McpConnectors::open_with(&fixture.url(), None, LOOPBACK, &Tls::process())
        .await
        .err()
        .expect("an unknown root is refused");
    assert_eq!(error.operation, "connect");
    assert!(error.message.contains("UnknownIssuer"), "{error}");

    // Another test root: still not this server's issuer.
    let other = TestCa::new(&["127.0.0.1"]).unwrap();
    let error = McpConnectors::open_with(&fixture.url(), None, LOOPBACK, &Tls::trusting(other.root()).unwrap())
        .await
        .err()
        .expect("another root's trust is no trust here");
    assert!(error.message.contains("UnknownIssuer"), "{error}");

    // The right root, but a name the certificate does not carry.
    let named = TestCa::new(&["localhost"]).unwrap();
    let named_fixture = https_fixture(&named).await;
    let error = McpConnectors::open_with(
        &named_fixture.url(),
        None,
        LOOPBACK,
        &Tls::trusting(named.root()).unwrap(),
    )
    .await
    .err()
    .expect("a certificate for another name is refused");
    assert!(
        error.message.contains("certificate not valid for name \"127.0.0.1\""),
        "{error}"
    );

    // The server saw each refusal as a failed handshake, and served nothing.
    let refused = settled(|| fixture.refused_handshakes(), 2).await;
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(fixture.state().read().await.calls.is_empty());

    // Trusted, by name (pinned to the address it resolved to): it answers.
    let client = McpConnectors::open_with(
        &fixture.url_at("localhost"),
        None,
        LOOPBACK,
        &Tls::trusting(ca.root()).unwrap(),
    )
    .await
    .unwrap();
    assert!(
        client
            .raw_prompts()
            .await
            .unwrap()
            .iter()
            .any(|p| p.name == "weekly_summary")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_client_verifies_with_the_same_configuration() {
    let aws = local::LocalAws::start().await.unwrap();
    let ca = TestCa::new(&["127.0.0.1"]).unwrap();
    let upstream = format!("127.0.0.1:{}", aws.moto.port()).parse().unwrap();
    let proxy = TlsProxy::start(&ca, upstream).await.unwrap();
    let dynamodb = |tls: &Tls| {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&aws.sdk)
                .endpoint_url(proxy.endpoint())
                .http_client(sdk_http_client(tls))
                .build(),
        )
    };

    // Trusting the test's root, DynamoDB (moto) answers over https.
    let trusted = dynamodb(&Tls::trusting(ca.root()).unwrap());
    trusted.list_tables().send().await.unwrap();
    assert!(
        proxy.refused_handshakes().is_empty(),
        "{:?}",
        proxy.refused_handshakes()
    );

    // The process's configuration refuses the test's root; a refused
    // certificate is not retried (another attempt meets the same one).
    let error = dynamodb(&Tls::process()).list_tables().send().await.unwrap_err();
    let text = format!("{}", aws_sdk_dynamodb::error::DisplayErrorContext(&error));
    assert!(text.contains("UnknownIssuer"), "{text}");
    let aws_sdk_dynamodb::error::SdkError::DispatchFailure(failure) = &error else {
        panic!("a dispatch failure: {text}");
    };
    assert!(
        !failure.is_io() && !failure.is_timeout(),
        "neither I/O nor a timeout, which the SDK retries: {text}"
    );
    let refused = settled(|| proxy.refused_handshakes(), 1).await;
    assert_eq!(refused.len(), 1, "one attempt: {refused:?}");
}
