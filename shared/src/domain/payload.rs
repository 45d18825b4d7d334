//! An invoke payload as its caller wrote it: JSON text decoded strictly.
//!
//! JSON allows an object to repeat a key, and most decoders keep the last
//! value silently. A chat backend shows its user one value, the function
//! would act on another: what runs could differ from what was approved. So
//! the create and schedules payloads are decoded from the raw text with a
//! visitor that notices every repeated key, at any depth, and the use case
//! refuses the request (`invalid_request`) before anything else.
//!
//! Invariant: decoding never fails on a repeated key (the Lambda runtime
//! would turn that into a function error, which the caller retries); it
//! records the first one, by its path, and keeps the rest of the value.

use std::collections::BTreeSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// A decoded payload and the first repeated key it held, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub value: Value,
    /// The path of the first repeated key (`input.title`), if one was repeated.
    pub duplicate_key: Option<String>,
}

impl Payload {
    /// Decodes JSON text; `Err` for text that is not JSON at all.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// A payload that was already a value (keys in a value are unique).
    pub fn from_value(value: Value) -> Self {
        Self {
            value,
            duplicate_key: None,
        }
    }
}

impl From<Value> for Payload {
    fn from(value: Value) -> Self {
        Self::from_value(value)
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}.{child}")
    }
}

impl<'de> Deserialize<'de> for Payload {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Strict)
    }
}

struct Strict;

impl<'de> Visitor<'de> for Strict {
    type Value = Payload;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::Bool(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::from(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::from(v)))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::from(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::String(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::String(v)))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::Null))
    }

    fn visit_none<E: de::Error>(self) -> Result<Payload, E> {
        Ok(Payload::from_value(Value::Null))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Payload, D::Error> {
        deserializer.deserialize_any(Strict)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Payload, A::Error> {
        let mut values = Vec::new();
        let mut duplicate = None;
        while let Some(item) = seq.next_element::<Payload>()? {
            if duplicate.is_none() {
                duplicate = item.duplicate_key.map(|path| join(&values.len().to_string(), &path));
            }
            values.push(item.value);
        }
        Ok(Payload {
            value: Value::Array(values),
            duplicate_key: duplicate,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Payload, A::Error> {
        let mut object = Map::new();
        let mut seen = BTreeSet::new();
        let mut duplicate = None;
        while let Some(key) = map.next_key::<String>()? {
            let item: Payload = map.next_value()?;
            if duplicate.is_none() {
                if !seen.insert(key.clone()) {
                    duplicate = Some(key.clone());
                } else if let Some(path) = item.duplicate_key {
                    duplicate = Some(join(&key, &path));
                }
            }
            // The first value is kept: nothing of a refused payload is used.
            object.entry(key).or_insert(item.value);
        }
        Ok(Payload {
            value: Value::Object(object),
            duplicate_key: duplicate,
        })
    }
}

/// An answer as an invoke returns it: `{"ok": true, ...answer}`.
pub fn answered<T: serde::Serialize>(answer: &T) -> serde_json::Value {
    let mut value = serde_json::json!({"ok": true});
    if let (Some(out), Ok(serde_json::Value::Object(fields))) = (value.as_object_mut(), serde_json::to_value(answer)) {
        out.extend(fields);
    }
    value
}

/// A refusal as an invoke returns it: `{"ok": false, "error": {"code", "message"}}`.
pub fn refused(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"ok": false, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_repeated_key_is_found_at_any_depth() {
        let cases = [
            (r#"{"op": "create", "op": "describe"}"#, Some("op")),
            (r#"{"input": {"at": "a", "title": "t", "at": "b"}}"#, Some("input.at")),
            (r#"{"a": [{"x": 1}, {"y": 1, "y": 2}]}"#, Some("a.1.y")),
            (r#"{"a": {"b": 1}, "c": {"b": 2}}"#, None),
            (r#"{"a": "\u0061", "\u0061": 1}"#, Some("a")),
        ];
        for (text, want) in cases {
            let payload = Payload::parse(text).unwrap();
            assert_eq!(payload.duplicate_key.as_deref(), want, "{text}");
        }
    }

    #[test]
    fn a_clean_payload_decodes_as_serde_json_would() {
        let text = r#"{"op": "list", "n": -3, "f": 1.5, "big": 18446744073709551615, "l": [true, null, "x"], "o": {}}"#;
        let payload = Payload::parse(text).unwrap();
        assert_eq!(payload.duplicate_key, None);
        assert_eq!(payload.value, serde_json::from_str::<Value>(text).unwrap());
        assert_eq!(Payload::from(json!({"a": 1})).value, json!({"a": 1}));
        assert!(Payload::parse("{").is_err());
        assert!(Payload::parse(r#"{"a": 1} x"#).is_err());
    }
}
