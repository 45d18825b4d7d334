//! The real `reconcile` binary under a Lambda Runtime API emulator, against
//! moto and the MCP fixture: a signed webhook as a function URL request, the
//! FIFO batch it queues, a forged webhook, and the pass at deploy answering
//! CloudFormation.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use chrono::Utc;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use local::runtime::Launch;
use serde_json::{Value, json};
use shared::domain::connector::webhook::WebhookSecret;
use tests::TestStack;
use tokio::sync::Mutex;

const BINARY: &str = env!("CARGO_BIN_EXE_reconcile");

fn url_event(headers: Value, body: &str) -> Value {
    json!({
        "version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
        "headers": headers,
        "requestContext": {"accountId": "anonymous", "apiId": "fn", "domainName": "fn.lambda-url.us-east-1.on.aws",
                           "domainPrefix": "fn", "requestId": "r1", "routeKey": "$default", "stage": "$default",
                           "time": "30/Nov/2026:12:00:00 +0000", "timeEpoch": 1796040000000_i64,
                           "http": {"method": "POST", "path": "/", "protocol": "HTTP/1.1",
                                    "sourceIp": "127.0.0.1", "userAgent": "platform"}},
        "body": body, "isBase64Encoded": false
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_binary_takes_webhooks_works_its_queue_and_answers_cloudformation() {
    let t = TestStack::start().await.unwrap();
    let fixture = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1, "schedule": {"rate": "1 day"}, "tools": ["list_issues"],
                   "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[],
            "Summarise.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();

    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();

    let secret = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let body = json!({"type": "connector.installed", "workspace": "ws_1",
        "install": {"id": "ins_1", "server": "issues", "url": fixture.url(), "scope": "workspace", "account": "acct_1"}})
    .to_string();
    let now = Utc::now().timestamp();
    let signed = |id: &str| {
        json!({"content-type": "application/json", "webhook-id": id, "webhook-timestamp": now.to_string(),
               "webhook-signature": secret.sign(id, now, body.as_bytes())})
    };

    let forged = api
        .invoke_ok(&url_event(
            json!({"webhook-id": "wh_0", "webhook-timestamp": now.to_string(), "webhook-signature": "v1,AAAA"}),
            &body,
        ))
        .await
        .unwrap();
    assert_eq!(forged["statusCode"], 401);
    let accepted = api.invoke_ok(&url_event(signed("wh_1"), &body)).await.unwrap();
    assert_eq!(accepted["statusCode"], 202, "{accepted}");
    let duplicate = api.invoke_ok(&url_event(signed("wh_1"), &body)).await.unwrap();
    assert_eq!(duplicate["statusCode"], 200);
    assert!(t.items_of("task").await.is_empty(), "the webhook only queues");

    // The queued work, delivered as the FIFO event source would.
    let work = t.take_work().await;
    assert_eq!(work.len(), 1);
    let records: Vec<Value> = work
        .iter()
        .enumerate()
        .map(|(i, (group, body))| {
            json!({"messageId": format!("w{i}"), "receiptHandle": "rh", "body": body,
            "attributes": {"MessageGroupId": group}, "messageAttributes": {}, "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:reconcile.fifo", "awsRegion": "us-east-1"})
        })
        .collect();
    let batch = api.invoke_ok(&json!({"Records": records})).await.unwrap();
    assert_eq!(batch["batchItemFailures"], json!([]), "{batch}");
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0]["state"], "held");

    // The pass at deploy: queue every install, answer CloudFormation.
    let answers = Arc::new(Mutex::new(Vec::<Value>::new()));
    let record = answers.clone();
    let app = axum::Router::new().route(
        "/cfn",
        axum::routing::put(move |body: String| {
            let record = record.clone();
            async move {
                record
                    .lock()
                    .await
                    .push(serde_json::from_str(&body).unwrap_or(Value::Null));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let deploy = json!({"RequestType": "Create", "ResponseURL": format!("http://127.0.0.1:{port}/cfn"),
        "StackId": "arn:aws:cloudformation:us-east-1:123456789012:stack/s/1", "RequestId": "req-1",
        "LogicalResourceId": "ReconcileAtDeploy", "ResourceType": "AWS::CloudFormation::CustomResource",
        "ResourceProperties": {}});
    let answer = api.invoke_ok(&deploy).await.unwrap();
    assert_eq!(answer["status"], "SUCCESS");
    let sent = answers.lock().await.clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["Status"], "SUCCESS");
    assert_eq!(sent[0]["RequestId"], "req-1");
    // It answered as soon as the pass's first pages were queued.
    let pages = t.take_work().await;
    assert_eq!(pages.len(), 1 + 16, "{pages:?}");
    assert!(pages.iter().all(|(group, _)| group.starts_with("pass")));
    let installs = pages
        .iter()
        .find(|(_, body)| body.contains("reconcile.installs"))
        .unwrap();
    let paged = api
        .invoke_ok(&json!({"Records": [message("i1", "pass", installs.1.clone())]}))
        .await
        .unwrap();
    assert_eq!(paged["batchItemFailures"], json!([]), "{paged}");
    let queued = t.take_work().await;
    assert_eq!(queued.len(), 1, "one pass per install");
    assert_eq!(queued[0].0, "ws_1/ins_1");

    // A batch in which one install's server is down: that install's later
    // work goes back with its failed message; the other install's is done.
    let down = json!({"type": "connector.installed", "workspace": "ws_1",
        "install": {"id": "ins_down", "server": "down", "url": "http://127.0.0.1:9/mcp", "scope": "workspace",
                    "account": "acct_2"}});
    let changed = json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_down"}});
    let records = vec![
        message("d1", "ws_1/ins_down", down.to_string()),
        message("d2", "ws_1/ins_down", changed.to_string()),
        message("p1", &queued[0].0, queued[0].1.clone()),
    ];
    let batch = api.invoke_ok(&json!({"Records": records})).await.unwrap();
    assert_eq!(
        batch["batchItemFailures"],
        json!([{"itemIdentifier": "d1"}, {"itemIdentifier": "d2"}]),
        "{batch}"
    );

    // A response URL that accepts and never answers: the reply gives up
    // after its bound (`CUSTOM_RESOURCE_REPLY_SECONDS`) and the invocation
    // fails, for Lambda's retry to send again, instead of holding the
    // function to its own limit.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut kept = Vec::new();
        while let Ok((stream, _)) = hung.accept().await {
            kept.push(stream);
        }
    });
    let mut stuck = deploy.clone();
    stuck["ResponseURL"] = json!(format!("http://127.0.0.1:{hung_port}/cfn"));
    stuck["RequestId"] = json!("req-2");
    match api.invoke(&stuck).await.expect("the invocation ends") {
        local::runtime::Outcome::Error(error) => assert!(
            error.to_string().contains("the reply to CloudFormation failed"),
            "{error}"
        ),
        answered => panic!("a reply that never completes fails the invocation: {answered:?}"),
    }
    held.abort();
}

/// The custom resource reply (`reconcile::custom_resource_reply`), built
/// from the typed request: under CloudFormation's 4 KB cap whatever the
/// reason.
mod reply {
    use aws_lambda_events::event::cloudformation::{
        CloudFormationCustomResourceRequest, CloudFormationCustomResourceResponseStatus,
    };
    use reconcile::{CUSTOM_RESOURCE_REPLY_LIMIT, Event, custom_resource_reply};
    use serde_json::{Value, json};

    fn request() -> CloudFormationCustomResourceRequest {
        let event = json!({"RequestType": "Update", "ResponseURL": "http://127.0.0.1:1/reply",
               "StackId": format!("arn:aws:cloudformation:us-east-1:123456789012:stack/{}/0f2c8e10-9a7b-11ef-8f3a-0a1b2c3d4e5f", "s".repeat(128)),
               "RequestId": "5d2f9b1c-0c1e-4c4e-9d6f-2b9a1f0e7c11", "LogicalResourceId": "ReconcileAtDeploy",
               "PhysicalResourceId": "reconcile-at-deploy", "ResourceType": "AWS::CloudFormation::CustomResource",
               "ResourceProperties": {}, "OldResourceProperties": {}});
        match Event::decode(event) {
            Ok(Event::CustomResource(request)) => *request,
            _ => panic!("a custom resource request"),
        }
    }

    #[test]
    fn a_reply_stays_under_the_limit_whatever_the_reason() {
        for reason in [
            String::new(),
            "queued a reconcile pass for 3 installs".to_owned(),
            "x".repeat(10_000),
            "\"quoted\" and\nescaped\u{1}".repeat(2_000),
            "é☃".repeat(3_000),
        ] {
            let reply = custom_resource_reply(&request(), CloudFormationCustomResourceResponseStatus::Failed, &reason);
            assert!(reply.len() < CUSTOM_RESOURCE_REPLY_LIMIT, "{} bytes", reply.len());
            let parsed: Value = serde_json::from_str(&reply).unwrap();
            assert_eq!(parsed["Status"], "FAILED");
            assert_eq!(parsed["LogicalResourceId"], "ReconcileAtDeploy");
            let sent = parsed["Reason"].as_str().unwrap();
            if reason.len() < 100 {
                assert_eq!(sent, reason, "a short reason is sent whole");
            } else {
                assert!(sent.ends_with('…'), "a cut reason says so");
                assert!(reason.starts_with(sent.trim_end_matches('…')));
            }
        }
    }
}

/// A `connector.installed` work item for install `id` of `workspace`, its
/// server named as the install.
fn installed(id: &str, url: &str, workspace: &str) -> String {
    json!({"type": "connector.installed", "workspace": workspace,
           "install": {"id": id, "server": id, "url": url, "scope": "workspace", "account": "acct_1"}})
    .to_string()
}

/// One record of a FIFO batch, as Lambda hands it over.
fn message(id: &str, group: &str, body: String) -> Value {
    json!({"messageId": id, "receiptHandle": "rh", "body": body, "attributes": {"MessageGroupId": group},
           "messageAttributes": {}, "eventSource": "aws:sqs",
           "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:reconcile.fifo", "awsRegion": "us-east-1"})
}

/// A server that accepts connections and never answers: every MCP request
/// to it waits until its deadline.
async fn sleeping_server() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    format!("http://127.0.0.1:{port}/mcp")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sleeping_server_fails_its_own_message_and_a_healthy_install_in_the_batch_is_applied() {
    use reconcile::message_budget;
    let t = TestStack::start().await.unwrap();
    let healthy = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1, "schedule": {"rate": "1 day"}, "tools": ["list_issues"],
                   "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[],
            "Summarise.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    let sleeping = sleeping_server().await;
    // A short invocation: the sleeping group's two messages share it.
    let timeout = std::time::Duration::from_secs(30);
    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .timeout(timeout)
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let records = vec![
        message("s1", "ws_1/ins_sleep", installed("ins_sleep", &sleeping, "ws_1")),
        message("s2", "ws_1/ins_sleep", installed("ins_sleep", &sleeping, "ws_1")),
        message("h1", "ws_1/ins_ok", installed("ins_ok", &healthy.url(), "ws_1")),
    ];
    let started = std::time::Instant::now();
    let batch = api
        .invoke_ok(&json!({"Records": records}))
        .await
        .expect("the invocation answers within its timeout");
    assert!(started.elapsed() < timeout);
    assert!(
        started.elapsed() >= message_budget(timeout.as_millis() as u64, 2),
        "the sleeping server's message ran to its own deadline"
    );
    assert_eq!(
        batch["batchItemFailures"],
        json!([{"itemIdentifier": "s1"}, {"itemIdentifier": "s2"}]),
        "the sleeping install's work comes back, in its order; the healthy one's does not"
    );
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), 1, "the healthy install was applied");
    assert_eq!(tasks[0]["provenance"]["install_id"], "ins_ok");
    let sleepy = t
        .item_at(shared::adapters::keys::Key::install("ws_1", "ins_sleep"))
        .await
        .unwrap();
    assert!(
        sleepy["last_error"].as_str().unwrap().contains("did not finish within"),
        "the failure is recorded on its own install: {sleepy}"
    );
    let healthy = t
        .item_at(shared::adapters::keys::Key::install("ws_1", "ins_ok"))
        .await
        .unwrap();
    assert!(healthy.get("last_error").is_none(), "{healthy}");
}

