//! A local stand-in for the EventBridge Pipes of `template.yaml`:
//! `RunFinishedPipe`, which turns settled run records into `Scheduled run
//! finished` events, and `BudgetReachedPipe`, which turns a workspace's
//! month reached into one `Workspace budget reached` event. moto keeps the
//! table's stream but runs no pipe, so this one reads the stream and puts
//! the events, each record through each pipe. It takes the pipe's filter pattern, input
//! template, detail type and source from `template.yaml` itself: a mistake
//! there shows in every local test that reads events.
//!
//! It implements what that pipe uses, no more: patterns of nested objects
//! whose leaves list exact strings, and `<$.path>` placeholders in the input
//! template; a pattern it does not implement is refused when it reads the
//! template, never read as one that matches nothing.

use std::sync::Arc;

use aws_config::SdkConfig;
use aws_sdk_dynamodbstreams::types::{AttributeValue, Record, ShardIteratorType};
use serde_json::{Map, Value};
use tokio::sync::Mutex;

/// The pipe's definition, as the template gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct PipeSpec {
    pub pattern: Value,
    pub input_template: String,
    pub detail_type: String,
    pub source: String,
}

fn template() -> anyhow::Result<serde_yaml::Value> {
    let path = crate::moto::repo_root().join("template.yaml");
    Ok(serde_yaml::from_str(&std::fs::read_to_string(&path)?)?)
}

impl PipeSpec {
    /// Reads `RunFinishedPipe` from the repository's `template.yaml`.
    pub fn from_template() -> anyhow::Result<Self> {
        Self::named(&template()?, "RunFinishedPipe")
    }

    /// Every `AWS::Pipes::Pipe` of the repository's `template.yaml`: each
    /// reads the table's stream on its own (`RunFinishedPipe`,
    /// `BudgetReachedPipe`).
    pub fn all_from_template() -> anyhow::Result<Vec<Self>> {
        let template = template()?;
        let resources = template["Resources"]
            .as_mapping()
            .ok_or_else(|| anyhow::anyhow!("template.yaml has no Resources"))?;
        resources
            .iter()
            .filter(|(_, r)| r["Type"].as_str() == Some("AWS::Pipes::Pipe"))
            .map(|(name, _)| Self::named(&template, name.as_str().unwrap_or_default()))
            .collect()
    }

    /// The pipe `name` of `template`.
    fn named(template: &serde_yaml::Value, name: &str) -> anyhow::Result<Self> {
        let props = &template["Resources"][name]["Properties"];
        let text = |v: &serde_yaml::Value, what: &str| {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("{name}: {what} missing from template.yaml"))
        };
        let filters = props["SourceParameters"]["FilterCriteria"]["Filters"]
            .as_sequence()
            .ok_or_else(|| anyhow::anyhow!("{name}: no filters"))?;
        anyhow::ensure!(filters.len() == 1, "{name}: one filter expected");
        let target = &props["TargetParameters"];
        let pattern: Value = serde_json::from_str(&text(&filters[0]["Pattern"], "the filter pattern")?)?;
        supported(&pattern, "$")?;
        Ok(Self {
            pattern,
            input_template: text(&target["InputTemplate"], "InputTemplate")?,
            detail_type: text(&target["EventBridgeEventBusParameters"]["DetailType"], "DetailType")?,
            source: text(&target["EventBridgeEventBusParameters"]["Source"], "Source")?,
        })
    }

    /// Whether a stream record (as JSON) passes the filter.
    pub fn matches(&self, record: &Value) -> bool {
        matches_pattern(&self.pattern, record)
    }

    /// The event detail the input template makes of a stream record.
    pub fn render(&self, record: &Value) -> anyhow::Result<Value> {
        let mut out = String::new();
        let mut rest = self.input_template.as_str();
        while let Some(start) = rest.find("<$.") {
            out.push_str(&rest[..start]);
            let end = rest[start..]
                .find('>')
                .ok_or_else(|| anyhow::anyhow!("unclosed placeholder in the input template"))?;
            let path = &rest[start + 3..start + end];
            let value = path
                .split('.')
                .try_fold(record, |v, key| v.get(key))
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow::anyhow!("the record has no string at $.{path}"))?;
            // Placeholders stand inside quotes: insert the string escaped.
            let quoted = serde_json::to_string(value)?;
            out.push_str(&quoted[1..quoted.len() - 1]);
            rest = &rest[start + end + 1..];
        }
        out.push_str(rest);
        Ok(serde_json::from_str(&out)?)
    }
}

/// Refuses a pattern this stand-in would read differently from Pipes: only
/// nested objects whose leaves are lists of exact strings are implemented,
/// and an operator (`prefix`, `numeric`, `exists`, ...) would otherwise
/// silently never match here while Pipes matched it.
fn supported(pattern: &Value, at: &str) -> anyhow::Result<()> {
    match pattern {
        Value::Object(fields) => fields
            .iter()
            .try_for_each(|(key, value)| supported(value, &format!("{at}.{key}"))),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => Ok(()),
        other => anyhow::bail!(
            "RunFinishedPipe: the filter at {at} is {other}; the local pipe implements lists of exact strings only"
        ),
    }
}

