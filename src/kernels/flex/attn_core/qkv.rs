//! The attention node fed by the extended projection whole: RoPE, the split into q, k, v and
//! the core in one node with one parent.

use super::{Ad, Keys, Saved, Shape, backward_host, contiguous, forward_host};
use crate::kernels::flex::host_mm::{Scratch, host};
use crate::util::tensors::floats;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::tensor::{Tensor, TensorData};
use burn_flex::{Flex, FlexTensor};
use std::sync::Arc;

/// RoPE and the split of the extended projection on host slices: from `qkv` `[b, s, 5d]`
/// (q, k, v, rot(q), rot(k), as [`crate::model::attention`] projects them) and the tables' rows for
/// the s positions (`cos`, `sin` `[s, d]`), q and k with RoPE applied (`x·cos + rot(x)·sin`, as
/// `Rope::apply` computes it) and v, each `[b, s, d]`. With `src`, position `r` of the
/// `b·s` reads row `src[r]` of `qkv` (rows shared by several batch rows, `super::shared`).
pub(super) fn split_rope(
    qkv: &[f32],
    (cos, sin): (&[f32], &[f32]),
    (b, s, d): (usize, usize, usize),
    src: Option<&[usize]>,
) -> [Vec<f32>; 3] {
    let n = b * s * d;
    let [mut q, mut k, mut v] = [n, n, n].map(Scratch::new);
    let (qo, ko, vo) = (q.out(), k.out(), v.out());
    for r in 0..b * s {
        let from = src.map_or(r, |m| m[r]);
        let (row, i) = (&qkv[from * 5 * d..(from + 1) * 5 * d], r % s);
        let (c, sn) = (&cos[i * d..(i + 1) * d], &sin[i * d..(i + 1) * d]);
        let o = r * d;
        for j in 0..d {
            qo[o + j].write(row[j] * c[j] + row[3 * d + j] * sn[j]);
            ko[o + j].write(row[d + j] * c[j] + row[4 * d + j] * sn[j]);
            vo[o + j].write(row[2 * d + j]);
        }
    }
    // SAFETY: the loop wrote every (row, position, column) of all three.
    unsafe { [q.written(), k.written(), v.written()] }
}

/// RoPE's tables' rows for `positions` (`cos`, `sin` `[max_seq_len, d]`) on the host; `None`
/// where they are not flex tensors.
pub(super) fn rope_rows(
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    positions: std::ops::Range<usize>,
    d: usize,
) -> Option<(Vec<f32>, Vec<f32>)> {
    let rows = |t: &Tensor<2>| -> Option<Vec<f32>> {
        let p = t.clone().try_into_primitive::<Flex>().ok()?;
        Some(host(&p)[positions.start * d..positions.end * d].to_vec())
    };
    Some((rows(cos)?, rows(sin)?))
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
    let mut g = Scratch::new(b * s * 5 * d);
    for r in 0..b * s {
        let (row, i, o) = (&mut g.out()[r * 5 * d..(r + 1) * 5 * d], r % s, r * d);
        let (c, sn) = (&cos[i * d..(i + 1) * d], &sin[i * d..(i + 1) * d]);
        for j in 0..d {
            row[j].write(dq[o + j] * c[j] + 0.0);
            row[d + j].write(dk[o + j] * c[j] + 0.0);
            row[2 * d + j].write(dv[o + j] + 0.0);
            row[3 * d + j].write(dq[o + j] * sn[j] + 0.0);
            row[4 * d + j].write(dk[o + j] * sn[j] + 0.0);
        }
    }
    // SAFETY: the loop wrote every row's five blocks.
    unsafe { g.written() }
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
/// and slices followed by [`super::attention_core`]. `cos` and `sin` are RoPE's tables
/// `[max_seq_len, d]`. `None` where the node does not apply.
pub fn attention_qkv(
    qkv: &Tensor<3>,
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    heads: usize,
    key_valid: &[bool],
    pos0: usize,
) -> Option<Tensor<3>> {
    let device = qkv.device();
    let [b, s, d5] = qkv.dims();
    let d = d5 / 5;
    let kv = pos0 + s;
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let (ct, st) = rope_rows((cos, sin), pos0..kv, d)?;
    let sh = Shape::new((b, s, kv), d, heads);
    let out = if qkv.is_autodiff() {
        let prim = qkv.clone().try_into_primitive::<Ad>().ok()?;
        let guards = [prim.node()];
        let inner = contiguous(prim.into_primitive());
        let [q, k, v] = split_rope(&host(&inner), (&ct, &st), (b, s, d), None);
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
        let [q, k, v] = split_rope(&host(&prim), (&ct, &st), (b, s, d), None);
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
    Some(out)
}
