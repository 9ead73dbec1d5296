//! IcePop (Ring-1T, arXiv 2510.18855 §2.3.2 Eq. 1–3, defaults §2.3.4; slime
//! `slime/backends/megatron_utils/loss.py::icepop_function` at THUDM/slime `624b824a`): per
//! token the engine ratio k_t = π_old(t) / π_engine(t) = exp(logp_tis − logp_mu); mask weight
//! M(k) = k when `low ≤ k ≤ high`, else 0. Defaults α = 0.5, β = 5 (the paper's). The test is
//! made on log k and the weight is exp of log k clamped to ±20 ([`super::band`]).

use super::{Batch, Fix, Share, Weights, band, check_band};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// IcePop's band on the engine ratio π_old / π_engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IcePopConfig {
    pub low: f64,
    pub high: f64,
}

impl Default for IcePopConfig {
    fn default() -> Self {
        IcePopConfig {
            low: 0.5,
            high: 5.0,
        }
    }
}

impl Fix for IcePopConfig {
    const SHARE: Option<Share> = Some(Share {
        column: "icepop_masked_frac",
        doc: "share of the minibatch's tokens IcePop masked (engine ratio outside its band; null when off)",
    });
    const ENGINE_RATIO: bool = true;

    fn validate(&self) -> Result<()> {
        check_band("icepop", self.low, self.high)
    }

    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>> {
        let mask = w.mask(batch.n_tok());
        Some(band(mask, batch.engine(), self.low, self.high))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::fixes::tests::{batch, close};

    /// IcePop keeps k = π_old / π_engine as the weight inside [0.5, 5] and masks it outside, on
    /// both sides.
    #[test]
    fn icepop_weighs_inside_its_band_and_masks_both_sides() {
        let k = [0.45, 0.55, 1.0, 4.5, 5.5];
        let b = batch(k.map(f64::ln), [1.0, 1.0], None);
        let mut w = Weights::default();
        let masked = IcePopConfig::default().weigh(&b, &mut w);
        let mask = w.mask.unwrap();
        assert!(close(&mask, &[0.0, 0.55, 1.0, 4.5, 0.0]), "{mask:?}");
        assert_eq!(masked.unwrap(), vec![true, false, false, false, true]);
        assert!(w.ratio.is_none());
    }
}
