//! The fused expert path of the CPU backend: one autodiff node per MoE layer instead of a
//! select, three matmuls, a SwiGLU and a gate product per expert plus a scatter.
//!
//! Routed (token, slot) pairs are grouped by expert once (the order of the sparse path: expert,
//! then token, then slot); each expert's rows of `x` are gathered into one contiguous block, and
//! its up, gate and down products run as single `gemm` calls on host slices with the SwiGLU
//! fused between them; the gated outputs are added back per token. The backward pass is written
//! by hand:
//!
//! - `o = h·W2`, `h = silu(a1) ⊙ a3`, `a1 = x_e·W1`, `a3 = x_e·W3`, `y_t += g_s · o_r`;
//! - `dg_s = ⟨dy_t, o_r⟩`, `do_r = g_s · dy_t`, `dW2 = hᵀ·do`, `dh = do·W2ᵀ`;
//! - `da1 = dh ⊙ a3 ⊙ silu'(a1)`, `da3 = dh ⊙ silu(a1)`, `dW1 = x_eᵀ·da1`, `dW3 = x_eᵀ·da3`;
//! - `dx_t += da1·W1ᵀ + da3·W3ᵀ` over the token's rows.
//!
//! Each gate's gradient is summed by the backend's own row reduction, one expert's rows at a
//! time, as the sparse path's broadcast product reduces it, and the routed rows are gathered by
//! a node of their own whose backward adds the input's gradient in the sparse path's order
//! (see `gather.rs`). So the output and the gradients of the input, the gates (hence the
//! router) and every expert matrix are bitwise the sparse path's, and every number of a run is
//! the same with the node on or off (tested on whole models in `tests/model.rs`).
//!
//! An expert that no token reaches gets no gradient, as in the sparse path. Checked against
//! the sparse path and a per-token loop, values and every gradient, in `tests/model.rs`.
//! On by default (the model configuration's `expert_path`, [`crate::model::ExpertPath`]);
//! other devices and gradient checkpointing keep the sparse path. Without a graph (rollouts,
//! π_old, the reference model, the probe) the same forward runs without saving anything; where
//! its rows stand for more rows of a batch (`LayerRouting::repeats`, the shared-prefix forward
//! of [`crate::model::shared`]) an expert with few rows runs on them repeated
//! ([`crate::kernels::gemm_paths::padded_rows`]), so its products keep the batch's gemm path.

mod gather;
mod groups;
mod products;

pub use groups::Groups;

use crate::kernels::flex::fastmath::silu_mul_consts_vec;
use crate::kernels::flex::host_mm::{Scratch, host, written, written_ref};
use crate::kernels::gemm_paths::padded_rows;
use crate::util::parallel::par_map_mut;
use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, NodeGuard, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use gather::{gather, gather_rows};
use products::{mm, mm_to, products, products_padded};
use std::borrow::Cow;
use std::mem::MaybeUninit;
use std::sync::Arc;

type Ad = Autodiff<Flex, NoCheckpointing>;

/// What the backward pass reads: the grouping, the gathered inputs, the pre-activations, the
/// SwiGLU outputs, the expert outputs before gating, the gates and the weights.
#[derive(Clone, Debug)]
pub struct Saved {
    g: Arc<Groups>,
    d: usize,
    f: usize,
    xg: FlexTensor,
    a1: Arc<Vec<f32>>,
    a3: Arc<Vec<f32>>,
    h: Arc<Vec<f32>>,
    o: Arc<Vec<f32>>,
    gate: Arc<Vec<f32>>,
    /// Per expert `[W1, W3, W2]`.
    w: Arc<Vec<[FlexTensor; 3]>>,
}

