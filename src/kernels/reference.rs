//! The reference form of every kernel: plain burn tensor ops, on any device, with and without a
//! graph. This is the maths the model means; the CPU backend's nodes in [`super::flex`] compute
//! the same numbers (bit for bit where their docs say so) and are held against these forms in
//! the tests.

use super::mask::Mask;
use super::rope::Rope;
use crate::util::tensors::to_vec;
use burn::tensor::Tensor;

/// `x / sqrt(mean(x²) + eps) · gain`, row by row.
pub fn rms_norm(x: Tensor<2>, gain: &Tensor<2>, eps: f32) -> Tensor<2> {
    let inv = (x.clone().powi_scalar(2).mean_dim(1) + eps).sqrt().recip(); // [N, 1]
    x * inv * gain.clone()
}

/// `[W_qkv | W_q·R | W_k·R]`, `[d_model, 5·d_model]`, from `W_qkv` `[d_model, 3·d_model]`:
/// the product by RoPE's signed permutation `R`.
pub fn extend_qkv(rope: &Rope, wqkv: Tensor<2>) -> Tensor<2> {
    let [d, d3] = wqkv.dims();
    let wqk = wqkv.clone().slice([0..d, 0..2 * d3 / 3]);
    Tensor::cat(vec![wqkv, wqk.matmul(rope.rot_qk.clone())], 1)
}

/// The attention context `[b, s, d]` of q `[b, s, d]` over k and v `[b, kv, d]` with `heads`
/// heads: `softmax(q·kᵀ/√hd + mask)·v` per head, masked weights exactly 0.
pub fn attention_core(
    q: Tensor<3>,
    k: Tensor<3>,
    v: Tensor<3>,
    heads: usize,
    mask: &Mask<'_>,
) -> Tensor<3> {
    let [batch, s, d] = q.dims();
    let hd = d / heads;
    let split = |t: Tensor<3>| {
        let [_, len, _] = t.dims();
        t.reshape([batch, len, heads, hd]).swap_dims(1, 2) // [B, H, len, hd]
    };
    let (q, k, v) = (split(q), split(k), split(v));
    let m = mask.tensors();
    let scores = q.matmul(k.swap_dims(2, 3)) * (1.0 / (hd as f32).sqrt()) + m.additive.clone(); // [B, H, S, KV]
    let mx = scores.clone().detach().max_dim(3);
    let e = (scores - mx).exp() * m.keep.clone();
    let ctx = (e.clone() / e.sum_dim(3)).matmul(v); // [B, H, S, hd]
    ctx.swap_dims(1, 2).reshape([batch, s, d])
}

/// `silu(a1) ⊙ a3`. Without a graph `a3 ⊙ (a1 ⊙ σ(a1))`; with one, built so that the backward
/// needs no `exp`: the sigmoid is evaluated once on constants and the result is
/// `(a1 − sg(a1)) ⊙ c1 + a3 ⊙ c3` with `c3 = silu(a1)` and `c1 = a3 ⊙ silu'(a1)`,
/// `silu'(a) = σ(a)(1 + a(1 − σ(a)))` (sg = stop-gradient). Its value is exactly the no-graph
/// value (the first term is exactly zero, the same operations in the same order) and its
/// gradients are the exact first derivatives.
pub fn silu_mul(a1: Tensor<2>, a3: Tensor<2>) -> Tensor<2> {
    use burn::tensor::activation::sigmoid;
    if !a1.is_autodiff() && !a3.is_autodiff() {
        return a3 * (a1.clone() * sigmoid(a1));
    }
    let (a1c, a3c) = (a1.clone().inner(), a3.clone().inner());
    let s = sigmoid(a1c.clone());
    let c3 = a1c.clone() * s.clone();
    let c1 = a3c * (s.clone() + a1c.clone() * s.clone() * (s.neg() + 1.0));
    let (c1, c3, a1c) = (c1.autodiff(), c3.autodiff(), a1c.autodiff());
    (a1 - a1c) * c1 + a3 * c3
}

/// Softmax along `dim`, from primitive ops. burn's own softmax takes a different path with
/// autodiff than without, which changes the last bit; this one gives bitwise-identical values
/// with and without autodiff, so a no-graph recompute of π_old equals the first update's forward.
pub fn softmax<const D: usize>(x: Tensor<D>, dim: usize) -> Tensor<D> {
    let m = x.clone().detach().max_dim(dim);
    let e = (x - m).exp();
    e.clone() / e.sum_dim(dim)
}

/// Log-softmax along `dim` (same construction as [`softmax`]).
pub fn log_softmax<const D: usize>(x: Tensor<D>, dim: usize) -> Tensor<D> {
    let m = x.clone().detach().max_dim(dim);
    let shifted = x - m;
    shifted.clone() - shifted.exp().sum_dim(dim).log()
}

/// The global L2 norm of `grads`: each tensor's `Σ g²` (in parallel when the pool has threads
/// to spare), combined in order.
pub fn global_norm(grads: &[Tensor<2>]) -> f32 {
    let sq: Vec<Tensor<1>> =
        crate::util::parallel::par_map(grads.len(), |i| grads[i].clone().powi_scalar(2).sum());
    to_vec(Tensor::cat(sq, 0).sum())[0].sqrt()
}