/// EventBridge pattern matching, for patterns of objects and lists of
/// exact strings.
fn matches_pattern(pattern: &Value, event: &Value) -> bool {
    match pattern {
        Value::Object(fields) => fields
            .iter()
            .all(|(key, want)| event.get(key).is_some_and(|got| matches_pattern(want, got))),
        Value::Array(allowed) => allowed.contains(event),
        other => other == event,
    }
}

/// A stream record as the pipe sees it (DynamoDB JSON).
pub fn record_json(record: &Record) -> Value {
    let mut dynamodb = Map::new();
    if let Some(image) = record.dynamodb().and_then(|d| d.new_image()) {
        let image: Map<String, Value> = image.iter().map(|(k, v)| (k.clone(), attribute_json(v))).collect();
        dynamodb.insert("NewImage".into(), Value::Object(image));
    }
    serde_json::json!({
        "eventName": record.event_name().map(|e| e.as_str()).unwrap_or_default(),
        "dynamodb": dynamodb,
    })
}

fn attribute_json(value: &AttributeValue) -> Value {
    use serde_json::json;
    match value {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(b) => json!({"NULL": b}),
        AttributeValue::M(m) => {
            json!({"M": m.iter().map(|(k, v)| (k.clone(), attribute_json(v))).collect::<Map<_, _>>()})
        }
        AttributeValue::L(l) => json!({"L": l.iter().map(attribute_json).collect::<Vec<_>>()}),
        AttributeValue::Ss(v) => json!({"SS": v}),
        AttributeValue::Ns(v) => json!({"NS": v}),
        // Binary values carry nothing a run record holds.
        _ => Value::Null,
    }
}

/// The running stand-in: where it stopped reading the stream.
#[derive(Debug, Clone)]
pub struct Pipe {
    pub specs: Vec<PipeSpec>,
    pub stream_arn: String,
    pub bus: String,
    next: Arc<Mutex<Option<String>>>,
}

impl Pipe {
    /// The pipes `specs` on one stream: each record goes through each.
    pub fn new(specs: Vec<PipeSpec>, stream_arn: String, bus: String) -> Self {
        Self {
            specs,
            stream_arn,
            bus,
            next: Arc::new(Mutex::new(None)),
        }
    }

    /// Reads the stream records written since the last call and puts one
    /// event per matching record on the bus. Returns how many it put.
    pub async fn pump(&self, sdk: &SdkConfig) -> anyhow::Result<usize> {
        let streams = aws_sdk_dynamodbstreams::Client::new(sdk);
        let events = aws_sdk_eventbridge::Client::new(sdk);
        let mut next = self.next.lock().await;
        if next.is_none() {
            let stream = streams.describe_stream().stream_arn(&self.stream_arn).send().await?;
            let shard = stream
                .stream_description()
                .and_then(|d| d.shards().first())
                .and_then(|s| s.shard_id())
                .ok_or_else(|| anyhow::anyhow!("the table's stream has no shard"))?
                .to_owned();
            let iterator = streams
                .get_shard_iterator()
                .stream_arn(&self.stream_arn)
                .shard_id(shard)
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await?;
            *next = iterator.shard_iterator;
        }
        let mut sent = 0;
        while let Some(iterator) = next.clone() {
            let out = streams.get_records().shard_iterator(&iterator).send().await?;
            let records = out.records();
            *next = out.next_shard_iterator.clone().or(Some(iterator));
            if records.is_empty() {
                break;
            }
            for record in records {
                let record = record_json(record);
                for spec in self.specs.iter().filter(|spec| spec.matches(&record)) {
                    let detail = spec.render(&record)?;
                    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                        .event_bus_name(&self.bus)
                        .source(&spec.source)
                        .detail_type(&spec.detail_type)
                        .detail(detail.to_string())
                        .build();
                    let put = events.put_events().entries(entry).send().await?;
                    anyhow::ensure!(put.failed_entry_count() == 0, "the bus refused an event: {put:?}");
                    sent += 1;
                }
            }
        }
        Ok(sent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_templates_pattern_is_supported_and_operators_are_refused() {
        assert!(PipeSpec::from_template().is_ok());
        assert_eq!(PipeSpec::all_from_template().unwrap().len(), 2);
        assert!(supported(&serde_json::json!({"a": {"b": ["x", "y"]}}), "$").is_ok());
        for pattern in [
            serde_json::json!({"a": [{"prefix": "x"}]}),
            serde_json::json!({"a": [{"exists": true}]}),
            serde_json::json!({"a": [1]}),
            serde_json::json!({"a": []}),
            serde_json::json!({"a": "x"}),
        ] {
            assert!(supported(&pattern, "$").is_err(), "{pattern}");
        }
    }
}
