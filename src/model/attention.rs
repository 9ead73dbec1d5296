//! Causal multi-head self-attention with RoPE, a padding-aware mask and an optional KV cache.

use super::config::ModelConfig;
use super::weights::BlockWeights;
use crate::tensors::floats;
use burn::tensor::{Device, Tensor};

/// Rotary position tables, `[max_seq_len, head_dim]` (each half-frequency repeated twice).
#[derive(Clone, Debug)]
pub struct Rope {
    cos: Tensor<2>,
    sin: Tensor<2>,
}

impl Rope {
    pub fn new(cfg: &ModelConfig, device: &Device) -> Self {
        let hd = cfg.head_dim();
        let half = hd / 2;
        let mut cos = Vec::with_capacity(cfg.max_seq_len * hd);
        let mut sin = Vec::with_capacity(cfg.max_seq_len * hd);
        for pos in 0..cfg.max_seq_len {
            for _ in 0..2 {
                for i in 0..half {
                    let freq = 1.0 / (cfg.rope_theta as f64).powf(2.0 * i as f64 / hd as f64);
                    let angle = pos as f64 * freq;
                    cos.push(angle.cos() as f32);
                    sin.push(angle.sin() as f32);
                }
            }
        }
        Rope {
            cos: floats(cos, [cfg.max_seq_len, hd], device),
            sin: floats(sin, [cfg.max_seq_len, hd], device),
        }
    }

    /// Rotate `x` `[batch, heads, seq, head_dim]` whose first position is `pos0`.
    pub fn apply(&self, x: Tensor<4>, pos0: usize) -> Tensor<4> {
        let [b, h, s, hd] = x.dims();
        let half = hd / 2;
        let cos = self
            .cos
            .clone()
            .slice([pos0..pos0 + s, 0..hd])
            .reshape([1, 1, s, hd]);
        let sin = self
            .sin
            .clone()
            .slice([pos0..pos0 + s, 0..hd])
            .reshape([1, 1, s, hd]);
        let x1 = x.clone().slice([0..b, 0..h, 0..s, 0..half]);
        let x2 = x.clone().slice([0..b, 0..h, 0..s, half..hd]);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * cos + rotated * sin
    }
}

/// Cached keys and values of one layer, `[batch, heads, len, head_dim]`.
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: Option<Tensor<4>>,
    pub v: Option<Tensor<4>>,
}

/// Attention mask `[batch, 1, seq, pos0 + seq]`: query `i` (absolute `pos0 + i`) sees key `j`
/// when `j ≤ pos0 + i` and key `j` is a real token. A padding query still sees itself, so no
/// softmax row is empty (its output is never used).
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
/// keys and values are appended and attention runs over all cached positions.
pub fn attention(
    w: &BlockWeights,
    cfg: &ModelConfig,
    rope: &Rope,
    x: Tensor<2>,
    (batch, seq, pos0): (usize, usize, usize),
    mask: &AttnMask,
    cache: Option<&mut LayerCache>,
) -> Tensor<2> {
    let (d, h, hd) = (cfg.d_model, cfg.n_heads, cfg.head_dim());
    let n = batch * seq;
    let qkv = x.matmul(w.wqkv.clone()); // [B·S, 3D]
    let split = |i: usize| {
        qkv.clone()
            .slice([0..n, i * d..(i + 1) * d])
            .reshape([batch, seq, h, hd])
            .swap_dims(1, 2) // [B, H, S, hd]
    };
    let q = rope.apply(split(0), pos0);
    let mut k = rope.apply(split(1), pos0);
    let mut v = split(2);
    if let Some(c) = cache {
        if let (Some(pk), Some(pv)) = (c.k.take(), c.v.take()) {
            k = Tensor::cat(vec![pk, k], 2);
            v = Tensor::cat(vec![pv, v], 2);
        }
        c.k = Some(k.clone());
        c.v = Some(v.clone());
    }
    let scores = q.matmul(k.swap_dims(2, 3)) * (1.0 / (hd as f32).sqrt()) + mask.additive.clone(); // [B, H, S, KV]
    let m = scores.clone().detach().max_dim(3);
    let e = crate::tensors::exp(scores - m) * mask.keep.clone();
    let ctx = (e.clone() / e.sum_dim(3)).matmul(v); // [B, H, S, hd]
    ctx.swap_dims(1, 2).reshape([n, d]).matmul(w.wo.clone())
}
