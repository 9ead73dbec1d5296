//! Minibatches and micro-batches of a rollout batch, and gradient accumulation over the
//! micro-batches of one minibatch.
//!
//! A minibatch (one optimizer step) holds whole prompt groups; it is processed as micro-batches
//! of whole groups, each with its own forward, loss and backward. Their losses are weighted by
//! [`micro_share`](super::loss::micro_share) so that they add up to the minibatch's loss, and their gradients are summed
//! ([`accumulate`]). The load-balancing loss keeps the *whole minibatch's* routed-slot
//! fractions (`aux_loss_of_parts`), so splitting changes rounding only, not the objective.
//! Micro-batches run in parallel when the thread pool has more than one thread.

use super::config::RlConfig;
use super::loss::LossStats;
use super::rollout::Rollout;
use crate::model::moe::LoadTerms;
use crate::model::{Model, SeqBatch, Shared, aux_loss_of_parts};
use crate::optim::AdamW;
use crate::util::parallel::par_map_mut;
use crate::util::tensors::scalar;
use burn::tensor::Tensor;

/// A rollout batch cut for the trainer: its minibatches and their micro-batches (micro-batch
/// `j` of minibatch `m` is `micros[m * n_micro + j]`), with the rollout engine's log-probs and
/// routes in the same layouts.
pub struct Batch {
    pub ro: Rollout,
    pub mbs: Vec<Minibatch>,
    pub micros: Vec<Minibatch>,
    pub n_micro: usize,
    /// Per response token of the rollout batch.
    pub logp_mu: Vec<f32>,
    /// Per micro-batch, per MoE layer: the rollout engine's routes `[tokens, k]`.
    pub rollout_routes: Vec<Vec<Vec<u16>>>,
}

impl Batch {
    pub fn new(ro: Rollout, cfg: &RlConfig, k: usize) -> Batch {
        let n_micro = cfg.micro_per_minibatch();
        let mbs = minibatches(&ro, cfg.group_size, cfg.minibatches);
        let micros = minibatches(&ro, cfg.group_size, cfg.minibatches * n_micro);
        let logp_mu = ro.generation.logp.iter().flatten().copied().collect();
        let seq = ro.generation.batch.seq;
        let rollout_routes = micros
            .iter()
            .map(|mb| {
                let r = mb.rows.start * seq * k..mb.rows.end * seq * k;
                ro.generation
                    .routes
                    .iter()
                    .map(|l| l[r.clone()].to_vec())
                    .collect()
            })
            .collect();
        Batch {
            ro,
            mbs,
            micros,
            n_micro,
            logp_mu,
            rollout_routes,
        }
    }

    /// Token positions of the rollout layout that micro-batch `mb` covers.
    pub fn token_range(&self, mb: &Minibatch) -> std::ops::Range<usize> {
        let seq = self.ro.generation.batch.seq;
        mb.rows.start * seq..mb.rows.end * seq
    }
}

/// Minibatch `index` of a rollout batch: whole prompt groups, in the rollout batch's layout.
#[derive(Clone, Debug)]
pub struct Minibatch {
    pub index: usize,
    /// Response rows of the rollout batch.
    pub rows: std::ops::Range<usize>,
    /// Response tokens of the rollout batch (flattened in row order).
    pub tokens: std::ops::Range<usize>,
    pub batch: SeqBatch,
    /// Row of the minibatch's flattened logits that predicts each response token.
    pub logit_rows: Vec<usize>,
    pub targets: Vec<usize>,
    /// Response (within the minibatch) of each token, and tokens per response.
    pub seg: Vec<usize>,
    pub lens: Vec<usize>,
    /// The prompt groups: `group_size` rows that share their first `prompt_width` positions.
    pub groups: Shared,
}

