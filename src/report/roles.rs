//! Which arm plays which part in a claim: arms are found by what they are (objective, routing
//! mode, FFN, default settings), never by their names; and the per-arm counts the verdicts use.

use super::run_info::{Identity, RunInfo};
use super::summary::ArmSummary;
use crate::metrics::collapse::EventKind;
use crate::model::FfnKind;
use crate::rl::{AlgorithmKind, RoutingMode};

/// The arms of one regime with their identities, in spec order.
pub struct Arms {
    pub arms: Vec<(ArmSummary, Identity)>,
}

impl Arms {
    pub fn new(sums: Vec<ArmSummary>, info: &RunInfo) -> Arms {
        let arms = sums
            .into_iter()
            .map(|a| {
                let id = info
                    .identity(&a.regime, &a.name)
                    .unwrap_or_else(|| Identity {
                        algorithm: AlgorithmKind::parse(&a.algorithm)
                            .unwrap_or(AlgorithmKind::Grpo),
                        routing: RoutingMode::parse(&a.routing).unwrap_or_default(),
                        ffn: FfnKind::parse(&a.ffn).unwrap_or_default(),
                        default_knobs: true,
                        tis: false,
                    });
                (a, id)
            })
            .collect();
        Arms { arms }
    }

    /// The arm that runs `algorithm` with `routing` on `ffn` without TIS: the first in spec
    /// order with default settings, else the first at all.
    pub fn pick(
        &self,
        algorithm: AlgorithmKind,
        routing: RoutingMode,
        ffn: FfnKind,
    ) -> Option<&ArmSummary> {
        self.pick_with(algorithm, routing, ffn, false)
    }

    fn pick_with(
        &self,
        algorithm: AlgorithmKind,
        routing: RoutingMode,
        ffn: FfnKind,
        tis: bool,
    ) -> Option<&ArmSummary> {
        let matches = |id: &Identity| {
            id.algorithm == algorithm && id.routing == routing && id.ffn == ffn && id.tis == tis
        };
        let all: Vec<&(ArmSummary, Identity)> =
            self.arms.iter().filter(|(_, id)| matches(id)).collect();
        all.iter()
            .find(|(_, id)| id.default_knobs)
            .or(all.first())
            .map(|(a, _)| a)
    }

    pub fn grpo(&self, routing: RoutingMode) -> Option<&ArmSummary> {
        self.pick(AlgorithmKind::Grpo, routing, FfnKind::Moe)
    }

    /// GRPO on the MoE with native routing and truncated importance sampling.
    pub fn grpo_tis(&self) -> Option<&ArmSummary> {
        self.pick_with(AlgorithmKind::Grpo, RoutingMode::Native, FfnKind::Moe, true)
    }

    pub fn gvpo(&self) -> Option<&ArmSummary> {
        self.pick(AlgorithmKind::Gvpo, RoutingMode::Native, FfnKind::Moe)
    }

    pub fn gspo(&self) -> Option<&ArmSummary> {
        self.pick(AlgorithmKind::Gspo, RoutingMode::Native, FfnKind::Moe)
    }

    pub fn dense(&self) -> Option<&ArmSummary> {
        self.pick(AlgorithmKind::Grpo, RoutingMode::Native, FfnKind::Dense)
    }
}

/// An arm's name as the report prints it.
pub fn n(a: &ArmSummary) -> String {
    format!("`{}`", a.name)
}

pub fn collapses(a: &ArmSummary) -> usize {
    a.collapsed_cells
}

pub fn ratio_explosions(a: &ArmSummary) -> usize {
    a.collapses
        .get(EventKind::RatioExplosion.name())
        .map_or(0, |c| c.0)
}
