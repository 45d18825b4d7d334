//! The model pace (`domain::run::pace`): its item on the real table does what the
//! domain's slots say, one conditional write each, under concurrent
//! bookings too; a run the pace has no slot for goes back before any model
//! call, whole, until the pace has room; a throttle at a paced slot slows
//! the pace and the call books again.

use chrono::{Duration, Utc};
use local::converse::Window;
use shared::adapters::keys::Key;
use shared::app::run::{Disposition, RunSettings};
use shared::domain::run::occurrence::occurrence_key;
use shared::domain::run::pace::{Pace, Slots, latest_slot};
use shared::ports::{PaceAnswer, RunStore};
use tests::{MODEL, RunStack, run_message};

fn pace(requests: u32, window_ms: u64) -> Pace {
    Pace::new(requests, std::time::Duration::from_millis(window_ms)).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pace_item_books_starts_and_changes_its_gap_as_the_domain_says() {
    let s = RunStack::start().await.unwrap();
    let store = s.store();
    let p = pace(200, 60_000);
    // No item: a booking is refused with nothing to read, and the pace starts.
    assert_eq!(
        store.pace_book(MODEL, 1_000, 2_000).await.unwrap(),
        PaceAnswer::Refused(None)
    );
    let started = Slots::start(None, 1_000, &p).unwrap();
    assert_eq!(
        store.pace_start(MODEL, 1_000, p.gap_ms()).await.unwrap(),
        PaceAnswer::Taken(started)
    );
    assert_eq!(
        store.pace_start(MODEL, 1_100, p.gap_ms()).await.unwrap(),
        PaceAnswer::Refused(Some(started)),
        "not idle: no second start"
    );
    // The next slot when it is within reach, refused with the item past it.
    let booked = started.book(1_100, 2_000).unwrap();
    assert_eq!(
        store.pace_book(MODEL, 1_100, 2_000).await.unwrap(),
        PaceAnswer::Taken(booked)
    );
    assert_eq!(
        store.pace_book(MODEL, 1_100, 1_500).await.unwrap(),
        PaceAnswer::Refused(Some(booked))
    );
    // The gap changes only from the gap and change a writer saw.
    assert!(store.pace_gap(MODEL, &booked, 375, 1_200).await.unwrap());
    assert!(
        !store.pace_gap(MODEL, &booked, 500, 1_300).await.unwrap(),
        "a second throttle of the same round does not slow it again"
    );
    let slowed = Slots {
        gap_ms: 375,
        changed_ms: 1_200,
        ..booked
    };
    assert_eq!(
        store.pace_book(MODEL, 1_500, 9_000).await.unwrap(),
        PaceAnswer::Taken(slowed.book(1_500, 9_000).unwrap())
    );
    // Idle again later: the start keeps the slowed gap.
    assert_eq!(
        store.pace_start(MODEL, 50_000, p.gap_ms()).await.unwrap(),
        PaceAnswer::Taken(Slots {
            next_ms: 50_375,
            ..slowed
        })
    );
    let item = s.t.item_at(Key::pace(MODEL)).await.unwrap();
    assert_eq!(item["entity"], "pace");
    assert_eq!(item["next_ms"], 50_375);
}

/// Many instances booking at once each get their own slot, a gap apart:
/// DynamoDB applies each conditional update whole.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_bookings_take_distinct_slots_a_gap_apart() {
    let s = RunStack::start().await.unwrap();
    let store = s.store();
    let now = Utc::now().timestamp_millis();
    let p = pace(600, 60_000);
    store.pace_start(MODEL, now, p.gap_ms()).await.unwrap();
    let latest = latest_slot(now, 600_000);
    let answers = futures::future::join_all((0..40).map(|_| store.pace_book(MODEL, now, latest))).await;
    let mut taken: Vec<i64> = answers
        .into_iter()
        .map(|a| match a.unwrap() {
            PaceAnswer::Taken(slots) => slots.taken_ms(),
            refused => panic!("{refused:?}"),
        })
        .collect();
    taken.sort_unstable();
    let want: Vec<i64> = (1..=40).map(|i| now + i * p.gap_ms()).collect();
    assert_eq!(taken, want);
}

/// A connector server declaring one prompt, `digest`, with no tools.
async fn digest_server() -> local::mcp_fixture::McpFixture {
    use local::mcp_fixture::{FixtureState, McpFixture, scheduled_prompt};
    McpFixture::start(FixtureState {
        prompts: vec![scheduled_prompt(
            "digest",
            serde_json::json!({"version": 1}),
            &[],
            "Digest.",
        )],
        ..Default::default()
    })
    .await
    .unwrap()
}

