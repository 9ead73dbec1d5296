//! AdamW with parameter groups and global gradient-norm clipping, written here because burn
//! clips per tensor and has one learning rate per optimizer.

use crate::model::{ParamGroup, Weights};
use crate::tensors::to_vec;
use burn::tensor::{Gradients, Tensor};
use serde::{Deserialize, Serialize};

/// AdamW settings. Defaults live here and nowhere else.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdamWConfig {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    /// Decoupled weight decay on matrices (not on norms, embeddings).
    pub weight_decay: f64,
    /// Global gradient-norm clip (over all parameters); 0 disables.
    pub grad_clip: f64,
    /// Learning-rate multiplier of the router parameter group.
    pub router_lr_mult: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig {
            lr: 1e-4,
            beta1: 0.9,
            beta2: 0.95,
            eps: 1e-8,
            weight_decay: 0.0,
            grad_clip: 1.0,
            router_lr_mult: 1.0,
        }
    }
}

impl AdamWConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        let ok = self.lr.is_finite()
            && self.lr >= 0.0
            && (0.0..1.0).contains(&self.beta1)
            && (0.0..1.0).contains(&self.beta2)
            && self.eps > 0.0
            && self.weight_decay >= 0.0
            && self.grad_clip >= 0.0
            && self.router_lr_mult >= 0.0;
        anyhow::ensure!(
            ok,
            "invalid optimizer settings {self:?}: need lr >= 0, 0 <= beta < 1, eps > 0, weight_decay >= 0, grad_clip >= 0, router_lr_mult >= 0"
        );
        Ok(())
    }
}

/// What one optimizer step did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepReport {
    /// Global gradient norm before clipping.
    pub grad_norm: f32,
    /// False when the gradient was non-finite and the update was skipped.
    pub applied: bool,
}

pub struct AdamW {
    pub cfg: AdamWConfig,
    groups: Vec<ParamGroup>,
    m: Vec<Option<Tensor<2>>>,
    v: Vec<Option<Tensor<2>>>,
    t: i32,
}

impl AdamW {
    pub fn new(cfg: AdamWConfig, weights: &Weights) -> Self {
        let groups: Vec<ParamGroup> = weights.names().into_iter().map(|(_, g)| g).collect();
        let n = groups.len();
        AdamW {
            cfg,
            groups,
            m: vec![None; n],
            v: vec![None; n],
            t: 0,
        }
    }

    /// Gradients of `leaves` (the `require_grad` weights used in the forward), in visiting
    /// order; a parameter the loss did not reach gets zeros.
    pub fn collect_grads(leaves: &Weights, grads: &Gradients) -> Vec<Tensor<2>> {
        leaves
            .tensors()
            .iter()
            .map(|p| {
                p.grad(grads)
                    .unwrap_or_else(|| Tensor::zeros(p.dims(), &p.clone().inner().device()))
            })
            .collect()
    }

    /// Global L2 norm of `grads` (one host sync). Per-tensor sums run in parallel when the
    /// pool has threads to spare; they are combined in order.
    pub fn global_norm(grads: &[Tensor<2>]) -> f32 {
        let sq: Vec<Tensor<1>> =
            crate::parallel::par_map(grads.len(), |i| grads[i].clone().powi_scalar(2).sum());
        to_vec(Tensor::cat(sq, 0).sum())[0].sqrt()
    }

    /// One AdamW step at learning rate `lr` on `weights` (non-autodiff) with `grads`. A non-finite
    /// gradient norm skips the update and leaves weights and moments untouched. Parameters are
    /// independent, so they are updated in parallel when the pool has more than one thread.
    pub fn step(
        &mut self,
        weights: Weights,
        grads: Vec<Tensor<2>>,
        lr: f64,
    ) -> (Weights, StepReport) {
        assert_eq!(grads.len(), self.groups.len(), "one gradient per parameter");
        let grad_norm = Self::global_norm(&grads);
        if !grad_norm.is_finite() {
            return (
                weights,
                StepReport {
                    grad_norm,
                    applied: false,
                },
            );
        }
        let c = self.cfg.clone();
        let scale = if c.grad_clip > 0.0 && f64::from(grad_norm) > c.grad_clip {
            c.grad_clip / (f64::from(grad_norm) + 1e-6)
        } else {
            1.0
        };
        self.t += 1;
        let bc1 = 1.0 - c.beta1.powi(self.t);
        let bc2 = 1.0 - c.beta2.powi(self.t);
        // One slot per parameter: (weight, gradient, group, m, v) in visiting order.
        let mut slots: Vec<_> = weights
            .tensors()
            .into_iter()
            .zip(grads)
            .enumerate()
            .map(|(i, (w, g))| (w, g, self.groups[i], self.m[i].take(), self.v[i].take()))
            .collect();
        let updated = crate::parallel::par_map_mut(&mut slots, |_, (w, g, group, m_old, v_old)| {
            let g = g.clone() * scale as f32;
            let m = match m_old.take() {
                Some(m) => m * c.beta1 as f32 + g.clone() * (1.0 - c.beta1) as f32,
                None => g.clone() * (1.0 - c.beta1) as f32,
            };
            let v = match v_old.take() {
                Some(v) => v * c.beta2 as f32 + g.powi_scalar(2) * (1.0 - c.beta2) as f32,
                None => g.powi_scalar(2) * (1.0 - c.beta2) as f32,
            };
            let (lr_g, wd) = match group {
                ParamGroup::Router => (lr * c.router_lr_mult, c.weight_decay),
                ParamGroup::Matrix => (lr, c.weight_decay),
                ParamGroup::NoDecay => (lr, 0.0),
            };
            let update =
                (m.clone() / bc1 as f32) / ((v.clone() / bc2 as f32).sqrt() + c.eps as f32);
            let mut w = w.clone().inner();
            if wd > 0.0 {
                w = w.clone() - w * (lr_g * wd) as f32;
            }
            (w - update * lr_g as f32, m, v)
        });
        let mut new_w = Vec::with_capacity(updated.len());
        for (i, (w, m, v)) in updated.into_iter().enumerate() {
            self.m[i] = Some(m);
            self.v[i] = Some(v);
            new_w.push(w);
        }
        let mut new_w = new_w.into_iter();
        let weights = weights.map(|_| new_w.next().expect("one per parameter"));
        (
            weights,
            StepReport {
                grad_norm,
                applied: true,
            },
        )
    }
}
