//! What `config.json` says about a run: each cell's resolved configuration (the spec order of
//! the cells and each arm's identity) and the regimes' descriptions.

use crate::experiment::{ArmSpec, CellConfig, Claim, ExperimentSpec, RegimeSpec, Role};
use crate::model::FfnKind;
use crate::rl::{Algorithm, AlgorithmKind, RlConfig, RoutingMode};
use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;

/// What an arm is, independent of its name: the findings pick arms by this.
#[derive(Clone, Debug, PartialEq)]
pub struct Identity {
    pub algorithm: AlgorithmKind,
    pub routing: RoutingMode,
    pub ffn: FfnKind,
    /// The arm sets no knobs of its own: its algorithm's parameters are the defaults and its
    /// `[[arms]]` entry sets no `rl` key but `tis` and no `model` key (without the spec's
    /// arms: it runs the same settings as every peer of its regime).
    pub default_knobs: bool,
    /// The arm weights its tokens by truncated importance sampling against the engine.
    pub tis: bool,
    /// The role its `[[arms]]` entry declares.
    pub role: Option<Role>,
}

/// The run's cells as `config.json` records them; empty when there is none.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub cells: Vec<CellConfig>,
    pub regimes: Vec<RegimeSpec>,
    /// The spec's arms (their own settings and declared roles); empty without a spec.
    pub arms: Vec<ArmSpec>,
    /// The claims the spec declared ([`crate::experiment::DEFAULT_CLAIMS`] when it names none).
    pub claims: Vec<Claim>,
    /// Declared claims described without a test (the spec's `secondary`).
    pub secondary: Vec<Claim>,
    /// The spec declared "reversed" as an outcome of its primary endpoints (two-sided tests).
    pub reversal: bool,
    /// The sweep axis (each regime's value on it is its `x`).
    pub sweep: Option<String>,
    /// Claim (j)'s target (the spec's `compute_target`).
    pub compute_target: crate::experiment::ComputeTarget,
    /// Per frame, the columns `driftlab slim` dropped from this folder (config.json's `slim`).
    pub slimmed: std::collections::BTreeMap<String, Vec<String>>,
    /// Per frame, the arms whose rows the committed form keeps (config.json's `rows_kept`,
    /// written where a folder's frame keeps only some arms' rows to fit the repository; the
    /// other arms' cells are then absent from that frame by design, not by a failed write).
    pub rows_kept: std::collections::BTreeMap<String, Vec<String>>,
    /// The figure folders under `plots/` the committed form keeps (config.json's `plots_kept`,
    /// written by `slim --plots-kept`); `None`: all of them. The report links only these and
    /// names the others' figures as drawn by `driftlab report`.
    pub plots_kept: Option<Vec<String>>,
    /// The canonical indices in `cells` of the cells this folder ran (config.json's `ran`: a
    /// shard's own; every cell in a whole or merged run); `None` when not recorded.
    pub ran: Option<Vec<usize>>,
    /// The build the run's binary came from (config.json's `git_commit`), where recorded.
    pub git_commit: Option<String>,
    /// Whether the folder holds a `config.json` (else every other field is the default).
    pub found: bool,
}

impl Default for RunInfo {
    fn default() -> Self {
        RunInfo {
            cells: Vec::new(),
            regimes: Vec::new(),
            arms: Vec::new(),
            claims: Claim::of_letters(crate::experiment::DEFAULT_CLAIMS),
            secondary: Vec::new(),
            reversal: false,
            sweep: None,
            compute_target: Default::default(),
            slimmed: Default::default(),
            rows_kept: Default::default(),
            plots_kept: None,
            ran: None,
            git_commit: None,
            found: false,
        }
    }
}

