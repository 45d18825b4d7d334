//! The schedules Lambda: the chat backend or app, for a signed-in user,
//! lists, reads, creates, updates, pauses, resumes and cancels that user's
//! reminders, daily and weekly ones included (SPEC §11). Never offered to a
//! model. Start-up parses the configuration and builds the clients once.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, run, service_fn};
use shared::adapters::{sdk_config, telemetry};
use shared::config::{FromEnv, SchedulesConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(shared::config::log_directives(&shared::config::Env::process()));
    let config = SchedulesConfig::from_env()?;
    let app = schedules::build(&sdk_config().await?, config);
    run(service_fn(|event| schedules::handle(&app, event))).await
}