/// Four installs whose servers never answer, queued ahead of a healthy one
/// in one FIFO batch, as SQS hands it over again and again: the groups are
/// worked side by side, so the healthy install is applied in the first
/// invocation and never comes back; only the hanging installs' own
/// messages are handed back, each after its own deadline, never unworked.
#[tokio::test(flavor = "multi_thread")]
async fn hanging_installs_ahead_of_a_healthy_one_never_hold_it_back() {
    let t = TestStack::start().await.unwrap();
    let healthy = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1, "schedule": {"rate": "1 day"}, "tools": ["list_issues"],
                   "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[],
            "Summarise.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    let timeout = std::time::Duration::from_secs(20);
    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .timeout(timeout)
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let mut records = Vec::new();
    for n in 0..4 {
        let id = format!("ins_hang{n}");
        records.push(message(
            &format!("hang{n}"),
            &format!("ws_1/{id}"),
            installed(&id, &sleeping_server().await, "ws_1"),
        ));
    }
    records.push(message(
        "ok",
        "ws_1/ins_ok",
        installed("ins_ok", &healthy.url(), "ws_1"),
    ));
    let hanging: Vec<Value> = (0..4).map(|n| json!({"itemIdentifier": format!("hang{n}")})).collect();
    for round in 1..=3 {
        let started = std::time::Instant::now();
        let batch = api
            .invoke_ok(&json!({"Records": records}))
            .await
            .expect("the invocation answers within its timeout");
        assert!(started.elapsed() < timeout, "round {round}");
        assert_eq!(
            batch["batchItemFailures"],
            json!(hanging),
            "round {round}: the hanging installs' own messages come back, the healthy one's never"
        );
        let tasks = t.items_of("task").await;
        assert_eq!(tasks.len(), 1, "round {round}: the healthy install is applied at once");
        assert_eq!(tasks[0]["provenance"]["install_id"], "ins_ok");
        for n in 0..4 {
            let install = t
                .item_at(shared::adapters::keys::Key::install("ws_1", &format!("ins_hang{n}")))
                .await
                .unwrap();
            assert!(
                install["last_error"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("did not finish within"),
                "round {round}: each hanging install was worked to its own deadline: {install}"
            );
        }
    }
}

/// A hostile server lists 50 pages of prompts, each as large as a list
/// page may be (`Reading::Lists`, 1 MiB): the worker keeps at most
/// `MAX_LIST_BYTES` of one list over its pages, so the read fails on its
/// own install, the real worker's peak memory stays under a bound, and
/// another tenant's install in the same batch is applied.
#[tokio::test(flavor = "multi_thread")]
async fn fifty_maximal_list_pages_are_bounded_by_bytes_read_beside_another_tenant() {
    use local::mcp_fixture::FixturePrompt;
    const PEAK_BOUND: u64 = 128 * 1024 * 1024;
    let t = TestStack::start().await.unwrap();
    let healthy = McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "weekly_summary",
            json!({"version": 1, "schedule": {"rate": "1 day"}, "tools": ["list_issues"],
                   "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0}}),
            &[],
            "Summarise.",
        )],
        tools: vec![tool("list_issues")],
        ..Default::default()
    })
    .await
    .unwrap();
    // 100 prompts a page, each with a 9 KB description: about 0.9 MiB a page.
    let hostile = McpFixture::start(FixtureState {
        prompts: (0..5_000)
            .map(|i| FixturePrompt {
                name: format!("p{i:05}"),
                description: "d".repeat(9 * 1024),
                arguments: vec![],
                meta: None,
                template: "x".into(),
            })
            .collect(),
        page_size: 100,
        ..Default::default()
    })
    .await
    .unwrap();
    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .timeout(std::time::Duration::from_secs(120))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let records = vec![
        message("big", "ws_1/ins_big", installed("ins_big", &hostile.url(), "ws_1")),
        message("ok", "ws_2/ins_ok", installed("ins_ok", &healthy.url(), "ws_2")),
    ];
    let batch = api
        .invoke_ok(&json!({"Records": records}))
        .await
        .expect("the invocation answers");
    assert_eq!(
        batch["batchItemFailures"],
        json!([{"itemIdentifier": "big"}]),
        "the hostile install's work fails alone"
    );
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), 1, "the other tenant's install is applied");
    assert_eq!(tasks[0]["workspace"], "ws_2");
    let big = t
        .item_at(shared::adapters::keys::Key::install("ws_1", "ins_big"))
        .await
        .unwrap();
    assert!(
        big["last_error"].as_str().unwrap_or_default().contains("larger than"),
        "the failure names the bound: {big}"
    );
    let peak = api.process.peak_rss().expect("the worker's peak memory");
    println!("reconcile worker peak memory: {} MB", peak / (1024 * 1024));
    assert!(peak < PEAK_BOUND, "peak {} MB", peak / (1024 * 1024));
}

