//! CloudWatch metrics in Embedded Metric Format: one JSON line on stdout per
//! data point, which Lambda's log pipeline turns into a metric. No API call,
//! no latency on the hot path.
//!
//! Namespace `ScheduledAgentTasks`. Runner: `RunsStarted`, `RunsSucceeded`,
//! `RunsFailed`, `RunsSkipped` (dimension `Reason`), `DuplicatesAbsorbed`,
//! `BudgetRefusals`, `RunsReturned`, `RunsReturnedThrottled`,
//! `RunsReturnedPaced`. Reconcile: `ReconcileChanges` (dimension `Kind`),
//! `OccurrencesOverdue` (the missed-occurrence check, every shard's run),
//! `OverdueCheckUnfinished` (a shard's check that ran out of time, 0 or 1),
//! `OverdueBacklogSeconds` (seconds: the oldest `due` a shard's check left
//! unjudged), `OverdueTasksUnjudged` (tasks a shard's check could not judge
//! and went past), `ApprovalsLapsedBacklog` (seconds: the oldest lapsed
//! approval request a check period's expiry left), `DeclarationsRefused`.

use std::io::Write;

use serde_json::{Map, Value, json};

pub const NAMESPACE: &str = "ScheduledAgentTasks";

/// One EMF record: a count, with at most one dimension. A dimensioned count
/// is also published without the dimension, so one alarm watches the total.
pub fn record(name: &str, value: u64, dimension: Option<(&str, &str)>) -> Value {
    record_in(name, value, "Count", dimension)
}

/// Writes a duration in seconds to stdout as EMF (an alarm reads its maximum).
pub fn seconds(name: &str, value: u64) {
    let line = record_in(name, value, "Seconds", None);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

fn record_in(name: &str, value: u64, unit: &str, dimension: Option<(&str, &str)>) -> Value {
    let dimensions: Vec<Vec<&str>> = dimension
        .map(|(k, _)| vec![vec![k], vec![]])
        .unwrap_or_else(|| vec![vec![]]);
    let mut line = Map::new();
    line.insert(
        "_aws".into(),
        json!({
            "Timestamp": chrono::Utc::now().timestamp_millis(),
            "CloudWatchMetrics": [{
                "Namespace": NAMESPACE,
                "Dimensions": dimensions,
                "Metrics": [{"Name": name, "Unit": unit}],
            }],
        }),
    );
    if let Some((k, v)) = dimension {
        line.insert(k.into(), Value::String(v.into()));
    }
    line.insert(name.into(), json!(value));
    Value::Object(line)
}

/// Writes a count to stdout as EMF.
pub fn count(name: &str, value: u64, dimension: Option<(&str, &str)>) {
    let line = record(name, value, dimension);
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_embedded_metric_format() {
        let r = record("RunsSkipped", 1, Some(("Reason", "paused")));
        assert_eq!(r["_aws"]["CloudWatchMetrics"][0]["Namespace"], NAMESPACE);
        assert_eq!(r["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([["Reason"], []]));
        assert_eq!(
            r["_aws"]["CloudWatchMetrics"][0]["Metrics"][0],
            json!({"Name": "RunsSkipped", "Unit": "Count"})
        );
        assert_eq!(r["Reason"], "paused");
        assert_eq!(r["RunsSkipped"], 1);
        assert!(r["_aws"]["Timestamp"].as_i64().unwrap() > 0);
        let plain = record("RunsStarted", 2, None);
        assert_eq!(plain["_aws"]["CloudWatchMetrics"][0]["Dimensions"], json!([[]]));
    }
}
