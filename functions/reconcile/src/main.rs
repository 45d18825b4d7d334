//! The reconcile Lambda: signed webhooks (function URL), the FIFO work
//! queue, the daily pass and the pass at deploy (SPEC §6). Start-up parses the
//! configuration, starts the webhook secret's read (the intake only) and
//! builds the clients once.

// The SDK futures nest deeply; their layout needs more than the default depth.
#![recursion_limit = "256"]

use lambda_runtime::{Error, run, service_fn};
use shared::adapters::{sdk_config, telemetry};
use shared::config::{FromEnv, ReconcileConfig};

#[tokio::main]
async fn main() -> Result<(), Error> {
    telemetry::init(shared::config::log_directives(&shared::config::Env::process()));
    let config = ReconcileConfig::from_env()?;
    let app = reconcile::build(&sdk_config().await?, config);
    run(service_fn(|event| reconcile::handle(&app, event))).await
}
