//! Experiment specs: `experiments/<name>.toml` → a validated [`ExperimentSpec`].

use crate::coldstart::ColdStartConfig;
use crate::metrics::collapse::CollapseConfig;
use crate::model::{FfnKind, ModelConfig, PRESETS};
use crate::rl::{Algorithm, DriftInjection, Mismatch, RlConfig, RoutingMode};
use crate::task::{TaskConfig, Tokenizer};
use crate::util::suggest;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One arm: an objective and a routing mode (plus an optional dense FFN for the control).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmSpec {
    pub name: String,
    pub algorithm: Algorithm,
    #[serde(default)]
    pub routing: RoutingMode,
    /// `dense` for the control arm; default `moe`.
    #[serde(default)]
    pub ffn: FfnKind,
}

/// A named block of overrides on the shared RL settings (DESIGN §6, §9): every arm runs in every
/// regime, so results can be stated per regime ("in the natural regime …; with 10% injected
/// drift …").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegimeSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub drift_injection: Option<DriftInjection>,
    pub mismatch: Option<Mismatch>,
    pub router_lr_mult: Option<f64>,
    pub lr: Option<f64>,
    pub minibatches: Option<usize>,
    /// Only these arms run in this regime (default: every arm), e.g. a regime that exists for
    /// one comparison need not repeat the others.
    pub arms: Option<Vec<String>>,
}

impl RegimeSpec {
    /// The regime of a spec that names none: no overrides.
    pub fn default_regime() -> Self {
        RegimeSpec {
            name: "default".into(),
            description: "the spec's own settings".into(),
            drift_injection: None,
            mismatch: None,
            router_lr_mult: None,
            lr: None,
            minibatches: None,
            arms: None,
        }
    }

    /// `rl` with this regime's overrides applied.
    pub fn apply(&self, rl: &RlConfig) -> RlConfig {
        let mut rl = rl.clone();
        if let Some(d) = self.drift_injection {
            rl.drift_injection = Some(d);
        }
        if let Some(m) = self.mismatch {
            rl.mismatch = m;
        }
        if let Some(x) = self.router_lr_mult {
            rl.optimizer.router_lr_mult = x;
        }
        if let Some(x) = self.lr {
            rl.optimizer.lr = x;
        }
        if let Some(n) = self.minibatches {
            rl.minibatches = n;
        }
        rl
    }
}

/// A named experiment: model, task, RL settings shared by all arms, the arms, the seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    pub name: String,
    pub description: String,
    #[serde(default = "default_preset")]
    pub preset: String,
    #[serde(default)]
    pub task: TaskConfig,
    pub seeds: Vec<u64>,
    pub steps: usize,
    /// Greedy eval accuracy every this many steps (and at the first and last step).
    #[serde(default = "default_eval_every")]
    pub eval_every: usize,
    /// Frames are rewritten on disk every this many steps of a cell.
    #[serde(default = "default_flush_every")]
    pub flush_every: usize,
    /// Reward (EMA 0.9) whose first crossing is reported as `steps_to_target`.
    #[serde(default = "default_target_reward")]
    pub target_reward: f64,
    #[serde(default)]
    pub rl: RlConfig,
    #[serde(default)]
    pub coldstart: ColdStartConfig,
    #[serde(default)]
    pub collapse: CollapseConfig,
    pub arms: Vec<ArmSpec>,
    /// Named override blocks; none = one regime, `default`.
    #[serde(default)]
    pub regimes: Vec<RegimeSpec>,
}

fn default_preset() -> String {
    "toy".into()
}
fn default_eval_every() -> usize {
    10
}
fn default_flush_every() -> usize {
    5
}
fn default_target_reward() -> f64 {
    0.5
}

