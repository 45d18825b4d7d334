//! Configuration, from the environment only, parsed once at start (SPEC §9).
//!
//! Invariant: this module is the only reader of the environment. Each function
//! reads only the variables it needs, and a missing or malformed variable
//! fails the start with its name. Parsers take a lookup function so tests can
//! pass a map instead of mutating the process environment.

use crate::domain::task::limits::{Ceilings, Limits};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("environment variable {0} is not set")]
    Missing(&'static str),
    #[error("environment variable {name} is malformed: {reason}")]
    Malformed { name: &'static str, reason: String },
}

/// Reads variables through a lookup, so tests need not touch the process env.
pub struct Env<F>(F);

impl Env<fn(&str) -> Option<String>> {
    /// The process environment.
    pub fn process() -> Self {
        Env(|name| std::env::var(name).ok())
    }
}

impl<F: Fn(&str) -> Option<String>> Env<F> {
    pub fn from_lookup(lookup: F) -> Self {
        Env(lookup)
    }

    /// A variable that may be absent: `None` when unset or blank.
    pub fn optional(&self, name: &'static str) -> Option<String> {
        (self.0)(name).filter(|v| !v.trim().is_empty())
    }

    pub fn required(&self, name: &'static str) -> Result<String, ConfigError> {
        match (self.0)(name) {
            Some(v) if !v.trim().is_empty() => Ok(v),
            _ => Err(ConfigError::Missing(name)),
        }
    }

    /// A flag is exactly `true` or `false`.
    pub fn flag(&self, name: &'static str) -> Result<bool, ConfigError> {
        match self.required(name)?.as_str() {
            "true" => Ok(true),
            "false" => Ok(false),
            other => Err(ConfigError::Malformed {
                name,
                reason: format!("`{other}` is neither `true` nor `false`"),
            }),
        }
    }

    pub fn json<T: serde::de::DeserializeOwned>(&self, name: &'static str) -> Result<T, ConfigError> {
        serde_json::from_str(&self.required(name)?).map_err(|e| ConfigError::Malformed {
            name,
            reason: e.to_string(),
        })
    }
}

/// `AGENT_SCHEDULE_API_ENABLED` and `AGENT_SCHEDULE_WORKER_ENABLED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flags {
    pub api_enabled: bool,
    pub worker_enabled: bool,
}

impl Flags {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            api_enabled: env.flag("AGENT_SCHEDULE_API_ENABLED")?,
            worker_enabled: env.flag("AGENT_SCHEDULE_WORKER_ENABLED")?,
        })
    }

    /// Create and describe answer only when both are on (SPEC §4 rule 1).
    pub fn create_enabled(&self) -> bool {
        self.api_enabled && self.worker_enabled
    }
}

/// `SCHEDULE_CEILINGS`: a JSON object with exactly the four limit keys.
/// The log directives (`RUST_LOG`), read before anything else is
/// configured; `adapters::telemetry` parses them.
pub fn log_directives<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Option<String> {
    env.optional("RUST_LOG")
}

pub fn ceilings<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Ceilings, ConfigError> {
    const NAME: &str = "SCHEDULE_CEILINGS";
    let limits: Limits = env.json(NAME)?;
    Ceilings::new(limits).map_err(|e| ConfigError::Malformed {
        name: NAME,
        reason: e.to_string(),
    })
}

/// Where every task's Scheduler schedule delivers, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleTarget {
    /// `SCHEDULE_GROUP`
    pub group: String,
    /// `RUN_QUEUE_ARN`
    pub queue_arn: String,
    /// `SCHEDULER_ROLE_ARN`
    pub role_arn: String,
    /// `SCHEDULER_DLQ_ARN`
    pub dlq_arn: String,
}

impl ScheduleTarget {
    pub fn from_env<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            group: env.required("SCHEDULE_GROUP")?,
            queue_arn: env.required("RUN_QUEUE_ARN")?,
            role_arn: env.required("SCHEDULER_ROLE_ARN")?,
            dlq_arn: env.required("SCHEDULER_DLQ_ARN")?,
        })
    }
}

/// `TRACES_ENDPOINT`: where the traced functions (create, runner, the
/// reconcile worker) send their spans (SPEC §14, docs/design.md "Traces").
pub const TRACES_ENDPOINT: &str = "TRACES_ENDPOINT";

/// Where a function's spans go, and the service it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracesConfig {
    /// `TRACES_ENDPOINT`: an OTLP/HTTP traces URL (the CloudWatch OTLP
    /// endpoint, `https://xray.<region>.amazonaws.com/v1/traces`, as the
    /// template sets it); unset or blank, traces are off (locally, by
    /// default). `https`, or `http` to a loopback collector only.
    pub endpoint: Option<url::Url>,
    /// `service.name`: the Lambda function's name (`AWS_LAMBDA_FUNCTION_NAME`,
    /// which Lambda sets), else the binary's.
    pub service_name: String,
}

impl TracesConfig {
    /// Traces off, named after `binary`.
    pub fn off(binary: &str) -> Self {
        Self {
            endpoint: None,
            service_name: binary.to_owned(),
        }
    }
}

