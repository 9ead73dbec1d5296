//! The CPU backend's attention core: `softmax(c·q·kᵀ + mask)·v` for every row and head on host
//! slices, as one autodiff node with a hand-written backward; the same code runs with and
//! without a graph, so the two give bitwise-identical values.
//!
//! q is `[b, s, d]`, k and v `[b, kv, d]` (`kv = pos0 + s`, cached positions first), token-major
//! as the QKV projection makes them: head h owns columns `h·hd..(h+1)·hd`, so each (row, head)
//! block is read and written in place through gemm's strides and no head transpose is copied.
//! The query at position `p = pos0 + i` of row b sees key j when `j ≤ p` and
//! (`key_valid[b·kv + j]` or `j = p`), the mask of [`super::attention::causal_mask`]; a masked
//! weight is exactly 0.
//!
//! Per (row, head), with `c = 1/√hd`:
//! - forward: `S = c·Q·Kᵀ`, `P = softmax(S)` over each query's allowed keys (shifted by their
//!   maximum, [`crate::util::fastmath::exp`]), `O = P·V`;
//! - backward: `dV = Pᵀ·dO`, `dP = dO·Vᵀ`, `dS = P ⊙ (dP − rowsum(P ⊙ dP))`, `dQ = c·dS·K`,
//!   `dK = c·dSᵀ·Q`.
//!
//! It replaces, on the CPU backend, the tensor path's head transposes and their copies, its two
//! `[b, 1, s, kv]` masks and its eight elementwise passes over `[b, h, s, kv]`, each with its own
//! buffer; other devices keep the tensor path. Checked against it, values and gradients, in
//! `tests/model.rs`.
//!
//! Three entry points: [`attention_qkv`] (no cache: RoPE, the split of the extended projection
//! and the core as one node whose one parent is the projection), [`attention_cached`]
//! (generation: keys and values appended to a host cache, [`HostKv`]) and [`attention_core`]
//! (q, k, v given; a graph with a cache). All run the same products and softmax
//! ([`crate::util::fastmath::softmax_rows`]), so all give the same bits.

use super::host_mm::{View, gemm_into, host, scratch};
use crate::util::fastmath::softmax_rows;
use crate::util::tensors::{floats, to_vec};
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

type Ad = Autodiff<Flex, NoCheckpointing>;

static CALLS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static TENSOR_PATH: Cell<bool> = const { Cell::new(false) };
}

/// Attention cores computed here so far, in this process (a test's proof that it ran).
pub fn core_calls() -> usize {
    CALLS.load(Ordering::Relaxed)
}

/// Run `f` with the tensor path forced on this thread (tests compare the two paths).
pub fn with_tensor_attention<T>(f: impl FnOnce() -> T) -> T {
    let before = TENSOR_PATH.with(|c| c.replace(true));
    let out = f();
    TENSOR_PATH.with(|c| c.set(before));
    out
}

#[derive(Clone, Copy, Debug)]
struct Shape {
    b: usize,
    s: usize,
    kv: usize,
    h: usize,
    hd: usize,
}

impl Shape {
    fn d(&self) -> usize {
        self.h * self.hd
    }

    fn scale(&self) -> f32 {
        1.0 / (self.hd as f32).sqrt()
    }
}

/// Where key `j` of row `b` starts in the keys' and values' slices: at `b·row + j·key` (its
/// heads' columns follow). `[b, kv, d]` as the projection makes them, or position-major
/// `[cap, b, d]` as the generation cache ([`HostKv`]) appends them.
#[derive(Clone, Copy, Debug)]
struct Keys {
    row: usize,
    key: usize,
}

impl Keys {
    fn packed(sh: &Shape) -> Self {
        Keys {
            row: sh.kv * sh.d(),
            key: sh.d(),
        }
    }
}

/// One head's block of a token-major `[rows, d]` matrix starting at `off`: `[rows, hd]`, or
/// its transpose.
fn block(data: &[f32], off: usize, d: usize, transposed: bool) -> View<'_> {
    let data = &data[off..];
    if transposed {
        View { data, rs: 1, cs: d }
    } else {
        View { data, rs: d, cs: 1 }
    }
}

