//! The settings of replay's routing variants: threshold-filtered replay and PR². What they do
//! is in the routed forward and [`super::predictor`]; `RlConfig` holds them and checks them
//! against the routing mode. (The stability fixes that weigh or mask the loss are in
//! [`super::fixes`].)

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

crate::named_enum! {
    /// Where PR²'s π_old pass takes its gate weights from (see [`super::predictor`]).
    #[derive(Default)]
    pub enum Pr2Gates("pr2 gates") {
        /// The authors' form (miles `3cc09866`, DaizeDong/verl `01f3e5b0`): π_old's pass routes
        /// through `routing(logits + h W_p)`, experts *and* gates from the shifted logits.
        #[default]
        Shifted = "shifted",
        /// The predicted experts forced, the gates the unshifted router's at them (driftlab's
        /// form until 2026-12-07): minibatch 1 is exactly on-policy.
        Native = "native",
    }
}

/// Predictive Routing Replay (see [`super::predictor`]): r2 with routes chosen by per-layer
/// linear predictors of the router's move, trained at the actor's learning rate × `lr_mult`;
/// π_old's gates from the shifted (default, the authors') or the unshifted router (`gates`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pr2Config {
    pub lr_mult: f64,
    pub gates: Pr2Gates,
}

impl Default for Pr2Config {
    fn default() -> Self {
        Pr2Config {
            lr_mult: 1e3,
            gates: Pr2Gates::Shifted,
        }
    }
}
