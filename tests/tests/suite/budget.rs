//! A workspace's monthly budget (SPEC §9, `budget::WorkspaceBudget`): set
//! by an admin with the expected version, reserved against with every
//! task's reservation in the same transaction, and, once reached, every
//! occurrence of the workspace, connector tasks and reminders alike, skipped
//! `budget_reached`, while another workspace runs on; a raise resumes from
//! the next occurrence. Through the admin function's answer and the real
//! runner against moto and the Converse stand-in.

use chrono::{DateTime, Duration, Utc};
use local::converse::Reply;
use local::mcp_fixture::{McpFixture, tool};
use serde_json::{Value, json};
use shared::adapters::keys::Key;
use shared::app::run::Disposition;
use shared::domain::run::door::SkipReason;
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::task::budget::{self, BudgetLevel};
use shared::domain::task::claim::RunStatus;
use shared::domain::task::{Task, TaskId};
use tests::{RunStack, deadline, reminder, run_message, run_settings};

fn admin_of(workspace: &str) -> Value {
    json!({"id": "adm_1", "workspace": workspace, "scopes": ["schedule.admin"]})
}

/// `set_budget`; its answer's `workspace` (or the refusal).
async fn set_budget(s: &RunStack, workspace: &str, limit: Option<f64>, expected: u64) -> Value {
    let budget = limit.map(|l| json!({"max_usd_per_month": l}));
    let request = json!({"op": "set_budget", "principal": admin_of(workspace),
                         "budget": budget, "expected_version": expected});
    let answer = s.t.admin().handle(request, Utc::now()).await.unwrap();
    if answer["ok"] == true {
        answer["workspace"].clone()
    } else {
        answer
    }
}

/// `workspace`'s answer's `workspace`.
async fn read_budget(s: &RunStack, workspace: &str) -> Value {
    let request = json!({"op": "workspace", "principal": admin_of(workspace)});
    let answer = s.t.admin().handle(request, Utc::now()).await.unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    answer["workspace"].clone()
}

/// A one-time reminder of `principal` in `workspace`, due five seconds ago, stored.
async fn due(s: &RunStack, workspace: &str, principal: &str, key: &str) -> (Task, DateTime<Utc>) {
    let at = Utc::now() - Duration::seconds(5);
    let mut task = reminder(at);
    task.workspace = workspace.to_owned();
    task.provenance = shared::domain::task::Provenance::User {
        principal: principal.to_owned(),
    };
    task.task_id = TaskId::for_reminder(workspace, principal, key);
    s.insert(&task).await;
    (task, at)
}

/// What the workspace's item says its month holds.
async fn held(s: &RunStack, workspace: &str) -> f64 {
    let period = budget::period(Utc::now());
    s.t.item_at(Key::workspace_budget(workspace))
        .await
        .and_then(|item| item[shared::adapters::budgets::committed_of(&period).as_str()].as_f64())
        .unwrap_or(0.0)
}

/// The issues server installed in ws_1 and its approved weekly_summary
/// task (a connector task reserves $0.25 a run), stored.
async fn weekly_summary(s: &RunStack) -> (McpFixture, Task) {
    s.issues_task("weekly_summary", vec![tool("list_issues")], &["list_issues"], &[])
        .await
}

