//! The model pace's item (`domain::run::pace`), one per model id on the table
//! (`keys::Key::pace`): `next_ms`, `gap_ms`, `changed_ms`. Each write is one
//! conditional `UpdateItem` that does what the domain's `Slots` says, in
//! DynamoDB's expression language, so the fleet's instances never read
//! before they write and never collide: DynamoDB applies each update to the
//! item atomically. A refused write returns the item as it was
//! (`ALL_OLD`) for the domain to say why (`pace::refusal`).
//!
//! The item changes at most about once per model request, so one item
//! serves up to some 60,000 requests a minute under DynamoDB's 1,000 writes
//! a second per partition. Its writes reach the table's stream, and the
//! notification pipe's filter (run records only) drops them.

use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure};

use super::dynamo::{DynamoStore, Item, request_error};
use super::keys::Key;
use crate::domain::run::pace::Slots;
use crate::ports::{PaceAnswer, StoreError};

const NEXT: &str = "next_ms";
const GAP: &str = "gap_ms";
const CHANGED: &str = "changed_ms";

fn n(value: i64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

/// The slots an item holds; `None` for no item.
fn slots_of(item: Option<Item>) -> Result<Option<Slots>, StoreError> {
    let Some(item) = item else {
        return Ok(None);
    };
    let number = |name: &str| -> Result<i64, StoreError> {
        item.get(name)
            .and_then(|v| v.as_n().ok())
            .and_then(|v| v.parse::<i64>().ok())
            .ok_or_else(|| StoreError::Corrupt {
                what: "model pace".into(),
                source: format!("`{name}` is not a whole number").into(),
            })
    };
    Ok(Some(Slots {
        next_ms: number(NEXT)?,
        gap_ms: number(GAP)?,
        changed_ms: number(CHANGED)?,
    }))
}

impl DynamoStore {
    /// One conditional update of the pace item of `model_id`: the item
    /// after it, or as it was when the condition failed.
    async fn pace_update(
        &self,
        model_id: &str,
        update: &str,
        condition: &str,
        names: &[(&str, &str)],
        values: Vec<(&str, AttributeValue)>,
    ) -> Result<PaceAnswer, StoreError> {
        self.counted();
        let mut call = self
            .client()
            .update_item()
            .table_name(self.table())
            .set_key(Some(Key::pace(model_id).to_map()))
            .update_expression(update)
            .condition_expression(condition)
            .return_values(ReturnValue::AllNew)
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld);
        for (placeholder, name) in names {
            call = call.expression_attribute_names(*placeholder, *name);
        }
        for (name, value) in values {
            call = call.expression_attribute_values(name, value);
        }
        match call.send().await {
            Ok(out) => slots_of(out.attributes)?
                .map(PaceAnswer::Taken)
                .ok_or_else(|| StoreError::Corrupt {
                    what: "model pace".into(),
                    source: "UpdateItem returned no attributes".into(),
                }),
            Err(err) => match err.into_service_error() {
                UpdateItemError::ConditionalCheckFailedException(e) => Ok(PaceAnswer::Refused(slots_of(e.item)?)),
                other => Err(request_error("UpdateItem", other)),
            },
        }
    }

    /// `Slots::book`: the next slot when it comes from now to `latest_ms`.
    pub(crate) async fn book_pace(
        &self,
        model_id: &str,
        now_ms: i64,
        latest_ms: i64,
    ) -> Result<PaceAnswer, StoreError> {
        self.pace_update(
            model_id,
            "SET #next = #next + #gap",
            "#next BETWEEN :now AND :latest",
            &[("#next", NEXT), ("#gap", GAP)],
            vec![(":now", n(now_ms)), (":latest", n(latest_ms))],
        )
        .await
    }

    /// `Slots::start`: the slot at now when nothing is booked ahead.
    pub(crate) async fn start_pace(&self, model_id: &str, now_ms: i64, gap_ms: i64) -> Result<PaceAnswer, StoreError> {
        self.pace_update(
            model_id,
            "SET #next = :now + if_not_exists(#gap, :gap), #gap = if_not_exists(#gap, :gap), \
             #changed = if_not_exists(#changed, :now), entity = :entity",
            "attribute_not_exists(#next) OR #next < :now",
            &[("#next", NEXT), ("#gap", GAP), ("#changed", CHANGED)],
            vec![
                (":now", n(now_ms)),
                (":gap", n(gap_ms)),
                (":entity", AttributeValue::S("pace".to_owned())),
            ],
        )
        .await
    }

    /// `RunStore::pace_charge`: the next free slot `charge_ms` further on,
    /// from itself when booked ahead of `now_ms`, else from `now_ms`.
    pub(crate) async fn charge_pace(&self, model_id: &str, now_ms: i64, charge_ms: i64) -> Result<bool, StoreError> {
        let ahead = self
            .pace_update(
                model_id,
                "SET #next = #next + :charge",
                "#next >= :now",
                &[("#next", NEXT)],
                vec![(":now", n(now_ms)), (":charge", n(charge_ms))],
            )
            .await?;
        match ahead {
            PaceAnswer::Taken(_) => Ok(true),
            // No item: nothing was booked, the next start paces from then.
            PaceAnswer::Refused(None) => Ok(false),
            PaceAnswer::Refused(Some(_)) => {
                let at = now_ms.saturating_add(charge_ms);
                let idle = self
                    .pace_update(
                        model_id,
                        "SET #next = :at",
                        "#next < :now",
                        &[("#next", NEXT)],
                        vec![(":now", n(now_ms)), (":at", n(at))],
                    )
                    .await?;
                Ok(matches!(idle, PaceAnswer::Taken(_)))
            }
        }
    }

    /// A new gap, if the gap and its change are still those `seen`.
    pub(crate) async fn set_pace_gap(
        &self,
        model_id: &str,
        seen: &Slots,
        gap_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let answer = self
            .pace_update(
                model_id,
                "SET #gap = :gap, #changed = :now",
                "#gap = :seen_gap AND #changed = :seen_changed",
                &[("#gap", GAP), ("#changed", CHANGED)],
                vec![
                    (":gap", n(gap_ms)),
                    (":now", n(now_ms)),
                    (":seen_gap", n(seen.gap_ms)),
                    (":seen_changed", n(seen.changed_ms)),
                ],
            )
            .await?;
        Ok(matches!(answer, PaceAnswer::Taken(_)))
    }
}
