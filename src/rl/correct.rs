//! The objective's loss with the stability fixes' weights ([`super::fixes`]) set on its batch,
//! and what they masked in its statistics.

use crate::rl::config::RlConfig;
use crate::rl::fixes;
use crate::rl::loss::{LossStats, PolicyBatch, policy_loss};

/// The skip reason of a minibatch whose every token the masking fixes masked.
pub const ALL_MASKED: &str = "every token masked by the corrections";

/// The objective's loss on `pb` with the fixes' weights (set on `pb`) and what they masked in
/// its statistics.
pub(super) fn corrected_loss(
    cfg: &RlConfig,
    pb: &mut PolicyBatch,
) -> (burn::tensor::Tensor<1>, LossStats) {
    let (weights, masked) = fixes::weigh(&cfg.fixes(), &pb.fix_batch());
    pb.fixes = weights;
    let (ploss, mut stats) = policy_loss(&cfg.algorithm, pb);
    stats.masked = masked;
    stats.all_masked = pb.fixes.all_masked();
    (ploss, stats)
}

#[cfg(test)]
mod tests;
