//! The smallest function: `lambda_runtime::run` over an echo, built with
//! the functions' profile and linked as they are. `infra/scripts/bench.sh`
//! starts it beside each function, so a function's cold start reads as a
//! ratio to this one's.

use lambda_runtime::{Error, LambdaEvent, run, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(service_fn(|event: LambdaEvent<Value>| async move {
        Ok::<Value, Error>(event.payload)
    }))
    .await
}
