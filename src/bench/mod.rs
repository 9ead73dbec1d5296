//! The benchmarks of `driftlab bench` (`commands/bench.rs`): medians of train/generation
//! throughput and of one MoE layer fwd+bwd. Speed is reported, never asserted by tests.

pub mod arms;
pub mod preset;
pub mod timing;

use crate::coldstart::sft_loss;
use crate::generate::{Sampler, Sampling, generate};
use crate::model::moe::{LayerRouting, moe_forward};
use crate::model::weights::{FfnWeights, Weights};
use crate::model::{ExpertPath, ForwardOptions, Model, ModelConfig, Preset};
use crate::task::{Problem, Task, TaskConfig, Tokenizer};
use crate::util::tensors::{floats, to_vec};
use anyhow::Result;
use burn::tensor::Device;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Normal};
use std::time::Instant;
use timing::median_secs;

/// One MoE layer forward+backward at the reference shape (tokens 4096, d 64, 8 experts, top-2,
/// SwiGLU d_ff 128), loss `mean(out²)`, as `scripts/torch_moe_layer.py` does: median
/// ms of the sparse path, and of the fused expert node where the device has one (timed
/// alternately, rep by rep, so that both see the same machine load).
pub fn moe_layer_ms(device: &Device, reps: usize) -> (f64, Option<f64>) {
    let step = moe_layer_step(device, ExpertPath::Sparse);
    #[cfg(feature = "flex")]
    if crate::util::tensors::is_host(device) {
        use timing::{median, secs};
        let fused = moe_layer_step(device, ExpertPath::Fused);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        // Three warm-up rounds, then one timed call of each path per round.
        for r in 0..reps.max(1) + 3 {
            let ta = secs(&step);
            let tb = secs(&fused);
            if r >= 3 {
                a.push(ta);
                b.push(tb);
            }
        }
        return (median(a) * 1e3, Some(median(b) * 1e3));
    }
    (median_secs(reps, &step) * 1e3, None)
}

/// One forward+backward of [`moe_layer_ms`]'s layer.
fn moe_layer_step(device: &Device, expert_path: ExpertPath) -> impl Fn() {
    let cfg = ModelConfig {
        expert_path,
        n_layers: 1,
        d_model: 64,
        n_heads: 1,
        n_experts: 8,
        top_k: 2,
        d_ff: 128,
        ..ModelConfig::preset(Preset::Toy, 17).expect("preset")
    };
    let w = Weights::init(&cfg, 0, device);
    let FfnWeights::Moe(mw) = w.blocks[0].ffn.clone() else {
        unreachable!("moe preset")
    };
    let t = 4096;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
    let n = Normal::new(0.0f32, 1.0).expect("normal");
    let xs: Vec<f32> = (0..t * 64).map(|_| n.sample(&mut rng)).collect();
    let x0 = floats(xs, [t, 64], device);
    let active = vec![true; t];
    move || {
        let x = x0.clone().autodiff().require_grad();
        let mw = crate::model::weights::MoeWeights {
            router: mw.router.clone().autodiff().require_grad(),
            experts: mw
                .experts
                .iter()
                .map(|e| crate::model::weights::SwiGlu {
                    w1: e.w1.clone().autodiff().require_grad(),
                    w3: e.w3.clone().autodiff().require_grad(),
                    w2: e.w2.clone().autodiff().require_grad(),
                })
                .collect(),
            shared: None,
            bias: mw.bias.clone(),
        };
        let o = moe_forward(
            &mw,
            &cfg,
            x.clone(),
            &active,
            LayerRouting::default(),
            false,
        );
        let loss = o.out.powi_scalar(2).mean();
        let grads = loss.backward();
        let g = x.grad(&grads).expect("input gradient");
        let _ = to_vec(g.slice([0..1, 0..1]));
    }
}

fn problems(task: &Task, n: usize) -> Vec<Problem> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
    (0..n).map(|_| task.sample(&mut rng)).collect()
}