/// Split a rollout into `n` minibatches of whole prompt groups.
pub fn minibatches(ro: &Rollout, group_size: usize, n: usize) -> Vec<Minibatch> {
    let g = &ro.generation;
    let (seq, pw) = (g.batch.seq, g.prompt_width);
    let rows_per = g.responses.len() / n;
    assert_eq!(rows_per % group_size, 0, "minibatches hold whole groups");
    let mut tok_start = 0;
    (0..n)
        .map(|m| {
            let rows = m * rows_per..(m + 1) * rows_per;
            let batch = SeqBatch {
                batch: rows_per,
                seq,
                tokens: g.batch.tokens[rows.start * seq..rows.end * seq].to_vec(),
                valid: g.batch.valid[rows.start * seq..rows.end * seq].to_vec(),
            };
            let (mut logit_rows, mut targets, mut seg, mut lens) = (vec![], vec![], vec![], vec![]);
            for (i, r) in rows.clone().enumerate() {
                let resp = &g.responses[r];
                for (j, &tok) in resp.iter().enumerate() {
                    logit_rows.push(i * seq + pw + j - 1);
                    targets.push(tok as usize);
                    seg.push(i);
                }
                lens.push(resp.len());
            }
            let tokens = tok_start..tok_start + targets.len();
            tok_start = tokens.end;
            Minibatch {
                index: m,
                rows,
                tokens,
                batch,
                logit_rows,
                targets,
                seg,
                lens,
                groups: Shared {
                    group: group_size,
                    prefix: pw,
                },
            }
        })
        .collect()
}

impl LossStats {
    /// The statistics of a minibatch from those of its micro-batches (in row order) and their
    /// [`micro_share`](super::loss::micro_share)s: per-token and per-response vectors are concatenated, the loss and the
    /// KL are share-weighted sums.
    pub fn concat(parts: Vec<(LossStats, f32)>) -> LossStats {
        let mut out = LossStats::default();
        let mut kl: Option<f32> = None;
        let mut tis: Option<Vec<f32>> = None;
        let mut shift: Option<Vec<f32>> = None;
        let mut all_masked = !parts.is_empty();
        let mut replay: Option<(usize, usize)> = None;
        for (p, w) in parts {
            all_masked &= p.all_masked;
            if let Some((n, r)) = p.replay_filter {
                let e = replay.get_or_insert((0, 0));
                (e.0, e.1) = (e.0 + n, e.1 + r);
            }
            out.masked.extend(p.masked);
            out.loss_policy += w * p.loss_policy;
            out.logp.extend(p.logp);
            out.ratio_tok.extend(p.ratio_tok);
            out.ratio_seq.extend(p.ratio_seq);
            out.clip_low.extend(p.clip_low);
            out.clip_high.extend(p.clip_high);
            out.clip_seq.extend(p.clip_seq);
            if let Some(k) = p.kl_ref {
                *kl.get_or_insert(0.0) += w * k;
            }
            if let Some(t) = p.tis_weight {
                tis.get_or_insert_with(Vec::new).extend(t);
            }
            if let Some(g) = p.router_shift {
                shift.get_or_insert_with(Vec::new).extend(g);
            }
        }
        out.kl_ref = kl;
        out.tis_weight = tis;
        out.router_shift = shift;
        out.all_masked = all_masked;
        out.replay_filter = replay;
        out
    }
}

/// A micro-batch after its forward: the graph's leaves, its loss terms still to be combined,
/// and what the update record needs.
pub struct MicroForward {
    pub train: Model,
    pub stats: LossStats,
    /// [`micro_share`](super::loss::micro_share) of the policy loss.
    pub share: f32,
    /// Share of the minibatch's real tokens (the z-loss averages over real tokens).
    pub active_share: f32,
    pub loss_z: f32,
    /// Share-weighted policy loss and z-loss, with graph (taken by the backward).
    pub partial: Option<(Tensor<1>, Tensor<1>)>,
    pub load: Vec<LoadTerms>,
    pub routes_before: Vec<Vec<u16>>,
    pub routes_used: Vec<Vec<u16>>,
    pub probs_before: Vec<Vec<f32>>,
}

