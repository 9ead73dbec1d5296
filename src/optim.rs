//! AdamW with parameter groups and global gradient-norm clipping, written here because burn
//! clips per tensor and has one learning rate per optimizer.

use crate::model::{ParamGroup, Weights};
use crate::util::tensors::{floats, is_host, to_vec};
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
    /// Reject settings AdamW cannot use, naming the key, its value and the allowed range.
    pub fn validate(&self) -> anyhow::Result<()> {
        let at_least_0 = [
            ("lr", self.lr),
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
            ("router_lr_mult", self.router_lr_mult),
        ];
        for (key, v) in at_least_0 {
            anyhow::ensure!(
                v.is_finite() && v >= 0.0,
                "optimizer.{key} = {v}: must be a finite number >= 0"
            );
        }
        for (key, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            anyhow::ensure!(
                (0.0..1.0).contains(&v),
                "optimizer.{key} = {v}: must be in [0, 1)"
            );
        }
        anyhow::ensure!(
            self.eps.is_finite() && self.eps > 0.0,
            "optimizer.eps = {}: must be a finite number > 0",
            self.eps
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
    /// Update each parameter in one fused pass on the host, its moments kept there (set when
    /// the weights live on the CPU backend). Off: burn tensor ops, a dozen passes per
    /// parameter (any device). On the CPU backend both give bitwise the same numbers (test
    /// `the_fused_host_update_is_bitwise_the_tensor_update`).
    pub fused: bool,
    groups: Vec<ParamGroup>,
    m: Vec<Option<Moment>>,
    v: Vec<Option<Moment>>,
    t: i32,
}

/// A first or second moment: a tensor, or host values for the fused update.
#[derive(Clone)]
enum Moment {
    Tensor(Box<Tensor<2>>),
    Host(Vec<f32>),
}

impl Moment {
    fn tensor(self) -> Tensor<2> {
        match self {
            Moment::Tensor(t) => *t,
            Moment::Host(_) => panic!("AdamW.fused changed between steps"),
        }
    }
    fn host(self) -> Vec<f32> {
        match self {
            Moment::Host(h) => h,
            Moment::Tensor(_) => panic!("AdamW.fused changed between steps"),
        }
    }
}

/// One step's coefficients, as the f32 values both update paths use.
#[derive(Clone, Copy)]
struct Coef {
    /// Gradient clip factor.
    scale: f32,
    b1: f32,
    /// 1 − β1.
    c1: f32,
    b2: f32,
    /// 1 − β2.
    c2: f32,
    /// Bias corrections 1 − β^t.
    bc1: f32,
    bc2: f32,
    eps: f32,
    /// Learning rate of the parameter's group, and its decay lr·wd (None when wd is 0).
    lr: f32,
    decay: Option<f32>,
}

impl Coef {
    /// A parameter's coefficients in `group` at learning rate `lr`, clip factor `scale` and
    /// bias corrections `(bc1, bc2)`.
    fn new(
        c: &AdamWConfig,
        group: ParamGroup,
        lr: f64,
        scale: f64,
        (bc1, bc2): (f64, f64),
    ) -> Coef {
        let (lr_g, wd) = match group {
            ParamGroup::Router => (lr * c.router_lr_mult, c.weight_decay),
            ParamGroup::Matrix => (lr, c.weight_decay),
            ParamGroup::NoDecay => (lr, 0.0),
        };
        Coef {
            scale: scale as f32,
            b1: c.beta1 as f32,
            c1: (1.0 - c.beta1) as f32,
            b2: c.beta2 as f32,
            c2: (1.0 - c.beta2) as f32,
            bc1: bc1 as f32,
            bc2: bc2 as f32,
            eps: c.eps as f32,
            lr: lr_g as f32,
            decay: (wd > 0.0).then_some((lr_g * wd) as f32),
        }
    }
}

/// AdamW on one parameter with burn tensor ops: `(w, m, v)` after the step.
fn tensor_update(
    w: Tensor<2>,
    g: Tensor<2>,
    m: Option<Tensor<2>>,
    v: Option<Tensor<2>>,
    k: Coef,
) -> (Tensor<2>, Tensor<2>, Tensor<2>) {
    let g = g * k.scale;
    let m = match m {
        Some(m) => m * k.b1 + g.clone() * k.c1,
        None => g.clone() * k.c1,
    };
    let v = match v {
        Some(v) => v * k.b2 + g.powi_scalar(2) * k.c2,
        None => g.powi_scalar(2) * k.c2,
    };
    let update = (m.clone() / k.bc1) / ((v.clone() / k.bc2).sqrt() + k.eps);
    let mut w = w;
    if let Some(d) = k.decay {
        w = w.clone() - w * d;
    }
    (w - update * k.lr, m, v)
}

/// The same step in one pass over host values, with the same f32 operations in the same
/// order (`g²` is `g·g`, as burn's CPU backend computes `powi(2)`); `m` and `v` are empty
/// before the first step.
fn host_update(w: &mut [f32], g: &[f32], m: &mut Vec<f32>, v: &mut Vec<f32>, k: Coef) {
    let first = m.is_empty();
    if first {
        m.resize(w.len(), 0.0);
        v.resize(w.len(), 0.0);
    }
    adamw_slices(w, g, m, v, k, first);
}

crate::kernels::flex::fastmath::wide! {
    /// [`host_update`]'s loop: element-wise, so the vector width changes no bit (division and
    /// square root are correctly rounded at any width; nothing is contracted into an FMA).
    fn adamw_slices(w: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: Coef, first: bool) {
        let n = w.len();
        let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
        let decay = k.decay.unwrap_or(0.0);
        let decays = k.decay.is_some();
        for i in 0..n {
            let gi = g[i] * k.scale;
            let (mi, vi) = if first {
                (gi * k.c1, (gi * gi) * k.c2)
            } else {
                (m[i] * k.b1 + gi * k.c1, v[i] * k.b2 + (gi * gi) * k.c2)
            };
            let update = (mi / k.bc1) / ((vi / k.bc2).sqrt() + k.eps);
            let mut wi = w[i];
            if decays {
                wi = wi - wi * decay;
            }
            w[i] = wi - update * k.lr;
            m[i] = mi;
            v[i] = vi;
        }
    }
}

impl AdamW {
    pub fn new(cfg: AdamWConfig, weights: &Weights) -> Self {
        let groups: Vec<ParamGroup> = weights.names().into_iter().map(|(_, g)| g).collect();
        let n = groups.len();
        let fused = is_host(&weights.embed.device());
        AdamW {
            cfg,
            fused,
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

    /// Global L2 norm of `grads` (one host sync; [`crate::kernels::global_norm`]).
    pub fn global_norm(grads: &[Tensor<2>]) -> f32 {
        crate::kernels::global_norm(grads)
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
        // Off the CPU backend the parameters' updates are submitted from this thread only,
        // whoever calls: on wgpu-cpu, updates submitted from the pool's threads at once gave
        // wrong weights (a whole step of lr apart; tests/wgpu_parity.rs).
        let _serial = crate::util::parallel::serial_off_host(&weights.embed.device());
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
        // One slot per parameter: (weight, gradient, group, m, v) in visiting order; the
        // weights and gradients are moved in, so the fused path reads them without a copy
        // where no other handle holds them.
        let mut weights = weights;
        let mut slots: Vec<_> = weights
            .take_tensors()
            .into_iter()
            .zip(grads)
            .enumerate()
            .map(|(i, (w, g))| {
                (
                    Some(w),
                    Some(g),
                    self.groups[i],
                    self.m[i].take(),
                    self.v[i].take(),
                )
            })
            .collect();
        let fused = self.fused;
        let updated =
            crate::util::parallel::par_map_mut(&mut slots, |_, (w, g, group, m_old, v_old)| {
                let k = Coef::new(&c, *group, lr, scale, (bc1, bc2));
                let w = w.take().expect("each slot once").inner();
                let g = g.take().expect("each slot once");
                if !fused {
                    let (w, m, v) = tensor_update(
                        w,
                        g,
                        m_old.take().map(Moment::tensor),
                        v_old.take().map(Moment::tensor),
                        k,
                    );
                    return (w, Moment::Tensor(Box::new(m)), Moment::Tensor(Box::new(v)));
                }
                let (dims, device) = (w.dims(), w.device());
                let mut wv = to_vec(w);
                let mut m = m_old.take().map(Moment::host).unwrap_or_default();
                let mut v = v_old.take().map(Moment::host).unwrap_or_default();
                host_update(&mut wv, &to_vec(g), &mut m, &mut v, k);
                (floats(wv, dims, &device), Moment::Host(m), Moment::Host(v))
            });
        let mut new_w = Vec::with_capacity(updated.len());
        for (i, (w, m, v)) in updated.into_iter().enumerate() {
            self.m[i] = Some(m);
            self.v[i] = Some(v);
            new_w.push(w);
        }
        weights.put_tensors(new_w);
        (
            weights,
            StepReport {
                grad_norm,
                applied: true,
            },
        )
    }
}
