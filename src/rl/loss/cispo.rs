//! CISPO (MiniMax-M1, arXiv 2506.13585, §3.1, Eqs. 4–5): REINFORCE weighted by the detached,
//! clipped token importance weight, so clipping bounds the weight but never drops a token's
//! gradient.
//!
//! `w_t = exp(logp − logp_old)`, `ŵ_t = clip(w_t, 1 − ε_low, 1 + ε_high)`,
//! `J = (1 / Σ_i |o_i|) Σ_i Σ_t sg(ŵ_t) · Â_i · log π_θ(o_t)` (token-level normalisation over
//! the minibatch), loss = −J.
//!
//! Defaults and deviations: the paper sets no lower bound ("ε_low large"): ε_low = 1 makes the
//! lower bound 0, which a ratio never goes below. The paper gives no value of ε_high; 0.2 is
//! the value of verl's CISPO example (`examples/cispo_trainer`). The paper's other parts (no KL,
//! DAPO's dynamic sampling and length penalty) are not part of the objective. Clipping
//! statistics count the tokens whose weight was truncated, on either side and for either sign
//! of Â, since every one of them had its gradient rescaled. Optional TIS multiplies each
//! token's term by the detached `min(exp(logp_old − logp_mu), C)`, as for GRPO.

use super::contract::{LossStats, PolicyBatch};
use crate::rl::config::CispoConfig;
use burn::tensor::Tensor;

pub fn loss(c: &CispoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let logp = batch.logp_host();
    let (ratio_tok, ratio_seq) = batch.ratios(&logp);
    let (lo, hi) = ((1.0 - c.eps_low) as f32, (1.0 + c.eps_high) as f32);
    let tis_weight = batch.tok_weight();
    let n = batch.n_tok() as f32;
    let coef: Vec<f32> = ratio_tok
        .iter()
        .enumerate()
        .map(|(t, &w)| {
            let tw = tis_weight.as_ref().map_or(1.0, |v| v[t]);
            -w.clamp(lo.max(0.0), hi) * batch.adv[batch.seg[t]] * tw / n
        })
        .collect();
    let loss = (batch.logp.clone() * batch.constant(coef)).sum();
    let clip_low: Vec<bool> = ratio_tok.iter().map(|&w| w < lo).collect();
    let clip_high: Vec<bool> = ratio_tok.iter().map(|&w| w > hi).collect();
    let mut clip_seq = vec![false; batch.n_resp()];
    for (t, &i) in batch.seg.iter().enumerate() {
        clip_seq[i] |= clip_low[t] || clip_high[t];
    }
    let stats = LossStats {
        loss_policy: crate::util::tensors::scalar(loss.clone().inner()),
        logp,
        ratio_tok,
        ratio_seq,
        clip_low,
        clip_high,
        clip_seq,
        kl_ref: None,
        tis_weight,
        router_shift: None,
        ..LossStats::default()
    };
    (loss, stats)
}
