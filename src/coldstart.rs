//! Supervised cold start: next-token training on correct answers until a sampled eval accuracy
//! or a step budget is reached; the checkpoint is cached by a hash of everything that makes it.

use crate::generate::{Sampling, generate, layout};
use crate::model::{ForwardOptions, Model, ModelConfig, Preset, Weights, token_logp};
use crate::optim::{AdamW, AdamWConfig};
use crate::task::{EOS, Problem, Task, TaskConfig};
use crate::util::hash::{derive_seed, fnv1a64};
use crate::util::io::{write_atomic, write_json};
use crate::util::progress::Progress;
use anyhow::{Context, Result};
use burn::tensor::Device;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bump when the training procedure or its numerics change, so stale caches are not reused.
/// 2: the CPU backend's SwiGLU sigmoid and attention exp are computed on the host.
/// 3: RoPE is applied from the QKV projection (`Rope::extend_qkv`).
const COLDSTART_VERSION: u32 = 3;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColdStartConfig {
    /// Step budget.
    pub max_steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// Stop once the sampled (temperature 1) eval accuracy reaches this; > 1 disables.
    pub target_accuracy: f64,
    /// Evaluate every this many steps.
    pub eval_every: usize,
    /// Load-balancing loss coefficient during the cold start.
    pub aux_coef: f64,
    /// A last-bit draw: before training, every initial weight moves by one ulp up or down
    /// (a seeded pattern per draw). Rounding-level changes of the numerics (a new kernel, a
    /// new CPU) act like this; rerunning an experiment with a draw shows which verdicts
    /// survive them. Off (absent from the cache key) by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ulp_jitter: Option<u64>,
}

impl Default for ColdStartConfig {
    fn default() -> Self {
        ColdStartConfig {
            max_steps: 2000,
            batch_size: 64,
            lr: 3e-3,
            warmup: 50,
            target_accuracy: 0.3,
            eval_every: 50,
            aux_coef: 1e-2,
            ulp_jitter: None,
        }
    }
}

impl ColdStartConfig {
    /// The cold-start settings of a preset: the defaults above, except where a preset
    /// reaches the target in fewer steps with others. The 12-layer presets take lr 1e-3
    /// (`driftlab coldstart --preset P --lr X`, sort 4–16): `medium` seed 0 reached a sampled
    /// accuracy of 0.43 after 150 steps at 1e-3, where 3e-3 needed 350 (0.36) and 6e-3 stayed
    /// below 0.05 for 200 steps (batch 32 at 3e-3: 0.07 after 300); seed 1 at 1e-3 0.43
    /// after 150. `deep` reached the target after 150 steps at 1e-3 and 200 at 3e-3 (seed 0),
    /// 150 at both (seed 1).
    pub fn for_preset(preset: Preset) -> Self {
        match preset {
            Preset::Deep | Preset::Medium => ColdStartConfig {
                lr: 1e-3,
                ..ColdStartConfig::default()
            },
            Preset::Tiny | Preset::Toy | Preset::Small => ColdStartConfig::default(),
        }
    }

    pub fn validate(&self) -> Result<()> {
        anyhow::ensure!(
            self.batch_size >= 1,
            "coldstart.batch_size must be at least 1"
        );
        anyhow::ensure!(
            self.eval_every >= 1,
            "coldstart.eval_every must be at least 1"
        );
        anyhow::ensure!(
            self.lr.is_finite() && self.lr > 0.0,
            "coldstart.lr must be a positive number"
        );
        Ok(())
    }
}

/// Eval accuracy of a model on a task's held-out set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalAccuracy {
    /// Exact-match rate with sampling at temperature 1 (what RL starts from).
    pub sampled: f64,
    /// Exact-match rate with greedy decoding.
    pub greedy: f64,
}

#[derive(Clone, Debug)]
pub struct ColdStart {
    pub model: Model,
    pub steps: usize,
    pub accuracy: EvalAccuracy,
    /// Training loss per step (empty when loaded from the cache).
    pub losses: Vec<f32>,
    pub from_cache: bool,
    pub seconds: f64,
    /// The build (commit) that trained it: this binary's for a fresh one, the one its cache
    /// entry records for a cached one (`None` for entries written before builds were recorded).
    /// The cache key does not hold it: a cached cold start from another build is reused, and
    /// the load message says which build trained it.
    pub build: Option<String>,
}

