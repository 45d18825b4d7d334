//! The README's main job, run as a person runs it: the `local` binary with
//! the five function binaries beside it. It must finish and tell the story
//! the README promises, every result shown through RunFinishedQueue and
//! the functions (SPEC §12).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

#[test]
fn the_main_job_walks_the_whole_loop() {
    let out = Command::new(env!("CARGO_BIN_EXE_local"))
        .output()
        .expect("the main job starts");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "Bedrock is NOT called",
        "connector.installed ins_issues: HTTP 202",
        "weekly_summary: waits for an admin to approve it before its first run",
        "a release waits for an admin to approve: tools raised",
        "skipped: held, withdrawn",
        "its schedule is disabled; Scheduler would not fire it",
        "tools offered to the model: issues__list_issues, issues__post_summary, issues__close_issue, chat__post_message",
        "moved: Dentist now at",
        "cancelled: Parcel is deleted",
        ": ran and finished",
        "Water plants: runs every day at 08:00 Europe/Berlin; next at",
        "\"Scheduled run finished\" events on the bus: 9",
        // The workspace's budget (SPEC §15): reached, one event; raised, runs again.
        "reached true",
        "skipped: budget reached: the workspace's monthly budget is spent",
        "reached false",
        "\"Workspace budget reached\" events on the bus: 1",
        "{\"budget_usd\":",
        // A gated tool call (SPEC §15): it waits, nothing called; approved,
        // the occurrence resumes and the call is made once.
        "waits for a workspace admin to approve a tool call (request apr_",
        "calls made meanwhile: 0",
        "approve_call: \"approved\"",
        "calls made on the issues server by the resumed run: 1",
        "\"Tool call awaiting approval\" events on the bus: 1",
        // A monthly reminder on the 31st: one expression, the months
        // without a 31st skipped and named.
        "Rent: cron(0 9 31 * ? *) in Europe/Berlin on Scheduler",
        "has no day 31: that month's reminder is skipped",
        // An admin's run now, asked twice with one key: one run.
        "(replayed: false), then ",
        "(replayed: true)",
        "runs recorded for that run id: 1",
        // The chat backend (SPEC §12): the content-free event from the
        // queue, the result read back as its owner or a workspace admin.
        "RunFinishedQueue: {\"workspace\":\"ws_1\",\"task_id\":\"rem_",
        "schedules run as usr_123 -> shown to usr_123: Reminder: It is time for the reminder the user set, titled \"Call mom\"",
        "schedules run as usr_456 -> shown to usr_456: Reminder: It is time for the reminder the user set, titled \"Water plants\"",
        "admin runs as adm_1 -> shown to the admins of ws_1: Done. The tool answered:",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in:\n{text}");
    }
    // Every event on the bus reached its person; none was dropped or left.
    assert_eq!(text.matches(" -> shown to ").count(), 9, "{text}");
    for unexpected in ["dropped:", "left in the queue"] {
        assert!(!text.contains(unexpected), "`{unexpected}` in:\n{text}");
    }
}
