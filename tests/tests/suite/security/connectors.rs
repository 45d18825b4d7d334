//! See `super`: attacks through installs, webhooks, bindings and connector
//! endpoints (SPEC §5, §6). Each test tries one attack against the real
//! local stack (moto, the project's MCP fixture on loopback) and asserts the
//! refusal and that no item, schedule or secret read changed because of it.
//!
//! Attacks tried:
//! - a personal install of the same server takes over a workspace task once
//!   the workspace install is uninstalled;
//! - a personal install's own prompts become tasks;
//! - an admin binds a need to the declaring install itself;
//! - an admin binds a need to another install of the same server;
//! - such a binding is already stored (written before the rule);
//! - a webhook names a loopback, a metadata, a private or a plain-http URL;
//! - a webhook names the webhook secret, another workspace's install's
//!   secret, or a secret under another prefix as the install's credential;
//! - an install stored before the rules names the webhook secret (the
//!   worker and runner path, past intake);
//! - an install event that skipped intake names a metadata URL;
//! - an installed install's id is re-declared as another server, so its
//!   approved tasks would run on that server's URL;
//! - a name that resolves to 127.0.0.1, with `ALLOW_LOOPBACK_CONNECTORS` off;
//! - a connector task already attached to a personal install is delivered
//!   to the runner;
//! - a webhook signed over a re-printed timestamp instead of the header's bytes.
//!
//! No test sends anything outside 127.0.0.0/8: hostile URLs are refused by
//! their form before any connection, and the one name resolved is
//! `localhost`.

use chrono::Utc;
use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::app::reconcile::{Delivery, WebhookAnswer, intake};
use shared::domain::connector::webhook::WebhookSecret;
use shared::domain::task::TaskId;
use shared::ports::TaskCatalog;
use tests::{TestReconciler, TestStack, admin_principal, code, event, installed};

fn marker() -> Value {
    json!({"version": 1,
           "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
           "tools": ["list_issues"],
           "limits": {"max_turns": 8, "max_tool_calls": 10, "max_output_tokens": 2000, "timeout_seconds": 120},
           "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0},
           "needs": [{"id": "summary_channel", "description": "a chat channel"}]})
}

async fn issues_server() -> McpFixture {
    McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt("weekly_summary", marker(), &[], "Summarise.")],
        tools: vec![tool("list_issues"), tool("delete_repository")],
        ..Default::default()
    })
    .await
    .unwrap()
}

fn task_id() -> TaskId {
    TaskId::for_connector("ws_1", "issues", "weekly_summary")
}

/// Everything an attack could change: every item and every schedule with
/// its state.
async fn snapshot(t: &TestStack) -> (Vec<Value>, Vec<(String, String)>) {
    let mut items = t.items().await;
    items.sort_by_key(|i| format!("{}|{}", i["pk"], i["sk"]));
    let mut schedules = Vec::new();
    for name in t.schedule_names().await {
        let state = t
            .schedule(&name)
            .await
            .state()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default();
        schedules.push((name, state));
    }
    (items, schedules)
}

async fn admin(t: &TestStack, op: &str, extra: Value) -> Value {
    let mut request = json!({"op": op, "principal": admin_principal(), "task_id": task_id()});
    for (k, v) in extra.as_object().unwrap() {
        request[k] = v.clone();
    }
    t.admin().handle(request, Utc::now()).await.unwrap()
}

