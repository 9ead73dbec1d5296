//! Causal multi-head self-attention with RoPE, a padding-aware mask and an optional KV cache:
//! project, attend, project out. The ops are [`crate::kernels`]' (RoPE's tables and rotation in
//! [`crate::kernels::rope`], the mask and the cache in [`crate::kernels::mask`], the core's
//! formula in [`crate::kernels::reference::attention_core`]).

use super::config::ModelConfig;
use super::weights::BlockWeights;
use crate::kernels;
use burn::tensor::Tensor;

pub use kernels::{AttnMask, LayerCache, MASK_SHIFT, Mask, Rope, causal_mask, rot_source};

/// RoPE's tables for `cfg`.
pub fn rope(cfg: &ModelConfig, device: &burn::tensor::Device) -> Rope {
    let shape = (cfg.max_seq_len, cfg.n_heads, cfg.head_dim());
    Rope::new(shape, cfg.rope_theta, device)
}

/// Self-attention on `x` `[batch·seq, d_model]` (already normalised). With a cache, the new
/// keys and values are appended and attention runs over all cached positions. `qkv_ext` is the
/// block's extended projection `[W_qkv | W_q·R | W_k·R]` when the caller computed it once
/// ([`super::Model::with_extended_qkv`]); `None` extends it here.
pub fn attention(
    w: &BlockWeights,
    cfg: &ModelConfig,
    (rope, qkv_ext): (&Rope, Option<&Tensor<2>>),
    x: Tensor<2>,
    (batch, seq): (usize, usize),
    mask: &Mask<'_>,
    cache: Option<&mut LayerCache>,
) -> Tensor<2> {
    let (d, h) = (cfg.d_model, cfg.n_heads);
    let w_ext = match qkv_ext {
        Some(e) => e.clone(),
        None => kernels::extend_qkv(rope, w.wqkv.clone()),
    };
    // [B, S, 5D]: q, k, v, rot(q), rot(k).
    let qkv = kernels::project_qkv(&x, &w_ext, h).reshape([batch, seq, 5 * d]);
    let ctx = kernels::attention(&qkv, rope, h, mask, cache, cfg.max_seq_len); // [B, S, D]
    ctx.reshape([batch * seq, d]).matmul(w.wo.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::tensors::{floats, to_vec};
    use burn::tensor::Device;

    /// The projection-side RoPE equals rotate-half RoPE computed element by element.
    #[test]
    fn rope_from_the_extended_projection_is_rotate_half() {
        let device = Device::flex();
        let cfg = ModelConfig::preset(crate::model::config::Preset::Toy, 17).unwrap(); // d 64, 4 heads of 16
        let (d, hd, half) = (cfg.d_model, cfg.head_dim(), cfg.head_dim() / 2);
        let rope = rope(&cfg, &device);
        let (s, pos0) = (3, 5);
        let xs: Vec<f32> = (0..s * d)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
            .collect();
        let w: Vec<f32> = (0..d * 3 * d)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 97.0)
            .collect();
        let x = floats(xs.clone(), [s, d], &device);
        let qkv = to_vec(x.matmul(kernels::extend_qkv(
            &rope,
            floats(w.clone(), [d, 3 * d], &device),
        )));
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
}
