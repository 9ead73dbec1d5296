//! Batched sampling with a KV cache on the non-autodiff device: tokens, per-token log-probs and
//! the routes the generating model used, laid out like the trainer's full-sequence batch.

use crate::model::RoutingTrace;
use crate::model::{ForwardOptions, LayerCache, LayerRouting, Model, NO_ROUTE, SeqBatch};
use crate::task::{EOS, PAD};
use crate::util::tensors::{ints, to_vec};
use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;

/// How to pick each next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Sampling distribution is `softmax(logits / temperature)`; log-probs refer to it.
    pub temperature: f32,
    /// Take the arg-max instead of sampling (log-probs still refer to the tempered distribution).
    pub greedy: bool,
    /// At most this many response tokens (`<eos>` included).
    pub max_new: usize,
    /// Standard deviation of Gaussian noise added to the logits before sampling (a mismatched
    /// rollout engine); 0 = none. Log-probs refer to the noisy distribution actually sampled.
    pub logit_noise: f32,
}

/// Result of generating one response per prompt.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Prompt (left-padded to `prompt_width`) then response (right-padded): `[batch, seq]`.
    pub batch: SeqBatch,
    pub prompt_width: usize,
    /// Response tokens per row, `<eos>` included when produced.
    pub responses: Vec<Vec<u32>>,
    /// Log-prob of each response token under the sampling distribution.
    pub logp: Vec<Vec<f32>>,
    /// Per MoE layer, the expert ids that ran, `[batch·seq, k]`; [`NO_ROUTE`] where the model
    /// never routed that position (padding, and each row's last token, which is never fed back).
    pub routes: Vec<Vec<u16>>,
}

/// Left-pad prompts to a common width: `(width, tokens, valid)`, `[batch, width]` row-major.
pub fn left_pad(prompts: &[Vec<u32>]) -> (usize, Vec<u32>, Vec<bool>) {
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut tokens = Vec::with_capacity(prompts.len() * width);
    let mut valid = Vec::with_capacity(prompts.len() * width);
    for p in prompts {
        let pad = width - p.len();
        tokens.extend(std::iter::repeat_n(PAD, pad).chain(p.iter().copied()));
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, p.len())));
    }
    (width, tokens, valid)
}

/// Lay out prompts and responses as one `[batch, prompt_width + resp_width]` batch.
pub fn layout(prompts: &[Vec<u32>], responses: &[Vec<u32>]) -> (SeqBatch, usize) {
    let (pw, ptok, pvalid) = left_pad(prompts);
    let rw = responses.iter().map(Vec::len).max().unwrap_or(0);
    let seq = pw + rw;
    let mut tokens = Vec::with_capacity(prompts.len() * seq);
    let mut valid = Vec::with_capacity(prompts.len() * seq);
    for (b, r) in responses.iter().enumerate() {
        tokens.extend_from_slice(&ptok[b * pw..(b + 1) * pw]);
        valid.extend_from_slice(&pvalid[b * pw..(b + 1) * pw]);
        tokens.extend(
            r.iter()
                .copied()
                .chain(std::iter::repeat_n(PAD, rw - r.len())),
        );
        valid.extend(
            std::iter::repeat_n(true, r.len()).chain(std::iter::repeat_n(false, rw - r.len())),
        );
    }
    (
        SeqBatch {
            batch: prompts.len(),
            seq,
            tokens,
            valid,
        },
        pw,
    )
}

