//! The task item layout on the real table: every attribute of SPEC §3 survives
//! a write and a read, and the stored `state` is the derived one.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{TimeZone, Utc};
use serde_json::json;
use shared::adapters::dynamo::DynamoStore;
use shared::adapters::keys::Key;
use shared::domain::schedule::Schedule;
use shared::domain::task::budget::Budget;
use shared::domain::task::hold::{Hold, HoldReason};
use shared::domain::task::idempotency::{Fingerprint, IdempotencyRecord};
use shared::domain::task::limits::Limits;
use shared::domain::task::overrides::Overrides;
use shared::domain::task::{Pending, Provenance, Spec, Task, TaskId, TaskKind};
use shared::ports::{ReminderInserted, TaskStore};
use tests::TestStack;

fn connector_task() -> Task {
    let t0 = Utc.with_ymd_and_hms(2026, 11, 1, 9, 0, 0).unwrap();
    let spec = Spec {
        schedule: Schedule::Cron {
            cron: "0 9 * * MON-FRI".into(),
            timezone: "Europe/Berlin".into(),
            until: None,
        },
        tools: BTreeSet::from(["list_issues".to_owned(), "post_summary".to_owned()]),
        limits: Limits {
            max_turns: 8,
            max_tool_calls: 20,
            max_output_tokens: 4000,
            timeout_seconds: 300,
        },
        budget: Some(Budget {
            max_usd_per_run: 0.25,
            max_usd_per_month: 5.0,
        }),
        arguments: BTreeMap::from([("repo".to_owned(), "acme/web".to_owned())]),
        needs: BTreeMap::new(),
        bindings: BTreeMap::from([
            ("summary_channel".to_owned(), Some("ins_chat".to_owned())),
            ("archive".to_owned(), None),
        ]),
        agent: None,
        scopes: BTreeSet::new(),
    };
    let mut wider = spec.clone();
    wider.budget = Some(Budget {
        max_usd_per_run: 0.5,
        max_usd_per_month: 5.0,
    });
    let mut hold = Hold::default();
    hold.place(
        HoldReason::NeedUnbound,
        t0,
        "summary_channel: its connector was uninstalled",
    );
    hold.place(HoldReason::AwaitingArgument, t0, "argument `team`");
    Task {
        task_id: TaskId::for_connector("ws_1", "issues", "weekly_summary"),
        workspace: "ws_1".into(),
        kind: TaskKind::Connector,
        provenance: Provenance::Connector {
            install_id: "ins_1".into(),
            server: "issues".into(),
            prompt: "weekly_summary".into(),
        },
        title: "weekly_summary".into(),
        instruction: None,
        spec,
        pending: Some(Pending { spec: wider, since: t0 }),
        hold,
        overrides: Some(Overrides {
            paused: true,
            deleted: false,
            note: Some("quiet week".into()),
            by: Some("adm_1".into()),
            at: Some(t0),
            paused_by: Some("adm_1".into()),
            deleted_by: None,
        }),
        approval: None,
        completed_at: None,
        skip_next: Some(shared::domain::task::skip::SkipNext {
            occurrence: t0 + chrono::Duration::days(1),
            by: "adm_1".into(),
            at: t0,
        }),
        run_now: BTreeMap::from([(
            "2026-11-01T09:30:00Z".to_owned(),
            shared::domain::task::run_now::RunNow {
                key: "now_1".into(),
                by: "adm_1".into(),
                requested_at: t0,
            },
        )]),
        prompt_arguments: BTreeMap::new(),
        declaration_error: None,
        claims: BTreeMap::new(),
        budget_used: BTreeMap::from([("2026-11".to_owned(), 0.75)]),
        version: 3,
        created_at: t0,
        updated_at: t0,
        created_with: Some("k1".into()),
        ttl: None,
        due: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_task_round_trips_and_its_state_is_derived() {
    let t = TestStack::start().await.unwrap();
    let store = DynamoStore::from_sdk(&t.aws.sdk, &t.stack.names.table);
    let task = connector_task();
    let record = IdempotencyRecord {
        principal: "reconcile".into(),
        key: task.task_id.to_string(),
        fingerprint: Fingerprint::of(&"x"),
        task_id: task.task_id.clone(),
        workspace: task.workspace.clone(),
        created_at: task.created_at,
        ttl: None,
        occurrence: None,
    };
    assert_eq!(
        store.insert_with_idempotency(&task, &record, None).await.unwrap(),
        ReminderInserted::Created
    );
    assert_eq!(
        store.insert_with_idempotency(&task, &record, None).await.unwrap(),
        ReminderInserted::KeyTaken
    );

    let read = store.task("ws_1", &task.task_id).await.unwrap().expect("stored");
    assert_eq!(read, task);

    // What an operator sees in the console.
    let item = t.item_at(Key::task("ws_1", task.task_id.as_str())).await.unwrap();
    assert_eq!(
        item["state"], "paused",
        "an admin's pause shows before the runtime's hold"
    );
    assert_eq!(
        item["hold"],
        json!({
            "awaiting_argument": {"since": "2026-11-01T09:00:00Z", "detail": "argument `team`"},
            "need_unbound": {"since": "2026-11-01T09:00:00Z", "detail": "summary_channel: its connector was uninstalled"},
        })
    );
    assert_eq!(item["override"]["paused"], true);
    assert_eq!(
        item["run_now"],
        json!({"2026-11-01T09:30:00Z": {"key": "now_1", "by": "adm_1", "requested_at": "2026-11-01T09:00:00Z"}})
    );
    assert_eq!(
        item["skip_next"],
        json!({"occurrence": "2026-11-02T09:00:00Z", "by": "adm_1", "at": "2026-11-01T09:00:00Z"})
    );
    assert_eq!(item["override"]["note"], "quiet week");
    assert_eq!(item["pending"]["spec"]["budget"]["max_usd_per_run"], 0.5);
    assert_eq!(
        item["spec"]["bindings"],
        json!({"archive": null, "summary_channel": "ins_chat"})
    );
    assert_eq!(item["provenance"]["type"], "connector");
}

/// DynamoDB answers `TransactionConflictException` to a plain write of an
/// item a transaction is writing at that moment, and the SDK's standard
/// retry does not retry it; moto never answers one, the local stack does on
/// request. Every store's client sends such a write again
/// (`dynamo::TransactionConflicts`) and it lands; a client without that
/// retry fails.
#[tokio::test(flavor = "multi_thread")]
async fn a_plain_write_meeting_a_transaction_conflict_is_sent_again() {
    let t = TestStack::start().await.unwrap();
    let endpoint = t.aws.moto.endpoint();
    let install = tests::install(
        "ins_9",
        "issues",
        "https://issues.example.com/mcp",
        shared::domain::task::install::InstallScope::Workspace,
    );
    let pk = Key::install("ws_1", "ins_9").pk;
    local::moto::arm_transaction_conflicts(&endpoint, &pk, 2).unwrap();
    t.admin_store()
        .put_install(&install)
        .await
        .expect("sent again past two conflicts");
    assert_eq!(local::moto::armed_transaction_conflicts(&endpoint).unwrap(), json!({}));
    assert_eq!(local::moto::transaction_conflicts_met(&endpoint).unwrap(), 2);
    assert!(t.item_at(Key::install("ws_1", "ins_9")).await.is_some());

    local::moto::arm_transaction_conflicts(&endpoint, &pk, 1).unwrap();
    let bare = DynamoStore::new(aws_sdk_dynamodb::Client::new(&t.aws.sdk), &t.stack.names.table);
    let failed = bare
        .put_install(&install)
        .await
        .expect_err("the SDK alone does not retry it");
    assert!(
        shared::error_chain(&failed).contains("TransactionConflict"),
        "{}",
        shared::error_chain(&failed)
    );
}
