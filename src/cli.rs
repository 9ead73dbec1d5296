//! Command-line interface: parses arguments into validated commands.

use crate::device::DeviceChoice;
use crate::io::DEFAULT_CACHE_DIR;
use crate::model::Preset;
use crate::task::TaskKind;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "driftlab",
    version,
    about = "Routing-stability simulator for MoE language models under RL post-training"
)]
pub struct Cli {
    /// Compute device.
    #[arg(long, global = true, default_value = "flex")]
    pub device: DeviceChoice,
    /// Rayon threads for the flex backend (default: all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Supervised cold start of a preset on a task; prints the eval accuracy.
    Coldstart(ColdstartArgs),
    /// Benchmarks: medians of train and generation throughput, and one MoE layer.
    Bench {
        /// Timed repetitions per measurement.
        #[arg(long, default_value_t = 15)]
        reps: usize,
        /// Only the MoE layer benchmark.
        #[arg(long)]
        layer_only: bool,
        /// Also time RL steps (toy, sort 4-16, B 16, G 8, N 4) from the cached cold start.
        #[arg(long)]
        rl: bool,
        /// With --rl: time RL steps of this preset instead (its cached cold start, else a
        /// random init), split into rollout, pi_old, train fwd+bwd, optimizer and probe, with
        /// tokens/s, achieved GFLOP/s and peak RSS.
        #[arg(long)]
        preset: Option<Preset>,
    },
    /// Learning check: RL from the cached cold start, printing reward early vs late per seed.
    Learn(crate::learn::LearnArgs),
    /// Run a named experiment (experiments/<name>.toml): every cell, then the report.
    Experiment(ExperimentArgs),
    /// List the experiments in experiments/ with their descriptions.
    List {
        #[arg(long, default_value = "experiments")]
        specs: PathBuf,
    },
    /// CI regression: run experiments/check.toml and compare with results/baselines/check.json.
    Check {
        /// Rewrite the baseline from this run (deliberately).
        #[arg(long)]
        update: bool,
        #[arg(long, default_value = "results/baselines/check.json")]
        baseline: PathBuf,
        #[arg(long, default_value = "experiments")]
        specs: PathBuf,
        #[arg(long, default_value = DEFAULT_CACHE_DIR)]
        cache_dir: PathBuf,
        /// Also write a JUnit XML report (one test case per arm and metric) to this file.
        #[arg(long)]
        junit: Option<PathBuf>,
    },
    /// Combine the shard folders of a run (<dir>/shards/*) into <dir>, then report.
    Merge { dir: PathBuf },
    /// Write (and with --submit, submit) a Slurm job array that runs an experiment one shard
    /// per task, and a merge job that depends on it.
    Slurm(crate::slurm::SlurmArgs),
    /// Rebuild summary, plots and report.md of a results folder from its Parquet files.
    Report { dir: PathBuf },
    /// Drop the frame columns the report does not read (the committed form of a results
    /// folder; `report` writes the same files from it), recorded in config.json.
    Slim { dir: PathBuf },
    /// Print the columns and dtypes of every frame (steps, updates, layers, events) as JSON.
    Schema,
}

#[derive(clap::Args, Debug)]
pub struct ColdstartArgs {
    #[arg(long, default_value = "toy")]
    pub preset: Preset,
    #[arg(long, default_value = "sort")]
    pub task: TaskKind,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Shortest list / addend, in digits.
    #[arg(long, default_value_t = 4)]
    pub min_len: usize,
    /// Longest list / addend, in digits.
    #[arg(long, default_value_t = 16)]
    pub max_len: usize,
    /// Stop at this sampled eval accuracy.
    #[arg(long)]
    pub target_accuracy: Option<f64>,
    /// Step budget.
    #[arg(long)]
    pub max_steps: Option<usize>,
    /// Problems per step.
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Peak learning rate (after the linear warm-up).
    #[arg(long)]
    pub lr: Option<f64>,
    /// Evaluate (and test the target) every this many steps.
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Dense control FFN instead of MoE.
    #[arg(long)]
    pub dense: bool,
    /// Ignore and overwrite the cache.
    #[arg(long)]
    pub no_cache: bool,
    /// Cache directory.
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
}

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
    pub shard: Option<crate::experiment::Shard>,
    /// Keep the cells the output folder already finished; run only the others.
    #[arg(long)]
    pub resume: bool,
}
