//! What attention reads besides q, k and v: which keys each query may see ([`Mask`]) and a
//! layer's cached keys and values ([`LayerCache`]).

use crate::util::tensors::floats;
use burn::tensor::{Device, Tensor};

/// Cached keys and values of one layer, token-major `[batch, len, d_model]` (RoPE applied to
/// the keys).
#[derive(Clone, Debug, Default)]
pub struct LayerCache {
    pub k: Option<Tensor<3>>,
    pub v: Option<Tensor<3>>,
    /// The CPU backend's cache instead of `k` and `v` (generation without a graph; see
    /// [`super::flex::attn_core::HostKv`]). A layer's cache is one or the other from its first
    /// call.
    #[cfg(feature = "flex")]
    pub host: super::flex::attn_core::HostKv,
}

impl LayerCache {
    /// Whether this layer's keys and values are held on the host (the CPU backend's cache),
    /// where rows can be moved without recomputing them.
    pub fn on_host(&self) -> bool {
        #[cfg(feature = "flex")]
        return self.k.is_none() && !self.host.is_empty();
        #[cfg(not(feature = "flex"))]
        false
    }

    /// Keep only the rows `keep` (increasing indices) of a host cache ([`LayerCache::on_host`]);
    /// each kept row's keys and values are moved, so what it attends over keeps its bits.
    pub fn keep_rows(&mut self, keep: &[usize]) {
        assert!(self.on_host(), "rows are left out of a host cache only");
        #[cfg(feature = "flex")]
        self.host.keep_rows(keep);
        let _ = keep;
    }

    /// Make row `i` of a host cache a copy of row `src[i]` (a row may be copied to several).
    pub fn take_rows(&mut self, src: &[usize]) {
        assert!(self.on_host(), "rows are copied within a host cache only");
        #[cfg(feature = "flex")]
        self.host.take_rows(src);
        let _ = src;
    }
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

    pub fn tensors(&self) -> &AttnMask {
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
