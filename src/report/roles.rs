//! Which arm plays which part in a claim: an arm plays the [`Role`] its `[[arms]]` entry
//! declares; an arm that declares none plays the role its objective, routing, FFN and TIS
//! describe, but only when it sets no knobs of its own (never by its name, never by a guess);
//! and the per-arm counts the verdicts use.

use super::run_info::{Identity, RunInfo};
use super::summary::ArmSummary;
use crate::experiment::Role;
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
                        role: None,
                    });
                (a, id)
            })
            .collect();
        Arms { arms }
    }

    /// The arm that plays `role`: the one that declares it, else the first in spec order that
    /// fits it and sets no knobs of its own. An arm with knobs of its own (a threshold-filtered
    /// R3, a TIS arm with its own `old_logp`) never plays a role it does not declare.
    pub fn role(&self, role: Role) -> Option<&ArmSummary> {
        let declared = self.arms.iter().find(|(_, id)| id.role == Some(role));
        declared
            .or_else(|| {
                self.arms
                    .iter()
                    .find(|(_, id)| id.role.is_none() && id.default_knobs && fits(role, id))
            })
            .map(|(a, _)| a)
    }

    /// The arms passed over for `role`, when no arm plays it: they fit it but set knobs of
    /// their own and declare no role.
    pub fn passed_over(&self, role: Role) -> Vec<&ArmSummary> {
        if self.role(role).is_some() {
            return Vec::new();
        }
        self.arms
            .iter()
            .filter(|(_, id)| id.role.is_none() && fits(role, id))
            .map(|(a, _)| a)
            .collect()
    }

    /// GRPO on the MoE without TIS, under `routing`.
    pub fn grpo(&self, routing: RoutingMode) -> Option<&ArmSummary> {
        self.role(Role::grpo(routing))
    }

    /// GRPO on the MoE with native routing and truncated importance sampling.
    pub fn grpo_tis(&self) -> Option<&ArmSummary> {
        self.role(Role::GrpoTis)
    }

    pub fn gvpo(&self) -> Option<&ArmSummary> {
        self.role(Role::Gvpo)
    }

    pub fn gspo(&self) -> Option<&ArmSummary> {
        self.role(Role::Gspo)
    }

    pub fn dense(&self) -> Option<&ArmSummary> {
        self.role(Role::Dense)
    }
}

fn fits(role: Role, id: &Identity) -> bool {
    role.fits(id.algorithm, id.routing, id.ffn, id.tis)
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

#[cfg(test)]
mod tests {
    use super::Arms;
    use crate::experiment::{ExperimentSpec, Role};
    use crate::report::run_info::RunInfo;
    use crate::report::summary::ArmSummary;
    use crate::rl::RoutingMode;

    const HEAD: &str = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n";

    /// The arms of the spec's one regime as the report sees them: the spec goes through
    /// `config.json` (as a run writes it) and back.
    fn arms_of(arms_toml: &str) -> Arms {
        let spec = ExperimentSpec::from_toml(&format!("{HEAD}{arms_toml}"), "x.toml").unwrap();
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("driftlab-roles-{}-{k}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = serde_json::json!({ "spec": spec });
        std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
        let info = RunInfo::load(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let sums = spec
            .arms
            .iter()
            .map(|a| ArmSummary {
                regime: "default".into(),
                ..ArmSummary::blank(&a.name, &[])
            })
            .collect();
        Arms::new(sums, &info)
    }

    fn name(a: Option<&ArmSummary>) -> Option<&str> {
        a.map(|a| a.name.as_str())
    }

    const GRPO: &str = "[[arms]]\nname = 'grpo'\nalgorithm = { kind = 'grpo' }\n";
    const R3: &str = "[[arms]]\nname = 'grpo_r3'\nalgorithm = { kind = 'grpo' }\nrouting = 'r3'\n";
    const THRESHOLD: &str = "[[arms]]\nname = 'grpo_r3_threshold'\nalgorithm = { kind = 'grpo' }\n\
         routing = 'r3'\nrl = { replay_threshold = { ratio = 0.5 } }\n";

    /// A run whose selection left only the threshold-filtered R3 arm has no "R3": the arm
    /// sets a knob of its own and declares no role. The claims' "not measured" line names it.
    #[test]
    fn a_threshold_filtered_r3_arm_is_never_taken_for_r3() {
        let arms = arms_of(&format!("{GRPO}{THRESHOLD}"));
        assert_eq!(name(arms.grpo(RoutingMode::Native)), Some("grpo"));
        assert_eq!(name(arms.grpo(RoutingMode::R3)), None);
        let passed: Vec<&str> = arms
            .passed_over(Role::GrpoR3)
            .iter()
            .map(|a| a.name.as_str())
            .collect();
        assert_eq!(passed, ["grpo_r3_threshold"]);
        // Beside a plain R3 arm, the plain one is R3 whatever the order.
        let arms = arms_of(&format!("{GRPO}{THRESHOLD}{R3}"));
        assert_eq!(name(arms.grpo(RoutingMode::R3)), Some("grpo_r3"));
        assert!(arms.passed_over(Role::GrpoR3).is_empty());
        // A plain arm keeps its role beside peers with knobs of their own (drift_depth's
        // `softmax` beside arms with their own `model` keys).
        let arms = arms_of(&format!(
            "{GRPO}[[arms]]\nname = 'e32'\nalgorithm = {{ kind = 'grpo' }}\n\
             model = {{ n_experts = 32, top_k = 4 }}\n"
        ));
        assert_eq!(name(arms.grpo(RoutingMode::Native)), Some("grpo"));
    }

    /// A declared role is honoured even with knobs of the arm's own, and wins over a plain
    /// arm that fits it; without the declaration the TIS arm of r3_mismatch (its own
    /// `old_logp`) plays nothing.
    #[test]
    fn a_declared_role_is_honoured_with_knobs_of_its_own() {
        let declared = THRESHOLD.replace("routing = 'r3'\n", "routing = 'r3'\nrole = 'grpo_r3'\n");
        let arms = arms_of(&format!("{GRPO}{declared}"));
        assert_eq!(name(arms.grpo(RoutingMode::R3)), Some("grpo_r3_threshold"));
        let arms = arms_of(&format!("{GRPO}{R3}{declared}"));
        assert_eq!(name(arms.grpo(RoutingMode::R3)), Some("grpo_r3_threshold"));
        let tis = "[[arms]]\nname = 'grpo_tis'\nalgorithm = { kind = 'grpo' }\n\
                   rl = { old_logp = 'recompute', tis = { cap = 2.0 } }\n";
        let arms = arms_of(&format!("{GRPO}{tis}"));
        assert_eq!(name(arms.grpo_tis()), None);
        let arms = arms_of(&format!(
            "{GRPO}{}",
            tis.replace("rl = ", "role = 'grpo_tis'\nrl = ")
        ));
        assert_eq!(name(arms.grpo_tis()), Some("grpo_tis"));
        assert_eq!(name(arms.grpo(RoutingMode::Native)), Some("grpo"));
        // TIS alone is what the role is, not a knob of the arm's own.
        let arms = arms_of(&format!(
            "{GRPO}[[arms]]\nname = 't'\nalgorithm = {{ kind = 'grpo' }}\nrl = {{ tis = {{ cap = 2.0 }} }}\n"
        ));
        assert_eq!(name(arms.grpo_tis()), Some("t"));
    }
}
