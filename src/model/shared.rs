//! The forward without a graph of a batch whose rows come in groups that share a prefix (a
//! prompt group: G responses to one prompt, the prompt left-padded to the batch's prompt width),
//! computing the shared positions once per group instead of once per row.
//!
//! Every batch position is computed from a *compact row*: its own, or, at a shared prefix
//! position of a group's later row, the first row's. The token-wise work (norms, the QKV and
//! output projections, the routers, the experts, the head) runs on the compact rows only; the
//! attention node lays every batch row out as it always does, reads the queries, keys and
//! values of each position from its compact row, and leaves out of a later row the queries the
//! first row computes (`Layout`).
//!
//! Why every number keeps its bits: each product's output is its own chain of fused
//! multiply-adds over the inner dimension, in order, from +0, on gemm's general path, whatever
//! the number of rows; inner dimensions up to 512 are one block for every shape. So a row's
//! values do not depend on which other rows share its product, as long as the product stays
//! on the general path: the compact batch has more than enough rows for the token-wise
//! products; each attention span keeps the node's widening ([`node_spans`]); an expert whose
//! compact rows stand for more rows of the batch runs with at least as many rows as keep
//! that batch's path (`LayerRouting::repeats`). The norms, the softmaxes and the SwiGLU work
//! row by row. A left-padding position of a later row that the node treats differently from
//! the first row's (one is among the queries computed, the other not) keeps its own compact
//! row, so padding positions keep their bits too. The forward applies only where all that
//! holds (see [`Model::forward_shared`]); it is checked against the full forward, every logit
//! and every trace bit for bit, in `tests/shared_prefix.rs`.

use super::moe::{LayerRouting, NO_ROUTE, RoutingTrace};
use super::weights::FfnWeights;
use super::{ExpertPath, ForwardOptions, Model, Pass, SeqBatch, Shared, rms_norm};
use crate::kernels::hooks::{self, Node, Switch};
use crate::kernels::{attention_shared, gemm_paths, node_spans, project_qkv};
use crate::util::rows_from;
use crate::util::tensors::{floats, is_host, to_vec};
use burn::tensor::Tensor;
use std::ops::Range;

/// Whether a forward on this thread may share rows (not under
/// [`crate::kernels::hooks::Switch::FullForwards`]).
pub(crate) fn may_share() -> bool {
    !hooks::is_on(Switch::FullForwards)
}

/// Count a forward that shared rows ([`crate::kernels::hooks::Node::SharedForward`]).
pub(crate) fn count_shared() {
    hooks::count(Node::SharedForward, 1);
}

/// Whether `rows` token rows keep every token-wise product of `cfg` on gemm's general path
/// as more rows do ([`gemm_paths::keeps_general_path`] for the narrowest product: an MoE
/// router's `n_experts` columns, the head's vocabulary, `d_model`, `d_ff`).
pub(crate) fn general_rows(cfg: &super::ModelConfig, rows: usize) -> bool {
    let router = if cfg.is_moe() {
        cfg.n_experts
    } else {
        usize::MAX
    };
    let narrowest = [router, cfg.vocab_size, cfg.d_model, cfg.d_ff];
    gemm_paths::keeps_general_path(rows, narrowest.into_iter().min().unwrap_or(1))
}

/// Where a shared forward's compact rows sit in the batch.
struct Layout {
    /// The batch positions computed, in order (one per compact row).
    keep: Vec<usize>,
    /// Per batch position, its compact row.
    src: Vec<usize>,
    /// Per compact row, the batch positions it stands for.
    repeats: Vec<usize>,
    /// Per batch row, the queries the attention node computes.
    spans: Vec<Range<usize>>,
}

