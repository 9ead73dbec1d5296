//! Sampling on the device: the same distribution and the same random stream as the host
//! sampler ([`super::pick`]), computed where the logits are, so that a decoding step reads back
//! only each row's token and its log-prob (one `[rows, 2]` buffer) instead of every logit.
//!
//! The random numbers are still drawn on the host, row by row in order from the one seeded
//! stream, exactly as the host sampler draws them (the logit noise of a row, then its uniform),
//! and uploaded: an upload does not wait for the device, a read does. The token is the
//! inverse CDF of the row's uniform — the first token whose cumulative probability exceeds
//! it — as on the host. The host sums in f64 and the device in f32, so a uniform that falls
//! within float rounding of a CDF step can pick the neighbouring token: the two samplers draw
//! the same tokens except on such rare rows, and each reports the log-prob of the token it
//! drew. `[rl] sampler = "host"` keeps the host sampler where samples must match across
//! devices bit for bit.

use super::Sampling;
use crate::util::tensors::{floats, to_vec};
use burn::tensor::Tensor;
use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;
use serde::{Deserialize, Serialize};

/// `[rl] sampler`: where the rollout engine (and the greedy evaluation) picks tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sampler {
    /// The host on the CPU backend (where the device is the host), the device elsewhere.
    #[default]
    Auto,
    /// Every logit read back and sampled in f64 on the host: the same samples on every device.
    Host,
    /// On the device, reading back one token and log-prob per row ([`pick_on_device`]).
    Device,
}

impl Sampler {
    /// The default (left out of a written config, so configs from before it read the same).
    pub fn is_auto(&self) -> bool {
        *self == Sampler::Auto
    }

    /// Whether tokens are picked on `device`.
    pub fn on_device(self, device: &burn::tensor::Device) -> bool {
        match self {
            Sampler::Auto => !crate::util::tensors::is_host(device),
            Sampler::Host => false,
            Sampler::Device => true,
        }
    }
}

/// The host sampler's random draws for one row, in its order: the row's logit noise (when
/// `logit_noise > 0`), then its uniform (when sampling, not greedy).
fn draws(s: &Sampling, v: usize, rng: &mut Xoshiro256PlusPlus) -> (Vec<f64>, f64) {
    let noise = if s.logit_noise > 0.0 {
        let normal = rand_distr::Normal::new(0.0, f64::from(s.logit_noise)).expect("valid sigma");
        (0..v)
            .map(|_| rand_distr::Distribution::<f64>::sample(&normal, rng))
            .collect()
    } else {
        Vec::new()
    };
    let u = if s.greedy { 0.0 } else { rng.random() };
    (noise, u)
}

/// Pick the next token of every `active` row of `logits` `[rows, vocab]` on the device:
/// `(token, logp)` per active row (`None` for the others, which draw nothing), with the
/// log-prob under `softmax((logits + noise) / τ)`. One read back of `[rows, 2]`.
pub fn pick_on_device(
    logits: Tensor<2>,
    active: &[bool],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
) -> Vec<Option<(u32, f32)>> {
    let [n, v] = logits.dims();
    assert_eq!(active.len(), n, "one active flag per row");
    let device = logits.device();
    let mut noise = Vec::new();
    let mut u = vec![0f32; n];
    for (r, _) in active.iter().enumerate().filter(|(_, a)| **a) {
        let (z, ur) = draws(s, v, rng);
        if !z.is_empty() {
            noise.resize(n * v, 0.0);
            for (o, x) in noise[r * v..(r + 1) * v].iter_mut().zip(z) {
                *o = x as f32;
            }
        }
        u[r] = ur as f32;
    }
    let mut scaled = logits;
    if !noise.is_empty() {
        scaled = scaled + floats(noise, [n, v], &device);
    }
    let scaled = scaled / s.temperature;
    let max = scaled.clone().max_dim(1); // [n, 1]
    let lse = max.clone() + (scaled.clone() - max).exp().sum_dim(1).log();
    let logp = scaled.clone() - lse; // [n, v]
    let tok = if s.greedy {
        scaled.argmax(1) // [n, 1]; the first maximum, as on the host
    } else {
        // The first token whose CDF exceeds u: the count of CDF values at or below it.
        let cdf = logp.clone().exp().cumsum(1);
        let u = floats(u, [n, 1], &device).expand([n, v]);
        cdf.lower_equal(u).int().sum_dim(1).clamp_max(v as i64 - 1)
    };
    let lp = logp.gather(1, tok.clone());
    let both = to_vec(Tensor::cat(vec![tok.float(), lp], 1));
    (0..n)
        .map(|r| active[r].then(|| (both[2 * r] as u32, both[2 * r + 1])))
        .collect()
}
