//! GVPD (GVPO++, arXiv 2609.21432): GVPO's group-centred squared loss with the frozen teacher
//! in place of the reward, so its optimum is the teacher for any β; no ratio, no clipping.
//!
//! Per response, sequence sums `s_i = Σ_t logp` (live student, with graph) and
//! `t_i = Σ_t logp_teacher`, and a length weight `f_i = |y_i|^(−α)`. Per group of k responses:
//! `x_i = β f_i (s_i − t_i)`, `ρ_i = x_i − mean_j x_j`, `L_g = Σ_i ρ_i² / (2(k−1))`;
//! `∂L_g/∂s_i = β f_i ρ_i / (k−1)` (Σ_i ρ_i = 0, so the group mean carries no gradient). α = 0 is
//! GVPD, α = 1 puts the per-token mean log-ratio in the residual. π_old cancels exactly.
//!
//! Teacher-anchored RL ([`teacher_anchored`]) is GVPO itself ([`super::super::gvpo::loss`]) on
//! the reward `R_i = r_i + λβ(t_i − a_i)`, `a_i = Σ_t logp_old`: the residual
//! `β(s_i − a_i − mean) − (R_i − mean R)`; with r ≡ 0 and λ = 1 it is GVPD at α = 0.
//!
//! Sources: the squared loss of the official GVPO code, jszkc/GVPO @ 627aa25e32acdaaa2c374946ccc703a7848ec8c1,
//! `GVPO/gvpo_core_algos.py` L39–60; GVPD is that loss with `r_i = β(t_i − a_i)`. The GVPO++
//! paper text was not available: the length weight inside the residual follows a secondary
//! source (docs/opd_sources.md §5c), and teacher-anchored RL the statement.
//! Deviation: the loss is the mean over groups, as driftlab's GVPO (the official code sums over
//! prompts); the stability fixes weigh each squared residual, as in GVPO.

use crate::rl::config::GvpoConfig;
use crate::rl::loss::contract::{LossStats, PolicyBatch};
use crate::rl::loss::gvpo;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// GVPD's settings (`algorithm = { kind = "gvpd", … }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GvpdConfig {
    /// Scale of the implicit reward β(log π_θ − log π_T); GVPO's default.
    pub beta: f64,
    /// Length exponent α of the weight `f_i = |y_i|^(−α)`: 0 is GVPD, 1 the per-token mean.
    pub alpha: f64,
    /// Absent (default): GVPD, the teacher in place of the task's reward. Set: teacher-anchored
    /// RL, GVPO on the task's reward plus λβ(t_i − a_i) ([`teacher_anchored`]; no length
    /// weight, so α must stay 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lambda: Option<f64>,
}

impl Default for GvpdConfig {
    fn default() -> Self {
        GvpdConfig {
            beta: 0.1,
            alpha: 0.0,
            lambda: None,
        }
    }
}

impl GvpdConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.beta > 0.0 && self.beta.is_finite(),
            "gvpd.beta must be > 0 (it is {})",
            self.beta
        );
        anyhow::ensure!(
            self.alpha >= 0.0 && self.alpha.is_finite(),
            "gvpd.alpha must be >= 0 (it is {})",
            self.alpha
        );
        if let Some(l) = self.lambda {
            anyhow::ensure!(
                l >= 0.0 && l.is_finite(),
                "gvpd.lambda must be >= 0 (it is {l})"
            );
            anyhow::ensure!(
                self.alpha == 0.0,
                "gvpd.lambda (teacher-anchored RL) is GVPO on an anchored reward, which has no \
                 length weight: drop gvpd.alpha or gvpd.lambda"
            );
        }
        Ok(())
    }
}

/// The objective `gvpd`: GVPD, or teacher-anchored RL when `c.lambda` is set.
pub fn objective(
    c: &GvpdConfig,
    batch: &PolicyBatch,
    logp_teacher: &[f32],
) -> (Tensor<1>, LossStats) {
    match c.lambda {
        None => loss(c, batch, logp_teacher),
        Some(lambda) => {
            let g = GvpoConfig { beta: c.beta };
            teacher_anchored(&g, lambda, batch, logp_teacher)
        }
    }
}

/// GVPD's loss (a `[1]` tensor with graph) and GVPO's statistics (ratios against π_old).
pub fn loss(c: &GvpdConfig, batch: &PolicyBatch, logp_teacher: &[f32]) -> (Tensor<1>, LossStats) {
    assert_eq!(
        logp_teacher.len(),
        batch.n_tok(),
        "one teacher log-prob per token"
    );
    let g = batch.group_size;
    let n_groups = batch.n_resp() / g;
    // s_i − t_i per response, [R]
    let gap = batch.seq_sum(batch.logp.clone() - batch.constant(logp_teacher.to_vec()));
    // β f_i = β |y_i|^(−α) per response, [R]
    let beta_f: Vec<f32> = (batch.lens.iter())
        .map(|&l| (c.beta * (l as f64).powf(-c.alpha)) as f32)
        .collect();
    let x = (gap * batch.constant(beta_f)).reshape([n_groups, g]);
    let rho = x.clone() - x.mean_dim(1);
    gvpo::squared_loss(rho, batch)
}

/// Teacher-anchored RL: GVPO (β = `c.beta`) on the rewards `r_i + λβ(t_i − a_i)`, `t_i` and
/// `a_i` the teacher's and π_old's sequence log-probs.
pub fn teacher_anchored(
    c: &GvpoConfig,
    lambda: f64,
    batch: &PolicyBatch,
    logp_teacher: &[f32],
) -> (Tensor<1>, LossStats) {
    assert_eq!(
        logp_teacher.len(),
        batch.n_tok(),
        "one teacher log-prob per token"
    );
    let mut anchor = vec![0f64; batch.n_resp()];
    for ((&i, &t), &a) in batch.seg.iter().zip(logp_teacher).zip(&batch.logp_old) {
        anchor[i] += f64::from(t) - f64::from(a);
    }
    let mut anchored = batch.clone();
    for (r, x) in anchored.rewards.iter_mut().zip(anchor) {
        *r = (f64::from(*r) + lambda * c.beta * x) as f32;
    }
    gvpo::loss(c, &anchored)
}
