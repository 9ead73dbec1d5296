//! GSPO (Qwen, arXiv 2507.18071): one length-normalised sequence ratio per response.
//!
//! `log s_i = mean_t (logp − logp_old)`, `s_i = exp(log s_i)`,
//! `ℓ_i = −min(s_i·Â_i, clip(s_i, 1−ε_low, 1+ε_high)·Â_i)`, loss = mean over responses,
//! ε_low = 3e-4, ε_high = 4e-4 by default. A clipped response counts all its tokens as clipped.
//!
//! GSPO-token: `log s_{i,t} = sg(log s_i) + logp_t − sg(logp_t)`, then GRPO's per-token form,
//! aggregated `seq_mean_token_mean`: the same value as GSPO, and the same gradient when Â is
//! constant within a response.
//!
//! Deviation: TIS (optional) uses one length-normalised weight per response,
//! `min(exp(mean_t (logp_old − logp_mu)), C)`, matching the sequence-level ratio.

use super::contract::{LossStats, PolicyBatch, clipped};
use super::grpo;
use crate::rl::config::{Aggregation, GspoConfig};
use burn::tensor::Tensor;

/// `log s_i` per response, `[R]`, with graph.
fn log_seq_ratio(batch: &PolicyBatch) -> Tensor<1> {
    let lr = batch.logp.clone() - batch.constant(batch.logp_old.clone());
    let lens = batch.constant(batch.lens.iter().map(|&l| l as f32).collect());
    batch.seq_sum(lr) / lens
}

/// Statistics shared by both forms: clipping is decided per response.
fn stats(
    c: &GspoConfig,
    batch: &PolicyBatch,
    loss: &Tensor<1>,
    tis_weight: Option<Vec<f32>>,
) -> LossStats {
    let logp = batch.logp_host();
    let (ratio_tok, ratio_seq) = batch.ratios(&logp);
    let seq: Vec<(bool, bool)> = ratio_seq
        .iter()
        .zip(&batch.adv)
        .map(|(&s, &a)| clipped(s, a, c.eps_low, c.eps_high))
        .collect();
    LossStats {
        loss_policy: crate::util::tensors::scalar(loss.clone().inner()),
        clip_low: batch.seg.iter().map(|&i| seq[i].0).collect(),
        clip_high: batch.seg.iter().map(|&i| seq[i].1).collect(),
        clip_seq: seq.iter().map(|&(l, h)| l || h).collect(),
        ratio_tok,
        ratio_seq,
        logp,
        kl_ref: None,
        tis_weight,
        router_shift: None,
        ..LossStats::default()
    }
}

pub fn loss(c: &GspoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let s = log_seq_ratio(batch).exp();
    let adv = batch.constant(batch.adv.clone());
    let unclipped = s.clone() * adv.clone();
    let clip = s.clamp(1.0 - c.eps_low, 1.0 + c.eps_high) * adv;
    let mut per_seq = -unclipped.min_pair(clip);
    let tis_weight = batch.seq_weight();
    if let Some(tw) = &tis_weight {
        per_seq = per_seq * batch.constant(tw.clone());
    }
    let loss = per_seq.mean();
    let st = stats(c, batch, &loss, tis_weight);
    (loss, st)
}

pub fn token_loss(c: &GspoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let d = batch.device();
    let log_s_tok = log_seq_ratio(batch).detach().select(
        0,
        crate::util::tensors::ints(&batch.seg, [batch.n_tok()], &d),
    );
    let w = (log_s_tok + batch.logp.clone() - batch.logp.clone().detach()).exp();
    let tis_weight = batch.ratio_seq_weight();
    let tis_tok = batch.tok_weight_of_seq(tis_weight.as_deref());
    let loss = grpo::clipped_surrogate(
        w,
        batch,
        c.eps_low,
        c.eps_high,
        Aggregation::SeqMeanTokenMean,
        tis_tok.as_deref(),
    );
    let st = stats(c, batch, &loss, tis_weight);
    (loss, st)
}