impl ExperimentSpec {
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let spec: ExperimentSpec =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        spec.validate()
            .with_context(|| format!("{origin}: invalid experiment"))?;
        Ok(spec)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Model configuration of an arm.
    pub fn model_config(&self, arm: &ArmSpec) -> Result<ModelConfig> {
        let mut cfg = ModelConfig::preset(&self.preset, Tokenizer.vocab_size())?;
        cfg.ffn = arm.ffn;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if !PRESETS.contains(&self.preset.as_str()) {
            bail!(
                "key 'preset': unknown preset '{}'; allowed: {}{}",
                self.preset,
                PRESETS.join(", "),
                suggest(&self.preset, PRESETS)
            );
        }
        self.task.validate().context("key 'task'")?;
        self.rl.validate().context("key 'rl'")?;
        self.coldstart.validate().context("key 'coldstart'")?;
        if self.seeds.is_empty() {
            bail!("key 'seeds': at least one seed is needed");
        }
        if self.steps == 0 {
            bail!("key 'steps': must be at least 1");
        }
        if self.eval_every == 0 || self.flush_every == 0 {
            bail!("keys 'eval_every' and 'flush_every' must be at least 1");
        }
        if self.arms.is_empty() {
            bail!("key 'arms': at least one [[arms]] entry is needed");
        }
        let mut regime_names = std::collections::HashSet::new();
        for r in &self.regimes {
            if !regime_names.insert(r.name.as_str()) {
                bail!("key 'regimes': regime name '{}' appears twice", r.name);
            }
            r.apply(&self.rl)
                .validate()
                .with_context(|| format!("regime '{}'", r.name))?;
            let known: Vec<&str> = self.arms.iter().map(|a| a.name.as_str()).collect();
            for n in r.arms.iter().flatten() {
                if !known.contains(&n.as_str()) {
                    bail!(
                        "regime '{}', key 'arms': unknown arm '{n}'; allowed: {}{}",
                        r.name,
                        known.join(", "),
                        suggest(n, &known)
                    );
                }
            }
        }
        let mut names = std::collections::HashSet::new();
        for a in &self.arms {
            if !names.insert(a.name.as_str()) {
                bail!("key 'arms': arm name '{}' appears twice", a.name);
            }
            a.algorithm
                .validate()
                .with_context(|| format!("arm '{}'", a.name))?;
            if a.ffn == FfnKind::Dense && a.routing != RoutingMode::Native {
                bail!(
                    "arm '{}': a dense arm has no router, so routing must be 'native'",
                    a.name
                );
            }
        }
        Ok(())
    }

    /// The regimes to run (the implicit `default` when the spec names none).
    pub fn regimes(&self) -> Vec<RegimeSpec> {
        if self.regimes.is_empty() {
            vec![RegimeSpec::default_regime()]
        } else {
            self.regimes.clone()
        }
    }

    /// Keep only the named regimes; unknown names are errors with a suggestion.
    pub fn select_regimes(&mut self, names: &[String]) -> Result<()> {
        let all = self.regimes();
        let known: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
        for n in names {
            if !known.contains(&n.as_str()) {
                bail!(
                    "unknown regime '{n}' in experiment '{}'; allowed: {}{}",
                    self.name,
                    known.join(", "),
                    suggest(n, &known)
                );
            }
        }
        self.regimes = all
            .into_iter()
            .filter(|r| names.contains(&r.name))
            .collect();
        Ok(())
    }

    /// Keep only the named arms; unknown names are errors with a suggestion.
    pub fn select_arms(&mut self, names: &[String]) -> Result<()> {
        let known: Vec<&str> = self.arms.iter().map(|a| a.name.as_str()).collect();
        for n in names {
            if !known.contains(&n.as_str()) {
                bail!(
                    "unknown arm '{n}' in experiment '{}'; allowed: {}{}",
                    self.name,
                    known.join(", "),
                    suggest(n, &known)
                );
            }
        }
        self.arms.retain(|a| names.contains(&a.name));
        for r in &mut self.regimes {
            if let Some(list) = &mut r.arms {
                list.retain(|a| names.contains(a));
            }
        }
        Ok(())
    }

    /// Every (regime, arm, seed) cell of the run, regime-major, honouring each regime's arms.
    pub fn cells(&self) -> Vec<(RegimeSpec, ArmSpec, u64)> {
        let mut cells = Vec::new();
        for r in self.regimes() {
            for a in &self.arms {
                if r.arms.as_ref().is_some_and(|l| !l.contains(&a.name)) {
                    continue;
                }
                for &s in &self.seeds {
                    cells.push((r.clone(), a.clone(), s));
                }
            }
        }
        cells
    }
}
