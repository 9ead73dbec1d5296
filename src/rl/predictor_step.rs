//! PR²'s training step on one minibatch (Eq. 8 of arXiv 2606.00395 as its authors' code
//! computes it; see [`super::predictor`]), from the π_old pass and the update's forwards.

use super::micro::{Batch, MicroForward};
use super::old::OldPolicy;
use super::predictor::Predictor;

/// One PR² step on minibatch `m`: per layer, the token-weighted mean over its micro-batches of
/// KL(live router ‖ prediction) and its gradient, then Adam. Returns the loss summed over
/// layers (Eq. 8).
pub(super) fn train_predictor(
    p: &mut Predictor,
    b: &Batch,
    old: &OldPolicy,
    parts: &[MicroForward],
    m: usize,
    lr: f64,
) -> f64 {
    let n = parts.len();
    let layers = p.w.len();
    let mut grads = vec![vec![0f32; p.w[0].len()]; layers];
    let mut loss = 0.0;
    let valid = |j: usize| &b.micros[m * n + j].batch.valid;
    let total: usize = (0..n)
        .map(|j| valid(j).iter().filter(|&&v| v).count())
        .sum();
    for (j, part) in parts.iter().enumerate() {
        let o = &old.passes[m * n + j];
        let w = valid(j).iter().filter(|&&v| v).count() as f64 / total.max(1) as f64;
        for (l, g) in grads.iter_mut().enumerate() {
            let (kl, gl) = p.loss_grad(
                l,
                &o.inputs[l],
                &o.probs[l],
                &part.probs_before[l],
                valid(j),
            );
            loss += w * kl;
            for (a, x) in g.iter_mut().zip(gl) {
                *a += (w as f32) * x;
            }
        }
    }
    p.step(&grads, lr);
    loss
}
