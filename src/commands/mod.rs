//! The commands of the command line, one file each: its arguments (a clap `Args` struct) and
//! its `run`. [`crate::cli`] parses the command line; [`run`] hands it to its command. This is
//! the top layer: a command reads any layer below, and nothing below reads a command.

pub mod bench;
pub mod check;
pub mod coldstart;
pub mod experiment;
pub mod learn;
pub mod list;
pub mod merge;
pub mod report;
pub mod schema;
pub mod slim;
pub mod slurm;

use crate::cli::{Cli, Command};
use anyhow::Result;

/// Carry out a parsed command line: size the thread pool, start the device, run the command.
pub fn run(cli: Cli) -> Result<()> {
    let jobs = match &cli.command {
        Command::Experiment(a) => a.jobs(),
        _ => 1,
    };
    // Cells in parallel use one thread each: small models use two cores better that way than by
    // threading inside tiny ops (measured; see README).
    let threads = cli.global.threads.or((jobs > 1).then_some(1));
    if let Some(n) = threads {
        anyhow::ensure!(n >= 1, "--threads must be at least 1");
        rayon_threads(n)?;
    }
    let device = cli.global.start()?;
    let device_name = cli.global.device.to_string();
    match cli.command {
        Command::Coldstart(a) => coldstart::run(&device, &a),
        Command::Bench(a) => bench::run(&device, &device_name, &a),
        Command::Learn(a) => learn::run(&device, &a),
        Command::Experiment(a) => experiment::run(device, device_name, jobs, &a),
        Command::Check(a) => check::run(device, device_name, &a),
        Command::List(a) => list::run(&a),
        Command::Schema => schema::run(),
        Command::Merge(a) => merge::run(&a),
        Command::Slurm(a) => slurm::run(&a),
        Command::Slim(a) => slim::run(&a),
        Command::Report(a) => report::run(&a),
    }
}

fn rayon_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| anyhow::anyhow!("could not size the thread pool: {e}"))
}
