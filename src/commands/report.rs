//! `driftlab report DIR`: rebuild the summary, plots and report.md of a results folder from its
//! Parquet files.

use crate::report::write_report;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    pub dir: PathBuf,
}

pub fn run(a: &ReportArgs) -> Result<()> {
    let sums = write_report(&a.dir)?;
    println!(
        "wrote {} ({} arms)",
        a.dir.join("report.md").display(),
        sums.len()
    );
    Ok(())
}