/// The forward pass: the context `[b, s, d]` and, when `save` (for backward), the attention
/// weights `[b, h, s, kv]`. Three passes: every (row, head)'s scores, then all score rows'
/// softmax ([`softmax_rows`]: the allowed keys, `j ≤ pos0 + i` with `keep[j] = 1` or `j = pos0 + i`,
/// get their softmax, every other entry exactly 0), then every (row, head)'s context.
fn forward_host(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (sh, keys): (Shape, Keys),
    (key_valid, pos0): (&[bool], usize),
    save: bool,
) -> (Vec<f32>, Option<Vec<f32>>) {
    let Shape { b, s, kv, h, hd } = sh;
    let d = sh.d();
    // SAFETY: each (row, head) block of `p` is written in full (gemm without accumulation),
    // then rewritten by softmax_rows, before it is read; the blocks of all (row, head) pairs
    // tile `ctx`, each written by a product without accumulation.
    let (mut p, mut ctx) = unsafe { (scratch(b * h * s * kv), scratch(b * s * d)) };
    let keep: Vec<f32> = key_valid.iter().map(|&v| f32::from(u8::from(v))).collect();
    let offsets = |bh: usize| {
        let (bi, hi) = (bh / h, bh % h);
        (bi * s * d + hi * hd, bi * keys.row + hi * hd)
    };
    for (bh, pb) in p.chunks_exact_mut(s * kv).enumerate() {
        let (qo, ko) = offsets(bh);
        gemm_into(
            s,
            kv,
            hd,
            block(q, qo, d, false),
            block(k, ko, keys.key, true),
            pb,
            kv,
            sh.scale(),
            false,
        );
    }
    softmax_rows(&mut p, kv, s, h, pos0, &keep);
    for (bh, pb) in p.chunks_exact(s * kv).enumerate() {
        let (qo, ko) = offsets(bh);
        gemm_into(
            s,
            hd,
            kv,
            View::rows(pb, kv),
            block(v, ko, keys.key, false),
            &mut ctx[qo..],
            d,
            1.0,
            false,
        );
    }
    (ctx, save.then_some(p))
}

/// What the backward pass reads.
#[derive(Clone, Debug)]
struct Saved {
    sh: Shape,
    /// The inputs as the graph holds them (contiguous; shared, not copied).
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    p: Arc<Vec<f32>>,
}

/// `[dq, dk, dv]` from the context's gradient `dout` `[b, s, d]`.
fn backward_host(sv: &Saved, dout: &[f32]) -> [Vec<f32>; 3] {
    let sh = sv.sh;
    let Shape { b, s, kv, h, hd } = sh;
    let d = sh.d();
    // SAFETY: the (row, head) blocks tile dq, dk and dv, each written by a product without
    // accumulation; `ds` is written in full by one before each read.
    let (mut dq, mut dk, mut dv, mut ds) = unsafe {
        (
            scratch(b * s * d),
            scratch(b * kv * d),
            scratch(b * kv * d),
            scratch(s * kv),
        )
    };
    let (q, k, v) = (host(&sv.q), host(&sv.k), host(&sv.v));
    for (bh, pb) in sv.p.chunks_exact(s * kv).enumerate() {
        let (bi, hi) = (bh / h, bh % h);
        let (qo, ko) = (bi * s * d + hi * hd, bi * kv * d + hi * hd);
        let dob = block(dout, qo, d, false);
        let pt = View::transposed(pb, kv);
        gemm_into(kv, hd, s, pt, dob, &mut dv[ko..], d, 1.0, false);
        gemm_into(
            s,
            kv,
            hd,
            dob,
            block(&v, ko, d, true),
            &mut ds,
            kv,
            1.0,
            false,
        );
        for (dsr, pr) in ds.chunks_exact_mut(kv).zip(pb.chunks_exact(kv)) {
            let r: f32 = dsr.iter().zip(pr).map(|(a, b)| a * b).sum();
            for (x, &pp) in dsr.iter_mut().zip(pr) {
                *x = pp * (*x - r);
            }
        }
        let (dsv, dst) = (View::rows(&ds, kv), View::transposed(&ds, kv));
        let c = sh.scale();
        gemm_into(
            s,
            hd,
            kv,
            dsv,
            block(&k, ko, d, false),
            &mut dq[qo..],
            d,
            c,
            false,
        );
        gemm_into(
            kv,
            hd,
            s,
            dst,
            block(&q, qo, d, false),
            &mut dk[ko..],
            d,
            c,
            false,
        );
    }
    [dq, dk, dv]
}

