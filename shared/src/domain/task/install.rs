//! An install is a connector server installed in a workspace: where its MCP
//! server answers, with which credential, at which scope, charged to which
//! account. Reconcile keeps install items from the platform's webhooks.
//!
//! Invariants: an uninstall changes no task (the door skips their runs, and a
//! reinstall lets the next run through); a `personal` install is recorded but
//! never bound to a need, never offers tools to a connector task, and never
//! declares, owns or runs one (SPEC §5); an install's credential is a secret
//! named `<ConnectorSecretPrefix><workspace>/<install_id>` in the
//! deployment's account and region, and nothing else ([`CredentialPrefix`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallScope {
    Workspace,
    Personal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallStatus {
    Installed,
    Uninstalled,
}

/// A lifecycle event's place in its install's order (SPEC §6): when the
/// change happened (the body's `occurred_at`, the same on every retry of
/// one event; without it, when its `webhook-id` was first seen), then its
/// `webhook-id`, so two events of one instant are ordered too.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Stamp {
    pub at: DateTime<Utc>,
    pub id: String,
}

impl Stamp {
    /// Whether an event at `self` comes before the last one applied to its
    /// install (`last`): stale, recorded and ignored. The same event again
    /// (a redelivery) is not stale: applying it twice changes nothing.
    pub fn is_stale(&self, last: Option<&Stamp>) -> bool {
        last.is_some_and(|last| self < last)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Install {
    pub install_id: String,
    pub workspace: String,
    /// The server's name: with the prompt name, the key of its tasks.
    pub server: String,
    /// The MCP server's streamable HTTP endpoint.
    pub url: String,
    pub scope: InstallScope,
    /// The account its runs are charged to.
    pub account: String,
    /// A Secrets Manager secret holding the bearer token, if the server needs one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_secret_arn: Option<String>,
    pub status: InstallStatus,
    pub updated_at: DateTime<Utc>,
    /// Prompts whose latest declaration was refused, and why (reconcile).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub declaration_errors: std::collections::BTreeMap<String, String>,
    /// Why the latest reconcile of this install failed (its server hung,
    /// refused or could not be read), with when; cleared by one that works.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the latest lifecycle event applied to it (`connector.installed`
    /// or `connector.uninstalled`) happened, and its `webhook-id`
    /// (`webhook::Stamp`): an earlier one arriving later is stale and
    /// ignored. An install an earlier release recorded has the time alone
    /// (the webhook's send time then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle_id: Option<String>,
}

impl Install {
    /// The record an uninstall of an install not seen yet leaves (SPEC §6):
    /// uninstalled, naming no server, carrying the uninstall's place in the
    /// install's order, so its own `connector.installed`, arriving later
    /// but sent before, is stale.
    pub fn tombstone(workspace: &str, install_id: &str, stamp: &Stamp, now: DateTime<Utc>) -> Self {
        Self {
            install_id: install_id.to_owned(),
            workspace: workspace.to_owned(),
            server: String::new(),
            url: String::new(),
            scope: InstallScope::Workspace,
            account: String::new(),
            credential_secret_arn: None,
            status: InstallStatus::Uninstalled,
            updated_at: now,
            declaration_errors: std::collections::BTreeMap::new(),
            last_error: None,
            lifecycle_at: Some(stamp.at),
            lifecycle_id: Some(stamp.id.clone()),
        }
    }

    /// Whether this is an uninstall's tombstone: no server was ever seen.
    pub fn is_tombstone(&self) -> bool {
        self.server.is_empty()
    }

    /// The latest lifecycle event applied to it, in the install's order.
    pub fn lifecycle(&self) -> Option<Stamp> {
        self.lifecycle_at.map(|at| Stamp {
            at,
            id: self.lifecycle_id.clone().unwrap_or_default(),
        })
    }

    /// Keeps `stamp` as the latest lifecycle event applied.
    pub fn stamp(&mut self, stamp: &Stamp) {
        self.lifecycle_at = Some(stamp.at);
        self.lifecycle_id = Some(stamp.id.clone());
    }

    pub fn is_installed(&self) -> bool {
        self.status == InstallStatus::Installed
    }

    /// Whether its tools may be offered to a connector task bound to it.
    pub fn may_serve_a_need(&self) -> bool {
        self.is_installed() && self.scope == InstallScope::Workspace
    }

    /// Whether it may declare, own and run connector tasks: a workspace
    /// install that is installed.
    pub fn may_own_tasks(&self) -> bool {
        self.is_installed() && self.scope == InstallScope::Workspace
    }
}

/// Why a credential secret ARN is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CredentialError {
    #[error("credential_secret_arn must name the secret `{expected}` (optionally with its `-XXXXXX` suffix)")]
    Outside { expected: String },
    #[error("no credential can be named for workspace `{workspace}` and install `{install}`: {why}")]
    Unnameable {
        workspace: String,
        install: String,
        why: &'static str,
    },
    #[error(
        "CONNECTOR_SECRET_PREFIX must be a Secrets Manager ARN prefix `arn:<partition>:secretsmanager:<region>:<account>:secret:<prefix>`"
    )]
    Prefix,
}

/// `CONNECTOR_SECRET_PREFIX`: the ARN prefix of connector credentials,
/// `arn:<partition>:secretsmanager:<region>:<account>:secret:<ConnectorSecretPrefix>`.
/// The install `i` of workspace `w` may name exactly the secret
/// `<prefix>w/i`, with or without the six-character suffix Secrets Manager
/// appends to every ARN; never the webhook secret, another install's or
/// another workspace's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialPrefix(String);