/// [`TracesConfig`] of the function built as `binary`.
pub fn traces<F: Fn(&str) -> Option<String>>(env: &Env<F>, binary: &str) -> Result<TracesConfig, ConfigError> {
    let service_name = env
        .optional("AWS_LAMBDA_FUNCTION_NAME")
        .unwrap_or_else(|| binary.to_owned());
    let Some(text) = env.optional(TRACES_ENDPOINT) else {
        return Ok(TracesConfig {
            endpoint: None,
            service_name,
        });
    };
    let malformed = |reason: String| ConfigError::Malformed {
        name: TRACES_ENDPOINT,
        reason,
    };
    let url = url::Url::parse(text.trim()).map_err(|e| malformed(format!("`{text}` is not a URL: {e}")))?;
    let loopback = match url.host() {
        Some(url::Host::Domain(host)) => host == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => {}
        "http" if loopback => {}
        _ => {
            return Err(malformed(format!(
                "`{text}` is neither an https URL nor an http URL of a loopback collector"
            )));
        }
    }
    Ok(TracesConfig {
        endpoint: Some(url),
        service_name,
    })
}

/// What create and schedules both read.
const CREATE_VARIABLES: [&str; 8] = [
    "TABLE_NAME",
    "SCHEDULE_GROUP",
    "RUN_QUEUE_ARN",
    "SCHEDULER_ROLE_ARN",
    "SCHEDULER_DLQ_ARN",
    "AGENT_SCHEDULE_API_ENABLED",
    "AGENT_SCHEDULE_WORKER_ENABLED",
    "SCHEDULE_CEILINGS",
];

/// `names` and then `more`, as one array (for the `VARIABLES` lists).
const fn joined<const N: usize, const M: usize, const T: usize>(
    names: [&'static str; N],
    more: [&'static str; M],
) -> [&'static str; T] {
    let mut all = [""; T];
    let mut i = 0;
    while i < N {
        all[i] = names[i];
        i += 1;
    }
    while i < T {
        all[i] = more[i - N];
        i += 1;
    }
    all
}

/// A function's configuration, read from its environment: [`FromEnv::read`]
/// takes any variable source (a test's pairs), [`FromEnv::from_env`] the
/// process's.
pub trait FromEnv: Sized {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError>;

    fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Env::process())
    }
}

/// Everything the create function reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateConfig {
    /// `TABLE_NAME`
    pub table_name: String,
    pub target: ScheduleTarget,
    pub flags: Flags,
    pub ceilings: Ceilings,
    /// `TRACES_ENDPOINT`
    pub traces: TracesConfig,
}

impl CreateConfig {
    /// Every variable create reads; `template.yaml` sets exactly these.
    pub const VARIABLES: [&'static str; 9] = joined(CREATE_VARIABLES, [TRACES_ENDPOINT]);
}

impl FromEnv for CreateConfig {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            target: ScheduleTarget::from_env(env)?,
            flags: Flags::from_env(env)?,
            ceilings: ceilings(env)?,
            traces: traces(env, "create")?,
        })
    }
}

/// `CATCH_UP_SECONDS` when unset: Scheduler retries for up to a day, and a
/// reminder hours late is not what the user asked for.
pub const DEFAULT_CATCH_UP_SECONDS: i64 = 3600;

/// The shortest catch-up window the runner accepts: the longest time a
/// message it returns takes to come back (`domain::run::redelivery`). A shorter
/// window would turn every busy or throttled occurrence into `missed`.
pub const MIN_CATCH_UP_SECONDS: i64 = crate::domain::run::redelivery::LONGEST_RETURN_SECONDS as i64;
const _: () = assert!(DEFAULT_CATCH_UP_SECONDS >= MIN_CATCH_UP_SECONDS);

/// `RETENTION_DAYS` when unset (SPEC §3, §9).
pub const DEFAULT_RETENTION_DAYS: i64 = 90;

/// `RETENTION_DAYS` (default [`DEFAULT_RETENTION_DAYS`], 1 to 3650): how
/// long a finished reminder, its run records and its idempotency records
/// are kept after it finished.
pub fn retention<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<chrono::Duration, ConfigError> {
    const NAME: &str = "RETENTION_DAYS";
    match (env.0)(NAME) {
        None => Ok(chrono::Duration::days(DEFAULT_RETENTION_DAYS)),
        Some(text) => match text.trim().parse::<i64>() {
            Ok(days) if (1..=3650).contains(&days) => Ok(chrono::Duration::days(days)),
            _ => Err(ConfigError::Malformed {
                name: NAME,
                reason: format!("`{text}` is not a number of days from 1 to 3650"),
            }),
        },
    }
}

/// The highest `MODEL_REQUESTS_PER_MINUTE`: far above any account's quota.
pub const MAX_MODEL_REQUESTS_PER_MINUTE: u32 = 1_000_000;

/// The highest `MODEL_TOKENS_PER_MINUTE`.
pub const MAX_MODEL_TOKENS_PER_MINUTE: u64 = 1_000_000_000;

/// `MODEL_REQUESTS_PER_MINUTE` (0 to [`MAX_MODEL_REQUESTS_PER_MINUTE`]):
/// the runner fleet's pace of model requests, at or under the account's
/// Bedrock quota for the model; unset, blank or 0, no pace (a throttled run
/// backs off on its own). With it, `MODEL_TOKENS_PER_MINUTE` (0 to
/// [`MAX_MODEL_TOKENS_PER_MINUTE`]; unset, blank or 0, requests only): the
/// quota's tokens a minute, which the pace counts too (`domain::run::pace`).
pub fn pace<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
) -> Result<Option<crate::domain::run::pace::Pace>, ConfigError> {
    const NAME: &str = "MODEL_REQUESTS_PER_MINUTE";
    const TOKENS: &str = "MODEL_TOKENS_PER_MINUTE";
    let tokens = match env.optional(TOKENS) {
        None => 0,
        Some(text) => match text.trim().parse::<u64>() {
            Ok(tokens) if tokens <= MAX_MODEL_TOKENS_PER_MINUTE => tokens,
            _ => {
                return Err(ConfigError::Malformed {
                    name: TOKENS,
                    reason: format!(
                        "`{text}` is not a number of tokens a minute from 0 to {MAX_MODEL_TOKENS_PER_MINUTE}"
                    ),
                });
            }
        },
    };
    let Some(text) = env.optional(NAME) else {
        return Ok(None);
    };
    match text.trim().parse::<u32>() {
        Ok(requests) if requests <= MAX_MODEL_REQUESTS_PER_MINUTE => {
            Ok(crate::domain::run::pace::Pace::per_minute(requests).map(|pace| pace.with_tokens(tokens)))
        }
        _ => Err(ConfigError::Malformed {
            name: NAME,
            reason: format!("`{text}` is not a number of requests a minute from 0 to {MAX_MODEL_REQUESTS_PER_MINUTE}"),
        }),
    }
}

