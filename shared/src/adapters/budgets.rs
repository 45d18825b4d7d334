//! A workspace's budget item (`budget::WorkspaceBudget`, key
//! `Key::workspace_budget`): the limit an admin sets, with its version,
//! and, a month each, what the workspace's occurrences hold there
//! (`committed#<YYYY-MM>`). The runner's claims, take-overs, settles,
//! releases and skips of dead claims move a month in their own transactions
//! (`workspace_hold`, used by `adapters::runs`); an admin reads it and sets
//! the limit here ([`WorkspaceBudgets`]).

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};

use super::dynamo::{DynamoStore, Item, request_error};
use super::keys::Key;
use crate::domain::task::budget::{self, WorkspaceBudget};
use crate::ports::{StoreError, WorkspaceBudgets};

/// The `entity` of a workspace's budget item.
const WORKSPACE_BUDGET: &str = "workspace_budget";

/// The attribute of a workspace's budget item holding what a month
/// (`YYYY-MM`) holds.
pub fn committed_of(period: &str) -> String {
    format!("committed#{period}")
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The budget as its item says it, for `period`; an absent item is a
/// workspace no admin budgeted and nothing ran in.
fn budget_of(workspace: &str, period: &str, item: Option<&Item>) -> WorkspaceBudget {
    let number = |name: &str| {
        item.and_then(|i| i.get(name))
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<f64>().ok())
    };
    let text = |name: &str| item.and_then(|i| i.get(name)).and_then(|v| v.as_s().ok()).cloned();
    WorkspaceBudget {
        workspace: workspace.to_owned(),
        limit_usd: number("limit_usd"),
        version: number("version").map_or(0, |v| v as u64),
        period: period.to_owned(),
        committed_usd: number(&committed_of(period)).unwrap_or(0.0),
        updated_by: text("updated_by"),
        updated_at: text("updated_at")
            .and_then(|t| DateTime::parse_from_rfc3339(&t).ok())
            .map(|t| t.with_timezone(&Utc)),
    }
}

/// How a write moves a workspace's month.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fit {
    /// A settle, a release, a payment: the month moves, unconditionally.
    Move,
    /// A claim's reservation, admitted under the limit read (none: no limit).
    Under(Option<f64>),
}

/// The limit a workspace's budget item holds (none: no limit).
pub(crate) fn limit_of(item: Option<&Item>) -> Option<f64> {
    item?.get("limit_usd")?.as_n().ok()?.parse().ok()
}

/// How long a month's items are kept (its reached mark, its accounts'
/// charges): a year past the month, its event long sent and its bills
/// read; then TTL ends them.
pub(crate) const MONTH_KEPT_DAYS: i64 = 400;

