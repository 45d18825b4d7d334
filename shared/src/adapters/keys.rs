//! The single-table key layout (SPEC §3). The only module that builds
//! DynamoDB keys; operators find the same layout in ARCHITECTURE.md.
//!
//! | item        | pk                    | sk                           |
//! |-------------|-----------------------|------------------------------|
//! | task        | `WS#<workspace>`      | `TASK#<task_id>`             |
//! | run         | `TASK#<task_id>`      | `RUN#<scheduled time, UTC>`  |
//! | install     | `WS#<workspace>`      | `INSTALL#<install_id>`       |
//! | idempotency | `IDEM#<workspace>#<principal>` | `KEY#<key>`         |
//! | account     | `ACCOUNT#PRINCIPAL#<workspace>#<principal>` or `ACCOUNT#INSTALL#<account>` | `PERIOD#<YYYY-MM>` |
//! | malformed   | `MALFORMED#<YYYY-MM-DD>` | `MSG#<message id>`        |
//! | webhook id  | `WEBHOOK#<id>`        | `WEBHOOK`                    |
//! | owner       | `OWNER#<workspace>#<principal>` | `REMINDERS`        |
//! | model pace  | `PACE#<model id>`     | `PACE`                       |
//! | check cursor | `CHECK#<family>#<shard>` | `CURSOR`                  |
//! | approval request | `APPROVALS#<workspace>` | `REQ#<request_id>`     |
//! | journaled call | `TASK#<task_id>`    | `JOURNAL#<scheduled time>#<position, 4 digits>` |
//! | journaled outcome | `TASK#<task_id>` | `JOURNAL#<scheduled time>#END` |
//!
//! One global secondary index, `gsi1` (keys only, sparse: only the items
//! below carry its keys), for the two lookups the primary key cannot do:
//!
//! | item              | gsi1pk           | gsi1sk                           |
//! |-------------------|------------------|----------------------------------|
//! | task              | `TASK#<task_id>` | `WS#<workspace>`                 |
//! | installed install | `INSTALLED`      | `WS#<workspace>#INSTALL#<id>`    |
//!
//! A second index, `gsi2` (all attributes projected, sparse: only
//! reminders carry its keys), lists a principal's reminders newest first
//! (the schedules function's `list`, SPEC §11):
//!
//! | item     | gsi2pk                          | gsi2sk                          |
//! |----------|---------------------------------|---------------------------------|
//! | reminder | `OWNER#<workspace>#<principal>` | `CREATED#<created_at>#<task_id>` |
//!
//! `created_at` is RFC 3339 UTC with nanoseconds, fixed width, so the sort
//! key orders by creation.
//!
//! A third index, `gsi3` (all attributes projected, sparse: only reminders
//! that can still run, `scheduled` or `paused`, and connector tasks that
//! fire carry its keys), lets the daily pass repair reminders' schedules a
//! page at a time, never with a table `Scan` (SPEC §13), and the
//! missed-occurrence check read the tasks due before its cutoff (SPEC §14).
//! Its partition is one of 16 shards per family, chosen by the task id's
//! first hex digit, so no index partition takes every task's writes; the
//! sort key orders by when the check can judge `due`
//! (`domain::operations::overdue::judgeable_at`: `due`, a rate's plus half
//! its period; `~` when there is none, after every instant):
//!
//! | item              | gsi3pk                | gsi3sk                 |
//! |-------------------|-----------------------|------------------------|
//! | active reminder   | `SCHEDULABLE#<00-15>` | `<judgeable or ~>#<task_id>` |
//! | firing connector task | `CONNECTOR#<00-15>` | `<judgeable>#<task_id>` |
//! | approval request holding its occurrence | `APPROVALS#<00-15>` | `<expires_at>#<request_id>` | The owner item lists the principal's reminder
//! ids (`reminders`) under a `version`: the cap's consistent count.
//!
//! A task's workspace from its id alone (admin: a task of another
//! workspace is `forbidden`, not `not_found`); every installed connector
//! (the daily reconcile) without scanning the table. An uninstalled
//! install drops out of the index. Readers take the workspace and ids
//! from the projected table keys, never by splitting an index key.

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use std::collections::HashMap;

