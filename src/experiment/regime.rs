//! Regimes: named blocks of overrides on an experiment's shared settings, and the reading of
//! regime keys that folders written by older builds still carry.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A named block of overrides on the shared settings (DESIGN §6, §9): every arm runs in every
/// regime, so results can be stated per regime ("in the natural regime …; with 10% injected
/// drift …"). An `[rl]` key is overridden one way, in the regime's `rl` table
/// (`rl = { minibatches = 2, drift_injection = { kind = "target_expert_frac", target = 0.1 } }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegimeSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The `[rl]` keys this regime sets (e.g. `rl = { old_logp = "rollout" }`), applied after
    /// the spec's `[rl]` and before the arm's own `rl`.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub rl: Map<String, Value>,
    /// Model keys this regime sets (e.g. `model = { n_layers = 8 }`), applied after the spec's
    /// `[model]` and before the arm's own `model`; a depth sweep at fixed width is one regime
    /// per depth.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub model: Map<String, Value>,
    /// Task keys this regime sets (e.g. `task = { max_len = 48 }`), applied after `[task]`:
    /// a length axis is one regime per length (each with its own cold start).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub task: Map<String, Value>,
    /// Cold-start keys this regime sets (e.g. `coldstart = { max_steps = 500 }`), applied after
    /// `[coldstart]`: a long-response column whose cold start cannot reach the target accuracy
    /// in the spec's budget gets its own (the cache key holds it, so each budget has its own
    /// checkpoint).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub coldstart: Map<String, Value>,
    /// Only these arms run in this regime (default: every arm), e.g. a regime that exists for
    /// one comparison need not repeat the others.
    pub arms: Option<Vec<String>>,
    /// This regime's seeds (default: the spec's `seeds`): a column of the stability map whose
    /// paired differences are noisier runs more seeds than the others. A regime with a
    /// `control` runs only seeds its control runs (each pair needs both cells). `--seeds` and
    /// `--quick` replace every regime's list with theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<u64>>,
    /// The regime this one is compared against, seed by seed and arm by arm (the stability
    /// map's no-drift control with the same other settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<String>,
    /// Where this regime sits in the stability map: its row and column labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<MapAt>,
    /// This regime's value on the spec's `sweep` axis (e.g. 4 for N = 4); required of every
    /// regime when the spec names a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<f64>,
    /// Held out of claim (o)'s fit: the fit over the other regimes predicts this one's drift,
    /// an out-of-sample check declared with the spec.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holdout: bool,
}

/// A regime's place in the stability map.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MapAt {
    pub row: String,
    pub col: String,
}

impl RegimeSpec {
    /// The regime of a spec that names none: no overrides.
    pub fn default_regime() -> Self {
        RegimeSpec {
            name: "default".into(),
            description: "the spec's own settings".into(),
            rl: Map::new(),
            model: Map::new(),
            task: Map::new(),
            coldstart: Map::new(),
            arms: None,
            seeds: None,
            control: None,
            map: None,
            x: None,
            holdout: false,
        }
    }
}

/// Regime keys of folders written before every `[rl]` override went through the regime's `rl`
/// table: each is moved into that table (where it applied first, so a key the table also sets
/// keeps the table's value). A spec file may not use them (`check_key_levels` in [`super::spec`]
/// says where they go); a recorded `config.json` still reads.
pub(super) const LEGACY_REGIME_RL: &[(&str, Option<&str>)] = &[
    ("drift_injection", None),
    ("mismatch", None),
    ("minibatches", None),
    ("lr", Some("optimizer")),
    ("router_lr_mult", Some("optimizer")),
];

/// A regime table with its legacy keys moved into its `rl` table.
fn fold_legacy_regime_keys(regime: &mut Map<String, Value>) {
    for (key, under) in LEGACY_REGIME_RL {
        let Some(v) = regime.remove(*key) else {
            continue;
        };
        if v.is_null() {
            continue;
        }
        let rl = regime
            .entry("rl")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(mut table) = rl.as_object_mut() else {
            continue;
        };
        if let Some(u) = under {
            let inner = table.entry(*u).or_insert_with(|| Value::Object(Map::new()));
            let Some(t) = inner.as_object_mut() else {
                continue;
            };
            table = t;
        }
        table.entry(*key).or_insert(v);
    }
}

/// `regimes`, read with [`fold_legacy_regime_keys`] applied to each.
pub(super) fn regimes_with_legacy_keys<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<RegimeSpec>, D::Error> {
    let raw: Vec<Map<String, Value>> = Deserialize::deserialize(d)?;
    raw.into_iter()
        .map(|mut r| {
            fold_legacy_regime_keys(&mut r);
            serde_json::from_value(Value::Object(r)).map_err(serde::de::Error::custom)
        })
        .collect()
}
