//! One contract for every objective: a [`PolicyBatch`] in, `(loss, LossStats)` out.

pub mod cispo;
pub mod contract;
pub mod gmpo;
pub mod grpo;
pub mod gspo;
pub mod gvpo;
pub mod opd;

pub use contract::{LossStats, PolicyBatch, TeacherBatch};

use super::config::{Aggregation, Algorithm};
use burn::tensor::Tensor;

/// The objective's loss (a `[1]` tensor with graph) and its statistics.
pub fn policy_loss(alg: &Algorithm, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    match alg {
        Algorithm::Grpo(c) => grpo::loss(c, batch),
        Algorithm::Gspo(c) => gspo::loss(c, batch),
        Algorithm::GspoToken(c) => gspo::token_loss(c, batch),
        Algorithm::Gvpo(c) => gvpo::loss(c, batch),
        Algorithm::Cispo(c) => cispo::loss(c, batch),
        Algorithm::Gmpo(c) => gmpo::loss(c, batch),
        Algorithm::Gvpd(c) => opd::gvpd::objective(c, batch, batch.teacher_logp()),
        Algorithm::OpdPg(c) => opd::pg::objective(c, batch, batch.teacher_logp()),
        Algorithm::OpdKl(c) => opd::jsd::objective(c, batch),
    }
}

/// Weight of a micro-batch's loss in the loss of its minibatch (`rows`, `tokens` in all): the
/// share of the objective's averaging units it holds (tokens for CISPO, full-vocabulary OPD and
/// GRPO or PG-OPD with `token_mean`, responses for everything else, which also covers GVPO's
/// and GVPD's mean over equal-sized groups), so
/// that the weighted sum of the micro-batch losses is the minibatch loss, and the sum of their
/// weighted gradients its gradient.
pub fn micro_share(alg: &Algorithm, part: &PolicyBatch, rows: usize, tokens: usize) -> f32 {
    match alg {
        Algorithm::Grpo(c) if c.aggregation == Aggregation::TokenMean => {
            part.n_tok() as f32 / tokens as f32
        }
        Algorithm::OpdPg(c) if c.aggregation == Aggregation::TokenMean => {
            part.n_tok() as f32 / tokens as f32
        }
        Algorithm::Cispo(_) | Algorithm::OpdKl(_) => part.n_tok() as f32 / tokens as f32,
        _ => part.n_resp() as f32 / rows as f32,
    }
}
