//! RL configuration: the objective, the routing mode, the rollout engine and the update loop.
//! Every open choice is a field here with its documented default.

use crate::optim::AdamWConfig;
use anyhow::{Result, bail, ensure};
use serde::{Deserialize, Serialize};

/// Policy objective (DESIGN §6). One variant per objective, its parameters inside.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Algorithm {
    Grpo(GrpoConfig),
    Gspo(GspoConfig),
    GspoToken(GspoConfig),
    Gvpo(GvpoConfig),
}

crate::named_enum! {
    /// The objective of an [`Algorithm`], without its parameters (`--algorithm`, frame column
    /// `algorithm`). Spelled as the `kind` tag of an `algorithm = { kind = ... }` table.
    pub enum AlgorithmKind("algorithm") {
        Grpo = "grpo",
        Gspo = "gspo",
        GspoToken = "gspo_token",
        Gvpo = "gvpo",
    }
}

impl Algorithm {
    pub fn kind(&self) -> AlgorithmKind {
        match self {
            Algorithm::Grpo(_) => AlgorithmKind::Grpo,
            Algorithm::Gspo(_) => AlgorithmKind::Gspo,
            Algorithm::GspoToken(_) => AlgorithmKind::GspoToken,
            Algorithm::Gvpo(_) => AlgorithmKind::Gvpo,
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
        }
    }

    /// Every objective with its default parameters (tests iterate over this).
    pub fn all_defaults() -> Vec<Algorithm> {
        AlgorithmKind::ALL
            .iter()
            .map(|&k| Algorithm::default_of(k))
            .collect()
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
        }
        Ok(())
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

crate::named_enum! {
    /// Which expert ids the trainer's forwards run (DESIGN §4 table).
    #[derive(Default)]
    pub enum RoutingMode("routing mode") {
        /// π_old recompute and updates route natively.
        #[default]
        Native = "native",
        /// π_old recompute routes natively and records; every update replays those routes.
        R2 = "r2",
        /// π_old recompute and every update replay the rollout engine's routes.
        R3 = "r3",
    }
}

/// Numerical differences of the rollout engine from the trainer. Never touches the trainer.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Mismatch {
    /// Same numerics as the trainer.
    #[default]
    None,
    /// Weights and the residual stream rounded to bfloat16 precision in the rollout forward.
    Bf16,
    /// Gaussian noise `N(0, σ²)` on the router logits of every rollout forward.
    RouterNoise { sigma: f64 },
    /// Gaussian noise `N(0, σ²)` on the output logits before sampling.
    LogitNoise { sigma: f64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AdvantageMode {
    /// `(r − mean) / (std + 1e-6)`, unbiased std (default).
    #[default]
    MeanStd,
    /// `r − mean` (Dr. GRPO).
    MeanOnly,
}

/// Truncated importance sampling against the rollout engine: multiply each token's loss by the
/// detached `min(exp(logp_old − logp_mu), cap)`.
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

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LrSchedule {
    #[default]
    Constant,
    /// Linear warm-up over `warmup` steps, then cosine decay to `min_ratio · lr` at the last step.
    WarmupCosine { warmup: usize, min_ratio: f64 },
}

impl LrSchedule {
    /// Learning-rate factor at RL step `step` (0-based) of `total`.
    pub fn factor(&self, step: usize, total: usize) -> f64 {
        match *self {
            LrSchedule::Constant => 1.0,
            LrSchedule::WarmupCosine { warmup, min_ratio } => {
                if step < warmup {
                    (step + 1) as f64 / warmup as f64
                } else {
                    let span = total.saturating_sub(warmup).max(1) as f64;
                    let p = ((step - warmup) as f64 / span).min(1.0);
                    min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + (std::f64::consts::PI * p).cos())
                }
            }
        }
    }
}

/// Router-logit random walk in the trainer's update forwards (DESIGN §6 "Simulating scale").
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DriftInjection {
    /// Walk step `η ~ N(0, σ²)` per token, layer and expert.
    Sigma { sigma: f64 },
    /// σ calibrated once per cell so one walk step changes this share of activated experts.
    TargetExpertFrac { target: f64 },
}

/// Everything one RL cell needs besides the model and the task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RlConfig {
    pub algorithm: Algorithm,
    pub routing: RoutingMode,
    /// Prompts per rollout batch (B).
    pub batch_prompts: usize,
    /// Responses per prompt (G).
    pub group_size: usize,
    /// Minibatches (optimizer steps) per rollout batch (N); must divide B.
    pub minibatches: usize,
    /// Micro-batches per minibatch (at most; the largest divisor of the prompt groups per
    /// minibatch not above it is used). Each micro-batch of whole prompt groups runs its own
    /// forward, loss and backward; their losses are weighted so they sum to the minibatch loss,
    /// their gradients are summed and the minibatch still takes one AdamW step. The π_old
    /// recompute, the reference and the drift probe use the same micro-batches, and the rollout
    /// engine has its own `rollout_shards`. Micro-batches run in parallel when the thread pool
    /// has more than one thread; the numbers do not depend on the thread count. The
    /// load-balancing loss keeps the whole minibatch's routed-slot fractions (see
    /// [`super::micro`]).
    pub micro_batches: usize,
    /// The rollout engine generates its B·G rows in this many contiguous shards, each with its
    /// own KV cache, in parallel when the thread pool has more than one thread. Tokens are
    /// sampled in row order from one random stream either way.
    pub rollout_shards: usize,
    pub temperature: f32,
    pub mismatch: Mismatch,
    pub advantage: AdvantageMode,
    pub tis: Option<TisConfig>,
    pub optimizer: AdamWConfig,
    pub lr_schedule: LrSchedule,
    /// Total RL steps (for the schedule).
    pub total_steps: usize,
    /// Load-balancing loss coefficient.
    pub aux_coef: f64,
    /// Router z-loss coefficient.
    pub z_coef: f64,
    pub drift_injection: Option<DriftInjection>,
    /// Compute log-probs of the frozen cold-start model every step for the `kl_ref` metric (one
    /// extra no-graph forward per minibatch); always on when the objective has a KL term.
    pub measure_kl_ref: bool,
}

