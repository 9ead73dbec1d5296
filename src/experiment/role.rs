//! The part an arm plays in the report's claims ("the R3 arm", "GRPO with TIS", …), as an
//! `[[arms]]` entry may declare it with `role = "..."`.

use crate::model::FfnKind;
use crate::rl::{AlgorithmKind, RoutingMode};

crate::named_enum! {
    /// A part in the claims. An arm that sets knobs of its own (algorithm parameters, `rl` or
    /// `model` keys beyond `tis`) plays one only when it declares it; an arm without such knobs
    /// plays the role its objective, routing, FFN and TIS describe.
    pub enum Role("role") {
        /// GRPO on the MoE, native routing, no TIS.
        Grpo = "grpo",
        /// GRPO on the MoE with routing replay from the trainer's π_old recompute (R2).
        GrpoR2 = "grpo_r2",
        /// GRPO on the MoE replaying the rollout engine's routes (R3).
        GrpoR3 = "grpo_r3",
        /// GRPO on the MoE, native routing, truncated importance sampling against the engine.
        GrpoTis = "grpo_tis",
        /// GVPO on the MoE, native routing.
        Gvpo = "gvpo",
        /// GSPO on the MoE, native routing.
        Gspo = "gspo",
        /// GRPO on the dense control model.
        Dense = "dense",
        /// GVPD (GVPO's on-policy distillation) on the MoE, native routing.
        Gvpd = "gvpd",
        /// GVPD on the MoE replaying the rollout engine's routes (R3).
        GvpdR3 = "gvpd_r3",
        /// Token-level policy-gradient OPD on the MoE, native routing.
        OpdPg = "opd_pg",
        /// Full-vocabulary KL / JSD_β distillation on the MoE, native routing.
        OpdKl = "opd_kl",
    }
}

impl Role {
    /// GRPO on the MoE without TIS under `routing`.
    pub fn grpo(routing: RoutingMode) -> Role {
        match routing {
            RoutingMode::Native => Role::Grpo,
            RoutingMode::R2 => Role::GrpoR2,
            RoutingMode::R3 => Role::GrpoR3,
        }
    }

    /// Whether an arm of this objective, routing, FFN and TIS can play the role.
    pub fn fits(
        self,
        algorithm: AlgorithmKind,
        routing: RoutingMode,
        ffn: FfnKind,
        tis: bool,
    ) -> bool {
        use {AlgorithmKind as A, FfnKind as F, RoutingMode as R};
        let shape = match self {
            Role::Grpo => (A::Grpo, R::Native, F::Moe, false),
            Role::GrpoR2 => (A::Grpo, R::R2, F::Moe, false),
            Role::GrpoR3 => (A::Grpo, R::R3, F::Moe, false),
            Role::GrpoTis => (A::Grpo, R::Native, F::Moe, true),
            Role::Gvpo => (A::Gvpo, R::Native, F::Moe, false),
            Role::Gspo => (A::Gspo, R::Native, F::Moe, false),
            Role::Dense => (A::Grpo, R::Native, F::Dense, false),
            Role::Gvpd => (A::Gvpd, R::Native, F::Moe, false),
            Role::GvpdR3 => (A::Gvpd, R::R3, F::Moe, false),
            Role::OpdPg => (A::OpdPg, R::Native, F::Moe, false),
            Role::OpdKl => (A::OpdKl, R::Native, F::Moe, false),
        };
        shape == (algorithm, routing, ffn, tis)
    }
}
