//! `driftlab slim DIR`: drop the frame columns the report does not read (the committed form of
//! a results folder), recorded in config.json.

use crate::report::slim::slim;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SlimArgs {
    pub dir: PathBuf,
}

pub fn run(a: &SlimArgs) -> Result<()> {
    let (before, after) = slim(&a.dir)?;
    println!(
        "slimmed {}: frames {:.2} MB -> {:.2} MB",
        a.dir.display(),
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    Ok(())
}
