//! One contract for every objective: a [`PolicyBatch`] in, `(loss, LossStats)` out.

pub mod cispo;
pub mod contract;
pub mod gmpo;
pub mod grpo;
pub mod gspo;
pub mod gvpo;

pub use contract::{LossStats, PolicyBatch};

use super::config::{Algorithm, TisConfig};
use burn::tensor::Tensor;

/// The objective's loss (a `[1]` tensor with graph) and its statistics.
pub fn policy_loss(
    alg: &Algorithm,
    batch: &PolicyBatch,
    tis: Option<&TisConfig>,
) -> (Tensor<1>, LossStats) {
    match alg {
        Algorithm::Grpo(c) => grpo::loss(c, batch, tis),
        Algorithm::Gspo(c) => gspo::loss(c, batch, tis),
        Algorithm::GspoToken(c) => gspo::token_loss(c, batch, tis),
        Algorithm::Gvpo(c) => gvpo::loss(c, batch, tis),
        Algorithm::Cispo(c) => cispo::loss(c, batch, tis),
        Algorithm::Gmpo(c) => gmpo::loss(c, batch, tis),
    }
}
