//! The CPU backend's forms held against each other and against the reference, bit for bit.

use super::flex::host_ops;
use super::{Rope, reference};
use crate::util::tensors::{floats, to_vec};
use burn::tensor::{Device, Tensor};

/// The CPU backend's one-node RoPE, split and core from the projection gives bitwise the
/// tensor path's RoPE and slices followed by the core node: values and the projection's
/// gradient (a weighting with zeros, so signed zeros reach the slices' sums).
#[test]
fn the_projection_node_is_bitwise_rope_slices_and_the_core() {
    use super::flex::attn_core::{attention_core, attention_qkv};
    let device = Device::flex();
    let (b, s, d, h) = (3, 6, 64, 4); // the toy preset's width and heads
    let rope = Rope::new((160, h, d / h), 10_000.0, &device);
    let vals: Vec<f32> = (0..b * s * 5 * d)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
        .collect();
    let valid: Vec<bool> = (0..b * s).map(|i| i % 4 != 0).collect();
    let wts: Vec<f32> = (0..b * s * d).map(|i| (i % 7) as f32 - 3.0).collect();
    let run = |node: bool| {
        let qkv = floats(vals.clone(), [b, s, 5 * d], &device)
            .autodiff()
            .require_grad();
        let ctx = if node {
            attention_qkv(&qkv, (&rope.cos, &rope.sin), h, &valid, 0).expect("applies")
        } else {
            let part = |i: usize| qkv.clone().slice([0..b, 0..s, i * d..(i + 1) * d]);
            let q = rope.apply(part(0), part(3), 0);
            let k = rope.apply(part(1), part(4), 0);
            attention_core(&q, &k, &part(2), h, &valid, 0).expect("applies")
        };
        let out = to_vec(ctx.clone().inner());
        let w = floats(wts.clone(), [b, s, d], &ctx.device());
        let grads = (ctx * w).sum().backward();
        let g = to_vec(qkv.grad(&grads).expect("a gradient"));
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        (bits(out), bits(g))
    };
    let (a, b2) = (run(true), run(false));
    assert_eq!(a.0, b2.0, "values");
    assert_eq!(a.1, b2.1, "the projection's gradient");
}

/// The moved extension is the product's, bit for bit, on weights with exact zeros of both
/// signs among random values; a non-finite weight leaves it to the product.
#[test]
fn the_moved_extension_is_the_product() {
    let device = Device::flex();
    // The toy and the deep presets' widths and heads.
    for (d, heads) in [(64, 4), (128, 4)] {
        let rope = Rope::new((160, heads, d / heads), 10_000.0, &device);
        let mut w: Vec<f32> = (0..d * 3 * d)
            .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 97.0)
            .collect();
        for (i, v) in w.iter_mut().enumerate().step_by(13) {
            *v = if i % 2 == 0 { 0.0 } else { -0.0 };
        }
        let wqkv = floats(w.clone(), [d, 3 * d], &device);
        let moved = host_ops::extend_qkv(&rope, &wqkv).expect("applies without a graph");
        let product = reference::extend_qkv(&rope, wqkv);
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
        assert_eq!(bits(to_vec(moved)), bits(to_vec(product)), "d {d}");
        w[5] = f32::INFINITY;
        let inf = floats(w, [d, 3 * d], &device);
        assert!(host_ops::extend_qkv(&rope, &inf).is_none());
    }
}

#[test]
fn host_exp_has_the_value_and_gradient_of_exp() {
    let device = Device::flex();
    let v: Vec<f32> = (0..24).map(|i| i as f32 * 0.37 - 6.0).collect();
    let plain = to_vec(super::exp(floats(v.clone(), [4, 6], &device)));
    let x = floats(v.clone(), [4, 6], &device.clone().autodiff()).require_grad();
    let y = super::exp(x.clone());
    // Same value with and without autodiff, within 4 ulp of libm's.
    assert_eq!(to_vec(y.clone().inner()), plain);
    for (a, b) in plain.iter().zip(&v) {
        assert!(
            (a - b.exp()).abs() <= 4.0 * f32::EPSILON * b.exp(),
            "{a} vs {}",
            b.exp()
        );
    }
    // d/dx Σ w ⊙ e^x = w ⊙ e^x.
    let w: Vec<f32> = (0..24).map(|i| 1.0 + i as f32 * 0.1).collect();
    let grads = (y * floats(w.clone(), [4, 6], &device.clone().autodiff()))
        .sum()
        .backward();
    let g = to_vec(x.grad(&grads).expect("gradient"));
    for i in 0..24 {
        assert_eq!(g[i], w[i] * plain[i], "element {i}");
    }
}

/// The host norm is bitwise the tensor ops' norm, and each tensor's host sum of squares is
/// bitwise `powi_scalar(2).sum()`: lengths with and without whole blocks of eight vectors, a
/// scalar tail, a lone value, exact zeros of both signs, tiny and huge values. It fails if
/// the accumulators are combined in another order (checked by mutation when written).
#[test]
fn the_host_norm_is_the_tensor_norm() {
    let device = Device::flex();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let shapes = [
        [1, 1],
        [3, 5],
        [3, 17],
        [5, 50],
        [16, 8],
        [128, 128],
        [7, 129],
        [256, 67],
    ];
    for dims in shapes {
        let grads: Vec<Tensor<2>> = [1.0, -0.0, 0.0, 1e-20, 1e15, 3e-3]
            .iter()
            .enumerate()
            .map(|(i, &scale)| {
                let mut v: Vec<f32> = (0..dims[0] * dims[1]).map(|_| next() * scale).collect();
                if i == 0 {
                    v.iter_mut().step_by(3).for_each(|x| *x = -0.0);
                }
                floats(v, dims, &device)
            })
            .collect();
        let sums = super::flex::squares::host_sums(&grads).expect("host tensors");
        for (g, s) in grads.iter().zip(&sums) {
            let t = crate::util::tensors::to_vec(g.clone().powi_scalar(2).sum())[0];
            assert_eq!(s.to_bits(), t.to_bits(), "{dims:?}: {s} vs {t}");
        }
        let (host, tensor) = (super::global_norm(&grads), reference::global_norm(&grads));
        assert_eq!(
            host.to_bits(),
            tensor.to_bits(),
            "{dims:?}: {host} vs {tensor}"
        );
    }
}
