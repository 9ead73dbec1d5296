//! A cold start's settings, its eval accuracy and what it returns.

use crate::model::{Model, Preset};
use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ColdStartConfig {
    /// Step budget.
    pub max_steps: usize,
    pub batch_size: usize,
    pub lr: f64,
    /// Linear warm-up steps.
    pub warmup: usize,
    /// Stop once the sampled (temperature 1) eval accuracy reaches this; > 1 disables.
    pub target_accuracy: f64,
    /// Evaluate every this many steps.
    pub eval_every: usize,
    /// Load-balancing loss coefficient during the cold start.
    pub aux_coef: f64,
    /// A last-bit draw: before training, every initial weight moves by one ulp up or down
    /// (a seeded pattern per draw). Rounding-level changes of the numerics (a new kernel, a
    /// new CPU) act like this; rerunning an experiment with a draw shows which verdicts
    /// survive them. Off (absent from the cache key) by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ulp_jitter: Option<u64>,
    /// The device the cold start trains on (absent: the run's own). `flex` hands every device
    /// the CPU backend's deterministic checkpoint: a cold start trained on wgpu-cpu is not
    /// reproducible run to run (lavapipe's threads do not fix every reduction order, and a
    /// few hundred steps carry the last bits into another model), so the CI regression on
    /// wgpu-cpu starts from flex's. Not part of the cache key: the checkpoint's key carries the
    /// device it was trained on ([`super::device_key`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<crate::device::DeviceChoice>,
}

impl Default for ColdStartConfig {
    fn default() -> Self {
        ColdStartConfig {
            max_steps: 2000,
            batch_size: 64,
            lr: 3e-3,
            warmup: 50,
            target_accuracy: 0.3,
            eval_every: 50,
            aux_coef: 1e-2,
            ulp_jitter: None,
            device: None,
        }
    }
}

impl ColdStartConfig {
    /// The cold-start settings of a preset: the defaults above, except where a preset
    /// reaches the target in fewer steps with others. The 12-layer presets take lr 1e-3
    /// (`driftlab coldstart --preset P --lr X`, sort 4–16): `medium` seed 0 reached a sampled
    /// accuracy of 0.43 after 150 steps at 1e-3, where 3e-3 needed 350 (0.36) and 6e-3 stayed
    /// below 0.05 for 200 steps (batch 32 at 3e-3: 0.07 after 300); seed 1 at 1e-3 0.43
    /// after 150. `deep` reached the target after 150 steps at 1e-3 and 200 at 3e-3 (seed 0),
    /// 150 at both (seed 1).
    pub fn for_preset(preset: Preset) -> Self {
        match preset {
            Preset::Deep | Preset::Medium => ColdStartConfig {
                lr: 1e-3,
                ..ColdStartConfig::default()
            },
            Preset::Tiny | Preset::Toy | Preset::Small => ColdStartConfig::default(),
        }
    }

    /// Reject settings the cold start cannot train with, naming the key and the allowed
    /// range. `max_steps = 0` would hand RL the random initial model; `target_accuracy`
    /// above 1 is allowed (it disables the early stop).
    pub fn validate(&self) -> Result<()> {
        let counts = [
            ("max_steps", self.max_steps),
            ("batch_size", self.batch_size),
            ("eval_every", self.eval_every),
        ];
        for (key, v) in counts {
            ensure!(v >= 1, "coldstart.{key} = {v}: must be at least 1");
        }
        ensure!(
            self.lr.is_finite() && self.lr > 0.0,
            "coldstart.lr = {}: must be a finite number > 0",
            self.lr
        );
        ensure!(
            self.target_accuracy.is_finite() && self.target_accuracy >= 0.0,
            "coldstart.target_accuracy = {}: must be a finite number >= 0 (above 1 disables the early stop)",
            self.target_accuracy
        );
        ensure!(
            self.aux_coef.is_finite() && self.aux_coef >= 0.0,
            "coldstart.aux_coef = {}: must be a finite number >= 0",
            self.aux_coef
        );
        Ok(())
    }
}

/// Eval accuracy of a model on a task's held-out set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct EvalAccuracy {
    /// Exact-match rate with sampling at temperature 1 (what RL starts from).
    pub sampled: f64,
    /// Exact-match rate with greedy decoding.
    pub greedy: f64,
}

#[derive(Clone, Debug)]
pub struct ColdStart {
    pub model: Model,
    pub steps: usize,
    pub accuracy: EvalAccuracy,
    /// Training loss per step (empty when loaded from the cache).
    pub losses: Vec<f32>,
    pub from_cache: bool,
    pub seconds: f64,
    /// The build (commit) that trained it: this binary's for a fresh one, the one its cache
    /// entry records for a cached one (`None` for entries written before builds were recorded).
    /// The cache key does not hold it: a cached cold start from another build is reused, and
    /// the load message says which build trained it.
    pub build: Option<String>,
}

impl ColdStart {
    /// The same checkpoint on `device` (its weights copied there bit for bit).
    pub fn to_device(self, device: &burn::tensor::Device) -> Result<ColdStart> {
        if self.model.device() == *device {
            return Ok(self);
        }
        let cfg = self.model.cfg.clone();
        let w = crate::model::Weights::from_bytes(&cfg, &self.model.weights.to_bytes(), device)?;
        Ok(ColdStart {
            model: Model::new(cfg, w, device),
            ..self
        })
    }
}

/// The commit this binary was built from (see `build.rs`), if known.
pub(super) fn this_build() -> Option<String> {
    let c = env!("DRIFTLAB_BUILD_COMMIT");
    (!c.is_empty()).then(|| c.to_string())
}
