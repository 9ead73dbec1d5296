//! `driftlab check`: the CI regression, `experiments/check.toml` against its committed baseline
//! (see [`crate::check`]).

use crate::check::check;
use crate::experiment::{RunOptions, find_spec};
use crate::util::io::DEFAULT_CACHE_DIR;
use crate::util::progress::Progress;
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Rewrite the baseline from this run (deliberately).
    #[arg(long)]
    pub update: bool,
    /// The baseline compared with (default: the device's own, [`baseline_for`]).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    #[arg(long, default_value = "experiments")]
    pub specs: PathBuf,
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Also write a JUnit XML report (one test case per arm and metric) to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
}

/// Each device kind has its own baseline: a run on another device sums in another order, so its
/// RL trajectory (and cold start) differ from flex's by more than rounding after a few steps;
/// each device's run is deterministic, so each is checked against its own record.
/// `results/baselines/check.json` is flex's, `check-<device>.json` any other's.
pub fn baseline_for(device_name: &str) -> PathBuf {
    let dir = PathBuf::from("results/baselines");
    match device_name {
        "flex" => dir.join("check.json"),
        other => dir.join(format!("check-{other}.json")),
    }
}

pub fn run(device: Device, device_name: String, a: &CheckArgs) -> Result<()> {
    let spec = find_spec(&a.specs, "check")?;
    let out = std::env::temp_dir().join(format!("driftlab-check-{}", std::process::id()));
    let opts = RunOptions::one_job(
        out.clone(),
        device,
        device_name,
        a.cache_dir.clone(),
        Progress::Hidden,
    );
    let baseline = a
        .baseline
        .clone()
        .unwrap_or_else(|| baseline_for(&opts.device_name));
    let result = check(&spec, &opts, &baseline, a.update, a.junit.as_deref());
    let _ = std::fs::remove_dir_all(&out);
    println!("{}", result?);
    Ok(())
}
