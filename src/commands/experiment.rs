//! `driftlab experiment NAME`: run every cell of a named experiment (or one shard of them),
//! then write the report; Ctrl-C stops after the current step.

use crate::experiment::{ExperimentSpec, RunOptions, Shard, find_spec, run_experiment};
use crate::model::Preset;
use crate::report::write_report;
use crate::util::io::DEFAULT_CACHE_DIR;
use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(clap::Args, Debug)]
pub struct ExperimentArgs {
    pub name: String,
    /// RL steps per cell (overrides the spec).
    #[arg(long)]
    pub steps: Option<usize>,
    /// Seeds, comma separated (overrides the spec, every regime's own list included).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Model preset (overrides the spec).
    #[arg(long)]
    pub preset: Option<Preset>,
    /// Output folder (default results/<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Small version: first seed only, 15 steps, eval every 5 steps.
    #[arg(long)]
    pub quick: bool,
    /// Only these arms, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub arms: Option<Vec<String>>,
    /// Cells run at once, one thread each (default: the number of cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Only these regimes, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub regime: Option<Vec<String>>,
    /// Folder of experiment specs.
    #[arg(long, default_value = "experiments")]
    pub specs: PathBuf,
    /// Cache directory of cold starts.
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// A last-bit draw: move every initial weight of the cold starts by one ulp (pattern
    /// seeded by this number) to see which verdicts survive rounding-level changes.
    #[arg(long)]
    pub ulp_jitter: Option<u64>,
    /// Run only shard i of n (cells whose canonical index ≡ i mod n) into <out>/shards/i-of-n;
    /// combine the shards with `driftlab merge <out>`.
    #[arg(long)]
    pub shard: Option<Shard>,
    /// Keep the cells the output folder already finished; run only the others.
    #[arg(long)]
    pub resume: bool,
}

impl ExperimentArgs {
    /// Cells run at once: `--jobs`, else the number of cores.
    pub fn jobs(&self) -> usize {
        self.jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// The spec of `driftlab experiment` with the command line's overrides applied.
pub fn spec(a: &ExperimentArgs) -> Result<ExperimentSpec> {
    let mut spec = find_spec(&a.specs, &a.name)?;
    if a.quick {
        let first = spec.seeds.iter().take(1).copied().collect();
        spec.set_seeds(first);
        spec.steps = 15;
        spec.eval_every = 5;
    }
    if let Some(s) = a.steps {
        spec.steps = s;
    }
    if let Some(s) = &a.seeds {
        spec.set_seeds(s.clone());
    }
    if let Some(p) = a.preset {
        spec.preset = p;
    }
    if let Some(draw) = a.ulp_jitter {
        spec.coldstart.insert("ulp_jitter".into(), draw.into());
    }
    if let Some(arms) = &a.arms {
        spec.select_arms(arms)?;
    }
    if let Some(r) = &a.regime {
        spec.select_regimes(r)?;
    }
    spec.validate().context("after command-line overrides")?;
    Ok(spec)
}

/// `driftlab experiment`: run every cell, then the report; Ctrl-C stops after the current step.
pub fn run(device: Device, device_name: String, jobs: usize, a: &ExperimentArgs) -> Result<()> {
    let spec = spec(a)?;
    let root = a
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(&spec.name));
    let out = a.shard.map_or(root.clone(), |s| s.dir(&root));
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!(
            "\ninterrupt: finishing the current step, then flushing and reporting (Ctrl-C again to quit now)"
        );
    });
    let opts = RunOptions {
        jobs,
        out: out.clone(),
        device,
        device_name,
        cache_dir: a.cache_dir.clone(),
        progress: crate::util::progress::Progress::auto(),
        shard: a.shard,
        resume: a.resume,
        stop: stop.clone(),
        on_step: None,
    };
    let started = std::time::Instant::now();
    let statuses = run_experiment(&spec, &opts)?;
    // A shard's report would cover a slice of the cells; the merged folder gets the report.
    if a.shard.is_none() {
        write_report(&out)?;
    }
    for s in &statuses {
        println!(
            "{:>10} {:>14} seed {}: {} after {} steps",
            s.regime, s.arm, s.seed, s.status, s.steps_done
        );
    }
    match a.shard {
        None => println!(
            "wrote {} ({:.0}s)",
            out.join("report.md").display(),
            started.elapsed().as_secs_f64()
        ),
        Some(s) => println!(
            "shard {s} wrote {} ({:.0}s); when every shard is done: driftlab merge {}",
            out.display(),
            started.elapsed().as_secs_f64(),
            root.display()
        ),
    }
    if stop.load(Ordering::SeqCst) {
        bail!(
            "interrupted: the data computed so far is in {}",
            out.display()
        );
    }
    Ok(())
}