/// The webhook intake alone (no worker variables), its secret named `name`.
async fn intake_reading(t: &TestStack, name: &str) -> local::runtime::Function {
    Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .unset("SCHEDULE_GROUP")
        .set("WEBHOOK_SECRET_ARN", name.to_owned())
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap()
}

/// A signed `prompts.list_changed` webhook, as the platform sends it.
fn list_changed(secret: &WebhookSecret, id: &str) -> Value {
    let body = json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
    let now = Utc::now().timestamp();
    url_event(
        json!({"content-type": "application/json", "webhook-id": id, "webhook-timestamp": now.to_string(),
               "webhook-signature": secret.sign(id, now, body.as_bytes())}),
        &body,
    )
}

/// The webhook intake (deployed without the worker's variables) starts its
/// secret's read as it starts, and the first webhook waits for it. A secret
/// it cannot read fails that webhook, which queues nothing and leaves no
/// webhook id behind (the sender retries it), not the process; the next
/// webhook reads the secret again. Here the secret is created between two
/// deliveries of the same webhook.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_secret_that_cannot_be_read_fails_its_webhook_and_the_next_one_reads_it_again() {
    use local::runtime::Outcome;
    let t = TestStack::start().await.unwrap();
    let name = format!("webhook-later-{}", uuid::Uuid::new_v4().simple());
    let api = intake_reading(&t, &name).await;
    let webhook = list_changed(&WebhookSecret::parse(&t.stack.webhook_secret).unwrap(), "wh_later");

    match api.invoke(&webhook).await.unwrap() {
        Outcome::Error(error) => assert!(
            error.to_string().contains("WEBHOOK_SECRET_ARN could not be read"),
            "{error}"
        ),
        Outcome::Response(answer) => panic!("a webhook was answered without its secret: {answer}"),
    }
    assert!(t.take_work().await.is_empty(), "nothing queued");
    assert!(t.items_of("webhook").await.is_empty(), "no webhook id kept");

    aws_sdk_secretsmanager::Client::new(&t.aws.sdk)
        .create_secret()
        .name(&name)
        .secret_string(&t.stack.webhook_secret)
        .send()
        .await
        .unwrap();
    let again = api.invoke_ok(&webhook).await.unwrap();
    assert_eq!(again["statusCode"], 202, "{again}");
    assert_eq!(t.take_work().await.len(), 1);
}

