//! The rollout engine's router precision, and a check of its expert choices against a
//! high-precision router on the same hidden states.
//!
//! Why: an engine that keeps its router in bf16 picks other experts for near-ties than the
//! trainer does, and the error compounds over a long generation (sglang issue #38695: a router
//! GEMM stored in fp32 instead of bf16 moved a MoE's SWE-bench Verified from 66.8% to 79.4%;
//! local-inference-lab/vllm #652: 104 of 4096 expert choices differed from an fp64 reference
//! with bf16 router scores, 1 of 4096 after the fix; vLLM #54048: choices that depend on the
//! batch size where logits round through bf16; prime-rl PR #2952 made fp32 routing its
//! default). driftlab's `bf16` engine rounds every weight, the router's included, and the
//! residual stream, but computes the router logits in fp32 from them; `router_precision`
//! sets the router's part on its own, so the router's share of the mismatch can be measured.
//!
//! - `[rl] router_precision = { weights = "fp32" | "bf16", logits = "fp32" | "bf16" }`:
//!   `weights` the router weights the engine multiplies by (absent: as the engine's other
//!   weights, bf16 in a `bf16` engine, the policy's fp32 otherwise); `logits` whether the router
//!   logits are rounded to bf16 before the scores (softmax or sigmoid, so the gates too) and the
//!   top-k. Only the rollout engine; the trainer's router never changes.
//! - `[rl] router_check = true`: once per step, the engine's forward over the rollout batch
//!   (its weights, rounding and router precision; none of its noise draws, no graph) with each
//!   MoE layer's router input kept, and per layer ([`compare_layer`]) the engine's native top-k
//!   against the top-k of an f64 router on the same inputs with the policy's fp32 router
//!   weights: `router_disagree_frac` (share of expert choices the engine makes that the f64
//!   router does not), `router_bf16_tie_frac` (share of tokens whose f64 k-th and (k+1)-th
//!   scores lie within one bf16 spacing of each other) and `router_bf16_tie_flip_frac` (share
//!   of those tokens whose engine expert set differs from the f64 one). docs/metrics.md gives
//!   the formulas.

use crate::model::weights::FfnWeights;
use crate::model::{FfnKind, ForwardOptions, LayerRouting, Model, RouterKind, SeqBatch};
use crate::util::tensors::to_vec;
use serde::{Deserialize, Serialize};

/// A number format of the engine's router.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Precision {
    #[default]
    Fp32,
    Bf16,
}

/// `[rl] router_precision`: see the module doc.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct RouterPrecision {
    /// The router weights' format in the engine; `None` = as the engine's other weights.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weights: Option<Precision>,
    /// Router logits rounded to bf16 before the scores and the top-k (`bf16`), or kept.
    pub logits: Precision,
}

impl RouterPrecision {
    /// The default (left out of a written config, so configs from before it read the same).
    pub fn is_default(&self) -> bool {
        *self == RouterPrecision::default()
    }

    /// Whether the engine's router weights are bf16-rounded, in an engine whose other weights
    /// are (`engine_bf16`) or not.
    pub fn weights_bf16(&self, engine_bf16: bool) -> bool {
        self.weights.map_or(engine_bf16, |p| p == Precision::Bf16)
    }

    pub fn logits_bf16(&self) -> bool {
        self.logits == Precision::Bf16
    }
}

/// One MoE layer's check: counts over the batch's valid tokens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouterCheck {
    pub tokens: usize,
    /// Expert choices (tokens × k), and those the f64 router does not make.
    pub choices: usize,
    pub disagree: usize,
    /// Tokens whose f64 k-th and (k+1)-th scores are within one bf16 spacing, and those of them
    /// whose engine expert set differs from the f64 one.
    pub ties: usize,
    pub tie_flips: usize,
}

impl RouterCheck {
    pub fn add(&mut self, o: &RouterCheck) {
        self.tokens += o.tokens;
        self.choices += o.choices;
        self.disagree += o.disagree;
        self.ties += o.ties;
        self.tie_flips += o.tie_flips;
    }

    /// `[router_disagree_frac, router_bf16_tie_frac, router_bf16_tie_flip_frac]`; a share
    /// with nothing to count is `None`.
    pub fn shares(&self) -> [Option<f64>; 3] {
        let share = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        [
            share(self.disagree, self.choices),
            share(self.ties, self.tokens),
            share(self.tie_flips, self.ties),
        ]
    }
}

/// The spacing of bf16 numbers at `x` (8 significant bits): 2^(⌊log₂|x|⌋ − 7), and the
/// smallest normal bf16's spacing at 0.
pub fn bf16_spacing(x: f64) -> f64 {
    let a = x.abs().max(f64::from(f32::MIN_POSITIVE));
    2f64.powi(a.log2().floor() as i32 - 7)
}

/// The layer's router as the check needs it: weights `[d_model, n_experts]` row-major and the
/// `sigmoid_bias` selection bias (empty for softmax).
pub struct RouterRef<'a> {
    pub w: &'a [f32],
    pub bias: &'a [f32],
    pub kind: RouterKind,
    pub d_model: usize,
    pub n_experts: usize,
    pub k: usize,
}