/// `MAX_ACTIVE_REMINDERS` (default [`DEFAULT_MAX_ACTIVE_REMINDERS`]).
pub fn max_active<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<usize, ConfigError> {
    const NAME: &str = "MAX_ACTIVE_REMINDERS";
    match (env.0)(NAME) {
        None => Ok(DEFAULT_MAX_ACTIVE_REMINDERS),
        Some(text) => match text.trim().parse::<usize>() {
            Ok(v) if v > 0 => Ok(v),
            _ => Err(ConfigError::Malformed {
                name: NAME,
                reason: format!("`{text}` is not a positive number of reminders"),
            }),
        },
    }
}

/// Everything the runner reads.
#[derive(Debug, Clone, PartialEq)]
pub struct RunnerConfig {
    /// `TABLE_NAME`
    pub table_name: String,
    /// `AGENT_SCHEDULE_WORKER_ENABLED`
    pub worker_enabled: bool,
    /// `MODEL_ID`: a foundation model id or an inference profile id
    /// (`domain::run::model`), checked at start.
    pub model_id: String,
    /// `MODEL_PRICES`
    pub prices: crate::domain::task::budget::Prices,
    /// `CATCH_UP_SECONDS` (default [`DEFAULT_CATCH_UP_SECONDS`], at least
    /// [`MIN_CATCH_UP_SECONDS`], at most [`MAX_CATCH_UP_SECONDS`])
    pub catch_up_seconds: i64,
    /// `CONNECTOR_SECRET_PREFIX`, `ALLOW_LOOPBACK_CONNECTORS`: where a
    /// connector may be and which credential it may have.
    pub rules: crate::domain::connector::webhook::InstallRules,
    /// `SCHEDULE_CEILINGS`: a run's limits are its spec's, bounded by these.
    pub ceilings: Ceilings,
    /// `RETENTION_DAYS`: run records, and a completed reminder, expire
    /// this long after they finish.
    pub retention: chrono::Duration,
    /// `TRACES_ENDPOINT`
    pub traces: TracesConfig,
    /// `MODEL_REQUESTS_PER_MINUTE`, `MODEL_TOKENS_PER_MINUTE`: the fleet's
    /// pace of model requests and tokens (`domain::run::pace`); unset or 0, no pace.
    pub pace: Option<crate::domain::run::pace::Pace>,
    /// `PERSON_MONTHLY_USD`: a person's monthly cap on their own
    /// reminders' model cost, in each workspace (SPEC §15); unset or 0, none.
    pub person_monthly_usd: Option<f64>,
    /// `APPROVAL_HOURS`: how long a gated tool call's request waits for an
    /// approver (SPEC §15; default 24, from 1 to 168).
    pub approval_hours: i64,
}

/// `APPROVAL_HOURS`' bounds: an hour to a week.
pub const APPROVAL_HOURS_RANGE: std::ops::RangeInclusive<i64> = 1..=crate::domain::run::gate::MAX_APPROVAL_HOURS;

/// `APPROVAL_HOURS` (default `gate::DEFAULT_APPROVAL_HOURS`).
pub fn approval_hours<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<i64, ConfigError> {
    let Some(text) = env.optional("APPROVAL_HOURS") else {
        return Ok(crate::domain::run::gate::DEFAULT_APPROVAL_HOURS);
    };
    match text.trim().parse::<i64>() {
        Ok(hours) if APPROVAL_HOURS_RANGE.contains(&hours) => Ok(hours),
        _ => Err(ConfigError::Malformed {
            name: "APPROVAL_HOURS",
            reason: format!("`{text}` is not a whole number of hours from 1 to 168"),
        }),
    }
}

/// The longest catch-up window: it bounds how long an occurrence's claim
/// is kept on its task item (`occurrence::prunable`), so a one-minute task
/// keeps a few hundred claims at most.
pub const MAX_CATCH_UP_SECONDS: i64 = 21_600;

impl RunnerConfig {
    /// No `EVENT_BUS_NAME`: the runner sends no event; the table's stream
    /// carries each settled run to the bus (`domain::run::notification`).
    pub const VARIABLES: [&'static str; 13] = [
        "TABLE_NAME",
        "AGENT_SCHEDULE_WORKER_ENABLED",
        "MODEL_ID",
        "MODEL_PRICES",
        "CATCH_UP_SECONDS",
        "CONNECTOR_SECRET_PREFIX",
        "SCHEDULE_CEILINGS",
        "RETENTION_DAYS",
        TRACES_ENDPOINT,
        "MODEL_REQUESTS_PER_MINUTE",
        "MODEL_TOKENS_PER_MINUTE",
        PERSON_MONTHLY_USD,
        "APPROVAL_HOURS",
    ];
}

