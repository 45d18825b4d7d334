//! AWS adapters: the ports of `ports` on DynamoDB and EventBridge Scheduler,
//! plus the start-up helpers every Lambda shares. AWS SDK calls live here and
//! nowhere else in the library.

pub mod approvals;
pub mod bedrock;
pub mod budgets;
pub mod catalog;
pub mod dynamo;
pub mod journal;
pub mod keys;
pub mod mcp;
pub mod metrics;
pub mod pace;
pub mod partitions;
pub mod queue;
pub mod redelivery;
pub mod reminders;
pub mod runs;
pub mod scheduler;
pub mod secrets;
pub mod telemetry;
pub mod tls;

/// The SDK configuration every client is built from: region, credentials and
/// endpoints come from the environment (locally `AWS_ENDPOINT_URL` and the
/// per-service variables). No endpoint is ever set in code, since that would
/// silently override the per-service variables. Its HTTP client verifies
/// with the process's one TLS configuration ([`tls`]).
///
/// Region and credentials are read from the environment alone, which is
/// where Lambda puts them (`AWS_REGION`, and the execution role's keys in
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), and
/// the first place the default chains look: the chains would also build,
/// at every start, an STS client for web identity (its endpoint partitions
/// parsed, their region patterns compiled) and an IMDS client, which a
/// function never uses (about 1 M instructions of each cold start,
/// docs/benchmarks.md).
///
/// Before any client is built, it narrows the SDK's endpoint partitions to
/// the function's region when the template asks for it ([`partitions`]); a
/// file it cannot write fails the start.
pub async fn sdk_config() -> Result<aws_config::SdkConfig, partitions::PartitionsError> {
    let env = crate::config::Env::process();
    partitions::narrow(
        env.optional(partitions::VARIABLE).as_deref(),
        env.optional("AWS_REGION").as_deref(),
    )
    .inspect_err(|error| tracing::error!(%error, "the function cannot start"))?;
    Ok(aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::environment::EnvironmentVariableRegionProvider::new())
        .credentials_provider(aws_config::environment::EnvironmentVariableCredentialsProvider::new())
        .http_client(tls::sdk_http_client(&tls::Tls::process()))
        .load()
        .await)
}

/// An SDK client built at its first use and shared by the clones: for a
/// client an invocation may never call (a secret's read, which a reminder's
/// run never makes; a run's early return; Scheduler, which an admin's list
/// or an unchanged install's pass never calls; the work queue, which only a
/// pass that queues more work sends to), so a start does not parse that SDK
/// crate's endpoint partitions (about 0.7 M instructions each, which the
/// SDK's generated code does when a client is built, whatever resolver it
/// is given; docs/benchmarks.md) for nothing.
#[derive(Clone)]
pub struct FirstUse<C> {
    sdk: aws_config::SdkConfig,
    build: fn(&aws_config::SdkConfig) -> C,
    client: std::sync::Arc<std::sync::OnceLock<C>>,
}

impl<C> FirstUse<C> {
    /// `build`: the client's `Client::new`.
    pub fn new(sdk: &aws_config::SdkConfig, build: fn(&aws_config::SdkConfig) -> C) -> Self {
        Self {
            sdk: sdk.clone(),
            build,
            client: std::sync::Arc::default(),
        }
    }

    /// A client already built (tests build theirs by hand).
    pub fn ready(client: C) -> Self {
        Self {
            sdk: aws_config::SdkConfig::builder().build(),
            build: |_| unreachable!("a ready client is never built"),
            client: std::sync::Arc::new(std::sync::OnceLock::from(client)),
        }
    }

    /// The client, built now if it was not.
    pub fn get(&self) -> &C {
        self.client.get_or_init(|| (self.build)(&self.sdk))
    }
}
