//! A step's updates: for each minibatch, its micro-batches' forwards and policy losses, the
//! accumulated gradient, AdamW, and then the drift probe.

use super::Trainer;
use crate::model::token_logp;
use crate::rl::config::{OldLogp, RoutingMode};
use crate::rl::correct::{ALL_MASKED, corrected_loss};
use crate::rl::drift::DriftWalk;
use crate::rl::loss::{PolicyBatch, TeacherBatch, micro_share};
use crate::rl::micro::{Accumulated, Batch, MicroForward, accumulate};
use crate::rl::old::{OldPolicy, native_and_probs, routing};
use crate::rl::predictor_step::train_predictor;
use crate::rl::record::UpdateRecord;
use crate::rl::router_shift::{router_shift, shifted_old_logp};
use crate::util::parallel::par_map;
use crate::util::tensors::{Transfers, ints, scalar};
use std::time::Instant;

impl Trainer {
    /// Every minibatch's update, each followed by its probe, with their times and transfers.
    pub(super) fn updates(
        &mut self,
        b: &Batch,
        old: &OldPolicy,
        adv: &[f32],
        mut walk: Option<&mut DriftWalk>,
        lr: f64,
    ) -> Vec<UpdateRecord> {
        let mut updates = Vec::with_capacity(b.mbs.len());
        for m in 0..b.mbs.len() {
            let t_up = Instant::now();
            let mut rec = self.update(b, old, adv, m, walk.as_deref(), lr);
            if let Some(w) = walk.as_mut() {
                w.advance();
            }
            rec.t_update = t_up.elapsed().as_secs_f64() - rec.t_probe;
            let probed = Transfers::now();
            self.probe(b, m, walk.as_deref(), &mut rec);
            rec.x_probe = rec.x_probe + Transfers::since(probed);
            updates.push(rec);
        }
        updates
    }

    /// Forward and policy loss of micro-batch `i` (of minibatch `m`), with graph.
    fn micro_forward(
        &self,
        b: &Batch,
        old: &OldPolicy,
        adv: &[f32],
        (m, i): (usize, usize),
        walk: Option<&DriftWalk>,
    ) -> MicroForward {
        let (cfg, mb, mc) = (&self.cfg, &b.mbs[m], &b.micros[i]);
        let device = self.model.device();
        let offsets = walk
            .filter(|w| w.steps > 0)
            .map(|w| w.offsets(b.token_range(mc), &device));
        let forced: Option<&[Vec<u16>]> = match cfg.routing {
            RoutingMode::Native => None,
            RoutingMode::R2 => Some(old.passes[i].replay_routes()),
            RoutingMode::R3 => Some(&b.rollout_routes[i]),
        };
        let train = self.model.require_grad();
        let out = train.forward(
            &mc.batch,
            &routing(
                self.model.cfg.n_layers,
                forced,
                offsets,
                cfg.replay_threshold.as_ref().map(|t| t.ratio as f32),
                false,
            ),
        );
        let rows_idx = ints(&mc.logit_rows, [mc.logit_rows.len()], &device);
        let picked = out.logits.select(0, rows_idx);
        let o = &old.passes[i];
        let teacher = o.logp_teacher.clone().map(|logp| TeacherBatch {
            logp,
            logits: (o.teacher_logits.clone()).map(|t| (picked.clone(), t)),
        });
        let logp = token_logp(picked, &mc.targets, cfg.temperature);
        let mut logp_old = match cfg.old_logp {
            OldLogp::Recompute => old.logp[mc.tokens.clone()].to_vec(),
            OldLogp::Rollout => b.logp_mu[mc.tokens.clone()].to_vec(),
        };
        let routes_used = out.traces.iter().map(|t| t.used.clone()).collect();
        let replay_filter = cfg.replay_threshold.as_ref().map(|_| {
            out.traces.iter().fold((0, 0), |(n, r), t| {
                (n + t.replay_slots, r + t.replay_replaced)
            })
        });
        let (routes_before, probs_before) = native_and_probs(out.traces);
        let shift = cfg.router_shift.as_ref().map(|rs| {
            let (e_n, k) = (self.model.cfg.n_experts, self.model.cfg.top_k);
            let o = &old.passes[i];
            router_shift(
                &probs_before,
                &o.probs,
                &o.used,
                &mc.logit_rows,
                (e_n, k),
                rs.floor,
            )
        });
        let logp_tis = logp_old.clone();
        if let Some(g) = &shift {
            logp_old = shifted_old_logp(&logp_old, g);
        }
        let mut pb = PolicyBatch {
            logp,
            logp_old,
            logp_tis,
            logp_mu: b.logp_mu[mc.tokens.clone()].to_vec(),
            logp_ref: old.passes[i].logp_ref.clone(),
            fixes: Default::default(),
            adv: adv[mc.rows.clone()].to_vec(),
            rewards: b.ro.rewards[mc.rows.clone()].to_vec(),
            seg: mc.seg.clone(),
            lens: mc.lens.clone(),
            group_size: cfg.group_size,
            teacher,
        };
        let (ploss, mut stats) = corrected_loss(cfg, &mut pb);
        if let Some(g) = &shift {
            stats.unshift_ratios(g, &pb.seg, &pb.lens);
        }
        stats.router_shift = shift;
        stats.replay_filter = replay_filter;
        let share = micro_share(&cfg.algorithm, &pb, mb.rows.len(), mb.tokens.len());
        let real = |v: &[bool]| v.iter().filter(|&&x| x).count();
        let active_share = real(&mc.batch.valid) as f32 / real(&mb.batch.valid).max(1) as f32;
        MicroForward {
            stats,
            share,
            active_share,
            loss_z: scalar(out.z_loss.clone().inner()),
            partial: Some((ploss * share, out.z_loss)),
            load: out.load,
            routes_before,
            routes_used,
            probs_before,
            train,
        }
    }

