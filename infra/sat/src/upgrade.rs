//! `sat upgrade`: once, after deploying this release over one from before
//! due times (the missed-occurrence check), the tasks that release wrote
//! get what this one reads them by. Their items carry no `due`, so neither
//! the missed-occurrence check nor the daily pass, which read the
//! schedulable index (`gsi3`), can see them; a reminder written before the
//! index carries none of its keys at all. This reads the table's tasks
//! without a due time page by page (a `Scan`, which no pass may do, SPEC
//! §13, so an operator runs it from here, with their own credentials) and
//! gives each that still fires its first due time and its place in the
//! index, as the daily pass does for the tasks it reads
//! (`app::overdue::adopt`). Run again, it finds nothing to do.

use chrono::Utc;
use serde::Serialize;
use shared::adapters::dynamo::DynamoStore;
use shared::app::overdue::adopt;
use shared::ports::DueIndex;

use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

/// Items one page of the scan reads (filtered after reading).
pub const PAGE: usize = 1_000;

#[derive(Debug, Clone, clap::Args)]
pub struct UpgradeArgs {
    /// Find and count, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct UpgradeReport {
    pub dry_run: bool,
    /// Pages of the table read.
    pub pages: usize,
    /// Tasks found without a due time.
    pub without_due: usize,
    /// Of those, given one now (or, in a dry run, that would be).
    pub adopted: usize,
    /// Of those, that fire no more (completed, cancelled, past their
    /// last occurrence): left as they are.
    pub not_firing: usize,
    /// The ids adopted, for the record.
    pub task_ids: Vec<String>,
}

pub async fn run(args: &UpgradeArgs, resources: &Resources) -> Result<UpgradeReport, SatError> {
    let store = DynamoStore::from_sdk(&resources.sdk, resources.output("TasksTableName")?);
    let mut report = UpgradeReport {
        dry_run: args.dry_run,
        ..UpgradeReport::default()
    };
    let mut after = None;
    loop {
        let page = store.undue_page(after.as_ref(), PAGE).await?;
        report.pages += 1;
        for task in &page.items {
            report.without_due += 1;
            let now = Utc::now();
            let fires = task.should_fire() && shared::domain::operations::overdue::first_due(task, now).is_some();
            if !fires {
                report.not_firing += 1;
                continue;
            }
            if args.dry_run || adopt(&store, task, now).await? {
                report.adopted += 1;
                report.task_ids.push(task.task_id.to_string());
            }
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(report),
        }
    }
}

impl Report for UpgradeReport {
    fn human(&self) -> String {
        let mut out = render::fields(&[
            ("pages of the table read", self.pages.to_string()),
            ("tasks without a due time", self.without_due.to_string()),
            (
                if self.dry_run {
                    "would be given one (dry run)"
                } else {
                    "given one, now in the index"
                },
                self.adopted.to_string(),
            ),
            ("firing no more, left as they are", self.not_firing.to_string()),
        ]);
        if self.without_due == 0 {
            out.push_str("\nEvery task has a due time: nothing to upgrade.\n");
        }
        out
    }

    fn findings(&self) -> bool {
        false
    }
}
