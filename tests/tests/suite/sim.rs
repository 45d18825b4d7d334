//! A small fixed slice of the seeded fault simulation (`tests::sim`,
//! `infra/scripts/sim.sh`): two seeds of 30 occurrences each, every fault
//! kind among them, on the real adapters and local services. Asserts that
//! every check held, and that faults struck at all.

use tests::sim::{SimConfig, run};

#[tokio::test(flavor = "multi_thread")]
async fn seeded_faults_leave_one_outcome_per_occurrence_paid_once_notified_once_none_lost() {
    let report = run(&SimConfig {
        first_seed: 1,
        last_seed: 2,
        size: 30,
        per_task: 5,
        concurrency: 6,
        print_schedule: false,
    })
    .await
    .unwrap();
    println!("{}", report.table());
    assert_eq!(
        report.violation_count(),
        0,
        "\n{}\n{}",
        report.table(),
        report.details()
    );
    assert_eq!(report.occurrences, 60);
    assert!(
        report.faults.values().sum::<usize>() >= 10,
        "the slice injects faults:\n{}",
        report.table()
    );
}