    /// One optimizer step on minibatch `m`: its micro-batches' forwards, the accumulated loss
    /// and gradient, AdamW (skipped when not finite).
    fn update(
        &mut self,
        b: &Batch,
        old: &OldPolicy,
        adv: &[f32],
        m: usize,
        walk: Option<&DriftWalk>,
        lr: f64,
    ) -> UpdateRecord {
        let n = b.n_micro;
        let parts = par_map(n, |j| self.micro_forward(b, old, adv, (m, m * n + j), walk));
        // PR²: the predictors learn the router's move from every minibatch after the first.
        let pr2_loss = (m > 0)
            .then(|| {
                let p = self.predictor.as_mut()?;
                Some(train_predictor(p, b, old, &parts, m, lr))
            })
            .flatten();
        let acc: Accumulated = accumulate(
            parts,
            self.model.cfg.top_k,
            self.cfg.aux_coef,
            self.cfg.z_coef,
        );
        // Kept only for the bias-only probe: a second handle on the weights would make the
        // optimizer copy them.
        let before =
            (self.probes_now() && self.model.cfg.has_router_bias()).then(|| self.model.clone());
        let t_opt = Instant::now();
        let moved = Transfers::now();
        let (grad_norm, applied, skip_reason) = match acc.grads {
            // No token carries weight: stepping on the auxiliary losses and AdamW's momentum
            // alone would move the policy with no policy gradient.
            Some(_) if acc.stats.all_masked => (f32::NAN, false, Some(ALL_MASKED.to_string())),
            Some(g) => {
                let (w, report) = self.opt.step(self.model.weights.take(), g, lr);
                self.model.weights = w;
                if report.applied {
                    let speed = self.model.cfg.bias_update_speed;
                    self.model.weights.nudge_router_bias(&acc.counts, speed);
                }
                let reason = (!report.applied).then(|| "non-finite gradient".to_string());
                (report.grad_norm, report.applied, reason)
            }
            None => (f32::NAN, false, Some("non-finite loss".to_string())),
        };
        let t_opt = t_opt.elapsed().as_secs_f64();
        let x_opt = Transfers::since(moved);
        let t_bias = Instant::now();
        let moved = Transfers::now();
        let routes_bias_only = self.bias_probe(b, m, walk, before.filter(|_| applied));
        let t_bias = t_bias.elapsed().as_secs_f64();
        let x_bias = Transfers::since(moved);
        let mb = &b.mbs[m];
        let logp_ref = old.passes[m * n..(m + 1) * n]
            .iter()
            .flat_map(|o| o.logp_ref.iter().flatten().copied())
            .collect();
        UpdateRecord {
            minibatch: m,
            loss_policy: acc.stats.loss_policy,
            stats: acc.stats,
            loss_aux: acc.loss_aux,
            loss_z: acc.loss_z,
            loss_total: acc.loss_total,
            grad_norm,
            applied,
            skip_reason,
            pr2_loss,
            lr,
            routes_before: acc.routes_before,
            routes_used: acc.routes_used,
            routes_after: Vec::new(),
            routes_bias_only,
            routes_old: old.routes[m].clone(),
            probs_before: acc.probs_before,
            probs_after: Vec::new(),
            valid: mb.batch.valid.clone(),
            logp_old: old.logp[mb.tokens.clone()].to_vec(),
            logp_mu: b.logp_mu[mb.tokens.clone()].to_vec(),
            logp_ref,
            adv: adv[mb.rows.clone()].to_vec(),
            lens: mb.lens.clone(),
            t_update: 0.0,
            // The bias-only probe's time; the drift probe adds its own.
            t_probe: t_bias,
            t_opt,
            x_opt,
            x_probe: x_bias,
        }
    }
}
