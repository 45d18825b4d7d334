//! Notifications on an EventBridge bus (SPEC §7.7): one `PutEvents` entry
//! per finished run, content-free, on `EVENT_BUS_NAME`.

use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;

use crate::domain::notification::{DETAIL_TYPE, RunFinished, SOURCE};
use crate::ports::{Notifier, NotifyError};

#[derive(Clone)]
pub struct EventBridgeNotifier {
    client: Client,
    bus: String,
}

impl EventBridgeNotifier {
    pub fn from_sdk(sdk: &aws_config::SdkConfig, bus: impl Into<String>) -> Self {
        Self {
            client: Client::new(sdk),
            bus: bus.into(),
        }
    }
}

impl Notifier for EventBridgeNotifier {
    async fn run_finished(&self, event: &RunFinished) -> Result<(), NotifyError> {
        let detail = serde_json::to_string(event).map_err(|e| NotifyError(Box::new(e)))?;
        let entry = PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(DETAIL_TYPE)
            .detail(detail)
            .build();
        let out = self
            .client
            .put_events()
            .entries(entry)
            .send()
            .await
            .map_err(|e| NotifyError(Box::new(e)))?;
        if out.failed_entry_count() > 0 {
            let reason = out
                .entries()
                .iter()
                .filter_map(|e| e.error_message())
                .collect::<Vec<_>>()
                .join("; ");
            return Err(NotifyError(format!("the bus refused the event: {reason}").into()));
        }
        Ok(())
    }
}