impl DynamoStore {
    /// Marks a workspace's month reached, once (put if absent): the mark's
    /// insert is the month's `Workspace budget reached` event. The limit
    /// is written as text, as the event carries it.
    pub(crate) async fn mark_reached(
        &self,
        workspace: &str,
        month: &str,
        budget_usd: f64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let key = Key::budget_reached(workspace, month);
        let item = Item::from([
            (super::keys::PK.to_owned(), s(&key.pk)),
            (super::keys::SK.to_owned(), s(&key.sk)),
            ("entity".to_owned(), s("budget_reached")),
            ("workspace".to_owned(), s(workspace)),
            ("month".to_owned(), s(month)),
            ("budget_usd".to_owned(), s(&budget_usd.to_string())),
            ("reached_at".to_owned(), s(&crate::domain::schedule::format_utc(now))),
            (
                "ttl".to_owned(),
                n((now + chrono::Duration::days(MONTH_KEPT_DAYS)).timestamp()),
            ),
        ]);
        // Already marked this month: its event went, nothing to do.
        self.put_new(item).await.map(drop)
    }
    /// A workspace's side of a write (`budget::WorkspaceBudget`): what its
    /// month holds moves by `delta`. [`Fit::Under`], a reservation: only if
    /// it fits under the limit the claim read (`budget::admits`), fenced on
    /// that limit, the item as it was returned when not (a limit moved
    /// meanwhile: the caller reads it and tries again).
    pub(crate) fn workspace_hold(
        &self,
        workspace: &str,
        period: &str,
        delta: f64,
        fit: Fit,
    ) -> Result<TransactWriteItem, StoreError> {
        // Months more than a year back leave as this one moves
        // (`budget::stale_periods`): the item never grows past two years.
        let stale = crate::domain::task::budget::stale_periods(period);
        let remove: Vec<String> = (0..stale.len()).map(|i| format!("#stale{i}")).collect();
        let mut update = Update::builder()
            .table_name(self.table())
            .set_key(Some(Key::workspace_budget(workspace).to_map()))
            .update_expression(format!(
                "SET entity = :entity, workspace = :workspace, #held = if_not_exists(#held, :zero) + :delta{}",
                if remove.is_empty() {
                    String::new()
                } else {
                    format!(" REMOVE {}", remove.join(", "))
                }
            ))
            .expression_attribute_names("#held", committed_of(period))
            .expression_attribute_values(":entity", s(WORKSPACE_BUDGET))
            .expression_attribute_values(":workspace", s(workspace))
            .expression_attribute_values(":zero", n(0))
            .expression_attribute_values(":delta", n(delta));
        for (name, month) in remove.iter().zip(&stale) {
            update = update.expression_attribute_names(name, committed_of(month));
        }
        if let Fit::Under(limit) = fit {
            let condition = match limit {
                None => "attribute_not_exists(limit_usd)".to_owned(),
                Some(limit) => {
                    // `budget::admits` on the item; a month nothing held yet
                    // holds 0.
                    let fits = "#held < :limit AND #held <= :most";
                    update = update
                        .expression_attribute_values(":limit", n(limit))
                        .expression_attribute_values(":most", n(budget::most_held(limit, delta)));
                    if budget::admits(limit, 0.0, delta) {
                        format!("limit_usd = :limit AND (attribute_not_exists(#held) OR ({fits}))")
                    } else {
                        format!("limit_usd = :limit AND {fits}")
                    }
                }
            };
            update = update
                .condition_expression(condition)
                .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        }
        let update = update.build().map_err(|e| request_error("TransactWriteItems", e))?;
        Ok(TransactWriteItem::builder().update(update).build())
    }
}

impl DynamoStore {
    /// The limit a workspace's admin set (none: no limit), read eventually
    /// consistent: a claim fenced on a stale one is refused, and reads it
    /// again.
    pub(crate) async fn workspace_limit(&self, workspace: &str) -> Result<Option<f64>, StoreError> {
        self.counted();
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(Key::workspace_budget(workspace).to_map()))
            .projection_expression("limit_usd")
            .send()
            .await
            .map_err(|e| request_error("GetItem", e))?;
        Ok(limit_of(out.item.as_ref()))
    }
}

impl WorkspaceBudgets for DynamoStore {
    async fn workspace_budget(&self, workspace: &str, period: &str) -> Result<WorkspaceBudget, StoreError> {
        self.counted();
        let out = self
            .client()
            .get_item()
            .table_name(self.table())
            .set_key(Some(Key::workspace_budget(workspace).to_map()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| request_error("GetItem", e))?;
        Ok(budget_of(workspace, period, out.item.as_ref()))
    }

    async fn set_workspace_budget(
        &self,
        workspace: &str,
        limit: Option<f64>,
        expected: u64,
        by: &str,
        now: DateTime<Utc>,
        period: &str,
    ) -> Result<Result<WorkspaceBudget, u64>, StoreError> {
        let mut update = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(Key::workspace_budget(workspace).to_map()))
            .expression_attribute_values(":entity", s(WORKSPACE_BUDGET))
            .expression_attribute_values(":workspace", s(workspace))
            .expression_attribute_values(":next", n(expected + 1))
            .expression_attribute_values(":by", s(by))
            .expression_attribute_values(":at", s(&crate::domain::schedule::format_utc(now)))
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        let set = "SET entity = :entity, workspace = :workspace, version = :next, updated_by = :by, updated_at = :at";
        update = match limit {
            Some(limit) => update
                .update_expression(format!("{set}, limit_usd = :limit"))
                .expression_attribute_values(":limit", n(limit)),
            None => update.update_expression(format!("{set} REMOVE limit_usd")),
        };
        update = if expected == 0 {
            update.condition_expression("attribute_not_exists(version)")
        } else {
            update
                .condition_expression("version = :expected")
                .expression_attribute_values(":expected", n(expected))
        };
        self.counted();
        match update.send().await {
            Ok(out) => Ok(Ok(budget_of(workspace, period, out.attributes.as_ref()))),
            Err(err) => match err.into_service_error() {
                UpdateItemError::ConditionalCheckFailedException(e) => {
                    Ok(Err(budget_of(workspace, period, e.item.as_ref()).version))
                }
                other => Err(request_error("UpdateItem", other)),
            },
        }
    }
}