/// `PERSON_MONTHLY_USD`: see [`RunnerConfig::person_monthly_usd`].
pub const PERSON_MONTHLY_USD: &str = "PERSON_MONTHLY_USD";

/// [`PERSON_MONTHLY_USD`]: a number of USD from 0 to the workspace budget's
/// bound; 0 or unset is no cap.
pub fn person_monthly_usd<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Option<f64>, ConfigError> {
    let Some(text) = env.optional(PERSON_MONTHLY_USD) else {
        return Ok(None);
    };
    let max = crate::domain::task::budget::MAX_WORKSPACE_BUDGET_USD;
    match text.trim().parse::<f64>() {
        Ok(cap) if cap.is_finite() && (0.0..=max).contains(&cap) => Ok((cap > 0.0).then_some(cap)),
        _ => Err(ConfigError::Malformed {
            name: PERSON_MONTHLY_USD,
            reason: format!("`{text}` is not a number of USD from 0 (no cap) to {max}"),
        }),
    }
}

impl FromEnv for RunnerConfig {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let prices: std::collections::BTreeMap<String, crate::domain::task::budget::Price> =
            env.json("MODEL_PRICES")?;
        let prices = crate::domain::task::budget::Prices::new(prices).map_err(|e| ConfigError::Malformed {
            name: "MODEL_PRICES",
            reason: e.to_string(),
        })?;
        let catch_up_seconds = catch_up_seconds(env)?;
        let model_id = env.required("MODEL_ID")?;
        crate::domain::run::model::ModelId::parse(&model_id).map_err(|e| ConfigError::Malformed {
            name: "MODEL_ID",
            reason: e.to_string(),
        })?;
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            worker_enabled: env.flag("AGENT_SCHEDULE_WORKER_ENABLED")?,
            model_id,
            prices,
            catch_up_seconds,
            rules: install_rules(env)?,
            ceilings: ceilings(env)?,
            retention: within_retention(approval_hours(env)?, retention(env)?)?.1,
            traces: traces(env, "runner")?,
            pace: pace(env)?,
            person_monthly_usd: person_monthly_usd(env)?,
            approval_hours: approval_hours(env)?,
        })
    }
}

/// `APPROVAL_HOURS` and `RETENTION_DAYS` together: a request waits
/// shorter than its occurrence's records are kept, or an awaiting record
/// could expire while its request is still open and the occurrence never
/// end. The template keeps `RetentionDays` past `ApprovalHours`' bound.
pub fn within_retention(hours: i64, retention: chrono::Duration) -> Result<(i64, chrono::Duration), ConfigError> {
    if chrono::Duration::hours(hours) >= retention {
        return Err(ConfigError::Malformed {
            name: "APPROVAL_HOURS",
            reason: format!(
                "{hours} hours is not shorter than RETENTION_DAYS ({} days): an occurrence waiting for an approval would outlive its records",
                retention.num_days()
            ),
        });
    }
    Ok((hours, retention))
}

/// `CATCH_UP_SECONDS` (default [`DEFAULT_CATCH_UP_SECONDS`], from
/// [`MIN_CATCH_UP_SECONDS`] to [`MAX_CATCH_UP_SECONDS`]): the runner's
/// window, and what the missed-occurrence check waits out.
pub fn catch_up_seconds<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<i64, ConfigError> {
    Ok(match (env.0)("CATCH_UP_SECONDS") {
        None => DEFAULT_CATCH_UP_SECONDS,
        Some(text) => match text.trim().parse::<i64>() {
            Ok(v) if (MIN_CATCH_UP_SECONDS..=MAX_CATCH_UP_SECONDS).contains(&v) => v,
            Ok(v) if v > 0 => {
                return Err(ConfigError::Malformed {
                    name: "CATCH_UP_SECONDS",
                    reason: format!(
                        "{v} s is shorter than the {MIN_CATCH_UP_SECONDS} s a returned run message may take to come back"
                    ),
                });
            }
            _ => {
                return Err(ConfigError::Malformed {
                    name: "CATCH_UP_SECONDS",
                    reason: format!("`{text}` is not a number of seconds from 1 to {MAX_CATCH_UP_SECONDS}"),
                });
            }
        },
    })
}

/// `ALLOW_LOOPBACK_CONNECTORS` (default `false`; local runs only, the
/// template never sets it) and `CONNECTOR_SECRET_PREFIX`: what an install
/// may name, for every function that talks to connectors or takes installs.
pub fn install_rules<F: Fn(&str) -> Option<String>>(
    env: &Env<F>,
) -> Result<crate::domain::connector::webhook::InstallRules, ConfigError> {
    const PREFIX: &str = "CONNECTOR_SECRET_PREFIX";
    let allow_loopback = match (env.0)("ALLOW_LOOPBACK_CONNECTORS") {
        None => false,
        Some(_) => env.flag("ALLOW_LOOPBACK_CONNECTORS")?,
    };
    let credentials = crate::domain::task::install::CredentialPrefix::parse(&env.required(PREFIX)?).map_err(|e| {
        ConfigError::Malformed {
            name: PREFIX,
            reason: e.to_string(),
        }
    })?;
    Ok(crate::domain::connector::webhook::InstallRules {
        endpoint: crate::domain::connector::endpoint::EndpointPolicy { allow_loopback },
        credentials,
    })
}

