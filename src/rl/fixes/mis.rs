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
//!
//! `veto` (off by default): verl's per-token veto for catastrophic outliers, on in verl's
//! default rollout correction at `5d378b5f` (`rollout_is_veto_threshold = 1e-4` in
//! `verl/trainer/config/algorithm.py` and `ppo_trainer.yaml`; applied in
//! `verl/trainer/ppo/mismatch_helper.py::compute_rollout_importance_weights`, step 1.5, and
//! later as `rollout_token_veto_threshold` in `verl/trainer/ppo/rollout_corr_helper.py`, e.g. at
//! `9b718e1a`, step 4, there off by default): a response any of whose tokens has an engine
//! ratio exp(logp_tis − logp_mu) below `veto` (tested on the unclamped log-ratio, strictly,
//! x < ln veto) is dropped whole, every token's mask weight set to 0, whatever its level's
//! ratio; verl multiplies the veto in after the band. `mis = { veto = 1e-4 }` is verl's value.
//! The tokens it drops count in `mis_masked_frac`.

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
/// [`low`, `high`] and 0 outside; with `veto`, a response holding a token whose engine ratio is
/// below it is dropped whole.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MisConfig {
    pub level: MisLevel,
    pub low: f64,
    pub high: f64,
    /// verl's per-token veto threshold (`None`, the default: off; verl's value is 1e-4). Left
    /// out of a written config when off, so configs from before this key read the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub veto: Option<f64>,
}

impl Default for MisConfig {
    fn default() -> Self {
        MisConfig {
            level: MisLevel::Sequence,
            low: 0.0,
            high: 3.0,
            veto: None,
        }
    }
}

impl MisConfig {
    /// The responses `veto` drops, `[R]`: those with a token whose engine log-ratio is below
    /// ln `veto` (none when off).
    pub fn vetoed(&self, batch: &Batch) -> Vec<bool> {
        let mut out = vec![false; batch.n_resp()];
        if let Some(v) = self.veto {
            let floor = v.ln();
            for (&x, &i) in batch.engine().iter().zip(batch.seg) {
                out[i] |= x < floor;
            }
        }
        out
    }
}

impl Fix for MisConfig {
    const SHARE: Option<Share> = Some(Share {
        column: "mis_masked_frac",
        doc: "share of the minibatch's tokens masked importance sampling masked (every token of a response masked at sequence level; null when off)",
    });
    const ENGINE_RATIO: bool = true;

    fn validate(&self) -> Result<()> {
        check_band("mis", self.low, self.high)?;
        if let Some(v) = self.veto {
            anyhow::ensure!(
                v.is_finite() && v > 0.0 && v < 1.0,
                "mis.veto must be in (0, 1), or a run without any mismatch would drop responses \
                 (got {v}; verl's is 1e-4)"
            );
        }
        Ok(())
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
        let mut masked = band(w.mask(batch.n_tok()), &x, self.low, self.high);
        if self.veto.is_some() {
            let vetoed = self.vetoed(batch);
            let mask = w.mask(batch.n_tok());
            for ((m, w), &i) in masked.iter_mut().zip(mask.iter_mut()).zip(batch.seg) {
                if vetoed[i] {
                    *m = true;
                    *w = 0.0;
                }
            }
        }
        Some(masked)
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
            let m = MisConfig {
                level,
                low,
                high,
                veto: None,
            }
            .weigh(&b, &mut w)
            .unwrap();
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

    /// The veto by hand: response 0's token ratios are 2 and 5e-5 (below verl's 1e-4), response
    /// 1's 0.5, 1 and 1. At token level the band [0, 3] keeps every token but the veto drops
    /// all of response 0, the in-band 2 included; at sequence level response 0's product
    /// 1e-4 is inside the band and is dropped all the same. Response 1 is untouched, a veto of
    /// 1e-5 drops nothing, and without a veto MIS is as before.
    #[test]
    fn the_veto_drops_a_whole_response_with_one_catastrophic_token() {
        let r = [2.0, 5e-5, 0.5, 1.0, 1.0];
        let b = batch(r.map(f64::ln), [1.0, 1.0], None);
        let run = |level: MisLevel, veto: Option<f64>| {
            let mut w = Weights::default();
            let cfg = MisConfig {
                level,
                low: 0.0,
                high: 3.0,
                veto,
            };
            let m = cfg.weigh(&b, &mut w).unwrap();
            (w.mask.unwrap(), m, cfg.vetoed(&b))
        };
        let (tok, m, v) = run(MisLevel::Token, Some(1e-4));
        assert!(close(&tok, &[0.0, 0.0, 0.5, 1.0, 1.0]), "{tok:?}");
        assert_eq!(m, vec![true, true, false, false, false]);
        assert_eq!(v, vec![true, false]);
        let (seq, m, _) = run(MisLevel::Sequence, Some(1e-4));
        assert!(close(&seq, &[0.0, 0.0, 0.5, 0.5, 0.5]), "{seq:?}");
        assert_eq!(m, vec![true, true, false, false, false]);
        let (low, m, v) = run(MisLevel::Token, Some(1e-5));
        assert!(close(&low, &[2.0, 5e-5, 0.5, 1.0, 1.0]), "{low:?}");
        assert!(m.iter().all(|&x| !x) && v == vec![false, false]);
        let (off, _, v) = run(MisLevel::Sequence, None);
        assert!(close(&off, &[1e-4, 1e-4, 0.5, 0.5, 0.5]), "{off:?}");
        assert_eq!(v, vec![false, false]);
        // Response 1's lowest ratio is 0.5: a veto just under it keeps it, just over drops it.
        let veto = |v: f64| MisConfig {
            veto: Some(v),
            ..MisConfig::default()
        };
        assert_eq!(veto(0.49).vetoed(&b), vec![true, false]);
        assert_eq!(veto(0.51).vetoed(&b), vec![true, true]);
        // Off by default and then left out of a written config (older configs read the same);
        // `mis = { veto = 1e-4 }` reads as verl's.
        let off = serde_json::to_value(MisConfig::default()).unwrap();
        assert!(off.get("veto").is_none(), "{off}");
        let on: MisConfig = serde_json::from_value(serde_json::json!({ "veto": 1e-4 })).unwrap();
        assert_eq!(on.veto, Some(1e-4));
        assert_eq!(serde_json::to_value(&on).unwrap()["veto"], 1e-4);
        // Its checks.
        for bad in [0.0, 1.0, -1e-4, f64::NAN] {
            let e = MisConfig {
                veto: Some(bad),
                ..MisConfig::default()
            };
            let msg = e.validate().unwrap_err().to_string();
            assert!(msg.contains("mis.veto"), "{msg}");
        }
        assert!(
            MisConfig {
                veto: Some(1e-4),
                ..MisConfig::default()
            }
            .validate()
            .is_ok()
        );
    }
}
