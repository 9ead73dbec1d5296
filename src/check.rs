//! `driftlab check`: run the small deterministic `check` experiment and compare its stability
//! metrics with the committed baseline `results/baselines/check.json` within stated tolerances.

use crate::experiment::{ExperimentSpec, RunOptions, run_experiment};
use crate::report::{ArmSummary, load_frames, summarize};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// A metric passes when `|new − base| ≤ abs + rel·|base|`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
}

/// The metrics the check guards, with their tolerances. The run is deterministic on one machine
/// kind, so the tolerances only absorb float differences between CPUs and library builds.
pub fn tolerances() -> BTreeMap<String, Tolerance> {
    let t = |abs, rel| Tolerance { abs, rel };
    [
        ("final_reward", t(0.02, 0.0)),
        ("drift_expert_frac", t(1e-4, 0.05)),
        ("drift_since_rollout_frac", t(1e-4, 0.05)),
        ("clip_frac_tok", t(1e-3, 0.05)),
        ("ratio_tok_var", t(1e-6, 0.05)),
        ("ratio_seq_var", t(1e-7, 0.05)),
        ("mismatch_kl_k3", t(1e-6, 0.05)),
        ("mismatch_route_frac", t(1e-3, 0.05)),
        ("collapse_cells", t(0.0, 0.0)),
        ("warning_cells", t(0.0, 0.0)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub experiment: String,
    pub tolerances: BTreeMap<String, Tolerance>,
    /// arm → metric → value (NaN-free; a metric that does not apply is absent).
    pub arms: BTreeMap<String, BTreeMap<String, f64>>,
}

fn metrics(a: &ArmSummary) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        if v.is_finite() {
            m.insert(k.to_string(), v);
        }
    };
    put("final_reward", a.final_reward.mean);
    put("drift_expert_frac", a.drift_expert_frac.mean);
    put("drift_since_rollout_frac", a.drift_since_rollout_frac.mean);
    put("clip_frac_tok", a.clip_frac_tok.mean);
    put("ratio_tok_var", a.ratio_tok_var.mean);
    put("ratio_seq_var", a.ratio_seq_var.mean);
    put("mismatch_kl_k3", a.mismatch_kl_k3.mean);
    put("mismatch_route_frac", a.mismatch_route_frac.mean);
    put("collapse_cells", a.collapsed_cells as f64);
    put("warning_cells", a.warned_cells as f64);
    m
}

/// One compared value.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub arm: String,
    pub metric: String,
    pub baseline: Option<f64>,
    pub current: Option<f64>,
    pub allowed: f64,
    pub ok: bool,
}

/// Compare current per-arm metrics with a baseline; every baseline value must be matched.
pub fn compare(base: &Baseline, current: &BTreeMap<String, BTreeMap<String, f64>>) -> Vec<Row> {
    let mut rows = Vec::new();
    let arms: std::collections::BTreeSet<&String> =
        base.arms.keys().chain(current.keys()).collect();
    for arm in arms {
        let (b, c) = (base.arms.get(arm), current.get(arm));
        let keys: std::collections::BTreeSet<&String> = b
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(c.into_iter().flat_map(|m| m.keys()))
            .collect();
        for k in keys {
            let bv = b.and_then(|m| m.get(k)).copied();
            let cv = c.and_then(|m| m.get(k)).copied();
            let tol = base
                .tolerances
                .get(k)
                .copied()
                .unwrap_or(Tolerance { abs: 0.0, rel: 0.0 });
            let allowed = tol.abs + tol.rel * bv.unwrap_or(0.0).abs();
            let ok = matches!((bv, cv), (Some(x), Some(y)) if (x - y).abs() <= allowed);
            rows.push(Row {
                arm: arm.clone(),
                metric: k.clone(),
                baseline: bv,
                current: cv,
                allowed,
                ok,
            });
        }
    }
    rows
}

/// A readable table of the rows that failed (or all rows with `all`).
pub fn table(rows: &[Row], all: bool) -> String {
    let f = |v: Option<f64>| v.map_or("missing".to_string(), |x| format!("{x:.6e}"));
    let mut s = format!(
        "{:<10} {:<26} {:>14} {:>14} {:>12} {:>10}  status\n",
        "arm", "metric", "baseline", "current", "moved", "allowed"
    );
    for r in rows.iter().filter(|r| all || !r.ok) {
        let moved = match (r.baseline, r.current) {
            (Some(a), Some(b)) => format!("{:+.2e}", b - a),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "{:<10} {:<26} {:>14} {:>14} {:>12} {:>10.1e}  {}",
            r.arm,
            r.metric,
            f(r.baseline),
            f(r.current),
            moved,
            r.allowed,
            if r.ok { "ok" } else { "REGRESSED" }
        );
    }
    s
}

/// Per arm, per metric: the value the check compares.
pub type ArmMetrics = BTreeMap<String, BTreeMap<String, f64>>;

/// Run the check experiment into `out` and return per-arm metrics and summaries.
pub fn measure(spec: &ExperimentSpec, opts: &RunOptions) -> Result<(ArmMetrics, Vec<ArmSummary>)> {
    run_experiment(spec, opts)?;
    let sums = summarize(&load_frames(&opts.out)?)?;
    Ok((
        sums.iter().map(|a| (a.arm.clone(), metrics(a))).collect(),
        sums,
    ))
}

/// Compare with (or, with `update`, rewrite) the baseline file. Errors when anything regressed.
pub fn check(
    spec: &ExperimentSpec,
    opts: &RunOptions,
    baseline: &Path,
    update: bool,
) -> Result<String> {
    let (current, _) = measure(spec, opts)?;
    if update {
        let b = Baseline {
            experiment: spec.name.clone(),
            tolerances: tolerances(),
            arms: current,
        };
        if let Some(dir) = baseline.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::io::write_json(baseline, &b)?;
        return Ok(format!("baseline rewritten: {}", baseline.display()));
    }
    let text = std::fs::read_to_string(baseline).with_context(|| {
        format!(
            "reading baseline {} (create it with `driftlab check --update`)",
            baseline.display()
        )
    })?;
    let base: Baseline = serde_json::from_str(&text)
        .with_context(|| format!("parsing baseline {}", baseline.display()))?;
    let rows = compare(&base, &current);
    if rows.iter().any(|r| !r.ok) {
        bail!(
            "stability metrics moved beyond their tolerances:\n{}",
            table(&rows, false)
        );
    }
    Ok(format!(
        "check passed: {} values within tolerance\n{}",
        rows.len(),
        table(&rows, true)
    ))
}
