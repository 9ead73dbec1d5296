//! The small host forms of the CPU backend: RMS norm in one pass, the RoPE-extended QKV weights
//! moved instead of multiplied, `e^x` and `silu(a)·b` through the vectorised maths of
//! [`super::fastmath`]. Each is bitwise its reference form where the doc says so, or the one
//! value the CPU backend gives with and without a graph.

use super::fastmath;
use super::host_mm::host;
use crate::kernels::rope::{Rope, rot_source};
use crate::util::tensors::{floats, to_vec};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};

/// [`crate::kernels::rms_norm`] without a graph: one pass on the host instead of seven tensor
/// ops, bitwise the same. The ops it replaces are elementwise and correctly rounded (`x·x`,
/// `/ d`, `+ ε`, `sqrt`, `1 / ·`, `x·inv`, `·gain`, in that order) except the row sum, which is
/// the CPU backend's own row-sum kernel (what its `mean_dim` over the last dimension of a
/// contiguous tensor runs), so the lanes add up in its order. `None` with a graph.
pub fn rms_norm(x: &Tensor<2>, gain: &Tensor<2>, eps: f32) -> Option<Tensor<2>> {
    if x.is_autodiff() || gain.is_autodiff() {
        return None;
    }
    let [n, d] = x.dims();
    let prim = |t: &Tensor<2>| t.clone().try_into_primitive::<Flex>().ok();
    let (xp, gp) = (prim(x)?, prim(gain)?);
    // `host` reads a contiguous tensor in place and copies any other.
    let (x, g) = (host(&xp), host(&gp));
    assert_eq!(
        g.len(),
        d,
        "rms_norm gain has {} entries for width {d}",
        g.len()
    );
    let sq: Vec<f32> = x.iter().map(|v| v * v).collect();
    let mut sums = vec![0.0f32; n];
    if n > 0 && d > 0 {
        burn_flex::simd::kernels::sum_rows_f32(&sq, &mut sums, n, d);
    }
    let mut out = sq;
    for ((o, row), s) in out
        .chunks_exact_mut(d.max(1))
        .zip(x.chunks_exact(d.max(1)))
        .zip(&sums)
    {
        let inv = 1.0 / (s / d as f32 + eps).sqrt();
        for ((o, &v), &g) in o.iter_mut().zip(row).zip(g.iter()) {
            *o = v * inv * g;
        }
    }
    let out = FlexTensor::from_data(TensorData::new(out, [n, d]));
    Some(Tensor::from_primitive::<Flex>(out))
}

/// [`crate::kernels::extend_qkv`] without a graph, the rotated blocks moved and negated instead
/// of multiplied, bitwise the product: each of its outputs is one chain of fused multiply-adds
/// from +0 over the `2·d_model` rows of `R` (one block, on gemm's general path) whose only
/// non-zero term is `±w`, so it is exactly `±w`, and +0 where `w` is ±0 (`+0 + −0 = +0`);
/// `0 − w` and `w + 0` give exactly that. `None` with a graph, or where a weight is not finite
/// (`∞·0` would spread a NaN through the product's other columns).
pub fn extend_qkv(rope: &Rope, wqkv: &Tensor<2>) -> Option<Tensor<2>> {
    if wqkv.is_autodiff() {
        return None;
    }
    let [d, d3] = wqkv.dims();
    let p = wqkv.clone().try_into_primitive::<Flex>().ok()?;
    let w = host(&p);
    if d3 != 3 * d || !w.iter().all(|v| v.is_finite()) {
        return None;
    }
    let mut ext = Vec::with_capacity(d * 5 * d);
    for row in w.chunks_exact(d3) {
        ext.extend_from_slice(row);
        ext.extend((0..2 * d).map(|out| match rot_source(out, rope.head_dim) {
            (src, true) => 0.0 - row[src],
            (src, false) => row[src] + 0.0,
        }));
    }
    // Built on the host as the product's output is: no upload to count.
    let ext = FlexTensor::from_data(TensorData::new(ext, [d, 5 * d]));
    Some(Tensor::from_primitive::<Flex>(ext))
}

/// `e^x` through [`fastmath::exp_in_place`] (flex's `exp` is scalar libm), built under autodiff
/// as `c + c ⊙ (x − sg(x))` with the constant `c = e^x`: its value is exactly `c` and its
/// gradient exactly `c`. The value is the same with and without autodiff.
pub fn exp<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let dims = x.dims();
    let device = x.device().inner();
    if !x.is_autodiff() {
        // No graph: the input is read by move (no copy where nothing else holds it) and
        // exponentiated in place.
        let mut v = to_vec(x);
        fastmath::exp_in_place(&mut v);
        return floats(v, dims, &device);
    }
    let xc = x.clone().inner();
    let mut e = to_vec(xc.clone());
    fastmath::exp_in_place(&mut e);
    let c = floats(e, dims, &device).autodiff();
    c.clone() + c * (x - xc.autodiff())
}

/// `silu(a1) ⊙ a3` without a graph, on the host: both inputs are read by move (no copy where
/// nothing else holds them).
pub fn silu_mul_plain(a1: Tensor<2>, a3: Tensor<2>) -> Tensor<2> {
    let dims = a1.dims();
    let device = a1.device().inner();
    let (x1, x3) = (to_vec(a1.inner()), to_vec(a3.inner()));
    floats(fastmath::silu_mul_vec(&x1, &x3), dims, &device)
}

/// `silu(a1) ⊙ a3` with a graph where the one-node form does not apply (checkpointing): the
/// constants `c1 = a3 ⊙ silu'(a1)`, `c3 = silu(a1)` on the host, then the tensor form
/// `(a1 − sg(a1)) ⊙ c1 + a3 ⊙ c3`, whose value is exactly the no-graph value.
pub fn silu_mul_consts_form(a1: Tensor<2>, a3: Tensor<2>) -> Tensor<2> {
    let dims = a1.dims();
    let device = a1.device().inner();
    let x1 = to_vec(a1.clone().inner());
    let x3 = to_vec(a3.clone().inner());
    let (c1, c3) = fastmath::silu_mul_consts_vec(&x1, &x3);
    let c1 = floats(c1, dims, &device).autodiff();
    let c3 = floats(c3, dims, &device).autodiff();
    let a1c = a1.clone().inner().autodiff();
    (a1 - a1c) * c1 + a3 * c3
}
