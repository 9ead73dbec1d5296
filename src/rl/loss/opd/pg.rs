//! Token-level policy-gradient OPD (tinker-cookbook's on-policy distillation; slime's
//! `--opd-kl-coef`): the sampled reverse KL to the teacher is a per-token reward.
//!
//! Per token, `d_t = log π_S(y_t) − log π_T(y_t)` with π_S the policy that sampled (π_old by
//! default, as slime; the rollout engine's log-probs as tinker, [`OpdStudent`]), a constant.
//! Optionally its discounted future sum within the response, `D_t = d_t + γ D_{t+1}` (tinker's
//! `kl_discount_factor`, applied to the KL term alone), else `D_t = d_t`. The advantage is
//! `A_t = A_env,t − λ D_t`, `A_env` the response's advantage from the batch (zero in pure
//! distillation). With `w_t = exp(logp − logp_old)`:
//! importance sampling `ℓ_t = −w_t A_t` (`∂ℓ_t/∂logp = −w_t A_t`), or PPO
//! `ℓ_t = −min(w_t A_t, clip(w_t, 1−ε_low, 1+ε_high) A_t)` (no gradient where the clip binds);
//! aggregated like GRPO, token mean by default.
//!
//! Sources: thinking-machines-lab/tinker-cookbook @ 9dfcc3a2cf44432d621a01005073dc6d76a1e87a,
//! `tinker_cookbook/distillation/train_on_policy.py` L54–129 (`incorporate_kl_penalty`: λ = 1,
//! γ = 0, loss "importance_sampling") and `tinker_cookbook/rl/metrics.py` L192–211 (the
//! discounted sum); THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515,
//! `slime/backends/megatron_utils/loss.py` L663–702 (`apply_opd_kl_to_advantages`).
//! Deviation: tinker sums the per-token losses; here they are aggregated like GRPO's (token
//! mean by default, verl's choice), so the scale does not grow with the batch.

use crate::rl::config::Aggregation;
use crate::rl::loss::contract::{LossStats, PolicyBatch, clipped};
use crate::rl::loss::grpo::clipped_surrogate_adv;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// Whose log-probs of the sampled tokens the teacher is compared with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpdStudent {
    /// π_old, the trainer's recompute (slime, the issue).
    #[default]
    Old,
    /// The rollout engine's log-probs `logp_mu` (tinker's sampler log-probs).
    Engine,
}

/// The surrogate the per-token advantages go into: `form = "importance_sampling"` or
/// `form = { ppo = { eps_low = 0.2, eps_high = 0.28 } }`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum PgForm {
    /// `−w·A` (tinker's default loss).
    ImportanceSampling,
    /// PPO's clipped `−min(w·A, clip(w, 1−ε_low, 1+ε_high)·A)`.
    Ppo { eps_low: f64, eps_high: f64 },
}

/// PG-OPD's settings (`algorithm = { kind = "opd_pg", … }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpdPgConfig {
    /// Weight λ of the KL reward (tinker's `kl_penalty_coef`, slime's `--opd-kl-coef`).
    pub lambda: f64,
    /// Discount γ of the KL reward's future sum; 0 takes each token's own.
    pub gamma: f64,
    pub form: PgForm,
    pub aggregation: Aggregation,
    pub student: OpdStudent,
    /// Add the task's group advantage (GRPO's, from the rewards) to the teacher's per-token
    /// reward; false (default) distils the teacher alone. The pure functions below always
    /// read the batch's advantages; [`objective`] zeroes them when this is false.
    pub env_advantage: bool,
}

impl Default for OpdPgConfig {
    fn default() -> Self {
        OpdPgConfig {
            lambda: 1.0,
            gamma: 0.0,
            form: PgForm::ImportanceSampling,
            aggregation: Aggregation::TokenMean,
            student: OpdStudent::Old,
            env_advantage: false,
        }
    }
}

