//! The shards of a generation: contiguous rows, each shard with its own KV cache, and the rows
//! each decoding step still feeds (finished rows leave on the CPU backend).

use super::route_log::{OnDevice, RouteLog, Used, used_of};
use crate::kernels::gemm_paths;
use crate::kernels::hooks::{self, Node, Switch};
use crate::model::{ForwardOptions, LayerCache, LayerRouting, Model, SeqBatch};
use crate::util::rows_from;
use crate::util::tensors::{floats, ints, to_vec};
use burn::tensor::Tensor;

/// The logits of the last position of every row, `[b, vocab]`: read back to the host, or kept
/// on the device for [`super::pick_on_device`].
#[allow(clippy::large_enum_variant)] // one per decoding step
pub(super) enum Logits {
    Host(Vec<f32>),
    Device(Tensor<2>),
}

/// Contiguous row shards of a generation, each with its own KV cache.
pub(super) struct Shards {
    bounds: Vec<std::ops::Range<usize>>,
    caches: Vec<Vec<LayerCache>>,
    /// Per shard, the rows its cache holds and each decoding step feeds, in order: all its rows
    /// until [`Shards::drop_finished`] leaves finished ones out.
    rows: Vec<Vec<usize>>,
}

/// Whether a product of a decoding step has an inner dimension beyond one k-block, which gemm
/// splits by a rule that differs for small products (see [`rows_to_keep`]).
pub(super) fn long_inner(cfg: &crate::model::ModelConfig) -> bool {
    !gemm_paths::one_block(cfg.d_model.max(cfg.dense_d_ff()))
}

/// Which of a shard's `rows` the next decoding steps feed (indices into `rows`), or `None` to
/// keep them all: its active rows, and finished rows in order up to a floor, when that leaves out
/// at least a quarter of them. The floor ([`gemm_paths::decode_row_floor`]) keeps every product
/// of the step on the gemm path (and blocking) it takes with all rows, so a kept row's numbers
/// keep their bits.
fn rows_to_keep(rows: &[usize], active: &[bool], long_inner: bool) -> Option<Vec<usize>> {
    let n = rows.len();
    let floor = gemm_paths::decode_row_floor(n, long_inner);
    let live = rows.iter().filter(|&&r| active[r]).count();
    if live.max(floor) * 4 > n * 3 {
        return None;
    }
    let mut fill = floor.saturating_sub(live);
    let mut keep = Vec::with_capacity(live + fill);
    for (i, &r) in rows.iter().enumerate() {
        if active[r] {
            keep.push(i);
        } else if fill > 0 {
            fill -= 1;
            keep.push(i);
        }
    }
    Some(keep)
}