async fn record_of(s: &RunStack, task: &Task, at: DateTime<Utc>) -> Value {
    s.run_record(&task.task_id, &occurrence_key(at))
        .await
        .expect("a run record")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_admin_reads_and_sets_the_workspace_budget_against_its_version() {
    let s = RunStack::start().await.unwrap();
    let none = read_budget(&s, "ws_1").await;
    assert_eq!(none["version"], 0, "{none}");
    assert_eq!(none["reached"], false, "{none}");
    assert_eq!(none["budget"], Value::Null, "no budget: {none}");
    assert_eq!(none["month"], budget::period(Utc::now()), "{none}");

    let set = set_budget(&s, "ws_1", Some(20.0), 0).await;
    assert_eq!(set["budget"]["max_usd_per_month"], 20.0, "{set}");
    assert_eq!(set["version"], 1, "{set}");
    assert_eq!(set["updated_by"], "adm_1", "{set}");
    // A second admin who read version 0 too is told, and changes nothing.
    let stale = set_budget(&s, "ws_1", Some(1.0), 0).await;
    assert_eq!(stale["error"]["code"], "version_conflict", "{stale}");
    assert_eq!(read_budget(&s, "ws_1").await["budget"]["max_usd_per_month"], 20.0);
    // Null removes the budget; one out of bounds, or none given, is refused.
    let removed = set_budget(&s, "ws_1", None, 1).await;
    assert_eq!(removed["budget"], Value::Null, "{removed}");
    assert_eq!(removed["version"], 2, "{removed}");
    for bad in [
        json!({"max_usd_per_month": -1.0}),
        json!({"max_usd_per_month": 2_000_000.0}),
        json!({"usd": 5.0}),
    ] {
        let request = json!({"op": "set_budget", "principal": admin_of("ws_1"),
                             "budget": bad, "expected_version": 2});
        let refused = s.t.admin().handle(request, Utc::now()).await.unwrap();
        assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    }
    let missing = json!({"op": "set_budget", "principal": admin_of("ws_1"), "expected_version": 2});
    let refused = s.t.admin().handle(missing, Utc::now()).await.unwrap();
    assert_eq!(refused["error"]["code"], "invalid_request", "{refused}");
    // Another workspace's budget is its own; a principal without the
    // admin scope reads none.
    assert_eq!(read_budget(&s, "ws_2").await["version"], 0);
    let member = json!({"op": "workspace", "principal": {"id": "usr_1", "workspace": "ws_1", "scopes": []}});
    let refused = s.t.admin().handle(member, Utc::now()).await.unwrap();
    assert_eq!(refused["error"]["code"], "forbidden", "{refused}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reached_workspace_budget_skips_every_task_of_the_workspace_and_nothing_else_until_a_raise() {
    let s = RunStack::start().await.unwrap();
    let (issues, connector) = weekly_summary(&s).await;
    let (mine, mine_at) = due(&s, "ws_1", "usr_1", "k1").await;
    let (theirs, theirs_at) = due(&s, "ws_1", "usr_2", "k2").await;
    let (other, other_at) = due(&s, "ws_2", "usr_1", "k3").await;
    // A budget of nothing: the month is reached before anything ran.
    assert_eq!(set_budget(&s, "ws_1", Some(0.0), 0).await["reached"], true);

    let connector_at = Utc::now() - Duration::seconds(5);
    for (task, at) in [(&connector, connector_at), (&mine, mine_at), (&theirs, theirs_at)] {
        assert_eq!(
            s.deliver_once(task, at).await,
            Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace)),
            "{}",
            task.task_id
        );
        let record = record_of(&s, task, at).await;
        assert_eq!(record["status"], "skipped", "{record}");
        let reason = record["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("budget reached: the workspace's monthly budget"),
            "{reason}"
        );
        assert_eq!(record["cost_usd"].as_f64(), Some(0.0), "{record}");
    }
    assert!(s.model.requests().await.is_empty(), "no model call in ws_1");
    // One content-free event for the month, whatever number of occurrences it stopped.
    let reached: Vec<Value> = s
        .events()
        .await
        .into_iter()
        .filter(|e| e["detail-type"] == "Workspace budget reached")
        .collect();
    assert_eq!(reached.len(), 1, "{reached:?}");
    assert_eq!(
        reached[0]["detail"],
        json!({"workspace": "ws_1", "month": budget::period(Utc::now()), "budget_usd": "0"}),
        "ids and the figure only"
    );
    let state = issues.state().read().await;
    assert!(
        state.calls.is_empty() && state.prompt_gets.is_empty(),
        "nothing of ws_1's server read"
    );
    drop(state);

    // The other workspace runs as before.
    s.model.script([Reply::text("done", 1000, 100)]).await;
    assert_eq!(
        s.deliver_once(&other, other_at).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    let cost = record_of(&s, &other, other_at).await["cost_usd"].as_f64().unwrap();
    assert!(cost > 0.0);
    assert!(
        (held(&s, "ws_2").await - cost).abs() < 1e-9,
        "ws_2's month holds its run's cost"
    );
    assert_eq!(held(&s, "ws_1").await, 0.0, "nothing held in ws_1");

    // A raise takes effect at the next occurrence.
    assert_eq!(set_budget(&s, "ws_1", Some(10.0), 1).await["reached"], false);
    let (next, next_at) = due(&s, "ws_1", "usr_1", "k4").await;
    s.model.script([Reply::text("done", 1000, 100)]).await;
    assert_eq!(
        s.deliver_once(&next, next_at).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    let cost = record_of(&s, &next, next_at).await["cost_usd"].as_f64().unwrap();
    assert!((held(&s, "ws_1").await - cost).abs() < 1e-9);
    let events = s.events().await;
    assert!(
        events.iter().all(|e| e["detail-type"] != "Workspace budget reached"),
        "no second event for the month: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_starts_only_if_its_reservation_fits_the_months_rest_to_the_cent() {
    let s = RunStack::start().await.unwrap();
    // A connector task reserves its per-run maximum ($0.25) at its claim.
    let (_issues, connector) = weekly_summary(&s).await;
    // A limit below one run's reservation admits no run at all.
    set_budget(&s, "ws_1", Some(0.2), 0).await;
    let refused = Utc::now() - Duration::seconds(900);
    assert_eq!(
        s.deliver_once(&connector, refused).await,
        Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace))
    );
    assert!(s.model.requests().await.is_empty(), "no model call");
    assert_eq!(held(&s, "ws_1").await, 0.0);

    set_budget(&s, "ws_1", Some(0.26), 1).await;
    s.model
        .script([Reply::text("done", 1000, 100), Reply::text("done", 1000, 100)])
        .await;
    let first = Utc::now() - Duration::seconds(600);
    assert_eq!(
        s.deliver_once(&connector, first).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    let spent = record_of(&s, &connector, first).await["cost_usd"].as_f64().unwrap();
    // The month holds what the run cost (its reservation settled), as the
    // task's month does.
    assert!((held(&s, "ws_1").await - spent).abs() < 1e-9);
    let period = budget::period(first);
    let task = s.task_item(&connector).await;
    assert!((task["budget_used"][period.as_str()].as_f64().unwrap() - spent).abs() < 1e-9);

    // A hundredth of a cent short of the next reservation: refused.
    set_budget(&s, "ws_1", Some(spent + 0.25 - 0.0001), 2).await;
    let second = Utc::now() - Duration::seconds(300);
    assert_eq!(
        s.deliver_once(&connector, second).await,
        Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace))
    );
    // Exactly the month's spend plus the reservation: admitted.
    set_budget(&s, "ws_1", Some(spent + 0.25), 3).await;
    let third = Utc::now() - Duration::seconds(120);
    assert_eq!(
        s.deliver_once(&connector, third).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    assert_eq!(s.model.requests().await.len(), 2, "two runs called the model");
    let month = held(&s, "ws_1").await;
    assert!(month <= spent + 0.25 + 1e-9, "{month}");
}

/// Fifty occurrences delivered at once at the edge of a workspace's cap,
/// half a connector task's and half its people's reminders, each costing
/// near what it reserves ($0.25: the task's `max_usd_per_run`, a reminder's
/// `budget::REMINDER_MAX_USD_PER_RUN`): the runs admitted never hold more
/// than the limit between them, so the month spends at most the limit, to
/// the cent, and the rest skip `budget_reached` before the model is called.
#[tokio::test(flavor = "multi_thread")]
async fn fifty_runs_at_once_at_a_caps_edge_spend_at_most_the_cap() {
    let s = RunStack::start().await.unwrap();
    let (_issues, connector) = weekly_summary(&s).await;
    assert_eq!(budget::REMINDER_MAX_USD_PER_RUN, 0.25);
    // Not a multiple of the reservation: nine fit, a tenth would cross.
    let limit = 2.4;
    set_budget(&s, "ws_1", Some(limit), 0).await;
    // $0.249 a run, a tenth of a cent under its reservation: 50,000
    // tokens in, 6,600 out at $3 / $15.
    s.model
        .script((0..50).map(|_| Reply::text("done", 50_000, 6_600)))
        .await;
    let base = Utc::now() - Duration::seconds(3000);
    let mut occurrences: Vec<(Task, DateTime<Utc>)> = (0..25)
        .map(|i| (connector.clone(), base + Duration::seconds(i * 60)))
        .collect();
    for i in 0..25 {
        occurrences.push(due(&s, "ws_1", &format!("usr_{i}"), &format!("k{i}")).await);
    }
    let runner = s.runner();
    let bodies: Vec<String> = occurrences
        .iter()
        .map(|(task, at)| tests::run_message(task, *at, "e1"))
        .collect();
    let ids: Vec<String> = (0..50).map(|i| format!("m{i}")).collect();
    let deliveries = bodies
        .iter()
        .zip(&ids)
        .map(|(body, id)| runner.deliver(id, body, Utc::now(), deadline()));
    let outcomes = futures::future::join_all(deliveries).await;
    let ran = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(Disposition::Ran(RunStatus::Succeeded))))
        .count();
    assert!(
        outcomes.iter().all(|o| matches!(
            o,
            Ok(Disposition::Ran(RunStatus::Succeeded)
                | Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Workspace)))
        )),
        "{outcomes:?}"
    );
    let mut spent = 0.0;
    for (task, at) in &occurrences {
        spent += record_of(&s, task, *at).await["cost_usd"].as_f64().unwrap();
    }
    assert!(
        spent <= limit + 1e-9,
        "the month spent {spent} under a limit of {limit}"
    );
    assert!(
        (held(&s, "ws_1").await - spent).abs() < 1e-9,
        "the month holds what its runs cost"
    );
    // As many as fit ran: nine.
    assert_eq!(ran, 9, "{outcomes:?}");
    assert_eq!(s.model.requests().await.len(), ran, "no skipped run called the model");
}

