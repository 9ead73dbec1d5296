//! `driftlab learn`: a learning check of one objective × routing mode from the cached cold
//! start (toy + sort 4–16 by default), reporting early vs late mean reward per seed.

use crate::coldstart::{ColdStart, ColdStartConfig, EvalAccuracy, load_or_train};
use crate::model::{ModelConfig, Preset, RouterKind};
use crate::rl::{
    Algorithm, AlgorithmKind, Mismatch, OldLogp, Pr2Config, ReplayThresholdConfig, RlConfig,
    RouterShiftConfig, RoutingMode, TeacherConfig, Trainer,
};
use crate::task::{Task, TaskConfig, Tokenizer};
use crate::util::moments::mean;
use crate::util::progress::Progress;
use anyhow::{Context, Result};
use burn::tensor::Device;
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
    /// A rollout engine whose router logits carry Gaussian noise of this σ (a mismatch for
    /// the stability fixes to act on); none by default.
    #[arg(long)]
    pub router_noise: Option<f64>,
    /// A stability fix, as its `[rl]` key (`--fix icepop`: its default settings) or its `[rl]`
    /// entry in TOML (`--fix 'mis.level = "token"'`); repeatable. The keys are those of
    /// `src/rl/fixes/` (tis, icepop, mis, opsm, …); an unknown one's error lists them.
    #[arg(long = "fix", value_name = "FIX")]
    pub fixes: Vec<String>,
    /// Declare that the fixes given may stack their engine-ratio weights (two of tis, icepop,
    /// mis; refused without it: `[rl] allow_stacked_engine_ratio`).
    #[arg(long)]
    pub allow_stacked_engine_ratio: bool,
    /// Threshold-filtered replay (with `--routing r2` or `r3`): a replayed expert scoring
    /// below this × the weakest live top-k score is replaced by a live choice.
    #[arg(long)]
    pub replay_threshold: Option<f64>,
    /// Predictive Routing Replay (with `--routing r2`), predictor lr = lr × 1e3.
    #[arg(long)]
    pub pr2: bool,
    /// A teacher for on-policy distillation (`gvpd`, `opd_pg`, `opd_kl`, which take the toy
    /// preset by default): its preset, trained by the teacher's recipe (`rl.teacher`,
    /// docs/spec.md) and cached like a cold start. With another objective the teacher is only
    /// scored (teacher KL).
    #[arg(long)]
    pub teacher: Option<Preset>,
    /// The teacher's cold-start steps (it never stops early).
    #[arg(long, default_value_t = 2000)]
    pub teacher_steps: usize,
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
    if let Some(x) = a.router_noise {
        s += &format!(" router_noise={x}");
    }
    for f in &a.fixes {
        s += &format!(" +{}", f.replace(' ', ""));
    }
    if a.allow_stacked_engine_ratio {
        s += " +allow_stacked_engine_ratio";
    }
    if let Some(r) = a.replay_threshold {
        s += &format!(" +replay_threshold={r}");
    }
    if a.pr2 {
        s += " +pr2";
    }
    if let Some(t) = a.teacher {
        s += &format!(" teacher={t}");
    }
    s
}

/// The teacher of a learn run: `--teacher`, or the default teacher when the objective
/// distils one.
fn teacher_config(a: &LearnArgs) -> Option<TeacherConfig> {
    let needs = Algorithm::default_of(a.algorithm).needs_teacher();
    (a.teacher.is_some() || needs).then(|| {
        let mut t = TeacherConfig::default();
        t.preset = a.teacher.unwrap_or(t.preset);
        t.coldstart.max_steps = a.teacher_steps;
        t
    })
}

/// The RL settings of a learn run.
fn rl_config(a: &LearnArgs) -> Result<RlConfig> {
    let mut cfg = RlConfig {
        algorithm: Algorithm::default_of(a.algorithm),
        routing: a.routing,
        minibatches: a.minibatches,
        router_shift: a.router_shift.then(RouterShiftConfig::default),
        old_logp: a.old_logp,
        rollout_staleness: a.rollout_staleness,
        total_steps: a.steps,
        measure_kl_ref: false,
        mismatch: a
            .router_noise
            .map_or(Mismatch::None, |sigma| Mismatch::RouterNoise { sigma }),
        replay_threshold: a
            .replay_threshold
            .map(|ratio| ReplayThresholdConfig { ratio }),
        pr2: a.pr2.then(Pr2Config::default),
        teacher: teacher_config(a),
        allow_stacked_engine_ratio: a.allow_stacked_engine_ratio,
        ..RlConfig::default()
    };
    cfg.optimizer.lr = a.lr;
    for f in &a.fixes {
        // A bare key turns the fix on at its defaults; anything else is its `[rl]` entry.
        let text = if f.contains('=') {
            f.clone()
        } else {
            format!("{f} = {{}}")
        };
        let entry: toml::Table = toml::from_str(&text)
            .with_context(|| format!("--fix {f}: neither a fix's key nor its [rl] entry"))?;
        for (key, settings) in entry {
            cfg.set_fix(&key, serde_json::to_value(settings)?)
                .with_context(|| format!("--fix {f}"))?;
        }
    }
    Ok(cfg)
}

