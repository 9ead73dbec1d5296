//! A MoE layer whose routes stay on the device: the rollout engine's decoding steps off the CPU
//! backend (`ForwardOptions::routes_on_device`), which otherwise read every router's scores back
//! for the host's top-k — one round trip per layer and decoding step. (The prompts' forward,
//! once a generation and many tokens, keeps the host's routes and sparse products.)
//!
//! The top-k is the host's ([`super::moe::native_topk`]) computed by ranks: expert e's rank is
//! the number of experts that beat it, strictly or by an equal score at a lower id, so the same
//! scores give the same ids in the same order, ties included. The experts then run densely: every
//! expert on every token, weighted by a gate matrix that is zero outside each token's k experts
//! (and on inactive tokens) — on a GPU's small decoding batches, a few batched matmuls with no
//! read back beat a host-built dispatch. The products are the sparse path's up to float
//! summation order; the ids, `[tokens, k]`, are returned on the device for the caller to read
//! once per generation. No trace, no load-balancing or z-loss terms: what a generation needs.

use super::config::{ModelConfig, RouterKind};
use super::moe::{LayerRouting, active_mask, router_logits, router_scores, silu_mul, swiglu};
use super::weights::MoeWeights;
use crate::util::tensors::floats;
use burn::tensor::{Int, Tensor};

/// Whether a layer's routing controls allow the device path: no forced ids, no replay filter, no
/// router input or repeats asked for (a generation's options).
pub fn allows(r: &LayerRouting<'_>) -> bool {
    r.forced.is_none() && r.replay_filter.is_none() && !r.want_input && r.repeats.is_none()
}

/// Each expert's rank in its row of `scores` `[T, E]` (0 = best): the experts with a higher
/// score, plus those with an equal score and a lower id, as [`super::moe::native_topk`] orders.
pub fn ranks(scores: Tensor<2>) -> Tensor<2, Int> {
    let [t, e] = scores.dims();
    let device = scores.device();
    let mine = scores.clone().reshape([t, e, 1]).expand([t, e, e]);
    let other = scores.reshape([t, 1, e]).expand([t, e, e]);
    // [1, e, e]: whether the other expert's id (last axis) is below this one's (middle axis);
    // made on the device, no upload per layer and step.
    let id = Tensor::<1, Int>::arange(0..e as i64, &device);
    let lower = (id.clone().reshape([1, 1, e]).expand([1, e, e]))
        .lower(id.reshape([1, e, 1]).expand([1, e, e]))
        .expand([t, e, e]);
    let beats = other.clone().greater(mine.clone()).int();
    let ties_below = other.equal(mine).bool_and(lower).int();
    (beats + ties_below).sum_dim(2).reshape([t, e])
}

/// The ids of ranks `0..k`, `[T, k]`, from [`ranks`].
pub fn ids_of_ranks(ranks: Tensor<2, Int>, k: usize) -> Tensor<2, Int> {
    let [t, e] = ranks.dims();
    let device = ranks.device();
    let ids = Tensor::<1, Int>::arange(0..e as i64, &device)
        .reshape([1, e])
        .expand([t, e]);
    let slots = (0..k)
        .map(|j| {
            ranks
                .clone()
                .equal_elem(j as i64)
                .int()
                .mul(ids.clone())
                .sum_dim(1)
        })
        .collect();
    Tensor::cat(slots, 1)
}

/// The layer on `x` `[T, d_model]`: its output and the used (native) ids `[T, k]`, on the device.
pub fn moe_forward_on_device(
    w: &MoeWeights,
    cfg: &ModelConfig,
    x: Tensor<2>,
    active: &[bool],
    routing: &LayerRouting<'_>,
) -> (Tensor<2>, Tensor<2, Int>) {
    let [t, d] = x.dims();
    let (e_n, k) = (cfg.n_experts, cfg.top_k);
    let device = x.device();
    let logits = router_logits(w, &x, routing);
    let (gate_src, probs) = router_scores(cfg, logits.clone());
    let shifted = || {
        (routing.choice_offset.as_ref())
            .map(|off| logits.clone() + floats(off.clone(), [t, e_n], &device))
    };
    let scores = match cfg.router {
        RouterKind::Softmax => shifted().unwrap_or(probs),
        RouterKind::SigmoidBias => {
            let s = shifted().map_or(gate_src.clone(), burn::tensor::activation::sigmoid);
            s + floats(w.bias.clone(), [1, e_n], &device)
        }
    };
    let rank = ranks(scores);
    let chosen = rank.clone().lower_elem(k as i64).float(); // [T, E]
    let mut gates = gate_src * chosen;
    if cfg.norm_topk {
        gates = gates.clone() / gates.sum_dim(1);
    }
    let mask = active_mask(active, &device);
    let gates = gates * mask.clone(); // [T, E]
    let [w1, w3, w2] = super::expert_groups::stacked(w);
    let d_ff = w1.dims()[2];
    let xs = x.clone().reshape([1, t, d]).expand([e_n, t, d]);
    let a1 = xs.clone().matmul(w1).reshape([e_n * t, d_ff]);
    let a3 = xs.matmul(w3).reshape([e_n * t, d_ff]);
    let h = silu_mul(a1, a3).reshape([e_n, t, d_ff]);
    let g = gates.transpose().reshape([e_n, t, 1]);
    let mut out = (h.matmul(w2) * g).sum_dim(0).reshape([t, d]);
    if let Some(shared) = &w.shared {
        out = out + swiglu(shared, x) * mask;
    }
    (out, ids_of_ranks(rank, k))
}

#[cfg(test)]
mod tests {
    use super::{ids_of_ranks, ranks};
    use crate::model::moe::native_topk;
    use crate::util::tensors::{floats, to_vec};

    /// The device top-k gives the host's ids in the host's order, ties to the lower id.
    #[test]
    fn ranks_give_the_host_top_k_ties_included() {
        let device = crate::device::DeviceChoice::Flex.device().unwrap();
        let (t, e) = (5, 6);
        let scores: Vec<f32> = vec![
            0.1, 0.5, 0.2, 0.5, 0.0, 0.3, // a tie at the top
            0.2, 0.2, 0.2, 0.2, 0.2, 0.2, // all tied
            -1.0, 3.0, 2.0, 1.0, 0.0, 4.0, // distinct
            0.3, 0.1, 0.3, 0.1, 0.3, 0.1, // ties across the k-th place
            0.0, 0.0, 0.0, 0.0, 0.0, 1.0,
        ];
        for k in 1..=e {
            let r = ranks(floats(scores.clone(), [t, e], &device));
            let ids: Vec<u16> = to_vec(ids_of_ranks(r, k).float())
                .iter()
                .map(|&x| x as u16)
                .collect();
            assert_eq!(ids, native_topk(&scores, e, k), "k = {k}");
        }
    }
}
