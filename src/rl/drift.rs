//! Drift injection: a router-logit random walk in the trainer's update forwards that dials in
//! the expert drift large MoE models show (DESIGN §6, "Simulating scale").

use crate::model::moe::native_topk;
use crate::util::tensors::floats;
use burn::tensor::{Device, Tensor};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Normal};

/// The walk `ε_m = ε_{m−1} + η`, `η ~ N(0, σ²)` per token, layer and expert, over one rollout
/// batch's layout. `ε_0 = 0`: the first minibatch stays exactly on-policy.
pub struct DriftWalk {
    pub sigma: f64,
    /// Walk steps taken (optimizer steps so far in this rollout batch).
    pub steps: usize,
    n_experts: usize,
    /// Per layer, `[tokens, n_experts]`.
    eps: Vec<Vec<f32>>,
    rng: Xoshiro256PlusPlus,
}

impl DriftWalk {
    pub fn new(sigma: f64, n_layers: usize, n_tokens: usize, n_experts: usize, seed: u64) -> Self {
        DriftWalk {
            sigma,
            steps: 0,
            n_experts,
            eps: vec![vec![0.0; n_tokens * n_experts]; n_layers],
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
        }
    }

    /// One more walk step (after an optimizer step).
    pub fn advance(&mut self) {
        let normal = Normal::new(0.0f32, self.sigma as f32).expect("valid sigma");
        for layer in &mut self.eps {
            for v in layer.iter_mut() {
                *v += normal.sample(&mut self.rng);
            }
        }
        self.steps += 1;
    }

    /// Per layer logit offsets `[tokens, n_experts]` for a token range of the layout.
    pub fn offsets(&self, tokens: std::ops::Range<usize>, device: &Device) -> Vec<Tensor<2>> {
        let e = self.n_experts;
        self.eps
            .iter()
            .map(|l| {
                floats(
                    l[tokens.start * e..tokens.end * e].to_vec(),
                    [tokens.len(), e],
                    device,
                )
            })
            .collect()
    }
}

/// Share of activated expert slots that change when `N(0, σ²)` noise (fixed draws `z`, scaled)
/// is added to the router logits of `logp` rows (log-probabilities; top-k is shift invariant).
fn changed_share(
    logp: &[f32],
    z: &[f32],
    sigma: f32,
    n_experts: usize,
    k: usize,
    base: &[u16],
) -> f64 {
    let noisy: Vec<f32> = logp.iter().zip(z).map(|(l, z)| l + sigma * z).collect();
    let ids = native_topk(&noisy, n_experts, k);
    let mut changed = 0usize;
    for (a, b) in base.chunks_exact(k).zip(ids.chunks_exact(k)) {
        changed += b.iter().filter(|e| !a.contains(e)).count();
    }
    changed as f64 / base.len().max(1) as f64
}

/// σ such that one walk step changes `target` of the activated expert slots, by bisection on
/// the real tokens of one batch. `probs` holds per layer `[tokens, n_experts]` distributions.
pub fn calibrate_sigma(
    probs: &[Vec<f32>],
    valid: &[bool],
    n_experts: usize,
    k: usize,
    target: f64,
    seed: u64,
) -> f64 {
    let mut logp = Vec::new();
    for layer in probs {
        for (t, row) in layer.chunks_exact(n_experts).enumerate() {
            if valid[t] {
                logp.extend(row.iter().map(|p| p.max(1e-30).ln()));
            }
        }
    }
    let base = native_topk(&logp, n_experts, k);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let normal = Normal::new(0.0f32, 1.0).expect("unit normal");
    let z: Vec<f32> = (0..logp.len()).map(|_| normal.sample(&mut rng)).collect();
    let share = |s: f64| changed_share(&logp, &z, s as f32, n_experts, k, &base);
    let (mut lo, mut hi) = (0.0f64, 1e-3f64);
    while share(hi) < target && hi < 1e4 {
        lo = hi;
        hi *= 2.0;
    }
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if share(mid) < target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}
