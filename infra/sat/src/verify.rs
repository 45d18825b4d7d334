use crate::error::SatError;
use crate::render::Report;
use crate::resources::Resources;

#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {}

#[derive(Debug, serde::Serialize)]
pub struct VerifyReport {}

impl Report for VerifyReport {
    fn human(&self) -> String {
        String::new()
    }
}

pub async fn run(_args: &VerifyArgs, _resources: &Resources, _progress: bool) -> Result<VerifyReport, SatError> {
    Ok(VerifyReport {})
}
