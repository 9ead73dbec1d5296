//! The rollout engine: B prompts × G samples from the current policy on the non-autodiff
//! device, with an optional numerical mismatch that only this engine sees.

use super::config::{Mismatch, RlConfig};
use super::engine_router::RouterPrecision;
use crate::generate::{Generation, Sampling, generate_sharded};
use crate::model::{ForwardOptions, LayerRouting, Model, ParamGroup, bf16_round};
use crate::task::{Problem, Task};
use crate::util::tensors::floats;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Normal};

/// One rollout batch: responses in consecutive prompt groups of G.
#[derive(Clone, Debug)]
pub struct Rollout {
    /// The B problems; response row `i` answers `problems[i / G]`.
    pub problems: Vec<Problem>,
    pub generation: Generation,
    pub rewards: Vec<f32>,
    pub correct: Vec<bool>,
}

/// The model the rollout engine runs: the policy itself, or a copy with its weights rounded to
/// bf16 (every weight in a `bf16` engine; the router's as `router.weights` says).
pub fn engine_model(policy: &Model, mismatch: Mismatch, router: RouterPrecision) -> Model {
    let inner = policy.inner();
    let engine_bf16 = matches!(mismatch, Mismatch::Bf16);
    let router_bf16 = router.weights_bf16(engine_bf16);
    if !engine_bf16 && !router_bf16 {
        return inner;
    }
    let device = inner.device();
    let mut w = inner.weights.clone();
    w.visit_mut(&mut |_, group, t| {
        let round = match group {
            ParamGroup::Router => router_bf16,
            _ => engine_bf16,
        };
        if round {
            let dims = t.dims();
            let v = crate::util::tensors::to_vec(t.clone())
                .into_iter()
                .map(bf16_round)
                .collect();
            *t = floats(v, dims, &device);
        }
    });
    Model::new(inner.cfg.clone(), w, &device)
}

/// Sample B problems and G responses each. `sample_rng` draws prompts and tokens;
/// `noise_rng` draws the mismatch noise, so turning noise on does not change the prompts.
pub fn rollout(
    policy: &Model,
    task: &Task,
    cfg: &RlConfig,
    sample_rng: &mut Xoshiro256PlusPlus,
    noise_rng: &mut Xoshiro256PlusPlus,
) -> Rollout {
    let engine = engine_model(policy, cfg.mismatch, cfg.router_precision);
    rollout_on(&engine, task, cfg, sample_rng, noise_rng)
}

/// [`rollout`] on an engine model already made by [`engine_model`] (a step that also checks
/// the engine's router makes it once).
pub fn rollout_on(
    model: &Model,
    task: &Task,
    cfg: &RlConfig,
    sample_rng: &mut Xoshiro256PlusPlus,
    noise_rng: &mut Xoshiro256PlusPlus,
) -> Rollout {
    let problems: Vec<Problem> = (0..cfg.batch_prompts)
        .map(|_| task.sample(sample_rng))
        .collect();
    let prompts: Vec<Vec<u32>> = problems
        .iter()
        .flat_map(|p| std::iter::repeat_n(p.prompt.clone(), cfg.group_size))
        .collect();
    let logit_noise = match cfg.mismatch {
        Mismatch::LogitNoise { sigma } => sigma as f32,
        _ => 0.0,
    };
    let s = Sampling {
        temperature: cfg.temperature,
        greedy: false,
        max_new: task.cfg.max_answer_tokens(),
        logit_noise,
        sampler: cfg.sampler,
    };
    let (n_layers, n_experts) = (model.cfg.n_layers, model.cfg.n_experts);
    let device = model.device();
    let round_bf16 = matches!(cfg.mismatch, Mismatch::Bf16);
    let round_router_logits = cfg.router_precision.logits_bf16() && model.cfg.is_moe();
    let mut options = |n_tokens: usize| -> ForwardOptions<'static> {
        let mut noise = |n: usize, sigma: f64| -> Vec<f32> {
            let normal = Normal::new(0.0f32, sigma as f32).expect("valid sigma");
            (0..n).map(|_| normal.sample(noise_rng)).collect()
        };
        let routing = match cfg.mismatch {
            Mismatch::RouterNoise { sigma } if sigma > 0.0 && model.cfg.is_moe() => (0..n_layers)
                .map(|_| LayerRouting {
                    logit_offset: Some(floats(
                        noise(n_tokens * n_experts, sigma),
                        [n_tokens, n_experts],
                        &device,
                    )),
                    ..LayerRouting::default()
                })
                .collect(),
            Mismatch::RouteFlip { sigma } if sigma > 0.0 && model.cfg.is_moe() => (0..n_layers)
                .map(|_| LayerRouting {
                    choice_offset: Some(noise(n_tokens * n_experts, sigma)),
                    ..LayerRouting::default()
                })
                .collect(),
            _ => Vec::new(),
        };
        ForwardOptions {
            routing: round_logits(routing, n_layers, round_router_logits),
            want_probs: false,
            round_bf16,
            routes_on_device: false,
        }
    };
    let generation = generate_sharded(
        &model,
        &prompts,
        &s,
        sample_rng,
        &mut options,
        cfg.rollout_shards,
    );
    let g = cfg.group_size;
    let rewards = generation
        .responses
        .iter()
        .enumerate()
        .map(|(i, r)| task.reward(&problems[i / g], r))
        .collect();
    let correct = generation
        .responses
        .iter()
        .enumerate()
        .map(|(i, r)| task.is_correct(&problems[i / g], r))
        .collect();
    Rollout {
        problems,
        generation,
        rewards,
        correct,
    }
}

/// Every layer's routing with `round_logits` set where `on` (an empty list, all native, grows
/// to one entry a layer).
fn round_logits(
    mut routing: Vec<LayerRouting<'static>>,
    n_layers: usize,
    on: bool,
) -> Vec<LayerRouting<'static>> {
    if on {
        routing.resize_with(n_layers, LayerRouting::default);
        routing.iter_mut().for_each(|r| r.round_logits = true);
    }
    routing
}