impl Layout {
    /// `None` where a group's rows differ in a token or its validity within the prefix.
    fn new(batch: &SeqBatch, (d, heads): (usize, usize), sh: Shared) -> Option<Self> {
        let (b, s, g, p) = (batch.batch, batch.seq, sh.group, sh.prefix);
        let (full, need) = node_spans(&batch.valid, (b, s, d, heads));
        let first = |r: usize| r - r % g;
        // A later row's prefix position is its own where the node computes its query and not
        // the first row's, or the other way round (padding only: the node computes every real
        // position's query).
        let own = |r: usize, i: usize| {
            r.is_multiple_of(g) || i >= p || full[r].contains(&i) != full[first(r)].contains(&i)
        };
        let (mut keep, mut comp) = (Vec::new(), vec![usize::MAX; b * s]);
        for r in 0..b {
            for i in (0..s).filter(|&i| own(r, i)) {
                comp[r * s + i] = keep.len();
                keep.push(r * s + i);
            }
        }
        let src: Vec<usize> = (0..b * s)
            .map(|f| match comp[f] {
                usize::MAX => comp[first(f / s) * s + f % s],
                c => c,
            })
            .collect();
        let mut repeats = vec![0; keep.len()];
        for f in 0..b * s {
            let o = keep[src[f]];
            if batch.tokens[f] != batch.tokens[o] || batch.valid[f] != batch.valid[o] {
                return None;
            }
            repeats[src[f]] += 1;
        }
        let spans = (0..b)
            .map(|r| {
                let f = full[r].clone();
                if r.is_multiple_of(g) {
                    return f;
                }
                // The row's own queries: from the prefix on, and its own padding positions.
                let Some(lo) = f.clone().find(|&i| own(r, i)) else {
                    return f.end..f.end;
                };
                lo.min(f.end.saturating_sub(need)).max(f.start)..f.end
            })
            .collect();
        Some(Layout {
            keep,
            src,
            repeats,
            spans,
        })
    }

    /// The compact rows of a batch-layout `[b·s, width]`.
    fn gather<T: Copy>(&self, batch: &[T], width: usize) -> Vec<T> {
        rows_from(batch, &self.keep, width)
    }

    /// The batch layout `[b·s, width]` of compact rows.
    fn expand<T: Copy>(&self, compact: &[T], width: usize) -> Vec<T> {
        rows_from(compact, &self.src, width)
    }

    /// A trace of the compact rows as the full forward's: every position's ids, distribution
    /// and input; `replay_slots` counted over the batch's `forced` rows.
    fn expand_trace(&self, t: RoutingTrace, forced: Option<&[u16]>, e_n: usize) -> RoutingTrace {
        let k = t.k;
        let replay_slots = forced.map_or(0, |f| {
            k * f
                .chunks_exact(k)
                .filter(|row| row.iter().any(|&e| e != NO_ROUTE))
                .count()
        });
        let d = t
            .input
            .as_ref()
            .map_or(0, |v| v.len() / self.keep.len().max(1));
        RoutingTrace {
            n_tokens: self.src.len(),
            k,
            native: self.expand(&t.native, k),
            used: self.expand(&t.used, k),
            probs: t.probs.map(|p| self.expand(&p, e_n)),
            replay_slots,
            replay_replaced: 0,
            input: t.input.map(|v| self.expand(&v, d)),
        }
    }
}

impl Model {
    /// [`Model::forward`]'s logits `[b·s, vocab]` and traces, bit for bit at every position,
    /// computing the positions a group's rows share once (see the module doc). `None` where this
    /// does not apply, and the caller runs the full forward: another device or a graph; groups
    /// that are not whole or differ within the prefix; router-logit or choice offsets, a replay
    /// filter, or forced routes that differ within the prefix; a product whose inner dimension
    /// exceeds 512; a sequence of at most 16 positions; experts off the fused path.
    pub fn forward_shared(
        &self,
        batch: &SeqBatch,
        opts: &ForwardOptions<'_>,
        sh: Shared,
    ) -> Option<(Tensor<2>, Vec<RoutingTrace>)> {
        let (x, traces, lay) = self.shared_blocks(batch, opts, sh, false)?;
        let x = rms_norm(x?, &self.weights.final_norm);
        let logits = to_vec(x.matmul(self.weights.head.clone()));
        let v = self.cfg.vocab_size;
        let logits = floats(lay.expand(&logits, v), [lay.src.len(), v], &self.device());
        Some((logits, traces))
    }

    /// [`Model::route_traces`] computing the shared positions once, as [`Model::forward_shared`].
    pub fn route_traces_shared(
        &self,
        batch: &SeqBatch,
        opts: &ForwardOptions<'_>,
        sh: Shared,
    ) -> Option<Vec<RoutingTrace>> {
        Some(self.shared_blocks(batch, opts, sh, true)?.1)
    }

    /// Whether a shared forward applies (see [`Model::forward_shared`]), before the layout.
    fn shares(&self, batch: &SeqBatch, opts: &ForwardOptions<'_>, sh: Shared) -> bool {
        let (b, s) = (batch.batch, batch.seq);
        self.may_compact(opts, s)
            && sh.group >= 2
            && b.is_multiple_of(sh.group)
            && (1..s).contains(&sh.prefix)
            && gemm_paths::sharing_worthwhile(s)
    }

