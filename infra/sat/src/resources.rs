//! Where a stack's resources are: a deployed stack's CloudFormation
//! outputs and parameters, read through the standard AWS credential chain
//! (environment, SSO and other profiles, `credential_process`, instance
//! roles), or the local stack's environment file, which names the same
//! outputs and holds the SDK's local endpoint and dummy credentials.
//!
//! Every output `sat` reads is in [`OUTPUTS`], as `template.yaml` names it
//! (a test holds the two together); the deployment settings it reads
//! (ceilings, model, prices) are the functions' own variables (SPEC §9),
//! taken from the stack's parameters or from the environment file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use aws_config::{BehaviorVersion, Region, SdkConfig};

use crate::error::SatError;

/// The stack outputs `sat` reads, and what for.
pub const OUTPUTS: [(&str, &str); 12] = [
    ("TasksTableName", "`describe` and `verify` read tasks and runs there"),
    (
        "ScheduleGroupName",
        "`describe` reads the task's Scheduler schedule there",
    ),
    ("RunsQueueUrl", "`redrive` returns run messages there"),
    (
        "RunsDeadLetterQueueUrl",
        "`redrive` reads the runs queue's dead letters there",
    ),
    (
        "SchedulerDeadLetterQueueUrl",
        "`redrive` reads the deliveries Scheduler could not make there",
    ),
    (
        "ReconcileQueueUrl",
        "`redrive` returns reconcile work and the daily pass there, and `verify` sends its probe chain there",
    ),
    (
        "ReconcileDeadLetterQueueUrl",
        "`redrive` reads reconcile's dead letters there",
    ),
    (
        "RunFinishedQueueUrl",
        "`redrive` returns notifications there and `verify` waits for one there",
    ),
    (
        "RunFinishedQueueDeadLetterQueueUrl",
        "`redrive` reads the notifications the platform did not take there",
    ),
    (
        "RunFinishedDeadLetterQueueUrl",
        "`redrive` lists the stream records the notification pipe could not deliver there",
    ),
    ("CreateFunctionArn", "`verify` creates its reminder through it"),
    (
        "EventBusName",
        "`verify` reads its reminder's notification there, through a rule of its own",
    ),
];

/// The deployment settings `sat` reads: the functions' variable, and the
/// template parameter that sets it.
const SETTINGS: [(&str, &str); 3] = [
    ("SCHEDULE_CEILINGS", "ScheduleCeilings"),
    ("MODEL_ID", "ModelId"),
    ("MODEL_PRICES", "ModelPrices"),
];

/// How `sat` was told where the stack is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Stack(String),
    EnvFile(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Stack(name) => write!(f, "stack {name}"),
            Source::EnvFile(path) => write!(f, "the environment file {}", path.display()),
        }
    }
}

/// What the command line says about where to look.
#[derive(Debug, Clone, Default)]
pub struct Where {
    pub stack: Option<String>,
    pub env_file: Option<PathBuf>,
    pub profile: Option<String>,
    pub region: Option<String>,
}

/// A stack's resources and settings, and the SDK configuration to reach them.
#[derive(Debug, Clone)]
pub struct Resources {
    pub source: Source,
    pub sdk: SdkConfig,
    outputs: BTreeMap<String, String>,
    settings: BTreeMap<String, String>,
    /// The Lambda endpoint of the local stack's Invoke API (the SDK's
    /// `AWS_ENDPOINT_URL_LAMBDA`, from the environment file).
    pub lambda_endpoint: Option<String>,
    /// Whether the functions send traces: the stack's `Traces` parameter is
    /// `enabled`, or the environment file names a `TRACES_ENDPOINT`.
    pub traces: bool,
}

impl Resources {
    /// Finds the stack from the command line; `NoStack` when it names none.
    pub async fn locate(place: &Where) -> Result<Self, SatError> {
        match (&place.stack, &place.env_file) {
            (_, Some(path)) => Self::from_env_file(path).await,
            (Some(stack), None) => Self::from_stack(stack, place).await,
            (None, None) => Err(SatError::NoStack),
        }
    }

