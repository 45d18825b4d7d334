//! Task schedules on EventBridge Scheduler (SPEC §2, §4 rule 7).
//!
//! Invariants: one schedule per task, named by the task id, in the configured
//! group; every schedule targets the runs queue through the Scheduler role,
//! with the flexible window off, an explicit retry policy and the scheduler
//! DLQ; one-time schedules delete themselves after completion. `put` is an
//! upsert, so repeating it converges (Scheduler's `ClientToken` is not relied
//! on: the local AWS ignores it, and a name is a stronger key anyway).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_scheduler::Client;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode, RetryPolicy, ScheduleState,
    Target,
};

use crate::config::ScheduleTarget;
use crate::ports::{ScheduleDefinition, ScheduleError, Schedules};

/// Scheduler keeps retrying a failed delivery to the queue for this long; the
/// runner's door decides separately whether a late delivery still runs.
pub const RETRY_MAX_EVENT_AGE_SECONDS: i32 = 86_400;
pub const RETRY_MAX_ATTEMPTS: i32 = 185;

#[derive(Clone)]
pub struct EventBridgeSchedules {
    client: Client,
    target: ScheduleTarget,
    requests: Arc<AtomicU64>,
}

impl EventBridgeSchedules {
    pub fn new(client: Client, target: ScheduleTarget) -> Self {
        Self {
            client,
            target,
            requests: Arc::default(),
        }
    }

    pub fn from_sdk(sdk: &aws_config::SdkConfig, target: ScheduleTarget) -> Self {
        Self::new(Client::new(sdk), target)
    }

    /// Scheduler requests sent since this adapter was built.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn error<E: std::error::Error + Send + Sync + 'static>(
        operation: &'static str,
        schedule: &ScheduleDefinition,
        source: E,
    ) -> ScheduleError {
        ScheduleError {
            operation,
            name: schedule.name.clone(),
            source: Box::new(source),
        }
    }

    fn parts(&self, schedule: &ScheduleDefinition) -> Result<(Target, FlexibleTimeWindow), ScheduleError> {
        let target = Target::builder()
            .arn(&self.target.queue_arn)
            .role_arn(&self.target.role_arn)
            .input(&schedule.input)
            .retry_policy(
                RetryPolicy::builder()
                    .maximum_event_age_in_seconds(RETRY_MAX_EVENT_AGE_SECONDS)
                    .maximum_retry_attempts(RETRY_MAX_ATTEMPTS)
                    .build(),
            )
            .dead_letter_config(DeadLetterConfig::builder().arn(&self.target.dlq_arn).build())
            .build()
            .map_err(|e| Self::error("CreateSchedule", schedule, e))?;
        let window = FlexibleTimeWindow::builder()
            .mode(FlexibleTimeWindowMode::Off)
            .build()
            .map_err(|e| Self::error("CreateSchedule", schedule, e))?;
        Ok((target, window))
    }
}

fn state(schedule: &ScheduleDefinition) -> ScheduleState {
    if schedule.enabled {
        ScheduleState::Enabled
    } else {
        ScheduleState::Disabled
    }
}

fn after_completion(schedule: &ScheduleDefinition) -> ActionAfterCompletion {
    if schedule.one_time {
        ActionAfterCompletion::Delete
    } else {
        ActionAfterCompletion::None
    }
}

impl Schedules for EventBridgeSchedules {
    #[tracing::instrument(skip_all, fields(schedule = %schedule.name))]
    async fn put(&self, schedule: &ScheduleDefinition) -> Result<(), ScheduleError> {
        let (target, window) = self.parts(schedule)?;
        self.requests.fetch_add(1, Ordering::Relaxed);
        let created = self
            .client
            .create_schedule()
            .name(&schedule.name)
            .group_name(&self.target.group)
            .description(&schedule.description)
            .schedule_expression(&schedule.expression.expression)
            .schedule_expression_timezone(&schedule.expression.timezone)
            .flexible_time_window(window.clone())
            .target(target.clone())
            .state(state(schedule))
            .action_after_completion(after_completion(schedule))
            .send()
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_conflict_exception()) => {
                self.requests.fetch_add(1, Ordering::Relaxed);
                self.client
                    .update_schedule()
                    .name(&schedule.name)
                    .group_name(&self.target.group)
                    .description(&schedule.description)
                    .schedule_expression(&schedule.expression.expression)
                    .schedule_expression_timezone(&schedule.expression.timezone)
                    .flexible_time_window(window)
                    .target(target)
                    .state(state(schedule))
                    .action_after_completion(after_completion(schedule))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| Self::error("UpdateSchedule", schedule, e))
            }
            Err(err) => Err(Self::error("CreateSchedule", schedule, err)),
        }
    }

    #[tracing::instrument(skip_all, fields(schedule = %name))]
    async fn delete(&self, name: &str) -> Result<(), ScheduleError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match self
            .client
            .delete_schedule()
            .name(name)
            .group_name(&self.target.group)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(())
            }
            Err(err) => Err(ScheduleError {
                operation: "DeleteSchedule",
                name: name.to_owned(),
                source: Box::new(err),
            }),
        }
    }
}
