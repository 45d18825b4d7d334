//! An install is a connector server installed in a workspace: where its MCP
//! server answers, with which credential, at which scope, charged to which
//! account. Reconcile keeps install items from the platform's webhooks.
//!
//! Invariants: an uninstall changes no task (the door skips their runs, and a
//! reinstall lets the next run through); a `personal` install is recorded but
//! never bound to a need and never offers tools to a connector task.

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
}

impl Install {
    pub fn is_installed(&self) -> bool {
        self.status == InstallStatus::Installed
    }

    /// Whether its tools may be offered to a connector task bound to it.
    pub fn may_serve_a_need(&self) -> bool {
        self.is_installed() && self.scope == InstallScope::Workspace
    }
}
