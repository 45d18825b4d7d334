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
        let r = &r;
        let secret = &secret;
        let rules = t.rules();
        async move {
            let d = Delivery {
                id: Some(id),
                timestamp: Some(&ts),
                signature: Some(&sig),
                body: &body,
            };
            intake(r.store(), r.queue(), secret, &rules, &d, now).await.unwrap()
        }
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