/// What the reconcile worker (queue, daily pass, deploy pass) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    pub target: ScheduleTarget,
    pub ceilings: Ceilings,
    /// `CATCH_UP_SECONDS` (the runner's), `RETENTION_DAYS`: the
    /// missed-occurrence check's window and its records' retention.
    pub overdue: OverdueConfig,
    /// `TRACES_ENDPOINT`
    pub traces: TracesConfig,
}

/// What the missed-occurrence check reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverdueConfig {
    pub catch_up_seconds: i64,
    pub retention: chrono::Duration,
}

/// Everything the reconcile binary reads. One binary, two functions: the
/// webhook intake (`WEBHOOK_SECRET_ARN` set: it reads the webhook secret and
/// never talks to connectors) and the worker (`SCHEDULE_GROUP` set: it talks
/// to connectors and may not read the webhook secret). Locally one process
/// may be both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileConfig {
    /// `TABLE_NAME`
    pub table_name: String,
    /// `RECONCILE_QUEUE_URL`: the FIFO queue that serialises work per install.
    pub queue_url: String,
    /// `CONNECTOR_SECRET_PREFIX`, `ALLOW_LOOPBACK_CONNECTORS`
    pub rules: crate::domain::connector::webhook::InstallRules,
    /// `WEBHOOK_SECRET_ARN`: the Standard Webhooks secret in Secrets Manager
    /// (the intake only).
    pub webhook_secret_arn: Option<String>,
    /// The worker's variables, when it is the worker.
    pub worker: Option<WorkerConfig>,
}

impl ReconcileConfig {
    /// What the webhook intake function reads.
    pub const INTAKE_VARIABLES: [&'static str; 4] = [
        "TABLE_NAME",
        "RECONCILE_QUEUE_URL",
        "CONNECTOR_SECRET_PREFIX",
        "WEBHOOK_SECRET_ARN",
    ];
    /// What the worker function reads (`ALLOW_LOOPBACK_CONNECTORS` is
    /// optional and never set by the template).
    pub const VARIABLES: [&'static str; 11] = [
        "TABLE_NAME",
        "RECONCILE_QUEUE_URL",
        "CONNECTOR_SECRET_PREFIX",
        "SCHEDULE_GROUP",
        "RUN_QUEUE_ARN",
        "SCHEDULER_ROLE_ARN",
        "SCHEDULER_DLQ_ARN",
        "SCHEDULE_CEILINGS",
        "CATCH_UP_SECONDS",
        "RETENTION_DAYS",
        TRACES_ENDPOINT,
    ];
}

impl FromEnv for ReconcileConfig {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        let webhook_secret_arn = (env.0)("WEBHOOK_SECRET_ARN").filter(|v| !v.trim().is_empty());
        let worker = match (env.0)("SCHEDULE_GROUP") {
            Some(_) => Some(WorkerConfig {
                target: ScheduleTarget::from_env(env)?,
                ceilings: ceilings(env)?,
                overdue: OverdueConfig {
                    catch_up_seconds: catch_up_seconds(env)?,
                    retention: retention(env)?,
                },
                traces: traces(env, "reconcile")?,
            }),
            None if webhook_secret_arn.is_some() => None,
            // Neither: the worker is what is missing.
            None => return Err(ConfigError::Missing("SCHEDULE_GROUP")),
        };
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            queue_url: env.required("RECONCILE_QUEUE_URL")?,
            rules: install_rules(env)?,
            webhook_secret_arn,
            worker,
        })
    }
}

/// Everything the admin function reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// `TABLE_NAME`
    pub table_name: String,
    pub target: ScheduleTarget,
    /// `RUN_QUEUE_URL`: where a run now's message is sent.
    pub run_queue_url: String,
    /// `MAX_ACTIVE_REMINDERS`: a restore never takes an owner past it.
    pub max_active: usize,
    /// `RETENTION_DAYS`
    pub retention: chrono::Duration,
}

impl AdminConfig {
    pub const VARIABLES: [&'static str; 8] = [
        "TABLE_NAME",
        "SCHEDULE_GROUP",
        "RUN_QUEUE_ARN",
        "RUN_QUEUE_URL",
        "SCHEDULER_ROLE_ARN",
        "SCHEDULER_DLQ_ARN",
        "MAX_ACTIVE_REMINDERS",
        "RETENTION_DAYS",
    ];
}

impl FromEnv for AdminConfig {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            target: ScheduleTarget::from_env(env)?,
            run_queue_url: env.required("RUN_QUEUE_URL")?,
            max_active: max_active(env)?,
            retention: retention(env)?,
        })
    }
}

/// `MAX_ACTIVE_REMINDERS` when unset (SPEC §11).
pub const DEFAULT_MAX_ACTIVE_REMINDERS: usize = 50;

/// Everything the schedules function reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulesConfig {
    /// `TABLE_NAME`
    pub table_name: String,
    pub target: ScheduleTarget,
    /// `RUN_QUEUE_URL`: where a run now's message is sent.
    pub run_queue_url: String,
    pub flags: Flags,
    pub ceilings: Ceilings,
    /// `MAX_ACTIVE_REMINDERS` (default [`DEFAULT_MAX_ACTIVE_REMINDERS`]):
    /// scheduled or paused reminders a principal may hold.
    pub max_active: usize,
    /// `RETENTION_DAYS`
    pub retention: chrono::Duration,
}

impl SchedulesConfig {
    /// Every variable schedules reads, create's, the cap, the retention
    /// and the runs queue's URL; `template.yaml` sets exactly these.
    pub const VARIABLES: [&'static str; CREATE_VARIABLES.len() + 3] = joined(
        CREATE_VARIABLES,
        ["MAX_ACTIVE_REMINDERS", "RETENTION_DAYS", "RUN_QUEUE_URL"],
    );
}

