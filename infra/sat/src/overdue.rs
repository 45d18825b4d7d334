//! `sat overdue`: the missed-occurrence check (SPEC §14) on demand, the
//! same use case the reconcile worker runs every 15 minutes
//! (`app::overdue::check`): every task whose next occurrence passed its
//! catch-up window is judged against its run records, and each occurrence
//! that never ran is named, task and time, in its zone beside UTC. It
//! records what it finds as the scheduled check does (each once, a missed
//! one-time reminder completed), unless `--dry-run`.

use std::time::Instant;

use chrono::Utc;
use serde::Serialize;
use shared::adapters::dynamo::DynamoStore;
use shared::app::overdue::{CheckSettings, Checked, check};

use crate::error::SatError;
use crate::render::{self, Report};
use crate::resources::Resources;

#[derive(Debug, Clone, clap::Args)]
pub struct OverdueArgs {
    /// Judge and name, record nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The runner's catch-up window (default: the deployment's
    /// CATCH_UP_SECONDS, else one hour).
    #[arg(long, value_parser = crate::args::duration)]
    pub catch_up: Option<std::time::Duration>,
    /// How long the check may read before it stops (the rest waits for the
    /// next check).
    #[arg(long, value_parser = crate::args::duration, default_value = "60s")]
    pub within: std::time::Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct OverdueReport {
    pub dry_run: bool,
    pub catch_up_seconds: i64,
    #[serde(flatten)]
    pub checked: Checked,
}

pub async fn run(args: &OverdueArgs, resources: &Resources) -> Result<OverdueReport, SatError> {
    let store = DynamoStore::from_sdk(&resources.sdk, resources.output("TasksTableName")?);
    let catch_up_seconds = match args.catch_up {
        Some(window) => i64::try_from(window.as_secs()).unwrap_or(i64::MAX),
        None => resources
            .setting("CATCH_UP_SECONDS")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(shared::config::DEFAULT_CATCH_UP_SECONDS),
    };
    let settings = CheckSettings {
        catch_up: chrono::Duration::seconds(catch_up_seconds),
        retention: chrono::Duration::days(
            resources
                .setting("RETENTION_DAYS")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(shared::config::DEFAULT_RETENTION_DAYS),
        ),
        write: !args.dry_run,
    };
    let checked = check(&store, settings, Utc::now(), Instant::now() + args.within).await?;
    Ok(OverdueReport {
        dry_run: args.dry_run,
        catch_up_seconds,
        checked,
    })
}

/// One row a missed occurrence; instants stay whole on a line, the ids
/// wrap first.
fn missed_table(missed: &[shared::app::overdue::Missed]) -> comfy_table::Table {
    let mut table = render::table(&[
        "task",
        "kind",
        "workspace",
        "scheduled (UTC)",
        "scheduled (local)",
        "why",
    ]);
    for m in missed {
        table.add_row(vec![
            m.task_id.clone(),
            m.kind.to_owned(),
            m.workspace.clone(),
            render::utc(m.scheduled_time),
            render::local(m.scheduled_time, &m.timezone),
            m.reason.replace('_', " "),
        ]);
    }
    for column in [3, 4] {
        if let Some(column) = table.column_mut(column) {
            column.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
        }
    }
    table
}

impl Report for OverdueReport {
    fn human(&self) -> String {
        let mut out = String::new();
        let cutoff = self.checked.cutoff.map_or_else(|| "-".to_owned(), render::utc);
        out.push_str(&render::fields(&[
            (
                "judged",
                format!(
                    "occurrences scheduled before {cutoff} (catch-up {} s and 20 min ago)",
                    self.catch_up_seconds
                ),
            ),
            ("tasks read", self.checked.tasks.to_string()),
            (
                "finished",
                if self.checked.complete {
                    "yes".to_owned()
                } else {
                    "no: the time ran out; the next check goes on".to_owned()
                },
            ),
        ]));
        for task in &self.checked.unjudged {
            out.push_str(&format!(
                "\nnot judged: {} ({}): {}; the next check tries it again\n",
                task.task_id, task.workspace, task.error
            ));
        }
        if self.checked.missed.is_empty() {
            out.push_str("\nNo occurrence was missed.\n");
            return out;
        }
        out.push_str(&render::heading(&format!(
            "{} occurrence(s) never ran{}:",
            self.checked.missed.len(),
            if self.dry_run {
                " (dry run: nothing recorded)"
            } else {
                ", each now recorded skipped"
            }
        )));
        let table = missed_table(&self.checked.missed);
        out.push_str(&format!("{table}\n"));
        let mut reasons: Vec<&String> = self.checked.missed.iter().map(|m| &m.explanation).collect();
        reasons.sort();
        reasons.dedup();
        for reason in reasons {
            out.push_str(&format!("\n{reason}.\n"));
        }
        out
    }

    fn findings(&self) -> bool {
        !self.checked.missed.is_empty() || !self.checked.unjudged.is_empty()
    }
}
