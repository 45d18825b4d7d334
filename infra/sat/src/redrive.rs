use crate::error::SatError;
use crate::render::Report;
use crate::resources::Resources;

#[derive(Debug, Clone, clap::Args)]
pub struct RedriveArgs {}

#[derive(Debug, serde::Serialize)]
pub struct RedriveReport {}

impl Report for RedriveReport {
    fn human(&self) -> String {
        String::new()
    }
}

pub async fn run(_args: &RedriveArgs, _resources: &Resources) -> Result<RedriveReport, SatError> {
    Ok(RedriveReport {})
}
