//! `driftlab learn`: a learning check of one objective × routing mode from the cached cold
//! start (toy + sort 4–16 by default), reporting early vs late mean reward per seed.

use crate::coldstart::{ColdStartConfig, load_or_train};
use crate::model::{ModelConfig, Preset, RouterKind};
use crate::rl::{
    Algorithm, AlgorithmKind, OldLogp, RlConfig, RouterShiftConfig, RoutingMode, Trainer,
};
use crate::task::{Task, TaskConfig, Tokenizer};
use anyhow::Result;
use burn::tensor::Device;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct LearnArgs {
    #[arg(long, default_value = "grpo")]
    pub algorithm: AlgorithmKind,
    #[arg(long, default_value = "native")]
    pub routing: RoutingMode,
    #[arg(long, default_value = "toy")]
    pub preset: Preset,
    #[arg(long, default_value_t = 100)]
    pub steps: usize,
    #[arg(long, value_delimiter = ',', default_value = "0,1,2")]
    pub seeds: Vec<u64>,
    #[arg(long, default_value_t = 1e-4)]
    pub lr: f64,
    #[arg(long, default_value_t = 4)]
    pub minibatches: usize,
    /// MoE router scheme (a `sigmoid_bias` model has its own cold start).
    #[arg(long, default_value = "softmax")]
    pub router: RouterKind,
    /// RSPO's router-shift weighting of the ratios (default floor).
    #[arg(long)]
    pub router_shift: bool,
    /// Where π_old comes from.
    #[arg(long, default_value = "recompute")]
    pub old_logp: OldLogp,
    /// Rollouts sampled by the policy of this many steps before.
    #[arg(long, default_value_t = 0)]
    pub rollout_staleness: usize,
    /// Cache directory of cold starts.
    #[arg(long, default_value = crate::util::io::DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
}

/// How a learn line names what ran: objective, routing mode and the settings that differ from
/// the defaults.
fn label(a: &LearnArgs) -> String {
    let mut s = format!("{} {}", a.algorithm, a.routing);
    if a.router != RouterKind::Softmax {
        s += &format!(" router={}", a.router);
    }
    if a.router_shift {
        s += " +router_shift";
    }
    if a.old_logp != OldLogp::Recompute {
        s += &format!(" old_logp={}", a.old_logp);
    }
    if a.rollout_staleness > 0 {
        s += &format!(" staleness={}", a.rollout_staleness);
    }
    s
}

pub fn run(device: &Device, a: &LearnArgs) -> Result<()> {
    let algorithm = Algorithm::default_of(a.algorithm);
    let what = label(a);
    let routing = a.routing;
    let model_cfg = ModelConfig {
        router: a.router,
        ..ModelConfig::preset(a.preset, Tokenizer.vocab_size())?
    };
    anyhow::ensure!(
        a.steps >= 35,
        "--steps must be at least 35 (first 10 vs last 25)"
    );
    let mut early_all = Vec::new();
    let mut late_all = Vec::new();
    for &seed in &a.seeds {
        let task = Task::new(TaskConfig::default(), seed)?;
        let cs = load_or_train(
            &model_cfg,
            &task,
            &ColdStartConfig::for_preset(a.preset),
            seed,
            device,
            &a.cache_dir,
            &crate::util::progress::Progress::auto(),
        )?;
        let mut cfg = RlConfig {
            algorithm: algorithm.clone(),
            routing,
            minibatches: a.minibatches,
            router_shift: a.router_shift.then(RouterShiftConfig::default),
            old_logp: a.old_logp,
            rollout_staleness: a.rollout_staleness,
            total_steps: a.steps,
            measure_kl_ref: false,
            ..RlConfig::default()
        };
        cfg.optimizer.lr = a.lr;
        let mut t = Trainer::new(cfg, cs.model, task, seed)?;
        t.probe = false;
        let bar = ProgressBar::new(a.steps as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "seed {prefix} {bar:30} {pos}/{len} {msg} [{elapsed}<{eta}]",
            )
            .expect("template"),
        );
        bar.set_prefix(seed.to_string());
        let mut rewards = Vec::new();
        let mut secs = Vec::new();
        for _ in 0..a.steps {
            let o = t.step();
            let r = o.rewards.iter().sum::<f32>() / o.rewards.len() as f32;
            rewards.push(f64::from(r));
            secs.push(o.t_rollout + o.t_update + o.t_probe);
            bar.set_message(format!("reward {r:.3}"));
            bar.inc(1);
        }
        bar.finish_and_clear();
        let early = rewards[..10].iter().sum::<f64>() / 10.0;
        let late = rewards[rewards.len() - 25..].iter().sum::<f64>() / 25.0;
        secs.sort_by(f64::total_cmp);
        println!(
            "{what} seed {seed}: cold start {:.3} sampled; reward first 10 steps {early:.3}, last 25 steps {late:.3} ({}); median step {:.3}s",
            cs.accuracy.sampled,
            if late > early {
                "improved"
            } else {
                "did not improve"
            },
            secs[secs.len() / 2]
        );
        early_all.push(early);
        late_all.push(late);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    println!(
        "{what}: mean over {} seeds: first 10 {:.3}, last 25 {:.3}",
        a.seeds.len(),
        mean(&early_all),
        mean(&late_all)
    );
    Ok(())
}