impl FromEnv for SchedulesConfig {
    fn read<F: Fn(&str) -> Option<String>>(env: &Env<F>) -> Result<Self, ConfigError> {
        Ok(Self {
            table_name: env.required("TABLE_NAME")?,
            target: ScheduleTarget::from_env(env)?,
            run_queue_url: env.required("RUN_QUEUE_URL")?,
            flags: Flags::from_env(env)?,
            ceilings: ceilings(env)?,
            max_active: max_active(env)?,
            retention: retention(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> Env<impl Fn(&str) -> Option<String>> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Env::from_lookup(move |k| map.get(k).cloned())
    }

    const FULL: [(&str, &str); 8] = [
        ("TABLE_NAME", "tasks"),
        ("SCHEDULE_GROUP", "tasks"),
        ("RUN_QUEUE_ARN", "arn:aws:sqs:us-east-1:123456789012:runs"),
        ("SCHEDULER_ROLE_ARN", "arn:aws:iam::123456789012:role/scheduler"),
        ("SCHEDULER_DLQ_ARN", "arn:aws:sqs:us-east-1:123456789012:scheduler-dlq"),
        ("AGENT_SCHEDULE_API_ENABLED", "true"),
        ("AGENT_SCHEDULE_WORKER_ENABLED", "false"),
        (
            "SCHEDULE_CEILINGS",
            r#"{"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#,
        ),
    ];

    #[test]
    fn a_complete_environment_parses() {
        let config = CreateConfig::read(&env(&FULL)).unwrap();
        assert_eq!(config.table_name, "tasks");
        assert_eq!(
            config.flags,
            Flags {
                api_enabled: true,
                worker_enabled: false
            }
        );
        assert!(!config.flags.create_enabled());
        assert_eq!(config.ceilings.limits().max_output_tokens, 4000);
    }

    #[test]
    fn variables_lists_what_is_read() {
        let mut names: Vec<&str> = FULL.iter().map(|(k, _)| *k).collect();
        names.push(TRACES_ENDPOINT);
        assert_eq!(names, CreateConfig::VARIABLES);
    }

    #[test]
    fn traces_are_off_unless_an_endpoint_is_set_and_a_bad_one_is_named() {
        let off = CreateConfig::read(&env(&FULL)).unwrap().traces;
        assert_eq!(off, TracesConfig::off("create"));
        for endpoint in [
            "https://xray.us-east-1.amazonaws.com/v1/traces",
            "http://127.0.0.1:4318/v1/traces",
            "http://localhost:4318/v1/traces",
            "http://[::1]:4318/v1/traces",
        ] {
            let mut pairs = FULL.to_vec();
            pairs.extend([
                (TRACES_ENDPOINT, endpoint),
                ("AWS_LAMBDA_FUNCTION_NAME", "stack-CreateFunction-1"),
            ]);
            let traces = CreateConfig::read(&env(&pairs)).unwrap().traces;
            assert_eq!(traces.endpoint.map(String::from).as_deref(), Some(endpoint));
            assert_eq!(traces.service_name, "stack-CreateFunction-1");
        }
        for endpoint in [
            "xray.us-east-1.amazonaws.com/v1/traces",
            "http://xray.us-east-1.amazonaws.com/v1/traces",
            "http://10.0.0.1:4318/v1/traces",
            "ftp://127.0.0.1/v1/traces",
        ] {
            let mut pairs = FULL.to_vec();
            pairs.push((TRACES_ENDPOINT, endpoint));
            assert!(
                matches!(
                    CreateConfig::read(&env(&pairs)),
                    Err(ConfigError::Malformed {
                        name: TRACES_ENDPOINT,
                        ..
                    })
                ),
                "{endpoint}"
            );
        }
    }

    #[test]
    fn the_runner_reads_its_variables_and_defaults_the_catch_up() {
        let base = [
            ("TABLE_NAME", "tasks"),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "true"),
            ("MODEL_ID", "anthropic.m-v1:0"),
            (
                "MODEL_PRICES",
                r#"{"anthropic.m-v1:0": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}"#,
            ),
            ("CONNECTOR_SECRET_PREFIX", PREFIX),
            (
                "SCHEDULE_CEILINGS",
                r#"{"max_turns": 3, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#,
            ),
        ];
        let config = RunnerConfig::read(&env(&base)).unwrap();
        assert_eq!(config.ceilings.limits().max_turns, 3);
        assert_eq!(config.catch_up_seconds, DEFAULT_CATCH_UP_SECONDS);
        assert_eq!(config.pace, None, "no pace unless set");
        // A request waits shorter than its occurrence's records are kept.
        for (hours, days, ok) in [
            ("24", "2", true),
            ("48", "2", false),
            ("168", "7", false),
            ("168", "8", true),
        ] {
            let mut waits = base.to_vec();
            waits.extend([("APPROVAL_HOURS", hours), ("RETENTION_DAYS", days)]);
            let read = RunnerConfig::read(&env(&waits));
            assert_eq!(read.is_ok(), ok, "{hours} h against {days} days: {read:?}");
            if !ok {
                assert!(
                    matches!(&read, Err(ConfigError::Malformed { name: "APPROVAL_HOURS", reason }) if reason.contains("RETENTION_DAYS")),
                    "{read:?}"
                );
            }
        }
        for (value, pace) in [
            ("0", None),
            (" ", None),
            ("200", crate::domain::run::pace::Pace::per_minute(200)),
        ] {
            let mut paced = base.to_vec();
            paced.push(("MODEL_REQUESTS_PER_MINUTE", value));
            assert_eq!(RunnerConfig::read(&env(&paced)).unwrap().pace, pace, "{value:?}");
        }
        let mut tokens = base.to_vec();
        tokens.extend([
            ("MODEL_REQUESTS_PER_MINUTE", "200"),
            ("MODEL_TOKENS_PER_MINUTE", "400000"),
        ]);
        assert_eq!(
            RunnerConfig::read(&env(&tokens)).unwrap().pace.and_then(|p| p.tokens()),
            Some(400_000)
        );
        tokens.pop();
        tokens.push(("MODEL_TOKENS_PER_MINUTE", "0"));
        assert_eq!(
            RunnerConfig::read(&env(&tokens)).unwrap().pace.map(|p| p.tokens()),
            Some(None),
            "0: requests only"
        );
        assert!(config.prices.of("anthropic.m-v1:0").is_ok());
        let mut late = base.to_vec();
        late.push(("CATCH_UP_SECONDS", "900"));
        assert_eq!(RunnerConfig::read(&env(&late)).unwrap().catch_up_seconds, 900);
        for (name, value) in [
            ("CATCH_UP_SECONDS", "-5"),
            ("CATCH_UP_SECONDS", "1"),
            ("CATCH_UP_SECONDS", "599"),
            ("MODEL_PRICES", r#"{"m": {"input_per_mtok": 3.0}}"#),
            ("MODEL_ID", "claude"),
            ("MODEL_ID", "us.claude-v1:0"),
            ("CATCH_UP_SECONDS", "21601"),
            ("MODEL_PRICES", r#"{"m": {"input_per_mtok": 3.0}}"#),
            ("SCHEDULE_CEILINGS", r#"{"max_turns": 3}"#),
            ("MODEL_REQUESTS_PER_MINUTE", "-1"),
            ("MODEL_REQUESTS_PER_MINUTE", "1000001"),
            ("MODEL_REQUESTS_PER_MINUTE", "fast"),
            ("MODEL_TOKENS_PER_MINUTE", "-1"),
            ("MODEL_TOKENS_PER_MINUTE", "1000000001"),
        ] {
            let mut bad: Vec<_> = base.iter().copied().filter(|(k, _)| *k != name).collect();
            bad.push((name, value));
            assert!(matches!(RunnerConfig::read(&env(&bad)), Err(ConfigError::Malformed { name: n, .. }) if n == name));
        }
        for name in [
            "TABLE_NAME",
            "MODEL_ID",
            "MODEL_PRICES",
            "AGENT_SCHEDULE_WORKER_ENABLED",
            "SCHEDULE_CEILINGS",
        ] {
            let without: Vec<_> = base.iter().copied().filter(|(k, _)| *k != name).collect();
            assert_eq!(RunnerConfig::read(&env(&without)), Err(ConfigError::Missing(name)));
        }
    }

    const PREFIX: &str = "arn:aws:secretsmanager:us-east-1:123456789012:secret:connectors/";
    const CEILINGS_JSON: &str =
        r#"{"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#;

    #[test]
    fn reconcile_is_the_intake_or_the_worker_and_loopback_is_off_unless_set() {
        let worker: Vec<(&str, &str)> = FULL
            .iter()
            .copied()
            .filter(|(k, _)| ReconcileConfig::VARIABLES.contains(k))
            .chain([("RECONCILE_QUEUE_URL", "q"), ("CONNECTOR_SECRET_PREFIX", PREFIX)])
            .collect();
        let config = ReconcileConfig::read(&env(&worker)).unwrap();
        assert!(config.worker.is_some() && config.webhook_secret_arn.is_none());
        assert!(!config.rules.endpoint.allow_loopback, "off by default");
        let intake = [
            ("TABLE_NAME", "t"),
            ("RECONCILE_QUEUE_URL", "q"),
            ("CONNECTOR_SECRET_PREFIX", PREFIX),
            (
                "WEBHOOK_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:123456789012:secret:wh",
            ),
        ];
        let config = ReconcileConfig::read(&env(&intake)).unwrap();
        assert!(config.worker.is_none() && config.webhook_secret_arn.is_some());
        let mut flagged = worker.clone();
        flagged.push(("ALLOW_LOOPBACK_CONNECTORS", "true"));
        assert!(
            ReconcileConfig::read(&env(&flagged))
                .unwrap()
                .rules
                .endpoint
                .allow_loopback
        );
        flagged.pop();
        flagged.push(("ALLOW_LOOPBACK_CONNECTORS", "yes"));
        assert!(matches!(
            ReconcileConfig::read(&env(&flagged)),
            Err(ConfigError::Malformed {
                name: "ALLOW_LOOPBACK_CONNECTORS",
                ..
            })
        ));
        let mut bad_prefix = worker.clone();
        bad_prefix.retain(|(k, _)| *k != "CONNECTOR_SECRET_PREFIX");
        assert_eq!(
            ReconcileConfig::read(&env(&bad_prefix)),
            Err(ConfigError::Missing("CONNECTOR_SECRET_PREFIX"))
        );
        bad_prefix.push(("CONNECTOR_SECRET_PREFIX", "connectors/"));
        assert!(matches!(
            ReconcileConfig::read(&env(&bad_prefix)),
            Err(ConfigError::Malformed {
                name: "CONNECTOR_SECRET_PREFIX",
                ..
            })
        ));
        assert_eq!(
            ReconcileConfig::read(&env(&[("TABLE_NAME", "t")])),
            Err(ConfigError::Missing("SCHEDULE_GROUP"))
        );
    }

    #[test]
    fn the_catch_up_window_is_never_shorter_than_a_return() {
        assert_eq!(
            MIN_CATCH_UP_SECONDS,
            i64::from(crate::domain::run::redelivery::LONGEST_RETURN_SECONDS)
        );
        let at_bound = [
            ("TABLE_NAME", "tasks"),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "true"),
            ("MODEL_ID", "anthropic.m-v1:0"),
            (
                "MODEL_PRICES",
                r#"{"anthropic.m-v1:0": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}"#,
            ),
            ("CATCH_UP_SECONDS", "600"),
            ("CONNECTOR_SECRET_PREFIX", PREFIX),
            ("SCHEDULE_CEILINGS", CEILINGS_JSON),
        ];
        assert_eq!(RunnerConfig::read(&env(&at_bound)).unwrap().catch_up_seconds, 600);
    }

    /// `MODEL_ID` takes a profile id or a model id; prices are keyed by the
    /// id as configured.
    #[test]
    fn the_model_id_may_be_an_inference_profile_or_a_model() {
        for id in [
            "global.anthropic.claude-haiku-4-5-20251001-v1:0",
            "us.anthropic.claude-haiku-4-5-20251001-v1:0",
            "anthropic.claude-3-haiku-20240307-v1:0",
        ] {
            let prices = format!(r#"{{"{id}": {{"input_per_mtok": 1.0, "output_per_mtok": 5.0}}}}"#);
            let vars = [
                ("TABLE_NAME", "tasks"),
                ("AGENT_SCHEDULE_WORKER_ENABLED", "true"),
                ("MODEL_ID", id),
                ("MODEL_PRICES", prices.as_str()),
                ("CONNECTOR_SECRET_PREFIX", PREFIX),
                ("SCHEDULE_CEILINGS", CEILINGS_JSON),
            ];
            let config = RunnerConfig::read(&env(&vars)).unwrap();
            assert_eq!(config.model_id, id);
            assert!(config.prices.of(id).is_ok(), "{id}");
        }
    }

    #[test]
    fn schedules_reads_create_s_variables_and_the_cap() {
        let mut base = FULL.to_vec();
        base.push(("RUN_QUEUE_URL", "https://sqs.us-east-1.amazonaws.com/123456789012/runs"));
        let config = SchedulesConfig::read(&env(&base)).unwrap();
        assert_eq!(
            config.run_queue_url,
            "https://sqs.us-east-1.amazonaws.com/123456789012/runs"
        );
        assert_eq!(config.max_active, DEFAULT_MAX_ACTIVE_REMINDERS);
        let mut capped = base.clone();
        capped.push(("MAX_ACTIVE_REMINDERS", "3"));
        assert_eq!(SchedulesConfig::read(&env(&capped)).unwrap().max_active, 3);
        assert_eq!(config.retention, chrono::Duration::days(DEFAULT_RETENTION_DAYS));
        capped.push(("RETENTION_DAYS", "30"));
        assert_eq!(
            SchedulesConfig::read(&env(&capped)).unwrap().retention,
            chrono::Duration::days(30)
        );
        for bad in ["0", "3651", "soon"] {
            let mut pairs = base.clone();
            pairs.push(("RETENTION_DAYS", bad));
            assert!(matches!(
                SchedulesConfig::read(&env(&pairs)),
                Err(ConfigError::Malformed {
                    name: "RETENTION_DAYS",
                    ..
                })
            ));
        }
        for bad in ["0", "-1", "many"] {
            let mut pairs = base.clone();
            pairs.push(("MAX_ACTIVE_REMINDERS", bad));
            assert!(matches!(
                SchedulesConfig::read(&env(&pairs)),
                Err(ConfigError::Malformed {
                    name: "MAX_ACTIVE_REMINDERS",
                    ..
                })
            ));
        }
        let names: std::collections::BTreeSet<&str> = capped.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, SchedulesConfig::VARIABLES.into_iter().collect());
        assert_eq!(
            SchedulesConfig::read(&env(&FULL)),
            Err(ConfigError::Missing("RUN_QUEUE_URL")),
            "a run now needs the runs queue"
        );
    }

    #[test]
    fn every_missing_variable_is_named() {
        for (name, _) in FULL {
            let without: Vec<_> = FULL.iter().copied().filter(|(k, _)| *k != name).collect();
            assert_eq!(CreateConfig::read(&env(&without)), Err(ConfigError::Missing(name)));
        }
    }

    #[test]
    fn malformed_values_are_named() {
        let cases = [
            ("AGENT_SCHEDULE_API_ENABLED", "yes"),
            ("AGENT_SCHEDULE_WORKER_ENABLED", "TRUE"),
            ("SCHEDULE_CEILINGS", r#"{"max_turns": 10}"#),
            (
                "SCHEDULE_CEILINGS",
                r#"{"max_turns": 10, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300, "extra": 1}"#,
            ),
            (
                "SCHEDULE_CEILINGS",
                r#"{"max_turns": 0, "max_tool_calls": 20, "max_output_tokens": 4000, "timeout_seconds": 300}"#,
            ),
        ];
        for (name, value) in cases {
            let mut pairs: Vec<_> = FULL.iter().copied().filter(|(k, _)| *k != name).collect();
            pairs.push((name, value));
            match CreateConfig::read(&env(&pairs)) {
                Err(ConfigError::Malformed { name: got, .. }) => assert_eq!(got, name, "{value}"),
                other => panic!("{name}={value}: {other:?}"),
            }
        }
    }
}
