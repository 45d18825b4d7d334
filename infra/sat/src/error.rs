//! What can stop a `sat` command, each with what to do about it. An error
//! ends the command with exit status 1 (a usage error, clap's, with 2); a
//! command that ran but found something wrong (`check` refusing a
//! declaration, `verify` missing a step) ends with 3.

use std::path::PathBuf;

/// Exit status of a command that ran and found something wrong.
pub const EXIT_FINDINGS: u8 = 3;
/// Exit status of an error.
pub const EXIT_ERROR: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SatError {
    #[error(
        "which stack? Give --stack <name> (a deployed stack, read through your AWS credentials) \
         or --env-file <path> (the local stack's environment: infra/scripts/local.sh --serve writes \
         target/local.env)"
    )]
    NoStack,
    #[error("the environment file {path}: {reason}")]
    EnvFile { path: PathBuf, reason: String },
    #[error("stack {stack}: {reason}")]
    Stack { stack: String, reason: String },
    #[error(
        "{source_name} does not name {output}: {why}. Redeploy the stack from this repository's template.yaml \
         (or restart infra/scripts/local.sh --serve) so it has the output"
    )]
    MissingOutput {
        source_name: String,
        output: &'static str,
        why: &'static str,
    },
    #[error("{setting} is malformed: {reason}")]
    Setting { setting: &'static str, reason: String },
    #[error("{action}: {message}")]
    Aws { action: String, message: String },
    #[error("the connector at {url}: {message}")]
    Connector { url: String, message: String },
    #[error("{0}")]
    Usage(String),
    #[error("no task {task_id}{where_}")]
    NotFound { task_id: String, where_: String },
    #[error("reading the table: {0}")]
    Store(#[from] shared::ports::StoreError),
    #[error("{0}")]
    Admin(String),
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl SatError {
    /// An AWS call that failed, with the SDK's whole error context (the
    /// service's code and message, or why no request could be made: no
    /// credentials, no region, no network).
    pub fn aws(action: impl Into<String>, error: impl std::error::Error) -> Self {
        let mut message = shared::error_chain(&error);
        if message.contains("loading credentials") || message.contains("no credentials") {
            message = format!(
                "no usable AWS credentials ({message}); give --profile (after `aws sso login` for an SSO profile), \
                 or set AWS_PROFILE or the AWS_ACCESS_KEY_ID variables"
            );
        }
        SatError::Aws {
            action: action.into(),
            message,
        }
    }
}
