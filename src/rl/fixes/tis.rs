//! Truncated importance sampling (TIS) against the rollout engine: each token's loss times the
//! detached `min(exp(logp_tis − logp_mu), cap)`, `logp_tis` being the ratios' π_old before any
//! router shift. Sequence-level objectives (GSPO, GMPO, GVPO, and GSPO-token's per-response
//! weight) take it length-normalised like GSPO's sequence ratio,
//! `min(exp(mean_t (logp_tis − logp_mu)), cap)`. With `old_logp = rollout`, `logp_tis` is the
//! engine's own log-prob: the ratio already corrects for the engine and every TIS weight is 1
//! (as verl's bypass mode). TIS masks nothing, so it logs no share.

use super::{Batch, Fix, Weights};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TisConfig {
    pub cap: f64,
}

impl Default for TisConfig {
    fn default() -> Self {
        TisConfig { cap: 2.0 }
    }
}

impl TisConfig {
    /// Token-level TIS weights `min(exp(logp_tis − logp_mu), cap)`, `[n_tok]`.
    pub fn tok(&self, b: &Batch) -> Vec<f32> {
        (b.logp_tis.iter())
            .zip(b.logp_mu)
            .map(|(o, m)| (o - m).exp().min(self.cap as f32))
            .collect()
    }

    /// Sequence-level TIS weights `min(exp(mean_t (logp_tis − logp_mu)), cap)`, `[R]`.
    pub fn seq(&self, b: &Batch) -> Vec<f32> {
        let mut sum = vec![0f64; b.n_resp()];
        for (t, (o, m)) in b.logp_tis.iter().zip(b.logp_mu).enumerate() {
            sum[b.seg[t]] += f64::from(o - m);
        }
        sum.iter()
            .zip(b.lens)
            .map(|(s, &l)| ((s / l as f64).exp().min(self.cap)) as f32)
            .collect()
    }
}

impl Fix for TisConfig {
    const NULL_WHEN_OFF: bool = true;
    const ENGINE_RATIO: bool = true;

    fn validate(&self) -> Result<()> {
        ensure!(self.cap > 0.0, "tis.cap must be > 0");
        Ok(())
    }

    fn weigh(&self, batch: &Batch, w: &mut Weights) -> Option<Vec<bool>> {
        w.ratio(self.tok(batch), self.seq(batch));
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::fixes::tests::{batch, close};

    /// Weights by hand: truncated at the cap per token, length-normalised per response.
    #[test]
    fn tis_weights_by_hand() {
        let x = [2f64.ln(), 0.5f64.ln(), 3f64.ln(), 0.0, 0.0];
        let b = batch(x, [1.0, 1.0], None);
        let tis = TisConfig { cap: 2.0 };
        assert!(close(&tis.tok(&b), &[2.0, 0.5, 2.0, 1.0, 1.0]));
        // Response 0: exp(mean(ln 2, ln 0.5)) = 1; response 1: exp(ln 3 / 3).
        assert!(close(&tis.seq(&b), &[1.0, 3f64.powf(1.0 / 3.0)]));
        let mut w = Weights::default();
        assert_eq!(tis.weigh(&b, &mut w), None, "TIS masks nothing");
        assert!(w.mask.is_none());
        assert_eq!(w.ratio.unwrap().tok, tis.tok(&b));
    }
}
