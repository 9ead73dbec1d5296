//! Off-policy sequence masking (DeepSeek-V3.2, arXiv 2512.02556 §3.1 Eq. 8–9; TRL
//! `get_off_policy_mask`): a response with a negative advantage whose mean_t (logp_mu − logp)
//! exceeds `threshold` is masked whole; logp is π_θ at the current parameters, so the mask is
//! recomputed for every minibatch (one more host copy of log π_θ, only when OPSM is on). The
//! paper gives no threshold; the default 0.5 is the starting value TRL's documentation suggests
//! (slime's default is 1e-4).

use super::{Batch, Fix, Share, Weights};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

/// Off-policy sequence masking: negative-advantage responses whose mean log(π_engine / π_θ)
/// exceeds `threshold` are masked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpsmConfig {
    pub threshold: f64,
}

impl Default for OpsmConfig {
    fn default() -> Self {
        OpsmConfig { threshold: 0.5 }
    }
}

impl Fix for OpsmConfig {
    const SHARE: Option<Share> = Some(Share {
        column: "opsm_masked_frac",
        doc: "share of the minibatch's responses off-policy sequence masking masked (negative advantage, mean log(π_engine/π_θ) above its threshold; null when off)",
    });

    fn validate(&self) -> Result<()> {
        ensure!(
            self.threshold.is_finite() && self.threshold >= 0.0,
            "opsm.threshold must be finite and >= 0 (got {})",
            self.threshold
        );
        Ok(())
    }

    /// Masks responses, `[R]`.
    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>> {
        let mut div = vec![0f64; batch.n_resp()];
        for (t, (&mu, &cur)) in batch.logp_mu.iter().zip(batch.logp()).enumerate() {
            div[batch.seg[t]] += f64::from(mu - cur);
        }
        let masked: Vec<bool> = (div.iter().zip(batch.lens).zip(batch.adv))
            .map(|((d, &l), &a)| a < 0.0 && d / l as f64 > self.threshold)
            .collect();
        let mask = w.mask(batch.n_tok());
        for (t, m) in mask.iter_mut().enumerate() {
            if masked[batch.seg[t]] {
                *m = 0.0;
            }
        }
        Some(masked)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::fixes::IcePopConfig;
    use crate::rl::fixes::tests::{batch, close};

    /// OPSM masks a response only when its advantage is negative and its mean log(π_engine /
    /// π_θ) exceeds the threshold; the masking fixes' weights multiply.
    #[test]
    fn opsm_masks_negative_advantage_responses_that_drifted() {
        // π_θ fell below the engine by 0.6 per token in response 0, by 1.0 in response 1.
        let logp = [-0.6f32, -0.6, -1.0, -1.0, -1.0];
        let o = OpsmConfig { threshold: 0.5 };
        let run = |b: &Batch| {
            let mut w = Weights::default();
            let m = o.weigh(b, &mut w).unwrap();
            (w.mask.unwrap(), m)
        };
        let (mask, masked) = run(&batch([0.0; 5], [-1.0, 1.0], Some(logp)));
        assert_eq!(masked, vec![true, false], "positive advantage kept");
        assert!(close(&mask, &[0.0, 0.0, 1.0, 1.0, 1.0]));
        let logp = [-0.4f32, -0.4, -1.0, -1.0, -1.0];
        let (_, masked) = run(&batch([0.0; 5], [-1.0, -1.0], Some(logp)));
        assert_eq!(masked, vec![false, true], "below the threshold kept");
        // IcePop and OPSM together: the product.
        let b = batch(
            [2f64.ln(), 0.0, 0.0, 0.0, 0.0],
            [1.0, -1.0],
            Some([0.0, 0.0, -1.0, -1.0, -1.0]),
        );
        let mut w = Weights::default();
        IcePopConfig::default().weigh(&b, &mut w);
        o.weigh(&b, &mut w);
        let mask = w.mask.unwrap();
        assert!(close(&mask, &[2.0, 1.0, 0.0, 0.0, 0.0]), "{mask:?}");
    }
}
