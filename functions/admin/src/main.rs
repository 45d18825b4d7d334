//! The admin Lambda: workspace admins approve, pause, resume, delete and
//! restore tasks (SPEC §8). Start-up parses the configuration and builds the
//! clients once.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, run, service_fn};
use shared::adapters::{sdk_config, telemetry};
use shared::config::{AdminConfig, FromEnv};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(shared::config::log_directives(&shared::config::Env::process()));
    let config = AdminConfig::from_env()?;
    let app = admin::build(&sdk_config().await?, config);
    run(service_fn(|event| admin::handle(&app, event))).await
}