/// An admin's approval binding the need to `install` is refused as
/// `invalid_request`, its message saying `why`, and nothing changes.
async fn assert_binding_refused(t: &TestStack, install: &str, why: &str) {
    let before = snapshot(t).await;
    let version = admin(t, "get", json!({})).await["version"].as_u64().unwrap();
    let answer = admin(
        t,
        "approve",
        json!({"expected_version": version, "bindings": {"summary_channel": install}}),
    )
    .await;
    assert_eq!(code(&answer), "invalid_request", "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap().contains(why));
    assert_eq!(snapshot(t).await, before);
}

/// The issues server installed in ws_1 (`ins_1`) with a chat connector
/// (`ins_chat`), its task created and approved with the need bound to chat.
async fn approved_world(t: &TestStack, issues: &McpFixture, chat: &McpFixture) -> TestReconciler {
    let r = t.reconciler();
    r.apply(&installed("ins_chat", "chat", &chat.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    r.apply(&installed("ins_1", "issues", &issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    let version = admin(t, "get", json!({})).await["version"].as_u64().unwrap();
    let approved = admin(
        t,
        "approve",
        json!({"expected_version": version, "bindings": {"summary_channel": "ins_chat"}}),
    )
    .await;
    assert_eq!(code(&approved), "ok", "{approved}");
    r
}

async fn chat_server() -> McpFixture {
    McpFixture::start(FixtureState {
        tools: vec![tool("post_message")],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A credential secret in Secrets Manager; its ARN.
async fn secret(t: &TestStack, name: &str, value: &str) -> String {
    aws_sdk_secretsmanager::Client::new(&t.aws.sdk)
        .create_secret()
        .name(name)
        .secret_string(value)
        .send()
        .await
        .unwrap()
        .arn()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_personal_install_never_takes_over_a_workspace_task() {
    let t = TestStack::start().await.unwrap();
    let (issues, chat) = (issues_server().await, chat_server().await);
    let r = approved_world(&t, &issues, &chat).await;
    // Someone installs the same server for themselves, with their own URL
    // and credential; then the workspace install goes.
    let mine = issues_server().await;
    let arn = secret(&t, &t.stack.connector_secret_name("ws_1", "ins_me"), "my-own-token").await;
    let mut personal = installed("ins_me", "issues", &mine.url(), "personal");
    if let shared::domain::connector::webhook::Event::Installed { install, .. } = &mut personal {
        install.credential_secret_arn = Some(arn);
    }
    r.apply(&personal, Utc::now()).await.unwrap();
    r.apply(&event("connector.uninstalled", "ins_1"), Utc::now())
        .await
        .unwrap();
    let before = snapshot(&t).await;

    for kind in ["prompts.list_changed", "connector.connected"] {
        r.apply(&event(kind, "ins_me"), Utc::now()).await.unwrap();
    }
    Box::pin(r.reconcile_install("ws_1", "ins_me", Utc::now()))
        .await
        .unwrap();

    assert_eq!(snapshot(&t).await, before, "the task stays the workspace install's");
    let task = t.item_at(Key::task("ws_1", task_id().as_str())).await.unwrap();
    assert_eq!(task["provenance"]["install_id"], "ins_1");
    assert_eq!(
        r.connectors().secret_reads(),
        0,
        "the personal credential is never read"
    );
    assert!(
        mine.state().read().await.authorizations.is_empty(),
        "the personal server is never called"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_personal_installs_own_prompts_never_become_tasks() {
    let t = TestStack::start().await.unwrap();
    let mine = issues_server().await;
    let r = t.reconciler();
    r.apply(&installed("ins_me", "issues", &mine.url(), "personal"), Utc::now())
        .await
        .unwrap();
    let before = snapshot(&t).await;
    r.apply(&event("prompts.list_changed", "ins_me"), Utc::now())
        .await
        .unwrap();
    assert_eq!(snapshot(&t).await, before);
    assert!(t.items_of("task").await.is_empty(), "no task from a personal install");
    assert!(t.schedule_names().await.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_need_bound_to_the_declaring_install_is_refused() {
    let t = TestStack::start().await.unwrap();
    let (issues, chat) = (issues_server().await, chat_server().await);
    let _r = approved_world(&t, &issues, &chat).await;
    assert_binding_refused(&t, "ins_1", "declaring install").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_need_bound_to_another_install_of_the_same_server_is_refused() {
    let t = TestStack::start().await.unwrap();
    let (issues, chat) = (issues_server().await, chat_server().await);
    let r = approved_world(&t, &issues, &chat).await;
    let twin = issues_server().await;
    r.apply(&installed("ins_twin", "issues", &twin.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    assert_binding_refused(&t, "ins_twin", "declaring server").await;
}

/// Posts a signed `connector.installed` naming `url` and `credential` to the
/// intake under the deployment's rules (`ALLOW_LOOPBACK_CONNECTORS` off).
async fn post_install(t: &TestStack, id: &str, url: &str, credential: Option<&str>) -> WebhookAnswer {
    let r = t.reconciler();
    let secret = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let body = json!({"type": "connector.installed", "workspace": "ws_1",
        "install": {"id": "ins_1", "server": "issues", "url": url, "scope": "workspace",
                    "account": "acct_1", "credential_secret_arn": credential}})
    .to_string();
    let now = Utc::now();
    let signature = secret.sign(id, now.timestamp(), body.as_bytes());
    let ts = now.timestamp().to_string();
    let delivery = Delivery {
        id: Some(id),
        timestamp: Some(&ts),
        signature: Some(&signature),
        body: body.as_bytes(),
    };
    intake(r.store(), r.queue(), &secret, &t.deployed_rules(), &delivery, now)
        .await
        .unwrap()
}

async fn assert_refused_install(url: &str, credential: Option<&str>) {
    let t = TestStack::start().await.unwrap();
    let before = snapshot(&t).await;
    let answer = post_install(&t, "wh_attack", url, credential).await;
    assert_eq!(answer.status(), 400, "{url} {credential:?}: {answer:?}");
    assert!(t.take_work().await.is_empty(), "nothing queued");
    assert_eq!(snapshot(&t).await, before, "nothing written, not even the webhook id");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_naming_a_loopback_url_is_refused() {
    for url in [
        "http://127.0.0.1:8080/mcp",
        "https://127.0.0.1/mcp",
        "https://localhost/mcp",
        "https://[::1]/mcp",
        "https://2130706433/mcp",
    ] {
        assert_refused_install(url, None).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_naming_a_metadata_url_is_refused() {
    for url in [
        "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://[fd00:ec2::254]/latest/api/token",
        "https://[::ffff:169.254.169.254]/",
        "https://169.254.170.2/v2/credentials",
    ] {
        assert_refused_install(url, None).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_naming_a_private_url_is_refused() {
    for url in [
        "https://10.0.0.5/mcp",
        "https://172.16.3.4/mcp",
        "https://192.168.1.1/mcp",
        "https://100.64.0.1/mcp",
        "https://[fd12:3456::1]/mcp",
        "https://0.0.0.0/mcp",
    ] {
        assert_refused_install(url, None).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_naming_a_plain_http_url_is_refused() {
    for url in [
        "http://mcp.example.com/mcp",
        "ftp://mcp.example.com/",
        "https://user:pw@mcp.example.com/",
    ] {
        assert_refused_install(url, None).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_naming_the_webhook_secret_is_refused() {
    let t = TestStack::start().await.unwrap();
    let before = snapshot(&t).await;
    let webhook_secret = t.stack.webhook_secret_arn.clone();
    let answer = post_install(&t, "wh_attack", "https://mcp.example.com/mcp", Some(&webhook_secret)).await;
    assert_eq!(answer.status(), 400, "{answer:?}");
    assert!(t.take_work().await.is_empty());
    assert_eq!(snapshot(&t).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_of_another_workspaces_install_is_refused() {
    let other = |t: &TestStack| format!("{}ws_2/ins_1", t.stack.connector_secret_prefix());
    let t = TestStack::start().await.unwrap();
    let before = snapshot(&t).await;
    let arn = other(&t);
    let answer = post_install(&t, "wh_attack", "https://mcp.example.com/mcp", Some(&arn)).await;
    assert_eq!(answer.status(), 400, "{answer:?}");
    assert!(t.take_work().await.is_empty());
    assert_eq!(snapshot(&t).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_under_another_prefix_is_refused() {
    let t = TestStack::start().await.unwrap();
    let before = snapshot(&t).await;
    for arn in [
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:other/ws_1/ins_1".to_owned(),
        format!(
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:{}ws_1/ins_1",
            t.stack.names.connector_secrets
        ),
        format!(
            "arn:aws:secretsmanager:us-east-1:210987654321:secret:{}ws_1/ins_1",
            t.stack.names.connector_secrets
        ),
        format!("{}ws_1/ins_1/../../webhook", t.stack.connector_secret_prefix()),
    ] {
        let answer = post_install(&t, "wh_attack", "https://mcp.example.com/mcp", Some(&arn)).await;
        assert_eq!(answer.status(), 400, "{arn}: {answer:?}");
    }
    assert!(t.take_work().await.is_empty());
    assert_eq!(snapshot(&t).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_install_stored_with_the_webhook_secret_as_credential_never_reads_it() {
    // An install record written before the rules (or by hand): the worker,
    // and the runner through the same adapter, refuse it before any read.
    let t = TestStack::start().await.unwrap();
    let issues = issues_server().await;
    let mut record = tests::install(
        "ins_1",
        "issues",
        &issues.url(),
        shared::domain::task::install::InstallScope::Workspace,
    );
    record.credential_secret_arn = Some(t.stack.webhook_secret_arn.clone());
    t.admin_store().put_install(&record).await.unwrap();
    let before = snapshot(&t).await;
    let r = t.reconciler();
    let error = Box::pin(r.reconcile_install("ws_1", "ins_1", Utc::now()))
        .await
        .unwrap_err();
    assert!(
        shared::error_chain(&error).contains("credential_secret_arn"),
        "{}",
        shared::error_chain(&error)
    );
    assert_eq!(r.connectors().secret_reads(), 0, "the webhook secret is never read");
    assert!(
        issues.state().read().await.authorizations.is_empty(),
        "nothing was sent, least of all `Bearer whsec_…`"
    );
    assert_eq!(snapshot(&t).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_install_event_that_skipped_intake_with_a_metadata_url_records_nothing() {
    let t = TestStack::start().await.unwrap();
    let before = snapshot(&t).await;
    let r = t.reconciler_with(t.deployed_rules());
    let summary = r
        .apply(
            &installed(
                "ins_1",
                "issues",
                "https://169.254.169.254/latest/meta-data/",
                "workspace",
            ),
            Utc::now(),
        )
        .await
        .unwrap();
    assert_eq!(summary, Default::default());
    assert_eq!(snapshot(&t).await, before);
    assert_eq!(r.connectors().secret_reads(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_resolving_to_loopback_is_refused_when_connecting_with_the_flag_off() {
    let t = TestStack::start().await.unwrap();
    let issues = issues_server().await;
    let port = issues
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    // Its own credential: a refusal after the read would show as a read.
    let arn = secret(&t, &t.stack.connector_secret_name("ws_1", "ins_1"), "token").await;
    let mut record = tests::install(
        "ins_1",
        "issues",
        &format!("https://localhost:{port}/mcp"),
        shared::domain::task::install::InstallScope::Workspace,
    );
    record.credential_secret_arn = Some(arn);
    t.admin_store().put_install(&record).await.unwrap();
    let before = snapshot(&t).await;
    let r = t.reconciler_with(t.deployed_rules());
    let error = Box::pin(r.reconcile_install("ws_1", "ins_1", Utc::now()))
        .await
        .unwrap_err();
    let chain = shared::error_chain(&error);
    assert!(chain.contains("loopback"), "{chain}");
    assert_eq!(r.connectors().secret_reads(), 0);
    assert!(issues.state().read().await.authorizations.is_empty());
    assert_eq!(snapshot(&t).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_over_a_reprinted_timestamp_is_refused() {
    let t = TestStack::start().await.unwrap();
    let r = t.reconciler();
    let secret = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let body = json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}).to_string();
    let now = Utc::now();
    let header = format!("+{}", now.timestamp());
    let over_number = secret.sign("wh_ts", now.timestamp(), body.as_bytes());
    let before = snapshot(&t).await;
    let delivery = Delivery {
        id: Some("wh_ts"),
        timestamp: Some(&header),
        signature: Some(&over_number),
        body: body.as_bytes(),
    };
    let answer = intake(r.store(), r.queue(), &secret, &t.rules(), &delivery, now)
        .await
        .unwrap();
    assert_eq!(answer.status(), 401, "{answer:?}");
    assert!(t.take_work().await.is_empty());
    assert_eq!(snapshot(&t).await, before);
    // Signed over the header's own bytes, the same delivery is taken.
    let over_header = secret.sign_header("wh_ts", &header, body.as_bytes());
    let delivery = Delivery {
        signature: Some(&over_header),
        ..delivery
    };
    let answer = intake(r.store(), r.queue(), &secret, &t.rules(), &delivery, now)
        .await
        .unwrap();
    assert_eq!(answer, WebhookAnswer::Accepted);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_install_id_re_declared_as_another_server_is_refused() {
    let t = TestStack::start().await.unwrap();
    let (issues, chat) = (issues_server().await, chat_server().await);
    let r = approved_world(&t, &issues, &chat).await;
    let other = issues_server().await;
    let before = snapshot(&t).await;
    let summary = r
        .apply(&installed("ins_1", "wiki", &other.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    assert_eq!(summary, Default::default());
    assert_eq!(snapshot(&t).await, before, "the install keeps its server and URL");
    let record = t.item_at(Key::install("ws_1", "ins_1")).await.unwrap();
    assert_eq!(record["server"], "issues");
    assert_eq!(record["url"], issues.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_attached_to_a_personal_install_is_skipped_at_the_door() {
    use shared::app::run::Disposition;
    use shared::domain::run::door::SkipReason;
    let s = tests::RunStack::start().await.unwrap();
    let mine = issues_server().await;
    let arn = secret(&s.t, &s.t.stack.connector_secret_name("ws_1", "ins_me"), "my-own-token").await;
    let mut personal = tests::install(
        "ins_me",
        "issues",
        &mine.url(),
        shared::domain::task::install::InstallScope::Personal,
    );
    personal.credential_secret_arn = Some(arn);
    s.store().put_install(&personal).await.unwrap();
    // A task taken over before the rule: its provenance names the personal install.
    let mut task = tests::connector_task("issues", "weekly_summary", &["list_issues"], &[]);
    task.provenance = shared::domain::task::Provenance::Connector {
        install_id: "ins_me".into(),
        server: "issues".into(),
        prompt: "weekly_summary".into(),
    };
    s.insert(&task).await;
    let at = Utc::now() - chrono::Duration::seconds(5);
    let runner = s.runner();
    let got = runner
        .deliver(
            "m",
            &tests::run_message(&task, at, "e"),
            Utc::now(),
            Utc::now() + chrono::Duration::minutes(5),
        )
        .await
        .unwrap();
    assert_eq!(got, Disposition::Skipped(SkipReason::NotWorkspaceInstall));
    assert_eq!(
        runner.connectors().secret_reads(),
        0,
        "the personal credential is never read"
    );
    assert!(
        mine.state().read().await.prompt_gets.is_empty(),
        "the personal server is never called"
    );
    assert!(s.model.requests().await.is_empty(), "no model call");
    let account = s
        .account(
            &shared::domain::task::budget::Account::Install("acct_ins_me".into()),
            &at.format("%Y-%m").to_string(),
        )
        .await;
    assert!(account.is_none(), "nothing charged to the person's account");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_binding_to_the_declaring_install_is_never_honoured() {
    let t = TestStack::start().await.unwrap();
    let (issues, chat) = (issues_server().await, chat_server().await);
    let r = approved_world(&t, &issues, &chat).await;
    // The binding as an admin could store it before the rule: the need
    // bound to the declaring install, which would lend every one of its tools.
    let store = t.admin_store();
    let task = shared::ports::TaskStore::task(&store, "ws_1", &task_id())
        .await
        .unwrap()
        .unwrap();
    let mut bound = task.clone();
    bound.spec.bindings = [("summary_channel".to_owned(), Some("ins_1".to_owned()))].into();
    bound.version += 1;
    let write = shared::domain::connector::reconcile::Write::change(&task, bound, vec![]);
    assert_eq!(
        store.write_task(&write).await.unwrap(),
        shared::ports::Versioned::Written
    );
    r.apply(&event("prompts.list_changed", "ins_1"), Utc::now())
        .await
        .unwrap();
    let item = t.item_at(Key::task("ws_1", task_id().as_str())).await.unwrap();
    assert_eq!(item["state"], "held", "{item}");
    assert!(
        item["hold"]["need_unbound"]["detail"]
            .as_str()
            .unwrap()
            .contains("declaring install"),
        "{item}"
    );
    let schedule = t.schedule(task_id().as_str()).await;
    assert_eq!(
        schedule.state().map(|s| s.as_str()),
        Some("DISABLED"),
        "it does not fire"
    );
}