/// The commit this binary was built from (see `build.rs`), if known.
fn this_build() -> Option<String> {
    let c = env!("DRIFTLAB_BUILD_COMMIT");
    (!c.is_empty()).then(|| c.to_string())
}

/// Cache key: a stable hash of everything that determines the checkpoint.
pub fn cache_key(
    model: &ModelConfig,
    task: &TaskConfig,
    cs: &ColdStartConfig,
    seed: u64,
) -> String {
    let json = serde_json::json!({ "v": COLDSTART_VERSION, "model": model, "task": task, "coldstart": cs, "seed": seed });
    format!("{:016x}", fnv1a64(json.to_string().as_bytes()))
}

/// Fraction of exactly correct responses on `problems`, in batches.
pub fn accuracy(
    model: &Model,
    task: &Task,
    problems: &[Problem],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
) -> f64 {
    let mut right = 0usize;
    for chunk in problems.chunks(128) {
        let prompts: Vec<Vec<u32>> = chunk.iter().map(|p| p.prompt.clone()).collect();
        let g = generate(model, &prompts, s, rng, &mut |_| ForwardOptions::default());
        right += chunk
            .iter()
            .zip(&g.responses)
            .filter(|(p, r)| task.is_correct(p, r))
            .count();
    }
    right as f64 / problems.len().max(1) as f64
}

pub fn evaluate(model: &Model, task: &Task, seed: u64) -> EvalAccuracy {
    let inner = model.inner();
    let max_new = task.cfg.max_answer_tokens();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "eval-sampling"));
    let sampled = accuracy(
        &inner,
        task,
        &task.eval,
        &Sampling {
            temperature: 1.0,
            greedy: false,
            max_new,
            logit_noise: 0.0,
        },
        &mut rng,
    );
    let greedy = accuracy(
        &inner,
        task,
        &task.eval,
        &Sampling {
            temperature: 1.0,
            greedy: true,
            max_new,
            logit_noise: 0.0,
        },
        &mut rng,
    );
    EvalAccuracy { sampled, greedy }
}

/// Supervised loss on a batch of problems: mean negative log-likelihood of the answer tokens
/// (`<eos>` included), plus `aux_coef` times the load-balancing loss.
/// Also returns each MoE layer's routed slots per expert (the load a `sigmoid_bias` router's
/// bias update balances).
pub fn sft_loss(
    model: &Model,
    problems: &[Problem],
    aux_coef: f64,
) -> (burn::tensor::Tensor<1>, Vec<Vec<f32>>) {
    let prompts: Vec<Vec<u32>> = problems.iter().map(|p| p.prompt.clone()).collect();
    let answers: Vec<Vec<u32>> = problems
        .iter()
        .map(|p| p.answer.iter().copied().chain([EOS]).collect())
        .collect();
    let (batch, pw) = layout(&prompts, &answers);
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    for (b, a) in answers.iter().enumerate() {
        for (j, &tok) in a.iter().enumerate() {
            rows.push(b * batch.seq + pw + j - 1); // logits at the previous position predict it
            targets.push(tok as usize);
        }
    }
    let out = model.forward(&batch, &ForwardOptions::default());
    let device = out.logits.device();
    let picked = out
        .logits
        .select(0, crate::util::tensors::ints(&rows, [rows.len()], &device));
    let nll = -token_logp(picked, &targets, 1.0).mean();
    let counts = out.load.iter().map(|l| l.counts.clone()).collect();
    (nll + out.aux_loss * aux_coef as f32, counts)
}

/// `x` moved by one unit in the last place, away from zero when `up` (zeros and non-finite
/// values stay).
pub fn ulp_step(x: f32, up: bool) -> f32 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let b = x.to_bits();
    f32::from_bits(if up { b + 1 } else { b - 1 })
}

