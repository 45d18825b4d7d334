use crate::error::SatError;
use crate::render::Report;
use crate::resources::Resources;

#[derive(Debug, Clone, clap::Args)]
pub struct DescribeArgs {}

#[derive(Debug, serde::Serialize)]
pub struct DescribeReport {}

impl Report for DescribeReport {
    fn human(&self) -> String {
        String::new()
    }
}

pub async fn run(_args: &DescribeArgs, _resources: &Resources) -> Result<DescribeReport, SatError> {
    Ok(DescribeReport {})
}
