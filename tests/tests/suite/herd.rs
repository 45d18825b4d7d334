//! A small fixed slice of the herd (`tests::herd`, `infra/scripts/herd.sh`):
//! 50 connector tasks due at one instant against a model quota of 20
//! requests per minute, on a clock compressed 60 times. Asserts what must
//! hold, never how long it took.

use tests::herd::{HerdConfig, run};

#[tokio::test(flavor = "multi_thread")]
async fn fifty_tasks_due_at_once_all_run_once_within_the_catch_up_window_none_failing_for_throttling() {
    let report = run(HerdConfig {
        tasks: 50,
        rpm: 20,
        compression: 60,
        concurrency: 20,
        batch: 5,
        duplicate_every: 5,
    })
    .await
    .unwrap();
    println!("{}", report.table());
    assert_eq!(report.violations(), Vec::<String>::new(), "\n{}", report.table());
    assert_eq!(report.succeeded, 50);
    assert_eq!(report.duplicates_sent, 10);
    // 50 first calls against 20 a minute: the quota was met and runs went back.
    assert!(report.model_throttled > 0, "the quota never bound:\n{}", report.table());
    assert!(report.returned > 0, "no run was returned:\n{}", report.table());
}
