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
    /// An experiment in the specs folder (`moe_drift`), or a spec file (`my/spec.toml`).
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
    /// Output folder (default results/<name>; results/<name>-quick for --quick and
    /// results/<name>-custom for a run that selects seeds, regimes, arms, steps, a preset or a
    /// last-bit draw, so that no such run replaces the full run's results).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Small version: the spec's quick seeds (default: its first seed), 15 steps, eval every 5.
    #[arg(long)]
    pub quick: bool,
    /// Run into a folder that holds a run of other cells (another spec, other settings),
    /// replacing it.
    #[arg(long)]
    pub force: bool,
    /// Only these arms, comma separated.
    #[arg(long, value_delimiter = ',')]
    pub arms: Option<Vec<String>>,
    /// Cells run at once, one thread each (default: the number of cores).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
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
    let study: Vec<u64> = (spec.seeds.iter())
        .chain(spec.regimes.iter().flat_map(|r| r.seeds.iter().flatten()))
        .copied()
        .collect();
    if let Some(q) = &spec.quick_seeds
        && let Some(s) = q.iter().find(|s| study.contains(s))
    {
        bail!(
            "key 'quick_seeds': seed {s} is one of the study's own seeds; a quick form must \
             never spend them"
        );
    }
    if a.quick {
        let quick = match &spec.quick_seeds {
            Some(q) => q.clone(),
            None => spec.seeds.iter().take(1).copied().collect(),
        };
        spec.set_seeds(quick);
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

impl ExperimentArgs {
    /// Whether this run selects from the spec (anything but every cell at the spec's settings).
    pub fn selects(&self) -> bool {
        self.quick
            || self.steps.is_some()
            || self.seeds.is_some()
            || self.preset.is_some()
            || self.arms.is_some()
            || self.regime.is_some()
            || self.ulp_jitter.is_some()
    }

    /// The output folder: `--out`, else `results/<name>` for the full spec,
    /// `results/<name>-quick` for `--quick` and `results/<name>-custom` for any other
    /// selection (both ignored by git), so that no partial run replaces the full run's results.
    pub fn out_root(&self, name: &str) -> PathBuf {
        if let Some(o) = &self.out {
            return o.clone();
        }
        let folder = if self.quick {
            format!("{name}-quick")
        } else if self.selects() {
            format!("{name}-custom")
        } else {
            name.to_string()
        };
        PathBuf::from("results").join(folder)
    }
}

/// Refuse a fresh run into a folder that holds a run of other cells (another spec, other
/// settings, another driftlab version) unless `--force`: the refusal names the first
/// difference. The same cells from another commit are run again (what the README's main command
/// does to the committed results: same numbers, and git shows any that moved).
fn refuse_other_run(dir: &std::path::Path, spec: &ExperimentSpec, device: &str) -> Result<()> {
    let path = dir.join("config.json");
    if !path.exists() {
        return Ok(());
    }
    let cfg: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)
        .with_context(|| format!("{} is not valid JSON; --force replaces it", path.display()))?;
    let cells = spec.resolve(device)?;
    let version = cfg.get("crate_version").and_then(|v| v.as_str());
    let why = crate::experiment::resume::other_cells(&cfg, &cells)?.or_else(|| {
        (version != Some(env!("CARGO_PKG_VERSION"))).then(|| {
            format!(
                "driftlab {} wrote it, this is {}",
                version.unwrap_or("(unknown)"),
                env!("CARGO_PKG_VERSION")
            )
        })
    });
    if let Some(why) = why {
        bail!(
            "{} holds a run of other cells ({why}); a run there would replace it. Choose another \
             --out, or add --force to replace it",
            dir.display()
        );
    }
    Ok(())
}

/// What a signal does to a run: the first (Ctrl-C, SIGTERM as Slurm sends at `scancel` and at
/// its time limit, SIGHUP) stops every cell after its current step, then the frames,
/// `status.json` and the report are written and the command exits non-zero; a second writes
/// the frames and `status.json` as they stand and exits 130 at once.
fn on_signals(stop: Arc<AtomicBool>) {
    let _ = ctrlc::set_handler(move || {
        if stop.swap(true, Ordering::SeqCst) {
            eprintln!(
                "\nsecond interrupt: writing the frames and status.json as they stand, then quitting"
            );
            match crate::experiment::book::write_now() {
                Ok(dirs) => {
                    for d in dirs {
                        eprintln!("kept every finished cell in {}", d.display());
                    }
                }
                Err(e) => eprintln!("error: {e:#}"),
            }
            std::process::exit(130);
        }
        eprintln!(
            "\ninterrupt: finishing the current step, then writing the frames, status.json and the \
             report (interrupt again to quit now, keeping every finished cell)"
        );
    });
}

/// `driftlab experiment`: run every cell, then the report; Ctrl-C stops after the current step.
pub fn run(device: Device, device_name: String, jobs: usize, a: &ExperimentArgs) -> Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    on_signals(stop.clone());
    let progress = crate::util::progress::Progress::auto();
    run_with_stop(device, device_name, jobs, a, stop, progress).map(|_| ())
}

/// [`run`] with the caller's stop flag and progress: the CLI sets the flag from Ctrl-C, the
/// Python binding from `KeyboardInterrupt`. Returns the output folder; a stopped run is an
/// error naming it, after every finished cell is written.
pub fn run_with_stop(
    device: Device,
    device_name: String,
    jobs: usize,
    a: &ExperimentArgs,
    stop: Arc<AtomicBool>,
    progress: crate::util::progress::Progress,
) -> Result<PathBuf> {
    let spec = spec(a)?;
    let root = a.out_root(&spec.name);
    let out = a.shard.map_or(root.clone(), |s| s.dir(&root));
    if a.out.is_none() && a.selects() {
        eprintln!(
            "writing {} (a run that selects from the spec never writes results/{}; --out chooses)",
            root.display(),
            spec.name
        );
    }
    std::fs::create_dir_all(&out).with_context(|| {
        format!(
            "cannot create output folder {} (is it writable?)",
            out.display()
        )
    })?;
    // Held across the run and its report: a second run into the folder fails at once.
    let _hold = crate::util::lock::hold_folder(&out)?;
    if !a.resume && !a.force {
        refuse_other_run(&out, &spec, &device_name)?;
    }
    let opts = RunOptions {
        jobs,
        out: out.clone(),
        device,
        device_name,
        cache_dir: a.cache_dir.clone(),
        progress,
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
    Ok(out)
}