/// Train from scratch (no cache).
pub fn train(
    model_cfg: &ModelConfig,
    task: &Task,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    progress: &Progress,
) -> Result<ColdStart> {
    cs.validate()?;
    let started = Instant::now();
    let mut model = Model::init(model_cfg.clone(), derive_seed(seed, "init"), device);
    if let Some(draw) = cs.ulp_jitter {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, &format!("ulp/{draw}")));
        model.weights = model.weights.map(|t| {
            let shape = t.shape().dims::<2>();
            let dev = t.device();
            let v = crate::util::tensors::to_vec(t.inner())
                .into_iter()
                .map(|x| ulp_step(x, rng.random()))
                .collect();
            crate::util::tensors::floats(v, shape, &dev)
        });
    }
    let opt_cfg = AdamWConfig {
        lr: cs.lr,
        weight_decay: 0.0,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(opt_cfg, &model.weights);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "coldstart-data"));
    let bar = progress.stage(
        label(model_cfg, seed),
        cs.max_steps as u64,
        "steps",
        "cold start {prefix} {bar:30} {pos}/{len} {msg} [{elapsed}<{eta}]",
    );
    bar.set_prefix(format!("{:?} seed {seed}", model_cfg.ffn).to_lowercase());
    let mut losses = Vec::new();
    let mut accuracy = evaluate(&model, task, seed);
    let mut steps = 0;
    while steps < cs.max_steps && accuracy.sampled < cs.target_accuracy {
        let problems: Vec<Problem> = (0..cs.batch_size).map(|_| task.sample(&mut rng)).collect();
        let train_model = model.require_grad();
        let (loss, counts) = sft_loss(&train_model, &problems, cs.aux_coef);
        let grads = loss.backward();
        let loss_v = crate::util::tensors::scalar(loss.inner());
        let g = AdamW::collect_grads(&train_model.weights, &grads);
        // The graph and the trained leaves share the weights' buffers: dropped here, the
        // optimizer updates them without a copy.
        drop((grads, train_model));
        let lr = cs.lr * ((steps + 1) as f64 / cs.warmup.max(1) as f64).min(1.0);
        let (w, report) = opt.step(model.weights.take(), g, lr);
        model.weights = w;
        if report.applied {
            model
                .weights
                .nudge_router_bias(&counts, model_cfg.bias_update_speed);
        }
        losses.push(loss_v);
        steps += 1;
        let mut msg = None;
        if steps % cs.eval_every == 0 || steps == cs.max_steps {
            accuracy = evaluate(&model, task, seed);
            msg = Some(format!(
                "loss {loss_v:.3} acc {:.2} (greedy {:.2})",
                accuracy.sampled, accuracy.greedy
            ));
        }
        bar.inc(1, msg);
    }
    bar.finish(&format!(
        "sampled accuracy {:.3} (greedy {:.3})",
        accuracy.sampled, accuracy.greedy
    ));
    Ok(ColdStart {
        model,
        steps,
        accuracy,
        losses,
        from_cache: false,
        build: this_build(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// `cold start moe 2L seed 0`: how progress lines name a cold start.
fn label(model_cfg: &ModelConfig, seed: u64) -> String {
    format!(
        "cold start {} {}L seed {seed}",
        format!("{:?}", model_cfg.ffn).to_lowercase(),
        model_cfg.n_layers
    )
}

/// Where the cached checkpoint for this key lives.
pub fn cache_path(cache_dir: &Path, key: &str) -> PathBuf {
    cache_dir.join(format!("coldstart-{key}.bin"))
}

#[derive(Serialize, Deserialize)]
struct CacheMeta {
    steps: usize,
    accuracy: EvalAccuracy,
    seconds: f64,
    /// The build that trained it (absent in entries written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    build: Option<String>,
}

/// The cached cold start for these settings, if one is cached; never trains (a benchmark of a
/// large preset uses it where it exists and a random init where not).
pub fn cached(
    model_cfg: &ModelConfig,
    task: &TaskConfig,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    cache_dir: &Path,
) -> Option<ColdStart> {
    let path = cache_path(cache_dir, &cache_key(model_cfg, task, cs, seed));
    load_cached(&path, model_cfg, device)
}

/// The cached cold start at `path`, if there is a usable one.
fn load_cached(path: &Path, model_cfg: &ModelConfig, device: &Device) -> Option<ColdStart> {
    if !path.exists() {
        return None;
    }
    let loaded = std::fs::read(path)
        .map_err(anyhow::Error::from)
        .and_then(|b| Weights::from_bytes(model_cfg, &b, device))
        .and_then(|w| {
            let meta: CacheMeta =
                serde_json::from_slice(&std::fs::read(path.with_extension("json"))?)?;
            Ok((w, meta))
        });
    match loaded {
        Ok((w, meta)) => Some(ColdStart {
            model: Model::new(model_cfg.clone(), w, device),
            steps: meta.steps,
            accuracy: meta.accuracy,
            losses: Vec::new(),
            from_cache: true,
            seconds: meta.seconds,
            build: meta.build,
        }),
        Err(e) => {
            eprintln!(
                "warning: cached cold start {} is unusable ({e:#}); rebuilding it",
                path.display()
            );
            None
        }
    }
}

/// Load the cached cold start for these settings, or train and cache it. A corrupt or partial
/// cache file is rebuilt. Processes that need the same cold start at once (shards of a sweep)
/// train it once: the first takes `<cache file>.lock`, the others wait for the cache file and
/// load it.
pub fn load_or_train(
    model_cfg: &ModelConfig,
    task: &Task,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    cache_dir: &Path,
    progress: &Progress,
) -> Result<ColdStart> {
    use crate::util::lock::{Attempt, Lock};
    let key = cache_key(model_cfg, &task.cfg, cs, seed);
    let path = cache_path(cache_dir, &key);
    if let Some(c) = load_cached(&path, model_cfg, device) {
        let by = match (&c.build, this_build()) {
            (Some(b), Some(t)) if *b == t => String::new(),
            (Some(b), _) => format!(", trained by build {b}"),
            (None, _) => ", trained by an unrecorded build".into(),
        };
        progress.note(&format!(
            "{}: loaded from {} (sampled accuracy {:.3}{by})",
            label(model_cfg, seed),
            path.display(),
            c.accuracy.sampled
        ));
        return Ok(c);
    }
    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating cache dir {}", cache_dir.display()))?;
    let lock_path = path.with_extension("lock");
    let mut told = false;
    let _lock = loop {
        match Lock::try_acquire(&lock_path)? {
            Attempt::Acquired(l) => break l,
            Attempt::Held(holder) => {
                if !told {
                    eprintln!(
                        "cold start {key} is being trained by '{holder}'; waiting for {}",
                        path.display()
                    );
                    told = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    };
    // The holder before us may have finished it.
    if let Some(c) = load_cached(&path, model_cfg, device) {
        return Ok(c);
    }
    let cs_out = train(model_cfg, task, cs, seed, device, progress)?;
    let meta = CacheMeta {
        steps: cs_out.steps,
        accuracy: cs_out.accuracy,
        seconds: cs_out.seconds,
        build: cs_out.build.clone(),
    };
    // The weights last: a reader that sees them sees their metadata.
    write_json(&path.with_extension("json"), &meta)?;
    write_atomic(&path, &cs_out.model.weights.to_bytes())?;
    Ok(cs_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ulp_moves_to_the_neighbouring_float() {
        assert_eq!(ulp_step(1.0, true), 1.0 + f32::EPSILON);
        assert_eq!(ulp_step(1.0, false), 1.0 - f32::EPSILON / 2.0);
        assert_eq!(ulp_step(-2.0, true), -2.0 - 2.0 * f32::EPSILON);
        assert_eq!(ulp_step(0.0, true), 0.0);
        assert!(ulp_step(f32::NAN, true).is_nan());
    }

    /// A draw is part of the cache key; without one the key is what it was before draws
    /// existed (the field is not serialised), so existing caches stay valid.
    #[test]
    fn a_last_bit_draw_has_its_own_cache_key() {
        let model = ModelConfig::preset(crate::model::Preset::Tiny, 16).unwrap();
        let task = TaskConfig::default();
        let cs = ColdStartConfig::default();
        let json = serde_json::to_string(&cs).unwrap();
        assert!(!json.contains("ulp_jitter"), "{json}");
        let drawn = ColdStartConfig {
            ulp_jitter: Some(1),
            ..cs.clone()
        };
        assert_ne!(
            cache_key(&model, &task, &cs, 0),
            cache_key(&model, &task, &drawn, 0)
        );
    }
}

#[cfg(test)]
mod cache_meta_tests {
    use super::CacheMeta;

    /// A cache entry written before builds were recorded still reads (its build unknown); a new
    /// one records the build.
    #[test]
    fn old_cache_entries_read_with_an_unknown_build() {
        let old = r#"{"steps": 300, "accuracy": {"sampled": 0.4, "greedy": 0.5}, "seconds": 1.0}"#;
        let m: CacheMeta = serde_json::from_str(old).unwrap();
        assert_eq!((m.steps, m.build), (300, None));
        let new = r#"{"steps": 1, "accuracy": {"sampled": 0.4, "greedy": 0.5}, "seconds": 1.0, "build": "abc"}"#;
        let m: CacheMeta = serde_json::from_str(new).unwrap();
        assert_eq!(m.build.as_deref(), Some("abc"));
    }
}
