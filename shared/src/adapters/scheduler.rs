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

use super::FirstUse;
use aws_sdk_scheduler::types::{
    ActionAfterCompletion, DeadLetterConfig, FlexibleTimeWindow, FlexibleTimeWindowMode, RetryPolicy, ScheduleState,
    Target,
};

use crate::config::ScheduleTarget;
use crate::domain::run::definition::{ScheduleDefinition, ScheduleStatus};
use crate::ports::{ScheduleError, Schedules};

/// Scheduler keeps retrying a failed delivery to the queue for this long; the
/// runner's door decides separately whether a late delivery still runs.
pub const RETRY_MAX_EVENT_AGE_SECONDS: i32 = 86_400;
pub const RETRY_MAX_ATTEMPTS: i32 = 185;

#[derive(Clone)]
pub struct EventBridgeSchedules {
    client: FirstUse<Client>,
    target: ScheduleTarget,
    requests: Arc<AtomicU64>,
}

impl EventBridgeSchedules {
    pub fn new(client: Client, target: ScheduleTarget) -> Self {
        Self {
            client: FirstUse::ready(client),
            target,
            requests: Arc::default(),
        }
    }

    /// The client is built at its first request ([`FirstUse`]): an admin's
    /// list, an owner's list and an unchanged install's pass send none.
    pub fn from_sdk(sdk: &aws_config::SdkConfig, target: ScheduleTarget) -> Self {
        Self {
            client: FirstUse::new(sdk, Client::new),
            target,
            requests: Arc::default(),
        }
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

/// Scheduler's `EndDate`, whole seconds.
fn end_date(schedule: &ScheduleDefinition) -> Option<aws_smithy_types::DateTime> {
    schedule
        .expression
        .end_date
        .map(|end| aws_smithy_types::DateTime::from_secs(end.timestamp()))
}

fn after_completion(schedule: &ScheduleDefinition) -> ActionAfterCompletion {
    if schedule.ends {
        ActionAfterCompletion::Delete
    } else {
        ActionAfterCompletion::None
    }
}

impl Schedules for EventBridgeSchedules {
    #[tracing::instrument(skip_all, fields(schedule = %schedule.name))]
    async fn put(&self, schedule: &ScheduleDefinition) -> Result<(), ScheduleError> {
        if schedule.retired {
            tracing::info!(schedule = %schedule.name, "a finished or cancelled task: its schedule is removed, never re-created");
            return self.delete(&schedule.name).await;
        }
        let (target, window) = self.parts(schedule)?;
        // Create and update take the same fields, each on its own builder.
        // Every field is sent on every update: one left out is cleared
        // (the end date among them).
        macro_rules! with_fields {
            ($builder:expr) => {
                $builder
                    .name(&schedule.name)
                    .group_name(&self.target.group)
                    .description(&schedule.description)
                    .schedule_expression(&schedule.expression.expression)
                    .schedule_expression_timezone(&schedule.expression.timezone)
                    .set_end_date(end_date(schedule))
                    .flexible_time_window(window.clone())
                    .target(target.clone())
                    .state(state(schedule))
                    .action_after_completion(after_completion(schedule))
            };
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        let created = with_fields!(self.client.get().create_schedule()).send().await;
        match created {
            Ok(_) => Ok(()),
            Err(err) if err.as_service_error().is_some_and(|e| e.is_conflict_exception()) => {
                self.requests.fetch_add(1, Ordering::Relaxed);
                with_fields!(self.client.get().update_schedule())
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
            .get()
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

    async fn status(&self, name: &str) -> Result<Option<ScheduleStatus>, ScheduleError> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        match self
            .client
            .get()
            .get_schedule()
            .name(name)
            .group_name(&self.target.group)
            .send()
            .await
        {
            Ok(out) => Ok(Some(ScheduleStatus {
                expression: crate::domain::schedule::Expression {
                    expression: out.schedule_expression().unwrap_or_default().to_owned(),
                    timezone: out.schedule_expression_timezone().unwrap_or("UTC").to_owned(),
                    end_date: out
                        .end_date()
                        .and_then(|end| chrono::DateTime::from_timestamp(end.secs(), 0)),
                },
                enabled: out.state() == Some(&ScheduleState::Enabled),
            })),
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_resource_not_found_exception()) =>
            {
                Ok(None)
            }
            Err(err) => Err(ScheduleError {
                operation: "GetSchedule",
                name: name.to_owned(),
                source: Box::new(err),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    //! The request shape Scheduler demands and moto does not check
    //! (infra/FIDELITY.md, "EventBridge Scheduler").
    use super::*;
    use crate::domain::schedule::Schedule;
    use crate::domain::task::{Provenance, Spec, Task, TaskId, TaskKind};
    use chrono::{TimeZone, Utc};

    fn adapter() -> EventBridgeSchedules {
        let config = aws_sdk_scheduler::Config::builder()
            .behavior_version(aws_sdk_scheduler::config::BehaviorVersion::latest())
            .region(aws_sdk_scheduler::config::Region::new("us-east-1"))
            .http_client(crate::adapters::tls::sdk_http_client(
                &crate::adapters::tls::Tls::process(),
            ))
            .build();
        EventBridgeSchedules::new(
            Client::from_conf(config),
            ScheduleTarget {
                group: "g".into(),
                queue_arn: "arn:aws:sqs:us-east-1:123456789012:runs".into(),
                role_arn: "arn:aws:iam::123456789012:role/scheduler".into(),
                dlq_arn: "arn:aws:sqs:us-east-1:123456789012:scheduler-dlq".into(),
            },
        )
    }

    fn task(schedule: Schedule) -> Task {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        Task::new(
            TaskId::for_reminder(&"w".repeat(200), &"p".repeat(200), &"k".repeat(200)),
            "w".repeat(200),
            TaskKind::Reminder,
            Provenance::User { principal: "p".into() },
            "t".into(),
            Some("i".into()),
            Spec {
                schedule,
                tools: Default::default(),
                limits: crate::domain::task::limits::Limits {
                    max_turns: 1,
                    max_tool_calls: 0,
                    max_output_tokens: 100,
                    timeout_seconds: 10,
                },
                budget: None,
                arguments: Default::default(),
                needs: Default::default(),
                bindings: Default::default(),
                agent: None,
                scopes: Default::default(),
            },
            at,
        )
    }

    /// Retry policy within Scheduler's bounds (event age 60..=86400 s,
    /// attempts 0..=185), the flexible window off, the DLQ set.
    #[test]
    fn the_target_is_within_schedulers_bounds() {
        let schedules = adapter();
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let definition = ScheduleDefinition::for_task(&task(Schedule::At { at })).unwrap();
        let (target, window) = schedules.parts(&definition).unwrap();
        let retry = target.retry_policy().unwrap();
        assert!((60..=86_400).contains(&retry.maximum_event_age_in_seconds().unwrap()));
        assert!((0..=185).contains(&retry.maximum_retry_attempts().unwrap()));
        assert_eq!(window.mode(), &FlexibleTimeWindowMode::Off);
        assert!(window.maximum_window_in_minutes().is_none(), "no window when it is off");
        assert!(target.dead_letter_config().and_then(|d| d.arn()).is_some());
        assert_eq!(after_completion(&definition), ActionAfterCompletion::Delete);
    }

    /// Names (1-64 of `[0-9a-zA-Z-_.]`), descriptions (<= 512) and inputs
    /// (<= 8192) fit, whatever the workspace and principal; expressions have
    /// Scheduler's forms (every kind's cron passes `preview::EbCron::parse`,
    /// the project's check of Scheduler's cron rules), and a schedule with
    /// an `until` sends its `EndDate` and deletes itself after its last
    /// delivery.
    #[test]
    fn names_descriptions_inputs_and_expressions_fit() {
        use crate::domain::schedule::calendar::{Calendar, MonthDay};
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let until = chrono::NaiveDate::from_ymd_opt(2027, 6, 30);
        let calendar = |month, day| Schedule::Calendar {
            calendar: Calendar {
                month,
                day,
                hour: 9,
                minute: 0,
            },
            timezone: "Europe/Berlin".into(),
            until,
        };
        let schedules = [
            Schedule::At { at },
            Schedule::Cron {
                cron: "0 9 * * MON-FRI".into(),
                timezone: "Europe/Berlin".into(),
                until: None,
            },
            Schedule::Cron {
                cron: "0 9 * * *".into(),
                timezone: "Europe/Berlin".into(),
                until,
            },
            calendar(None, MonthDay::Day(31)),
            calendar(None, MonthDay::Last),
            calendar(None, MonthDay::Nth { weekday: 0, nth: 1 }),
            calendar(None, MonthDay::LastWeekday { weekday: 4 }),
            calendar(Some(2), MonthDay::Day(29)),
        ];
        for schedule in schedules {
            let definition = ScheduleDefinition::for_task(&task(schedule)).unwrap();
            let name = &definition.name;
            assert!((1..=64).contains(&name.len()), "{name}");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "{name}"
            );
            assert!(definition.description.len() <= 512);
            assert!(definition.input.len() <= 8192, "{} bytes", definition.input.len());
            let expression = &definition.expression.expression;
            if definition.expression.expression.starts_with("at(") {
                assert_eq!(expression, "at(2026-12-24T18:00:00)");
                assert_eq!(definition.expression.timezone, "UTC");
            } else {
                let inner = expression
                    .strip_prefix("cron(")
                    .and_then(|e| e.strip_suffix(')'))
                    .unwrap();
                assert_eq!(inner.split(' ').count(), 6, "{expression}");
                assert!(
                    crate::domain::schedule::preview::EbCron::parse(expression).is_some(),
                    "{expression} breaks Scheduler's cron rules"
                );
                match definition.expression.end_date {
                    Some(end) => {
                        assert_eq!(end, Utc.with_ymd_and_hms(2027, 6, 30, 22, 0, 0).unwrap());
                        assert_eq!(end_date(&definition).map(|e| e.secs()), Some(end.timestamp()));
                        assert_eq!(after_completion(&definition), ActionAfterCompletion::Delete);
                    }
                    None => {
                        assert_eq!(end_date(&definition), None);
                        assert_eq!(after_completion(&definition), ActionAfterCompletion::None);
                    }
                }
            }
        }
    }

    #[test]
    fn a_completed_one_time_task_and_a_finished_reminder_are_retired_and_a_connector_tasks_schedule_never() {
        let at = Utc.with_ymd_and_hms(2026, 12, 24, 18, 0, 0).unwrap();
        let mut one_time = task(Schedule::At { at });
        assert!(!ScheduleDefinition::for_task(&one_time).unwrap().retired);
        one_time.completed_at = Some(at);
        assert!(ScheduleDefinition::for_task(&one_time).unwrap().retired);
        let mut recurring = task(Schedule::Cron {
            cron: "0 9 * * *".into(),
            timezone: "UTC".into(),
            until: None,
        });
        assert!(!ScheduleDefinition::for_task(&recurring).unwrap().retired);
        recurring.overrides = Some(crate::domain::task::overrides::Overrides {
            deleted: true,
            ..Default::default()
        });
        assert!(
            ScheduleDefinition::for_task(&recurring).unwrap().retired,
            "a cancelled reminder frees its place in the schedule quota"
        );
        recurring.kind = TaskKind::Connector;
        assert!(
            !ScheduleDefinition::for_task(&recurring).unwrap().retired,
            "a tombstoned connector task keeps its schedule, disabled, for a restore"
        );
    }
}
