//! One resolved configuration per cell: spec + regime + arm + seed, merged and validated once.
//! The runner, the trainer and `config.json` read only this, so what a cell ran is what is
//! recorded.
//!
//! Precedence, later wins: the preset, the spec's `[model]`, the regime's `model`, the arm's
//! `ffn` and `model`; the spec's `[rl]`, the regime's `rl`, the arm's `rl`, then the arm's
//! `algorithm` and `routing`. Model tables may spell `n_layers`, `n_experts` and `n_heads` as
//! `layers`, `experts` and `heads`. `total_steps` is the spec's
//! `steps`. A dense model has no router, so router-logit drift injection is switched off for
//! it (its cells would repeat the natural ones), and its `router` settings are reset to the
//! defaults (so it shares the cold start of a softmax spec's dense control).

use super::spec::{ArmSpec, ExperimentSpec, RegimeSpec};
use crate::coldstart::ColdStartConfig;
use crate::metrics::collapse::CollapseConfig;
use crate::metrics::rows::CellId;
use crate::model::{ModelConfig, Preset, RouterKind};
use crate::rl::RlConfig;
use crate::task::{TaskConfig, Tokenizer};
use crate::util::finite::ensure_finite;
use anyhow::{Context, Result, anyhow};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Everything one cell runs with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CellConfig {
    pub experiment: String,
    pub regime: String,
    pub arm: String,
    pub seed: u64,
    pub steps: usize,
    pub eval_every: usize,
    pub flush_every: usize,
    pub preset: Preset,
    pub model: ModelConfig,
    pub task: TaskConfig,
    pub coldstart: ColdStartConfig,
    /// Incl. the arm's algorithm and routing mode.
    pub rl: RlConfig,
    pub collapse: CollapseConfig,
    /// The `--device` the cell ran on.
    pub device: String,
}

impl CellConfig {
    /// The identity columns of this cell's rows.
    pub fn id(&self) -> CellId {
        CellId {
            experiment: self.experiment.clone(),
            regime: self.regime.clone(),
            arm: self.arm.clone(),
            algorithm: self.rl.algorithm.kind(),
            routing: self.rl.routing,
            ffn: self.model.ffn,
            old_logp: self.rl.old_logp,
            staleness: self.rl.rollout_staleness,
            n_layers: self.model.n_layers,
            router: self.model.router,
            router_shift: self.rl.router_shift.as_ref().map(|r| r.floor),
            seed: self.seed,
        }
    }

    /// Key of the cached cold start this cell starts from (shared by every cell with the same
    /// model, task, cold-start settings and seed).
    pub fn coldstart_key(&self) -> String {
        crate::coldstart::cache_key(&self.model, &self.task, &self.coldstart, self.seed)
    }
}

/// `base` with the keys of `over` set on it (tables merge key by key; a table with a `kind`
/// tag, such as `mismatch = { kind = "bf16" }`, replaces the old value whole), deserialised
/// again, so an override gets the same checks as the table it overrides.
fn overlay<T: Clone + Serialize + DeserializeOwned>(
    base: &T,
    over: &Map<String, Value>,
) -> Result<T> {
    if over.is_empty() {
        return Ok(base.clone());
    }
    fn merge(v: &mut Map<String, Value>, over: &Map<String, Value>) {
        for (k, x) in over {
            match (v.get_mut(k), x) {
                (Some(Value::Object(old)), Value::Object(o)) if !o.contains_key("kind") => {
                    merge(old, o)
                }
                _ => {
                    v.insert(k.clone(), x.clone());
                }
            }
        }
    }
    let Value::Object(mut v) = serde_json::to_value(base)? else {
        return Err(anyhow!("overrides apply to tables only"));
    };
    merge(&mut v, over);
    serde_json::from_value(Value::Object(v)).map_err(|e| anyhow!("{e}"))
}

/// `rl` with an override table set on it. Of `batch_prompts` and `minibatch_prompts`, the one
/// set last wins: a table that sets the batch alone unsets the minibatch size.
fn rl_layer(rl: &RlConfig, over: &Map<String, Value>) -> Result<RlConfig> {
    let mut out: RlConfig = overlay(rl, over)?;
    if over.contains_key("batch_prompts") && !over.contains_key("minibatch_prompts") {
        out.minibatch_prompts = None;
    }
    Ok(out)
}

/// Short spellings of model keys, as papers write them.
const MODEL_ALIASES: &[(&str, &str)] = &[
    ("layers", "n_layers"),
    ("experts", "n_experts"),
    ("heads", "n_heads"),
];

/// A model override table with its short spellings replaced by the field names; a key given
/// under both spellings is an error.
fn model_keys(over: &Map<String, Value>) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (k, v) in over {
        let long = MODEL_ALIASES
            .iter()
            .find(|(short, _)| short == k)
            .map_or(k.as_str(), |(_, long)| long);
        if out.insert(long.to_string(), v.clone()).is_some() {
            return Err(anyhow!(
                "model key '{long}' is given twice (as '{long}' and by its short name)"
            ));
        }
    }
    Ok(out)
}

