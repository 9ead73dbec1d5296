//! `driftlab coldstart`: train (or load from the cache) one supervised cold start and print its
//! eval accuracy.

use crate::coldstart::{ColdStartConfig, load_or_train, train};
use crate::model::{FfnKind, ModelConfig, Preset};
use crate::task::{Task, TaskConfig, TaskKind, Tokenizer};
use crate::util::io::DEFAULT_CACHE_DIR;
use anyhow::Result;
use burn::tensor::Device;
use std::path::PathBuf;

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

/// `driftlab coldstart`: train (or load) one cold start and print its accuracy.
pub fn run(device: &Device, a: &ColdstartArgs) -> Result<()> {
    let mut model_cfg = ModelConfig::preset(a.preset, Tokenizer.vocab_size())?;
    if a.dense {
        model_cfg.ffn = FfnKind::Dense;
    }
    let task_cfg = TaskConfig {
        kind: a.task,
        min_len: a.min_len,
        max_len: a.max_len,
        ..TaskConfig::default()
    };
    let t = Task::new(task_cfg, a.seed)?;
    let mut cs = ColdStartConfig::for_preset(a.preset);
    if let Some(x) = a.target_accuracy {
        cs.target_accuracy = x;
    }
    if let Some(s) = a.max_steps {
        cs.max_steps = s;
    }
    if let Some(b) = a.batch_size {
        cs.batch_size = b;
    }
    if let Some(lr) = a.lr {
        cs.lr = lr;
    }
    if let Some(e) = a.eval_every {
        cs.eval_every = e;
    }
    let started = std::time::Instant::now();
    let mp = crate::util::progress::Progress::auto();
    let out = if a.no_cache {
        train(&model_cfg, &t, &cs, a.seed, device, &mp)?
    } else {
        load_or_train(&model_cfg, &t, &cs, a.seed, device, &a.cache_dir, &mp)?
    };
    println!(
        "cold start {}/{} seed {}: {} steps, eval accuracy sampled {:.3}, greedy {:.3}, {:.1}s{}",
        a.preset,
        a.task,
        a.seed,
        out.steps,
        out.accuracy.sampled,
        out.accuracy.greedy,
        started.elapsed().as_secs_f64(),
        if out.from_cache { " (from cache)" } else { "" }
    );
    Ok(())
}
