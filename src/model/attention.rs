//! Causal multi-head self-attention with RoPE, a padding-aware mask and an optional KV cache.

use super::config::ModelConfig;
use super::weights::BlockWeights;
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
/// [`super::attn_core::project_extended`] moves and negates the query and key blocks, bitwise
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
    pub(super) cos: Tensor<2>,
    pub(super) sin: Tensor<2>,
    /// `[2·d_model, 2·d_model]`: `R` for the query and the key columns, block-diagonal.
    rot_qk: Tensor<2>,
    /// Columns per head (where `R`'s half-heads start).
    head_dim: usize,
}

impl Rope {
    pub fn new(cfg: &ModelConfig, device: &Device) -> Self {
        let (d, hd) = (cfg.d_model, cfg.head_dim());
        let half = hd / 2;
        let mut cos = Vec::with_capacity(cfg.max_seq_len * d);
        let mut sin = Vec::with_capacity(cfg.max_seq_len * d);
        for pos in 0..cfg.max_seq_len {
            for _head in 0..cfg.n_heads {
                for _ in 0..2 {
                    for i in 0..half {
                        let freq = 1.0 / (cfg.rope_theta as f64).powf(2.0 * i as f64 / hd as f64);
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
            cos: floats(cos, [cfg.max_seq_len, d], device),
            sin: floats(sin, [cfg.max_seq_len, d], device),
            rot_qk: floats(rot, [n, n], device),
            head_dim: hd,
        }
    }

    /// `[W_qkv | W_q·R | W_k·R]`, `[d_model, 5·d_model]`, from `W_qkv` `[d_model, 3·d_model]`.
    pub fn extend_qkv(&self, wqkv: Tensor<2>) -> Tensor<2> {
        #[cfg(feature = "flex")]
        if let Some(ext) = self.extend_moved(&wqkv) {
            return ext;
        }
        self.extend_product(wqkv)
    }

    /// [`Rope::extend_qkv`] as the product by `R` computes it.
    fn extend_product(&self, wqkv: Tensor<2>) -> Tensor<2> {
        let [d, d3] = wqkv.dims();
        let wqk = wqkv.clone().slice([0..d, 0..2 * d3 / 3]);
        Tensor::cat(vec![wqkv, wqk.matmul(self.rot_qk.clone())], 1)
    }

    /// [`Rope::extend_qkv`] without a graph on the CPU backend, the rotated blocks moved and
    /// negated instead of multiplied, bitwise the product: each of its outputs is one chain of
    /// fused multiply-adds from +0 over the `2·d_model` rows of `R` (one block, on gemm's
    /// general path) whose only non-zero term is `±w`, so it is exactly `±w`, and +0 where `w`
    /// is ±0 (`+0 + −0 = +0`); `0 − w` and `w + 0` give exactly that. `None` with a graph, on
    /// another device, or where a weight is not finite (`∞·0` would spread a NaN through the
    /// product's other columns).
    #[cfg(feature = "flex")]
    fn extend_moved(&self, wqkv: &Tensor<2>) -> Option<Tensor<2>> {
        use burn::tensor::TensorData;
        use burn_flex::{Flex, FlexTensor};
        if wqkv.is_autodiff() || !crate::util::tensors::is_host(&wqkv.device()) {
            return None;
        }
        let [d, d3] = wqkv.dims();
        let p = wqkv.clone().try_into_primitive::<Flex>().ok()?;
        let w = super::host_mm::host(&p);
        if d3 != 3 * d || !w.iter().all(|v| v.is_finite()) {
            return None;
        }
        let mut ext = Vec::with_capacity(d * 5 * d);
        for row in w.chunks_exact(d3) {
            ext.extend_from_slice(row);
            ext.extend((0..2 * d).map(|out| match rot_source(out, self.head_dim) {
                (src, true) => 0.0 - row[src],
                (src, false) => row[src] + 0.0,
            }));
        }
        // Built on the host as the product's output is: no upload to count.
        let ext = FlexTensor::from_data(TensorData::new(ext, [d, 5 * d]));
        Some(Tensor::from_primitive::<Flex>(ext))
    }

    /// `x·cos + x_rot·sin` for `x`, `x_rot` `[batch, seq, d_model]` whose first position is
    /// `pos0` (`x_rot` = `rot(x)`, from [`Rope::extend_qkv`]).
    pub fn apply(&self, x: Tensor<3>, x_rot: Tensor<3>, pos0: usize) -> Tensor<3> {
        let [_, s, d] = x.dims();
        let table = |t: &Tensor<2>| t.clone().slice([pos0..pos0 + s, 0..d]).reshape([1, s, d]);
        x * table(&self.cos) + x_rot * table(&self.sin)
    }
}

/// Cached keys and values of one layer, token-major `[batch, len, d_model]` (RoPE applied to
/// the keys).
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: Option<Tensor<3>>,
    pub v: Option<Tensor<3>>,
    /// The CPU backend's cache instead of `k` and `v` (generation without a graph; see
    /// [`super::attn_core::HostKv`]). A layer's cache is one or the other from its first call.
    #[cfg(feature = "flex")]
    pub host: super::attn_core::HostKv,
}

#[derive(Clone, Debug)]
pub struct AttnMask {
    /// 0 where allowed, −[`MASK_SHIFT`] where not: keeps masked logits below the row maximum
    /// without driving `exp` into its slow underflow path.
    pub additive: Tensor<4>,
    /// 1 where allowed, 0 where not: masked weights are exactly zero.
    pub keep: Tensor<4>,
}

/// How far masked attention logits are pushed down before the exact 0/1 mask.
pub const MASK_SHIFT: f32 = 80.0;

/// The mask of one forward: which keys each query may see (see [`causal_mask`]). The tensor
/// form is built on first use, by the tensor path only.
pub struct Mask<'a> {
    pub key_valid: &'a [bool],
    pub batch: usize,
    pub pos0: usize,
    pub seq: usize,
    device: Device,
    tensors: std::cell::OnceCell<AttnMask>,
}

impl<'a> Mask<'a> {
    pub fn new(
        key_valid: &'a [bool],
        batch: usize,
        pos0: usize,
        seq: usize,
        device: &Device,
    ) -> Self {
        assert_eq!(
            key_valid.len(),
            batch * (pos0 + seq),
            "key validity must cover every cached and new position"
        );
        Mask {
            key_valid,
            batch,
            pos0,
            seq,
            device: device.clone(),
            tensors: std::cell::OnceCell::new(),
        }
    }