/// What the stability fixes masked over a run: (masked, total) tokens or responses of each,
/// and the updates skipped with every token masked.
#[derive(Default)]
struct Masked {
    counts: std::collections::BTreeMap<&'static str, (usize, usize)>,
    skipped: usize,
    /// (replaced, replayed) slots of a threshold-filtered replay.
    replay: (usize, usize),
}

impl Masked {
    fn add(&mut self, o: &crate::rl::StepOutput) {
        for u in &o.updates {
            let st = &u.stats;
            if let Some((n, r)) = st.replay_filter {
                self.replay.0 += r;
                self.replay.1 += n;
            }
            for (key, masked, total) in st.masked.counts() {
                let m = self.counts.entry(key).or_default();
                (m.0, m.1) = (m.0 + masked, m.1 + total);
            }
            self.skipped += usize::from(st.all_masked);
        }
    }

    /// "; icepop masked 0.12%, …" (empty with every fix off).
    fn text(&self) -> String {
        // In registry order.
        let parts: Vec<String> = (crate::rl::fixes::KEYS.iter())
            .filter_map(|k| self.counts.get(k).map(|&c| (k, c)))
            .filter(|(_, (_, n))| *n > 0)
            .map(|(name, (m, n))| format!("{name} masked {:.3}%", 100.0 * m as f64 / n as f64))
            .chain((self.skipped > 0).then(|| format!("{} updates all masked", self.skipped)))
            .chain((self.replay.1 > 0).then(|| {
                format!(
                    "replay replaced {:.4}% of replayed slots",
                    100.0 * self.replay.0 as f64 / self.replay.1 as f64
                )
            }))
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("; {}", parts.join(", "))
        }
    }
}

/// The student against its cold start and its teacher (greedy eval accuracy), and the teacher
/// KL per token early and late.
fn teacher_line(t: &Trainer, cold: &EvalAccuracy, teacher: &ColdStart, kl: &[f64]) -> String {
    let student = crate::experiment::runner::greedy_eval(&t.model, &t.task);
    format!(
        "greedy eval accuracy: student {student:.3} (cold start {:.3}), teacher {:.3}; teacher \
         KL per token first 10 steps {:.3}, last 25 steps {:.3}",
        cold.greedy,
        teacher.accuracy.greedy,
        mean(&kl[..kl.len().min(10)]),
        mean(&kl[kl.len().saturating_sub(25)..]),
    )
}

pub fn run(device: &Device, a: &LearnArgs) -> Result<()> {
    let what = label(a);
    let model_cfg = ModelConfig {
        router: a.router,
        ..ModelConfig::preset(a.preset, Tokenizer.vocab_size())?
    };
    anyhow::ensure!(
        a.steps >= 35,
        "--steps must be at least 35 (first 10 vs last 25)"
    );
    let progress = Progress::auto();
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
            &progress,
        )?;
        let cfg = rl_config(a)?;
        let teacher = match &cfg.teacher {
            Some(tc) => {
                let m = tc.model(model_cfg.vocab_size)?;
                let seed = tc.seed_in(seed);
                Some(load_or_train(
                    &m,
                    &task,
                    &tc.coldstart,
                    seed,
                    device,
                    &a.cache_dir,
                    &progress,
                )?)
            }
            None => None,
        };
        let mut t = Trainer::new(cfg, cs.model, task, seed)?;
        if let Some(tc) = &teacher {
            t = t.with_teacher(tc.model.clone())?;
        }
        t.probe = false;
        let bar = progress.stage(
            format!("learn {what} seed {seed}"),
            a.steps as u64,
            "steps",
            "seed {prefix} {bar:30} {pos}/{len} {msg} [{elapsed}<{eta}]",
        );
        bar.set_prefix(seed.to_string());
        let mut rewards = Vec::new();
        let mut secs = Vec::new();
        let mut masked = Masked::default();
        let mut teacher_kl = Vec::new();
        for _ in 0..a.steps {
            let o = t.step();
            masked.add(&o);
            teacher_kl.extend(crate::metrics::rows::teacher_kl(&o));
            let r = o.rewards.iter().sum::<f32>() / o.rewards.len() as f32;
            rewards.push(f64::from(r));
            secs.push(o.t_rollout + o.t_update + o.t_probe);
            bar.inc(1, Some(format!("reward {r:.3}")));
        }
        bar.finish("done");
        let early = mean(&rewards[..10]);
        let late = mean(&rewards[rewards.len() - 25..]);
        secs.sort_by(f64::total_cmp);
        println!(
            "{what} seed {seed}: cold start {:.3} sampled; reward first 10 steps {early:.3}, last 25 steps {late:.3} ({}); median step {:.3}s{}",
            cs.accuracy.sampled,
            if late > early {
                "improved"
            } else {
                "did not improve"
            },
            secs[secs.len() / 2],
            masked.text()
        );
        if let Some(tc) = &teacher {
            println!(
                "{what} seed {seed}: {}",
                teacher_line(&t, &cs.accuracy, tc, &teacher_kl)
            );
        }
        early_all.push(early);
        late_all.push(late);
    }
    println!(
        "{what}: mean over {} seeds: first 10 {:.3}, last 25 {:.3}",
        a.seeds.len(),
        mean(&early_all),
        mean(&late_all)
    );
    Ok(())
}
