//! The supervised cold start itself: next-token training on correct answers until a sampled
//! eval accuracy or a step budget is reached, and its evaluation.

use crate::generate::{Sampler, Sampling, generate, layout};
use crate::model::{ForwardOptions, Model, ModelConfig, token_logp};
use crate::optim::{AdamW, AdamWConfig};
use crate::task::{EOS, Problem, Task};
use crate::util::hash::derive_seed;
use crate::util::progress::Progress;
use anyhow::Result;
use burn::tensor::Device;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use std::time::Instant;

use super::settings::{ColdStart, ColdStartConfig, EvalAccuracy, this_build};

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
            sampler: Sampler::Host,
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
            sampler: Sampler::Host,
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

/// Train from scratch (no cache); on a GPU device from this thread only (see
/// [`crate::util::parallel::serial_while`]).
pub fn train(
    model_cfg: &ModelConfig,
    task: &Task,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    progress: &Progress,
) -> Result<ColdStart> {
    let _serial = crate::util::parallel::serial_off_host(device);
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
pub(super) fn label(model_cfg: &ModelConfig, seed: u64) -> String {
    format!(
        "cold start {} {}L seed {seed}",
        format!("{:?}", model_cfg.ffn).to_lowercase(),
        model_cfg.n_layers
    )
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
}
