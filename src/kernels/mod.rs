//! The kernels: every op whose fast form on the CPU backend differs from its plain burn form,
//! behind one surface that [`crate::model`], [`crate::rl`], [`crate::generate`] and
//! [`crate::optim`] call. Each op chooses here, and only here, between
//! - its **reference** form ([`reference`]: plain burn tensor ops, any device, the maths the
//!   model means), and
//! - its **flex** form ([`flex`]: hand-written nodes on host slices for the CPU backend, with
//!   their own backward where a graph runs through them),
//!
//! by one rule ([`fast`]): the flex form runs on the CPU backend unless a test forced the
//! reference ([`hooks::force_reference`]), where the node supports the tensors' graph and shape;
//! otherwise the reference runs. Every flex run is counted on the calling thread
//! ([`hooks::Node`]), so a test can prove which path ran. The rules that keep the flex forms
//! bitwise the reference (gemm's paths, burn-flex's summation order) are named once, in
//! [`gemm_paths`].
//!
//! A researcher changing the model changes the reference form (and, where the change touches a
//! flex node, turns that node off for the new shape by returning `None` from it, or forces the
//! reference while trying it); the model's files never see a backend.

pub mod flex;
pub mod gemm_paths;
pub mod hooks;
pub mod mask;
pub mod reference;
pub mod rope;
#[cfg(all(test, feature = "flex"))]
mod tests;

pub use mask::{AttnMask, LayerCache, MASK_SHIFT, Mask, causal_mask};
pub use rope::{Rope, rot_source};

use burn::tensor::{Device, Tensor};
use hooks::Node;
use std::ops::Range;

/// The one choice of path: `node`'s flex form `run` where it applies on `device` — the CPU
/// backend, the reference not forced on this thread, and `run` accepting the tensors (it
/// returns `None` for a graph or a shape it does not support) — counted on this thread;
/// `None` otherwise, and the caller takes the reference form.
#[cfg(feature = "flex")]
fn fast<T>(node: Node, device: &Device, run: impl FnOnce() -> Option<T>) -> Option<T> {
    if hooks::is_on(hooks::Switch::Reference) || !crate::util::tensors::is_host(device) {
        return None;
    }
    let out = run()?;
    hooks::count(node, 1);
    Some(out)
}

#[cfg(not(feature = "flex"))]
fn fast<T>(_: Node, _: &Device, _: impl FnOnce() -> Option<T>) -> Option<T> {
    None
}

/// `x / sqrt(mean(x²) + eps) · gain` row by row ([`reference::rms_norm`]).
pub fn rms_norm(x: Tensor<2>, gain: &Tensor<2>, eps: f32) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if let Some(y) = fast(Node::RmsNorm, &x.device(), || {
        flex::host_ops::rms_norm(&x, gain, eps)
    }) {
        return y;
    }
    reference::rms_norm(x, gain, eps)
}

/// `[W_qkv | W_q·R | W_k·R]` ([`reference::extend_qkv`]).
pub fn extend_qkv(rope: &Rope, wqkv: Tensor<2>) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if let Some(y) = fast(Node::ExtendQkv, &wqkv.device(), || {
        flex::host_ops::extend_qkv(rope, &wqkv)
    }) {
        return y;
    }
    reference::extend_qkv(rope, wqkv)
}

/// The extended QKV projection `x·w_ext` `[n, 5d]` of `x` `[n, d]` (q, k, v, rot q, rot k).
pub fn project_qkv(x: &Tensor<2>, w_ext: &Tensor<2>, heads: usize) -> Tensor<2> {
    #[cfg(feature = "flex")]
    if let Some(y) = fast(Node::Projection, &x.device(), || {
        flex::attn_core::project_extended(x, w_ext, heads)
    }) {
        return y;
    }
    let _ = heads;
    x.clone().matmul(w_ext.clone())
}

