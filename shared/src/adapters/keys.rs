//! The single-table key layout (SPEC §3). The only module that builds
//! DynamoDB keys; operators find the same layout in ARCHITECTURE.md.
//!
//! | item        | pk                    | sk                           |
//! |-------------|-----------------------|------------------------------|
//! | task        | `WS#<workspace>`      | `TASK#<task_id>`             |
//! | run         | `TASK#<task_id>`      | `RUN#<scheduled time, UTC>`  |
//! | install     | `WS#<workspace>`      | `INSTALL#<install_id>`       |
//! | idempotency | `IDEM#<principal>`    | `KEY#<key>`                  |
//! | account     | `ACCOUNT#PRINCIPAL#<principal>` or `ACCOUNT#INSTALL#<account>` | `PERIOD#<YYYY-MM>` |
//! | malformed   | `MALFORMED#<YYYY-MM-DD>` | `MSG#<message id>`        |
//! | webhook id  | `WEBHOOK#<id>`        | `WEBHOOK`                    |
//!
//! One global secondary index, `gsi1` (keys only, sparse: only the items
//! below carry its keys), for the two lookups the primary key cannot do:
//!
//! | item              | gsi1pk           | gsi1sk                           |
//! |-------------------|------------------|----------------------------------|
//! | task              | `TASK#<task_id>` | `WS#<workspace>`                 |
//! | installed install | `INSTALLED`      | `WS#<workspace>#INSTALL#<id>`    |
//!
//! A task's workspace from its id alone (admin: a task of another
//! workspace is `forbidden`, not `not_found`); every installed connector
//! (the daily reconcile) without scanning the table. An uninstalled
//! install drops out of the index. Readers take the workspace and ids
//! from the projected table keys, never by splitting an index key.

use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;

pub const PK: &str = "pk";
pub const SK: &str = "sk";
/// The item's entity type, for the console and for scans by operators.
pub const ENTITY: &str = "entity";
/// The global secondary index and its key attributes.
pub const INDEX: &str = "gsi1";
pub const GSI1PK: &str = "gsi1pk";
pub const GSI1SK: &str = "gsi1sk";
/// The index partition that holds every installed connector.
pub const INSTALLED: &str = "INSTALLED";

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

    /// What an account was charged in a month. A principal's and an
    /// install's accounts live in distinct namespaces, so no install account
    /// string can reach a principal's charges.
    pub fn account(account: &crate::domain::budget::Account, period: &str) -> Self {
        use crate::domain::budget::Account;
        let pk = match account {
            Account::Principal(id) => format!("ACCOUNT#PRINCIPAL#{id}"),
            Account::Install(account) => format!("ACCOUNT#INSTALL#{account}"),
        };
        Self {
            pk,
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

    /// The workspace of a `WS#<workspace>` partition key.
    pub fn workspace_of(pk: &str) -> Option<&str> {
        pk.strip_prefix("WS#")
    }

    /// The install id of an `INSTALL#<id>` sort key.
    pub fn install_id_of(sk: &str) -> Option<&str> {
        sk.strip_prefix("INSTALL#")
    }
}

/// An item's keys in the index `gsi1` (see the module's table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexKey {
    pub gsi1pk: String,
    pub gsi1sk: String,
}

impl IndexKey {
    /// Finds a task by its id alone.
    pub fn task(workspace: &str, task_id: &str) -> Self {
        Self {
            gsi1pk: Self::task_partition(task_id),
            gsi1sk: format!("WS#{workspace}"),
        }
    }

    pub fn task_partition(task_id: &str) -> String {
        format!("TASK#{task_id}")
    }

    /// Lists an installed connector among all installed ones.
    pub fn installed(workspace: &str, install_id: &str) -> Self {
        Self {
            gsi1pk: INSTALLED.to_owned(),
            gsi1sk: format!("WS#{workspace}#INSTALL#{install_id}"),
        }
    }

    /// Adds the index keys to an item.
    pub fn add_to(self, item: &mut HashMap<String, AttributeValue>) {
        item.insert(GSI1PK.to_owned(), AttributeValue::S(self.gsi1pk));
        item.insert(GSI1SK.to_owned(), AttributeValue::S(self.gsi1sk));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_keys_and_their_readers() {
        assert_eq!(
            IndexKey::task("ws_1", "rem_1"),
            IndexKey {
                gsi1pk: "TASK#rem_1".into(),
                gsi1sk: "WS#ws_1".into()
            }
        );
        assert_eq!(IndexKey::installed("ws_1", "ins_1").gsi1pk, INSTALLED);
        let task = Key::task("ws#odd", "rem_1");
        assert_eq!(Key::workspace_of(&task.pk), Some("ws#odd"));
        let install = Key::install("ws_1", "ins_1");
        assert_eq!(Key::install_id_of(&install.sk), Some("ins_1"));
        assert_eq!(Key::install_id_of(&task.sk), None);
    }

    #[test]
    fn a_principals_account_and_an_installs_cannot_collide() {
        use crate::domain::budget::Account;
        let principal = Key::account(&Account::Principal("usr_1".into()), "2026-12");
        assert_eq!(principal.pk, "ACCOUNT#PRINCIPAL#usr_1");
        assert_eq!(principal.sk, "PERIOD#2026-12");
        assert_eq!(
            Key::account(&Account::Install("acct_1".into()), "2026-12").pk,
            "ACCOUNT#INSTALL#acct_1"
        );
        // Whatever an install's account string holds, it stays an install's.
        for forged in ["principal:usr_1", "PRINCIPAL#usr_1", "#PRINCIPAL#usr_1", "usr_1"] {
            let key = Key::account(&Account::Install(forged.into()), "2026-12");
            assert_ne!(key, principal, "{forged}");
            assert!(key.pk.starts_with("ACCOUNT#INSTALL#"));
        }
    }

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