/// The routing options drawn for a decoding step's `n` rows, narrowed to the rows `keep`
/// (indices): the random draws were made for all `n` rows, as when no row is left out, so each
/// kept row gets the offsets it would have had.
fn select_rows(o: ForwardOptions<'static>, keep: &[usize], n: usize) -> ForwardOptions<'static> {
    let routing = o
        .routing
        .into_iter()
        .map(|l| {
            assert!(l.forced.is_none(), "a generation takes no forced routes");
            let logit_offset = l.logit_offset.map(|t| {
                let device = t.device();
                t.select(0, ints(keep, [keep.len()], &device))
            });
            let choice_offset = l
                .choice_offset
                .map(|c| rows_from(&c, keep, c.len() / n.max(1)));
            LayerRouting {
                forced: None,
                logit_offset,
                choice_offset,
                ..l
            }
        })
        .collect();
    ForwardOptions { routing, ..o }
}

impl Shards {
    pub(super) fn new(b: usize, shards: usize) -> Self {
        let n_sh = shards.clamp(1, b.max(1));
        let bounds: Vec<_> = (0..n_sh)
            .map(|i| i * b / n_sh..(i + 1) * b / n_sh)
            .collect();
        Shards {
            rows: bounds.iter().map(|r| r.clone().collect()).collect(),
            bounds,
            caches: (0..n_sh).map(|_| Vec::new()).collect(),
        }
    }

    /// Leave finished rows out of a shard's next decoding steps ([`rows_to_keep`]), on the CPU
    /// backend, whose host cache drops them ([`LayerCache::keep_rows`]); a finished row's
    /// logits are never read again. A shard whose cache is the tensor path's (a GPU's) keeps
    /// its rows.
    pub(super) fn drop_finished(&mut self, active: &[bool], long_inner: bool) {
        if hooks::is_on(Switch::EveryRow) {
            return;
        }
        for (rows, cache) in self.rows.iter_mut().zip(&mut self.caches) {
            if !cache.iter().all(LayerCache::on_host) {
                continue;
            }
            let Some(keep) = rows_to_keep(rows, active, long_inner) else {
                continue;
            };
            for c in cache.iter_mut() {
                c.keep_rows(&keep);
            }
            hooks::count(Node::RowsLeftOut, rows.len() - keep.len());
            *rows = keep.iter().map(|&i| rows[i]).collect();
        }
    }

    /// The prompts' forward (filling the caches); returns the last position's logits per row.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn prefill(
        &mut self,
        model: &Model,
        ptok: &[u32],
        pvalid: &[bool],
        pw: usize,
        routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
        log: &mut RouteLog,
        on: OnDevice,
    ) -> Logits {
        let v = model.cfg.vocab_size;
        let bounds = &self.bounds;
        let opts: Vec<ForwardOptions<'static>> = (bounds.iter())
            // The prompts' routes are read back (once a generation): a prompt's many tokens
            // would run every expert densely on the device path.
            .map(|r| with_routes(routing_for(r.len() * pw), false))
            .collect();
        let outs = crate::util::parallel::par_map_mut(&mut self.caches, |i, cache| {
            let r = bounds[i].clone();
            let prefill = SeqBatch {
                batch: r.len(),
                seq: pw,
                tokens: ptok[r.start * pw..r.end * pw].to_vec(),
                valid: pvalid[r.start * pw..r.end * pw].to_vec(),
            };
            if let Some((l, used)) = prefill_shared(model, &prefill, &opts[i], cache) {
                return (Logits::Host(l), Used::Host(used));
            }
            let out = model.forward_at(&prefill, 0, &prefill.valid, &opts[i], Some(cache));
            let used = used_of(out.traces, out.device_routes, opts[i].routes_on_device);
            let last = last_position(out.logits, (r.len(), pw, v));
            (
                if on.logits {
                    Logits::Device(last)
                } else {
                    Logits::Host(to_vec(last))
                },
                used,
            )
        });
        let device = model.device();
        let mut last = Vec::new();
        for (r, (l, used)) in bounds.iter().zip(outs) {
            let rows: Vec<usize> = r
                .clone()
                .flat_map(|row| std::iter::repeat_n(row, pw))
                .collect();
            let positions: Vec<usize> = r.clone().flat_map(|_| 0..pw).collect();
            log.record(used, &rows, &positions, &pvalid[r.start * pw..r.end * pw]);
            last.push(l);
        }
        join(last, on.logits, v, &device)
    }

    /// One decoding step: the `next` token of every row a shard still feeds, at `pos`; returns
    /// the logits per row, `[b, vocab]` (zeros for rows left out, which never read them).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn decode(
        &mut self,
        model: &Model,
        next: &[u32],
        active: &[bool],
        key_valid: &[Vec<bool>],
        pos: usize,
        routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
        log: &mut RouteLog,
        on: OnDevice,
    ) -> Logits {
        let v = model.cfg.vocab_size;
        let (bounds, rows) = (&self.bounds, &self.rows);
        let opts: Vec<ForwardOptions<'static>> = bounds
            .iter()
            .zip(rows)
            .map(|(r, fed)| {
                let o = with_routes(routing_for(r.len()), on.routes);
                if fed.len() == r.len() {
                    o
                } else {
                    let keep: Vec<usize> = fed.iter().map(|&g| g - r.start).collect();
                    select_rows(o, &keep, r.len())
                }
            })
            .collect();
        let outs = crate::util::parallel::par_map_mut(&mut self.caches, |i, cache| {
            let fed = &rows[i];
            let kv_flat: Vec<bool> = fed
                .iter()
                .flat_map(|&r| key_valid[r].iter().copied())
                .collect();
            let batch = SeqBatch {
                batch: fed.len(),
                seq: 1,
                tokens: fed.iter().map(|&r| next[r]).collect(),
                valid: fed.iter().map(|&r| active[r]).collect(),
            };
            let out = model.forward_at(&batch, pos, &kv_flat, &opts[i], Some(cache));
            let used = used_of(out.traces, out.device_routes, opts[i].routes_on_device);
            (out.logits, used)
        });
        if on.logits {
            // Every shard feeds all its rows (the caller leaves none out): in row order.
            let mut parts = Vec::new();
            for (fed, (l, used)) in rows.iter().zip(outs) {
                let fed_active: Vec<bool> = fed.iter().map(|&r| active[r]).collect();
                log.record(used, fed, &vec![pos; fed.len()], &fed_active);
                parts.push(l);
            }
            return Logits::Device(Tensor::cat(parts, 0));
        }
        let mut last = vec![0.0; next.len() * v];
        for (fed, (l, used)) in rows.iter().zip(outs) {
            let l = to_vec(l);
            for (j, &r) in fed.iter().enumerate() {
                last[r * v..(r + 1) * v].copy_from_slice(&l[j * v..(j + 1) * v]);
            }
            let fed_active: Vec<bool> = fed.iter().map(|&r| active[r]).collect();
            log.record(used, fed, &vec![pos; fed.len()], &fed_active);
        }
        Logits::Host(last)
    }
}

