//! Experiment specs: `experiments/<name>.toml` → a validated [`ExperimentSpec`]. What each
//! cell runs is resolved from it once, in [`super::cell`].

use crate::metrics::collapse::CollapseConfig;
use crate::model::{FfnKind, Preset};
use crate::rl::{Algorithm, RlConfig, RoutingMode};
use crate::task::TaskConfig;
use crate::util::names::unknown;
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::path::Path;

use super::Role;
use super::regime::LEGACY_REGIME_RL;
pub use super::regime::{MapAt, RegimeSpec};

/// One arm: an objective and a routing mode (plus an optional dense FFN for the control), and
/// optionally its own values of any `[rl]` or `[model]` key.
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
    /// The part the arm plays in the report's claims (e.g. `role = "grpo_r3"`). Needed only
    /// for an arm that sets knobs of its own (algorithm parameters, `rl` keys beyond `tis`,
    /// `model` keys): the report never takes such an arm for a role it does not declare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// `[rl]` keys this arm sets for itself (e.g. `rl = { tis = { cap = 2.0 } }`), applied
    /// after the spec's `[rl]` and the regime's overrides, validated like `[rl]`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub rl: Map<String, Value>,
    /// Model keys this arm sets for itself (e.g. `model = { n_layers = 4 }`), applied after the
    /// preset and the spec's `[model]`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model: Map<String, Value>,
}

impl ArmSpec {
    /// An arm with no overrides.
    pub fn new(name: &str, algorithm: Algorithm, routing: RoutingMode, ffn: FfnKind) -> Self {
        ArmSpec {
            name: name.into(),
            algorithm,
            routing,
            ffn,
            role: None,
            rl: Map::new(),
            model: Map::new(),
        }
    }
}

/// A named experiment: model, task, RL settings shared by all arms, the arms, the seeds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExperimentSpec {
    pub name: String,
    pub description: String,
    #[serde(default = "default_preset")]
    pub preset: Preset,
    /// Model keys set on top of the preset for every arm (`[model] n_layers = 8`).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model: Map<String, Value>,
    #[serde(default)]
    pub task: TaskConfig,
    pub seeds: Vec<u64>,
    pub steps: usize,
    /// Greedy eval accuracy every this many steps (and at the first and last step).
    #[serde(default = "default_eval_every")]
    pub eval_every: usize,
    /// Frames are rewritten on disk every this many steps of a cell, unless the run wrote them
    /// less than `flush_secs` ago.
    #[serde(default = "default_flush_every")]
    pub flush_every: usize,
    /// The least time in seconds between two writes of the frames and `status.json`, in the
    /// middle of a cell or at its end (every write holds the whole run's rows, so short cells
    /// would otherwise spend their time rewriting them); the run's end and a stop always write.
    /// 0 = every `flush_every` steps and every cell's end, whatever the time.
    #[serde(
        default = "default_flush_secs",
        skip_serializing_if = "is_default_flush_secs"
    )]
    pub flush_secs: f64,
    /// RL settings shared by every arm. The keys an arm owns (`algorithm`, `routing`) and the
    /// derived `total_steps` (= `steps`) are rejected here by [`ExperimentSpec::from_toml`].
    #[serde(default)]
    pub rl: RlConfig,
    /// Cold-start keys set on top of the preset's cold-start settings
    /// ([`crate::coldstart::ColdStartConfig::for_preset`]), so that `--preset` brings its own.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub coldstart: Map<String, Value>,
    #[serde(default)]
    pub collapse: CollapseConfig,
    pub arms: Vec<ArmSpec>,
    /// Named override blocks; none = one regime, `default`.
    #[serde(default, deserialize_with = "super::regime::regimes_with_legacy_keys")]
    pub regimes: Vec<RegimeSpec>,
    /// The claims whose endpoints the report tests, by letter ([`CLAIM_LETTERS`]), declared
    /// with the experiment; none = (a)–(f), the flagship's family. Holm's m counts only these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Vec<char>>,
    /// Declared claims whose endpoints are secondary: shown with unadjusted p-values, no
    /// verdict, outside Holm's family (a map's per-cell comparisons, which another
    /// experiment tests).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secondary: Vec<char>,
    /// Declare "reversed" as an outcome of the primary endpoints: each is tested two-sided
    /// (Holm over 2·min of its one-sided p-values, in the same family), and a significant
    /// effect against the claim reads "reversed". Declared before the run, never added after
    /// looking; without it the tests stay one-sided and an effect against the claim reads
    /// "inconclusive".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub reversal: bool,
    /// The regimes are points on one axis of this name (each regime gives its `x`): the report
    /// then draws every arm's endpoints against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep: Option<String>,
    /// The seeds a `--quick` form runs (default: the first of `seeds`). A pre-registered
    /// study declares seeds outside its own here, so that no quick run ever spends the study's
    /// fresh seeds; they must not overlap `seeds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quick_seeds: Option<Vec<u64>>,
    /// Claim (j)'s target ([`super::ComputeTarget`]): `best` (default) or `final_reward`.
    #[serde(default, skip_serializing_if = "super::ComputeTarget::is_best")]
    pub compute_target: super::ComputeTarget,
}