/// Self-attention's context `[b, s, d]` from the extended projection `qkv` `[b, s, 5d]`: RoPE
/// on q and k, the keys and values appended to `cache` when given (`cap` positions at most),
/// then `softmax(q·kᵀ/√hd + mask)·v` per head ([`reference::attention_core`]).
pub fn attention(
    qkv: &Tensor<3>,
    rope: &Rope,
    heads: usize,
    mask: &Mask<'_>,
    cache: Option<&mut LayerCache>,
    cap: usize,
) -> Tensor<3> {
    let [b, s, d5] = qkv.dims();
    let (d, pos0, device) = (d5 / 5, mask.pos0, qkv.device());
    #[cfg(feature = "flex")]
    if cache.is_none()
        && let Some(ctx) = fast(Node::AttnQkv, &device, || {
            flex::attn_core::attention_qkv(qkv, (&rope.cos, &rope.sin), heads, mask.key_valid, pos0)
        })
    {
        return ctx;
    }
    let part = |i: usize| qkv.clone().slice([0..b, 0..s, i * d..(i + 1) * d]);
    let q = rope.apply(part(0), part(3), pos0); // [B, S, D]
    let (mut k, mut v) = (rope.apply(part(1), part(4), pos0), part(2));
    if let Some(c) = cache {
        #[cfg(feature = "flex")]
        if c.k.is_none() {
            let ctx = fast(Node::AttnCached, &device, || {
                let (valid, host) = (mask.key_valid, &mut c.host);
                flex::attn_core::attention_cached(&q, &k, &v, heads, valid, pos0, host, cap)
            });
            if let Some(ctx) = ctx {
                return ctx;
            }
            assert!(
                c.host.is_empty(),
                "a layer's cache started on the CPU backend's host path"
            );
        }
        let _ = cap;
        if let (Some(pk), Some(pv)) = (c.k.take(), c.v.take()) {
            k = Tensor::cat(vec![pk, k], 1);
            v = Tensor::cat(vec![pv, v], 1);
        }
        c.k = Some(k.clone());
        c.v = Some(v.clone());
    }
    #[cfg(feature = "flex")]
    if let Some(ctx) = fast(Node::AttnCore, &device, || {
        flex::attn_core::attention_core(&q, &k, &v, heads, mask.key_valid, pos0)
    }) {
        return ctx;
    }
    reference::attention_core(q, k, v, heads, mask)
}

/// The attention context `[b·s, d]` (no graph) of `b` rows of `s` positions whose queries, keys
/// and values come from compact rows: position `r` reads row `src[r]` of the extended
/// projection `qkv` `[c, 5d]`; row `i` computes the queries `spans[i]` ([`node_spans`]). Only
/// the CPU backend has this form; `None` elsewhere, and the caller runs the full forward.
pub fn attention_shared(
    qkv: &Tensor<2>,
    src: &[usize],
    rope: &Rope,
    (b, s, heads): (usize, usize, usize),
    key_valid: &[bool],
    spans: Vec<Range<usize>>,
) -> Option<Vec<f32>> {
    #[cfg(feature = "flex")]
    return fast(Node::AttnShared, &qkv.device(), || {
        let tables = (&rope.cos, &rope.sin);
        flex::attn_core::attention_shared(qkv, src, tables, (b, s, heads), key_valid, spans)
    });
    #[cfg(not(feature = "flex"))]
    {
        let _ = (qkv, src, rope, b, s, heads, key_valid, spans);
        None
    }
}

/// The queries the attention node computes per row of `b` rows of `s` positions (`key_valid`
/// `[b·s]`, `d` columns in `heads` heads), and the fewest a span must hold to keep gemm's
/// general path ([`gemm_paths::fewest_queries`]). Every query without the CPU backend.
pub fn node_spans(
    key_valid: &[bool],
    (b, s, d, heads): (usize, usize, usize, usize),
) -> (Vec<Range<usize>>, usize) {
    #[cfg(feature = "flex")]
    return flex::attn_core::node_spans(key_valid, (b, s, d, heads));
    #[cfg(not(feature = "flex"))]
    {
        let _ = (key_valid, d, heads);
        (vec![0..s; b], gemm_paths::fewest_queries(s))
    }
}

