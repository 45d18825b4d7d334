//! The runner Lambda: consumes the runs queue and runs each due occurrence
//! at most once (SPEC §7). Start-up parses the configuration and builds the
//! clients once.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, run, service_fn};
use shared::adapters::{sdk_config, telemetry};
use shared::config::{FromEnv, RunnerConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(shared::config::log_directives(&shared::config::Env::process()));
    let config = RunnerConfig::from_env()?;
    let app = runner::build(&sdk_config().await?, config);
    run(service_fn(|event| runner::handle(&app, event))).await
}