fn is_suffix(text: &str) -> bool {
    text.len() == 7 && text.starts_with('-') && text[1..].chars().all(|c| c.is_ascii_alphanumeric())
}

impl CredentialPrefix {
    pub fn parse(text: &str) -> Result<Self, CredentialError> {
        let parts: Vec<&str> = text.splitn(7, ':').collect();
        let well_formed = parts.len() == 7
            && parts[0] == "arn"
            && !parts[1].is_empty()
            && parts[2] == "secretsmanager"
            && !parts[3].is_empty()
            && parts[4].len() == 12
            && parts[4].chars().all(|c| c.is_ascii_digit())
            && parts[5] == "secret"
            && !parts[6].is_empty()
            && !parts[6].contains(['*', '?', ':']);
        if well_formed {
            Ok(Self(text.to_owned()))
        } else {
            Err(CredentialError::Prefix)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The ARN (without suffix) of the one secret this install may name.
    pub fn expected(&self, workspace: &str, install_id: &str) -> Result<String, CredentialError> {
        let unnameable = |why| CredentialError::Unnameable {
            workspace: workspace.to_owned(),
            install: install_id.to_owned(),
            why,
        };
        // `/` would let `a/b` + `c` name `a` + `b/c`'s secret; a trailing
        // `-XXXXXX` would let `i` name `i-XXXXXX`'s secret as if suffixed.
        if workspace.is_empty() || install_id.is_empty() || workspace.contains('/') || install_id.contains('/') {
            return Err(unnameable("an id is empty or holds `/`"));
        }
        let cut = install_id.len().saturating_sub(7);
        if cut > 0 && install_id.is_char_boundary(cut) && is_suffix(&install_id[cut..]) {
            return Err(unnameable(
                "the install id ends like a Secrets Manager suffix (`-XXXXXX`)",
            ));
        }
        Ok(format!("{}{workspace}/{install_id}", self.0))
    }

    /// Checks that `arn` names this install's own credential.
    pub fn check(&self, arn: &str, workspace: &str, install_id: &str) -> Result<(), CredentialError> {
        let expected = self.expected(workspace, install_id)?;
        match arn.strip_prefix(expected.as_str()) {
            Some("") => Ok(()),
            Some(rest) if is_suffix(rest) => Ok(()),
            _ => Err(CredentialError::Outside { expected }),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;
    use chrono::TimeZone;

    /// An install of `server` in `ws_1`.
    pub fn install(id: &str, server: &str, scope: InstallScope, status: InstallStatus) -> Install {
        Install {
            install_id: id.into(),
            workspace: "ws_1".into(),
            server: server.into(),
            url: "https://mcp.example.com/mcp".into(),
            scope,
            account: "acct".into(),
            credential_secret_arn: None,
            status,
            updated_at: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            declaration_errors: Default::default(),
            last_error: None,
            lifecycle_at: None,
            lifecycle_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:connectors/";

    #[test]
    fn only_the_installs_own_secret_is_admitted() {
        let p = CredentialPrefix::parse(PREFIX).unwrap();
        assert_eq!(p.check(&format!("{PREFIX}ws_1/ins_1"), "ws_1", "ins_1"), Ok(()));
        assert_eq!(p.check(&format!("{PREFIX}ws_1/ins_1-AbC123"), "ws_1", "ins_1"), Ok(()));
        for arn in [
            // The webhook secret, another prefix, account, region or partition.
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:webhook-AbC123".to_owned(),
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:other/ws_1/ins_1".to_owned(),
            "arn:aws:secretsmanager:eu-west-1:210987654321:secret:connectors/ws_1/ins_1".to_owned(),
            "arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/ws_1/ins_1".to_owned(),
            "arn:aws-cn:secretsmanager:eu-west-1:123456789012:secret:connectors/ws_1/ins_1".to_owned(),
            // Another workspace's or install's, a longer name, a wildcard, a bare name.
            format!("{PREFIX}ws_2/ins_1"),
            format!("{PREFIX}ws_1/ins_2"),
            format!("{PREFIX}ws_1/ins_10"),
            format!("{PREFIX}ws_1/ins_1/extra"),
            format!("{PREFIX}ws_1/ins_1-AbC12"),
            format!("{PREFIX}ws_1/ins_1-AbC1234"),
            format!("{PREFIX}ws_1/ins_1-AbC12!"),
            format!("{PREFIX}ws_1/*"),
            "connectors/ws_1/ins_1".to_owned(),
            String::new(),
        ] {
            assert!(
                matches!(p.check(&arn, "ws_1", "ins_1"), Err(CredentialError::Outside { .. })),
                "{arn}"
            );
        }
        // Ids that could name another install's secret name none.
        assert!(matches!(
            p.check(&format!("{PREFIX}ws/a/b"), "ws/a", "b"),
            Err(CredentialError::Unnameable { .. })
        ));
        assert!(matches!(
            p.check(&format!("{PREFIX}ws_1/ins-abc123"), "ws_1", "ins-abc123"),
            Err(CredentialError::Unnameable { .. })
        ));
    }

    #[test]
    fn the_prefix_is_a_secrets_manager_arn_prefix() {
        assert!(CredentialPrefix::parse(PREFIX).is_ok());
        for bad in [
            "connectors/",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:",
            "arn:aws:secretsmanager:eu-west-1:1234:secret:connectors/",
            "arn:aws:s3:eu-west-1:123456789012:secret:connectors/",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:connectors/*",
        ] {
            assert_eq!(CredentialPrefix::parse(bad), Err(CredentialError::Prefix), "{bad}");
        }
    }
}
