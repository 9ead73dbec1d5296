//! Rotary position embedding: its tables, the signed permutation `R` of rotate-half, and its
//! application to the rotated projection.

use crate::util::tensors::floats;
use burn::tensor::{Device, Tensor};

/// Rotary position embedding in the rotate-half form, `x·cos + rot(x)·sin` per head, where
/// `rot([x1, x2]) = [−x2, x1]` within each head.
///
/// `rot` is linear, so the rotated queries and keys come out of the QKV projection itself: the
/// projection runs with `[W_qkv | W_q·R | W_k·R]`, `R` the block-diagonal signed permutation
/// of `rot` (exact: it only moves and negates weights). That keeps RoPE to two elementwise ops
/// per tensor in the projection's own `[tokens, d_model]` layout, instead of slicing and
/// concatenating head halves. On the CPU backend the rotated blocks are not multiplied at all:
/// [`crate::kernels::project_qkv`] moves and negates the query and key blocks, bitwise
/// the product (its module doc says why), with the product's own backward.
/// Where column `out` of `x·R` comes from, for heads of `hd` columns: `(x·R)[c] = −x[c + half]`
/// in the first half of a head, `x[c − half]` in the second; `(source column, negated)`.
pub fn rot_source(out: usize, hd: usize) -> (usize, bool) {
    let half = hd / 2;
    if out % hd < half {
        (out + half, true)
    } else {
        (out - half, false)
    }
}

#[derive(Clone, Debug)]
pub struct Rope {
    /// `[max_seq_len, d_model]`: every head's table (each half-frequency twice), side by side.
    pub cos: Tensor<2>,
    pub sin: Tensor<2>,
    /// `[2·d_model, 2·d_model]`: `R` for the query and the key columns, block-diagonal.
    pub rot_qk: Tensor<2>,
    /// Columns per head (where `R`'s half-heads start).
    pub head_dim: usize,
}

impl Rope {
    /// Tables for `max_seq_len` positions of `n_heads` heads of `head_dim` columns, base
    /// `theta`.
    pub fn new(
        (max_seq_len, n_heads, hd): (usize, usize, usize),
        theta: f32,
        device: &Device,
    ) -> Self {
        let d = n_heads * hd;
        let half = hd / 2;
        let mut cos = Vec::with_capacity(max_seq_len * d);
        let mut sin = Vec::with_capacity(max_seq_len * d);
        for pos in 0..max_seq_len {
            for _head in 0..n_heads {
                for _ in 0..2 {
                    for i in 0..half {
                        let freq = 1.0 / (theta as f64).powf(2.0 * i as f64 / hd as f64);
                        let angle = pos as f64 * freq;
                        cos.push(angle.cos() as f32);
                        sin.push(angle.sin() as f32);
                    }
                }
            }
        }
        let n = 2 * d;
        let mut rot = vec![0f32; n * n];
        for out in 0..n {
            let (src, neg) = rot_source(out, hd);
            rot[src * n + out] = if neg { -1.0 } else { 1.0 };
        }
        Rope {
            cos: floats(cos, [max_seq_len, d], device),
            sin: floats(sin, [max_seq_len, d], device),
            rot_qk: floats(rot, [n, n], device),
            head_dim: hd,
        }
    }

    /// `x·cos + x_rot·sin` for `x`, `x_rot` `[batch, seq, d_model]` whose first position is
    /// `pos0` (`x_rot` = `rot(x)`, from [`Rope::extend_qkv`]).
    pub fn apply(&self, x: Tensor<3>, x_rot: Tensor<3>, pos0: usize) -> Tensor<3> {
        let [_, s, d] = x.dims();
        let table = |t: &Tensor<2>| t.clone().slice([pos0..pos0 + s, 0..d]).reshape([1, s, d]);
        x * table(&self.cos) + x_rot * table(&self.sin)
    }
}
