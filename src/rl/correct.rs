//! Corrections for a rollout engine that differs from the trainer, by masking: IcePop, masked
//! importance sampling (MIS) and DeepSeek-V3.2's off-policy sequence masking (OPSM). Each is an
//! `[rl]` setting that any objective takes; together with TIS they give one detached weight per
//! token that multiplies the objective's per-token loss (a sequence-level objective — GSPO,
//! GMPO, GVPO — multiplies its per-response loss by the token mean of the weights, which is what
//! broadcasting a sequence loss to its tokens and averaging them gives). Masked tokens keep
//! their place in the loss's denominator, as in slime, TRL and verl's older `mask` mode (current
//! verl's rejection sampling removes them from it instead). A minibatch whose every token is
//! masked takes no optimizer step (its update row reads `applied = 0`, its reason is kept, and
//! the events frame gets an `all_masked` event) rather than stepping on the auxiliary losses
//! alone.
//!
//! Notation: `logp_tis` is the ratios' π_old before any router shift (the trainer's recompute
//! with `old_logp = recompute`; the engine's own log-prob with `old_logp = rollout`, where every
//! engine ratio below is 1 and nothing is masked, as for TIS), `logp_mu` the engine's log-prob,
//! `logp` π_θ at the current parameters.
//!
//! - **IcePop** (Ring-1T, arXiv 2510.18855 §2.3.2 Eq. 1–3, defaults §2.3.4; slime
//!   `slime/backends/megatron_utils/loss.py::icepop_function` at THUDM/slime `624b824a`):
//!   k_t = π_old(t) / π_engine(t) = exp(logp_tis − logp_mu); weight M(k) = k when
//!   `low ≤ k ≤ high`, else 0. Defaults α = 0.5, β = 5 (the paper's).
//! - **MIS** (TRL `trl/trainer/grpo_trainer.py`, `vllm_importance_sampling_mode = *_mask`, PR
//!   #4530 `eb763899` and the lower bound of PR #4732 `0bef6720`; verl's `rollout_is_level` ∈
//!   {token, sequence, geometric} with `rollout_is_mode = mask` in
//!   `verl/trainer/ppo/mismatch_helper.py` at `5d378b5f`): the engine ratio per token
//!   (`token`), of the whole response, exp(Σ_t (logp_tis − logp_mu)) (`sequence`), or its
//!   geometric mean, exp(mean_t …) (`geometric`); weight r when `low ≤ r ≤ high`, else 0,
//!   every token of a response sharing its sequence-level weight. Deviation: the test is made on
//!   log r and the weight is exp of log r clamped to ±20 (verl's `SAFETY_BOUND`), so a long
//!   response cannot overflow (TRL exponentiates unclamped). Defaults: `sequence`, no lower
//!   bound, `high = 3` (TRL's).
//! - **OPSM** (DeepSeek-V3.2, arXiv 2512.02556 §3.1 Eq. 8–9; TRL `get_off_policy_mask`): a
//!   response with a negative advantage whose mean_t (logp_mu − logp) exceeds `threshold` is
//!   masked whole; logp is π_θ at the current parameters, so the mask is recomputed for every
//!   minibatch. The paper gives no threshold; the default 0.5 is the starting value TRL's
//!   documentation suggests (slime's default is 1e-4).

use crate::rl::config::{IcePopConfig, MisConfig, MisLevel, OpsmConfig, RlConfig};
use crate::rl::loss::{LossStats, PolicyBatch, policy_loss};

/// The skip reason of a minibatch whose every token the masking corrections masked.
pub const ALL_MASKED: &str = "every token masked by the corrections";

/// The objective's loss on `pb` with the masking corrections' weights (set on `pb`) and what
/// they masked in its statistics.
pub(super) fn corrected_loss(
    cfg: &RlConfig,
    pb: &mut PolicyBatch,
) -> (burn::tensor::Tensor<1>, LossStats) {
    let corrections = Corrections::of(cfg);
    // OPSM reads π_θ at the current parameters: one more host copy, only when it is on.
    let logp_now = corrections.opsm.map(|_| pb.logp_host());
    let corrected = corrections.weights(pb, logp_now.as_deref());
    pb.corr = corrected.as_ref().map(|c| c.weight.clone());
    let (ploss, mut stats) = policy_loss(&cfg.algorithm, pb, cfg.tis.as_ref());
    if let Some(c) = corrected {
        stats.icepop_masked = c.icepop;
        stats.mis_masked = c.mis;
        stats.opsm_masked = c.opsm;
        stats.all_masked = c.weight.iter().all(|&w| w == 0.0);
    }
    (ploss, stats)
}