    /// The local stack, from its environment file (`KEY='value'` lines).
    pub async fn from_env_file(path: &Path) -> Result<Self, SatError> {
        let unreadable = |reason: String| SatError::EnvFile {
            path: path.to_owned(),
            reason,
        };
        let pairs = dotenvy::from_path_iter(path).map_err(|e| unreadable(e.to_string()))?;
        let mut values = BTreeMap::new();
        for pair in pairs {
            let (key, value) = pair.map_err(|e| unreadable(e.to_string()))?;
            values.insert(key, value);
        }
        let endpoint = values.get("AWS_ENDPOINT_URL").cloned().ok_or_else(|| {
            unreadable(
                "it has no AWS_ENDPOINT_URL: it is not a local stack's environment \
                 (infra/scripts/local.sh --serve writes one)"
                    .into(),
            )
        })?;
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(shared::adapters::tls::sdk_http_client(
                &shared::adapters::tls::Tls::process(),
            ))
            .endpoint_url(endpoint);
        let region = values
            .get("AWS_REGION")
            .cloned()
            .unwrap_or_else(|| "us-east-1".to_owned());
        loader = loader.region(Region::new(region));
        if let (Some(key), Some(secret)) = (values.get("AWS_ACCESS_KEY_ID"), values.get("AWS_SECRET_ACCESS_KEY")) {
            loader = loader.credentials_provider(aws_sdk_sqs::config::Credentials::new(
                key.clone(),
                secret.clone(),
                None,
                None,
                "sat-env-file",
            ));
        }
        let sdk = loader.load().await;
        let settings = SETTINGS
            .iter()
            .filter_map(|(name, _)| values.get(*name).map(|v| ((*name).to_owned(), v.clone())))
            .collect();
        Ok(Self {
            source: Source::EnvFile(path.to_owned()),
            sdk,
            lambda_endpoint: values.get("AWS_ENDPOINT_URL_LAMBDA").cloned(),
            traces: values.get("TRACES_ENDPOINT").is_some_and(|v| !v.is_empty()),
            settings,
            outputs: values,
        })
    }

    /// A deployed stack: its outputs and parameters from CloudFormation,
    /// through the standard credential chain.
    pub async fn from_stack(stack: &str, place: &Where) -> Result<Self, SatError> {
        let mut loader = aws_config::defaults(BehaviorVersion::latest()).http_client(
            shared::adapters::tls::sdk_http_client(&shared::adapters::tls::Tls::process()),
        );
        if let Some(profile) = &place.profile {
            loader = loader.profile_name(profile);
        }
        if let Some(region) = &place.region {
            loader = loader.region(Region::new(region.clone()));
        }
        let sdk = loader.load().await;
        if sdk.region().is_none() {
            return Err(SatError::Stack {
                stack: stack.to_owned(),
                reason: "no AWS region: give --region, or set AWS_REGION or a profile's region".into(),
            });
        }
        let described = crate::aws::describe_stack(&sdk, stack).await?;
        let settings = SETTINGS
            .iter()
            .filter_map(|(name, parameter)| {
                described
                    .parameters
                    .get(*parameter)
                    .map(|v| ((*name).to_owned(), v.clone()))
            })
            .collect();
        Ok(Self {
            source: Source::Stack(stack.to_owned()),
            sdk,
            outputs: described.outputs,
            settings,
            lambda_endpoint: None,
            traces: described.parameters.get("Traces").is_some_and(|v| v == "enabled"),
        })
    }

    /// An output `sat` reads (one of [`OUTPUTS`]).
    pub fn output(&self, name: &'static str) -> Result<&str, SatError> {
        let why = OUTPUTS
            .iter()
            .find(|(output, _)| *output == name)
            .map_or("sat reads it", |(_, why)| *why);
        self.outputs
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SatError::MissingOutput {
                source_name: self.source.to_string(),
                output: name,
                why,
            })
    }

    /// A deployment setting by its variable name (`SCHEDULE_CEILINGS`, …).
    pub fn setting(&self, name: &str) -> Option<&str> {
        self.settings.get(name).map(String::as_str)
    }
}