/// A webhook secret rotated while the intake is warm: the first webhook
/// signed with the new secret is refused by the one the process holds, the
/// process reads the secret again and accepts it; the old secret is then
/// refused. A refused webhook reads the secret at most once each
/// `REREAD_SECONDS`.
#[tokio::test(flavor = "multi_thread")]
async fn a_rotated_webhook_secret_reaches_a_warm_intake() {
    let t = TestStack::start().await.unwrap();
    let name = format!("webhook-rotated-{}", uuid::Uuid::new_v4().simple());
    let secrets = aws_sdk_secretsmanager::Client::new(&t.aws.sdk);
    secrets
        .create_secret()
        .name(&name)
        .secret_string(&t.stack.webhook_secret)
        .send()
        .await
        .unwrap();
    let api = intake_reading(&t, &name).await;
    let old = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let accepted = api.invoke_ok(&list_changed(&old, "wh_before")).await.unwrap();
    assert_eq!(accepted["statusCode"], 202, "{accepted}");

    let rotated = "whsec_cm90YXRlZC1zZWNyZXQtZm9yLXRoZS1pbnRha2U=";
    secrets
        .put_secret_value()
        .secret_id(&name)
        .secret_string(rotated)
        .send()
        .await
        .unwrap();
    // The process read its secret just now: within REREAD_SECONDS a
    // refusal stands, then the next refused webhook reads it again.
    tokio::time::sleep(std::time::Duration::from_secs(11)).await; // REREAD_SECONDS (10) and one
    let new = WebhookSecret::parse(rotated).unwrap();
    let after = api.invoke_ok(&list_changed(&new, "wh_after")).await.unwrap();
    assert_eq!(after["statusCode"], 202, "the rotated secret is taken: {after}");
    let stale = api.invoke_ok(&list_changed(&old, "wh_stale")).await.unwrap();
    assert_eq!(stale["statusCode"], 401, "the old secret no more: {stale}");
    assert_eq!(t.take_work().await.len(), 2);
}