#[derive(Debug)]
struct CoreBackward;

impl Backward<Flex, 3> for CoreBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let sh = ops.state.sh;
        let gs = backward_host(&ops.state, &host(&dy));
        let rows = [sh.s, sh.kv, sh.kv];
        for ((parent, g), r) in ops.parents.into_iter().zip(gs).zip(rows) {
            if let Some(node) = parent {
                let shape = vec![sh.b, r, sh.d()];
                grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(g, shape)));
            }
        }
    }
}

/// `t` itself where its values are one contiguous run (the cache's keys and values, the
/// projections), else a contiguous copy: what [`host`] borrows without copying.
fn contiguous(t: FlexTensor) -> FlexTensor {
    if t.as_slice::<f32>().is_some() {
        t
    } else {
        t.to_contiguous()
    }
}

/// The node with a graph; `None` where a tensor is not an autodiff flex tensor without
/// checkpointing.
fn tracked(
    [q, k, v]: [Tensor<3>; 3],
    sh: Shape,
    key_valid: &[bool],
    pos0: usize,
) -> Option<Tensor<3>> {
    let mut prims = Vec::with_capacity(3);
    for t in [q, k, v] {
        prims.push(t.try_into_primitive::<Ad>().ok()?);
    }
    let guards: [NodeGuard; 3] = prims
        .iter()
        .map(|p| p.node())
        .collect::<Vec<_>>()
        .try_into()
        .ok()?;
    let [qh, kh, vh] = prims
        .into_iter()
        .map(|p| contiguous(p.into_primitive()))
        .collect::<Vec<_>>()
        .try_into()
        .ok()?;
    let (ctx, p) = forward_host(
        &host(&qh),
        &host(&kh),
        &host(&vh),
        (sh, Keys::packed(&sh)),
        (key_valid, pos0),
        true,
    );
    let out = FlexTensor::from_data(TensorData::new(ctx, [sh.b, sh.s, sh.d()]));
    let y = match CoreBackward
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => {
            let saved = Saved {
                sh,
                q: qh,
                k: kh,
                v: vh,
                p: Arc::new(p.expect("saved when asked")),
            };
            prep.finish(saved, out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Ad>(y))
}

/// The attention context `[b, s, d]` of q `[b, s, d]` over k and v `[b, kv, d]` with `heads`
/// heads, under the mask the module doc gives (`key_valid` `[b·kv]`). `None` where this node
/// does not apply (another device, autodiff with checkpointing, or the tensor path forced):
/// the caller then takes the tensor path.
pub fn attention_core(
    q: &Tensor<3>,
    k: &Tensor<3>,
    v: &Tensor<3>,
    heads: usize,
    key_valid: &[bool],
    pos0: usize,
) -> Option<Tensor<3>> {
    let device = q.device();
    if TENSOR_PATH.with(Cell::get) || !crate::util::tensors::is_host(&device) {
        return None;
    }
    let ([b, s, d], [_, kv, _]) = (q.dims(), k.dims());
    assert_eq!(kv, pos0 + s, "keys cover the cached and the new positions");
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let sh = Shape {
        b,
        s,
        kv,
        h: heads,
        hd: d / heads,
    };
    let out = if q.is_autodiff() {
        tracked([q.clone(), k.clone(), v.clone()], sh, key_valid, pos0)?
    } else {
        let [qh, kh, vh] = [q, k, v].map(|t| match t.clone().try_into_primitive::<Flex>() {
            Ok(p) => contiguous(p),
            Err(_) => FlexTensor::from_data(TensorData::new(to_vec(t.clone()), t.dims())),
        });
        floats(
            forward_host(
                &host(&qh),
                &host(&kh),
                &host(&vh),
                (sh, Keys::packed(&sh)),
                (key_valid, pos0),
                false,
            )
            .0,
            [b, s, d],
            &device,
        )
    };
    CALLS.fetch_add(1, Ordering::Relaxed);
    Some(out)
}

/// A layer's cached keys (RoPE applied) and values for generation, on host slices,
/// position-major `[cap, b, d]`: a decoding step appends its `[b, d]` block at the end instead
/// of copying the whole cache into a new `[b, kv + 1, d]` tensor, as the tensor path's
/// concatenation does. Read through [`Keys`] strides, so every product is the one the packed
/// layout gives, bit for bit.
#[derive(Clone, Debug, Default)]
pub struct HostKv {
    b: usize,
    d: usize,
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl HostKv {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `s` positions of `k` and `v` `[b, s, d]`; room for `cap` positions is reserved
    /// once.
    fn append(&mut self, k: &[f32], v: &[f32], (b, s, d): (usize, usize, usize), cap: usize) {
        if self.len == 0 {
            *self = HostKv {
                b,
                d,
                len: 0,
                k: Vec::with_capacity(cap * b * d),
                v: Vec::with_capacity(cap * b * d),
            };
        }
        assert!(
            self.b == b && self.d == d,
            "a generation cache holds one batch's rows"
        );
        for i in 0..s {
            for bi in 0..b {
                let row = (bi * s + i) * d..(bi * s + i + 1) * d;
                self.k.extend_from_slice(&k[row.clone()]);
                self.v.extend_from_slice(&v[row]);
            }
        }
        self.len += s;
    }
}

/// [`attention_core`] for generation without a graph: `k` and `v` `[b, s, d]` are the new
/// positions, appended to `cache` first; the context `[b, s, d]` attends over every cached
/// position (`pos0` of them before this call). `None` where the node does not apply (the
/// caller then takes the tensor path with its own cache).
#[allow(clippy::too_many_arguments)]
pub fn attention_cached(
    q: &Tensor<3>,
    k: &Tensor<3>,
    v: &Tensor<3>,
    heads: usize,
    key_valid: &[bool],
    pos0: usize,
    cache: &mut HostKv,
    cap: usize,
) -> Option<Tensor<3>> {
    let device = q.device();
    if TENSOR_PATH.with(Cell::get) || !crate::util::tensors::is_host(&device) || q.is_autodiff() {
        return None;
    }
    let [b, s, d] = q.dims();
    assert_eq!(
        cache.len, pos0,
        "the cache holds the positions before this call"
    );
    let kv = pos0 + s;
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let plain = |t: &Tensor<3>| t.clone().try_into_primitive::<Flex>().ok().map(contiguous);
    let (qh, kh, vh) = (plain(q)?, plain(k)?, plain(v)?);
    cache.append(&host(&kh), &host(&vh), (b, s, d), cap.max(kv));
    let sh = Shape {
        b,
        s,
        kv,
        h: heads,
        hd: d / heads,
    };
    let keys = Keys { row: d, key: b * d };
    let (ctx, _) = forward_host(
        &host(&qh),
        &cache.k,
        &cache.v,
        (sh, keys),
        (key_valid, pos0),
        false,
    );
    CALLS.fetch_add(1, Ordering::Relaxed);
    Some(floats(ctx, [b, s, d], &device))
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::tensor::Device;

    /// A prefill of 3 positions and 4 single-position steps through the generation cache give
    /// bitwise the contexts of the node over the packed `[b, kv, d]` keys and values.
    #[test]
    fn the_generation_cache_gives_the_packed_layouts_bits() {
        let device = Device::flex();
        let (b, h, hd, total) = (3, 2, 4, 7);
        let d = h * hd;
        let val = |i: usize, salt: usize| ((i * 37 + salt * 11) % 29) as f32 / 7.0 - 2.0;
        let make = |salt: usize| -> Vec<f32> { (0..b * total * d).map(|i| val(i, salt)).collect() };
        let (q, k, v) = (make(1), make(2), make(3));
        let valid: Vec<bool> = (0..b * total).map(|i| i % 5 != 1).collect();
        // Positions from..to of every row, as `[b, to - from, d]`.
        let take = |x: &[f32], from: usize, to: usize| -> Vec<f32> {
            (0..b)
                .flat_map(|r| x[(r * total + from) * d..(r * total + to) * d].to_vec())
                .collect()
        };
        let kv_valid = |to: usize| -> Vec<bool> {
            (0..b)
                .flat_map(|r| valid[r * total..r * total + to].to_vec())
                .collect()
        };
        let mut cache = HostKv::default();
        let mut from = 0;
        for to in [3, 4, 5, 6, 7] {
            let s = to - from;
            let t = |x: &[f32]| floats(take(x, from, to), [b, s, d], &device);
            let got = attention_cached(
                &t(&q),
                &t(&k),
                &t(&v),
                h,
                &kv_valid(to),
                from,
                &mut cache,
                total,
            )
            .expect("the host path applies");
            let sh = Shape {
                b,
                s,
                kv: to,
                h,
                hd,
            };
            let (want, _) = forward_host(
                &take(&q, from, to),
                &take(&k, 0, to),
                &take(&v, 0, to),
                (sh, Keys::packed(&sh)),
                (&kv_valid(to), from),
                false,
            );
            assert_eq!(to_vec(got), want, "positions {from}..{to}");
            from = to;
        }
        assert_eq!(cache.len(), total);
    }
}

/// RoPE and the split of the extended projection on host slices: from `qkv` `[b, s, 5d]`
/// (q, k, v, rot(q), rot(k), as [`super::attention`] projects them) and the tables' rows for
/// the s positions (`cos`, `sin` `[s, d]`), q and k with RoPE applied (`x·cos + rot(x)·sin`, as
/// `Rope::apply` computes it) and v, each `[b, s, d]`.
fn split_rope(
    qkv: &[f32],
    (cos, sin): (&[f32], &[f32]),
    (b, s, d): (usize, usize, usize),
) -> [Vec<f32>; 3] {
    let n = b * s * d;
    // SAFETY: the loop below writes every (row, position, column) of all three.
    let (mut q, mut k, mut v) = unsafe { (scratch(n), scratch(n), scratch(n)) };
    for r in 0..b * s {
        let (row, i) = (&qkv[r * 5 * d..(r + 1) * 5 * d], r % s);
        let (c, sn) = (&cos[i * d..(i + 1) * d], &sin[i * d..(i + 1) * d]);
        let o = r * d;
        for j in 0..d {
            q[o + j] = row[j] * c[j] + row[3 * d + j] * sn[j];
            k[o + j] = row[d + j] * c[j] + row[4 * d + j] * sn[j];
            v[o + j] = row[2 * d + j];
        }
    }
    [q, k, v]
}

/// What [`QkvBackward`] reads: the core's saved state and the tables' rows.
#[derive(Clone, Debug)]
struct SavedQkv {
    core: Saved,
    cos: Arc<Vec<f32>>,
    sin: Arc<Vec<f32>>,
}

/// The gradient of `qkv` from those of q, k, v: `[dq·cos, dk·cos, dv, dq·sin, dk·sin]` per
/// row, as the tensor path's products, sum and slices give it (each slice's gradient is the
/// others' zeros plus its own, so `+ 0.0` is added: it turns −0 into +0 as those sums do and
/// changes nothing else).
fn join_rope(
    [dq, dk, dv]: &[Vec<f32>; 3],
    (cos, sin): (&[f32], &[f32]),
    (b, s, d): (usize, usize, usize),
) -> Vec<f32> {
    // SAFETY: every row's five blocks are written below.
    let mut g = unsafe { scratch(b * s * 5 * d) };
    for r in 0..b * s {
        let (row, i, o) = (&mut g[r * 5 * d..(r + 1) * 5 * d], r % s, r * d);
        let (c, sn) = (&cos[i * d..(i + 1) * d], &sin[i * d..(i + 1) * d]);
        for j in 0..d {
            row[j] = dq[o + j] * c[j] + 0.0;
            row[d + j] = dk[o + j] * c[j] + 0.0;
            row[2 * d + j] = dv[o + j] + 0.0;
            row[3 * d + j] = dq[o + j] * sn[j] + 0.0;
            row[4 * d + j] = dk[o + j] * sn[j] + 0.0;
        }
    }
    g
}

#[derive(Debug)]
struct QkvBackward;

impl Backward<Flex, 1> for QkvBackward {
    type State = SavedQkv;

    fn backward(self, ops: Ops<SavedQkv, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let st = &ops.state;
        let sh = st.core.sh;
        let dqkv = join_rope(
            &backward_host(&st.core, &host(&dy)),
            (&st.cos, &st.sin),
            (sh.b, sh.s, sh.d()),
        );
        let [parent] = ops.parents;
        if let Some(node) = parent {
            let shape = vec![sh.b, sh.s, 5 * sh.d()];
            grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(dqkv, shape)));
        }
    }
}