/// Train forward+backward tokens/s and generation tokens/s for a preset on `sort` 4–16.
pub fn model_throughput(preset: Preset, device: &Device, reps: usize) -> Result<(f64, f64)> {
    let cfg = ModelConfig::preset(preset, Tokenizer.vocab_size())?;
    let task = Task::new(TaskConfig::default(), 0)?;
    let model = Model::init(cfg, 0, device);
    let probs = problems(&task, 64);
    let tokens: usize = probs
        .iter()
        .map(|p| p.prompt.len() + p.answer.len() + 1)
        .sum();
    let train_s = median_secs(reps, || {
        let m = model.require_grad();
        let loss = sft_loss(&m, &probs, 0.0).0;
        let grads = loss.backward();
        let g = m.weights.head.grad(&grads).expect("head gradient");
        let _ = to_vec(g.slice([0..1, 0..1]));
    });
    let prompts: Vec<Vec<u32>> = problems(&task, 128).into_iter().map(|p| p.prompt).collect();
    let s = Sampling {
        temperature: 1.0,
        greedy: false,
        max_new: task.cfg.max_answer_tokens(),
        logit_noise: 0.0,
        sampler: Sampler::Auto,
    };
    let inner = model.inner();
    let mut generated = 0usize;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
    let gen_s = median_secs(reps.min(5), || {
        let g = generate(&inner, &prompts, &s, &mut rng, &mut |_| {
            ForwardOptions::default()
        });
        generated = g.responses.iter().map(Vec::len).sum();
    });
    Ok((tokens as f64 / train_s, generated as f64 / gen_s))
}

/// Median wall time of one RL step (toy, sort 4–16, B 16, G 8, N 4, GRPO, KV cache) from the
/// cached cold start, with its split, and rollout / update tokens per second.
/// The RL settings of one `bench --rl` row: probe and reference on or off, micro-batches and
/// rollout shards `parts`, and the `extra` settings its label names (joined by `+`).
fn bench_rl_config(probe: bool, parts: usize, extra: &str) -> crate::rl::RlConfig {
    use crate::rl::{
        Mismatch, Pr2Config, ReplayThresholdConfig, RlConfig, RouterShiftConfig, RoutingMode,
    };
    let has = |x: &str| extra.split('+').any(|e| e == x);
    let mut cfg = RlConfig {
        measure_kl_ref: probe,
        micro_batches: parts,
        rollout_shards: parts,
        router_shift: has("router_shift").then(RouterShiftConfig::default),
        mismatch: if has("router_noise") {
            Mismatch::RouterNoise { sigma: 0.13 }
        } else {
            Mismatch::None
        },
        routing: if has("r2") {
            RoutingMode::R2
        } else if has("r3") {
            RoutingMode::R3
        } else {
            RoutingMode::Native
        },
        pr2: has("pr2").then(Pr2Config::default),
        replay_threshold: has("replay_threshold").then(ReplayThresholdConfig::default),
        ..RlConfig::default()
    };
    // Every stability fix the label names, at its defaults.
    for key in crate::rl::fixes::KEYS.into_iter().filter(|k| has(k)) {
        cfg.set_fix(key, serde_json::json!({}))
            .expect("a fix's defaults read");
    }
    // A row that names several fixes prices their work together (icepop+mis stack their
    // engine-ratio weights): the stacking is declared.
    cfg.allow_stacked_engine_ratio = true;
    cfg
}