/// The forward pass on host slices, from the gathered rows `xg` `[n, d]`: the layer's output
/// `[t, d]`, and what backward needs when `save` (the node with a graph).
///
/// With more than one thread in the pool, the experts run side by side (each writes only its
/// own row blocks; the gated outputs are added to the tokens afterwards, in row order). On one
/// thread without `save` (the forwards without a graph) each expert's pre-activations, SwiGLU
/// and outputs live in one expert-sized workspace reused by the next expert, and its gated
/// outputs are added to the tokens at once. Every way runs the same products and adds in the
/// same order, so all give the same bits.
fn forward_host(
    xg: FlexTensor,
    gate: Vec<f32>,
    w: Vec<[FlexTensor; 3]>,
    g: Arc<Groups>,
    (d, f): (usize, usize),
    (save, repeats): (bool, Option<&[usize]>),
) -> (Vec<f32>, Option<Saved>) {
    let n = g.tok.len();
    let xh = host(&xg);
    let wh: Vec<[Cow<'_, [f32]>; 3]> = w.iter().map(|ws| ws.each_ref().map(host)).collect();
    // Expert e's products on its rows: `a1`, `a3`, `h` `[m, f]` and `o` `[m, d]`, each written
    // in full (gemm without accumulation, silu_mul) before anything reads it.
    let expert = |e: usize, bufs: [&mut [MaybeUninit<f32>]; 4]| {
        let (s, m) = (g.start[e], g.start[e + 1] - g.start[e]);
        if m == 0 {
            return;
        }
        let [w1, w3, w2] = &wh[e];
        let xe = &xh[s * d..(s + m) * d];
        let full = repeats.map_or(m, |r| g.tok[s..s + m].iter().map(|&t| r[t]).sum());
        let ws = [&**w1, &**w3, &**w2];
        match padded_rows(m, full) {
            rows if rows > m => products_padded(xe, rows, ws, (d, f), bufs),
            _ => products(xe, m, ws, (d, f), bufs),
        }
    };
    let mut out = vec![0.0; g.t * d];
    let parallel = rayon::current_num_threads() > 1 && g.experts() > 1;
    if !save && !parallel {
        let widest = (0..g.experts())
            .map(|e| g.start[e + 1] - g.start[e])
            .max()
            .unwrap_or(0);
        let [mut a1, mut a3, mut h, mut o] = [f, f, f, d].map(|w| Scratch::new(widest * w));
        for e in 0..g.experts() {
            let (s, m) = (g.start[e], g.start[e + 1] - g.start[e]);
            let (mf, md) = (m * f, m * d);
            let o = &mut o.out()[..md];
            expert(
                e,
                [
                    &mut a1.out()[..mf],
                    &mut a3.out()[..mf],
                    &mut h.out()[..mf],
                    o,
                ],
            );
            // SAFETY: `expert` wrote all m·d of its output (nothing where m = 0).
            add_gated(&mut out, unsafe { written_ref(o) }, s..s + m, &g, &gate, d);
        }
        return (out, None);
    }
    let [mut a1, mut a3, mut h, mut o] = [f, f, f, d].map(|w| Scratch::new(n * w));
    {
        let mut blocks: Vec<[&mut [MaybeUninit<f32>]; 4]> = expert_rows(a1.out(), &g.start, f)
            .into_iter()
            .zip(expert_rows(a3.out(), &g.start, f))
            .zip(expert_rows(h.out(), &g.start, f))
            .zip(expert_rows(o.out(), &g.start, d))
            .map(|(((a1, a3), h), o)| [a1, a3, h, o])
            .collect();
        par_map_mut(&mut blocks, |e, b| {
            let [a1, a3, h, o] = b;
            expert(e, [&mut **a1, &mut **a3, &mut **h, &mut **o]);
        });
    }
    // SAFETY: the experts' row blocks partition the n routed rows, and `expert` wrote each of
    // its blocks in full.
    let [a1, a3, h, o] = unsafe { [a1.written(), a3.written(), h.written(), o.written()] };
    add_gated(&mut out, &o, 0..n, &g, &gate, d);
    drop((wh, xh));
    if !save {
        return (out, None);
    }
    let saved = Saved {
        g,
        d,
        f,
        xg,
        a1: Arc::new(a1),
        a3: Arc::new(a3),
        h: Arc::new(h),
        o: Arc::new(o),
        gate: Arc::new(gate),
        w: Arc::new(w),
    };
    (out, Some(saved))
}

/// `buf`'s rows `[n, width]` cut into the experts' blocks (rows `start[e]..start[e + 1]`).
fn expert_rows<'a, T>(mut buf: &'a mut [T], start: &[usize], width: usize) -> Vec<&'a mut [T]> {
    let mut blocks = Vec::with_capacity(start.len() - 1);
    for e in 0..start.len() - 1 {
        let (block, rest) =
            std::mem::take(&mut buf).split_at_mut((start[e + 1] - start[e]) * width);
        blocks.push(block);
        buf = rest;
    }
    blocks
}

/// `y_t += g_s · o_r` for the routed rows `rows` (in order), `o` holding those rows.
fn add_gated(
    out: &mut [f32],
    o: &[f32],
    rows: std::ops::Range<usize>,
    g: &Groups,
    gate: &[f32],
    d: usize,
) {
    for (r, or) in rows.zip(o.chunks_exact(d)) {
        let (tok, gs) = (g.tok[r], gate[g.slot[r]]);
        for (y, &v) in out[tok * d..(tok + 1) * d].iter_mut().zip(or) {
            *y += v * gs;
        }
    }
}