fn paced(s: &RunStack, pace: Pace) -> tests::TestRunner {
    s.runner_on(
        s.store(),
        RunSettings {
            pace: Some(pace),
            ..tests::run_settings(true)
        },
    )
}

/// A pace of one request an hour: the first run takes the slot and runs;
/// the second has none within its reach and goes back before it calls the
/// model, its claim and reservation released, nothing recorded, for as
/// long as the pace needs, no longer than the longest return.
#[tokio::test(flavor = "multi_thread")]
async fn a_paced_run_with_no_slot_in_its_time_goes_back_whole_before_calling_the_model() {
    let s = RunStack::start().await.unwrap();
    let runner = paced(&s, pace(1, 3_600_000));
    let (first, at) = s.due_reminder().await;
    let got = runner
        .deliver(
            "m1",
            &run_message(&first, at, "e1"),
            Utc::now(),
            Utc::now() + Duration::minutes(5),
        )
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(shared::domain::task::claim::RunStatus::Succeeded));

    let at = at - Duration::seconds(1);
    let second = tests::reminder(at);
    s.insert(&second).await;
    let now = Utc::now();
    let before = runner.store().requests();
    let got = runner
        .deliver("m2", &run_message(&second, at, "e1"), now, now + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(
        runner.store().requests() - before,
        4,
        "the task read, the workspace's limit, the claim and its release: the pace this process saw full is refused without a write"
    );
    let Disposition::Paced(room_at) = got else {
        panic!("{got:?}")
    };
    // The next slot is an hour after the first; this run would wait half its
    // time left at most, so there is room for it from about then.
    assert!(
        room_at > now + Duration::minutes(55) && room_at < now + Duration::minutes(61),
        "{room_at}"
    );
    assert_eq!(
        s.model.requests().await.len(),
        1,
        "the second run never called the model"
    );
    assert_eq!(s.model.faulted().await, 0);
    assert!(s.run_record(&second.task_id, &occurrence_key(at)).await.is_none());
    let item = s.task_item(&second).await;
    assert!(item["claims"].get(occurrence_key(at)).is_none(), "{item}");
    let used = item["budget_used"][at.format("%Y-%m").to_string()]
        .as_f64()
        .unwrap_or(0.0);
    assert!(used.abs() < 1e-12, "the reservation is released: {used}");
    assert_eq!(
        got.comes_back(1, now, 0.0),
        Some(shared::domain::run::redelivery::LONGEST_RETURN_SECONDS),
        "an hour away: back after the longest return, to be turned away again or run"
    );
}

/// Every request throttled: each throttle at a paced slot slows the pace a
/// quarter and the call books another slot, until none is within the run's
/// reach; the run then goes back whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_throttle_at_a_paced_slot_slows_the_pace_and_the_call_books_again() {
    let s = RunStack::start().await.unwrap();
    let p = pace(600, 60_000);
    let runner = paced(&s, p);
    s.model.throttle(Some((0, Window::Manual))).await;
    let (task, at) = s.due_reminder().await;
    let now = Utc::now();
    let deadline = now + Duration::seconds(shared::app::run::SETTLE_RESERVE_SECONDS + 4);
    let got = runner
        .deliver("m1", &run_message(&task, at, "e1"), now, deadline)
        .await
        .unwrap();
    assert!(matches!(got, Disposition::Paced(_)), "{got:?}");
    let throttled = s.model.faulted().await;
    assert!(throttled >= 2, "booked again after a throttle: {throttled} calls");
    assert!(s.model.requests().await.is_empty());
    let item = s.t.item_at(Key::pace(MODEL)).await.unwrap();
    let gap = item["gap_ms"].as_i64().unwrap();
    assert!(
        gap > p.gap_ms() && gap <= p.slowest_gap_ms(),
        "slowed from {} ms to {gap} ms",
        p.gap_ms()
    );
    assert!(s.run_record(&task.task_id, &occurrence_key(at)).await.is_none());
    assert!(s.task_item(&task).await["claims"].get(occurrence_key(at)).is_none());
}