use crate::domain::task::{Task, TaskKind, TaskState};
pub use crate::ports::Family;

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
/// The owner index (a principal's reminders) and its key attributes.
pub const OWNER_INDEX: &str = "gsi2";
pub const GSI2PK: &str = "gsi2pk";
pub const GSI2SK: &str = "gsi2sk";
/// The schedulable-reminder index (the daily pass's repair) and its keys.
pub const SCHEDULABLE_INDEX: &str = "gsi3";
pub const GSI3PK: &str = "gsi3pk";
pub const GSI3SK: &str = "gsi3sk";
/// The shards of the schedulable-reminder index.
pub const SCHEDULABLE_SHARDS: u8 = crate::domain::run::definition::REMINDER_SHARDS;

/// A primary key: `pk` and `sk`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub pk: String,
    pub sk: String,
}

/// The partition of a workspace's tasks and installs, and the sort-key
/// prefixes that tell them apart (a `Query` with `begins_with`).
pub fn workspace_partition(workspace: &str) -> String {
    format!("WS#{workspace}")
}
pub const TASK_PREFIX: &str = "TASK#";
/// The sort-key prefix of one occurrence's journal, in its task's partition.
pub fn journal_prefix(occurrence: &str) -> String {
    format!("JOURNAL#{occurrence}#")
}
/// The sort-key prefix of a workspace's approval requests.
pub const APPROVAL_PREFIX: &str = "REQ#";
/// The `gsi3` partition the last release put every approval request that
/// holds an occurrence in (read until its requests end).
pub const APPROVALS_HOLDING: &str = "APPROVALS";