/// Pick a token from one row of logits; returns `(token, logp)` under `softmax(logits / τ)`.
fn pick(row: &[f32], s: &Sampling, rng: &mut Xoshiro256PlusPlus) -> (u32, f32) {
    let t = f64::from(s.temperature);
    let noise = |rng: &mut Xoshiro256PlusPlus| -> f64 {
        if s.logit_noise > 0.0 {
            rand_distr::Distribution::<f64>::sample(
                &rand_distr::Normal::new(0.0, f64::from(s.logit_noise)).expect("valid sigma"),
                rng,
            )
        } else {
            0.0
        }
    };
    let scaled: Vec<f64> = row
        .iter()
        .map(|&x| (f64::from(x) + noise(rng)) / t)
        .collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + scaled.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    let tok = if s.greedy {
        // First maximum: deterministic ties.
        let mut best = 0;
        for (i, &x) in scaled.iter().enumerate() {
            if x > scaled[best] {
                best = i;
            }
        }
        best
    } else {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut chosen = scaled.len() - 1;
        for (i, &x) in scaled.iter().enumerate() {
            acc += (x - lse).exp();
            if u < acc {
                chosen = i;
                break;
            }
        }
        chosen
    };
    (tok as u32, (scaled[tok] - lse) as f32)
}

/// Generate one response per prompt with a KV cache. `model` should be the non-autodiff model.
/// `routing_for` may supply per-layer routing controls for each forward (given the number of
/// tokens in it), e.g. router noise of a mismatched rollout engine.
pub fn generate(
    model: &Model,
    prompts: &[Vec<u32>],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
    routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
) -> Generation {
    generate_sharded(model, prompts, s, rng, routing_for, 1)
}

/// [`generate`] with the rows split into `shards` contiguous shards, each with its own KV cache
/// and forward, run in parallel when the thread pool has more than one thread. Tokens are still
/// sampled on this thread, row by row in order from `rng`, so the random stream is the one of
/// an unsharded run; `routing_for` is called once per shard and forward, in shard order. The
/// numbers do not depend on the thread count.
pub fn generate_sharded(
    model: &Model,
    prompts: &[Vec<u32>],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
    routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
    shards: usize,
) -> Generation {
    let b = prompts.len();
    let v = model.cfg.vocab_size;
    // One forward per decoded position with the same weights: extend the QKV projections once.
    let model = &model.with_extended_qkv();
    let (pw, ptok, pvalid) = left_pad(prompts);
    assert!(pw >= 1, "prompts must not be empty");
    assert!(
        pw + s.max_new <= model.cfg.max_seq_len,
        "prompt width {pw} + max_new {} exceeds max_seq_len {}",
        s.max_new,
        model.cfg.max_seq_len
    );
    let mut sh = Shards::new(b, shards);
    let mut log = RouteLog::new(model.cfg.top_k);
    let mut last = sh.prefill(model, &ptok, &pvalid, pw, routing_for, &mut log);
    let mut key_valid: Vec<Vec<bool>> = (0..b)
        .map(|r| pvalid[r * pw..(r + 1) * pw].to_vec())
        .collect();
    let mut responses = vec![Vec::new(); b];
    let mut logp = vec![Vec::new(); b];
    let mut done = vec![false; b];
    for step in 0..s.max_new {
        let mut next = vec![PAD; b];
        for r in 0..b {
            if done[r] {
                continue;
            }
            let (tok, lp) = pick(&last[r * v..(r + 1) * v], s, rng);
            responses[r].push(tok);
            logp[r].push(lp);
            next[r] = tok;
            if tok == EOS {
                done[r] = true;
            }
        }
        // Feed the new tokens only if some row still needs another prediction.
        let active: Vec<bool> = (0..b).map(|r| !done[r]).collect();
        if step + 1 == s.max_new || active.iter().all(|a| !a) {
            break;
        }
        for r in 0..b {
            key_valid[r].push(active[r]);
        }
        // Rows that finished leave the shards' batches where that keeps every bit.
        #[cfg(feature = "flex")]
        sh.drop_finished(&active, long_inner(&model.cfg));
        let pos = pw + step;
        last = sh.decode(
            model,
            &next,
            &active,
            &key_valid,
            pos,
            routing_for,
            &mut log,
        );
    }
    let (batch, _) = layout(prompts, &responses);
    let routes = log.into_layout(b, batch.seq);
    Generation {
        batch,
        prompt_width: pw,
        responses,
        logp,
        routes,
    }
}

/// The routes a generation used, as (row, position, k ids) per layer; laid out at the end.
struct RouteLog {
    k: usize,
    layers: Vec<Vec<(usize, usize, Vec<u16>)>>,
}

