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
//!   maximum, [`crate::kernels::flex::fastmath::exp`]), `O = P·V`;
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
//! ([`crate::kernels::flex::fastmath::softmax_rows`]), so all give the same bits.

use super::host_mm::{Scratch, View, gemm_into, gemm_to, host};
use crate::kernels::flex::fastmath::softmax_rows;
use crate::kernels::gemm_paths::{every_query_needed, fewest_queries};
use crate::kernels::hooks::{self, Node, Switch};
use crate::util::tensors::{floats, to_vec};
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

type Ad = Autodiff<Flex, NoCheckpointing>;

#[derive(Clone, Copy, Debug)]
struct Shape {
    b: usize,
    s: usize,
    kv: usize,
    h: usize,
    hd: usize,
}

impl Shape {
    /// `b` rows of `s` queries over `kv` keys, `d` columns in `heads` heads.
    fn new((b, s, kv): (usize, usize, usize), d: usize, heads: usize) -> Self {
        Shape {
            b,
            s,
            kv,
            h: heads,
            hd: d / heads,
        }
    }

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

/// Per batch row, the queries the node computes: from the first to the last whose own
/// position (`pos0 + i`) is a real token (every layout driftlab makes has a row's real tokens
/// contiguous; a padding query inside the range is computed as before), widened where needed
/// so that every product over the range takes gemm's general path as the product over all `s`
/// queries does (at least 3 rows, since the backward sums over them, and more than 256 scores);
/// all `s` where the scores of all rows are at most 256 (a decoding step).
///
/// A padding query outside the range gets context 0 instead of its attention over the row's
/// real keys, and the same bits follow everywhere else: nothing reads a padding position's
/// value (its key and value are masked for every real query, with weight exactly 0; the MoE
/// layer neither dispatches nor counts padding; the loss reads real positions), and in the
/// backward its terms were exact zeros (the gradient at a padding position is ±0), which
/// gemm's sums, each a chain of fused multiply-adds from +0, drop without a trace.
fn query_spans(key_valid: &[bool], sh: &Shape, pos0: usize) -> Vec<Range<usize>> {
    let Shape { b, s, kv, .. } = *sh;
    let need = fewest_queries(kv);
    (0..b)
        .map(|bi| {
            let real = |i: &usize| key_valid[bi * kv + pos0 + i];
            if every_query_needed(s, kv) || s < need || hooks::is_on(Switch::EveryQuery) {
                return 0..s;
            }
            let Some(lo) = (0..s).find(real) else {
                return 0..0;
            };
            let hi = (0..s).rev().find(real).map_or(lo, |i| i + 1);
            let (mut lo, mut hi) = (lo, hi);
            while hi - lo < need {
                if hi < s {
                    hi += 1;
                } else {
                    lo -= 1;
                }
            }
            lo..hi
        })
        .collect()
}

/// The attention weights a backward reads, and the queries they were computed for.
#[derive(Debug)]
struct Probs {
    /// `[b, h, s, kv]`; 0 in the rows outside `spans`.
    p: Vec<f32>,
    /// Per batch row ([`query_spans`]).
    spans: Vec<Range<usize>>,
}

/// Zero this head's `hd` columns of the rows of a token-major block (starting at `off`, rows
/// `d` apart) outside `r` among `0..s`.
fn zero_outside(
    x: &mut [MaybeUninit<f32>],
    off: usize,
    (d, hd, s): (usize, usize, usize),
    r: &Range<usize>,
) {
    for i in (0..r.start).chain(r.end..s) {
        x[off + i * d..off + i * d + hd].fill(MaybeUninit::new(0.0));
    }
}

/// The forward pass: the context `[b, s, d]` and, when `save` (for backward), the attention
/// weights `[b, h, s, kv]`. Three passes over each batch row's span of queries
/// ([`query_spans`]): every (row, head)'s scores, then all their softmax ([`softmax_rows`]:
/// the allowed keys, `j ≤ pos0 + i` with `keep[j] = 1` or `j = pos0 + i`, get their softmax,
/// every other entry exactly 0), then every (row, head)'s context; 0 outside the spans.
fn forward_host(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (sh, keys): (Shape, Keys),
    (key_valid, pos0): (&[bool], usize),
    save: bool,
) -> (Vec<f32>, Option<Probs>) {
    let spans = query_spans(key_valid, &sh, pos0);
    forward_spans(q, k, v, (sh, keys), (key_valid, pos0), spans, save)
}

/// [`forward_host`] over the given query `spans` (one per batch row; the caller keeps every
/// product on gemm's general path, as [`query_spans`] does).
fn forward_spans(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (sh, keys): (Shape, Keys),
    (key_valid, pos0): (&[bool], usize),
    spans: Vec<Range<usize>>,
    save: bool,
) -> (Vec<f32>, Option<Probs>) {
    let Shape { b, s, kv, h, hd } = sh;
    let d = sh.d();
    let computed: usize = spans.iter().map(Range::len).sum();
    hooks::count(Node::QueriesLeftOut, b * s - computed);
    let (mut p, mut ctx) = (Scratch::new(b * h * s * kv), Scratch::new(b * s * d));
    let keep: Vec<f32> = key_valid.iter().map(|&v| f32::from(u8::from(v))).collect();
    let offsets = |bh: usize| {
        let (bi, hi) = (bh / h, bh % h);
        (bi * s * d + hi * hd, bi * keys.row + hi * hd)
    };
    for (bh, pb) in p.out().chunks_exact_mut(s * kv).enumerate() {
        let ((qo, ko), r) = (offsets(bh), &spans[bh / h]);
        pb[..r.start * kv].fill(MaybeUninit::new(0.0));
        pb[r.end * kv..].fill(MaybeUninit::new(0.0));
        gemm_to(
            r.len(),
            kv,
            hd,
            block(q, qo + r.start * d, d, false),
            block(k, ko, keys.key, true),
            &mut pb[r.start * kv..],
            kv,
            sh.scale(),
        );
    }
    // SAFETY: each (row, head) block of `p` was written in full: zeros outside its span, the
    // product without accumulation inside.
    let mut p = unsafe { p.written() };
    let sel: Vec<usize> = (0..b * h)
        .flat_map(|bh| spans[bh / h].clone().map(move |i| bh * s + i))
        .collect();
    softmax_rows(&mut p, (kv, s, h, pos0), &keep, &sel);
    for (bh, pb) in p.chunks_exact(s * kv).enumerate() {
        let ((qo, ko), r) = (offsets(bh), &spans[bh / h]);
        gemm_to(
            r.len(),
            hd,
            kv,
            View::rows(&pb[r.start * kv..], kv),
            block(v, ko, keys.key, false),
            &mut ctx.out()[qo + r.start * d..],
            d,
            1.0,
        );
        zero_outside(ctx.out(), qo, (d, hd, s), r);
    }
    // SAFETY: the blocks of all (row, head) pairs tile `ctx`, each written by a product without
    // accumulation inside its span and zeros outside.
    let ctx = unsafe { ctx.written() };
    (ctx, save.then_some(Probs { p, spans }))
}

/// What the backward pass reads.
#[derive(Clone, Debug)]
struct Saved {
    sh: Shape,
    /// The inputs as the graph holds them (contiguous; shared, not copied).
    q: FlexTensor,
    k: FlexTensor,
    v: FlexTensor,
    p: Arc<Probs>,
}

/// `[dq, dk, dv]` from the context's gradient `dout` `[b, s, d]`, over each batch row's span
/// of queries (the weights' rows outside it are 0 and the context's gradient there ±0, so the
/// sums over queries lose only exact zeros; dq is 0 outside).
fn backward_host(sv: &Saved, dout: &[f32]) -> [Vec<f32>; 3] {
    let sh = sv.sh;
    let Shape { b, s, kv, h, hd } = sh;
    let d = sh.d();
    let [mut dq, mut dk, mut dv] = [s, kv, kv].map(|rows| Scratch::new(b * rows * d));
    // One head's weights' gradient at a time, over its span's rows (written before read).
    let mut ds = vec![0.0; s * kv];
    let (q, k, v) = (host(&sv.q), host(&sv.k), host(&sv.v));
    for (bh, pb) in sv.p.p.chunks_exact(s * kv).enumerate() {
        let (bi, hi) = (bh / h, bh % h);
        let (qo, ko) = (bi * s * d + hi * hd, bi * kv * d + hi * hd);
        let r = &sv.p.spans[bi];
        let (lo, n) = (r.start, r.len());
        let (pb, ds) = (&pb[lo * kv..], &mut ds[..n * kv]);
        let dob = block(dout, qo + lo * d, d, false);
        let pt = View::transposed(pb, kv);
        gemm_to(kv, hd, n, pt, dob, &mut dv.out()[ko..], d, 1.0);
        gemm_into(n, kv, hd, dob, block(&v, ko, d, true), ds, kv, 1.0, false);
        for (dsr, pr) in ds.chunks_exact_mut(kv).zip(pb.chunks_exact(kv)) {
            let r: f32 = dsr.iter().zip(pr).map(|(a, b)| a * b).sum();
            for (x, &pp) in dsr.iter_mut().zip(pr) {
                *x = pp * (*x - r);
            }
        }
        let (dsv, dst) = (View::rows(ds, kv), View::transposed(ds, kv));
        let c = sh.scale();
        let at = qo + lo * d;
        gemm_to(
            n,
            hd,
            kv,
            dsv,
            block(&k, ko, d, false),
            &mut dq.out()[at..],
            d,
            c,
        );
        gemm_to(
            kv,
            hd,
            n,
            dst,
            block(&q, at, d, false),
            &mut dk.out()[ko..],
            d,
            c,
        );
        zero_outside(dq.out(), qo, (d, hd, s), r);
    }
    // SAFETY: the (row, head) blocks tile dq, dk and dv, each written by a product without
    // accumulation (dq: inside the span, zeros outside).
    unsafe { [dq.written(), dk.written(), dv.written()] }
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
    let ([b, s, d], [_, kv, _]) = (q.dims(), k.dims());
    assert_eq!(kv, pos0 + s, "keys cover the cached and the new positions");
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let sh = Shape::new((b, s, kv), d, heads);
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
    Some(out)
}

mod cache;
mod proj;
mod qkv;
mod shared;

pub use cache::{HostKv, attention_cached};
pub use proj::project_extended;
pub use qkv::attention_qkv;
pub use shared::{attention_shared, node_spans};
