//! `driftlab slim DIR`: drop the frame columns the report does not read (the committed form of
//! a results folder), recorded in config.json; `--shard` for a shard folder that `merge` will
//! read later (every column kept, the config's cells grouped).

use crate::report::slim::{slim, slim_shard};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SlimArgs {
    pub dir: PathBuf,
    /// A shard folder to commit before `merge`: keep every column (merge needs the whole
    /// schema), group the config's cells, rewrite the frames with the compact codec
    #[arg(long)]
    pub shard: bool,
}

pub fn run(a: &SlimArgs) -> Result<()> {
    let (before, after) = if a.shard {
        slim_shard(&a.dir)?
    } else {
        slim(&a.dir)?
    };
    println!(
        "slimmed {}: frames {:.2} MB -> {:.2} MB",
        a.dir.display(),
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    Ok(())
}