    fn tensors(&self) -> &AttnMask {
        self.tensors.get_or_init(|| {
            causal_mask(
                self.key_valid,
                self.batch,
                self.pos0,
                self.seq,
                &self.device,
            )
        })
    }
}

pub fn causal_mask(
    key_valid: &[bool],
    batch: usize,
    pos0: usize,
    seq: usize,
    device: &Device,
) -> AttnMask {
    let kv = pos0 + seq;
    assert_eq!(
        key_valid.len(),
        batch * kv,
        "key validity must cover every cached and new position"
    );
    let mut keep = vec![1f32; batch * seq * kv];
    for b in 0..batch {
        for i in 0..seq {
            let q = pos0 + i;
            for j in 0..kv {
                let ok = j <= q && (key_valid[b * kv + j] || j == q);
                if !ok {
                    keep[(b * seq + i) * kv + j] = 0.0;
                }
            }
        }
    }
    let additive = keep.iter().map(|&k| (k - 1.0) * MASK_SHIFT).collect();
    AttnMask {
        additive: floats(additive, [batch, 1, seq, kv], device),
        keep: floats(keep, [batch, 1, seq, kv], device),
    }
}

/// Self-attention on `x` `[batch·seq, d_model]` (already normalised). With a cache, the new
/// keys and values are appended and attention runs over all cached positions. On the CPU
/// backend the core runs as one node ([`super::attn_core`]); elsewhere as tensor ops.
/// `qkv_ext` is the block's extended projection when the caller computed it once
/// ([`super::Model::with_extended_qkv`]); `None` extends it here.
pub fn attention(
    w: &BlockWeights,
    cfg: &ModelConfig,
    (rope, qkv_ext): (&Rope, Option<&Tensor<2>>),
    x: Tensor<2>,
    (batch, seq, pos0): (usize, usize, usize),
    mask: &Mask<'_>,
    cache: Option<&mut LayerCache>,
) -> Tensor<2> {
    let (d, h, hd) = (cfg.d_model, cfg.n_heads, cfg.head_dim());
    let n = batch * seq;
    // [B, S, 5D]: q, k, v, rot(q), rot(k). Reshaped before it is sliced, so each part is a
    // strided view of the projection (reshaping a column slice would copy it).
    let w_ext = match qkv_ext {
        Some(e) => e.clone(),
        None => rope.extend_qkv(w.wqkv.clone()),
    };
    #[cfg(feature = "flex")]
    let projected = super::attn_core::project_extended(&x, &w_ext, h);
    #[cfg(not(feature = "flex"))]
    let projected = None;
    let qkv = projected
        .unwrap_or_else(|| x.matmul(w_ext))
        .reshape([batch, seq, 5 * d]);
    #[cfg(feature = "flex")]
    if cache.is_none()
        && let Some(ctx) =
            super::attn_core::attention_qkv(&qkv, (&rope.cos, &rope.sin), h, mask.key_valid, pos0)
    {
        return ctx.reshape([n, d]).matmul(w.wo.clone());
    }
    let part = |i: usize| qkv.clone().slice([0..batch, 0..seq, i * d..(i + 1) * d]);
    let q = rope.apply(part(0), part(3), pos0); // [B, S, D]
    let mut k = rope.apply(part(1), part(4), pos0);
    let mut v = part(2);
    #[cfg(feature = "flex")]
    let cache = match cache {
        Some(c) if c.k.is_none() => {
            let ctx = super::attn_core::attention_cached(
                &q,
                &k,
                &v,
                h,
                mask.key_valid,
                pos0,
                &mut c.host,
                cfg.max_seq_len,
            );
            if let Some(ctx) = ctx {
                return ctx.reshape([n, d]).matmul(w.wo.clone());
            }
            assert!(
                c.host.is_empty(),
                "a layer's cache started on the CPU backend's host path"
            );
            Some(c)
        }
        c => c,
    };
    if let Some(c) = cache {
        if let (Some(pk), Some(pv)) = (c.k.take(), c.v.take()) {
            k = Tensor::cat(vec![pk, k], 1);
            v = Tensor::cat(vec![pv, v], 1);
        }
        c.k = Some(k.clone());
        c.v = Some(v.clone());
    }
    #[cfg(feature = "flex")]
    if let Some(ctx) = super::attn_core::attention_core(&q, &k, &v, h, mask.key_valid, pos0) {
        return ctx.reshape([n, d]).matmul(w.wo.clone());
    }
    let heads = |t: Tensor<3>| {
        let [_, len, _] = t.dims();
        t.reshape([batch, len, h, hd]).swap_dims(1, 2) // [B, H, len, hd]
    };
    let (q, k, v) = (heads(q), heads(k), heads(v));
    let m = mask.tensors();
    let scores = q.matmul(k.swap_dims(2, 3)) * (1.0 / (hd as f32).sqrt()) + m.additive.clone(); // [B, H, S, KV]
    let mx = scores.clone().detach().max_dim(3);
    let e = crate::util::tensors::exp(scores - mx) * m.keep.clone();
    let ctx = (e.clone() / e.sum_dim(3)).matmul(v); // [B, H, S, hd]
    ctx.swap_dims(1, 2).reshape([n, d]).matmul(w.wo.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::tensors::to_vec;

    /// The projection-side RoPE equals rotate-half RoPE computed element by element.
    /// The CPU backend's one-node RoPE, split and core from the projection gives bitwise the
    /// tensor path's RoPE and slices followed by the core node: values and the projection's
    /// gradient (a weighting with zeros, so signed zeros reach the slices' sums).
    #[cfg(feature = "flex")]
    #[test]
    fn the_projection_node_is_bitwise_rope_slices_and_the_core() {
        use crate::model::attn_core::{attention_core, attention_qkv};
        let device = Device::flex();
        let cfg = ModelConfig::preset(crate::model::config::Preset::Toy, 17).unwrap();
        let (b, s, d, h) = (3, 6, cfg.d_model, cfg.n_heads);
        let rope = Rope::new(&cfg, &device);
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

    #[test]
    fn rope_from_the_extended_projection_is_rotate_half() {
        let device = Device::flex();
        let cfg = ModelConfig::preset(crate::model::config::Preset::Toy, 17).unwrap(); // d 64, 4 heads of 16
        let (d, hd, half) = (cfg.d_model, cfg.head_dim(), cfg.head_dim() / 2);
        let rope = Rope::new(&cfg, &device);
        let (s, pos0) = (3, 5);
        let xs: Vec<f32> = (0..s * d)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let w: Vec<f32> = (0..d * 3 * d)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 97.0)
            .collect();
        let x = floats(xs.clone(), [s, d], &device);
        let qkv = to_vec(x.matmul(rope.extend_qkv(floats(w.clone(), [d, 3 * d], &device))));
        let col = |t: usize, c: usize| qkv[t * 5 * d + c];
        // Plain projection, then rotate-half by hand, for q (block 0) and k (block 1).
        let proj = |t: usize, c: usize| {
            (0..d)
                .map(|i| xs[t * d + i] * w[i * 3 * d + c])
                .sum::<f32>()
        };
        for blk in 0..2 {
            let rot_block = 3 + blk;
            let q: Vec<f32> = (0..s * d).map(|i| col(i / d, blk * d + i % d)).collect();
            let q_rot: Vec<f32> = (0..s * d)
                .map(|i| col(i / d, rot_block * d + i % d))
                .collect();
            let out = to_vec(rope.apply(
                floats(q.clone(), [1, s, d], &device),
                floats(q_rot, [1, s, d], &device),
                pos0,
            ));
            for t in 0..s {
                for c in 0..d {
                    let (head, j) = (c / hd, c % hd);
                    let i = j % half;
                    let angle = (pos0 + t) as f64
                        / (cfg.rope_theta as f64).powf(2.0 * i as f64 / hd as f64);
                    let x1 = proj(t, blk * d + head * hd + i);
                    let x2 = proj(t, blk * d + head * hd + half + i);
                    let want = if j < half {
                        x1 as f64 * angle.cos() - x2 as f64 * angle.sin()
                    } else {
                        x2 as f64 * angle.cos() + x1 as f64 * angle.sin()
                    };
                    let got = out[t * d + c] as f64;
                    assert!((got - want).abs() < 1e-4, "t {t} col {c}: {got} vs {want}");
                    assert!((q[t * d + c] - proj(t, blk * d + c)).abs() < 1e-4);
                }
            }
        }
    }

    /// The moved extension is the product's, bit for bit, on weights with exact zeros of both
    /// signs among random values; a non-finite weight leaves it to the product.
    #[cfg(feature = "flex")]
    #[test]
    fn the_moved_extension_is_the_product() {
        use crate::model::config::Preset;
        let device = Device::flex();
        for preset in [Preset::Toy, Preset::Deep] {
            let cfg = ModelConfig::preset(preset, 32).unwrap();
            let rope = Rope::new(&cfg, &device);
            let d = cfg.d_model;
            let mut w: Vec<f32> = (0..d * 3 * d)
                .map(|i| ((i * 7919 % 1009) as f32 - 504.0) / 97.0)
                .collect();
            for (i, v) in w.iter_mut().enumerate().step_by(13) {
                *v = if i % 2 == 0 { 0.0 } else { -0.0 };
            }
            let wqkv = floats(w.clone(), [d, 3 * d], &device);
            let moved = rope.extend_moved(&wqkv).expect("applies without a graph");
            let product = rope.extend_product(wqkv);
            let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
            assert_eq!(bits(to_vec(moved)), bits(to_vec(product)), "{preset:?}");
            w[5] = f32::INFINITY;
            assert!(rope.extend_moved(&floats(w, [d, 3 * d], &device)).is_none());
        }
    }
}