/// verl's `SAFETY_BOUND`: log-ratios are clamped to ±20 before `exp`.
const LOG_BOUND: f64 = 20.0;

/// The three masking corrections of a run (each off when `None`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Corrections<'a> {
    pub icepop: Option<&'a IcePopConfig>,
    pub mis: Option<&'a MisConfig>,
    pub opsm: Option<&'a OpsmConfig>,
}

/// The corrections' weights over one micro-batch, and what each masked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Corrected {
    /// Product of the corrections' weights, per token.
    pub weight: Vec<f32>,
    /// Tokens IcePop masked (`None` when off), `[n_tok]`.
    pub icepop: Option<Vec<bool>>,
    /// Tokens MIS masked, `[n_tok]` (every token of a response masked at sequence level).
    pub mis: Option<Vec<bool>>,
    /// Responses OPSM masked, `[R]`.
    pub opsm: Option<Vec<bool>>,
}

impl Corrected {
    /// Multiply each token's weight by its ratio exp(x) (x clamped to ±20) when `x` is in the
    /// band, set it to 0 otherwise; returns the tokens masked.
    fn band(&mut self, x: &[f64], low: f64, high: f64) -> Vec<bool> {
        x.iter()
            .zip(self.weight.iter_mut())
            .map(|(&x, w)| {
                let keep = in_band(x, low, high);
                *w = if keep {
                    *w * x.clamp(-LOG_BOUND, LOG_BOUND).exp() as f32
                } else {
                    0.0
                };
                !keep
            })
            .collect()
    }
}

/// Kept when `ln low ≤ x ≤ ln high` (x a log-ratio; `low = 0` has no lower bound: ln 0 = −∞).
fn in_band(x: f64, low: f64, high: f64) -> bool {
    x >= low.ln() && x <= high.ln()
}

impl<'a> Corrections<'a> {
    /// The corrections `rl` turns on.
    pub fn of(rl: &'a RlConfig) -> Self {
        Corrections {
            icepop: rl.icepop.as_ref(),
            mis: rl.mis.as_ref(),
            opsm: rl.opsm.as_ref(),
        }
    }

    pub fn any(&self) -> bool {
        self.icepop.is_some() || self.mis.is_some() || self.opsm.is_some()
    }

    /// The weights of `batch`'s tokens; `logp` is π_θ's host copy (read by OPSM only). `None`
    /// when every correction is off.
    pub fn weights(&self, batch: &PolicyBatch, logp: Option<&[f32]>) -> Option<Corrected> {
        if !self.any() {
            return None;
        }
        let n = batch.n_tok();
        let engine: Vec<f64> = batch
            .logp_tis
            .iter()
            .zip(&batch.logp_mu)
            .map(|(o, m)| f64::from(o - m))
            .collect();
        let mut out = Corrected {
            weight: vec![1.0; n],
            ..Corrected::default()
        };
        if let Some(c) = self.icepop {
            out.icepop = Some(out.band(&engine, c.low, c.high));
        }
        if let Some(c) = self.mis {
            let per_seq = |mean: bool| -> Vec<f64> {
                let mut s = vec![0f64; batch.n_resp()];
                for (t, &x) in engine.iter().enumerate() {
                    s[batch.seg[t]] += x;
                }
                if mean {
                    s.iter_mut()
                        .zip(&batch.lens)
                        .for_each(|(v, &l)| *v /= l as f64);
                }
                s
            };
            let seq = match c.level {
                MisLevel::Token => None,
                MisLevel::Sequence => Some(per_seq(false)),
                MisLevel::Geometric => Some(per_seq(true)),
            };
            let x: Vec<f64> = match &seq {
                None => engine.clone(),
                Some(s) => batch.seg.iter().map(|&i| s[i]).collect(),
            };
            out.mis = Some(out.band(&x, c.low, c.high));
        }
        if let (Some(c), Some(logp)) = (self.opsm, logp) {
            let mut div = vec![0f64; batch.n_resp()];
            for (t, (&mu, &cur)) in batch.logp_mu.iter().zip(logp).enumerate() {
                div[batch.seg[t]] += f64::from(mu - cur);
            }
            let masked: Vec<bool> = div
                .iter()
                .zip(&batch.lens)
                .zip(&batch.adv)
                .map(|((d, &l), &a)| a < 0.0 && d / l as f64 > c.threshold)
                .collect();
            for t in 0..n {
                if masked[batch.seg[t]] {
                    out.weight[t] = 0.0;
                }
            }
            out.opsm = Some(masked);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests;