/// The routed experts' output `[t, d]` of `x` `[t, d]` with gates `[t, k]` over the `used` ids,
/// per expert `[W1, W3, W2]`, as one fused node (with a graph) or one host pass (without);
/// `repeats`: how many batch rows each row stands for (a compact forward). `None` where no
/// fused form applies: the caller runs the sparse products, the model's reference.
pub fn fused_experts(
    x: Tensor<2>,
    gate: Tensor<2>,
    w: &[[Tensor<2>; 3]],
    (used, repeats): (&[u16], Option<&[usize]>),
    active: &[bool],
) -> Option<Tensor<2>> {
    #[cfg(feature = "flex")]
    {
        let device = x.device();
        if x.is_autodiff() {
            return fast(Node::FusedExperts, &device, || {
                flex::fused::fused_experts(x, gate, w, used, active)
            });
        }
        fast(Node::PlainExperts, &device, || {
            flex::fused::fused_experts_plain(x, gate, w, (used, repeats), active)
        })
    }
    #[cfg(not(feature = "flex"))]
    {
        let _ = (x, gate, w, used, repeats, active);
        None
    }
}

/// `silu(a1) ⊙ a3` ([`reference::silu_mul`]). On the CPU backend the sigmoid is the host's
/// vectorised one (flex's `exp` is scalar libm), as one node with a graph; either way the value
/// is the same with and without a graph on one device.
pub fn silu_mul(a1: Tensor<2>, a3: Tensor<2>) -> Tensor<2> {
    #[cfg(feature = "flex")]
    {
        let device = a1.device();
        if !a1.is_autodiff() && !a3.is_autodiff() {
            let mut ins = Some((a1, a3));
            if let Some(y) = fast(Node::SiluHost, &device, || {
                let (a1, a3) = ins.take()?;
                Some(flex::host_ops::silu_mul_plain(a1, a3))
            }) {
                return y;
            }
            let (a1, a3) = ins.expect("the inputs stay where the host form did not run");
            return reference::silu_mul(a1, a3);
        }
        if let Some(y) = fast(Node::SiluNode, &device, || {
            flex::silu_node::silu_mul_tracked(&a1, &a3)
        }) {
            return y;
        }
        if let Some(y) = fast(Node::SiluHost, &device, || {
            Some(flex::host_ops::silu_mul_consts_form(a1.clone(), a3.clone()))
        }) {
            return y;
        }
    }
    reference::silu_mul(a1, a3)
}

/// `e^x` elementwise; on the CPU backend through the host's vectorised `exp`, the same value
/// with and without a graph.
pub fn exp<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let device = x.device();
    let mut input = Some(x);
    #[cfg(feature = "flex")]
    if let Some(y) = fast(Node::Exp, &device, || {
        Some(flex::host_ops::exp(input.take()?))
    }) {
        return y;
    }
    let _ = device;
    input
        .expect("the input stays where the host form did not run")
        .exp()
}

pub use reference::{log_softmax, softmax};

/// The global L2 norm of `grads` (one host sync): on the CPU backend each tensor's `Σ g²` is
/// one pass over its values in the order burn-flex sums the squares, so the same bits as
/// [`reference::global_norm`].
pub fn global_norm(grads: &[Tensor<2>]) -> f32 {
    if grads.is_empty() {
        return 0.0;
    }
    #[cfg(feature = "flex")]
    if let Some(first) = grads.first()
        && let Some(sums) = fast(Node::Squares, &first.device(), || {
            flex::squares::host_sums(grads)
        })
    {
        return burn_flex::simd::kernels::sum_f32(&sums).sqrt();
    }
    reference::global_norm(grads)
}

/// Whether `device` is the CPU backend, where the flex forms may run.
pub fn is_host(device: &Device) -> bool {
    crate::util::tensors::is_host(device)
}
