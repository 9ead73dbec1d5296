//! GRPO (DeepSeekMath, arXiv 2402.03300) with asymmetric clipping (DAPO-style ε_high).
//!
//! Per token: `w = exp(logp − logp_old)`, `ℓ_t = −min(w·Â, clip(w, 1−ε_low, 1+ε_high)·Â)`,
//! aggregated `seq_mean_token_mean` (default) or `token_mean`. Optional k3 KL to the reference,
//! `exp(logp_ref − logp) − (logp_ref − logp) − 1`, weighted by β with the same aggregation.
//! Deviations from the paper: the asymmetric clip range, and the KL is off by default (β = 0).
//! Optional TIS multiplies each token's loss by the detached `min(exp(logp_old − logp_mu), C)`.

use super::contract::{LossStats, PolicyBatch, clipped};
use crate::rl::config::{Aggregation, GrpoConfig};
use burn::tensor::Tensor;

/// GRPO's clipped per-token surrogate `Σ_t c_t·ℓ_t` for any per-token ratio tensor `w` (GSPO-token
/// uses it too), with optional detached per-token weights (TIS).
pub fn clipped_surrogate(
    w: Tensor<1>,
    batch: &PolicyBatch,
    eps_low: f64,
    eps_high: f64,
    agg: Aggregation,
    tok_weight: Option<&[f32]>,
) -> Tensor<1> {
    let adv = batch.adv_tok();
    clipped_surrogate_adv(w, adv, batch, eps_low, eps_high, agg, tok_weight)
}

/// [`clipped_surrogate`] with per-token advantages `adv` `[n_tok]` (PG-OPD's, which vary
/// within a response) in place of the batch's per-response ones.
pub fn clipped_surrogate_adv(
    w: Tensor<1>,
    adv: Tensor<1>,
    batch: &PolicyBatch,
    eps_low: f64,
    eps_high: f64,
    agg: Aggregation,
    tok_weight: Option<&[f32]>,
) -> Tensor<1> {
    let unclipped = w.clone() * adv.clone();
    let clip = w.clamp(1.0 - eps_low, 1.0 + eps_high) * adv;
    let mut per_tok = -unclipped.min_pair(clip);
    if let Some(tw) = tok_weight {
        per_tok = per_tok * batch.constant(tw.to_vec());
    }
    (per_tok * batch.agg_weights(agg)).sum()
}

pub fn loss(c: &GrpoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let logp_old = batch.constant(batch.logp_old.clone());
    let w = (batch.logp.clone() - logp_old).exp();
    let tis_weight = batch.tok_weight();
    let mut loss = clipped_surrogate(
        w,
        batch,
        c.eps_low,
        c.eps_high,
        c.aggregation,
        tis_weight.as_deref(),
    );
    let mut kl_ref = None;
    if c.kl_beta > 0.0 {
        let lref = batch
            .logp_ref
            .clone()
            .expect("kl_beta > 0 needs reference log-probs");
        let d = batch.constant(lref) - batch.logp.clone();
        let k3 = d.clone().exp() - d - 1.0;
        let weights = batch.agg_weights(c.aggregation);
        kl_ref = Some(crate::util::tensors::scalar(
            (k3.clone() * weights.clone()).sum().inner(),
        ));
        loss = loss + (k3 * weights).sum() * c.kl_beta as f32;
    }
    let logp = batch.logp_host();
    let (ratio_tok, ratio_seq) = batch.ratios(&logp);
    let mut stats = LossStats {
        ratio_tok,
        ratio_seq,
        logp,
        kl_ref,
        tis_weight,
        ..LossStats::default()
    };
    stats.clip_seq = vec![false; batch.n_resp()];
    for (t, &w) in stats.ratio_tok.iter().enumerate() {
        let (lo, hi) = clipped(w, batch.adv[batch.seg[t]], c.eps_low, c.eps_high);
        stats.clip_low.push(lo);
        stats.clip_high.push(hi);
        stats.clip_seq[batch.seg[t]] |= lo || hi;
    }
    stats.loss_policy = crate::util::tensors::scalar(loss.clone().inner());
    (loss, stats)
}
