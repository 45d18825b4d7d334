//! DynamoDB faults on demand, at the AWS SDK layer: a DynamoDB client whose
//! interceptor can make one request of the calling task fail, the way the
//! network and DynamoDB fail a caller, so the adapters meet them as they
//! would on AWS (the seeded simulation, `tests/src/sim.rs`).
//!
//! - [`DynamoFault::Error`]: the request fails before it is sent; nothing is
//!   written and the caller sees an error.
//! - [`DynamoFault::Ghost`]: the request is sent and DynamoDB (moto) applies
//!   it, then the caller sees a timeout instead of the answer: the write
//!   happened, the caller does not know it. No retry of the SDK sends it again.
//! - [`DynamoFault::GhostRetried`]: as `Ghost`, but on the first attempt
//!   only: the SDK's own retry (a timeout is transient to it) sends the
//!   request again, and the second attempt meets the first one's write.
//!
//! Which request: a fault is armed with [`arm`] inside a [`scope`] (a task
//! local, so concurrent deliveries each arm their own) and taken by the
//! next DynamoDB request made in that scope through a client of [`dynamodb`]
//! ([`arm_write`]: the next write, past the reads before it).
//! Outside a scope, or unarmed, the client is the strict client of
//! `strict.rs` and nothing else.

use std::cell::Cell;
use std::future::Future;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextRef, BeforeTransmitInterceptorContextRef, FinalizerInterceptorContextMut,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::{BoxError, ConnectorError};
use aws_smithy_runtime_api::client::orchestrator::OrchestratorError;
use aws_smithy_types::config_bag::{Storable, StoreReplace};

/// How one DynamoDB request fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynamoFault {
    /// Fails before it is sent: nothing written, the caller sees an error.
    Error,
    /// Written, then the caller sees a timeout.
    Ghost,
    /// Written, the first answer lost to a timeout, and the SDK retries it.
    GhostRetried,
}

impl DynamoFault {
    pub fn label(self) -> &'static str {
        match self {
            DynamoFault::Error => "sdk error",
            DynamoFault::Ghost => "ghost write",
            DynamoFault::GhostRetried => "ghost write, SDK retry",
        }
    }
}

tokio::task_local! {
    /// The armed fault, and whether reads pass it by (`arm_write`).
    static ARMED: Cell<Option<(DynamoFault, bool)>>;
}

/// Runs `future` with a slot for one armed fault.
pub async fn scope<F: Future>(future: F) -> F::Output {
    ARMED.scope(Cell::new(None), future).await
}

/// Arms `fault` for the next DynamoDB request of this scope; false outside
/// a [`scope`].
pub fn arm(fault: DynamoFault) -> bool {
    ARMED.try_with(|slot| slot.set(Some((fault, false)))).is_ok()
}

/// Arms `fault` for the next DynamoDB write of this scope: the reads
/// before it (a claim reads its task first) pass it by.
pub fn arm_write(fault: DynamoFault) -> bool {
    ARMED.try_with(|slot| slot.set(Some((fault, true)))).is_ok()
}

/// Whether a request only reads.
fn reads(context: &BeforeSerializationInterceptorContextRef<'_>) -> bool {
    let input = context.input();
    input
        .downcast_ref::<aws_sdk_dynamodb::operation::get_item::GetItemInput>()
        .is_some()
        || input
            .downcast_ref::<aws_sdk_dynamodb::operation::query::QueryInput>()
            .is_some()
        || input
            .downcast_ref::<aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemInput>()
            .is_some()
}

/// The fault one request carries, in its config bag.
#[derive(Debug, Clone)]
struct Planned {
    fault: DynamoFault,
    /// Attempts completed so far.
    attempts: u32,
}

impl Storable for Planned {
    type Storer = StoreReplace<Self>;
}

/// The strict DynamoDB client (`strict::dynamodb`) with the fault
/// interceptor after it.
pub fn dynamodb(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let strict = crate::strict::dynamodb(sdk);
    let config = strict.config().to_builder().interceptor(Faults).build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

#[derive(Debug)]
struct Faults;

fn timeout() -> OrchestratorError<aws_smithy_runtime_api::client::interceptors::context::Error> {
    OrchestratorError::connector(ConnectorError::timeout(
        "the answer did not arrive in time (an injected fault; the request was applied)".into(),
    ))
}

impl Intercept for Faults {
    fn name(&self) -> &'static str {
        "Faults"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let read = reads(context);
        let taken = ARMED.try_with(|slot| match slot.get() {
            Some((_, true)) if read => None,
            armed => {
                slot.set(None);
                armed.map(|(fault, _)| fault)
            }
        });
        if let Ok(Some(fault)) = taken {
            cfg.interceptor_state().store_put(Planned { fault, attempts: 0 });
        }
        Ok(())
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        match cfg.load::<Planned>() {
            Some(Planned {
                fault: DynamoFault::Error,
                ..
            }) => Err("connection refused (an injected fault; nothing was sent)".into()),
            _ => Ok(()),
        }
    }

    fn modify_before_attempt_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(mut planned) = cfg.load::<Planned>().cloned() else {
            return Ok(());
        };
        planned.attempts += 1;
        if planned.fault == DynamoFault::GhostRetried
            && planned.attempts == 1
            && let Some(result) = context.output_or_error_mut()
            && result.is_ok()
        {
            *result = Err(timeout());
        }
        cfg.interceptor_state().store_put(planned);
        Ok(())
    }

    fn modify_before_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Planned {
            fault: DynamoFault::Ghost,
            ..
        }) = cfg.load::<Planned>()
            && let Some(result) = context.output_or_error_mut()
            && result.is_ok()
        {
            *result = Err(timeout());
        }
        Ok(())
    }
}