pub use super::claim::{CLAIM_LETTERS, DEFAULT_CLAIMS};

fn default_preset() -> Preset {
    Preset::Toy
}
fn default_eval_every() -> usize {
    10
}
fn default_flush_every() -> usize {
    5
}
fn default_flush_secs() -> f64 {
    30.0
}
fn is_default_flush_secs(x: &f64) -> bool {
    *x == default_flush_secs()
}

/// Keys that belong to each arm, and where a spec file may not set them instead.
const ARM_OWNED: &[&str] = &["algorithm", "routing", "ffn"];

/// Reject keys given at a level that does not own them, naming the key and where it belongs:
/// an arm's `algorithm`, `routing` and `ffn` anywhere but in `[[arms]]`, and `total_steps`,
/// which every cell takes from `steps`.
fn check_key_levels(doc: &toml::Table) -> Result<()> {
    let owned = |table: Option<&toml::Value>, at: &str, keys: &[&str]| -> Result<()> {
        let Some(t) = table.and_then(toml::Value::as_table) else {
            return Ok(());
        };
        if let Some(k) = keys.iter().find(|k| t.contains_key(**k)) {
            bail!(
                "key '{at}{k}' is set by each arm: give it in every [[arms]] entry (`{k} = ...`), not in {}",
                if at.is_empty() {
                    "the top level".to_string()
                } else {
                    format!("[{}]", at.trim_end_matches('.'))
                }
            );
        }
        Ok(())
    };
    let entries = |key: &str| -> &[toml::Value] {
        doc.get(key)
            .and_then(|v| v.as_array())
            .map_or(&[], Vec::as_slice)
    };
    let (regimes, arms) = (entries("regimes"), entries("arms"));
    let root = toml::Value::Table(doc.clone());
    owned(Some(&root), "", ARM_OWNED)?;
    owned(doc.get("rl"), "rl.", ARM_OWNED)?;
    owned(doc.get("model"), "model.", ARM_OWNED)?;
    for r in regimes {
        if let Some((k, under)) = LEGACY_REGIME_RL.iter().find(|(k, _)| r.get(*k).is_some()) {
            let name = r.get("name").and_then(|n| n.as_str()).unwrap_or("?");
            let v = r.get(*k).map(|v| v.to_string()).unwrap_or_default();
            let inner = match under {
                Some(u) => format!("{u} = {{ {k} = {v} }}"),
                None => format!("{k} = {v}"),
            };
            bail!(
                "regime '{name}', key '{k}': a regime sets [rl] keys in its `rl` table: \
                 `rl = {{ {inner} }}`"
            );
        }
        owned(Some(r), "regimes.", ARM_OWNED)?;
        owned(r.get("rl"), "regimes.rl.", ARM_OWNED)?;
        owned(r.get("model"), "regimes.model.", ARM_OWNED)?;
    }
    for a in arms {
        let name = a.get("name").and_then(|n| n.as_str()).unwrap_or("?");
        if let Some(role) = a.get("role") {
            match role.as_str() {
                Some(r) => Role::parse(r).map(|_| ()),
                None => Err(anyhow::anyhow!(
                    "expected a role name, got {role}; allowed: {}",
                    Role::NAMES.join(", ")
                )),
            }
            .with_context(|| format!("arm '{name}', key 'role'"))?;
        }
        for (table, key) in [("rl", "algorithm"), ("rl", "routing"), ("model", "ffn")] {
            if a.get(table).and_then(|t| t.get(key)).is_some() {
                bail!("arm '{name}', key '{table}.{key}': set the arm's own `{key}` key instead");
            }
        }
    }
    // Every `rl` table of the spec: `[rl]`, each regime's, each arm's.
    let rl_tables: Vec<&toml::Value> = std::iter::once(doc.get("rl"))
        .chain(regimes.iter().map(|r| r.get("rl")))
        .chain(arms.iter().map(|a| a.get("rl")))
        .flatten()
        .collect();
    if rl_tables
        .iter()
        .any(|t| t.get("batch_prompts").is_some() && t.get("minibatch_prompts").is_some())
    {
        bail!(
            "keys 'batch_prompts' and 'minibatch_prompts' in one table: give one (fix the batch and let \
             minibatches split it, or fix the minibatch and let minibatches set the batch)"
        );
    }
    if rl_tables.iter().any(|t| t.get("total_steps").is_some()) {
        bail!("key 'rl.total_steps' is derived from the top-level `steps`; set `steps` instead");
    }
    Ok(())
}

