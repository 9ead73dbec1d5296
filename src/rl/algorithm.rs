//! The objectives' settings: one [`Algorithm`] variant per objective, its parameters inside,
//! with documented defaults (the equations are in [`super::loss`]).

pub use super::loss::opd::{GvpdConfig, OpdKlConfig, OpdPgConfig};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

/// Policy objective (DESIGN §6). One variant per objective, its parameters inside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Algorithm {
    Grpo(GrpoConfig),
    Gspo(GspoConfig),
    GspoToken(GspoConfig),
    Gvpo(GvpoConfig),
    Cispo(CispoConfig),
    Gmpo(GmpoConfig),
    /// On-policy distillation, GVPO's form (needs `rl.teacher`).
    Gvpd(GvpdConfig),
    /// On-policy distillation, token-level policy gradient (needs `rl.teacher`).
    OpdPg(OpdPgConfig),
    /// On-policy distillation, full-vocabulary KL / JSD_β (needs `rl.teacher`).
    OpdKl(OpdKlConfig),
}

crate::named_enum! {
    /// The objective of an [`Algorithm`], without its parameters (`--algorithm`, frame column
    /// `algorithm`). Spelled as the `kind` tag of an `algorithm = { kind = ... }` table.
    pub enum AlgorithmKind("algorithm") {
        Grpo = "grpo",
        Gspo = "gspo",
        GspoToken = "gspo_token",
        Gvpo = "gvpo",
        Cispo = "cispo",
        Gmpo = "gmpo",
        Gvpd = "gvpd",
        OpdPg = "opd_pg",
        OpdKl = "opd_kl",
    }
}

impl Algorithm {
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            Algorithm::Grpo(_) => AlgorithmKind::Grpo,
            Algorithm::Gspo(_) => AlgorithmKind::Gspo,
            Algorithm::GspoToken(_) => AlgorithmKind::GspoToken,
            Algorithm::Gvpo(_) => AlgorithmKind::Gvpo,
            Algorithm::Cispo(_) => AlgorithmKind::Cispo,
            Algorithm::Gmpo(_) => AlgorithmKind::Gmpo,
            Algorithm::Gvpd(_) => AlgorithmKind::Gvpd,
            Algorithm::OpdPg(_) => AlgorithmKind::OpdPg,
            Algorithm::OpdKl(_) => AlgorithmKind::OpdKl,
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The objective `kind` with its default parameters.
    pub fn default_of(kind: AlgorithmKind) -> Algorithm {
        match kind {
            AlgorithmKind::Grpo => Algorithm::Grpo(GrpoConfig::default()),
            AlgorithmKind::Gspo => Algorithm::Gspo(GspoConfig::default()),
            AlgorithmKind::GspoToken => Algorithm::GspoToken(GspoConfig::default()),
            AlgorithmKind::Gvpo => Algorithm::Gvpo(GvpoConfig::default()),
            AlgorithmKind::Cispo => Algorithm::Cispo(CispoConfig::default()),
            AlgorithmKind::Gmpo => Algorithm::Gmpo(GmpoConfig::default()),
            AlgorithmKind::Gvpd => Algorithm::Gvpd(GvpdConfig::default()),
            AlgorithmKind::OpdPg => Algorithm::OpdPg(OpdPgConfig::default()),
            AlgorithmKind::OpdKl => Algorithm::OpdKl(OpdKlConfig::default()),
        }
    }

    /// Every objective with its default parameters (tests iterate over this).
    pub fn all_defaults() -> Vec<Algorithm> {
        AlgorithmKind::ALL
            .iter()
            .map(|&k| Algorithm::default_of(k))
            .collect()
    }

    /// Whether the objective's loss has an importance ratio π_θ/π_old (GVPO's and GVPD's
    /// squared losses and the full-vocabulary divergence have none).
    pub fn has_ratio(&self) -> bool {
        !matches!(
            self,
            Algorithm::Gvpo(_) | Algorithm::Gvpd(_) | Algorithm::OpdKl(_)
        )
    }

    /// Whether the objective distils a teacher (and so needs `rl.teacher`).
    pub fn needs_teacher(&self) -> bool {
        matches!(
            self,
            Algorithm::Gvpd(_) | Algorithm::OpdPg(_) | Algorithm::OpdKl(_)
        )
    }

