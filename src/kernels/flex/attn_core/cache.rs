//! The generation cache of the attention node: keys and values appended on the host.

use super::{Keys, Shape, contiguous, forward_host};
use crate::kernels::flex::host_mm::host;
use crate::util::tensors::floats;
use burn::tensor::Tensor;
use burn_flex::Flex;

/// A layer's cached keys (RoPE applied) and values for generation, on host slices,
/// position-major `[cap, b, d]`: a decoding step appends its `[b, d]` block at the end instead
/// of copying the whole cache into a new `[b, kv + 1, d]` tensor, as the tensor path's
/// concatenation does. Read through [`Keys`] strides, so every product is the one the packed
/// layout gives, bit for bit.
#[derive(Clone, Debug, Default)]
pub struct HostKv {
    b: usize,
    d: usize,
    len: usize,
    k: Vec<f32>,
    v: Vec<f32>,
}

impl HostKv {
    /// Positions cached so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append `s` positions of `k` and `v` `[b, s, d]`; room for `cap` positions is reserved
    /// once.
    fn append(&mut self, k: &[f32], v: &[f32], (b, s, d): (usize, usize, usize), cap: usize) {
        if self.len == 0 {
            *self = HostKv {
                b,
                d,
                len: 0,
                k: Vec::with_capacity(cap * b * d),
                v: Vec::with_capacity(cap * b * d),
            };
        }
        assert!(
            self.b == b && self.d == d,
            "a generation cache holds one batch's rows"
        );
        for i in 0..s {
            for bi in 0..b {
                let row = (bi * s + i) * d..(bi * s + i + 1) * d;
                self.k.extend_from_slice(&k[row.clone()]);
                self.v.extend_from_slice(&v[row]);
            }
        }
        self.len += s;
    }

    /// Keep only the rows `keep` (increasing indices into the cached rows) of every cached
    /// position: a generation drops rows that finished. Each kept row's keys and values are
    /// moved, not recomputed, so what it attends over keeps its bits.
    pub fn keep_rows(&mut self, keep: &[usize]) {
        assert!(
            keep.windows(2).all(|w| w[0] < w[1]),
            "rows to keep: increasing indices"
        );
        self.take_rows(keep);
    }

    /// Make row `i` of every cached position a copy of row `src[i]` (a row may be copied to
    /// several): a prefill that computed each prompt group's prompt once gives every row of the
    /// group its keys and values.
    pub fn take_rows(&mut self, src: &[usize]) {
        let (b, d) = (self.b, self.d);
        assert!(
            src.iter().all(|&r| r < b),
            "rows to take: indices below {b}"
        );
        let cap = self.k.capacity() / (b * d).max(1);
        let pick = |x: &[f32]| -> Vec<f32> {
            let mut out = Vec::with_capacity(cap * src.len() * d);
            for p in 0..self.len {
                for &r in src {
                    out.extend_from_slice(&x[(p * b + r) * d..(p * b + r + 1) * d]);
                }
            }
            out
        };
        (self.k, self.v) = (pick(&self.k), pick(&self.v));
        self.b = src.len();
    }
}

/// [`super::attention_core`] for generation without a graph: `k` and `v` `[b, s, d]` are the new
/// positions, appended to `cache` first; the context `[b, s, d]` attends over every cached
/// position (`pos0` of them before this call). `None` where the node does not apply (the
/// caller then takes the tensor path with its own cache).
#[allow(clippy::too_many_arguments)]
pub fn attention_cached(
    q: &Tensor<3>,
    k: &Tensor<3>,
    v: &Tensor<3>,
    heads: usize,
    key_valid: &[bool],
    pos0: usize,
    cache: &mut HostKv,
    cap: usize,
) -> Option<Tensor<3>> {
    let device = q.device();
    if q.is_autodiff() {
        return None;
    }
    let [b, s, d] = q.dims();
    assert_eq!(
        cache.len, pos0,
        "the cache holds the positions before this call"
    );
    let kv = pos0 + s;
    assert_eq!(key_valid.len(), b * kv, "key validity covers every key");
    let plain = |t: &Tensor<3>| t.clone().try_into_primitive::<Flex>().ok().map(contiguous);
    let (qh, kh, vh) = (plain(q)?, plain(k)?, plain(v)?);
    cache.append(&host(&kh), &host(&vh), (b, s, d), cap.max(kv));
    let sh = Shape::new((b, s, kv), d, heads);
    let keys = Keys { row: d, key: b * d };
    let (ctx, _) = forward_host(
        &host(&qh),
        &cache.k,
        &cache.v,
        (sh, keys),
        (key_valid, pos0),
        false,
    );
    Some(floats(ctx, [b, s, d], &device))
}

#[cfg(test)]
mod tests {
    use super::super::{Keys, Shape, forward_host};
    use super::*;
    use crate::util::tensors::to_vec;
    use burn::tensor::Device;

    /// A prefill of 3 positions and 4 single-position steps through the generation cache give
    /// bitwise the contexts of the node over the packed `[b, kv, d]` keys and values.
    #[test]
    fn the_generation_cache_gives_the_packed_layouts_bits() {
        let device = Device::flex();
        let (b, h, hd, total) = (3, 2, 4, 7);
        let d = h * hd;
        let val = |i: usize, salt: usize| ((i * 37 + salt * 11) % 29) as f32 / 7.0 - 2.0;
        let make = |salt: usize| -> Vec<f32> { (0..b * total * d).map(|i| val(i, salt)).collect() };
        let (q, k, v) = (make(1), make(2), make(3));
        let valid: Vec<bool> = (0..b * total).map(|i| i % 5 != 1).collect();
        // Positions from..to of every row, as `[b, to - from, d]`.
        let take = |x: &[f32], from: usize, to: usize| -> Vec<f32> {
            (0..b)
                .flat_map(|r| x[(r * total + from) * d..(r * total + to) * d].to_vec())
                .collect()
        };
        let kv_valid = |to: usize| -> Vec<bool> {
            (0..b)
                .flat_map(|r| valid[r * total..r * total + to].to_vec())
                .collect()
        };
        let mut cache = HostKv::default();
        let mut from = 0;
        for to in [3, 4, 5, 6, 7] {
            let s = to - from;
            let t = |x: &[f32]| floats(take(x, from, to), [b, s, d], &device);
            let got = attention_cached(
                &t(&q),
                &t(&k),
                &t(&v),
                h,
                &kv_valid(to),
                from,
                &mut cache,
                total,
            )
            .expect("the host path applies");
            let sh = Shape {
                b,
                s,
                kv: to,
                h,
                hd,
            };
            let (want, _) = forward_host(
                &take(&q, from, to),
                &take(&k, 0, to),
                &take(&v, 0, to),
                (sh, Keys::packed(&sh)),
                (&kv_valid(to), from),
                false,
            );
            assert_eq!(to_vec(got), want, "positions {from}..{to}");
            from = to;
        }
        assert_eq!(cache.len(), total);
    }
}