impl RunInfo {
    /// Read `dir/config.json`. Runs written before cells were recorded there hold only the
    /// spec; their cells are resolved from it (the same resolution the runner does). A folder
    /// without the file reads as the defaults; a file that is not valid JSON, or whose spec
    /// does not parse, is an error naming the file (never silently the defaults).
    pub fn load(dir: &Path) -> Result<RunInfo> {
        let path = dir.join("config.json");
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(RunInfo::default()),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let v: Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "{} is not valid JSON (corrupt or truncated?)",
                path.display()
            )
        })?;
        let mut spec_json = v["spec"].clone();
        // Documented but never read by any run; dropped from the spec since.
        if let Some(o) = spec_json.as_object_mut() {
            o.remove("target_reward");
        }
        let spec: Option<ExperimentSpec> = if spec_json.is_null() {
            None
        } else {
            Some(
                serde_json::from_value(spec_json)
                    .with_context(|| format!("the spec in {} does not parse", path.display()))?,
            )
        };
        let cells = match v.get("cells").or_else(|| v.get("cell_groups")) {
            Some(_) => serde_json::from_value::<Vec<CellConfig>>(
                crate::experiment::cell_groups::cells_value(&v),
            )
            .with_context(|| format!("the cells in {} do not parse", path.display()))?,
            None => match &spec {
                Some(s) => s.resolve("")?,
                None => Vec::new(),
            },
        };
        let slimmed = record(&v, "slim", &path)?.unwrap_or_default();
        let rows_kept = record(&v, "rows_kept", &path)?.unwrap_or_default();
        let plots_kept = record(&v, "plots_kept", &path)?;
        let ran = record(&v, "ran", &path)?;
        let git_commit = v
            .get("git_commit")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(spec) = spec else {
            return Ok(RunInfo {
                cells,
                slimmed,
                rows_kept,
                plots_kept,
                ran,
                git_commit,
                found: true,
                ..RunInfo::default()
            });
        };
        Ok(RunInfo {
            cells,
            claims: Claim::of_letters(
                spec.claims
                    .as_deref()
                    .unwrap_or(crate::experiment::DEFAULT_CLAIMS),
            ),
            secondary: Claim::of_letters(&spec.secondary),
            reversal: spec.reversal,
            sweep: spec.sweep,
            compute_target: spec.compute_target,
            regimes: spec.regimes,
            arms: spec.arms,
            slimmed,
            rows_kept,
            plots_kept,
            ran,
            git_commit,
            found: true,
        })
    }

    /// The cells this folder ran: `cells` at the indices of `ran` (all of them when the
    /// folder does not record which).
    pub fn ran_cells(&self) -> Vec<&CellConfig> {
        match &self.ran {
            Some(ran) => ran.iter().filter_map(|&i| self.cells.get(i)).collect(),
            None => self.cells.iter().collect(),
        }
    }

    /// The spec's regime of this name.
    pub fn regime(&self, name: &str) -> Option<&RegimeSpec> {
        self.regimes.iter().find(|r| r.name == name)
    }

    /// (regime, arm) pairs in spec order.
    pub fn order(&self) -> Vec<(String, String)> {
        let mut order: Vec<(String, String)> = Vec::new();
        for c in &self.cells {
            let key = (c.regime.clone(), c.arm.clone());
            if !order.contains(&key) {
                order.push(key);
            }
        }
        order
    }

    /// The identity of `arm` in `regime`, when the run recorded it.
    pub fn identity(&self, regime: &str, arm: &str) -> Option<Identity> {
        let c = self
            .cells
            .iter()
            .find(|c| c.regime == regime && c.arm == arm)?;
        let spec_arm = self.arms.iter().find(|a| a.name == arm);
        let own_knobs = match spec_arm {
            Some(a) => a.rl.keys().any(|k| k != "tis") || !a.model.is_empty(),
            None => {
                let peers: Vec<&CellConfig> =
                    self.cells.iter().filter(|p| p.regime == regime).collect();
                !(peers.iter().all(|p| same_knobs(&p.rl, &c.rl))
                    && peers
                        .iter()
                        .filter(|p| p.model.ffn == c.model.ffn)
                        .all(|p| p.model == c.model))
            }
        };
        Some(Identity {
            algorithm: c.rl.algorithm.kind(),
            routing: c.rl.routing,
            ffn: c.model.ffn,
            default_knobs: c.rl.algorithm == Algorithm::default_of(c.rl.algorithm.kind())
                && !own_knobs,
            tis: c.rl.tis.is_some(),
            role: spec_arm.and_then(|a| a.role),
        })
    }

    /// Markdown table of the regimes: name, overrides, arms, description (empty when the run
    /// names no regimes).
    pub fn regimes_table(&self) -> String {
        if self.regimes.is_empty() {
            return String::new();
        }
        let mut md = String::from(
            "## Regimes\n\n| regime | overrides | arms | what it is |\n|---|---|---|---|\n",
        );
        for r in &self.regimes {
            let v = serde_json::to_value(r).unwrap_or_default();
            let overrides: Vec<String> = v["x"]
                .is_number()
                .then(|| format!("`x = {}`", v["x"]))
                .into_iter()
                .chain(["rl", "model", "task"].iter().flat_map(|t| {
                    v[*t]
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(move |(k, x)| format!("`{t}.{k} = {x}`"))
                }))
                .collect();
            let arms = r.arms.as_ref().map_or("all".into(), |a| a.join(", "));
            let overrides = if overrides.is_empty() {
                "none".into()
            } else {
                overrides.join(", ")
            };
            md.push_str(&format!(
                "| {} | {overrides} | {arms} | {} |\n",
                r.name, r.description
            ));
        }
        md.push('\n');
        md
    }
}

/// Two cells' RL settings equal but for what an arm is compared by.
/// config.json's optional record `key` (absent or null: `None`), parsed, or an error naming it.
fn record<T: serde::de::DeserializeOwned>(v: &Value, key: &str, path: &Path) -> Result<Option<T>> {
    match v.get(key) {
        Some(r) if !r.is_null() => Ok(Some(serde_json::from_value(r.clone()).with_context(
            || format!("the '{key}' record of {} does not parse", path.display()),
        )?)),
        _ => Ok(None),
    }
}

fn same_knobs(a: &RlConfig, b: &RlConfig) -> bool {
    let strip = |r: &RlConfig| RlConfig {
        algorithm: Algorithm::default_of(AlgorithmKind::Grpo),
        routing: RoutingMode::Native,
        drift_injection: None,
        ..r.clone()
    };
    strip(a) == strip(b)
}

#[cfg(test)]
mod load_tests {
    use super::RunInfo;

    /// A corrupt or truncated `config.json` is an error naming the file, never the defaults;
    /// a folder without one reads as the defaults.
    #[test]
    fn a_corrupt_config_json_is_an_error_naming_it() {
        let dir = std::env::temp_dir().join(format!("driftlab-runinfo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(RunInfo::load(&dir).unwrap().cells.is_empty());
        for bad in [
            "{\"spec\": {\"name\": \"x\"",
            "not json",
            "{\"spec\": {\"name\": 3}}",
        ] {
            std::fs::write(dir.join("config.json"), bad).unwrap();
            let e = format!("{:#}", RunInfo::load(&dir).unwrap_err());
            assert!(e.contains("config.json"), "{bad}: {e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