impl OpdPgConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.lambda >= 0.0 && self.lambda.is_finite(),
            "opd_pg.lambda must be >= 0 (it is {})",
            self.lambda
        );
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.gamma),
            "opd_pg.gamma must lie in [0, 1] (it is {})",
            self.gamma
        );
        if let PgForm::Ppo { eps_low, eps_high } = self.form {
            anyhow::ensure!(
                (0.0..1.0).contains(&eps_low) && eps_high >= 0.0 && eps_high.is_finite(),
                "opd_pg.form.ppo needs 0 <= eps_low < 1 and eps_high >= 0"
            );
        }
        Ok(())
    }
}

/// The objective `opd_pg`: PG-OPD on the teacher's reward alone (the task's group advantage
/// set to 0: tinker-cookbook's on-policy distillation), or added to GRPO's advantage with
/// `env_advantage = true`.
pub fn objective(
    c: &OpdPgConfig,
    batch: &PolicyBatch,
    logp_teacher: &[f32],
) -> (Tensor<1>, LossStats) {
    if c.env_advantage {
        return loss(c, batch, logp_teacher);
    }
    let mut own = batch.clone();
    own.adv.iter_mut().for_each(|a| *a = 0.0);
    loss(c, &own, logp_teacher)
}

/// The per-token advantages `A_env − λ D`, `[n_tok]` (computed in f64).
pub fn advantages(c: &OpdPgConfig, batch: &PolicyBatch, logp_teacher: &[f32]) -> Vec<f32> {
    assert_eq!(
        logp_teacher.len(),
        batch.n_tok(),
        "one teacher log-prob per token"
    );
    let student = match c.student {
        OpdStudent::Old => &batch.logp_old,
        OpdStudent::Engine => &batch.logp_mu,
    };
    let mut kl: Vec<f64> = (student.iter().zip(logp_teacher))
        .map(|(&s, &t)| f64::from(s) - f64::from(t))
        .collect();
    if c.gamma != 0.0 {
        // From each response's last token back; the sum stops at the response's end.
        for t in (0..kl.len().saturating_sub(1)).rev() {
            if batch.seg[t + 1] == batch.seg[t] {
                kl[t] += c.gamma * kl[t + 1];
            }
        }
    }
    (kl.iter().zip(&batch.seg))
        .map(|(k, &i)| (f64::from(batch.adv[i]) - c.lambda * k) as f32)
        .collect()
}

/// PG-OPD's loss (a `[1]` tensor with graph) and its statistics; the stability fixes weigh each
/// token's loss, as in GRPO.
pub fn loss(c: &OpdPgConfig, batch: &PolicyBatch, logp_teacher: &[f32]) -> (Tensor<1>, LossStats) {
    let adv = advantages(c, batch, logp_teacher);
    let w = (batch.logp.clone() - batch.constant(batch.logp_old.clone())).exp();
    let tis_weight = batch.tok_weight();
    let a = batch.constant(adv.clone());
    let loss = match c.form {
        PgForm::ImportanceSampling => {
            let mut per_tok = -(w * a);
            if let Some(tw) = &tis_weight {
                per_tok = per_tok * batch.constant(tw.clone());
            }
            (per_tok * batch.agg_weights(c.aggregation)).sum()
        }
        PgForm::Ppo { eps_low, eps_high } => {
            let agg = c.aggregation;
            clipped_surrogate_adv(w, a, batch, eps_low, eps_high, agg, tis_weight.as_deref())
        }
    };
    let logp = batch.logp_host();
    let (ratio_tok, ratio_seq) = batch.ratios(&logp);
    let mut stats = LossStats {
        loss_policy: crate::util::tensors::scalar(loss.clone().inner()),
        clip_seq: vec![false; batch.n_resp()],
        ratio_tok,
        ratio_seq,
        logp,
        tis_weight,
        ..LossStats::default()
    };
    for (t, (&w, &a)) in stats.ratio_tok.iter().zip(&adv).enumerate() {
        let (lo, hi) = match c.form {
            PgForm::ImportanceSampling => (false, false),
            PgForm::Ppo { eps_low, eps_high } => clipped(w, a, eps_low, eps_high),
        };
        stats.clip_low.push(lo);
        stats.clip_high.push(hi);
        stats.clip_seq[batch.seg[t]] |= lo || hi;
    }
    (loss, stats)
}
