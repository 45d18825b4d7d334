//! DynamoDB rules moto does not enforce, enforced on the client side of the
//! local stack: a DynamoDB client whose interceptor refuses, before it is
//! sent, an update that DynamoDB itself would refuse (infra/FIDELITY.md).
//!
//! - one operator per `SET` value: `a = a + :x` is valid, `a = a - :r + :x`
//!   is a `ValidationException` on AWS and accepted by moto;
//! - no two actions of one update on overlapping paths (`a` and `a.b`, or
//!   one path twice), after `#name` placeholders are resolved;
//! - a transaction holds at most 100 actions and names each item once;
//! - an item put is at most 400 KB (DynamoDB's item size: attribute names
//!   and values, as [`item_size`] counts them).
//!
//! The harness builds the stores it hands the use cases from [`dynamodb`],
//! so every update the adapters write in a test passes these checks.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::interceptors::BeforeSerializationInterceptorContextRef;
use aws_sdk_dynamodb::config::{ConfigBag, Intercept};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::put_item::PutItemInput;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsInput;
use aws_sdk_dynamodb::operation::update_item::UpdateItemInput;
use aws_sdk_dynamodb::types::AttributeValue;

/// DynamoDB's limit on the actions of one `TransactWriteItems`.
pub const MAX_TRANSACTION_ITEMS: usize = 100;

/// DynamoDB's item size limit.
pub const MAX_ITEM_BYTES: usize = 400 * 1024;

/// An item's size as DynamoDB counts it: each attribute's name and value in
/// bytes (a number counts one byte per two digits, plus one; lists and maps
/// three bytes of overhead plus one per element).
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter().map(|(name, value)| name.len() + value_size(value)).sum()
}

fn value_size(value: &AttributeValue) -> usize {
    let number = |n: &str| n.trim_start_matches('-').len().div_ceil(2) + 1;
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(items) => items.iter().map(String::len).sum(),
        AttributeValue::Ns(items) => items.iter().map(|n| number(n)).sum(),
        AttributeValue::Bs(items) => items.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(items) => 3 + items.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        AttributeValue::M(map) => 3 + map.iter().map(|(k, v)| 1 + k.len() + value_size(v)).sum::<usize>(),
        _ => 0,
    }
}

fn check_item(item: &HashMap<String, AttributeValue>) -> Result<(), String> {
    let size = item_size(item);
    if size > MAX_ITEM_BYTES {
        return Err(format!("an item of {size} bytes (DynamoDB allows {MAX_ITEM_BYTES})"));
    }
    Ok(())
}

/// A DynamoDB client on `sdk` that refuses what DynamoDB would refuse.
pub fn dynamodb(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
    let config = shared::adapters::dynamo::config(sdk).interceptor(StrictDynamo).build();
    aws_sdk_dynamodb::Client::from_conf(config)
}

#[derive(Debug)]
struct StrictDynamo;

impl Intercept for StrictDynamo {
    fn name(&self) -> &'static str {
        "StrictDynamo"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input();
        if let Some(put) = input.downcast_ref::<PutItemInput>()
            && let Some(item) = put.item()
        {
            check_item(item)?;
        }
        if let Some(update) = input.downcast_ref::<UpdateItemInput>()
            && let Some(expression) = update.update_expression()
        {
            check_update(expression, update.expression_attribute_names())?;
        }
        if let Some(transaction) = input.downcast_ref::<TransactWriteItemsInput>() {
            let items = transaction.transact_items();
            if items.len() > MAX_TRANSACTION_ITEMS {
                return Err(format!(
                    "a transaction of {} actions (DynamoDB allows {MAX_TRANSACTION_ITEMS})",
                    items.len()
                )
                .into());
            }
            let mut keys: Vec<(String, String)> = Vec::new();
            for item in items {
                let (table, key) = if let Some(u) = item.update() {
                    check_update(u.update_expression(), u.expression_attribute_names())?;
                    (u.table_name(), u.key())
                } else if let Some(p) = item.put() {
                    check_item(p.item())?;
                    (p.table_name(), p.item())
                } else if let Some(d) = item.delete() {
                    (d.table_name(), d.key())
                } else if let Some(c) = item.condition_check() {
                    (c.table_name(), c.key())
                } else {
                    continue;
                };
                let id = (table.to_owned(), key_text(key));
                if keys.contains(&id) {
                    return Err(format!("a transaction names one item twice ({})", id.1).into());
                }
                keys.push(id);
            }
        }
        Ok(())
    }
}

