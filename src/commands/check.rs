//! `driftlab check`: the CI regression, `experiments/check.toml` against its committed baseline
//! (see [`crate::check`]).

use crate::check::check;
use crate::experiment::{RunOptions, find_spec};
use crate::util::io::DEFAULT_CACHE_DIR;
use crate::util::progress::Progress;
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Rewrite the baseline from this run (deliberately).
    #[arg(long)]
    pub update: bool,
    #[arg(long, default_value = "results/baselines/check.json")]
    pub baseline: PathBuf,
    #[arg(long, default_value = "experiments")]
    pub specs: PathBuf,
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Also write a JUnit XML report (one test case per arm and metric) to this file.
    #[arg(long)]
    pub junit: Option<PathBuf>,
}

pub fn run(device: Device, device_name: String, a: &CheckArgs) -> Result<()> {
    let spec = find_spec(&a.specs, "check")?;
    let out = std::env::temp_dir().join(format!("driftlab-check-{}", std::process::id()));
    let opts = RunOptions {
        jobs: 1,
        out: out.clone(),
        device,
        device_name,
        cache_dir: a.cache_dir.clone(),
        progress: Progress::Hidden,
        shard: None,
        resume: false,
        stop: Arc::new(AtomicBool::new(false)),
        on_step: None,
    };
    let result = check(&spec, &opts, &a.baseline, a.update, a.junit.as_deref());
    let _ = std::fs::remove_dir_all(&out);
    println!("{}", result?);
    Ok(())
}