/// `Err` naming the first seed `seeds` holds twice: each of its cells would run twice and be
/// counted as two seeds.
fn check_distinct_seeds(seeds: &[u64]) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    if let Some(s) = seeds.iter().find(|s| !seen.insert(**s)) {
        bail!(
            "seed {s} appears twice (every seed must be distinct: a repeated seed would run the same cells twice)"
        );
    }
    Ok(())
}

impl ExperimentSpec {
    /// The spec of a TOML text; `origin` (the file) leads every error.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        let doc: toml::Table =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        // Before anything reads the document: an override table would hold a TOML `nan` as
        // JSON null, which names neither the key nor the value.
        crate::util::finite::ensure_finite(&doc, "")
            .with_context(|| format!("{origin}: invalid experiment"))?;
        check_key_levels(&doc).with_context(|| format!("{origin}: invalid experiment"))?;
        let spec: ExperimentSpec =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{origin}: {e}"))?;
        spec.validate()
            .with_context(|| format!("{origin}: invalid experiment"))?;
        Ok(spec)
    }

    /// The spec of the file at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Checks of the spec itself; every cell's resolved settings are then validated by
    /// resolving them ([`ExperimentSpec::resolve`]: finite floats, ranges, the task's
    /// sequence length against the model's), and each cell's estimated memory is checked
    /// against this machine's (`src/experiment/memory.rs`).
    pub fn validate(&self) -> Result<()> {
        if self.seeds.is_empty() {
            bail!("key 'seeds': at least one seed is needed");
        }
        check_distinct_seeds(&self.seeds).context("key 'seeds'")?;
        if self.steps == 0 {
            bail!("key 'steps': must be at least 1");
        }
        if self.eval_every == 0 || self.flush_every == 0 {
            bail!("keys 'eval_every' and 'flush_every' must be at least 1");
        }
        if !(self.flush_secs.is_finite() && self.flush_secs >= 0.0) {
            bail!(
                "key 'flush_secs': must be a finite number of seconds, at least 0 (got {})",
                self.flush_secs
            );
        }
        if self.arms.is_empty() {
            bail!("key 'arms': at least one [[arms]] entry is needed");
        }
        let mut names = std::collections::HashSet::new();
        for a in &self.arms {
            if !names.insert(a.name.as_str()) {
                bail!("key 'arms': arm name '{}' appears twice", a.name);
            }
            if a.ffn == FfnKind::Dense && a.routing != RoutingMode::Native {
                bail!(
                    "arm '{}': a dense arm has no router, so routing must be 'native'",
                    a.name
                );
            }
        }
        self.validate_figure_keys()?;
        let known: Vec<&str> = self.arms.iter().map(|a| a.name.as_str()).collect();
        let mut regime_names = std::collections::HashSet::new();
        for r in &self.regimes {
            if !regime_names.insert(r.name.as_str()) {
                bail!("key 'regimes': regime name '{}' appears twice", r.name);
            }
            if let Some(seeds) = &r.seeds {
                if seeds.is_empty() {
                    bail!(
                        "regime '{}', key 'seeds': at least one seed is needed",
                        r.name
                    );
                }
                check_distinct_seeds(seeds)
                    .with_context(|| format!("regime '{}', key 'seeds'", r.name))?;
            }
            for n in r.arms.iter().flatten() {
                if !known.contains(&n.as_str()) {
                    bail!(
                        "regime '{}', key 'arms': {}",
                        r.name,
                        unknown("arm", n, &known)
                    );
                }
            }
        }
        for r in &self.regimes {
            let Some(c) = &r.control else { continue };
            let Some(control) = self.regimes.iter().find(|x| &x.name == c) else {
                continue;
            };
            let theirs = self.seeds_of(control);
            if let Some(s) = self.seeds_of(r).iter().find(|s| !theirs.contains(s)) {
                bail!(
                    "regime '{}', key 'seeds': seed {s} is not among the seeds of its control \
                     '{c}', so its cells would have nothing to be paired with",
                    r.name
                );
            }
        }
        let cells = self.resolve("")?;
        // Before any compute: a cell the machine cannot hold would abort on an allocation.
        cells.iter().try_for_each(|c| c.check_fits_machine())?;
        let tis: Vec<(&str, &str, bool)> = (cells.iter())
            .map(|c| (c.arm.as_str(), c.regime.as_str(), c.rl.tis.is_some()))
            .collect();
        self.validate_roles(&tis)
    }

    /// A declared role describes its arm (objective, routing, FFN and, in every cell, TIS:
    /// `tis` holds each cell's arm, regime and whether it runs TIS), and no two arms of one
    /// regime declare the same role.
    fn validate_roles(&self, tis: &[(&str, &str, bool)]) -> Result<()> {
        for a in &self.arms {
            let Some(role) = a.role else { continue };
            for &(_, regime, tis) in tis.iter().filter(|c| c.0 == a.name) {
                if !role.fits(a.algorithm.kind(), a.routing, a.ffn, tis) {
                    bail!(
                        "arm '{}', key 'role': role '{role}' does not describe this arm \
                         ({} with {} routing on the {} FFN, {}; regime '{}')",
                        a.name,
                        a.algorithm.kind(),
                        a.routing,
                        a.ffn.name(),
                        if tis { "with TIS" } else { "without TIS" },
                        regime
                    );
                }
            }
        }
        for r in self.regimes() {
            let mut seen: Vec<(Role, &str)> = Vec::new();
            for a in &self.arms {
                let Some(role) = a.role else { continue };
                if r.arms.as_ref().is_some_and(|l| !l.contains(&a.name)) {
                    continue;
                }
                if let Some((_, other)) = seen.iter().find(|(x, _)| *x == role) {
                    bail!(
                        "arms '{other}' and '{}' both declare role '{role}' in regime '{}': \
                         a role is one arm's",
                        a.name,
                        r.name
                    );
                }
                seen.push((role, &a.name));
            }
        }
        Ok(())
    }

    /// The seeds `regime` runs: its own list, or the spec's.
    pub fn seeds_of<'a>(&'a self, regime: &'a RegimeSpec) -> &'a [u64] {
        regime.seeds.as_deref().unwrap_or(&self.seeds)
    }

    /// Every seed list of the spec (the spec's and each regime's) replaced by `seeds`; a list
    /// with a seed twice (`--seeds 0,0`) is refused by [`ExperimentSpec::validate`].
    pub fn set_seeds(&mut self, seeds: Vec<u64>) {
        for r in &mut self.regimes {
            r.seeds = None;
        }
        self.seeds = seeds;
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
                    "{} (experiment '{}')",
                    unknown("regime", n, &known),
                    self.name
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
                bail!("{} (experiment '{}')", unknown("arm", n, &known), self.name);
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
                for &s in self.seeds_of(&r) {
                    cells.push((r.clone(), a.clone(), s));
                }
            }
        }
        cells
    }
}
