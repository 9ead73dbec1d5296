//! The node's forward for rows that share a prefix ([`crate::model::shared`]): every batch row
//! laid out as the node lays it out, its queries, keys and values read from the compact rows
//! the forward computed, and the queries a row shares with the first row of its group left out.

use super::qkv::{rope_rows, split_rope};
use super::{Keys, Shape, forward_spans, query_spans};
use crate::kernels::flex::host_mm::host;
use crate::kernels::gemm_paths::fewest_queries;
use burn::tensor::Tensor;
use burn_flex::Flex;
use std::ops::Range;

/// The node's query spans (`query_spans`) of a batch of `b` rows of `s` positions
/// (`key_valid` `[b·s]`) with `d` columns in `heads` heads, and the fewest queries a span must
/// hold to keep gemm's general path.
pub fn node_spans(
    key_valid: &[bool],
    (b, s, d, heads): (usize, usize, usize, usize),
) -> (Vec<Range<usize>>, usize) {
    let sh = Shape::new((b, s, s), d, heads);
    (query_spans(key_valid, &sh, 0), fewest_queries(s))
}

/// The attention context `[b·s, d]` (no graph) of `b` rows of `s` positions, the node's layout,
/// from the extended projection of the compact rows `qkv` `[c, 5d]`: position `r` of the batch
/// reads row `src[r]` of `qkv`. `cos` and `sin` are RoPE's tables; `spans` from
/// the shared forward's layout. `None` where the node does not apply.
pub fn attention_shared(
    qkv: &Tensor<2>,
    src: &[usize],
    (cos, sin): (&Tensor<2>, &Tensor<2>),
    (b, s, heads): (usize, usize, usize),
    key_valid: &[bool],
    spans: Vec<Range<usize>>,
) -> Option<Vec<f32>> {
    if qkv.is_autodiff() {
        return None;
    }
    let d = qkv.dims()[1] / 5;
    assert_eq!(src.len(), b * s, "a source row for every position");
    assert_eq!(key_valid.len(), b * s, "key validity covers every key");
    let (ct, st) = rope_rows((cos, sin), 0..s, d)?;
    let prim = super::contiguous(qkv.clone().try_into_primitive::<Flex>().ok()?);
    let [q, k, v] = split_rope(&host(&prim), (&ct, &st), (b, s, d), Some(src));
    let sh = Shape::new((b, s, s), d, heads);
    let keys = Keys::packed(&sh);
    let (ctx, _) = forward_spans(&q, &k, &v, (sh, keys), (key_valid, 0), spans, false);
    Some(ctx)
}