/// Fairness (SPEC §13): a connector herd that has booked the connectors'
/// lane an hour ahead holds back no reminder, which books in a lane of its
/// own (a fifth of the pace) and runs; a connector run whose lane is full
/// borrows the reminders' lane only a slot they leave idle, so once
/// reminders have booked ahead it goes back to the queue instead.
#[tokio::test(flavor = "multi_thread")]
async fn a_connector_herd_cannot_hold_back_a_reminder() {
    use shared::domain::run::pace::Lane;
    use shared::domain::task::install::InstallScope;
    let s = RunStack::start().await.unwrap();
    let fixture = digest_server().await;
    s.store()
        .put_install(&tests::install(
            "ins_1",
            "issues",
            &fixture.url(),
            InstallScope::Workspace,
        ))
        .await
        .unwrap();
    // 600 a minute: reminders 120 (a slot every 500 ms), connectors 480.
    let p = pace(600, 60_000);
    let runner = paced(&s, p);
    let now_ms = Utc::now().timestamp_millis();
    let connectors = Lane::Connectors.pace_id(MODEL);
    let herd = s
        .store()
        .pace_start(&connectors, now_ms + 3_600_000, Lane::Connectors.pace(&p).gap_ms())
        .await
        .unwrap();
    assert!(
        matches!(herd, PaceAnswer::Taken(_)),
        "the herd's lane is booked an hour ahead"
    );

    let (reminder, at) = s.due_reminder().await;
    let now = Utc::now();
    let got = runner
        .deliver("m1", &run_message(&reminder, at, "e1"), now, now + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(
        got,
        Disposition::Ran(shared::domain::task::claim::RunStatus::Succeeded),
        "the reminder runs"
    );

    // Reminders book ahead in their lane: no idle slot for a connector run.
    let reminders = Lane::Reminders.pace_id(MODEL);
    let booked = s
        .store()
        .pace_book(
            &reminders,
            Utc::now().timestamp_millis(),
            Utc::now().timestamp_millis() + 10_000,
        )
        .await
        .unwrap();
    assert!(matches!(booked, PaceAnswer::Taken(_)));
    let mut connector = tests::connector_task("issues", "digest", &[], &[]);
    connector.spec.budget = None;
    s.insert(&connector).await;
    let at = Utc::now() - Duration::seconds(5);
    let now = Utc::now();
    let got = runner
        .deliver(
            "m2",
            &run_message(&connector, at, "e1"),
            now,
            now + Duration::minutes(5),
        )
        .await
        .unwrap();
    assert!(
        matches!(got, Disposition::Paced(_)),
        "the connector run goes back: {got:?}"
    );
    assert_eq!(s.model.requests().await.len(), 1, "the reminder's request alone");
}

/// Fairness between workspaces (SPEC §13): a workspace whose herd has used
/// its credit in the connectors' lane (half the lane) books the lane only
/// within half a run's reach, so the lane booked further ahead turns its
/// next run away before any model call; another workspace's run, within its
/// credit, books behind the same herd's slots and runs. Each workspace's
/// credit is an item of its own.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_past_its_share_cannot_hold_the_lane_against_another() {
    use shared::domain::run::pace::{Lane, share_id};
    use shared::domain::task::TaskId;
    use shared::domain::task::install::InstallScope;
    let s = RunStack::start().await.unwrap();
    let fixture = digest_server().await;
    let herd_install = tests::install("ins_1", "issues", &fixture.url(), InstallScope::Workspace);
    let other_install = shared::domain::task::install::Install {
        workspace: "ws_2".into(),
        ..tests::install("ins_2", "issues", &fixture.url(), InstallScope::Workspace)
    };
    for install in [&herd_install, &other_install] {
        s.store().put_install(install).await.unwrap();
    }
    let p = pace(600, 60_000);
    let runner = paced(&s, p);
    let now_ms = Utc::now().timestamp_millis();
    let connectors = Lane::Connectors.pace_id(MODEL);
    let gap = Lane::Connectors.pace(&p).gap_ms();
    // The herd of ws_1: its credit used for an hour, the lane booked 6 s
    // ahead (a run delivered with 30 s left waits 10 s at most, and past
    // its share 5 s), and the reminders' lane booked ahead too, so there
    // is no idle slot to borrow.
    let credit = share_id(&connectors, "ws_1");
    let used = s
        .store()
        .pace_start(&credit, now_ms + 3_600_000, gap * 2)
        .await
        .unwrap();
    assert!(matches!(used, PaceAnswer::Taken(_)));
    for (id, ahead_ms) in [(connectors.clone(), 6_000), (Lane::Reminders.pace_id(MODEL), 30_000)] {
        let booked = s.store().pace_start(&id, now_ms + ahead_ms, gap).await.unwrap();
        assert!(matches!(booked, PaceAnswer::Taken(_)), "{id}");
    }

    let mut herd = tests::connector_task("issues", "digest", &[], &[]);
    herd.spec.budget = None;
    s.insert(&herd).await;
    let mut other = tests::connector_task("issues", "digest", &[], &[]);
    other.spec.budget = None;
    other.workspace = "ws_2".into();
    other.task_id = TaskId::for_connector("ws_2", "issues", "digest");
    other.provenance = shared::domain::task::Provenance::Connector {
        install_id: "ins_2".into(),
        server: "issues".into(),
        prompt: "digest".into(),
    };
    s.insert(&other).await;

    let deliver = |task: &shared::domain::task::Task, id: &'static str| {
        let message = run_message(task, Utc::now() - Duration::seconds(5), "e1");
        let runner = &runner;
        async move {
            let now = Utc::now();
            runner
                .deliver(id, &message, now, now + Duration::seconds(30))
                .await
                .unwrap()
        }
    };
    let got = deliver(&herd, "m1").await;
    assert!(
        matches!(got, Disposition::Paced(_)),
        "the herd's run goes back past its share: {got:?}"
    );
    assert_eq!(s.model.requests().await.len(), 0);
    let got = deliver(&other, "m2").await;
    assert_eq!(
        got,
        Disposition::Ran(shared::domain::task::claim::RunStatus::Succeeded),
        "the other workspace's run books behind the herd and runs"
    );
    assert_eq!(s.model.requests().await.len(), 1);
    // Its credit was booked on an item of its own, the herd's untouched.
    let store = s.store();
    let own = store
        .pace_book(&share_id(&connectors, "ws_2"), 0, i64::MAX)
        .await
        .unwrap();
    assert!(
        matches!(own, PaceAnswer::Taken(_)),
        "ws_2's credit item exists: {own:?}"
    );
    let herds = store.pace_book(&credit, 0, now_ms + 3_000_000).await.unwrap();
    assert!(
        matches!(herds, PaceAnswer::Refused(Some(s)) if s.next_ms == now_ms + 3_600_000 + gap * 2),
        "{herds:?}"
    );
}