impl RouteLog {
    fn new(k: usize) -> Self {
        RouteLog {
            k,
            layers: Vec::new(),
        }
    }

    /// Record the used ids of the active tokens of one forward, given each token's row and
    /// position.
    fn record(
        &mut self,
        traces: &[RoutingTrace],
        rows: &[usize],
        positions: &[usize],
        active: &[bool],
    ) {
        let k = self.k;
        if self.layers.len() < traces.len() {
            self.layers.resize_with(traces.len(), Vec::new);
        }
        for (l, tr) in traces.iter().enumerate() {
            for (i, ((&row, &pos), &a)) in rows.iter().zip(positions).zip(active).enumerate() {
                if a {
                    self.layers[l].push((row, pos, tr.used[i * k..(i + 1) * k].to_vec()));
                }
            }
        }
    }

    /// Per layer `[b · seq, k]` in the batch layout, `NO_ROUTE` where nothing was routed.
    fn into_layout(self, b: usize, seq: usize) -> Vec<Vec<u16>> {
        let k = self.k;
        self.layers
            .into_iter()
            .map(|entries| {
                let mut r = vec![NO_ROUTE; b * seq * k];
                for (row, pos, ids) in entries {
                    r[(row * seq + pos) * k..(row * seq + pos + 1) * k].copy_from_slice(&ids);
                }
                r
            })
            .collect()
    }
}

