//! Reconcile and admin against moto and real MCP servers on loopback: the
//! project's fixture server, whose declarations change between reconciles,
//! reading task items (`spec`, `pending`, `hold`, `override`, `state`) and
//! schedules after each step.

use chrono::Utc;
use local::mcp_fixture::{FixturePrompt, FixtureState, McpFixture, scheduled_prompt, tool};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::adapters::scheduler::EventBridgeSchedules;
use shared::domain::task::TaskId;
use tests::intercept::Intercepted;
use tests::{TestStack, admin_principal, event, installed};

fn marker() -> Value {
    json!({"version": 1,
           "schedule": {"cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin"},
           "tools": ["list_issues"],
           "limits": {"max_turns": 8, "max_tool_calls": 10, "max_output_tokens": 2000, "timeout_seconds": 120},
           "budget": {"max_usd_per_run": 0.25, "max_usd_per_month": 5.0},
           "needs": [{"id": "summary_channel", "description": "a chat channel to post the weekly summary in"}]})
}

fn weekly(marker: Value, args: &[(&str, bool)]) -> FixturePrompt {
    scheduled_prompt(
        "weekly_summary",
        marker,
        args,
        "Summarise the week's issues in {{repo}}.",
    )
}

struct World {
    t: TestStack,
    issues: McpFixture,
    _chat: McpFixture,
    task_id: TaskId,
}

impl World {
    async fn start() -> Self {
        let t = TestStack::start().await.unwrap();
        let issues = McpFixture::start(FixtureState {
            prompts: vec![
                weekly(marker(), &[("repo", true)]),
                FixturePrompt {
                    name: "plain".into(),
                    description: "an ordinary prompt".into(),
                    arguments: vec![],
                    meta: None,
                    template: "hi".into(),
                },
            ],
            tools: vec![tool("list_issues"), tool("post_summary")],
            page_size: 1,
            ..Default::default()
        })
        .await
        .unwrap();
        let chat = McpFixture::start(FixtureState {
            tools: vec![tool("post_message")],
            ..Default::default()
        })
        .await
        .unwrap();
        let r = t.reconciler();
        r.apply(&installed("ins_chat", "chat", &chat.url(), "workspace"), Utc::now())
            .await
            .unwrap();
        r.apply(&installed("ins_me", "mail", &chat.url(), "personal"), Utc::now())
            .await
            .unwrap();
        let task_id = TaskId::for_connector("ws_1", "issues", "weekly_summary");
        World {
            t,
            issues,
            _chat: chat,
            task_id,
        }
    }

    async fn task(&self) -> Value {
        self.t
            .item_at(Key::task("ws_1", self.task_id.as_str()))
            .await
            .expect("task item")
    }