/// The `gsi3` partition of approval requests that hold an occurrence,
/// sorted by expiry (the missed-occurrence check's period expires them):
/// one of `gate::EXPIRY_SHARDS` by the request's `gate::expiry_shard`, or,
/// for `None`, the last release's one partition.
pub fn approvals_holding(shard: Option<u8>) -> String {
    shard.map_or_else(
        || APPROVALS_HOLDING.to_owned(),
        |shard| format!("{APPROVALS_HOLDING}#{shard:02}"),
    )
}
pub const INSTALL_PREFIX: &str = "INSTALL#";

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

    pub fn idempotency(workspace: &str, principal: &str, key: &str) -> Self {
        Self {
            pk: format!("IDEM#{workspace}#{principal}"),
            sk: format!("KEY#{key}"),
        }
    }

    /// What an account was charged in a month. A principal's and an
    /// install's accounts live in distinct namespaces, so no install account
    /// string can reach a principal's charges.
    pub fn account(account: &crate::domain::task::budget::Account, period: &str) -> Self {
        use crate::domain::task::budget::Account;
        let pk = match account {
            // Keyed by workspace too since this release: charges written
            // before it stay under `ACCOUNT#PRINCIPAL#<principal>`, which
            // nothing reads (docs/deploying.md, "Upgrading").
            Account::Principal { workspace, principal } => format!("ACCOUNT#PRINCIPAL#{workspace}#{principal}"),
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

    /// A workspace's budget (`budget::WorkspaceBudget`): its limit and, a
    /// month each, what its occurrences hold. Its own partition: the
    /// workspace's (`WS#`) is read as tasks and installs.
    pub fn workspace_budget(workspace: &str) -> Self {
        Self {
            pk: format!("BUDGET#{workspace}"),
            sk: "WORKSPACE".to_owned(),
        }
    }

    /// The mark a workspace's month reached leaves, once a month: its
    /// insert is the `Workspace budget reached` event (`BudgetReachedPipe`).
    pub fn budget_reached(workspace: &str, month: &str) -> Self {
        Self {
            pk: format!("BUDGET#{workspace}"),
            sk: format!("REACHED#{month}"),
        }
    }

    /// A gated tool call's approval request (`adapters::approvals`): the
    /// workspace's requests in one partition, for its admins' list.
    pub fn approval(workspace: &str, request_id: &str) -> Self {
        Self {
            pk: format!("APPROVALS#{workspace}"),
            sk: format!("{APPROVAL_PREFIX}{request_id}"),
        }
    }

    /// How far a probe chain of the reconcile queue came (`Pass::Probe`,
    /// which `sat verify` sends).
    pub fn probe(id: &str) -> Self {
        Self {
            pk: format!("PROBE#{id}"),
            sk: "PROBE".to_owned(),
        }
    }

    /// A principal's owner item: the ids of its reminders, for the cap.
    pub fn owner(workspace: &str, principal: &str) -> Self {
        Self {
            pk: owner_partition(workspace, principal),
            sk: "REMINDERS".to_owned(),
        }
    }

    /// The fleet's pace of requests to one model (`domain::run::pace`).
    pub fn pace(model_id: &str) -> Self {
        Self {
            pk: format!("PACE#{model_id}"),
            sk: "PACE".to_owned(),
        }
    }

    /// Where the missed-occurrence check of one shard of a family stopped
    /// (`app::overdue::check_shard`).
    pub fn check_cursor(family: &str, shard: u8) -> Self {
        Self {
            pk: format!("CHECK#{family}#{shard:02}"),
            sk: "CURSOR".to_owned(),
        }
    }

    /// One tool call of an occurrence's journal (`domain::run::journal`),
    /// beside its run record, ordered by position.
    pub fn journal_call(task_id: &str, occurrence: &str, position: u32) -> Self {
        Self {
            pk: format!("TASK#{task_id}"),
            sk: format!("{}{position:04}", journal_prefix(occurrence)),
        }
    }

    /// The outcome an occurrence's journal keeps for a settle that failed
    /// once; it sorts after every call.
    pub fn journal_outcome(task_id: &str, occurrence: &str) -> Self {
        Self {
            pk: format!("TASK#{task_id}"),
            sk: format!("{}END", journal_prefix(occurrence)),
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

fn owner_partition(workspace: &str, principal: &str) -> String {
    format!("OWNER#{workspace}#{principal}")
}

/// A reminder's keys in the owner index `gsi2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerIndexKey {
    pub gsi2pk: String,
    pub gsi2sk: String,
}

impl OwnerIndexKey {
    pub fn new(workspace: &str, principal: &str, created: chrono::DateTime<chrono::Utc>, task_id: &str) -> Self {
        Self {
            gsi2pk: Self::partition(workspace, principal),
            gsi2sk: format!(
                "CREATED#{}#{task_id}",
                created.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
            ),
        }
    }

    pub fn partition(workspace: &str, principal: &str) -> String {
        owner_partition(workspace, principal)
    }

    /// The exclusive start key of a page after (created, task id), within
    /// the owner's own partition: a query's start key names the caller's
    /// index partition and the task's table key in the caller's workspace.
    pub fn start_after(
        workspace: &str,
        principal: &str,
        created: chrono::DateTime<chrono::Utc>,
        task_id: &str,
    ) -> HashMap<String, AttributeValue> {
        let index = Self::new(workspace, principal, created, task_id);
        let mut key = Key::task(workspace, task_id).to_map();
        key.insert(GSI2PK.to_owned(), AttributeValue::S(index.gsi2pk));
        key.insert(GSI2SK.to_owned(), AttributeValue::S(index.gsi2sk));
        key
    }

    pub fn add_to(self, item: &mut HashMap<String, AttributeValue>) {
        item.insert(GSI2PK.to_owned(), AttributeValue::S(self.gsi2pk));
        item.insert(GSI2SK.to_owned(), AttributeValue::S(self.gsi2sk));
    }
}

/// An item's keys in the index `gsi1` (see the module's table).
/// A task's entry in the schedulable index (`gsi3`): every reminder that
/// can still run (the daily pass repairs their schedules), and every
/// connector task with a due time; both sorted by `due` (the
/// missed-occurrence check reads those due before its cutoff).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedulableKey {
    pub gsi3pk: String,
    pub gsi3sk: String,
}

/// The sort key of a task with no due time (a paused reminder): after
/// every instant, so the check's range never reads it.
const NOT_DUE: &str = "~";

impl SchedulableKey {
    /// The task's entry, if it has one.
    pub fn of(task: &Task) -> Option<Self> {
        let family = match task.kind {
            TaskKind::Reminder if matches!(task.state(), TaskState::Scheduled | TaskState::Paused) => Family::Reminders,
            TaskKind::Connector if task.due.is_some() => Family::Connectors,
            _ => return None,
        };
        let id = task.task_id.as_str();
        Some(Self {
            gsi3pk: Self::partition(family, Self::shard_of(id)),
            gsi3sk: Self::sort(crate::domain::operations::overdue::judgeable_at(task), id),
        })
    }

    /// The shard of a task id: its digest's first hex digit.
    pub fn shard_of(task_id: &str) -> u8 {
        task_id
            .split_once('_')
            .and_then(|(_, digest)| digest.chars().next())
            .and_then(|c| c.to_digit(16))
            .map_or(0, |d| d as u8)
    }

    pub fn partition(family: Family, shard: u8) -> String {
        match family {
            Family::Reminders => format!("SCHEDULABLE#{shard:02}"),
            Family::Connectors => format!("CONNECTOR#{shard:02}"),
        }
    }

    /// `<instant, RFC 3339 UTC>#<task_id>`: fixed width, so it sorts by
    /// the instant (when the check can judge the task's `due`).
    pub fn sort(due: Option<DateTime<Utc>>, task_id: &str) -> String {
        match due {
            Some(due) => format!("{}#{task_id}", crate::domain::schedule::format_utc(due)),
            None => format!("{NOT_DUE}#{task_id}"),
        }
    }

    /// The upper bound of a range of entries due before `cutoff`.
    pub fn due_before(cutoff: DateTime<Utc>) -> String {
        crate::domain::schedule::format_utc(cutoff)
    }

    /// The exclusive start key of a page after the entry `sort` of
    /// `task_id` in its partition.
    pub fn start_after(family: Family, workspace: &str, task_id: &str, sort: &str) -> HashMap<String, AttributeValue> {
        let mut key = Key::task(workspace, task_id).to_map();
        key.insert(
            GSI3PK.to_owned(),
            AttributeValue::S(Self::partition(family, Self::shard_of(task_id))),
        );
        key.insert(GSI3SK.to_owned(), AttributeValue::S(sort.to_owned()));
        key
    }

    pub fn add_to(self, item: &mut HashMap<String, AttributeValue>) {
        item.insert(GSI3PK.to_owned(), AttributeValue::S(self.gsi3pk));
        item.insert(GSI3SK.to_owned(), AttributeValue::S(self.gsi3sk));
    }
}

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
    fn owner_keys_order_by_creation() {
        use chrono::TimeZone;
        let t = chrono::Utc.with_ymd_and_hms(2026, 12, 1, 10, 0, 0).unwrap();
        let a = OwnerIndexKey::new("ws_1", "usr_1", t, "rem_a");
        let b = OwnerIndexKey::new("ws_1", "usr_1", t + chrono::Duration::nanoseconds(1), "rem_a");
        let c = OwnerIndexKey::new("ws_1", "usr_1", t + chrono::Duration::seconds(10), "rem_a");
        assert_eq!(a.gsi2pk, "OWNER#ws_1#usr_1");
        assert_eq!(a.gsi2sk, "CREATED#2026-12-01T10:00:00.000000000Z#rem_a");
        assert!(a.gsi2sk < b.gsi2sk && b.gsi2sk < c.gsi2sk);
        assert_eq!(Key::owner("ws_1", "usr_1").pk, a.gsi2pk);
        let start = OwnerIndexKey::start_after("ws_1", "usr_1", t, "rem_a");
        assert_eq!(start.len(), 4);
    }

    #[test]
    fn a_principals_account_and_an_installs_cannot_collide() {
        use crate::domain::task::budget::Account;
        let principal = Key::account(
            &crate::domain::task::budget::account_of_principal("ws_1", "usr_1"),
            "2026-12",
        );
        assert_eq!(principal.pk, "ACCOUNT#PRINCIPAL#ws_1#usr_1");
        assert_ne!(
            Key::account(
                &crate::domain::task::budget::account_of_principal("ws_2", "usr_1"),
                "2026-12"
            ),
            principal,
            "one principal id in two workspaces is two accounts"
        );
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
            Key::idempotency("ws_1", "usr_1", "k"),
            Key {
                pk: "IDEM#ws_1#usr_1".into(),
                sk: "KEY#k".into()
            }
        );
        assert_eq!(
            Key::pace("global.anthropic.claude-haiku-4-5-20251001-v1:0"),
            Key {
                pk: "PACE#global.anthropic.claude-haiku-4-5-20251001-v1:0".into(),
                sk: "PACE".into()
            }
        );
    }
}