/// Tokens a minute (`MODEL_TOKENS_PER_MINUTE`): an answered call's tokens,
/// an output token counted five times, move its lane's next free slot on
/// by the time they take at the lane's share of the tokens, beyond the gap
/// already between slots; the next call books after them.
#[tokio::test(flavor = "multi_thread")]
async fn an_answered_call_moves_its_lane_on_by_the_tokens_it_counted() {
    use local::converse::Reply;
    use shared::domain::run::pace::{Lane, counted_tokens};
    let s = RunStack::start().await.unwrap();
    // Reminders: 120 requests (a slot every 500 ms) and 1,200 tokens a minute.
    let p = pace(600, 60_000).with_tokens(6_000);
    let lane = Lane::Reminders.pace(&p);
    assert_eq!(lane.tokens(), Some(1_200));
    let runner = paced(&s, p);
    s.model.script([Reply::text("Done.", 100, 20)]).await;
    let (reminder, at) = s.due_reminder().await;
    let before = Utc::now().timestamp_millis();
    let now = Utc::now();
    let got = runner
        .deliver("m1", &run_message(&reminder, at, "e1"), now, now + Duration::minutes(5))
        .await
        .unwrap();
    assert_eq!(got, Disposition::Ran(shared::domain::task::claim::RunStatus::Succeeded));
    let counted = counted_tokens(100, 0, 20);
    assert_eq!(counted, 200);
    let charge = lane.token_charge_ms(counted, lane.gap_ms()).unwrap();
    assert_eq!(charge, 10_000 - 500, "200 tokens at 1,200 a minute, less the gap");
    // The lane started at the call's slot (at or after `before`): its next
    // free slot is a gap and the charge later.
    let id = Lane::Reminders.pace_id(MODEL);
    let seen = match s.store().pace_book(&id, 0, 0).await.unwrap() {
        PaceAnswer::Refused(Some(slots)) => slots,
        other => panic!("{other:?}"),
    };
    let taken = seen.next_ms - lane.gap_ms() - charge;
    assert!(
        taken >= before && taken <= Utc::now().timestamp_millis(),
        "next {} is the slot taken ({taken}) + gap + charge",
        seen.next_ms
    );
}