/// Compare the engine's native ids `[tokens, k]` with an f64 router on the engine's router
/// inputs `x` `[tokens, d_model]`, over the `valid` tokens. The f64 score is the logit for the
/// softmax router (its top-k is the softmax's) and σ(z) + b for `sigmoid_bias`; ties in the
/// f64 ranking go to the lower expert id, as the engine's top-k does.
pub fn compare_layer(r: &RouterRef<'_>, x: &[f32], native: &[u16], valid: &[bool]) -> RouterCheck {
    let (d, e_n, k) = (r.d_model, r.n_experts, r.k);
    let mut c = RouterCheck::default();
    let mut scores = vec![0f64; e_n];
    let mut order: Vec<usize> = (0..e_n).collect();
    for (t, row) in x.chunks_exact(d).enumerate() {
        if !valid.get(t).copied().unwrap_or(false) {
            continue;
        }
        for (e, s) in scores.iter_mut().enumerate() {
            let z: f64 = (0..d)
                .map(|i| f64::from(row[i]) * f64::from(r.w[i * e_n + e]))
                .sum();
            *s = match r.kind {
                RouterKind::Softmax => z,
                RouterKind::SigmoidBias => 1.0 / (1.0 + (-z).exp()) + f64::from(r.bias[e]),
            };
        }
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let reference = &order[..k];
        let engine = &native[t * k..(t + 1) * k];
        let missing = engine
            .iter()
            .filter(|&&x| !reference.contains(&(x as usize)))
            .count();
        c.tokens += 1;
        c.choices += k;
        c.disagree += missing;
        if k < e_n {
            let (sk, sk1) = (scores[order[k - 1]], scores[order[k]]);
            if sk - sk1 <= bf16_spacing(sk.abs().max(sk1.abs())) {
                c.ties += 1;
                c.tie_flips += usize::from(missing > 0);
            }
        }
    }
    c
}

/// [`compare_layer`] for every MoE layer of `engine`'s forward over `batch` (its router input
/// kept, logits rounded where `precision` says, the residual stream where `round_bf16`),
/// against the routers of `policy` (the fp32 weights the engine's were made from).
pub fn check(
    engine: &Model,
    policy: &Model,
    batch: &SeqBatch,
    precision: RouterPrecision,
    round_bf16: bool,
) -> Vec<RouterCheck> {
    let cfg = &policy.cfg;
    if cfg.ffn != FfnKind::Moe {
        return Vec::new();
    }
    let opts = ForwardOptions {
        routing: (0..cfg.n_layers)
            .map(|_| LayerRouting {
                want_input: true,
                round_logits: precision.logits_bf16(),
                ..LayerRouting::default()
            })
            .collect(),
        want_probs: false,
        round_bf16,
        routes_on_device: false,
    };
    let traces = engine.route_traces(batch, &opts);
    let routers = policy
        .inner()
        .weights
        .blocks
        .into_iter()
        .filter_map(|b| match b.ffn {
            FfnWeights::Moe(m) => Some((to_vec(m.router), m.bias)),
            FfnWeights::Dense(_) => None,
        });
    traces
        .iter()
        .zip(routers)
        .map(|(t, (w, bias))| {
            let r = RouterRef {
                w: &w,
                bias: &bias,
                kind: cfg.router,
                d_model: cfg.d_model,
                n_experts: cfg.n_experts,
                k: cfg.top_k,
            };
            let x = t
                .input
                .as_deref()
                .expect("the check asks for the router input");
            compare_layer(&r, x, &t.native, &batch.valid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(w: &[f32], k: usize) -> RouterRef<'_> {
        RouterRef {
            w,
            bias: &[],
            kind: RouterKind::Softmax,
            d_model: 1,
            n_experts: w.len(),
            k,
        }
    }

    #[test]
    fn the_bf16_spacing_by_hand() {
        assert_eq!(bf16_spacing(1.0), 1.0 / 128.0);
        assert_eq!(bf16_spacing(1.5), 1.0 / 128.0);
        assert_eq!(bf16_spacing(-3.0), 2.0 / 128.0);
        assert_eq!(bf16_spacing(0.25), 1.0 / 512.0);
    }

    #[test]
    fn disagreement_and_near_tie_flips_by_hand() {
        // One input dimension: logits = x · w. Experts' weights 1.0, 0.999, 0.5, top-2.
        let w = [1.0f32, 0.999, 0.5];
        let r = router(&w, 2);
        // Token 0 (x = 1): f64 top-2 {0, 1}, the 2nd and 3rd logits 0.999 and 0.5: no tie.
        // The engine picked {0, 2}: one of 2 choices differs.
        // Token 1 (x = 2): top-2 {0, 1}, engine agrees.
        // Token 2 is padding.
        let x = [1.0f32, 2.0, 1.0];
        let native = [0u16, 2, 1, 0, 2, 2];
        let c = compare_layer(&r, &x, &native, &[true, true, false]);
        assert_eq!(
            c,
            RouterCheck {
                tokens: 2,
                choices: 4,
                disagree: 1,
                ties: 0,
                tie_flips: 0
            }
        );
        // Top-1 of [1.0, 0.999]·x: the gap 0.001 is within bf16's spacing at 1 (1/128): a
        // near-tie; the engine picking expert 1 is a near-tie flip.
        let r = router(&w[..2], 1);
        let c = compare_layer(&r, &[1.0], &[1], &[true]);
        assert_eq!(
            c,
            RouterCheck {
                tokens: 1,
                choices: 1,
                disagree: 1,
                ties: 1,
                tie_flips: 1
            }
        );
        assert_eq!(c.shares(), [Some(1.0), Some(1.0), Some(1.0)]);
        assert_eq!(RouterCheck::default().shares(), [None, None, None]);
    }

    #[test]
    fn sigmoid_bias_scores_rank_by_affinity_plus_bias() {
        // Logits 0 and 0: affinities 0.5 each; the bias of expert 1 decides.
        let w = [0.0f32, 0.0];
        let r = RouterRef {
            w: &w,
            bias: &[0.0, 0.1],
            kind: RouterKind::SigmoidBias,
            d_model: 1,
            n_experts: 2,
            k: 1,
        };
        let c = compare_layer(&r, &[1.0], &[0], &[true]);
        assert_eq!((c.disagree, c.ties), (1, 0));
    }
}