/// The attention context `[b, s, d]` straight from the extended projection `qkv` `[b, s, 5d]`
/// without a cache: RoPE, the split into q, k, v and the core as one node (one parent, so no
/// slice of the projection and no zero-padded slice gradients), bitwise the tensor path's RoPE
/// and slices followed by [`attention_core`]. `cos` and `sin` are RoPE's tables
/// `[max_seq_len, d]`. `None` where the node does not apply.
pub fn attention_qkv(
    qkv: &Tensor<3>,
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    heads: usize,
    key_valid: &[bool],
    pos0: usize,
) -> Option<Tensor<3>> {
    let device = qkv.device();
    if TENSOR_PATH.with(Cell::get) || !crate::util::tensors::is_host(&device) {
        return None;
    }
    let [b, s, d5] = qkv.dims();
    let d = d5 / 5;
    let kv = pos0 + s;
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let table = |t: &Tensor<2>| -> Option<Vec<f32>> {
        let p = t.clone().try_into_primitive::<Flex>().ok()?;
        Some(host(&p)[pos0 * d..kv * d].to_vec())
    };
    let (ct, st) = (table(cos)?, table(sin)?);
    let sh = Shape {
        b,
        s,
        kv,
        h: heads,
        hd: d / heads,
    };
    let out = if qkv.is_autodiff() {
        let prim = qkv.clone().try_into_primitive::<Ad>().ok()?;
        let guards = [prim.node()];
        let inner = contiguous(prim.into_primitive());
        let [q, k, v] = split_rope(&host(&inner), (&ct, &st), (b, s, d));
        let (ctx, p) = forward_host(&q, &k, &v, (sh, Keys::packed(&sh)), (key_valid, pos0), true);
        let out = FlexTensor::from_data(TensorData::new(ctx, [b, s, d]));
        let flex = |x: Vec<f32>| FlexTensor::from_data(TensorData::new(x, [b, s, d]));
        let y = match QkvBackward
            .prepare::<NoCheckpointing>(guards)
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let saved = SavedQkv {
                    core: Saved {
                        sh,
                        q: flex(q),
                        k: flex(k),
                        v: flex(v),
                        p: Arc::new(p.expect("saved when asked")),
                    },
                    cos: Arc::new(ct),
                    sin: Arc::new(st),
                };
                prep.finish(saved, out)
            }
            OpsKind::UnTracked(prep) => prep.finish(out),
        };
        Tensor::from_primitive::<Ad>(y)
    } else {
        let prim = contiguous(qkv.clone().try_into_primitive::<Flex>().ok()?);
        let [q, k, v] = split_rope(&host(&prim), (&ct, &st), (b, s, d));
        let (ctx, _) = forward_host(
            &q,
            &k,
            &v,
            (sh, Keys::packed(&sh)),
            (key_valid, pos0),
            false,
        );
        floats(ctx, [b, s, d], &device)
    };
    CALLS.fetch_add(1, Ordering::Relaxed);
    Some(out)
}
