//! `driftlab slim DIR`: drop the frame columns the report does not read (the committed form of
//! a results folder), recorded in config.json; `--shard` for a shard folder that `merge` will
//! read later (every column kept, the config's cells grouped).

use crate::report::slim::{record_plots_kept, slim, slim_dropping, slim_shard, slim_shard_trimmed};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct SlimArgs {
    pub dir: PathBuf,
    /// A shard folder to commit before `merge`: keep every column (merge needs the whole
    /// schema), group the config's cells, rewrite the frames with the compact codec
    #[arg(long)]
    pub shard: bool,
    /// Also drop these metric columns the report reads, as FRAME.COLUMN (comma-separated,
    /// e.g. steps.mismatch_kl_k3): for a folder over the repository's budget; the report then
    /// leaves out what needs them, and config.json records them
    #[arg(long, value_delimiter = ',', conflicts_with = "shard")]
    pub drop: Vec<String>,
    /// With --shard: in each frame named here, keep these metric columns (FRAME.COLUMN,
    /// comma-separated) and null the frame's other metric columns (the schema stays whole for
    /// merge); for a study whose shards must fit the repository's budget
    #[arg(long, value_delimiter = ',', requires = "shard")]
    pub keep: Vec<String>,
    /// With --shard: leave these frames out (of layers, lengths, prefixes; merge skips a
    /// frame a shard lacks)
    #[arg(long, value_delimiter = ',', requires = "shard")]
    pub without: Vec<String>,
    /// The figure folders under plots/ (e.g. map, or a regime's name; `none` for none) that
    /// the committed folder keeps, recorded in config.json: the report links only these and
    /// names the others' figures as drawn by `driftlab report`
    #[arg(long, value_delimiter = ',', conflicts_with = "shard")]
    pub plots_kept: Option<Vec<String>>,
}

/// FRAME.COLUMN pairs of a flag.
fn pairs(flag: &str, items: &[String]) -> Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|d| match d.split_once('.') {
            Some((f, c)) => Ok((f.to_string(), c.to_string())),
            None => {
                anyhow::bail!("--{flag} {d}: expected FRAME.COLUMN, e.g. updates.drift_expert_frac")
            }
        })
        .collect()
}

pub fn run(a: &SlimArgs) -> Result<()> {
    let extra = pairs("drop", &a.drop)?;
    let keep = pairs("keep", &a.keep)?;
    // Recorded first (a misspelt folder fails before any frame is rewritten); slimming keeps
    // config.json's other records.
    if let Some(kept) = &a.plots_kept {
        let kept: Vec<String> = kept.iter().filter(|k| *k != "none").cloned().collect();
        record_plots_kept(&a.dir, &kept)?;
    }
    let (before, after) = if a.shard && (!keep.is_empty() || !a.without.is_empty()) {
        slim_shard_trimmed(&a.dir, &keep, &a.without)?
    } else if a.shard {
        slim_shard(&a.dir)?
    } else if extra.is_empty() {
        slim(&a.dir)?
    } else {
        slim_dropping(&a.dir, &extra)?
    };
    println!(
        "slimmed {}: frames {:.2} MB -> {:.2} MB",
        a.dir.display(),
        before as f64 / 1e6,
        after as f64 / 1e6
    );
    Ok(())
}
