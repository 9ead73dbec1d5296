//! The top-level parser of the command line: the global options and the subcommands. Each
//! subcommand's arguments and what it does are its file in [`crate::commands`].

use crate::commands::{
    bench, check, coldstart, experiment, learn, list, merge, report, slim, slurm,
};
use crate::device::DeviceArgs;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "driftlab",
    version,
    about = "Routing-stability simulator for MoE language models under RL post-training"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: DeviceArgs,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Supervised cold start of a preset on a task; prints the eval accuracy.
    Coldstart(coldstart::ColdstartArgs),
    /// Benchmarks: medians of train and generation throughput, and one MoE layer.
    Bench(bench::BenchArgs),
    /// Learning check: RL from the cached cold start, printing reward early vs late per seed.
    Learn(learn::LearnArgs),
    /// Run a named experiment (experiments/<name>.toml): every cell, then the report.
    Experiment(experiment::ExperimentArgs),
    /// List the experiments in experiments/ with their descriptions.
    List(list::ListArgs),
    /// CI regression: run experiments/check.toml and compare with results/baselines/check.json.
    Check(check::CheckArgs),
    /// Combine the shard folders of a run (<dir>/shards/*) into <dir>, then report.
    Merge(merge::MergeArgs),
    /// Write (and with --submit, submit) a Slurm job array that runs an experiment one shard
    /// per task, and a merge job that depends on it.
    Slurm(slurm::SlurmArgs),
    /// Rebuild summary, plots and report.md of a results folder from its Parquet files.
    Report(report::ReportArgs),
    /// Drop the frame columns the report does not read (the committed form of a results
    /// folder; `report` writes the same files from it), recorded in config.json.
    Slim(slim::SlimArgs),
    /// Print the columns and dtypes of every frame (steps, updates, layers, events) as JSON.
    Schema,
}