pub fn rl_step(device: &Device, reps: usize) -> Result<()> {
    use crate::coldstart::{ColdStartConfig, load_or_train};
    use crate::model::RouterKind;
    use crate::rl::Trainer;
    let task = Task::new(TaskConfig::default(), 0)?;
    let cold = |router: RouterKind| {
        let cfg = ModelConfig {
            router,
            ..ModelConfig::preset(Preset::Toy, Tokenizer.vocab_size())?
        };
        load_or_train(
            &cfg,
            &task,
            &ColdStartConfig::default(),
            0,
            device,
            std::path::Path::new(crate::util::io::DEFAULT_CACHE_DIR),
            &crate::util::progress::Progress::auto(),
        )
    };
    let softmax = cold(RouterKind::Softmax)?;
    // (probe, micro-batches and rollout shards, threads: None = the pool as configured, what
    // else is on). Probe off and no reference model: the same work as a plain GRPO step
    // (rollout, π_old recompute, 4 updates); probe on adds the instrumentation driftlab exists
    // for. The one-thread rows show what one experiment cell costs (cells run one thread
    // each). The last two rows price RSPO's router shift and the sigmoid_bias router (its
    // own cold start; the bias-only probe runs with the probe) against the probe-on row.
    // The rows after them price the masking corrections (all three, under a router-noise
    // mismatch for them to act on, against the noise alone) and the replay variants (against
    // plain r2 and r3 under the same noise).
    let variants = [
        (false, 2, None, ""),
        (true, 2, None, ""),
        (false, 1, Some(1), ""),
        (false, 2, Some(1), ""),
        (true, 2, None, "router_shift"),
        (true, 2, None, "sigmoid_bias"),
        (true, 2, None, "router_noise"),
        (true, 2, None, "router_noise+icepop+mis+opsm"),
        (true, 2, None, "r2"),
        (true, 2, None, "r2+pr2"),
        (true, 2, None, "router_noise+r3"),
        (true, 2, None, "router_noise+r3+replay_threshold"),
    ];
    for (probe, parts, threads, extra) in variants {
        let cfg = bench_rl_config(probe, parts, extra);
        let model = if extra == "sigmoid_bias" {
            cold(RouterKind::SigmoidBias)?.model
        } else {
            softmax.model.clone()
        };
        let mut t = Trainer::new(cfg, model, task.clone(), 0)?;
        t.probe = probe;
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads.unwrap_or_else(rayon::current_num_threads))
            .build()?;
        let mut rows = Vec::new();
        for i in 0..reps.max(1) + 2 {
            let o = pool.install(|| t.step());
            let gen_tokens: usize = o.resp_lens.iter().sum();
            let total = o.t_rollout + o.t_update + o.t_probe;
            if i >= 2 {
                rows.push((
                    total,
                    o.t_rollout,
                    o.t_update,
                    o.t_probe,
                    gen_tokens,
                    preset::Moved::of(&o),
                ));
            }
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (total, ro, up, pr, toks, moved) = rows[rows.len() / 2];
        println!(
            "rl step (toy, sort 4-16, B 16, G 8, N 4, probe and kl_ref {}, micro-batches and rollout shards {parts}, {} thread(s){}): median {:.3}s = rollout {:.3}s + update {:.3}s + probe {:.3}s; rollout {:.0} generated tokens/s, update {:.0} response tokens/s",
            if probe { "on" } else { "off" },
            pool.current_num_threads(),
            if extra.is_empty() {
                String::new()
            } else {
                format!(", {extra}")
            },
            total,
            ro,
            up,
            pr,
            toks as f64 / ro,
            toks as f64 / up
        );
        moved.print();
    }
    Ok(())
}

/// Median seconds of one AdamW step over a preset's weights (random gradients, clipping and
/// decay on), with burn tensor ops and with the fused host pass (CPU backend only: elsewhere
/// the second is `None`).
pub fn adamw_secs(preset: Preset, device: &Device, reps: usize) -> Result<(f64, Option<f64>)> {
    use crate::optim::{AdamW, AdamWConfig};
    let cfg = ModelConfig::preset(preset, Tokenizer.vocab_size())?;
    let w = Weights::init(&cfg, 0, device);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
    let n = Normal::new(0.0f32, 1e-3).expect("normal");
    let grads: Vec<_> = w
        .tensors()
        .iter()
        .map(|p| {
            let dims = p.dims();
            let vals = (0..dims[0] * dims[1]).map(|_| n.sample(&mut rng)).collect();
            floats(vals, dims, device)
        })
        .collect();
    let opt_cfg = AdamWConfig {
        weight_decay: 0.1,
        ..AdamWConfig::default()
    };
    // Each timed step gets weights and gradients no other handle holds, as in training.
    let deep = |ts: &[burn::tensor::Tensor<2>]| -> Vec<burn::tensor::Tensor<2>> {
        ts.iter()
            .map(|t| floats(to_vec(t.clone()), t.dims(), device))
            .collect()
    };
    let time = |fused: bool| {
        let mut opt = AdamW::new(opt_cfg.clone(), &w);
        opt.fused = fused;
        let mut cur = w.clone();
        cur.put_tensors(deep(&w.tensors()));
        let mut secs: Vec<f64> = (0..reps.max(1) + 2)
            .map(|_| {
                let g = deep(&grads);
                let t = Instant::now();
                let (next, _) = opt.step(cur.take(), g, 1e-4);
                let s = t.elapsed().as_secs_f64();
                cur = next;
                s
            })
            .skip(2)
            .collect();
        secs.sort_by(f64::total_cmp);
        secs[secs.len() / 2]
    };
    let tensor = time(false);
    let fused = crate::util::tensors::is_host(device).then(|| time(true));
    Ok((tensor, fused))
}