impl ExperimentSpec {
    /// The model of `arm` in `regime`: preset, then the spec's `[model]`, the regime's
    /// `model`, the arm's `ffn` and `model`.
    fn model_of(&self, regime: &RegimeSpec, arm: &ArmSpec) -> Result<ModelConfig> {
        let preset = ModelConfig::preset(self.preset, Tokenizer.vocab_size())?;
        let mut m: ModelConfig =
            overlay(&preset, &model_keys(&self.model)?).context("key 'model'")?;
        m = overlay(&m, &model_keys(&regime.model)?).context("key 'model' of the regime")?;
        m.ffn = arm.ffn;
        let mut m: ModelConfig =
            overlay(&m, &model_keys(&arm.model)?).context("key 'model' of the arm")?;
        if !m.is_moe() {
            // No router: a dense control of a sigmoid_bias spec is the same dense model.
            m.router = RouterKind::default();
            m.bias_update_speed = crate::model::config::DEFAULT_BIAS_UPDATE_SPEED;
        }
        m.validate()?;
        Ok(m)
    }

    /// The RL settings of `arm` in `regime` (see the module docs for the order).
    fn rl_of(&self, regime: &RegimeSpec, arm: &ArmSpec, model: &ModelConfig) -> Result<RlConfig> {
        let rl = rl_layer(&self.rl, &regime.rl).context("key 'rl' of the regime")?;
        let mut rl = rl_layer(&rl, &arm.rl).context("key 'rl'")?.with_sizes();
        rl.algorithm = arm.algorithm.clone();
        rl.routing = arm.routing;
        rl.total_steps = self.steps;
        if !model.is_moe() {
            rl.drift_injection = None;
        }
        rl.validate().context("key 'rl'")?;
        Ok(rl)
    }

    /// Every cell of the run, in the spec's canonical order (regime-major, then arm, then
    /// seed), each resolved and validated; `device` is recorded in each.
    pub fn resolve(&self, device: &str) -> Result<Vec<CellConfig>> {
        // A spec built in code holds its floats as typed fields: check them before any range
        // check reads them (a NaN fails every comparison and would be reported as a range).
        ensure_finite(self, "")?;
        self.task.validate().context("key 'task'")?;
        self.collapse.validate().context("key 'collapse'")?;
        let spec_coldstart: ColdStartConfig =
            overlay(&ColdStartConfig::for_preset(self.preset), &self.coldstart)
                .context("key 'coldstart'")?;
        spec_coldstart.validate().context("key 'coldstart'")?;
        let mut out = Vec::new();
        for (regime, arm, seed) in self.cells() {
            let at = || format!("regime '{}', arm '{}'", regime.name, arm.name);
            let task: TaskConfig = overlay(&self.task, &regime.task)
                .context("key 'task' of the regime")
                .with_context(at)?;
            task.validate()
                .context("key 'task' of the regime")
                .with_context(at)?;
            let coldstart: ColdStartConfig = overlay(&spec_coldstart, &regime.coldstart)
                .context("key 'coldstart' of the regime")
                .with_context(at)?;
            coldstart
                .validate()
                .context("key 'coldstart' of the regime")
                .with_context(at)?;
            let model = self.model_of(&regime, &arm).with_context(at)?;
            task.check_fits_seq_len(model.max_seq_len)
                .with_context(at)?;
            let rl = self.rl_of(&regime, &arm, &model).with_context(at)?;
            let cell = CellConfig {
                experiment: self.name.clone(),
                regime: regime.name.clone(),
                arm: arm.name.clone(),
                seed,
                steps: self.steps,
                eval_every: self.eval_every,
                flush_every: self.flush_every,
                preset: self.preset,
                model,
                task,
                coldstart,
                rl,
                collapse: self.collapse.clone(),
                device: device.into(),
            };
            // What `config.json` records must read back: JSON has no NaN or infinity.
            ensure_finite(&cell, "").with_context(at)?;
            out.push(cell);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rl::Mismatch;

    #[test]
    fn overlays_merge_tables_and_replace_tagged_ones() {
        let base = RlConfig {
            mismatch: Mismatch::RouterNoise { sigma: 0.1 },
            ..RlConfig::default()
        };
        let over: Map<String, Value> = serde_json::from_str(
            r#"{"mismatch": {"kind": "bf16"}, "optimizer": {"lr": 0.5}, "minibatches": 2}"#,
        )
        .unwrap();
        let rl: RlConfig = overlay(&base, &over).unwrap();
        assert_eq!(rl.mismatch, Mismatch::Bf16);
        assert_eq!(rl.optimizer.lr, 0.5);
        assert_eq!(rl.optimizer.weight_decay, base.optimizer.weight_decay);
        assert_eq!(rl.minibatches, 2);
        let bad: Map<String, Value> = serde_json::from_str(r#"{"minibatchs": 2}"#).unwrap();
        let e = overlay(&base, &bad).unwrap_err().to_string();
        assert!(e.contains("minibatchs") && e.contains("minibatches"), "{e}");
        assert_eq!(overlay(&base, &Map::new()).unwrap(), base);
    }
}