/// Gradients `[dxg, dgate, then per expert dW1, dW3, dW2]` from `dy` (`dxg` per gathered row,
/// `[n, d]`); `None` where not `want`ed or where no token reached the expert.
fn backward_host(s: &Saved, dy: &[f32], want: &[bool]) -> Vec<Option<Vec<f32>>> {
    let (g, d, f) = (&*s.g, s.d, s.f);
    let n = g.tok.len();
    let mut dgate = vec![0.0; g.t * g.k];
    let mut dout = Vec::with_capacity(n * d);
    for r in 0..n {
        let (tok, slot) = (g.tok[r], g.slot[r]);
        let dyr = &dy[tok * d..(tok + 1) * d];
        dout.extend(dyr.iter().map(|&v| v * s.gate[slot]));
    }
    // Each gate's gradient ⟨dy_t, o_r⟩ is summed by the backend's own row reduction, one
    // expert's rows at a time, as the sparse path's broadcast product reduces it: the same bits.
    for e in 0..g.experts() {
        let (r0, r1) = (g.start[e], g.start[e + 1]);
        if r0 == r1 {
            continue;
        }
        // Row by row into one buffer (a flattening iterator's `collect` pushed element by
        // element): the same products.
        let mut rows = Vec::with_capacity((r1 - r0) * d);
        for r in r0..r1 {
            let tok = g.tok[r];
            let (dyr, or) = (&dy[tok * d..(tok + 1) * d], &s.o[r * d..(r + 1) * d]);
            rows.extend(dyr.iter().zip(or).map(|(&a, &b)| a * b));
        }
        let sums = burn_flex::ops::reduce::sum_dim(
            FlexTensor::from_data(TensorData::new(rows, [r1 - r0, d])),
            1,
        );
        for (r, &v) in (r0..r1).zip(host(&sums).iter()) {
            dgate[g.slot[r]] = v;
        }
    }
    let mut grads: Vec<Option<Vec<f32>>> = vec![None; 2 + 3 * g.experts()];
    let xg = host(&s.xg);
    let mut dxg = Scratch::new(n * d);
    // Expert e's weight gradients (where wanted) and its rows of dx; the experts run side by
    // side when the pool has more than one thread (each writes only its own block).
    let expert = |e: usize, dx: &mut [MaybeUninit<f32>]| -> [Option<Vec<f32>>; 3] {
        let (r0, m) = (g.start[e], g.start[e + 1] - g.start[e]);
        if m == 0 {
            return [None, None, None];
        }
        let [w1, w3, w2] = s.w[e].each_ref().map(host);
        let (fa, fb, da, db) = (r0 * f, (r0 + m) * f, r0 * d, (r0 + m) * d);
        let (xe, he, doe) = (&xg[da..db], &s.h[fa..fb], &dout[da..db]);
        let mut dh = Scratch::new(m * f);
        mm_to(m, f, d, doe, false, &w2, true, dh.out());
        // SAFETY: the product wrote all m·f.
        let dh = unsafe { dh.written() };
        let (mut c1, mut c3) = silu_mul_consts_vec(&s.a1[fa..fb], &s.a3[fa..fb]);
        for ((a, b), &v) in c1.iter_mut().zip(c3.iter_mut()).zip(dh.iter()) {
            *a *= v;
            *b *= v;
        }
        let (da1, da3) = (&c1[..], &c3[..]);
        let base = 2 + 3 * e;
        let products = [(xe, da1, d, f), (xe, da3, d, f), (he, doe, f, d)];
        let dws = std::array::from_fn(|i| {
            let (lhs, rhs, rows, cols) = products[i];
            want[base + i].then(|| {
                let mut dw = Scratch::new(rows * cols);
                mm_to(rows, cols, m, lhs, true, rhs, false, dw.out());
                // SAFETY: the product without accumulation wrote all of it.
                unsafe { dw.written() }
            })
        });
        mm_to(m, d, f, da1, false, &w1, true, dx);
        // SAFETY: the product without accumulation wrote all of this expert's rows.
        mm(m, d, f, da3, false, &w3, true, unsafe { written(dx) }, true);
        dws
    };
    let mut blocks = expert_rows(dxg.out(), &g.start, d);
    let dws = par_map_mut(&mut blocks, |e, dx| expert(e, dx));
    drop(blocks);
    // SAFETY: the experts' row blocks partition `dxg`'s rows, each written in full.
    let dxg = unsafe { dxg.written() };
    for (e, dw) in dws.into_iter().enumerate() {
        for (i, x) in dw.into_iter().enumerate() {
            grads[2 + 3 * e + i] = x;
        }
    }
    if want[0] {
        grads[0] = Some(dxg);
    }
    if want[1] {
        grads[1] = Some(dgate);
    }
    grads
}

#[derive(Debug)]
struct FusedBackward;

impl<const N: usize> Backward<Flex, N> for FusedBackward {
    type State = Saved;