impl Default for RlConfig {
    fn default() -> Self {
        RlConfig {
            algorithm: Algorithm::Grpo(GrpoConfig::default()),
            routing: RoutingMode::Native,
            batch_prompts: 16,
            group_size: 8,
            minibatches: 4,
            micro_batches: 2,
            rollout_shards: 2,
            temperature: 1.0,
            mismatch: Mismatch::None,
            advantage: AdvantageMode::MeanStd,
            tis: None,
            optimizer: AdamWConfig::default(),
            lr_schedule: LrSchedule::Constant,
            total_steps: 100,
            aux_coef: 1e-3,
            z_coef: 0.0,
            drift_injection: None,
            measure_kl_ref: true,
        }
    }
}

impl RlConfig {
    /// Micro-batches each minibatch is split into (see [`RlConfig::micro_batches`]).
    pub fn micro_per_minibatch(&self) -> usize {
        largest_divisor_at_most(
            self.batch_prompts / self.minibatches.max(1),
            self.micro_batches,
        )
    }

    pub fn validate(&self) -> Result<()> {
        self.algorithm.validate()?;
        self.optimizer.validate()?;
        ensure!(
            self.batch_prompts >= 1,
            "batch_prompts (B) must be at least 1"
        );
        if self.group_size < 2 {
            bail!(
                "group_size (G) = {} must be at least 2: advantages compare responses within a group",
                self.group_size
            );
        }
        if self.minibatches == 0 || !self.batch_prompts.is_multiple_of(self.minibatches) {
            bail!(
                "minibatches (N) = {} must divide batch_prompts (B) = {} (minibatches hold whole prompt groups); allowed: {:?}",
                self.minibatches,
                self.batch_prompts,
                (1..=self.batch_prompts)
                    .filter(|&n| self.batch_prompts.is_multiple_of(n))
                    .collect::<Vec<_>>()
            );
        }
        ensure!(
            self.micro_batches >= 1 && self.rollout_shards >= 1,
            "micro_batches and rollout_shards must be at least 1"
        );
        ensure!(
            self.temperature > 0.0 && self.temperature.is_finite(),
            "temperature must be > 0"
        );
        match self.mismatch {
            Mismatch::RouterNoise { sigma } | Mismatch::LogitNoise { sigma } => ensure!(
                sigma >= 0.0 && sigma.is_finite(),
                "mismatch sigma must be >= 0"
            ),
            _ => {}
        }
        if let Some(t) = &self.tis {
            ensure!(t.cap > 0.0, "tis.cap must be > 0");
        }
        match self.drift_injection {
            Some(DriftInjection::Sigma { sigma }) => ensure!(
                sigma >= 0.0 && sigma.is_finite(),
                "drift_injection sigma must be >= 0"
            ),
            Some(DriftInjection::TargetExpertFrac { target }) => ensure!(
                target > 0.0 && target < 1.0,
                "drift_injection target must be in (0, 1)"
            ),
            None => {}
        }
        ensure!(
            self.aux_coef >= 0.0 && self.z_coef >= 0.0,
            "aux_coef and z_coef must be >= 0"
        );
        Ok(())
    }
}

/// The largest divisor of `n` that is at most `max` (at least 1).
fn largest_divisor_at_most(n: usize, max: usize) -> usize {
    (1..=max.min(n).max(1))
        .rev()
        .find(|&d| n.is_multiple_of(d))
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `kind` tag serde writes for an algorithm is its [`AlgorithmKind`] name.
    #[test]
    fn algorithm_tags_are_the_kind_names() {
        for a in Algorithm::all_defaults() {
            let v = serde_json::to_value(&a).unwrap();
            assert_eq!(v["kind"], a.name());
        }
    }
}
