//! π_old: the trainer's no-graph pass over the rollout batch before the first update (its
//! log-probs, entropy, native routes and router distributions, and the reference model's
//! log-probs).

use super::config::RoutingMode;
use super::micro::{Batch, concat_layers};
use super::step::Trainer;
use crate::model::{ForwardOptions, RoutingTrace, token_logp};
use crate::parallel::par_map;
use crate::tensors::{ints, to_vec};

/// What the π_old pass computed for one micro-batch.
pub(super) struct OldPass {
    pub entropy_sum: f64,
    pub logp: Vec<f32>,
    /// Per MoE layer: native routes and router distributions.
    pub routes: Vec<Vec<u16>>,
    /// Per MoE layer: the ids this pass ran (the rollout engine's under R3).
    pub used: Vec<Vec<u16>>,
    pub probs: Vec<Vec<f32>>,
    pub logp_ref: Option<Vec<f32>>,
}

/// π_old of the whole rollout batch.
pub(super) struct OldPolicy {
    pub passes: Vec<OldPass>,
    pub logp: Vec<f32>,
    pub entropy: f32,
    /// Per minibatch, per MoE layer: π_old's native routes.
    pub routes: Vec<Vec<Vec<u16>>>,
}

impl Trainer {
    /// π_old: one no-graph forward per micro-batch, before the first update, in exactly the
    /// layout and routing the updates will use, so minibatch 1 is exactly on-policy. The
    /// reference model's log-probs come from the same pass.
    pub(super) fn recompute_old(&self, b: &Batch) -> OldPolicy {
        let inner = self.model.inner();
        let temp = self.cfg.temperature;
        let passes: Vec<OldPass> = par_map(b.micros.len(), |i| {
            let mb = &b.micros[i];
            let forced =
                (self.cfg.routing == RoutingMode::R3).then(|| b.rollout_routes[i].as_slice());
            let out = inner.forward(&mb.batch, &self.routing(forced, None));
            let device = out.logits.device();
            let rows = || ints(&mb.logit_rows, [mb.logit_rows.len()], &device);
            let picked = out.logits.select(0, rows());
            let host = to_vec(picked.clone());
            let used = out.traces.iter().map(|t| t.used.clone()).collect();
            let (routes, probs) = native_and_probs(out.traces);
            OldPass {
                entropy_sum: entropy_sum(&host, self.model.cfg.vocab_size, temp),
                logp: to_vec(token_logp(picked, &mb.targets, temp)),
                routes,
                used,
                probs,
                logp_ref: self.reference.as_ref().map(|r| {
                    let o = r.forward(&mb.batch, &ForwardOptions::default());
                    to_vec(token_logp(o.logits.select(0, rows()), &mb.targets, temp))
                }),
            }
        });
        let logp: Vec<f32> = passes.iter().flat_map(|o| o.logp.iter().copied()).collect();
        let ent_sum: f64 = passes.iter().map(|o| o.entropy_sum).sum();
        let entropy = (ent_sum / logp.len().max(1) as f64) as f32;
        let n_layers = self.model.cfg.n_layers;
        let routes = passes
            .chunks(b.n_micro)
            .map(|c| concat_layers(c.iter().map(|o| &o.routes), n_layers))
            .collect();
        OldPolicy {
            passes,
            logp,
            entropy,
            routes,
        }
    }
}

/// Per MoE layer: native routes `[tokens, k]` and router distributions `[tokens, n_experts]`.
pub(super) type LayerRoutes = (Vec<Vec<u16>>, Vec<Vec<f32>>);

/// Per MoE layer: the native routes and the router distributions of a forward's traces.
pub(super) fn native_and_probs(traces: Vec<RoutingTrace>) -> LayerRoutes {
    traces
        .into_iter()
        .map(|t| (t.native, t.probs.unwrap_or_default()))
        .unzip()
}

/// Σ over rows of the entropy of `softmax(row / temperature)`; `rows` is `[n, vocab]`.
fn entropy_sum(rows: &[f32], vocab: usize, temperature: f32) -> f64 {
    rows.chunks_exact(vocab)
        .map(|r| {
            let s: Vec<f64> = r.iter().map(|&x| f64::from(x / temperature)).collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let lz = z.ln() + m;
            -s.iter().map(|x| (x - lz).exp() * (x - lz)).sum::<f64>()
        })
        .sum()
}
