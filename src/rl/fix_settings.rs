//! The settings of the stability fixes beside replay's routing modes: threshold-filtered
//! replay, PR², and the masking corrections (IcePop, MIS, OPSM), each with its own checks.
//! What they do is in [`super::correct`] and [`super::predictor`]; `RlConfig` holds them.

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

/// Threshold-filtered Routing Replay (prime-rl PR #2703, branch `router_replay_extend` at
/// `b043947e`, `TokenChoiceTopKRouter._filter_replayed_experts`; not merged there): in every
/// replayed forward (the updates', and π_old's under r3) a replayed expert whose live router
/// score is below `ratio` × the weakest score of the live top-k is replaced, slot by slot, by
/// the live top-k's experts the row does not hold yet. `ratio = 0` is plain replay. Updates
/// record `replay_replaced_frac`, the share of replayed slots replaced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayThresholdConfig {
    pub ratio: f64,
}

impl Default for ReplayThresholdConfig {
    fn default() -> Self {
        ReplayThresholdConfig { ratio: 0.5 }
    }
}

/// Predictive Routing Replay (see [`super::predictor`]): r2 with routes chosen by per-layer
/// linear predictors of the router's move, trained at the actor's learning rate × `lr_mult`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pr2Config {
    pub lr_mult: f64,
}

impl Default for Pr2Config {
    fn default() -> Self {
        Pr2Config { lr_mult: 1e3 }
    }
}

// The masking corrections' settings; what they do is in [`super::correct`].

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

crate::named_enum! {
    /// What MIS's engine ratio is taken over.
    pub enum MisLevel("MIS level") {
        Token = "token",
        Sequence = "sequence",
        Geometric = "geometric",
    }
}

impl Default for MisLevel {
    fn default() -> Self {
        MisLevel::Sequence
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

fn check_band(what: &str, low: f64, high: f64) -> Result<()> {
    ensure!(
        low.is_finite() && high.is_finite() && low >= 0.0 && low < high,
        "{what}: need 0 <= low < high (got low {low}, high {high})"
    );
    ensure!(
        low <= 1.0 && 1.0 <= high,
        "{what}: the band [low, high] = [{low}, {high}] must contain 1, or a run without any \
         mismatch would mask tokens"
    );
    Ok(())
}

impl IcePopConfig {
    pub fn validate(&self) -> Result<()> {
        check_band("icepop", self.low, self.high)
    }
}

impl MisConfig {
    pub fn validate(&self) -> Result<()> {
        check_band("mis", self.low, self.high)
    }
}

impl OpsmConfig {
    pub fn validate(&self) -> Result<()> {
        ensure!(
            self.threshold.is_finite() && self.threshold >= 0.0,
            "opsm.threshold must be finite and >= 0 (got {})",
            self.threshold
        );
        Ok(())
    }
}
