//! The expert products of a MoE layer off the CPU backend: every expert's tokens in one padded
//! group, `[experts, capacity, d_model]`, and each of the SwiGLU's three products one batched
//! matmul over the groups against the experts' stacked weights — three launches a layer in place
//! of three per expert. Padding rows gather token 0 and a zero gate, so they add exact zeros.
//!
//! Flex keeps its per-expert products (`super::moe`'s dispatch and the fused node): there the
//! summed gradients of a token's k rows meet in the order they always did, bit for bit.

use super::weights::MoeWeights;
use crate::util::tensors::ints;
use burn::tensor::{Device, IndexingUpdateOp, Tensor};

/// The experts' SwiGLU weights stacked, `[experts, in, out]`: w1, w3 and w2.
pub(super) fn stacked(w: &MoeWeights) -> [Tensor<3>; 3] {
    let stack = |f: fn(&super::weights::SwiGlu) -> &Tensor<2>| {
        Tensor::stack::<3>(w.experts.iter().map(|e| f(e).clone()).collect(), 0)
    };
    [stack(|e| &e.w1), stack(|e| &e.w3), stack(|e| &e.w2)]
}

/// Token and gate-slot indices of the padded groups, `[experts · capacity]` each, and the
/// capacity: expert e's rows are `e · capacity ..`, its tokens in order, then padding (token 0,
/// and the gate slot `pad_slot`, one past the real ones, which holds a zero gate).
pub(super) fn padded_indices(
    by_expert: &[Vec<(usize, usize)>],
    pad_slot: usize,
) -> (Vec<usize>, Vec<usize>, usize) {
    let cap = by_expert.iter().map(Vec::len).max().unwrap_or(0);
    let mut toks = Vec::with_capacity(by_expert.len() * cap);
    let mut slots = Vec::with_capacity(by_expert.len() * cap);
    for list in by_expert {
        toks.extend(list.iter().map(|&(tok, _)| tok));
        slots.extend(list.iter().map(|&(_, s)| s));
        toks.extend(std::iter::repeat_n(0, cap - list.len()));
        slots.extend(std::iter::repeat_n(pad_slot, cap - list.len()));
    }
    (toks, slots, cap)
}

/// The experts' products added into `out` `[T, d_model]`: `x` `[T, d_model]`, `gates`
/// `[T · k, 1]` (slot `t · k + j` is token t's j-th expert), `by_expert` each expert's
/// (token, slot) list.
pub(super) fn padded_group_products(
    w: &MoeWeights,
    x: Tensor<2>,
    gates: Tensor<2>,
    by_expert: &[Vec<(usize, usize)>],
    out: Tensor<2>,
    device: &Device,
) -> Tensor<2> {
    let [_, d] = x.dims();
    let e_n = by_expert.len();
    let pad_slot = gates.dims()[0];
    let (toks, slots, cap) = padded_indices(by_expert, pad_slot);
    let rows = e_n * cap;
    let gates = Tensor::cat(vec![gates, Tensor::zeros([1, 1], device)], 0);
    let tok_idx = ints(&toks, [rows], device);
    let xg = x.select(0, tok_idx.clone()).reshape([e_n, cap, d]);
    let gg = gates.select(0, ints(&slots, [rows], device)); // [E·cap, 1]
    let [w1, w3, w2] = stacked(w);
    let d_ff = w1.dims()[2];
    let a1 = xg.clone().matmul(w1).reshape([rows, d_ff]);
    let a3 = xg.matmul(w3).reshape([rows, d_ff]);
    let h = crate::kernels::silu_mul(a1, a3).reshape([e_n, cap, d_ff]);
    let y = h.matmul(w2).reshape([rows, d]) * gg;
    out.select_assign(0, tok_idx, y, IndexingUpdateOp::Add)
}

#[cfg(test)]
mod tests {
    use super::padded_indices;

    #[test]
    fn padding_takes_token_zero_and_the_zero_gate() {
        let by_expert = vec![vec![(3, 6), (5, 11)], vec![], vec![(1, 3)]];
        let (toks, slots, cap) = padded_indices(&by_expert, 12);
        assert_eq!(cap, 2);
        assert_eq!(toks, vec![3, 5, 0, 0, 1, 0]);
        assert_eq!(slots, vec![6, 11, 12, 12, 3, 12]);
    }
}
