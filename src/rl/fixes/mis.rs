//! Masked importance sampling (TRL `trl/trainer/grpo_trainer.py`,
//! `vllm_importance_sampling_mode = *_mask`, PR #4530 `eb763899` and the lower bound of PR #4732
//! `0bef6720`; verl's `rollout_is_level` ∈ {token, sequence, geometric} with
//! `rollout_is_mode = mask` in `verl/trainer/ppo/mismatch_helper.py` at `5d378b5f`): the engine
//! ratio per token (`token`), of the whole response, exp(Σ_t (logp_tis − logp_mu))
//! (`sequence`), or its geometric mean, exp(mean_t …) (`geometric`); mask weight r when
//! `low ≤ r ≤ high`, else 0, every token of a response sharing its sequence-level weight.
//! Deviation: the test is made on log r and the weight is exp of log r clamped to ±20 (verl's
//! `SAFETY_BOUND`), so a long response cannot overflow (TRL exponentiates unclamped). Defaults:
//! `sequence`, no lower bound, `high = 3` (TRL's).

use super::{Batch, Fix, Share, Weights, band, check_band};
use anyhow::Result;
use serde::{Deserialize, Serialize};

crate::named_enum! {
    /// What MIS's engine ratio is taken over.
    #[derive(Default)]
    pub enum MisLevel("MIS level") {
        Token = "token",
        #[default]
        Sequence = "sequence",
        Geometric = "geometric",
    }
}

/// Masked importance sampling: the engine ratio at `level`, kept as the weight inside
/// [`low`, `high`] and 0 outside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MisConfig {
    pub level: MisLevel,
    pub low: f64,
    pub high: f64,
}

impl Default for MisConfig {
    fn default() -> Self {
        MisConfig {
            level: MisLevel::Sequence,
            low: 0.0,
            high: 3.0,
        }
    }
}

impl Fix for MisConfig {
    const SHARE: Option<Share> = Some(Share {
        column: "mis_masked_frac",
        doc: "share of the minibatch's tokens masked importance sampling masked (every token of a response masked at sequence level; null when off)",
    });
    const ENGINE_RATIO: bool = true;

    fn validate(&self) -> Result<()> {
        check_band("mis", self.low, self.high)
    }

    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>> {
        let engine = batch.engine();
        // Σ_t (or mean_t) of the engine log-ratio over each response, `[R]`.
        let per_seq = |mean: bool| -> Vec<f64> {
            let mut s = vec![0f64; batch.n_resp()];
            for (t, &x) in engine.iter().enumerate() {
                s[batch.seg[t]] += x;
            }
            if mean {
                s.iter_mut()
                    .zip(batch.lens)
                    .for_each(|(v, &l)| *v /= l as f64);
            }
            s
        };
        let seq = match self.level {
            MisLevel::Token => None,
            MisLevel::Sequence => Some(per_seq(false)),
            MisLevel::Geometric => Some(per_seq(true)),
        };
        let x: Vec<f64> = match &seq {
            None => engine.to_vec(),
            Some(s) => batch.seg.iter().map(|&i| s[i]).collect(),
        };
        Some(band(w.mask(batch.n_tok()), &x, self.low, self.high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::fixes::tests::{batch, close};

    /// MIS at each level: the token's own ratio, the response's product, or its geometric
    /// mean, kept as the weight inside [low, high], 0 outside, one weight per response at
    /// sequence level.
    #[test]
    fn mis_masks_tokens_responses_or_geometric_means() {
        // Response 0: ratios 2 and 2 (product 4, geometric mean 2); response 1: 0.5, 1, 1.
        let r = [2.0, 2.0, 0.5, 1.0, 1.0];
        let b = batch(r.map(f64::ln), [1.0, 1.0], None);
        let run = |level: MisLevel, low: f64, high: f64| {
            let mut w = Weights::default();
            let m = MisConfig { level, low, high }.weigh(&b, &mut w).unwrap();
            (w.mask.unwrap(), m)
        };
        let (tok, m) = run(MisLevel::Token, 0.6, 3.0);
        assert!(close(&tok, &[2.0, 2.0, 0.0, 1.0, 1.0]), "{tok:?}");
        assert_eq!(m, vec![false, false, true, false, false]);
        let (seq, m) = run(MisLevel::Sequence, 0.0, 3.0);
        assert!(close(&seq, &[0.0, 0.0, 0.5, 0.5, 0.5]), "{seq:?}");
        assert_eq!(m, vec![true, true, false, false, false]);
        let (geo, _) = run(MisLevel::Geometric, 0.9, 3.0);
        let g1 = 0.5f64.powf(1.0 / 3.0);
        assert!(close(&geo, &[2.0, 2.0, 0.0, 0.0, 0.0]), "{geo:?} ({g1})");
        let (geo_low, _) = run(MisLevel::Geometric, 0.5, 3.0);
        assert!(close(&geo_low, &[2.0, 2.0, g1, g1, g1]), "{geo_low:?}");
    }
}
