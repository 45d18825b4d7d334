//! Platform webhooks to reconcile (SPEC §6): the events, and their
//! Standard Webhooks signature.
//!
//! Invariants: an event is acted on only if one of its `v1` signatures is
//! HMAC-SHA256 over `id.timestamp.body` with the shared secret (the exact
//! bytes of the `webhook-timestamp` header, never a re-printed number),
//! compared in constant time, and its timestamp is within five minutes of now; anything
//! else changes nothing. Ids are unique per event: a repeated id is ignored
//! (the store remembers them).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chrono::{DateTime, Duration, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::endpoint::{EndpointPolicy, check_url};
use crate::domain::task::install::{CredentialPrefix, InstallScope};

/// The replay window either side of now.
pub const TOLERANCE_SECONDS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    #[error("header {0} is missing")]
    Missing(&'static str),
    #[error("webhook-timestamp is not Unix seconds")]
    Timestamp,
    #[error("webhook-timestamp is more than {TOLERANCE_SECONDS} s from now")]
    Stale,
    #[error("no signature matches")]
    Signature,
}

/// A Standard Webhooks secret, `whsec_<base64>`, keyed once.
#[derive(Clone)]
pub struct WebhookSecret(Hmac<Sha256>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl WebhookSecret {
    pub fn parse(text: &str) -> Option<Self> {
        let key = STANDARD.decode(text.trim().strip_prefix("whsec_")?).ok()?;
        if key.is_empty() {
            return None;
        }
        <Hmac<Sha256> as KeyInit>::new_from_slice(&key).ok().map(Self)
    }

    /// Whether `other` is the same key (a rotated secret is another): their
    /// signatures of one probe agree.
    pub fn same_key(&self, other: &Self) -> bool {
        self.sign("probe", 0, b"") == other.sign("probe", 0, b"")
    }

    /// `v1,<base64>` for these parts (what a sender writes; tests use it).
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        self.sign_header(id, &timestamp.to_string(), body)
    }

    /// `v1,<base64>` over the timestamp header exactly as sent.
    pub fn sign_header(&self, id: &str, timestamp: &str, body: &[u8]) -> String {
        let mut mac = self.mac();
        mac.update(format!("{id}.{timestamp}.").as_bytes());
        mac.update(body);
        format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
    }

    fn mac(&self) -> Hmac<Sha256> {
        self.0.clone()
    }

    /// Verifies the three Standard Webhooks headers against the raw body.
    pub fn verify(
        &self,
        id: Option<&str>,
        timestamp: Option<&str>,
        signatures: Option<&str>,
        body: &[u8],
        now: DateTime<Utc>,
    ) -> Result<(), WebhookError> {
        let id = id.ok_or(WebhookError::Missing("webhook-id"))?;
        let timestamp = timestamp.ok_or(WebhookError::Missing("webhook-timestamp"))?;
        let signatures = signatures.ok_or(WebhookError::Missing("webhook-signature"))?;
        let seconds: i64 = timestamp.trim().parse().map_err(|_| WebhookError::Timestamp)?;
        let sent = DateTime::from_timestamp(seconds, 0).ok_or(WebhookError::Timestamp)?;
        if (now - sent).abs() > Duration::seconds(TOLERANCE_SECONDS) {
            return Err(WebhookError::Stale);
        }
        for candidate in signatures.split_whitespace() {
            let Some(encoded) = candidate.strip_prefix("v1,") else {
                continue;
            };
            let Ok(signature) = STANDARD.decode(encoded) else {
                continue;
            };
            // The header's own bytes: what the sender signed.
            let mut mac = self.mac();
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            // Constant-time comparison.
            if mac.verify_slice(&signature).is_ok() {
                return Ok(());
            }
        }
        Err(WebhookError::Signature)
    }
}

/// What an install may name in this deployment: where its server may be
/// (`ALLOW_LOOPBACK_CONNECTORS`) and which credential secret it may name
/// (`CONNECTOR_SECRET_PREFIX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallRules {
    pub endpoint: EndpointPolicy,
    pub credentials: CredentialPrefix,
}

/// An install as the platform describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallInfo {
    pub id: String,
    pub server: String,
    pub url: String,
    pub scope: InstallScope,
    pub account: String,
    #[serde(default)]
    pub credential_secret_arn: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstallRef {
    pub id: String,
}