/// A TCP relay on loopback to `upstream` (`http://127.0.0.1:<port>`) that
/// holds its first connection open and never answers it, as a read begun
/// before Lambda froze the process can be left; later connections are
/// relayed. Answers its URL and how many connections it took.
async fn first_connection_hangs(upstream: &str) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    let upstream = upstream.trim_start_matches("http://").to_owned();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut inbound, _)) = listener.accept().await {
            if count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                held.push(inbound);
                continue;
            }
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (format!("http://127.0.0.1:{port}"), taken)
}

/// The read begun at start never answers (a process frozen between its
/// start and its first webhook): the first webhook waits
/// `SECRET_READ_SECONDS` for it, reads the secret again, and is answered.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_read_begun_at_start_that_never_answers_is_read_again_for_the_first_webhook() {
    let t = TestStack::start().await.unwrap();
    let (relay, connections) = first_connection_hangs(&t.aws.moto.endpoint()).await;
    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .unset("SCHEDULE_GROUP")
        .set("AWS_ENDPOINT_URL_SECRETS_MANAGER", relay)
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let webhook = list_changed(&WebhookSecret::parse(&t.stack.webhook_secret).unwrap(), "wh_thawed");
    let answer = api.invoke_ok(&webhook).await.unwrap();
    assert_eq!(answer["statusCode"], 202, "{answer}");
    assert_eq!(t.take_work().await.len(), 1);
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "the read begun at start, held; the second, answered"
    );
    assert!(
        api.logs().unwrap().contains("has not answered: reading it again"),
        "{}",
        api.logs().unwrap()
    );
}

