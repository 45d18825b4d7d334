//! Webhook intake (SPEC §6): only a correctly signed, fresh, new delivery of
//! a well-formed event is queued; forged, stale, replayed and malformed ones
//! change nothing.

use chrono::{Duration, Utc};
use serde_json::json;
use shared::app::reconcile::{Delivery, WebhookAnswer, intake};
use shared::domain::connector::webhook::{WebhookError, WebhookSecret};
use tests::TestStack;

fn body() -> Vec<u8> {
    json!({"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}})
        .to_string()
        .into_bytes()
}

/// One webhook delivery to the intake at `now`, with the headers given.
async fn delivered(
    t: &TestStack,
    secret: &WebhookSecret,
    id: &str,
    (ts, sig): (&str, &str),
    body: &[u8],
    now: chrono::DateTime<Utc>,
) -> WebhookAnswer {
    let r = t.reconciler();
    let d = Delivery {
        id: Some(id),
        timestamp: Some(ts),
        signature: Some(sig),
        body,
    };
    intake(r.store(), r.queue(), secret, &t.rules(), &d, now).await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn only_signed_fresh_new_deliveries_are_queued() {
    let t = TestStack::start().await.unwrap();
    let r = t.reconciler();
    let secret = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let now = Utc::now();
    let body = body();
    let ts = now.timestamp().to_string();
    let good = secret.sign("wh_1", now.timestamp(), &body);
    let deliver = |id: &'static str, ts: String, sig: String, body: Vec<u8>| {
        let (t, secret) = (&t, &secret);
        async move { delivered(t, secret, id, (&ts, &sig), &body, now).await }
    };

    // Forged: another key, a tampered body, a missing header, a stale or
    // future timestamp.
    let other = WebhookSecret::parse("whsec_Zm9yZ2VkLWtleQ==")
        .unwrap()
        .sign("wh_1", now.timestamp(), &body);
    assert_eq!(
        deliver("wh_1", ts.clone(), other, body.clone()).await,
        WebhookAnswer::Unauthorized(WebhookError::Signature)
    );
    let mut tampered = body.clone();
    tampered.extend_from_slice(b" ");
    assert_eq!(deliver("wh_1", ts.clone(), good.clone(), tampered).await.status(), 401);
    let old = now - Duration::minutes(6);
    let stale = secret.sign("wh_1", old.timestamp(), &body);
    assert_eq!(
        deliver("wh_1", old.timestamp().to_string(), stale, body.clone()).await,
        WebhookAnswer::Unauthorized(WebhookError::Stale)
    );
    let missing = Delivery {
        id: Some("wh_1"),
        timestamp: Some(&ts),
        signature: None,
        body: &body,
    };
    assert_eq!(
        intake(r.store(), r.queue(), &secret, &t.rules(), &missing, now)
            .await
            .unwrap()
            .status(),
        401
    );
    assert!(t.take_work().await.is_empty(), "nothing queued");
    assert!(t.items().await.is_empty(), "nothing written");

    // Signed but malformed: 400, nothing queued.
    let bad = br#"{"type": "connector.exploded"}"#.to_vec();
    let sig = secret.sign("wh_bad", now.timestamp(), &bad);
    assert_eq!(deliver("wh_bad", ts.clone(), sig, bad).await.status(), 400);
    assert!(t.take_work().await.is_empty());

    // Good: queued in the install's group; replayed: 200 and nothing more.
    assert_eq!(
        deliver("wh_1", ts.clone(), good.clone(), body.clone()).await,
        WebhookAnswer::Accepted
    );
    assert_eq!(
        deliver("wh_1", ts.clone(), good.clone(), body.clone()).await,
        WebhookAnswer::Duplicate
    );
    let work = t.take_work().await;
    assert_eq!(work.len(), 1);
    assert_eq!(work[0].0, "ws_1/ins_1");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&work[0].1).unwrap()["type"],
        "prompts.list_changed"
    );
}

/// `occurred_at` orders an install's lifecycle (SPEC §6) from the webhook
/// on: an install sent before its uninstall but delivered after it is
/// queued, worked, and ignored as stale; an `occurred_at` that is no
/// instant is a 400 and queues nothing.
#[tokio::test(flavor = "multi_thread")]
async fn an_install_delivered_after_its_uninstall_but_sent_before_it_changes_nothing() {
    let t = TestStack::start().await.unwrap();
    let r = t.reconciler();
    let secret = WebhookSecret::parse(&t.stack.webhook_secret).unwrap();
    let now = Utc::now();
    let issues = local::mcp_fixture::McpFixture::start(local::mcp_fixture::FixtureState::default())
        .await
        .unwrap();
    let t0 = now - Duration::minutes(10);
    let send = |id: &'static str, body: serde_json::Value| {
        let (t, secret) = (&t, &secret);
        async move {
            let body = body.to_string().into_bytes();
            let sig = secret.sign(id, now.timestamp(), &body);
            delivered(t, secret, id, (&now.timestamp().to_string(), &sig), &body, now).await
        }
    };
    let at = |minutes: i64| (t0 + Duration::minutes(minutes)).to_rfc3339();
    let uninstalled = json!({"type": "connector.uninstalled", "workspace": "ws_1",
                             "install": {"id": "ins_1"}, "occurred_at": at(2)});
    let installed = json!({"type": "connector.installed", "workspace": "ws_1", "occurred_at": at(1),
        "install": {"id": "ins_1", "server": "issues", "url": issues.url(), "scope": "workspace", "account": "acct_1"}});
    let mut malformed = installed.clone();
    malformed["occurred_at"] = json!("yesterday");
    assert_eq!(send("wh_0", malformed).await.status(), 400);
    assert!(t.take_work().await.is_empty(), "nothing queued");

    assert_eq!(send("wh_2", uninstalled).await, WebhookAnswer::Accepted);
    assert_eq!(send("wh_1", installed).await, WebhookAnswer::Accepted);
    for (_, body) in t.take_work().await {
        r.work(&body, Utc::now()).await.unwrap();
    }
    let install = t
        .item_at(shared::adapters::keys::Key::install("ws_1", "ins_1"))
        .await
        .expect("the uninstall's tombstone");
    assert_eq!(install["status"], "uninstalled", "{install}");
    let why = install["last_error"].as_str().unwrap_or_default();
    assert!(why.contains("stale connector.installed"), "{install}");
}
