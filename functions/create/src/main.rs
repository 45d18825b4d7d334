//! The create Lambda: chat backends invoke it to create one-time reminders
//! (SPEC §4). Start-up parses the configuration and builds the clients once.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, run, service_fn};
use shared::adapters::{sdk_config, telemetry};
use shared::config::{CreateConfig, FromEnv};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(shared::config::log_directives(&shared::config::Env::process()));
    let config = CreateConfig::from_env()?;
    let app = create::build(&sdk_config().await?, config);
    run(service_fn(|event| create::handle(&app, event))).await
}
