//! GMPO (Geometric-Mean Policy Optimization, arXiv 2507.20673): the geometric mean of the
//! token ratios of a response, each clipped in log space, in place of GRPO's arithmetic mean.
//!
//! Per token `Δ_t = logp − logp_old`; with `σ_i = sign(Â_i)` (taken as +1 when Â_i = 0),
//! `c_t = σ_i · min(σ_i Δ_t, σ_i clip(Δ_t, −ε_low, ε_high))` (the pessimistic side, as PPO);
//! `ρ_i = exp(mean_t c_t)` is the clipped geometric-mean ratio, `ℓ_i = −Â_i · ρ_i`, loss = mean
//! over responses. This is the paper's `(Π_t min[w^σ, clip(w^σ, e^{−ε}, e^{ε})])^{σ/|o_i|} · Â`
//! written in log space, as the official code (`callsys/GMPO`) and verl's `geo_mean` loss
//! compute it. ε_low = ε_high = 0.4 (the paper's range `(e^{−0.4}, e^{0.4})`).
//!
//! Clipped tokens are those whose `c_t` is the clipped value with a different `Δ_t` (Â > 0 and
//! Δ > ε_high, or Â < 0 and Δ < −ε_low): their gradient is zero. Deviation: optional TIS uses
//! one length-normalised weight per response, as for GSPO.

use super::contract::{LossStats, PolicyBatch};
use crate::rl::config::GmpoConfig;
use burn::tensor::Tensor;

pub fn loss(c: &GmpoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let sign = |a: f32| if a < 0.0 { -1.0f32 } else { 1.0 };
    let sgn = batch.constant(batch.seg.iter().map(|&i| sign(batch.adv[i])).collect());
    let delta = batch.logp.clone() - batch.constant(batch.logp_old.clone());
    let clamped = delta.clone().clamp(-c.eps_low, c.eps_high);
    let c_tok = (delta * sgn.clone()).min_pair(clamped * sgn.clone()) * sgn;
    let lens = batch.constant(batch.lens.iter().map(|&l| l as f32).collect());
    let rho = (batch.seq_sum(c_tok) / lens).exp();
    let mut per_seq = -(rho * batch.constant(batch.adv.clone()));
    let tis_weight = batch.seq_weight();
    if let Some(tw) = &tis_weight {
        per_seq = per_seq * batch.constant(tw.clone());
    }
    let loss = per_seq.mean();
    let logp = batch.logp_host();
    let (ratio_tok, ratio_seq) = batch.ratios(&logp);
    let mut stats = LossStats {
        loss_policy: crate::util::tensors::scalar(loss.clone().inner()),
        clip_seq: vec![false; batch.n_resp()],
        kl_ref: None,
        tis_weight,
        ..LossStats::default()
    };
    for (t, (&a, &b)) in logp.iter().zip(&batch.logp_old).enumerate() {
        let (d, adv) = (f64::from(a - b), batch.adv[batch.seg[t]]);
        let lo = adv < 0.0 && d < -c.eps_low;
        let hi = adv > 0.0 && d > c.eps_high;
        stats.clip_low.push(lo);
        stats.clip_high.push(hi);
        stats.clip_seq[batch.seg[t]] |= lo || hi;
    }
    stats.logp = logp;
    stats.ratio_tok = ratio_tok;
    stats.ratio_seq = ratio_seq;
    (loss, stats)
}