/// A person's monthly cap on their own reminders' cost (`PERSON_MONTHLY_USD`,
/// per workspace and principal): once their month's reminders cost it, their
/// next reminder skips `budget_reached` naming their cap, while another
/// person's reminders, their own in another workspace, and the workspace's
/// connector tasks run on; no workspace event is sent for it.
#[tokio::test(flavor = "multi_thread")]
async fn a_persons_cap_stops_their_reminders_and_nobody_elses() {
    let s = RunStack::start().await.unwrap();
    let capped = s.runner_on(
        s.store(),
        shared::app::run::RunSettings {
            person_monthly_usd: Some(0.004),
            ..run_settings(true)
        },
    );
    let deliver = |task: &Task, at: DateTime<Utc>| {
        let body = run_message(task, at, "e1");
        let runner = &capped;
        async move {
            runner
                .deliver("m1", &body, Utc::now().max(at), deadline())
                .await
                .unwrap()
        }
    };
    s.model
        .script([
            Reply::text("done", 1000, 100),
            Reply::text("done", 1000, 100),
            Reply::text("done", 1000, 100),
        ])
        .await;
    // $0.0045 a run: the first reaches the cap.
    let (first, first_at) = due(&s, "ws_1", "usr_1", "k1").await;
    assert_eq!(deliver(&first, first_at).await, Disposition::Ran(RunStatus::Succeeded));
    let (second, second_at) = due(&s, "ws_1", "usr_1", "k2").await;
    assert_eq!(
        deliver(&second, second_at).await,
        Disposition::Skipped(SkipReason::BudgetReached(BudgetLevel::Person))
    );
    let record = record_of(&s, &second, second_at).await;
    let reason = record["reason"].as_str().unwrap();
    assert!(reason.contains("its person's monthly cap"), "{reason}");
    // The owner reads it through their own `runs`.
    let runs =
        s.t.schedules_app()
            .handle(
                json!({"op": "runs", "principal": {"id": "usr_1", "workspace": "ws_1",
                   "scopes": ["schedule.read", "schedule.write"]}, "task_id": second.task_id}),
                Utc::now(),
            )
            .await
            .unwrap();
    assert_eq!(runs["runs"][0]["status"], "skipped", "{runs}");
    assert!(
        runs["runs"][0]["explanation"]
            .as_str()
            .unwrap()
            .contains("its person's monthly cap"),
        "{runs}"
    );
    // Another person, and the same person in another workspace, run.
    let (other, other_at) = due(&s, "ws_1", "usr_2", "k3").await;
    assert_eq!(deliver(&other, other_at).await, Disposition::Ran(RunStatus::Succeeded));
    let (elsewhere, elsewhere_at) = due(&s, "ws_2", "usr_1", "k4").await;
    assert_eq!(
        deliver(&elsewhere, elsewhere_at).await,
        Disposition::Ran(RunStatus::Succeeded)
    );
    assert!(
        s.events()
            .await
            .iter()
            .all(|e| e["detail-type"] != "Workspace budget reached"),
        "a person's cap is not the workspace's"
    );
    assert_eq!(read_budget(&s, "ws_1").await["reached"], false);
}