    /// Whether the objective reads the student's and the teacher's full distributions over the
    /// vocabulary (not only the sampled tokens' log-probs).
    pub fn needs_teacher_logits(&self) -> bool {
        matches!(self, Algorithm::OpdKl(_))
    }

    /// Coefficient of the k3 KL to the reference model (0 when the objective has none).
    pub fn kl_beta(&self) -> f64 {
        match self {
            Algorithm::Grpo(c) => c.kl_beta,
            _ => 0.0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            Algorithm::Grpo(c) => {
                ensure!(
                    c.eps_low >= 0.0 && c.eps_low < 1.0 && c.eps_high >= 0.0,
                    "grpo clip ranges need 0 <= eps_low < 1, eps_high >= 0"
                );
                ensure!(c.kl_beta >= 0.0, "grpo.kl_beta must be >= 0");
            }
            Algorithm::Gspo(c) | Algorithm::GspoToken(c) => {
                ensure!(
                    c.eps_low >= 0.0 && c.eps_low < 1.0 && c.eps_high >= 0.0,
                    "gspo clip ranges need 0 <= eps_low < 1, eps_high >= 0"
                );
            }
            Algorithm::Gvpo(c) => {
                ensure!(c.beta > 0.0 && c.beta.is_finite(), "gvpo.beta must be > 0")
            }
            Algorithm::Cispo(c) => ensure!(
                c.eps_low >= 0.0
                    && c.eps_high >= 0.0
                    && c.eps_low.is_finite()
                    && c.eps_high.is_finite(),
                "cispo clip ranges need eps_low >= 0, eps_high >= 0 (eps_low >= 1: no lower bound)"
            ),
            Algorithm::Gmpo(c) => ensure!(
                c.eps_low > 0.0
                    && c.eps_high > 0.0
                    && c.eps_low.is_finite()
                    && c.eps_high.is_finite(),
                "gmpo log-space clip ranges need eps_low > 0, eps_high > 0"
            ),
            Algorithm::Gvpd(c) => c.validate()?,
            Algorithm::OpdPg(c) => c.validate()?,
            Algorithm::OpdKl(c) => c.validate()?,
        }
        Ok(())
    }
}

/// CISPO's bounds on the detached importance weight, `clip(w, 1 − eps_low, 1 + eps_high)`
/// (see [`crate::rl::loss::cispo`] for the defaults' sources).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CispoConfig {
    pub eps_low: f64,
    pub eps_high: f64,
}

impl Default for CispoConfig {
    fn default() -> Self {
        CispoConfig {
            eps_low: 1.0,
            eps_high: 0.2,
        }
    }
}

/// GMPO's token clipping in log space, `clip(Δ, −eps_low, eps_high)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GmpoConfig {
    pub eps_low: f64,
    pub eps_high: f64,
}

impl Default for GmpoConfig {
    fn default() -> Self {
        GmpoConfig {
            eps_low: 0.4,
            eps_high: 0.4,
        }
    }
}

/// How GRPO averages its per-token losses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Aggregation {
    /// Mean over the tokens of each response, then over responses (default).
    #[default]
    SeqMeanTokenMean,
    /// Sum over all tokens divided by the number of tokens.
    TokenMean,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GrpoConfig {
    pub eps_low: f64,
    pub eps_high: f64,
    pub aggregation: Aggregation,
    /// k3 KL to the cold-start reference; 0 = off.
    pub kl_beta: f64,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        GrpoConfig {
            eps_low: 0.2,
            eps_high: 0.27,
            aggregation: Aggregation::SeqMeanTokenMean,
            kl_beta: 0.0,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GspoConfig {
    pub eps_low: f64,
    pub eps_high: f64,
}

impl Default for GspoConfig {
    fn default() -> Self {
        GspoConfig {
            eps_low: 3e-4,
            eps_high: 4e-4,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GvpoConfig {
    pub beta: f64,
}

impl Default for GvpoConfig {
    fn default() -> Self {
        GvpoConfig { beta: 0.1 }
    }
}
