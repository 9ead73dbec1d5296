//! RL configuration: the objective, the routing mode, the rollout engine and the update loop.
//! Every open choice is a field here with its documented default.

pub use super::fix_settings::{Pr2Config, Pr2Gates, ReplayThresholdConfig};
use super::fixes::On;
pub use super::fixes::mis::MisLevel;
pub use super::fixes::{IcePopConfig, MisConfig, OpsmConfig, TisConfig};
use crate::optim::AdamWConfig;
use anyhow::{Context, Result, bail, ensure};
use serde::{Deserialize, Serialize};

pub use super::algorithm::{
    Aggregation, Algorithm, AlgorithmKind, CispoConfig, GmpoConfig, GrpoConfig, GspoConfig,
    GvpdConfig, GvpoConfig, OpdKlConfig, OpdPgConfig,
};
pub use super::engine_router::{Precision, RouterPrecision};
use super::teacher::TeacherConfig;

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

crate::named_enum! {
    /// Where the importance ratios' π_old comes from (`old_logp`).
    #[derive(Default)]
    pub enum OldLogp("old_logp") {
        /// The trainer's own no-graph forward before the first update, in the layout and
        /// routing the updates use: minibatch 1 is exactly on-policy (default).
        #[default]
        Recompute = "recompute",
        /// The log-probs the rollout engine recorded while sampling (frameworks that skip the
        /// recompute): under a rollout mismatch or staleness, minibatch 1 is *not* on-policy.
        /// The trainer still runs its recompute for the routes R2 replays, the entropy and the
        /// mismatch metrics; TIS weights are then all 1 (see [`TisConfig`]).
        Rollout = "rollout",
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
    /// Gaussian noise `N(0, σ²)` on the router logits of the rollout engine's top-k *choice*
    /// only; the gates are the live router's at the chosen experts, as in the trainer. An
    /// engine that picks other experts for near-ties and is otherwise exact, so under R3 the
    /// trainer reproduces the engine's log-probs up to rounding.
    RouteFlip { sigma: f64 },
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

/// RSPO's router-shift weighting of the token ratios ([`super::router_shift`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RouterShiftConfig {
    /// Lower bound of γ̃.
    pub floor: f64,
}

impl Default for RouterShiftConfig {
    fn default() -> Self {
        RouterShiftConfig { floor: 0.8 }
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

/// Declares [`RlConfig`] and its defaults with one field per registered stability fix
/// ([`super::fixes`]), `None` (off) by default, between `advantage` and `replay_threshold`,
/// and [`RlConfig::fixes`], the fixes it turns on.
macro_rules! rl_config {
    ($($key:ident: $fix:ident,)*) => {
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
            /// Prompts per minibatch. When set, it fixes the minibatch and N sets the batch:
            /// `batch_prompts = minibatches × minibatch_prompts` (the N sweeps of arXiv 2512.01374).
            /// Unset (default), `batch_prompts` is fixed and N splits it. In a spec, whichever of the
            /// two a later level sets wins; in code, [`RlConfig::with_sizes`] overwrites
            /// `batch_prompts` (a spec's cells are resolved with it; the trainer takes resolved
            /// settings and refuses a batch that disagrees).
            pub minibatch_prompts: Option<usize>,
            /// Where π_old comes from (see [`OldLogp`]).
            pub old_logp: OldLogp,
            /// Asynchronous staleness k: the rollout batch of step s is sampled by the policy at the
            /// start of step s − k (the cold start for the first k steps); 0 = on-policy sampling.
            /// Keeps the policies of the last k + 1 step starts (none at k = 0).
            pub rollout_staleness: usize,
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
            /// Where the rollout engine picks tokens (see [`crate::generate::Sampler`]): `auto`
            /// (default: the host on flex, the device elsewhere), `host` or `device`; left out
            /// of a written config at `auto`.
            #[serde(skip_serializing_if = "crate::generate::Sampler::is_auto")]
            pub sampler: crate::generate::Sampler,
            pub temperature: f32,
            pub mismatch: Mismatch,
            /// The rollout engine's router precision, apart from the rest of `mismatch` (see
            /// [`super::engine_router`]); left out of a written config at its default.
            #[serde(skip_serializing_if = "RouterPrecision::is_default")]
            pub router_precision: RouterPrecision,
            /// Check the engine's expert choices against an f64 router once per step (see
            /// [`super::engine_router`]); left out of a written config when off.
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            pub router_check: bool,
            pub advantage: AdvantageMode,
            $(
                #[doc = concat!("The `", stringify!($key), "` stability fix ([`", stringify!($fix), "`](super::fixes::", stringify!($fix), "), ")]
                #[doc = concat!("`src/rl/fixes/", stringify!($key), ".rs`); off when unset.")]
                #[serde(skip_serializing_if = "super::fixes::unwritten")]
                pub $key: Option<super::fixes::$fix>,
            )*
            /// Declares that the fixes on may stack engine-ratio weights (two of tis, icepop, mis:
            /// see [`super::fixes::check_stacking`]); refused without it. Left out of a written
            /// config when false, so configs from before this key read the same.
            #[serde(skip_serializing_if = "std::ops::Not::not")]
            pub allow_stacked_engine_ratio: bool,
            /// Threshold-filtered Routing Replay (r2 and r3 only): see [`ReplayThresholdConfig`].
            #[serde(skip_serializing_if = "Option::is_none")]
            pub replay_threshold: Option<ReplayThresholdConfig>,
            /// Predictive Routing Replay (r2 only): see [`Pr2Config`].
            #[serde(skip_serializing_if = "Option::is_none")]
            pub pr2: Option<Pr2Config>,
            /// RSPO's router-shift weighting of the token ratios (see [`super::router_shift`]); off
            /// when unset. Applies to every objective with an importance ratio (not gvpo).
            pub router_shift: Option<RouterShiftConfig>,
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
            /// Run the drift probe (and the bias-only probe) on steps 0, k, 2k, … only: the drift
            /// columns of the other steps' updates are null and they write no per-layer rows. A
            /// declared saving of measurement work (the probe is one no-graph forward per minibatch);
            /// 1 (default) probes every update. Training is unchanged: the probe only reads.
            #[serde(skip_serializing_if = "every_step")]
            pub probe_every: usize,
            /// With `measure_kl_ref` and an objective without a KL term: the reference forward, and the
            /// `kl_ref` metric, on steps 0, k, 2k, … only (null on the others). 1 (default) measures
            /// every step; an objective with a KL term needs the reference every step.
            #[serde(skip_serializing_if = "every_step")]
            pub kl_ref_every: usize,
            /// The frozen teacher of on-policy distillation (see [`super::teacher`]): needed by
            /// `gvpd`, `opd_pg` and `opd_kl`; with any other objective it is scored and logged
            /// (`teacher_kl`) but not trained towards. Absent by default.
            #[serde(skip_serializing_if = "Option::is_none")]
            pub teacher: Option<TeacherConfig>,
        }

        impl Default for RlConfig {
            fn default() -> Self {
                RlConfig {
                    algorithm: Algorithm::Grpo(GrpoConfig::default()),
                    routing: RoutingMode::Native,
                    batch_prompts: 16,
                    group_size: 8,
                    minibatches: 4,
                    minibatch_prompts: None,
                    old_logp: OldLogp::Recompute,
                    rollout_staleness: 0,
                    micro_batches: 2,
                    rollout_shards: 2,
                    sampler: crate::generate::Sampler::Auto,
                    temperature: 1.0,
                    mismatch: Mismatch::None,
                    router_precision: RouterPrecision::default(),
                    router_check: false,
                    advantage: AdvantageMode::MeanStd,
                    $($key: None,)*
                    allow_stacked_engine_ratio: false,
                    replay_threshold: None,
                    pr2: None,
                    router_shift: None,
                    optimizer: AdamWConfig::default(),
                    lr_schedule: LrSchedule::Constant,
                    total_steps: 100,
                    aux_coef: 1e-3,
                    z_coef: 0.0,
                    drift_injection: None,
                    measure_kl_ref: true,
                    probe_every: 1,
                    kl_ref_every: 1,
                    teacher: None,
                }
            }
        }

        impl RlConfig {
            /// The stability fixes this config turns on, by registry position.
            pub fn fixes(&self) -> [Option<&dyn On>; super::fixes::COUNT] {
                [$(self.$key.as_ref().map(|f| f as &dyn On)),*]
            }

            /// Turn on the stability fix `key` with `settings`, its `[rl]` table (`{}` for its
            /// defaults), read with the same checks as in a spec.
            pub fn set_fix(&mut self, key: &str, settings: serde_json::Value) -> Result<()> {
                $(if key == stringify!($key) {
                    self.$key = Some(
                        serde_json::from_value(settings).with_context(|| format!("rl.{key}"))?,
                    );
                    return Ok(());
                })*
                bail!(
                    "no stability fix is called '{key}' (the fixes: {})",
                    super::fixes::KEYS.join(", ")
                )
            }
        }
    };
}
super::fixes::stability_fixes!(rl_config);

/// A measurement on every step (the default of `probe_every` and `kl_ref_every`), left out
/// of a written config so configs from before these keys read the same.
fn every_step(k: &usize) -> bool {
    *k == 1
}

impl RlConfig {
    /// Whether step `step` runs the drift probe (see [`RlConfig::probe_every`]).
    pub fn probes_at(&self, step: usize) -> bool {
        step.is_multiple_of(self.probe_every)
    }

    /// Whether step `step` needs the reference model's forward: every step with a KL term,
    /// else on [`RlConfig::kl_ref_every`]'s steps when `measure_kl_ref` is on.
    pub fn reference_at(&self, step: usize) -> bool {
        self.algorithm.kl_beta() > 0.0
            || (self.measure_kl_ref && step.is_multiple_of(self.kl_ref_every))
    }

    /// Micro-batches each minibatch is split into (see [`RlConfig::micro_batches`]).
    pub fn micro_per_minibatch(&self) -> usize {
        largest_divisor_at_most(
            self.batch_prompts / self.minibatches.max(1),
            self.micro_batches,
        )
    }

    /// The settings with `batch_prompts` derived from `minibatch_prompts` when that is set.
    pub fn with_sizes(mut self) -> Self {
        if let Some(m) = self.minibatch_prompts {
            self.batch_prompts = self.minibatches * m;
        }
        self
    }

    /// The stability fixes' and the replay variants' checks.
    fn validate_fixes_and_replay(&self) -> Result<()> {
        for fix in self.fixes().into_iter().flatten() {
            fix.validate()?;
        }
        super::fixes::check_stacking(&self.fixes(), self.allow_stacked_engine_ratio)?;
        if let Some(t) = &self.replay_threshold {
            ensure!(
                (0.0..=1.0).contains(&t.ratio),
                "replay_threshold.ratio must be in [0, 1] (got {})",
                t.ratio
            );
            ensure!(
                self.routing != RoutingMode::Native,
                "replay_threshold filters replayed routes: give it to an r2 or r3 arm \
                 (`rl = {{ replay_threshold = {{ ratio = {} }} }}` in its [[arms]] entry)",
                t.ratio
            );
        }
        if let Some(p) = &self.pr2 {
            ensure!(
                p.lr_mult.is_finite() && p.lr_mult > 0.0,
                "pr2.lr_mult must be > 0 (got {})",
                p.lr_mult
            );
            ensure!(
                self.routing == RoutingMode::R2,
                "pr2 chooses the routes r2 replays: give it to an r2 arm"
            );
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<()> {
        self.algorithm.validate()?;
        self.optimizer.validate()?;
        super::teacher::validate_for(self.teacher.as_ref(), &self.algorithm)?;
        if let Some(m) = self.minibatch_prompts {
            ensure!(m >= 1, "minibatch_prompts must be at least 1");
            ensure!(
                self.batch_prompts == self.minibatches * m,
                "batch_prompts = {} but minibatches × minibatch_prompts = {} × {m}: settings \
                 with minibatch_prompts are used resolved (RlConfig::with_sizes sets the batch)",
                self.batch_prompts,
                self.minibatches
            );
        }
        ensure!(
            self.rollout_staleness <= 1000,
            "rollout_staleness = {} keeps that many policy snapshots; at most 1000",
            self.rollout_staleness
        );
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
            Mismatch::RouterNoise { sigma }
            | Mismatch::RouteFlip { sigma }
            | Mismatch::LogitNoise { sigma } => ensure!(
                sigma >= 0.0 && sigma.is_finite(),
                "mismatch sigma must be >= 0"
            ),
            _ => {}
        }
        if let Some(r) = &self.router_shift {
            ensure!(
                r.floor > 0.0 && r.floor <= 1.0,
                "router_shift.floor = {} must be in (0, 1]",
                r.floor
            );
            ensure!(
                self.algorithm.has_ratio(),
                "router_shift rescales importance ratios, and {} has none; use it with grpo, gspo, gspo_token, gmpo, cispo or opd_pg",
                self.algorithm.name()
            );
        }
        self.validate_fixes_and_replay()?;
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
            self.probe_every >= 1 && self.kl_ref_every >= 1,
            "probe_every = {} and kl_ref_every = {} must be at least 1 (1 measures every step)",
            self.probe_every,
            self.kl_ref_every
        );
        ensure!(
            self.kl_ref_every == 1 || self.algorithm.kl_beta() == 0.0,
            "kl_ref_every = {} skips the reference model's forward, but this objective's KL \
             term (beta = {}) needs it every step: drop kl_ref_every or the KL term",
            self.kl_ref_every,
            self.algorithm.kl_beta()
        );
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
