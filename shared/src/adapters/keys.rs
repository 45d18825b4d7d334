//! The single-table key layout (SPEC §3). The only module that builds
//! DynamoDB keys; operators find the same layout in ARCHITECTURE.md.
//!
//! | item        | pk                    | sk                           |
//! |-------------|-----------------------|------------------------------|
//! | task        | `WS#<workspace>`      | `TASK#<task_id>`             |
//! | run         | `TASK#<task_id>`      | `RUN#<scheduled time, UTC>`  |
//! | install     | `WS#<workspace>`      | `INSTALL#<install_id>`       |
//! | idempotency | `IDEM#<principal>`    | `KEY#<key>`                  |
//! | account     | `ACCOUNT#<account>`   | `PERIOD#<YYYY-MM>`           |
//! | malformed   | `MALFORMED#<YYYY-MM-DD>` | `MSG#<message id>`        |
//! | webhook id  | `WEBHOOK#<id>`        | `WEBHOOK`                    |

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

pub const PK: &str = "pk";
pub const SK: &str = "sk";
/// The item's entity type, for the console and for scans by operators.
pub const ENTITY: &str = "entity";

/// A primary key: `pk` and `sk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

impl Key {
    pub fn task(workspace: &str, task_id: &str) -> Self {
        Self {
            pk: format!("WS#{workspace}"),
            sk: format!("TASK#{task_id}"),
        }
    }

    pub fn run(task_id: &str, scheduled_time: &str) -> Self {
        Self {
            pk: format!("TASK#{task_id}"),
            sk: format!("RUN#{scheduled_time}"),
        }
    }

    pub fn install(workspace: &str, install_id: &str) -> Self {
        Self {
            pk: format!("WS#{workspace}"),
            sk: format!("INSTALL#{install_id}"),
        }
    }

    pub fn idempotency(principal: &str, key: &str) -> Self {
        Self {
            pk: format!("IDEM#{principal}"),
            sk: format!("KEY#{key}"),
        }
    }

    /// What an account was charged in a month.
    pub fn account(account: &str, period: &str) -> Self {
        Self {
            pk: format!("ACCOUNT#{account}"),
            sk: format!("PERIOD#{period}"),
        }
    }

    /// A runs-queue message that was not a run message, kept for an operator.
    pub fn malformed(day: &str, message_id: &str) -> Self {
        Self {
            pk: format!("MALFORMED#{day}"),
            sk: format!("MSG#{message_id}"),
        }
    }

    /// A webhook id already delivered (duplicates are ignored).
    pub fn webhook(id: &str) -> Self {
        Self {
            pk: format!("WEBHOOK#{id}"),
            sk: "WEBHOOK".to_owned(),
        }
    }

    /// The key as a `GetItem` key map.
    pub fn to_map(&self) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (PK.to_owned(), AttributeValue::S(self.pk.clone())),
            (SK.to_owned(), AttributeValue::S(self.sk.clone())),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_the_spec() {
        assert_eq!(
            Key::task("ws_1", "rem_1"),
            Key {
                pk: "WS#ws_1".into(),
                sk: "TASK#rem_1".into()
            }
        );
        assert_eq!(
            Key::run("rem_1", "2026-12-24T18:00:00Z"),
            Key {
                pk: "TASK#rem_1".into(),
                sk: "RUN#2026-12-24T18:00:00Z".into()
            }
        );
        assert_eq!(
            Key::install("ws_1", "ins_1"),
            Key {
                pk: "WS#ws_1".into(),
                sk: "INSTALL#ins_1".into()
            }
        );
        assert_eq!(
            Key::idempotency("usr_1", "k"),
            Key {
                pk: "IDEM#usr_1".into(),
                sk: "KEY#k".into()
            }
        );
    }
}
