//! The extended QKV projection `x·[W_qkv | W_q·R | W_k·R]` with three of its five blocks
//! multiplied: the rotated blocks are copies of the query and key blocks, moved and negated.
//!
//! Why that is the same product, bit for bit: gemm's general path computes each output as its
//! own chain of fused multiply-adds over the inner dimension, in order, from +0, whatever the
//! column (its kernels are vectorised across outputs, never across the inner dimension). The
//! column `j` of `W_q·R` is column `src(j)` of `W_q`, negated in the first half of each head
//! ([`crate::kernels::rope::rot_source`]), exactly (the product by a signed permutation
//! only moves and negates). A chain over negated weights gives the negated chain, except that
//! where the chain is exactly zero both give +0 (round-to-nearest makes an exact cancellation
//! +0, and `-0 + +0 = +0`): so the rotated output is `q[src]` or `0 - q[src]`, which is that.
//! Both the full product and the three-block one must take gemm's general path (at least two
//! rows, more than 256 outputs, inner dimension above 2); elsewhere (a decoding step of one
//! row) the full product runs as before.
//!
//! With a graph the node's backward is the matrix product's own (`dx = dy·W_extᵀ`,
//! `dW_ext = xᵀ·dy`, as burn's autodiff computes them), so every gradient is unchanged too.

use super::Ad;
use crate::kernels::flex::host_mm::{Scratch, View, gemm_to, host, written_ref};
use crate::kernels::gemm_paths::projection_general;
use crate::kernels::rope::rot_source;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::ops::matmul::matmul;
use burn_flex::{Flex, FlexTensor};

/// `x·w` for `x` `[n, d]` and the extended projection `w` `[d, 5d]`, bitwise the matrix
/// product, computing only the first three blocks (see the module doc). `None` where this does
/// not apply: another device, the tensor path forced, or a shape off gemm's general path; the
/// caller then multiplies.
pub fn project_extended(x: &Tensor<2>, w: &Tensor<2>, heads: usize) -> Option<Tensor<2>> {
    let [n, d] = x.dims();
    let [dw, d5] = w.dims();
    if dw != d || d5 != 5 * d || !projection_general(n, d) || d % heads != 0 {
        return None;
    }
    if !x.is_autodiff() {
        let xp = x.clone().try_into_primitive::<Flex>().ok()?;
        let wp = w.clone().try_into_primitive::<Flex>().ok()?;
        let y = forward(&host(&xp), &host(&wp), (n, d), d / heads);
        // Built as the product's output is, on the host: no upload to count.
        let y = FlexTensor::from_data(TensorData::new(y, [n, 5 * d]));
        return Some(Tensor::from_primitive::<Flex>(y));
    }
    let xa = x.clone().try_into_primitive::<Ad>().ok()?;
    let wa = w.clone().try_into_primitive::<Ad>().ok()?;
    let (x_tracked, w_tracked) = (xa.is_tracked(), wa.is_tracked());
    let guards = [xa.node(), wa.node()];
    let (xp, wp) = (xa.into_primitive(), wa.into_primitive());
    let y = forward(&host(&xp), &host(&wp), (n, d), d / heads);
    let out = FlexTensor::from_data(TensorData::new(y, [n, 5 * d]));
    let y = match ProjBackward
        .prepare::<NoCheckpointing>(guards)
        .compute_bound()
        .stateful()
    {
        // What burn's matrix product keeps: each operand only where the other needs a gradient.
        OpsKind::Tracked(prep) => {
            prep.finish((w_tracked.then_some(xp), x_tracked.then_some(wp)), out)
        }
        OpsKind::UnTracked(prep) => prep.finish(out),
    };
    Some(Tensor::from_primitive::<Ad>(y))
}

/// The product on host slices: `x` `[n, d]` and `w` `[d, 5d]` row-major; heads of `hd`
/// columns.
fn forward(x: &[f32], w: &[f32], (n, d): (usize, usize), hd: usize) -> Vec<f32> {
    let d5 = 5 * d;
    let mut y = Scratch::new(n * d5);
    // The first three blocks of `w`: its rows, 3d columns of each.
    let w3 = View {
        data: w,
        rs: d5,
        cs: 1,
    };
    gemm_to(n, 3 * d, d, View::rows(x, d), w3, y.out(), d5, 1.0);
    // Each half-head of the rotated blocks is one half-head of q or k, moved (and negated).
    let half = hd / 2;
    let halves: Vec<(usize, usize, bool)> = (0..2 * d)
        .step_by(half)
        .map(|out| {
            let (src, neg) = rot_source(out, hd);
            (out, src, neg)
        })
        .collect();
    for row in y.out().chunks_exact_mut(d5) {
        let (qk, rot) = row.split_at_mut(3 * d);
        // SAFETY: the product wrote the first 3d columns of every row.
        let qk = unsafe { written_ref(qk) };
        for &(out, src, neg) in &halves {
            let (r, s) = (&mut rot[out..out + half], &qk[src..src + half]);
            if neg {
                r.iter_mut().zip(s).for_each(|(r, &s)| {
                    r.write(0.0 - s);
                });
            } else {
                r.iter_mut().zip(s).for_each(|(r, &s)| {
                    r.write(s);
                });
            }
        }
    }
    // SAFETY: the product wrote the first 3d columns of every row and the loop the last 2d
    // (the half-heads of the rotated blocks tile them).
    unsafe { y.written() }
}

/// The matrix product's backward as burn's autodiff runs it on this backend (`float_transpose`
/// is the transposed view, `float_matmul` burn-flex's product).
#[derive(Debug)]
struct ProjBackward;

impl Backward<Flex, 2> for ProjBackward {
    /// `x` (kept where `w` needs a gradient) and `w` (kept where `x` does).
    type State = (Option<FlexTensor>, Option<FlexTensor>);

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let (x, w) = ops.state;
        let dy = grads.consume::<Flex>(&ops.node);
        let [x_node, w_node] = ops.parents;
        if let Some(node) = x_node {
            let wt = w.expect("kept for x's gradient").transpose(0, 1);
            grads.register::<Flex>(node.id, matmul(dy.clone(), wt));
        }
        if let Some(node) = w_node {
            let xt = x.expect("kept for w's gradient").transpose(0, 1);
            grads.register::<Flex>(node.id, matmul(xt, dy));
        }
    }
}
