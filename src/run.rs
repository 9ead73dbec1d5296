//! Carries out a parsed command.

use crate::cli::{Cli, Command};
use crate::coldstart::{ColdStartConfig, load_or_train, train};
use crate::model::{FfnKind, ModelConfig};
use crate::task::{Task, TaskConfig, TaskKind, Tokenizer};
use anyhow::{Result, bail};

pub fn run(cli: Cli) -> Result<()> {
    if let Some(n) = cli.threads {
        anyhow::ensure!(n >= 1, "--threads must be at least 1");
        rayon_threads(n)?;
    }
    let device = cli.device.device()?;
    match cli.command {
        Command::Coldstart {
            preset,
            task,
            seed,
            min_len,
            max_len,
            target_accuracy,
            max_steps,
            dense,
            no_cache,
            cache_dir,
        } => {
            let mut model_cfg = ModelConfig::preset(&preset, Tokenizer.vocab_size())?;
            if dense {
                model_cfg.ffn = FfnKind::Dense;
            }
            let task_cfg = TaskConfig {
                kind: TaskKind::parse(&task)?,
                min_len,
                max_len,
                ..TaskConfig::default()
            };
            let t = Task::new(task_cfg, seed)?;
            let mut cs = ColdStartConfig::default();
            if let Some(a) = target_accuracy {
                cs.target_accuracy = a;
            }
            if let Some(s) = max_steps {
                cs.max_steps = s;
            }
            let started = std::time::Instant::now();
            let out = if no_cache {
                train(&model_cfg, &t, &cs, seed, &device, true)?
            } else {
                load_or_train(&model_cfg, &t, &cs, seed, &device, &cache_dir, true)?
            };
            println!(
                "cold start {preset}/{task} seed {seed}: {} steps, eval accuracy sampled {:.3}, greedy {:.3}, {:.1}s{}",
                out.steps,
                out.accuracy.sampled,
                out.accuracy.greedy,
                started.elapsed().as_secs_f64(),
                if out.from_cache { " (from cache)" } else { "" }
            );
            Ok(())
        }
        Command::Bench { reps, layer_only, rl } => crate::bench::run(&device, reps, layer_only, rl),
        Command::Learn { algorithm, routing, preset, steps, seeds, lr, minibatches, cache_dir } => {
            crate::learn::run(&device, &crate::learn::LearnArgs { algorithm, routing, preset, steps, seeds, lr, minibatches, cache_dir })
        }
        Command::Experiment { name } => {
            bail!(
                "experiment '{name}': the experiment runner is not built yet (see issue 5); `driftlab coldstart` and `driftlab bench` run today"
            )
        }
    }
}

fn rayon_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| anyhow::anyhow!("could not size the thread pool: {e}"))
}