/// `o` with its routes kept on the device when `on` and every layer's routing allows it.
fn with_routes(o: ForwardOptions<'static>, on: bool) -> ForwardOptions<'static> {
    let allowed = o.routing.iter().all(crate::model::device_routes::allows);
    ForwardOptions {
        routes_on_device: on && allowed,
        ..o
    }
}

/// The last position's logits `[n, v]` of a prefill's `[n·pw, v]`.
fn last_position(logits: Tensor<2>, (n, pw, v): (usize, usize, usize)) -> Tensor<2> {
    logits
        .reshape([n, pw, v])
        .slice([0..n, pw - 1..pw, 0..v])
        .reshape([n, v])
}

/// The shards' prefill logits in row order: on the host, or on the device (a shard computed
/// on the host, [`prefill_shared`], uploaded).
fn join(parts: Vec<Logits>, on_device: bool, v: usize, device: &burn::tensor::Device) -> Logits {
    if !on_device {
        let mut all = Vec::new();
        for p in parts {
            match p {
                Logits::Host(l) => all.extend(l),
                Logits::Device(t) => all.extend(to_vec(t)),
            }
        }
        return Logits::Host(all);
    }
    let tensors = parts
        .into_iter()
        .map(|p| match p {
            Logits::Host(l) => {
                let n = l.len() / v;
                floats(l, [n, v], device)
            }
            Logits::Device(t) => t,
        })
        .collect();
    Logits::Device(Tensor::cat(tensors, 0))
}

/// A shard's prefill on the CPU backend with each run of identical prompt rows (a prompt
/// group's G copies) computed once: the prompts' forward on one row per run, its cache rows then
/// copied to every row of the run ([`LayerCache::take_rows`]), and its last
/// logits and routes likewise. The same bits as the prefill of every row: a row's numbers do not
/// depend on the other rows of a product as long as every product keeps its gemm path, which the
/// experts keep through `LayerRouting::repeats` and the token-wise products through
/// `crate::model::shared::general_rows` (see [`crate::model::shared`]'s module doc). `None`
/// (nothing computed) where no row repeats, rows get forced routes, or the model and options do
/// not allow a compact forward (`Model::may_compact`: router noise, an inner dimension over 512,
/// another device, …).
fn prefill_shared(
    model: &Model,
    batch: &SeqBatch,
    opts: &ForwardOptions<'_>,
    cache: &mut Vec<LayerCache>,
) -> Option<(Vec<f32>, Vec<Vec<u16>>)> {
    use crate::model::shared::{count_shared, general_rows};
    let cfg = &model.cfg;
    let (n, pw, v, k) = (batch.batch, batch.seq, cfg.vocab_size, cfg.top_k);
    if !model.may_compact(opts, pw) || opts.routing.iter().any(|r| r.forced.is_some()) {
        return None;
    }
    let row = |r: usize| {
        let p = r * pw..(r + 1) * pw;
        (&batch.tokens[p.clone()], &batch.valid[p])
    };
    let (mut firsts, mut src) = (Vec::new(), Vec::with_capacity(n));
    for r in 0..n {
        if r == 0 || row(r) != row(r - 1) {
            firsts.push(r);
        }
        src.push(firsts.len() - 1);
    }
    let c = firsts.len();
    if c == n || !general_rows(cfg, c * pw) {
        return None;
    }
    let mut runs = vec![0usize; c];
    src.iter().for_each(|&i| runs[i] += 1);
    let repeats: Vec<usize> = runs
        .iter()
        .flat_map(|&m| std::iter::repeat_n(m, pw))
        .collect();
    let compact = SeqBatch {
        batch: c,
        seq: pw,
        tokens: rows_from(&batch.tokens, &firsts, pw),
        valid: rows_from(&batch.valid, &firsts, pw),
    };
    let routing = (0..cfg.n_layers)
        .map(|l| LayerRouting {
            repeats: Some(&repeats),
            ..opts.routing.get(l).cloned().unwrap_or_default()
        })
        .collect();
    let o = ForwardOptions {
        routing,
        ..opts.clone()
    };
    let out = model.forward_at(&compact, 0, &compact.valid, &o, Some(cache));
    if cache.iter().any(|l| l.k.is_some()) {
        // The tensor path's cache (forced in a test): start again with every row.
        cache.clear();
        return None;
    }
    cache.iter_mut().for_each(|l| l.take_rows(&src));
    count_shared();
    let last = rows_from(&to_vec(last_position(out.logits, (c, pw, v))), &src, v);
    let used = (out.traces.iter())
        .map(|t| rows_from(&t.used, &src, pw * k))
        .collect();
    Some((last, used))
}

#[cfg(test)]
mod tests {
    use super::rows_to_keep;

    /// Active rows stay, finished ones fill up to the floor, and nothing changes unless a
    /// quarter of the rows goes.
    #[test]
    fn rows_to_keep_keeps_the_floor_and_drops_a_quarter_at_least() {
        let rows: Vec<usize> = (10..18).collect();
        let active = |on: &[usize]| -> Vec<bool> { (0..20).map(|r| on.contains(&r)).collect() };
        assert_eq!(
            rows_to_keep(&rows, &active(&[11, 15]), false),
            Some(vec![1, 5])
        );
        assert_eq!(rows_to_keep(&rows, &active(&[17]), false), Some(vec![0, 7]));
        assert_eq!(rows_to_keep(&rows, &active(&[]), false), Some(vec![0, 1]));
        assert_eq!(
            rows_to_keep(&rows, &active(&[10, 11, 12, 13, 14, 15, 16]), false),
            None
        );
        assert_eq!(
            rows_to_keep(&rows, &active(&[10, 11, 12, 13, 14, 15]), false),
            Some(vec![0, 1, 2, 3, 4, 5])
        );
        assert_eq!(
            rows_to_keep(&[3], &active(&[]), false),
            None,
            "one row stays one row"
        );
        let many: Vec<usize> = (0..100).collect();
        let on: Vec<bool> = (0..100).map(|r| r % 10 == 0).collect();
        let keep = rows_to_keep(&many, &on, true).unwrap();
        assert_eq!(
            keep.len(),
            65,
            "more than 64 stay when an inner dimension is long"
        );
        assert!(keep.iter().all(|&i| on[i] || i < 70));
        assert_eq!(rows_to_keep(&many, &on, false).unwrap().len(), 10);
    }
}
