//! The trainer's routing probes: what a minibatch's step did to the routes (the drift probe)
//! and what the router's bias alone did (the bias-only probe), each a no-graph pass over the
//! minibatch's micro-batches.

use super::Trainer;
use crate::model::Model;
use crate::rl::drift::DriftWalk;
use crate::rl::micro::{Batch, concat_layers};
use crate::rl::old::{LayerRoutes, native_and_probs, routing};
use crate::rl::record::UpdateRecord;
use crate::util::parallel::par_map;
use std::time::Instant;

impl Trainer {
    /// The bias-only probe of a `sigmoid_bias` model (see [`UpdateRecord::routes_bias_only`]):
    /// `before` is the policy before this minibatch's step; empty without the bias or the probe.
    pub(super) fn bias_probe(
        &self,
        b: &Batch,
        m: usize,
        walk: Option<&DriftWalk>,
        before: Option<Model>,
    ) -> Vec<Vec<u16>> {
        let Some(mut before) = before else {
            return Vec::new();
        };
        before.weights = before.weights.with_router_bias_of(&self.model.weights);
        // The update forward's offsets: the walk as it stood before this step.
        self.probe_pass(&before, b, m, walk.filter(|w| w.steps > 0))
            .0
    }

    /// Native routes and router distributions of `model` (no graph) on minibatch `m`'s
    /// micro-batches, joined per layer, with `walk`'s router-logit offsets when given.
    pub(super) fn probe_pass(
        &self,
        model: &Model,
        b: &Batch,
        m: usize,
        walk: Option<&DriftWalk>,
    ) -> LayerRoutes {
        let device = model.device();
        // Every micro-batch's forward with these weights: the QKV projections extended once.
        let model = &model.with_extended_qkv();
        let probed: Vec<LayerRoutes> = par_map(b.n_micro, |j| {
            let mc = &b.micros[m * b.n_micro + j];
            let offsets = walk.map(|w| w.offsets(b.token_range(mc), &device));
            // Routes and distributions only: no experts of the last MoE layer, no head.
            let opts = routing(self.model.cfg.n_layers, None, offsets, None, false);
            let traces = model.route_traces_sharing(&mc.batch, &opts, mc.groups);
            native_and_probs(traces)
        });
        let n_layers = model.cfg.n_layers;
        (
            concat_layers(probed.iter().map(|p| &p.0), n_layers),
            concat_layers(probed.iter().map(|p| &p.1), n_layers),
        )
    }

    /// Whether this step's updates are probed: the probe is on and the step is one of
    /// `probe_every`'s.
    pub(super) fn probes_now(&self) -> bool {
        self.probe && self.cfg.probes_at(self.step)
    }

    /// Drift probe: the updated policy on the same micro-batches, native routes, no graph, with
    /// the walk as the next update will see it. Fills `routes_after`, `probs_after`, `t_probe`.
    pub(super) fn probe(
        &self,
        b: &Batch,
        m: usize,
        walk: Option<&DriftWalk>,
        rec: &mut UpdateRecord,
    ) {
        if !self.probes_now() {
            return;
        }
        let started = Instant::now();
        (rec.routes_after, rec.probs_after) = self.probe_pass(&self.model, b, m, walk);
        rec.t_probe += started.elapsed().as_secs_f64();
    }
}