    fn backward(self, ops: Ops<Saved, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let dy = grads.consume::<Flex>(&ops.node);
        let dy = host(&dy);
        let want: Vec<bool> = ops.parents.iter().map(Option::is_some).collect();
        let s = &ops.state;
        let (k, d, f) = (s.g.k, s.d, s.f);
        let gs = backward_host(s, &dy, &want);
        for (i, (p, gr)) in ops.parents.into_iter().zip(gs).enumerate() {
            let (Some(node), Some(gr)) = (p, gr) else {
                continue;
            };
            let shape = match i {
                0 => vec![s.g.tok.len(), d],
                1 => vec![s.g.t, k],
                i if (i - 2) % 3 == 2 => vec![f, d],
                _ => vec![d, f],
            };
            grads.register::<Flex>(node.id, FlexTensor::from_data(TensorData::new(gr, shape)));
        }
    }
}

/// The fused layer over `N = 2 + 3·E` parents; `None` when a tensor is not an autodiff flex
/// tensor without checkpointing (the caller then takes the sparse path).
fn run<const N: usize>(
    x: Tensor<2>,
    gate: Tensor<2>,
    w: &[[Tensor<2>; 3]],
    g: Arc<Groups>,
) -> Option<Tensor<2>> {
    let [t, d] = x.dims();
    let f = w.first()?[0].dims()[1];
    let xg = gather(x, &g)?;
    let mut prims = Vec::with_capacity(N);
    for p in [xg, gate]
        .into_iter()
        .chain(w.iter().flat_map(|ws| ws.iter().cloned()))
    {
        prims.push(p.try_into_primitive::<Ad>().ok()?);
    }
    let guards: [NodeGuard; N] = prims
        .iter()
        .map(|p| p.node())
        .collect::<Vec<_>>()
        .try_into()
        .ok()?;
    let inner: Vec<FlexTensor> = prims.into_iter().map(|p| p.into_primitive()).collect();
    let gh = host(&inner[1]).into_owned();
    let ws: Vec<[FlexTensor; 3]> = inner[2..]
        .chunks(3)
        .map(|c| [c[0].clone(), c[1].clone(), c[2].clone()])
        .collect();
    let (out, saved) = forward_host(inner[0].clone(), gh, ws, g, (d, f), (true, None));
    let saved = saved.expect("saved when asked");
    let out = FlexTensor::from_data(TensorData::new(out, [t, d]));
    let y = match FusedBackward
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        OpsKind::Tracked(prep) => prep.finish(saved, out),
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Ad>(y))
}

/// The routed experts' output `[t, d]` through the fused node: `x` `[t, d]`, the gates `[t, k]`
/// of the `used` ids, per expert `[W1, W3, W2]`. `None` where the fused path does not apply.
pub fn fused_experts(
    x: Tensor<2>,
    gate: Tensor<2>,
    w: &[[Tensor<2>; 3]],
    used: &[u16],
    active: &[bool],
) -> Option<Tensor<2>> {
    let k = gate.dims()[1];
    let g = Arc::new(Groups::new(used, active, w.len(), k));
    match w.len() {
        1 => run::<5>(x, gate, w, g),
        2 => run::<8>(x, gate, w, g),
        4 => run::<14>(x, gate, w, g),
        8 => run::<26>(x, gate, w, g),
        16 => run::<50>(x, gate, w, g),
        32 => run::<98>(x, gate, w, g),
        64 => run::<194>(x, gate, w, g),
        _ => None,
    }
}

/// The routed experts' output `[t, d]` without a graph (rollouts, π_old and the reference
/// model): the node's forward on host slices, bitwise the sparse path's. `None` where a tensor
/// is not a plain flex tensor (the caller then takes the sparse path).
pub fn fused_experts_plain(
    x: Tensor<2>,
    gate: Tensor<2>,
    w: &[[Tensor<2>; 3]],
    (used, repeats): (&[u16], Option<&[usize]>),
    active: &[bool],
) -> Option<Tensor<2>> {
    let [t, d] = x.dims();
    let k = gate.dims()[1];
    let f = w.first()?[0].dims()[1];
    let device = x.device();
    let plain = |t: &Tensor<2>| t.clone().try_into_primitive::<Flex>().ok();
    let ws = w
        .iter()
        .map(|ws| Some([plain(&ws[0])?, plain(&ws[1])?, plain(&ws[2])?]))
        .collect::<Option<Vec<_>>>()?;
    let (xp, gp) = (plain(&x)?, plain(&gate)?);
    let g = Arc::new(Groups::new(used, active, w.len(), k));
    let xg = gather_rows(&xp, &g, d);
    let gh = host(&gp).into_owned();
    let (out, _) = forward_host(xg, gh, ws, g, (d, f), (false, repeats));
    Some(crate::util::tensors::floats(out, [t, d], &device))
}
