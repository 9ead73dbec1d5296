//! `driftlab merge DIR`: combine the shard folders of a run (`DIR/shards/*`) into `DIR`, then
//! write its report.

use crate::experiment::merge::merge;
use crate::report::write_report;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    pub dir: PathBuf,
}

pub fn run(a: &MergeArgs) -> Result<()> {
    let dir = &a.dir;
    let statuses = merge(dir)?;
    let sums = write_report(dir)?;
    println!(
        "merged {} cells into {}; wrote {} ({} arms)",
        statuses.len(),
        dir.display(),
        dir.join("report.md").display(),
        sums.len()
    );
    Ok(())
}