    /// The issues connector installed and its task approved.
    async fn approved(&self) {
        self.t
            .reconciler()
            .apply(
                &installed("ins_1", "issues", &self.issues.url(), "workspace"),
                Utc::now(),
            )
            .await
            .unwrap();
        let v = self.version().await;
        let approved = self.admin("approve", json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_chat"}})).await;
        assert_eq!(approved["ok"], true, "{approved}");
    }

    /// The schedule as a lost update would leave it: disabled, the task
    /// scheduled.
    async fn disable_schedule_behind_the_task(&self) {
        use shared::ports::Schedules;
        let store = self.t.admin_store();
        let mut stale = shared::ports::TaskStore::task(&store, "ws_1", &self.task_id)
            .await
            .unwrap()
            .unwrap();
        stale.overrides = Some(shared::domain::task::overrides::Overrides {
            paused: true,
            ..Default::default()
        });
        shared::adapters::scheduler::EventBridgeSchedules::from_sdk(
            &self.t.aws.sdk,
            self.t.create_config(tests::ENABLED).target,
        )
        .put(&shared::domain::run::definition::ScheduleDefinition::for_task(&stale).unwrap())
        .await
        .unwrap();
        assert_eq!(self.schedule_state().await, "DISABLED");
    }

    async fn schedule_state(&self) -> String {
        self.t
            .schedule(self.task_id.as_str())
            .await
            .state()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default()
    }

    async fn list_changed(&self) -> shared::app::reconcile::Summary {
        self.t
            .reconciler()
            .apply(&event("prompts.list_changed", "ins_1"), Utc::now())
            .await
            .unwrap()
    }

    async fn release(&self, prompts: Vec<FixturePrompt>) {
        self.issues.state().write().await.prompts = prompts;
    }

    async fn admin(&self, op: &str, extra: Value) -> Value {
        let mut request = json!({"op": op, "principal": admin_principal(), "task_id": self.task_id});
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        self.t.admin().handle(request, Utc::now()).await.unwrap()
    }

    async fn version(&self) -> u64 {
        self.task().await["version"].as_u64().unwrap()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_connectors_standing_work_follows_its_releases_under_admin_control() {
    let w = World::start().await;

    // Installed: the marked prompt becomes a task awaiting approval; the
    // unmarked one does not.
    let summary =
        w.t.reconciler()
            .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
            .await
            .unwrap();
    assert_eq!(summary.changes.get("created"), Some(&1));
    let task = w.task().await;
    assert_eq!(task["state"], "held");
    assert!(task["hold"]["awaiting_approval"].is_object());
    assert_eq!(task["kind"], "connector");
    assert_eq!(
        task["provenance"],
        json!({"type": "connector", "install_id": "ins_1", "server": "issues", "prompt": "weekly_summary"})
    );
    assert_eq!(w.t.items_of("task").await.len(), 1, "no task for the unmarked prompt");
    let schedule = w.t.schedule(w.task_id.as_str()).await;
    assert_eq!(schedule.schedule_expression(), Some("cron(0 9 ? * 2-6 *)"));
    assert_eq!(schedule.schedule_expression_timezone(), Some("Europe/Berlin"));
    assert_eq!(schedule.action_after_completion().map(|a| a.as_str()), Some("NONE"));
    assert_eq!(w.schedule_state().await, "DISABLED", "no run before approval");

    // A second reconcile of the same declarations writes nothing.
    let again = w.list_changed().await;
    assert_eq!(again.tasks_written, 0);
    assert_eq!(w.version().await, 1);

    // The admin reads it, then approves; bad approvals change nothing.
    let got = w.admin("get", json!({})).await;
    assert!(
        got["explanation"]
            .as_str()
            .unwrap()
            .contains("waits for an admin to approve")
    );
    assert_eq!(got["next_fires"].as_array().unwrap().len(), 5);
    let v = w.version().await;
    let missing_arg = w
        .admin(
            "approve",
            json!({"expected_version": v, "bindings": {"summary_channel": "ins_chat"}}),
        )
        .await;
    assert_eq!(missing_arg["error"]["code"], "invalid_request");
    assert!(missing_arg["error"]["message"].as_str().unwrap().contains("repo"));
    let personal = w.admin("approve", json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_me"}})).await;
    assert!(personal["error"]["message"].as_str().unwrap().contains("personal"));
    let unknown = w.admin("approve", json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_nope"}})).await;
    assert_eq!(unknown["error"]["code"], "invalid_request");
    let undecided = w
        .admin(
            "approve",
            json!({"expected_version": v, "arguments": {"repo": "acme/web"}}),
        )
        .await;
    assert!(
        undecided["error"]["message"]
            .as_str()
            .unwrap()
            .contains("summary_channel")
    );
    assert_eq!(w.version().await, v, "refused approvals write nothing");
    let approved = w.admin("approve", json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_chat"}})).await;
    assert_eq!(approved["ok"], true, "{approved}");
    let task = w.task().await;
    assert_eq!(task["state"], "scheduled");
    assert!(task.get("hold").is_none());
    assert_eq!(task["spec"]["arguments"], json!({"repo": "acme/web"}));
    assert_eq!(task["spec"]["bindings"], json!({"summary_channel": "ins_chat"}));
    assert_eq!(task["approval"]["by"], "adm_1");
    assert_eq!(w.schedule_state().await, "ENABLED");
    let stale = w.admin("pause", json!({"expected_version": v})).await;
    assert_eq!(stale["error"]["code"], "version_conflict");

    // A release adds a tool and raises the budget: it waits, the approved
    // bounds keep running.
    let mut wider = marker();
    wider["tools"] = json!(["list_issues", "post_summary"]);
    wider["budget"]["max_usd_per_run"] = json!(0.5);
    w.release(vec![weekly(wider.clone(), &[("repo", true)])]).await;
    let summary = w.list_changed().await;
    assert_eq!(summary.changes.get("pending_stored"), Some(&1));
    let task = w.task().await;
    assert_eq!(task["spec"]["tools"], json!(["list_issues"]));
    assert_eq!(task["pending"]["spec"]["tools"], json!(["list_issues", "post_summary"]));
    assert_eq!(task["state"], "scheduled");
    assert_eq!(w.schedule_state().await, "ENABLED");
    let got = w.admin("get", json!({})).await;
    let diff: Vec<&str> = got["pending_diff"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["text"].as_str().unwrap())
        .collect();
    assert!(diff.contains(&"budget per run raised from $0.25 to $0.50"), "{diff:?}");
    // What each costs in a month, before the admin approves the widening:
    // 23 weekdays at 09:00 in the busiest month.
    assert_eq!(
        got["cost_ceiling"]["approved"]["words"],
        "at most USD 5.00 a month: up to 23 runs at USD 0.25, capped by the monthly budget"
    );
    assert_eq!(got["cost_ceiling"]["pending"]["runs_per_month"], 23);
    assert_eq!(got["cost_ceiling"]["pending"]["usd_per_month"], 5.0);
    assert_eq!(got["cost_ceiling"]["pending"]["usd_per_run"], 0.5);
    assert!(
        got["explanation"]
            .as_str()
            .unwrap()
            .contains("waits for an admin to approve: tools raised"),
        "{}",
        got["explanation"]
    );

    // The prompt is withdrawn: held, schedule off.
    w.release(vec![]).await;
    w.list_changed().await;
    let task = w.task().await;
    assert_eq!(task["state"], "held");
    assert!(task["hold"]["withdrawn"]["detail"].as_str().unwrap().contains("gone"));
    assert_eq!(w.schedule_state().await, "DISABLED");

    // Restored: the hold lifts, the widening still waits.
    w.release(vec![weekly(wider.clone(), &[("repo", true)])]).await;
    w.list_changed().await;
    let task = w.task().await;
    assert_eq!(task["state"], "scheduled");
    assert!(task["pending"].is_object());
    assert_eq!(w.schedule_state().await, "ENABLED");

    // A new required argument holds until the admin gives a value.
    w.release(vec![weekly(wider.clone(), &[("repo", true), ("team", true)])])
        .await;
    w.list_changed().await;
    let task = w.task().await;
    assert!(
        task["hold"]["awaiting_argument"]["detail"]
            .as_str()
            .unwrap()
            .contains("team")
    );
    assert_eq!(
        task["spec"]["arguments"],
        json!({"repo": "acme/web"}),
        "old values kept"
    );
    assert_eq!(w.schedule_state().await, "DISABLED");

    // A concurrent reconcile moved the version: the admin must re-read.
    let v = w.version().await;
    w.release(vec![weekly(
        wider.clone(),
        &[("repo", true), ("team", true), ("verbose", false)],
    )])
    .await;
    w.list_changed().await;
    let conflict = w
        .admin("approve", json!({"expected_version": v, "arguments": {"team": "web"}}))
        .await;
    assert_eq!(conflict["error"]["code"], "version_conflict");
    let v = w.version().await;
    let ok = w
        .admin("approve", json!({"expected_version": v, "arguments": {"team": "web"}}))
        .await;
    assert_eq!(ok["ok"], true, "{ok}");
    let task = w.task().await;
    assert_eq!(task["state"], "scheduled");
    assert_eq!(
        task["spec"]["tools"],
        json!(["list_issues", "post_summary"]),
        "approving takes the pending bounds"
    );
    assert!(task.get("pending").is_none());
    assert_eq!(task["spec"]["arguments"], json!({"repo": "acme/web", "team": "web"}));

    // Pause survives reconciles; a narrowing still applies beneath it.
    let v = w.version().await;
    assert_eq!(
        w.admin("pause", json!({"expected_version": v, "note": "quiet week"}))
            .await["ok"],
        true
    );
    assert_eq!(w.schedule_state().await, "DISABLED");
    let mut narrower = wider.clone();
    narrower["limits"]["max_turns"] = json!(4);
    w.release(vec![weekly(narrower.clone(), &[("repo", true), ("team", true)])])
        .await;
    w.list_changed().await;
    let task = w.task().await;
    assert_eq!(task["override"]["paused"], true);
    assert_eq!(task["override"]["note"], "quiet week");
    assert_eq!(task["spec"]["limits"]["max_turns"], 4);
    assert_eq!(task["state"], "paused");
    let got = w.admin("get", json!({})).await;
    assert!(
        got["explanation"]
            .as_str()
            .unwrap()
            .starts_with("skipped: paused by adm_1"),
        "{}",
        got["explanation"]
    );
    let v = w.version().await;
    assert_eq!(w.admin("resume", json!({"expected_version": v})).await["ok"], true);
    assert_eq!(w.schedule_state().await, "ENABLED");

    // A bound connector uninstalled holds the task; its reinstall lifts it.
    w.t.reconciler()
        .apply(&event("connector.uninstalled", "ins_chat"), Utc::now())
        .await
        .unwrap();
    assert!(w.task().await["hold"]["need_unbound"].is_object());
    let chat_url = w.t.item_at(Key::install("ws_1", "ins_chat")).await.unwrap()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    w.t.reconciler()
        .apply(&installed("ins_chat", "chat", &chat_url, "workspace"), Utc::now())
        .await
        .unwrap();
    assert!(w.task().await.get("hold").is_none());

    // The connector itself uninstalled: its task is left alone (the door skips).
    let before = w.version().await;
    w.t.reconciler()
        .apply(&event("connector.uninstalled", "ins_1"), Utc::now())
        .await
        .unwrap();
    assert_eq!(w.version().await, before);
    assert_eq!(
        w.t.item_at(Key::install("ws_1", "ins_1")).await.unwrap()["status"],
        "uninstalled"
    );
    w.t.reconciler()
        .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();

    // Deleted: a tombstone no release revives; restore brings it back.
    let v = w.version().await;
    assert_eq!(w.admin("delete", json!({"expected_version": v})).await["ok"], true);
    let tombstoned = w.version().await;
    w.release(vec![]).await;
    w.list_changed().await;
    w.release(vec![weekly(marker(), &[("repo", true)])]).await;
    w.list_changed().await;
    assert_eq!(w.version().await, tombstoned, "never touched");
    assert_eq!(w.task().await["state"], "deleted");
    assert_eq!(w.schedule_state().await, "DISABLED");
    assert_eq!(
        w.admin("restore", json!({"expected_version": tombstoned})).await["ok"],
        true
    );
    assert_eq!(w.task().await["state"], "scheduled");
    assert_eq!(w.t.items_of("task").await.len(), 1, "never deleted, never duplicated");
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_declarations_are_recorded_and_admin_needs_its_scope() {
    let w = World::start().await;
    let mut foreign = marker();
    foreign["tools"] = json!(["list_issues", "github__create_issue"]);
    w.release(vec![weekly(foreign, &[])]).await;
    w.t.reconciler()
        .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    assert!(
        w.t.items_of("task").await.is_empty(),
        "an invalid declaration creates no task"
    );
    let install = w.t.item_at(Key::install("ws_1", "ins_1")).await.unwrap();
    assert!(
        install["declaration_errors"]["weekly_summary"]
            .as_str()
            .unwrap()
            .contains("github__create_issue")
    );

    let forbidden = w
        .t
        .admin()
        .handle(json!({"op": "list", "principal": {"id": "u", "workspace": "ws_1", "scopes": ["schedule.write", "schedule.*"]}}), Utc::now())
        .await
        .unwrap();
    assert_eq!(forbidden["error"]["code"], "forbidden");
    let listed =
        w.t.admin()
            .handle(json!({"op": "list", "principal": admin_principal()}), Utc::now())
            .await
            .unwrap();
    assert_eq!(listed["tasks"], json!([]));
}

#[tokio::test(flavor = "multi_thread")]
async fn another_workspaces_task_is_forbidden_and_a_missing_one_not_found() {
    let w = World::start().await;
    w.t.reconciler()
        .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    let before = w.task().await;
    let v = w.version().await;
    let outsider = json!({"id": "adm_2", "workspace": "ws_2", "scopes": ["schedule.admin"]});
    let ask = |op: &str, task_id: Value, extra: Value| {
        let mut request = json!({"op": op, "principal": outsider, "task_id": task_id});
        for (k, v) in extra.as_object().unwrap() {
            request[k] = v.clone();
        }
        request
    };
    for (op, extra) in [
        ("get", json!({})),
        (
            "approve",
            json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": null}}),
        ),
        ("pause", json!({"expected_version": v, "note": "not yours"})),
        ("delete", json!({"expected_version": v})),
    ] {
        let answer =
            w.t.admin()
                .handle(ask(op, json!(w.task_id), extra), Utc::now())
                .await
                .unwrap();
        assert_eq!(answer["error"]["code"], "forbidden", "{op}: {answer}");
    }
    assert_eq!(w.task().await, before, "refused requests change nothing");
    assert_eq!(w.schedule_state().await, "DISABLED");

    let never = TaskId::for_connector("ws_2", "issues", "weekly_summary");
    for task_id in [json!(never), json!("not an id")] {
        let answer =
            w.t.admin()
                .handle(ask("get", task_id, json!({})), Utc::now())
                .await
                .unwrap();
        assert_eq!(answer["error"]["code"], "not_found", "{answer}");
    }
    let listed =
        w.t.admin()
            .handle(json!({"op": "list", "principal": outsider}), Utc::now())
            .await
            .unwrap();
    assert_eq!(listed["tasks"], json!([]), "a list shows the caller's workspace only");
    assert_eq!(w.admin("get", json!({})).await["ok"], true, "its own admin reads it");
}

/// A schedule update that failed after its task's write leaves the schedule
/// out of step; the next pass puts it back in step with the task.
#[tokio::test(flavor = "multi_thread")]
async fn a_pass_repairs_a_schedule_out_of_step_with_its_task() {
    let w = World::start().await;
    w.approved().await;
    assert_eq!(w.schedule_state().await, "ENABLED");
    w.disable_schedule_behind_the_task().await;

    let v = w.version().await;
    let pass = w.list_changed().await;
    assert_eq!(pass.tasks_written, 0, "nothing declared changed");
    assert_eq!(w.version().await, v);
    assert_eq!(w.schedule_state().await, "ENABLED", "repaired from the task");
}

/// A pass puts back only a schedule out of step: one in step is left
/// alone, since a put costs a Scheduler write per task a day and starts a
/// `rate()` schedule's phase again (its occurrences would drift).
#[tokio::test(flavor = "multi_thread")]
async fn a_pass_leaves_a_schedule_in_step_alone() {
    use shared::adapters::scheduler::EventBridgeSchedules;
    use shared::domain::run::definition::ScheduleDefinition;
    use shared::ports::{ScheduleError, Schedules};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tests::intercept::{Intercepted, SchedulesHook};
    struct Puts(AtomicUsize);
    impl SchedulesHook<EventBridgeSchedules> for Puts {
        async fn put(&self, inner: &EventBridgeSchedules, schedule: &ScheduleDefinition) -> Result<(), ScheduleError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            inner.put(schedule).await
        }
    }
    let w = World::start().await;
    w.approved().await;
    let target = w.t.create_config(tests::ENABLED).target;
    let counted = shared::app::reconcile::Reconciler::new(
        w.t.admin_store(),
        Intercepted::new(
            EventBridgeSchedules::from_sdk(&w.t.aws.sdk, target.clone()),
            Puts(AtomicUsize::new(0)),
        ),
        shared::adapters::mcp::McpConnectors::from_sdk(&w.t.aws.sdk, w.t.rules()).for_lists(),
        shared::adapters::queue::FifoQueue::from_sdk(&w.t.aws.sdk, &w.t.stack.reconcile_queue_url),
        w.t.create_config(tests::ENABLED).ceilings,
        w.t.rules(),
    );
    let puts = || counted.schedules().hook.0.load(Ordering::Relaxed);
    counted.reconcile_install("ws_1", "ins_1", Utc::now()).await.unwrap();
    assert_eq!(puts(), 0, "the approved task's schedule is in step: not put again");

    // Out of step (disabled while the task is scheduled): put back, once.
    w.disable_schedule_behind_the_task().await;
    counted.reconcile_install("ws_1", "ins_1", Utc::now()).await.unwrap();
    assert_eq!(puts(), 1);
    assert_eq!(w.schedule_state().await, "ENABLED", "repaired from the task");
    counted.reconcile_install("ws_1", "ins_1", Utc::now()).await.unwrap();
    assert_eq!(puts(), 1, "in step again: left alone");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daily_pass_queues_every_installed_connector_and_no_uninstalled_one() {
    let w = World::start().await;
    let r = w.t.reconciler();
    r.apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    r.apply(&event("connector.uninstalled", "ins_me"), Utc::now())
        .await
        .unwrap();
    w.t.take_work().await;
    let (mut work, pages) = w.t.run_daily_pass(&r, Utc::now()).await;
    work.sort();
    assert_eq!(pages, 1 + 16, "one page of installs, one per shard of reminders");
    let passes: Vec<(String, Value)> = work
        .into_iter()
        .map(|(group, body)| (group, serde_json::from_str(&body).unwrap()))
        .collect();
    let ids: Vec<&str> = passes
        .iter()
        .map(|(_, body)| body["install"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["ins_1", "ins_chat"], "{passes:?}");
    assert!(passes.iter().all(|(_, body)| body["workspace"] == "ws_1"));

    // Reinstalled, it is listed again.
    let url = w.t.item_at(Key::install("ws_1", "ins_me")).await.unwrap()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    r.apply(&installed("ins_me", "mail", &url, "personal"), Utc::now())
        .await
        .unwrap();
    let (work, _) = w.t.run_daily_pass(&r, Utc::now() + chrono::Duration::seconds(1)).await;
    assert_eq!(work.len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_marker_is_read_from_a_server_written_with_another_sdk() {
    let python = local::python_mcp::PythonMcp::start().unwrap();
    let t = TestStack::start().await.unwrap();
    let summary = t
        .reconciler()
        .apply(&installed("ins_py", "digest", python.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    assert_eq!(summary.changes.get("created"), Some(&1), "{summary:?}");
    let tasks = t.items_of("task").await;
    assert_eq!(tasks.len(), 1, "the marked prompt only");
    let task = &tasks[0];
    assert_eq!(task["provenance"]["prompt"], "daily_digest");
    assert_eq!(
        task["spec"]["schedule"],
        json!({"type": "cron", "cron": "0 8 * * *", "timezone": "Europe/Berlin"})
    );
    assert_eq!(task["spec"]["tools"], json!(["search"]));
    assert_eq!(task["spec"]["limits"]["max_turns"], 4);
    assert_eq!(task["prompt_arguments"], json!({"topic": true}));
    let id = task["task_id"].as_str().unwrap();
    assert_eq!(t.schedule(id).await.schedule_expression(), Some("cron(0 8 * * ? *)"));
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_admin_writes_leave_the_schedule_in_step_with_the_task() {
    let w = World::start().await;
    w.t.reconciler()
        .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
        .await
        .unwrap();
    let v = w.version().await;
    let approved = w.admin("approve", json!({"expected_version": v, "arguments": {"repo": "acme/web"}, "bindings": {"summary_channel": "ins_chat"}})).await;
    assert_eq!(approved["ok"], true, "{approved}");

    // Admin A pauses; its schedule put is slow. Admin B reads A's version
    // and resumes; B's put lands first, then A's (disabled) lands last.
    let (gated, entered_rx, gate_tx) = tests::intercept::GatedPut::new();
    let slow = tests::AdminFunction(shared::app::admin::Admin::new(
        w.t.admin_store(),
        Intercepted::new(
            EventBridgeSchedules::from_sdk(&w.t.aws.sdk, w.t.create_config(tests::ENABLED).target),
            gated,
        ),
        w.t.runs_queue(),
        tests::admin_settings(),
    ));
    let v = w.version().await;
    let pause = json!({"op": "pause", "principal": admin_principal(), "task_id": w.task_id, "expected_version": v, "note": "quiet"});
    let a = slow.handle(pause, Utc::now());
    let b = async {
        entered_rx.await.unwrap();
        let resumed = w.admin("resume", json!({"expected_version": v + 1})).await;
        assert_eq!(resumed["ok"], true, "{resumed}");
        gate_tx.send(()).unwrap();
    };
    let (paused, ()) = tokio::join!(a, b);
    assert_eq!(paused.unwrap()["ok"], true);

    let task = w.task().await;
    assert_eq!(task["version"], v + 2);
    assert_eq!(task["state"], "scheduled");
    assert_eq!(
        w.schedule_state().await,
        "ENABLED",
        "the late put of the pause is followed by one from the latest version"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daily_pass_puts_reminders_schedules_back_in_step() {
    use shared::domain::run::definition::ScheduleDefinition;
    use shared::ports::{Schedules, TaskStore};
    let t = TestStack::start().await.unwrap();
    let app = t.create_app();
    let now = Utc::now();
    let mut ids = Vec::new();
    for key in ["k_missing", "k_disabled", "k_fine"] {
        let answer = app
            .handle(tests::create_request(key, now, chrono::Duration::hours(2)), now)
            .await
            .unwrap()
            .to_json();
        assert_eq!(answer["ok"], true, "{answer}");
        ids.push(answer["task"]["task_id"].as_str().unwrap().to_owned());
    }
    let scheduler = aws_sdk_scheduler::Client::new(&t.aws.sdk);
    scheduler
        .delete_schedule()
        .group_name(&t.stack.names.schedule_group)
        .name(&ids[0])
        .send()
        .await
        .unwrap();
    let schedules =
        shared::adapters::scheduler::EventBridgeSchedules::from_sdk(&t.aws.sdk, t.create_config(tests::ENABLED).target);
    let store = t.admin_store();
    let disabled = store
        .task("ws_1", &TaskId::parse(&ids[1]).unwrap())
        .await
        .unwrap()
        .unwrap();
    let mut definition = ScheduleDefinition::for_task(&disabled).unwrap();
    definition.enabled = false;
    schedules.put(&definition).await.unwrap();
    let before_fine = t.schedule(&ids[2]).await;

    let r = t.reconciler();
    t.take_work().await;
    t.run_daily_pass(&r, Utc::now()).await;
    for id in &ids {
        let schedule = t.schedule(id).await;
        assert_eq!(schedule.state().map(|s| s.as_str()), Some("ENABLED"), "{id}");
    }
    assert_eq!(
        t.schedule(&ids[2]).await.last_modification_date(),
        before_fine.last_modification_date(),
        "a schedule in step is not touched"
    );
    let requests = r.store().requests();
    let before = t.schedule(&ids[0]).await.last_modification_date().cloned();
    t.run_daily_pass(&r, Utc::now() + chrono::Duration::seconds(1)).await;
    assert_eq!(
        t.schedule(&ids[0]).await.last_modification_date().cloned(),
        before,
        "in step: nothing to do"
    );
    assert_eq!(
        r.store().requests() - requests,
        1 + 16,
        "the installs' page and one page query a shard, no task read"
    );
    assert_eq!(t.schedule_names().await.len(), 3);
}

/// Lifecycle events carry when the platform sent them: a redriven
/// `connector.installed` that arrives after a later uninstall is recorded
/// on the install and ignored (it would reinstall the connector and run
/// its tasks again); a newer one applies; an item the release before
/// queued, with no time, applies as it comes.
#[tokio::test(flavor = "multi_thread")]
async fn a_stale_lifecycle_event_is_recorded_and_ignored() {
    use shared::app::reconcile::{Stamped, Work};
    use shared::domain::task::install::InstallStatus;
    let w = World::start().await;
    let r = w.t.reconciler();
    let t0 = Utc::now() - chrono::Duration::minutes(30);
    let at = |minutes: i64| Some(t0 + chrono::Duration::minutes(minutes));
    let body = |event, sent| serde_json::to_string(&Work::Event(Stamped::new(event, sent))).unwrap();
    let installed_event = || installed("ins_1", "issues", &w.issues.url(), "workspace");
    let status = || async {
        let item = w.t.item_at(Key::install("ws_1", "ins_1")).await.unwrap();
        let status = match item["status"].as_str() {
            Some("installed") => InstallStatus::Installed,
            Some("uninstalled") => InstallStatus::Uninstalled,
            other => panic!("status {other:?}"),
        };
        (status, item["last_error"].as_str().map(str::to_owned))
    };
    r.work(&body(installed_event(), at(0)), Utc::now()).await.unwrap();
    r.work(&body(event("connector.uninstalled", "ins_1"), at(10)), Utc::now())
        .await
        .unwrap();
    assert_eq!(status().await.0, InstallStatus::Uninstalled);
    // The first install's webhook, redriven from a DLQ after the uninstall.
    let stale = r.work(&body(installed_event(), at(5)), Utc::now()).await.unwrap();
    assert_eq!(stale.changes.get("stale_event_ignored"), Some(&1));
    let (state, why) = status().await;
    assert_eq!(state, InstallStatus::Uninstalled, "still uninstalled");
    let why = why.unwrap();
    assert!(why.contains("stale connector.installed"), "{why}");
    // A newer install applies; so does an item queued with no time.
    r.work(&body(installed_event(), at(20)), Utc::now()).await.unwrap();
    assert_eq!(status().await.0, InstallStatus::Installed);
    r.work(&body(event("connector.uninstalled", "ins_1"), None), Utc::now())
        .await
        .unwrap();
    assert_eq!(status().await.0, InstallStatus::Uninstalled);
}

/// The install's recorded status, if it has a record.
async fn install_status(w: &World, id: &str) -> Option<String> {
    w.t.item_at(Key::install("ws_1", id))
        .await
        .map(|item| item["status"].as_str().unwrap_or_default().to_owned())
}

/// Lifecycle events apply in the order they happened (SPEC §6
/// `occurred_at`), never the order they arrive: an uninstall of an install
/// not seen yet leaves a tombstone its earlier install, arriving later,
/// respects; a platform retry of an install after its uninstall changes
/// nothing; two events of one instant are ordered by their `webhook-id`.
#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_events_apply_in_the_order_they_happened_whatever_order_they_arrive() {
    use shared::app::reconcile::{Stamped, Work};
    let w = World::start().await;
    let r = w.t.reconciler();
    let t0 = Utc::now() - chrono::Duration::minutes(30);
    let body = |event, minutes: i64, id: &str| {
        let stamped = Stamped::delivered(event, t0 + chrono::Duration::minutes(minutes), id);
        serde_json::to_string(&Work::Event(stamped)).unwrap()
    };
    let installed_event = |id: &str| installed(id, "tracker", &w.issues.url(), "workspace");

    // The uninstall arrives first: a tombstone, and its earlier install,
    // arriving after it, is stale.
    r.work(&body(event("connector.uninstalled", "ins_2"), 10, "wh_b"), Utc::now())
        .await
        .unwrap();
    assert_eq!(
        install_status(&w, "ins_2").await.as_deref(),
        Some("uninstalled"),
        "a tombstone"
    );
    let late = r
        .work(&body(installed_event("ins_2"), 5, "wh_a"), Utc::now())
        .await
        .unwrap();
    assert_eq!(late.changes.get("stale_event_ignored"), Some(&1));
    assert_eq!(install_status(&w, "ins_2").await.as_deref(), Some("uninstalled"));
    // A later install of the same id applies over the tombstone.
    r.work(&body(installed_event("ins_2"), 20, "wh_c"), Utc::now())
        .await
        .unwrap();
    assert_eq!(install_status(&w, "ins_2").await.as_deref(), Some("installed"));

    // An install, its uninstall, then the platform's retry of the install
    // (the same event: the same `occurred_at`, under a new delivery).
    r.work(&body(installed_event("ins_3"), 0, "wh_d"), Utc::now())
        .await
        .unwrap();
    r.work(&body(event("connector.uninstalled", "ins_3"), 1, "wh_e"), Utc::now())
        .await
        .unwrap();
    let retry = r
        .work(&body(installed_event("ins_3"), 0, "wh_f"), Utc::now())
        .await
        .unwrap();
    assert_eq!(retry.changes.get("stale_event_ignored"), Some(&1));
    assert_eq!(install_status(&w, "ins_3").await.as_deref(), Some("uninstalled"));

    // Two events of one instant: the greater webhook id is the later, in
    // whichever order they arrive.
    r.work(&body(event("connector.uninstalled", "ins_3"), 30, "wh_z"), Utc::now())
        .await
        .unwrap();
    let tie = r
        .work(&body(installed_event("ins_3"), 30, "wh_y"), Utc::now())
        .await
        .unwrap();
    assert_eq!(tie.changes.get("stale_event_ignored"), Some(&1));
    assert_eq!(install_status(&w, "ins_3").await.as_deref(), Some("uninstalled"));
}

/// Most MCP servers serve tools alone and declare no `prompts` capability
/// (asked anyway, they answer `-32601`): such an install, beside one that
/// declares standing work, reconciles to nothing, with no error on it and
/// no `prompts/list` asked, and the other's task is created as before.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_serves_tools_alone_reconciles_to_nothing_without_an_error() {
    let w = World::start().await;
    let tools_only = McpFixture::start(FixtureState {
        tools: vec![tool("search")],
        tools_only: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let summary =
        w.t.reconciler()
            .apply(
                &installed("ins_2", "search", &tools_only.url(), "workspace"),
                Utc::now(),
            )
            .await
            .unwrap();
    assert!(summary.changes.is_empty(), "{summary:?}");
    let install = w.t.item_at(Key::install("ws_1", "ins_2")).await.unwrap();
    assert!(install.get("last_error").is_none_or(Value::is_null), "{install}");
    assert_eq!(
        tools_only.state().read().await.prompt_lists,
        0,
        "never asked for prompts"
    );

    let summary =
        w.t.reconciler()
            .apply(&installed("ins_1", "issues", &w.issues.url(), "workspace"), Utc::now())
            .await
            .unwrap();
    assert_eq!(summary.changes.get("created"), Some(&1));
    assert_eq!(w.t.items_of("task").await.len(), 1);
}

/// An install's reconcile reads what one install's tasks need: its
/// workspace's connector tasks (their count bounds the workspace), never
/// its reminders. At a workspace of 1,000 reminders, each with a long
/// instruction (megabytes in all), a pass makes exactly the requests it
/// makes at a workspace of none.
#[tokio::test(flavor = "multi_thread")]
async fn an_installs_reconcile_reads_the_workspaces_connector_tasks_and_never_its_reminders() {
    use shared::ports::TaskCatalog;
    let w = World::start().await;
    w.approved().await;
    let r = w.t.reconciler();
    let pass = || async {
        let before = r.store().requests();
        r.apply(&event("prompts.list_changed", "ins_1"), Utc::now())
            .await
            .unwrap();
        r.store().requests() - before
    };
    let quiet = pass().await;
    let store = r.store();
    for i in 0..1_000 {
        let mut reminder = tests::reminder(Utc::now() + chrono::Duration::days(1));
        reminder.task_id = TaskId::for_reminder("ws_1", "usr_1", &format!("k{i}"));
        reminder.instruction = Some("x".repeat(3_000));
        store.insert_task(&reminder).await.unwrap();
    }
    assert_eq!(pass().await, quiet, "the same requests beside 1,000 reminders");
    let connector = store.connector_tasks("ws_1").await.unwrap();
    assert!(!connector.is_empty());
    assert!(
        connector
            .iter()
            .all(|t| t.kind == shared::domain::task::TaskKind::Connector)
    );
    assert_eq!(
        store.workspace_tasks("ws_1").await.unwrap().len(),
        connector.len() + 1_000
    );
}
