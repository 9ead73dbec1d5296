//! GVPO (arXiv 2504.19599): a squared loss between group-centred implicit rewards and
//! group-centred rewards; no importance ratio, no clipping.
//!
//! Per response `Δ_i = Σ_t (logp − logp_old)` (a sum, not length-normalised). Per group:
//! `L_g = 1/(2(G−1)) · Σ_i [β(Δ_i − mean_j Δ_j) − (r_i − mean_j r_j)]²`; loss = mean over
//! groups; raw rewards, β = 0.1 by default. At θ = θ_old the gradient equals REINFORCE with a
//! group-mean baseline scaled by β/(G−1).
//! Deviation: optional TIS weights each response's squared residual by the length-normalised
//! `min(exp(mean_t (logp_old − logp_mu)), C)`.

use super::contract::{LossStats, PolicyBatch};
use crate::rl::config::GvpoConfig;
use burn::tensor::Tensor;

pub fn loss(c: &GvpoConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let g = batch.group_size;
    let n_groups = batch.n_resp() / g;
    let delta = batch
        .seq_sum(batch.logp.clone() - batch.constant(batch.logp_old.clone()))
        .reshape([n_groups, g]);
    let delta_c = delta.clone() - delta.mean_dim(1);
    let rc: Vec<f32> = batch
        .rewards
        .chunks_exact(g)
        .flat_map(|grp| {
            let m = grp.iter().sum::<f32>() / g as f32;
            grp.iter().map(move |r| r - m)
        })
        .collect();
    let rc = crate::util::tensors::floats(rc, [n_groups, g], &batch.device());
    squared_loss(delta_c * c.beta as f32 - rc, batch)
}

/// GVPO's loss of the residuals `rho` `[groups, G]`: `Σ ρ² / (2(G−1))` per group, weighted per
/// response by the stability fixes' sequence weights when any is on, averaged over groups; with
/// its statistics (GVPD shares it).
pub fn squared_loss(rho: Tensor<2>, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let [n_groups, g] = rho.dims();
    let mut sq = rho.powi_scalar(2);
    let tis_weight = batch.seq_weight();
    if let Some(tw) = &tis_weight {
        sq = sq * crate::util::tensors::floats(tw.clone(), [n_groups, g], &batch.device());
    }
    let loss = sq.sum() / (2.0 * (g as f32 - 1.0) * n_groups as f32);
    let stats = LossStats {
        kl_ref: None,
        tis_weight,
        router_shift: None,
        ..LossStats::unclipped(batch, &loss)
    };
    (loss, stats)
}