    /// What every forward that computes rows shared by several batch rows once needs, whatever
    /// the rows (this module's forwards and the rollout's shared prefill): sharing not turned
    /// off, the CPU backend without a graph, every product's inner dimension (`d_model`, the
    /// FFN widths, `seq` positions) at most 512, experts on the fused path, and no routing
    /// input of a row's own (router-logit or choice offsets, a replay filter) or repeats
    /// already set.
    pub(crate) fn may_compact(&self, opts: &ForwardOptions<'_>, seq: usize) -> bool {
        let cfg = &self.cfg;
        let inner = [cfg.d_model, cfg.d_ff, cfg.dense_d_ff(), seq];
        may_share()
            && is_host(&self.device())
            && !self.weights.embed.is_autodiff()
            && inner.iter().all(|&n| gemm_paths::one_block(n))
            && (!cfg.is_moe() || cfg.expert_path == ExpertPath::Fused)
            && opts.routing.iter().all(|r| {
                r.logit_offset.is_none()
                    && r.choice_offset.is_none()
                    && r.replay_filter.is_none()
                    && r.repeats.is_none()
            })
    }

    /// The blocks of a shared forward: the compact rows' last hidden state (`None` with
    /// `routes_only`, which stops after the last MoE layer's router), the traces in the batch
    /// layout, and the layout.
    fn shared_blocks(
        &self,
        batch: &SeqBatch,
        opts: &ForwardOptions<'_>,
        sh: Shared,
        routes_only: bool,
    ) -> Option<(Option<Tensor<2>>, Vec<RoutingTrace>, Layout)> {
        if !self.shares(batch, opts, sh) {
            return None;
        }
        let cfg = &self.cfg;
        let (b, s, d, k) = (batch.batch, batch.seq, cfg.d_model, cfg.top_k);
        let lay = Layout::new(batch, (d, cfg.n_heads), sh)?;
        if !general_rows(cfg, lay.keep.len()) {
            return None;
        }
        count_shared();
        let forced: Vec<Option<Vec<u16>>> = (opts.routing.iter())
            .map(|r| r.forced.map(|f| lay.gather(f, k)))
            .collect();
        let same = |f: &[u16], c: &[u16]| lay.expand(c, k) == f;
        if (opts.routing.iter().zip(&forced))
            .any(|(r, c)| matches!((r.forced, c), (Some(f), Some(c)) if !same(f, c)))
        {
            return None;
        }
        let device = self.device();
        let tokens = lay.gather(&batch.tokens, 1);
        let valid = lay.gather(&batch.valid, 1);
        let (c, shape) = (tokens.len(), (b, s, cfg.n_heads));
        let pass = Pass {
            tokens: &tokens,
            valid: &valid,
            attend: &mut |l, blk, h| {
                let w_ext = match &self.qkv_ext {
                    Some(e) => e[l].clone(),
                    None => crate::kernels::extend_qkv(&self.rope, blk.wqkv.clone()),
                };
                let qkv = project_qkv(&h, &w_ext, cfg.n_heads);
                let spans = lay.spans.clone();
                let ctx = attention_shared(&qkv, &lay.src, &self.rope, shape, &batch.valid, spans)?;
                let ctx = floats(lay.gather(&ctx, d), [c, d], &device);
                Some(ctx.matmul(blk.wo.clone()))
            },
            routing: &|l| LayerRouting {
                forced: forced.get(l).and_then(|f| f.as_deref()),
                want_input: opts.routing.get(l).is_some_and(|r| r.want_input),
                round_logits: opts.routing.get(l).is_some_and(|r| r.round_logits),
                repeats: Some(&lay.repeats),
                ..LayerRouting::default()
            },
        };
        let out = self.run_blocks(pass, opts, routes_only)?;
        // The traces in the batch layout; the MoE layers are the blocks' first ones with one.
        let moe_layers = (self.weights.blocks.iter().enumerate())
            .filter(|(_, b)| matches!(b.ffn, FfnWeights::Moe(_)))
            .map(|(l, _)| l);
        let traces = (out.traces.into_iter().zip(moe_layers))
            .map(|(t, l)| {
                let f = opts.routing.get(l).and_then(|r| r.forced);
                lay.expand_trace(t, f, cfg.n_experts)
            })
            .collect();
        Some((out.x, traces, lay))
    }
}