/// Lambda stops a chain Lambda -> SQS -> the same Lambda after 16 hops
/// unless the function allows recursion; the dispatcher does the same,
/// reading the lineage each message carries (its `AWSTraceHeader`, from the
/// trace header the worker's SDK sent). A daily pass over 2,050 reminders
/// of one shard is a chain of 21 pages through the worker's own queue:
/// with the template's `RecursiveLoop: Allow` every page is worked; as
/// Lambda's default would have it, the 17th page goes to the DLQ unworked.
#[tokio::test(flavor = "multi_thread")]
async fn a_daily_pass_of_more_than_sixteen_pages_goes_on_through_the_workers_own_queue() {
    use shared::adapters::dynamo::task_item;
    use shared::adapters::keys::SchedulableKey;
    use shared::domain::task::TaskId;
    for allowed in [true, false] {
        let t = TestStack::start().await.unwrap();
        // One-time reminders whose time has passed, still scheduled: a page
        // of them is read and left alone (no Scheduler call).
        let at = Utc::now() - chrono::Duration::days(1);
        let mut items = Vec::new();
        let mut i = 0;
        while items.len() < 2_050 {
            i += 1;
            let id = TaskId::for_reminder("ws_1", "usr_1", &format!("k{i}"));
            if SchedulableKey::shard_of(id.as_str()) != 0 {
                continue;
            }
            let mut task = tests::reminder(at);
            task.task_id = id;
            task.due = Some(at);
            items.push(task_item(&task).unwrap());
        }
        t.put_items(items).await;
        let worker = Launch::new("reconcile", &t.aws, &t.stack)
            .unwrap()
            .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
            .start(Path::new(BINARY))
            .await
            .unwrap();
        worker.invoke_ok(&json!({"op": "reconcile_all"})).await.unwrap();
        let dispatch = local::dispatcher::Dispatcher {
            sdk: &t.aws.sdk,
            stack: &t.stack,
            runner: &worker.api,
            reconcile: &worker.api,
        };
        let allowed_here = if allowed { None } else { Some(false) };
        dispatch.drain_reconcile_recursing(allowed_here).await.unwrap();
        let dead = aws_sdk_sqs::Client::new(&t.aws.sdk)
            .receive_message()
            .queue_url(&t.stack.reconcile_dlq_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let pages: Vec<Value> = dead
            .messages()
            .iter()
            .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
            .collect();
        if allowed {
            assert!(pages.is_empty(), "every page worked: {pages:?}");
        } else {
            assert_eq!(pages.len(), 1, "the 17th page, unworked: {pages:?}");
            assert_eq!(pages[0]["type"], "reconcile.reminders", "{}", pages[0]);
            assert_eq!(pages[0]["shard"], 0, "{}", pages[0]);
        }
    }
}

/// The chain `sat verify` sends on a deployed stack (`Pass::Probe`): each
/// hop records how far it came and queues the next through the worker's
/// own queue. With the template's `RecursiveLoop: Allow` a chain of 20
/// hops comes to its end; as Lambda's default would have it, it stops at
/// hop 16 and its 17th message goes to the DLQ unworked. A probe out of
/// its bounds (too long a chain, an id that is not a plain word) is dropped
/// and recorded nowhere.
#[tokio::test(flavor = "multi_thread")]
async fn a_probe_chain_records_how_far_it_came_through_the_workers_own_queue() {
    use shared::ports::TaskCatalog;
    for allowed in [true, false] {
        let t = TestStack::start().await.unwrap();
        let worker = Launch::new("reconcile", &t.aws, &t.stack)
            .unwrap()
            .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
            .start(Path::new(BINARY))
            .await
            .unwrap();
        let sqs = aws_sdk_sqs::Client::new(&t.aws.sdk);
        for (probe, hops) in [("verify-1", 20), ("too-long", 41), ("not/a/word", 3)] {
            let body = json!({"type": "reconcile.probe", "probe": probe, "hop": 1, "hops": hops});
            sqs.send_message()
                .queue_url(&t.stack.reconcile_queue_url)
                .message_body(body.to_string())
                .message_group_id(format!("probe-{hops}"))
                .message_deduplication_id(format!("{hops}"))
                .send()
                .await
                .unwrap();
        }
        let dispatch = local::dispatcher::Dispatcher {
            sdk: &t.aws.sdk,
            stack: &t.stack,
            runner: &worker.api,
            reconcile: &worker.api,
        };
        let allowed_here = if allowed { None } else { Some(false) };
        dispatch.drain_reconcile_recursing(allowed_here).await.unwrap();
        let store = shared::adapters::dynamo::DynamoStore::from_sdk(&t.aws.sdk, &t.stack.names.table);
        let reached = store.probe_reached("verify-1").await.unwrap();
        assert_eq!(store.probe_reached("too-long").await.unwrap(), None);
        assert_eq!(store.probe_reached("not/a/word").await.unwrap(), None);
        let dead = sqs
            .receive_message()
            .queue_url(&t.stack.reconcile_dlq_url)
            .max_number_of_messages(10)
            .send()
            .await
            .unwrap();
        let dead: Vec<Value> = dead
            .messages()
            .iter()
            .map(|m| serde_json::from_str(m.body().unwrap()).unwrap())
            .collect();
        if allowed {
            assert_eq!(reached, Some(20), "the whole chain");
            assert!(dead.is_empty(), "{dead:?}");
        } else {
            assert_eq!(reached, Some(16), "cut where Lambda cuts it");
            assert_eq!(dead.len(), 1, "{dead:?}");
            assert_eq!(dead[0]["type"], "reconcile.probe", "{}", dead[0]);
            assert_eq!(dead[0]["hop"], 17, "{}", dead[0]);
        }
    }
}

/// A work item that goes back (here: its install's server never answers)
/// is made visible again after a short visibility the worker sets
/// (`ChangeMessageVisibility`, allowed to its role), not the queue's
/// 2,520 s: its install's FIFO group waits about a minute for the next try.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_work_item_comes_back_within_minutes_not_the_queues_timeout() {
    let t = TestStack::start().await.unwrap();
    let sqs = aws_sdk_sqs::Client::new(&t.aws.sdk);
    let url = &t.stack.reconcile_queue_url;
    let sleeping = sleeping_server().await;
    sqs.send_message()
        .queue_url(url)
        .message_group_id("ws_1/ins_sleep")
        .message_body(installed("ins_sleep", &sleeping, "ws_1"))
        .send()
        .await
        .unwrap();
    let received = sqs
        .receive_message()
        .queue_url(url)
        .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
        .send()
        .await
        .unwrap();
    let received = &received.messages()[0];
    let arn = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes()
        .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn).cloned())
        .unwrap();
    let record = json!({"messageId": received.message_id(), "receiptHandle": received.receipt_handle(),
        "body": received.body(), "attributes": {"MessageGroupId": "ws_1/ins_sleep", "ApproximateReceiveCount": "1"},
        "messageAttributes": {}, "eventSource": "aws:sqs", "eventSourceARN": arn, "awsRegion": "us-east-1"});
    let api = Launch::new("reconcile", &t.aws, &t.stack)
        .unwrap()
        .timeout(std::time::Duration::from_secs(20))
        .log_in(Path::new(env!("CARGO_TARGET_TMPDIR")))
        .start(Path::new(BINARY))
        .await
        .unwrap();
    let batch = api.invoke_ok(&json!({"Records": [record]})).await.unwrap();
    assert_eq!(
        batch["batchItemFailures"][0]["itemIdentifier"],
        received.message_id().unwrap()
    );
    // A minute on (the first return's longest), it is there to receive.
    local::moto::advance_sqs_clock(&t.aws.moto.endpoint(), 61).unwrap();
    let again = sqs.receive_message().queue_url(url).send().await.unwrap();
    assert_eq!(
        again.messages().len(),
        1,
        "the work item came back within a minute, not the queue's visibility timeout"
    );
}