thread_local! {
    static EVERY_ROW: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    static LEFT_OUT: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// For tests: `f` with every row of a generation decoded until the batch ends (finished rows
/// are not left out) on this thread.
#[doc(hidden)]
pub fn with_every_row<T>(f: impl FnOnce() -> T) -> T {
    let before = EVERY_ROW.replace(true);
    let out = f();
    EVERY_ROW.set(before);
    out
}

/// For tests: how many rows generations on this thread have left out so far (each time a
/// shard drops rows, the number dropped).
#[doc(hidden)]
pub fn rows_left_out() -> usize {
    LEFT_OUT.get()
}

/// Contiguous row shards of a generation, each with its own KV cache.
struct Shards {
    bounds: Vec<std::ops::Range<usize>>,
    caches: Vec<Vec<LayerCache>>,
    /// Per shard, the rows its cache holds and each decoding step feeds, in order: all its rows
    /// until [`Shards::drop_finished`] leaves finished ones out.
    rows: Vec<Vec<usize>>,
}

/// Whether a product of a decoding step has an inner dimension over 512, which gemm splits into
/// blocks by a rule that differs for products of at most 64 rows and 64 columns (see
/// [`rows_to_keep`]).
fn long_inner(cfg: &crate::model::ModelConfig) -> bool {
    cfg.d_model.max(cfg.dense_d_ff()) > 512
}

/// Which of a shard's `rows` the next decoding steps feed (indices into `rows`), or `None` to
/// keep them all: its active rows, and finished rows in order up to a floor, when that leaves out
/// at least a quarter of them. The floor keeps every product of the step on the gemm path (and
/// blocking) it takes with all rows, so a kept row's numbers keep their bits: with a row-major
/// output gemm computes the transposed product, whose columns are these rows; one column is its
/// vector path, so at least 2 rows stay; the inner dimension is one block up to 512 whatever
/// the shape, and beyond it blocked by another rule for at most 64 columns (and 64 rows), so
/// with `long_inner` a shard of more than 64 rows keeps more than 64.
fn rows_to_keep(rows: &[usize], active: &[bool], long_inner: bool) -> Option<Vec<usize>> {
    let n = rows.len();
    let floor = if long_inner && n > 64 { 65 } else { n.min(2) };
    let live = rows.iter().filter(|&&r| active[r]).count();
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
    (keep.len() * 4 <= n * 3).then_some(keep)
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
            let choice_offset = l.choice_offset.map(|c| {
                let w = c.len() / n.max(1);
                keep.iter()
                    .flat_map(|&i| c[i * w..(i + 1) * w].iter().copied())
                    .collect()
            });
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
    fn new(b: usize, shards: usize) -> Self {
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
    /// backend, whose host cache drops them ([`crate::model::attn_core::HostKv::keep_rows`]); a
    /// finished row's logits are never read again. A shard whose cache is the tensor path's
    /// (a GPU's) keeps its rows.
    #[cfg(feature = "flex")]
    fn drop_finished(&mut self, active: &[bool], long_inner: bool) {
        if EVERY_ROW.get() {
            return;
        }
        for (rows, cache) in self.rows.iter_mut().zip(&mut self.caches) {
            if cache.iter().any(|c| c.k.is_some() || c.host.is_empty()) {
                continue;
            }
            let Some(keep) = rows_to_keep(rows, active, long_inner) else {
                continue;
            };
            for c in cache.iter_mut() {
                c.host.keep_rows(&keep);
            }
            LEFT_OUT.set(LEFT_OUT.get() + rows.len() - keep.len());
            *rows = keep.iter().map(|&i| rows[i]).collect();
        }
    }

    /// The prompts' forward (filling the caches); returns the last position's logits per row.
    fn prefill(
        &mut self,
        model: &Model,
        ptok: &[u32],
        pvalid: &[bool],
        pw: usize,
        routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
        log: &mut RouteLog,
    ) -> Vec<f32> {
        let v = model.cfg.vocab_size;
        let bounds = &self.bounds;
        let opts: Vec<ForwardOptions<'static>> =
            bounds.iter().map(|r| routing_for(r.len() * pw)).collect();
        let outs = crate::util::parallel::par_map_mut(&mut self.caches, |i, cache| {
            let r = bounds[i].clone();
            let n = r.len();
            let valid = pvalid[r.start * pw..r.end * pw].to_vec();
            let prefill = SeqBatch {
                batch: n,
                seq: pw,
                tokens: ptok[r.start * pw..r.end * pw].to_vec(),
                valid: valid.clone(),
            };
            let out = model.forward_at(&prefill, 0, &valid, &opts[i], Some(cache));
            let last = to_vec(
                out.logits
                    .reshape([n, pw, v])
                    .slice([0..n, pw - 1..pw, 0..v])
                    .reshape([n, v]),
            );
            (last, out.traces)
        });
        let mut last = Vec::new();
        for (r, (l, traces)) in bounds.iter().zip(outs) {
            let rows: Vec<usize> = r
                .clone()
                .flat_map(|row| std::iter::repeat_n(row, pw))
                .collect();
            let positions: Vec<usize> = r.clone().flat_map(|_| 0..pw).collect();
            log.record(
                &traces,
                &rows,
                &positions,
                &pvalid[r.start * pw..r.end * pw],
            );
            last.extend(l);
        }
        last
    }

    /// One decoding step: the `next` token of every row a shard still feeds, at `pos`; returns
    /// the logits per row, `[b, vocab]` (zeros for rows left out, which never read them).
    #[allow(clippy::too_many_arguments)]
    fn decode(
        &mut self,
        model: &Model,
        next: &[u32],
        active: &[bool],
        key_valid: &[Vec<bool>],
        pos: usize,
        routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
        log: &mut RouteLog,
    ) -> Vec<f32> {
        let v = model.cfg.vocab_size;
        let (bounds, rows) = (&self.bounds, &self.rows);
        let opts: Vec<ForwardOptions<'static>> = bounds
            .iter()
            .zip(rows)
            .map(|(r, fed)| {
                let o = routing_for(r.len());
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
            (to_vec(out.logits), out.traces)
        });
        let mut last = vec![0.0; next.len() * v];
        for (fed, (l, traces)) in rows.iter().zip(outs) {
            for (j, &r) in fed.iter().enumerate() {
                last[r * v..(r + 1) * v].copy_from_slice(&l[j * v..(j + 1) * v]);
            }
            let fed_active: Vec<bool> = fed.iter().map(|&r| active[r]).collect();
            log.record(&traces, fed, &vec![pos; fed.len()], &fed_active);
        }
        last
    }
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