/// The body's `occurred_at`, read apart from the event (every type may
/// carry it): `None` when absent, an error (the 400's message) when it is
/// no RFC 3339 instant.
pub fn occurred_at(body: &[u8]) -> Result<Option<DateTime<Utc>>, String> {
    #[derive(Deserialize)]
    struct When {
        #[serde(default)]
        occurred_at: Option<String>,
    }
    let when: When = serde_json::from_slice(body).map_err(|e| format!("malformed event: {e}"))?;
    when.occurred_at
        .map(|text| {
            DateTime::parse_from_rfc3339(&text)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| "occurred_at must be an RFC 3339 instant".to_owned())
        })
        .transpose()
}

/// A platform event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "connector.installed")]
    Installed { workspace: String, install: InstallInfo },
    #[serde(rename = "connector.connected")]
    Connected { workspace: String, install: InstallRef },
    #[serde(rename = "connector.uninstalled")]
    Uninstalled { workspace: String, install: InstallRef },
    #[serde(rename = "prompts.list_changed")]
    ListChanged { workspace: String, install: InstallRef },
}

fn valid_id(text: &str) -> bool {
    !text.is_empty() && text.len() <= 128 && !text.chars().any(|c| c == '#' || c.is_whitespace() || c.is_control())
}

impl Event {
    /// Parses and checks a webhook body; the error is the 400's message.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let event: Event = serde_json::from_slice(body).map_err(|e| format!("malformed event: {e}"))?;
        if !valid_id(event.workspace()) || !valid_id(event.install_id()) {
            return Err("workspace and install id must be 1-128 characters without `#` or spaces".into());
        }
        if let Event::Installed { install, .. } = &event {
            let url_ok = install.url.starts_with("https://") || install.url.starts_with("http://");
            if !url_ok || !valid_id(&install.server) || !valid_id(&install.account) {
                return Err("install needs an http(s) url, a server name and an account".into());
            }
        }
        Ok(event)
    }

    /// The deployment's rules on what an install may name (SPEC §6): its
    /// URL ([`check_url`]) and its credential ([`CredentialPrefix`]). The
    /// error is the 400's message.
    pub fn admissible(&self, rules: &InstallRules) -> Result<(), String> {
        let Event::Installed { workspace, install } = self else {
            return Ok(());
        };
        check_url(&install.url, rules.endpoint).map_err(|e| e.to_string())?;
        if let Some(arn) = &install.credential_secret_arn {
            rules
                .credentials
                .check(arn, workspace, &install.id)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    pub fn workspace(&self) -> &str {
        match self {
            Event::Installed { workspace, .. }
            | Event::Connected { workspace, .. }
            | Event::Uninstalled { workspace, .. }
            | Event::ListChanged { workspace, .. } => workspace,
        }
    }

    pub fn install_id(&self) -> &str {
        match self {
            Event::Installed { install, .. } => &install.id,
            Event::Connected { install, .. }
            | Event::Uninstalled { install, .. }
            | Event::ListChanged { install, .. } => &install.id,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn secret() -> WebhookSecret {
        WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap()
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 30, 12, 0, 0).unwrap()
    }

    #[test]
    fn the_standard_webhooks_reference_vector_verifies() {
        // From the Standard Webhooks specification's test vectors.
        let body = br#"{"test": 2432232314}"#;
        let id = "msg_p5jXN8AQM9LWM0D4loKWxJek";
        let ts = 1614265330;
        let signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
        assert_eq!(secret().sign(id, ts, body), signature);
        let at = Utc.timestamp_opt(ts, 0).unwrap();
        assert_eq!(
            secret().verify(Some(id), Some(&ts.to_string()), Some(signature), body, at),
            Ok(())
        );
    }

    #[test]
    fn forged_stale_and_incomplete_deliveries_are_refused() {
        let body = br#"{"type":"connector.connected"}"#;
        let ts = now().timestamp();
        let good = secret().sign("id1", ts, body);
        let verify = |id, t: &str, sig: &str, body: &[u8], at| secret().verify(Some(id), Some(t), Some(sig), body, at);
        assert_eq!(verify("id1", &ts.to_string(), &good, body, now()), Ok(()));
        assert_eq!(
            verify("id1", &ts.to_string(), &format!("v1,bm9wZQ== {good}"), body, now()),
            Ok(()),
            "key rotation: any of several"
        );
        assert_eq!(
            verify("id2", &ts.to_string(), &good, body, now()),
            Err(WebhookError::Signature),
            "the id is signed"
        );
        assert_eq!(
            verify("id1", &ts.to_string(), &good, b"{}", now()),
            Err(WebhookError::Signature),
            "the body is signed"
        );
        let other = WebhookSecret::parse("whsec_b3RoZXItc2VjcmV0")
            .unwrap()
            .sign("id1", ts, body);
        assert_eq!(
            verify("id1", &ts.to_string(), &other, body, now()),
            Err(WebhookError::Signature)
        );
        assert_eq!(
            verify("id1", &ts.to_string(), "v2,abc", body, now()),
            Err(WebhookError::Signature)
        );
        assert_eq!(
            verify("id1", &ts.to_string(), &good, body, now() + Duration::seconds(301)),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify("id1", &ts.to_string(), &good, body, now() - Duration::seconds(301)),
            Err(WebhookError::Stale)
        );
        assert_eq!(
            verify("id1", "yesterday", &good, body, now()),
            Err(WebhookError::Timestamp)
        );
        assert_eq!(
            secret().verify(None, Some("1"), Some(&good), body, now()),
            Err(WebhookError::Missing("webhook-id"))
        );
        assert!(WebhookSecret::parse("not-a-secret").is_none());
    }

    #[test]
    fn the_signature_covers_the_timestamp_header_as_sent() {
        let body = br#"{"type":"connector.connected"}"#;
        let ts = now().timestamp();
        for header in [format!("+{ts}"), format!("0{ts}"), format!("{ts} ")] {
            let over_header = secret().sign_header("id1", &header, body);
            assert_eq!(
                secret().verify(Some("id1"), Some(&header), Some(&over_header), body, now()),
                Ok(()),
                "{header:?}: signed over its bytes"
            );
            let over_number = secret().sign("id1", ts, body);
            assert_eq!(
                secret().verify(Some("id1"), Some(&header), Some(&over_number), body, now()),
                Err(WebhookError::Signature),
                "{header:?}: a signature over the re-printed number is not one over the header"
            );
        }
    }

    #[test]
    fn installs_name_only_public_urls_and_their_own_credential() {
        let credentials =
            CredentialPrefix::parse("arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/").unwrap();
        let off = &InstallRules {
            endpoint: EndpointPolicy { allow_loopback: false },
            credentials: credentials.clone(),
        };
        let on = &InstallRules {
            endpoint: EndpointPolicy { allow_loopback: true },
            credentials,
        };
        let event = |url: &str, arn: Option<&str>| {
            let body = serde_json::json!({"type": "connector.installed", "workspace": "ws_1",
                "install": {"id": "ins_1", "server": "issues", "url": url, "scope": "workspace",
                            "account": "acct_1", "credential_secret_arn": arn}});
            Event::parse(body.to_string().as_bytes()).unwrap()
        };
        let own = "arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/ws_1/ins_1-Ab12Cd";
        assert_eq!(event("https://mcp.example.com/mcp", Some(own)).admissible(off), Ok(()));
        assert_eq!(event("https://mcp.example.com/mcp", None).admissible(off), Ok(()));
        assert_eq!(event("http://127.0.0.1:9/mcp", None).admissible(on), Ok(()));
        for url in [
            "http://127.0.0.1:9/mcp",
            "https://169.254.169.254/",
            "https://10.0.0.1/",
            "http://mcp.example.com/mcp",
            "https://localhost/mcp",
        ] {
            assert!(event(url, None).admissible(off).is_err(), "{url}");
        }
        for arn in [
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:webhook-Ab12Cd",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/ws_2/ins_1",
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:other/ws_1/ins_1",
        ] {
            assert!(
                event("https://mcp.example.com/mcp", Some(arn)).admissible(off).is_err(),
                "{arn}"
            );
        }
        let changed =
            Event::parse(br#"{"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "i"}}"#).unwrap();
        assert_eq!(changed.admissible(off), Ok(()));
    }

    #[test]
    fn events_parse_and_bad_bodies_say_why() {
        let installed = br#"{"type": "connector.installed", "workspace": "ws_1",
            "install": {"id": "ins_1", "server": "issues", "url": "https://mcp.example.com/mcp",
                        "scope": "workspace", "account": "acct_1", "credential_secret_arn": "arn:x"}}"#;
        assert!(matches!(Event::parse(installed), Ok(Event::Installed { .. })));
        let changed = br#"{"type": "prompts.list_changed", "workspace": "ws_1", "install": {"id": "ins_1"}}"#;
        assert_eq!(Event::parse(changed).unwrap().install_id(), "ins_1");
        for bad in [
            &b"{}"[..],
            b"not json",
            br#"{"type": "connector.exploded", "workspace": "w", "install": {"id": "i"}}"#,
            br#"{"type": "connector.connected", "workspace": "w#1", "install": {"id": "i"}}"#,
        ] {
            assert!(Event::parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