/// A minibatch's loss terms and summed gradient, from its micro-batches.
pub struct Accumulated {
    pub stats: LossStats,
    /// Per MoE layer: native routed slots per expert over the minibatch's active tokens (the
    /// load the `sigmoid_bias` router's bias update balances).
    pub counts: Vec<Vec<f32>>,
    pub loss_aux: f32,
    pub loss_z: f32,
    pub loss_total: f32,
    /// The summed gradient, `None` when a loss or a gradient was not finite.
    pub grads: Option<Vec<Tensor<2>>>,
    /// Per MoE layer over the minibatch layout.
    pub routes_before: Vec<Vec<u16>>,
    pub routes_used: Vec<Vec<u16>>,
    pub probs_before: Vec<Vec<f32>>,
}

/// Combine the micro-batches of one minibatch (in row order): the whole minibatch's
/// load-balancing loss split over the parts, each part's total loss and backward (in parallel
/// when the pool has threads), the gradients summed in order, the statistics concatenated.
pub fn accumulate(
    parts: Vec<MicroForward>,
    top_k: usize,
    aux_coef: f64,
    z_coef: f64,
) -> Accumulated {
    let mut parts = parts;
    let n_layers = parts[0].train.cfg.n_layers;
    let loads: Vec<&[LoadTerms]> = parts.iter().map(|f| f.load.as_slice()).collect();
    let aux = aux_loss_of_parts(&loads, top_k, &parts[0].train.device());
    let loss_aux: f32 = aux.iter().map(|a| scalar(a.clone().inner())).sum();
    let back: Vec<(f32, Option<Vec<Tensor<2>>>)> = par_map_mut(&mut parts, |j, f| {
        let (ploss, z) = f.partial.take().expect("taken once");
        let total = ploss + aux[j].clone() * aux_coef as f32 + z * (z_coef as f32 * f.active_share);
        let loss_total = scalar(total.clone().inner());
        let grads = loss_total
            .is_finite()
            .then(|| AdamW::collect_grads(&f.train.weights, &total.backward()));
        (loss_total, grads)
    });
    let loss_z: f32 = parts.iter().map(|f| f.active_share * f.loss_z).sum();
    let loss_total: f32 = back.iter().map(|b| b.0).sum();
    let finite = loss_total.is_finite() && back.iter().all(|b| b.1.is_some());
    let grads = back
        .into_iter()
        .filter_map(|b| b.1)
        .reduce(|acc, g| acc.into_iter().zip(g).map(|(a, b)| a + b).collect())
        .filter(|_| finite);
    let counts: Vec<Vec<f32>> = (0..parts[0].load.len())
        .map(|l| {
            let mut c = vec![0f32; parts[0].load[l].counts.len()];
            for p in &parts {
                c.iter_mut()
                    .zip(&p.load[l].counts)
                    .for_each(|(a, b)| *a += b);
            }
            c
        })
        .collect();
    let routes_before = concat_layers(parts.iter().map(|f| &f.routes_before), n_layers);
    let routes_used = concat_layers(parts.iter().map(|f| &f.routes_used), n_layers);
    let probs_before = concat_layers(parts.iter().map(|f| &f.probs_before), n_layers);
    let stats = LossStats::concat(parts.into_iter().map(|f| (f.stats, f.share)).collect());
    Accumulated {
        stats,
        counts,
        loss_aux,
        loss_z,
        loss_total,
        grads,
        routes_before,
        routes_used,
        probs_before,
    }
}

/// Per-layer vectors of consecutive parts of a layout, joined layer by layer. A model without
/// MoE layers has no per-layer entries, so the result is empty then.
pub fn concat_layers<'a, T: Clone + 'a>(
    parts: impl Iterator<Item = &'a Vec<Vec<T>>>,
    n_layers: usize,
) -> Vec<Vec<T>> {
    let parts: Vec<&Vec<Vec<T>>> = parts.collect();
    let n = parts.first().map_or(0, |p| p.len()).min(n_layers);
    (0..n)
        .map(|l| parts.iter().flat_map(|p| p[l].iter().cloned()).collect())
        .collect()
}