/// The key attributes of an item (a `Put` carries the whole item: only
/// `pk` and `sk` name it).
fn key_text(item: &HashMap<String, AttributeValue>) -> String {
    let part = |name: &str| match item.get(name) {
        Some(AttributeValue::S(s)) => s.clone(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    format!("{}/{}", part("pk"), part("sk"))
}

/// Splits at top-level (outside parentheses and brackets) occurrences of
/// `separator`.
fn split_top(text: &str, separator: char) -> Vec<&str> {
    let mut depth = 0i32;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            c if c == separator && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

/// The clauses of an update expression: (keyword, actions text).
fn clauses(expression: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut depth = 0i32;
    for word in expression.split_inclusive(char::is_whitespace) {
        let bare = word.trim();
        let keyword = bare.to_ascii_uppercase();
        let is_keyword = depth == 0 && matches!(keyword.as_str(), "SET" | "REMOVE" | "ADD" | "DELETE");
        for c in word.chars() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                _ => {}
            }
        }
        if is_keyword {
            out.push((keyword, String::new()));
        } else if let Some((_, text)) = out.last_mut() {
            text.push_str(word);
        }
    }
    out
}

/// A path with its `#name` placeholders resolved, as DynamoDB compares them.
fn resolve(path: &str, names: Option<&HashMap<String, String>>) -> String {
    let mut out = String::new();
    let mut chars = path.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c == '#' {
            let mut token = String::from("#");
            while let Some(&n) = chars.peek() {
                if n.is_ascii_alphanumeric() || n == '_' {
                    token.push(n);
                    chars.next();
                } else {
                    break;
                }
            }
            match names.and_then(|m| m.get(&token)) {
                Some(name) => out.push_str(&format!("\"{name}\"")),
                None => out.push_str(&token),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn overlaps(a: &str, b: &str) -> bool {
    let child = |parent: &str, path: &str| {
        path.strip_prefix(parent)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.') || rest.starts_with('['))
    };
    child(a, b) || child(b, a)
}

/// Checks one update expression against DynamoDB's grammar rules that moto
/// does not enforce.
pub fn check_update(expression: &str, names: Option<&HashMap<String, String>>) -> Result<(), String> {
    let mut paths: Vec<String> = Vec::new();
    for (keyword, actions) in clauses(expression) {
        for action in split_top(&actions, ',') {
            let action = action.trim();
            if action.is_empty() {
                continue;
            }
            let path = if keyword == "SET" {
                let Some((path, value)) = action.split_once('=') else {
                    return Err(format!("`{action}`: a SET action without `=`"));
                };
                let operators = split_top(value, '+').len() - 1 + split_top(value, '-').len() - 1;
                if operators > 1 {
                    return Err(format!(
                        "`{action}`: DynamoDB allows one `+` or `-` per SET value (in `{expression}`)"
                    ));
                }
                path
            } else {
                action.split_whitespace().next().unwrap_or_default()
            };
            let path = resolve(path, names);
            if let Some(other) = paths.iter().find(|p| overlaps(p, &path)) {
                return Err(format!(
                    "`{path}` and `{other}` overlap: DynamoDB refuses two actions on one path (in `{expression}`)"
                ));
            }
            paths.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn what_dynamodb_accepts_passes() {
        let n = names(&[
            ("#occ", "2026-12-24T18:00:00Z"),
            ("#period", "2026-12"),
            ("#old0", "2026-11-01T00:00:00Z"),
        ]);
        for expression in [
            "SET claims.#occ = :claim, budget_used.#period = if_not_exists(budget_used.#period, :zero) + budget_reserve_usd",
            "SET claims.#occ.#status = :status, budget_used.#period = budget_used.#period + :delta REMOVE claims.#old0",
            "SET entity = :entity ADD spent_usd :actual, runs :one",
            "set a = list_append(a, :x), b = :y",
            "REMOVE a, b.c",
        ] {
            assert_eq!(check_update(expression, Some(&n)), Ok(()), "{expression}");
        }
    }

    #[test]
    fn item_sizes_are_counted_as_dynamodb_counts_them() {
        let item = HashMap::from([
            ("pk".to_owned(), AttributeValue::S("item#1".into())),
            ("n".to_owned(), AttributeValue::N("12345".into())),
            (
                "m".to_owned(),
                AttributeValue::M(HashMap::from([("a".to_owned(), AttributeValue::Bool(true))])),
            ),
        ]);
        assert_eq!(item_size(&item), (2 + 6) + (1 + 4) + (1 + 3 + 1 + 1 + 1));
        let big = HashMap::from([("output".to_owned(), AttributeValue::S("x".repeat(MAX_ITEM_BYTES)))]);
        assert!(check_item(&big).is_err());
        let fits = HashMap::from([("o".to_owned(), AttributeValue::S("x".repeat(MAX_ITEM_BYTES - 1)))]);
        assert!(check_item(&fits).is_ok());
    }

    #[test]
    fn what_dynamodb_refuses_is_refused() {
        let n = names(&[("#a", "x"), ("#b", "x")]);
        for expression in [
            "SET budget = budget - :reserved + :actual",
            "SET a = :x, a = :y",
            "SET a = :x, a.b = :y",
            "SET claims.#a = :x REMOVE claims.#b",
            "SET a = :x ADD a :one",
        ] {
            assert!(check_update(expression, Some(&n)).is_err(), "{expression}");
        }
    }
}
