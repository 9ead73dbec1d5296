//! `driftlab report DIR`: rebuild the summary, plots and report.md of a results folder from its
//! Parquet files.

use crate::report::{ReportOptions, write_report_with};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    pub dir: PathBuf,
    /// Report a folder without config.json (an error otherwise); report.md then says what
    /// the missing config leaves out.
    #[arg(long)]
    pub allow_missing_config: bool,
}

pub fn run(a: &ReportArgs) -> Result<()> {
    let opts = ReportOptions {
        allow_missing_config: a.allow_missing_config,
    };
    let sums = write_report_with(&a.dir, opts)?;
    println!(
        "wrote {} ({} arms)",
        a.dir.join("report.md").display(),
        sums.len()
    );
    Ok(())
}
