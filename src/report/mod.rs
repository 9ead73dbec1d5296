//! `driftlab report <dir>`: rebuilds the summary, every plot and `report.md` from the Parquet
//! files alone (no training state).

pub mod findings;
pub mod plots;

use crate::metrics::frames::{f64_col, i64_col, read_parquet, str_col, write_csv};
use anyhow::{Context, Result};
use plots::{BarChart, Chart, LineChart, Series, spans_decades};
use polars::prelude::DataFrame;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Two-sided 95% Student-t critical value for `n` samples.
fn t95(n: usize) -> f64 {
    match n {
        0 | 1 => f64::NAN,
        2 => 12.706,
        3 => 4.303,
        4 => 3.182,
        5 => 2.776,
        6 => 2.571,
        7 => 2.447,
        8 => 2.365,
        9 => 2.306,
        10 => 2.262,
        _ => 1.96,
    }
}

/// Mean and 95% CI half-width over seeds.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct MeanCi {
    pub mean: f64,
    pub ci95: f64,
    pub n: usize,
}

pub fn mean_ci(v: &[f64]) -> MeanCi {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = v.len();
    if n == 0 {
        return MeanCi {
            mean: f64::NAN,
            ci95: f64::NAN,
            n,
        };
    }
    let m = v.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        f64::NAN
    };
    MeanCi {
        mean: m,
        ci95: t95(n) * sd / (n as f64).sqrt(),
        n,
    }
}

/// Per-arm summary over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct ArmSummary {
    pub arm: String,
    pub algorithm: String,
    pub routing: String,
    pub seeds: usize,
    /// Mean reward over each cell's last tenth of steps.
    pub final_reward: MeanCi,
    /// Each cell's last greedy eval accuracy.
    pub final_eval: MeanCi,
    /// First step where the reward EMA(0.9) exceeds its step-0 value by 0.1 (cells that never do are left out; `reached` counts those that do).
    pub steps_to_target: MeanCi,
    pub reached: usize,
    pub drift_expert_frac: MeanCi,
    pub drift_since_rollout_frac: MeanCi,
    pub clip_frac_tok: MeanCi,
    pub ratio_tok_var: MeanCi,
    pub ratio_seq_var: MeanCi,
    pub mismatch_kl_k3: MeanCi,
    pub mismatch_route_frac: MeanCi,
    /// Per collapse kind: (cells with at least one event, first step over cells).
    pub collapses: BTreeMap<String, (usize, i64)>,
    /// Cells (seeds) where training broke down: at least one event of a [`COLLAPSE_KINDS`] kind.
    pub collapsed_cells: usize,
    /// Cells with a warning event only (ratio explosion, gradient spike) and no collapse.
    pub warned_cells: usize,
}

/// Event kinds that mean training itself broke down (ratio explosions and gradient spikes are
/// warning signs, reported separately).
pub const COLLAPSE_KINDS: &[&str] = &[
    "reward_collapse",
    "entropy_collapse",
    "non_finite",
    "expert_collapse",
];

/// Rows of a frame grouped as arm → seed → values, arms in first-appearance order.
struct Grouped {
    arms: Vec<String>,
    meta: BTreeMap<String, (String, String)>,
    cells: BTreeMap<(String, i64), Vec<usize>>,
}

/// Distinct values of the `regime` column in order of appearance (runs written before regimes
/// existed have none).
pub fn regimes(df: &DataFrame) -> Vec<String> {
    let mut out = Vec::new();
    for r in str_col(df, "regime").unwrap_or_default() {
        if !out.contains(&r) {
            out.push(r);
        }
    }
    out
}

/// Rows of `df` in one regime.
pub(crate) fn filter_regime(df: &DataFrame, regime: &str) -> Result<DataFrame> {
    let keep: Vec<bool> = str_col(df, "regime")?.iter().map(|r| r == regime).collect();
    let mask: polars::prelude::BooleanChunked = keep.into_iter().map(Some).collect();
    Ok(df.filter(&mask)?)
}

/// Arm labels: `regime/arm` when the run (`multi`) holds several regimes, else the arm name.
/// Decided per run, not per frame: a frame may hold rows of only some regimes (events).
fn arm_labels(df: &DataFrame, multi: bool) -> Result<Vec<String>> {
    let arm = str_col(df, "arm")?;
    match str_col(df, "regime") {
        Ok(reg) if multi => Ok(reg
            .iter()
            .zip(&arm)
            .map(|(r, a)| format!("{r}/{a}"))
            .collect()),
        _ => Ok(arm),
    }
}

/// Whether the run behind `f` holds several regimes.
fn multi_regime(f: &RunFrames) -> bool {
    regimes(&f.steps).len() > 1
}

fn group(df: &DataFrame, multi: bool) -> Result<Grouped> {
    let arm = arm_labels(df, multi)?;
    let alg = str_col(df, "algorithm")?;
    let rt = str_col(df, "routing")?;
    let seed = i64_col(df, "seed")?;
    let mut g = Grouped {
        arms: Vec::new(),
        meta: BTreeMap::new(),
        cells: BTreeMap::new(),
    };
    for i in 0..df.height() {
        if !g.arms.contains(&arm[i]) {
            g.arms.push(arm[i].clone());
            g.meta
                .insert(arm[i].clone(), (alg[i].clone(), rt[i].clone()));
        }
        g.cells
            .entry((arm[i].clone(), seed[i]))
            .or_default()
            .push(i);
    }
    Ok(g)
}

impl Grouped {
    fn seeds(&self, arm: &str) -> Vec<i64> {
        self.cells
            .keys()
            .filter(|(a, _)| a == arm)
            .map(|(_, s)| *s)
            .collect()
    }
}

/// Per arm: mean over seeds of the per-step mean of `col` (and min/max over seeds as a band).
fn per_step_series(df: &DataFrame, g: &Grouped, col: &str) -> Result<Vec<Series>> {
    let v = f64_col(df, col)?;
    let step = i64_col(df, "step")?;
    let mut out = Vec::new();
    for arm in &g.arms {
        let mut by_step: BTreeMap<i64, BTreeMap<i64, (f64, usize)>> = BTreeMap::new();
        for seed in g.seeds(arm) {
            for &i in &g.cells[&(arm.clone(), seed)] {
                if let Some(x) = v[i].filter(|x| x.is_finite()) {
                    let e = by_step
                        .entry(step[i])
                        .or_default()
                        .entry(seed)
                        .or_insert((0.0, 0));
                    e.0 += x;
                    e.1 += 1;
                }
            }
        }
        let mut points = Vec::new();
        let mut band = Vec::new();
        for (s, seeds) in by_step {
            let vals: Vec<f64> = seeds.values().map(|(sum, n)| sum / *n as f64).collect();
            let m = vals.iter().sum::<f64>() / vals.len() as f64;
            points.push((s as f64, m));
            if vals.len() > 1 {
                band.push((
                    s as f64,
                    vals.iter().copied().fold(f64::INFINITY, f64::min),
                    vals.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                ));
            }
        }
        out.push(Series {
            name: arm.clone(),
            points,
            band,
        });
    }
    Ok(out)
}

/// Per seed: mean of `col` over the rows of `arm` (label as in the summary).
pub(crate) fn seed_means(df: &DataFrame, arm: &str, col: &str) -> Result<Vec<f64>> {
    let g = group(df, regimes(df).len() > 1)?;
    if !g.arms.iter().any(|a| a == arm) {
        return Ok(Vec::new());
    }
    cell_means(df, &g, arm, col)
}

/// Per arm, per seed: mean of `col` over all of that cell's rows.
fn cell_means(df: &DataFrame, g: &Grouped, arm: &str, col: &str) -> Result<Vec<f64>> {
    let v = f64_col(df, col)?;
    Ok(g.seeds(arm)
        .iter()
        .map(|s| {
            let xs: Vec<f64> = g.cells[&(arm.to_string(), *s)]
                .iter()
                .filter_map(|&i| v[i])
                .filter(|x| x.is_finite())
                .collect();
            if xs.is_empty() {
                f64::NAN
            } else {
                xs.iter().sum::<f64>() / xs.len() as f64
            }
        })
        .collect())
}

pub struct RunFrames {
    pub steps: DataFrame,
    pub updates: DataFrame,
    pub layers: DataFrame,
    pub events: DataFrame,
}

pub fn load_frames(dir: &Path) -> Result<RunFrames> {
    let order = spec_order(dir);
    let read = |n: &str| {
        sorted_by_cell(
            read_parquet(&dir.join(format!("{n}.parquet")))?,
            order.as_deref(),
        )
    };
    Ok(RunFrames {
        steps: read("steps")?,
        updates: read("updates")?,
        layers: read("layers")?,
        events: read("events")?,
    })
}

/// The run's (regime, arm) pairs in the order of its spec (`config.json`), when readable.
fn spec_order(dir: &Path) -> Option<Vec<(String, String)>> {
    let text = std::fs::read_to_string(dir.join("config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let spec: crate::experiment::ExperimentSpec = serde_json::from_value(v["spec"].clone()).ok()?;
    let mut order: Vec<(String, String)> = Vec::new();
    for (r, a, _) in spec.cells() {
        let key = (r.name, a.name);
        if !order.contains(&key) {
            order.push(key);
        }
    }
    Some(order)
}

/// Rows in a fixed order — cells in spec order (else in order of first appearance), then seed,
/// step, minibatch, layer (those present), stable otherwise — so summaries and reports do not
/// depend on the order in which parallel cells happened to flush.
fn sorted_by_cell(df: DataFrame, order: Option<&[(String, String)]>) -> Result<DataFrame> {
    if df.height() == 0 || df.column("arm").is_err() {
        return Ok(df);
    }
    let arms = str_col(&df, "arm")?;
    let regimes = str_col(&df, "regime").unwrap_or_else(|_| vec![String::new(); arms.len()]);
    let mut ranks: Vec<(String, String)> = order.map(<[_]>::to_vec).unwrap_or_default();
    let rank: Vec<u32> = regimes
        .into_iter()
        .zip(arms)
        .map(|key| {
            let i = ranks.iter().position(|k| *k == key).unwrap_or_else(|| {
                ranks.push(key);
                ranks.len() - 1
            });
            i as u32
        })
        .collect();
    let mut df = df;
    df.with_column(polars::prelude::Column::new("__cell_rank".into(), rank))
        .map_err(|e| anyhow::anyhow!("ranking frame rows: {e}"))?;
    let keys: Vec<&str> = ["__cell_rank", "seed", "step", "minibatch", "layer"]
        .into_iter()
        .filter(|k| df.column(k).is_ok())
        .collect();
    let sorted = df
        .sort(
            keys,
            polars::prelude::SortMultipleOptions::default().with_maintain_order(true),
        )
        .map_err(|e| anyhow::anyhow!("sorting frame rows: {e}"))?;
    sorted
        .drop("__cell_rank")
        .map_err(|e| anyhow::anyhow!("sorting frame rows: {e}"))
}

pub fn summarize(f: &RunFrames) -> Result<Vec<ArmSummary>> {
    let g = group(&f.steps, multi_regime(f))?;
    let gu = group(&f.updates, multi_regime(f))?;
    let reward = f64_col(&f.steps, "reward_mean")?;
    let eval = f64_col(&f.steps, "eval_accuracy")?;
    let ev_arm = arm_labels(&f.events, multi_regime(f))?;
    let ev_seed = i64_col(&f.events, "seed")?;
    let ev_kind = str_col(&f.events, "kind")?;
    let ev_step = i64_col(&f.events, "step")?;
    let mut out = Vec::new();
    for arm in &g.arms {
        let seeds = g.seeds(arm);
        let (mut fin, mut fev, mut stt) = (vec![], vec![], vec![]);
        for s in &seeds {
            let rows = &g.cells[&(arm.clone(), *s)];
            let r: Vec<f64> = rows.iter().filter_map(|&i| reward[i]).collect();
            let tail = (r.len() / 10).max(1);
            fin.push(
                r[r.len().saturating_sub(tail)..].iter().sum::<f64>()
                    / tail.min(r.len()).max(1) as f64,
            );
            fev.push(rows.iter().rev().find_map(|&i| eval[i]).unwrap_or(f64::NAN));
            let mut ema = None;
            let mut start = None;
            let mut hit = f64::NAN;
            for (k, &x) in r.iter().enumerate() {
                let e = ema.map_or(x, |e: f64| 0.9 * e + 0.1 * x);
                ema = Some(e);
                let s0 = *start.get_or_insert(e);
                if e >= s0 + 0.1 {
                    hit = k as f64;
                    break;
                }
            }
            stt.push(hit);
        }
        let mut collapses: BTreeMap<String, (usize, i64)> = BTreeMap::new();
        let mut seen = std::collections::BTreeSet::new();
        let (mut broke, mut warned) = (
            std::collections::BTreeSet::new(),
            std::collections::BTreeSet::new(),
        );
        for i in 0..f.events.height() {
            if &ev_arm[i] == arm {
                if COLLAPSE_KINDS.contains(&ev_kind[i].as_str()) {
                    broke.insert(ev_seed[i]);
                } else {
                    warned.insert(ev_seed[i]);
                }
                let e = collapses.entry(ev_kind[i].clone()).or_insert((0, i64::MAX));
                if seen.insert((ev_kind[i].clone(), ev_seed[i])) {
                    e.0 += 1;
                }
                e.1 = e.1.min(ev_step[i]);
            }
        }
        let (algorithm, routing) = g.meta[arm].clone();
        let um = |c: &str| cell_means(&f.updates, &gu, arm, c).map(|v| mean_ci(&v));
        let sm = |c: &str| cell_means(&f.steps, &g, arm, c).map(|v| mean_ci(&v));
        out.push(ArmSummary {
            arm: arm.clone(),
            algorithm,
            routing,
            seeds: seeds.len(),
            final_reward: mean_ci(&fin),
            final_eval: mean_ci(&fev),
            reached: stt.iter().filter(|x| x.is_finite()).count(),
            steps_to_target: mean_ci(&stt),
            drift_expert_frac: um("drift_expert_frac")?,
            drift_since_rollout_frac: um("drift_since_rollout_frac")?,
            clip_frac_tok: um("clip_frac_tok")?,
            ratio_tok_var: um("ratio_tok_var")?,
            ratio_seq_var: um("ratio_seq_var")?,
            mismatch_kl_k3: sm("mismatch_kl_k3")?,
            mismatch_route_frac: sm("mismatch_route_frac")?,
            collapses,
            collapsed_cells: broke.len(),
            warned_cells: warned.difference(&broke).count(),
        });
    }
    Ok(out)
}

fn fmt_ci(m: &MeanCi) -> String {
    if !m.mean.is_finite() {
        "–".into()
    } else if m.ci95.is_finite() {
        format!("{} ± {}", sig(m.mean), sig(m.ci95))
    } else {
        sig(m.mean)
    }
}

fn sig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 0.01 && x.abs() < 1000.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

fn write_summary_files(dir: &Path, sums: &[ArmSummary]) -> Result<()> {
    use polars::prelude::*;
    let s = |f: &dyn Fn(&ArmSummary) -> String| sums.iter().map(f).collect::<Vec<String>>();
    let x = |f: &dyn Fn(&ArmSummary) -> f64| {
        sums.iter()
            .map(|a| Some(f(a)).filter(|v| v.is_finite()))
            .collect::<Vec<Option<f64>>>()
    };
    let cols = vec![
        Column::new("arm".into(), s(&|a| a.arm.clone())),
        Column::new("algorithm".into(), s(&|a| a.algorithm.clone())),
        Column::new("routing".into(), s(&|a| a.routing.clone())),
        Column::new(
            "seeds".into(),
            sums.iter().map(|a| a.seeds as i64).collect::<Vec<_>>(),
        ),
        Column::new("final_reward_mean".into(), x(&|a| a.final_reward.mean)),
        Column::new("final_reward_ci95".into(), x(&|a| a.final_reward.ci95)),
        Column::new("final_eval_mean".into(), x(&|a| a.final_eval.mean)),
        Column::new("final_eval_ci95".into(), x(&|a| a.final_eval.ci95)),
        Column::new(
            "steps_to_target_mean".into(),
            x(&|a| a.steps_to_target.mean),
        ),
        Column::new(
            "cells_reaching_target".into(),
            sums.iter().map(|a| a.reached as i64).collect::<Vec<_>>(),
        ),
        Column::new(
            "drift_expert_frac_mean".into(),
            x(&|a| a.drift_expert_frac.mean),
        ),
        Column::new(
            "drift_expert_frac_ci95".into(),
            x(&|a| a.drift_expert_frac.ci95),
        ),
        Column::new("clip_frac_tok_mean".into(), x(&|a| a.clip_frac_tok.mean)),
        Column::new("clip_frac_tok_ci95".into(), x(&|a| a.clip_frac_tok.ci95)),
        Column::new("ratio_tok_var_mean".into(), x(&|a| a.ratio_tok_var.mean)),
        Column::new("ratio_seq_var_mean".into(), x(&|a| a.ratio_seq_var.mean)),
        Column::new("mismatch_kl_k3_mean".into(), x(&|a| a.mismatch_kl_k3.mean)),
        Column::new(
            "mismatch_route_frac_mean".into(),
            x(&|a| a.mismatch_route_frac.mean),
        ),
        Column::new(
            "collapse_cells".into(),
            sums.iter()
                .map(|a| a.collapsed_cells as i64)
                .collect::<Vec<_>>(),
        ),
        Column::new(
            "warning_cells".into(),
            sums.iter()
                .map(|a| a.warned_cells as i64)
                .collect::<Vec<_>>(),
        ),
    ];
    let mut df = DataFrame::new(sums.len(), cols)?;
    write_csv(&mut df, &dir.join("summary.csv"))?;
    crate::coldstart::write_atomic(
        &dir.join("summary.json"),
        serde_json::to_string_pretty(sums)?.as_bytes(),
    )?;
    Ok(())
}

/// The plot files `report` writes (each as PNG and SVG).
pub const PLOTS: &[&str] = &[
    "reward",
    "eval_accuracy",
    "clip_frac",
    "drift",
    "drift_layers",
    "ratio_var_vs_len",
    "mismatch_kl",
];

/// Plots of every regime: `plots/<name>.png|svg` for a single-regime run, else
/// `plots/<regime>/<name>.png|svg`. Returns the folders written, relative to `dir`.
fn make_plots(dir: &Path, f: &RunFrames) -> Result<Vec<(String, String)>> {
    let regs = regimes(&f.steps);
    if regs.len() <= 1 {
        make_plots_in(&dir.join("plots"), f)?;
        return Ok(vec![(
            regs.first().cloned().unwrap_or_default(),
            "plots".into(),
        )]);
    }
    let mut out = Vec::new();
    for r in regs {
        let sub = RunFrames {
            steps: filter_regime(&f.steps, &r)?,
            updates: filter_regime(&f.updates, &r)?,
            layers: filter_regime(&f.layers, &r)?,
            events: filter_regime(&f.events, &r)?,
        };
        make_plots_in(&dir.join("plots").join(&r), &sub)?;
        out.push((r.clone(), format!("plots/{r}")));
    }
    Ok(out)
}

fn make_plots_in(pdir: &Path, f: &RunFrames) -> Result<()> {
    let pdir = pdir.to_path_buf();
    std::fs::create_dir_all(&pdir).with_context(|| format!("creating {}", pdir.display()))?;
    let g = group(&f.steps, multi_regime(f))?;
    // Collapse markers at the reward of the arm mean at that step.
    let reward_series = per_step_series(&f.steps, &g, "reward_mean")?;
    let ev_arm = arm_labels(&f.events, multi_regime(f))?;
    let ev_step = i64_col(&f.events, "step")?;
    let markers = (0..f.events.height())
        .filter_map(|i| {
            let s = reward_series.iter().find(|s| s.name == ev_arm[i])?;
            let y = s
                .points
                .iter()
                .find(|p| p.0 as i64 == ev_step[i])
                .map(|p| p.1)?;
            Some((ev_step[i] as f64, y, ev_arm[i].clone()))
        })
        .collect();
    LineChart {
        title: "Training reward (mean over seeds; band = seed range)".into(),
        x_label: "RL step".into(),
        y_label: "reward".into(),
        series: reward_series,
        log_y: false,
        markers,
        scatter: false,
    }
    .save(&pdir, "reward")?;
    let eval = per_step_series(&f.steps, &g, "eval_accuracy")?;
    LineChart {
        title: "Greedy eval accuracy (held-out set)".into(),
        x_label: "RL step".into(),
        y_label: "eval accuracy".into(),
        series: eval,
        log_y: false,
        markers: vec![],
        scatter: false,
    }
    .save(&pdir, "eval_accuracy")?;

    let gu = group(&f.updates, multi_regime(f))?;
    let bars: Vec<(String, f64, Option<(f64, f64)>)> = gu
        .arms
        .iter()
        .map(|a| {
            let m = mean_ci(&cell_means(&f.updates, &gu, a, "clip_frac_tok").unwrap_or_default());
            let e = m
                .ci95
                .is_finite()
                .then(|| ((m.mean - m.ci95).max(1e-6), m.mean + m.ci95));
            (a.clone(), m.mean.max(0.0), e)
        })
        .collect();
    let log = spans_decades(bars.iter().map(|b| b.1));
    BarChart {
        title: "Clipped-token fraction per update (95% CI over seeds)".into(),
        y_label: "clip_frac_tok".into(),
        bars,
        log_y: log,
    }
    .save(&pdir, "clip_frac")?;

    let drift = per_step_series(&f.updates, &gu, "drift_expert_frac")?;
    let log = spans_decades(drift.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    LineChart {
        title: "Expert drift per update: share of activated experts that changed".into(),
        x_label: "RL step".into(),
        y_label: "drift_expert_frac".into(),
        series: drift,
        log_y: log,
        markers: vec![],
        scatter: false,
    }
    .save(&pdir, "drift")?;

    // Drift per layer: x = layer, one line per arm.
    let layer_series = if f.layers.height() > 0 {
        let gl = group(&f.layers, multi_regime(f))?;
        let layer = i64_col(&f.layers, "layer")?;
        let v = f64_col(&f.layers, "drift_expert_frac")?;
        gl.arms
            .iter()
            .map(|a| {
                let mut by: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
                for ((arm, _), rows) in &gl.cells {
                    if arm == a {
                        for &i in rows {
                            if let Some(x) = v[i] {
                                let e = by.entry(layer[i]).or_insert((0.0, 0));
                                e.0 += x;
                                e.1 += 1;
                            }
                        }
                    }
                }
                Series {
                    name: a.clone(),
                    points: by
                        .into_iter()
                        .map(|(l, (s, n))| (l as f64, s / n as f64))
                        .collect(),
                    band: vec![],
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    let log = spans_decades(
        layer_series
            .iter()
            .flat_map(|s: &Series| s.points.iter().map(|p| p.1)),
    );
    LineChart {
        title: "Expert drift by layer (mean over updates and seeds)".into(),
        x_label: "layer".into(),
        y_label: "drift_expert_frac".into(),
        series: layer_series,
        log_y: log,
        markers: vec![],
        scatter: false,
    }
    .save(&pdir, "drift_layers")?;

    // Ratio variance vs response length, token vs sequence level (off-policy updates only).
    let len = f64_col(&f.updates, "resp_len_mean")?;
    let mb = i64_col(&f.updates, "minibatch")?;
    let tokv = f64_col(&f.updates, "ratio_tok_var")?;
    let seqv = f64_col(&f.updates, "ratio_seq_var")?;
    let pts = |v: &[Option<f64>]| -> Vec<(f64, f64)> {
        (0..len.len())
            .filter(|&i| mb[i] > 0)
            .filter_map(|i| Some((len[i]?, v[i]?)))
            .filter(|p| p.1 > 0.0)
            .collect()
    };
    let series = vec![
        Series {
            name: "token ratio variance".into(),
            points: pts(&tokv),
            band: vec![],
        },
        Series {
            name: "sequence ratio variance".into(),
            points: pts(&seqv),
            band: vec![],
        },
    ];
    LineChart {
        title: "Importance-ratio variance vs response length (updates after the first minibatch)"
            .into(),
        x_label: "mean response length (tokens)".into(),
        y_label: "variance".into(),
        series,
        log_y: true,
        markers: vec![],
        scatter: true,
    }
    .save(&pdir, "ratio_var_vs_len")?;

    // A KL is positive and spans decades across regimes: always a log axis.
    let mk = per_step_series(&f.steps, &g, "mismatch_kl_k3")?;
    LineChart {
        title: "Train–inference mismatch: k3 KL per token (rollout engine vs trainer)".into(),
        x_label: "RL step".into(),
        y_label: "mismatch_kl_k3".into(),
        series: mk,
        log_y: true,
        markers: vec![],
        scatter: false,
    }
    .save(&pdir, "mismatch_kl")?;
    Ok(())
}

/// Rebuild `summary.csv`, `summary.json`, `plots/` and `report.md` in `dir` from its Parquet files.
/// The regimes of the run as `config.json` records them: name, overrides, arms, description.
/// Empty when the run has no config (frames copied alone) or names no regimes.
fn regimes_section(dir: &Path) -> String {
    let Ok(text) = std::fs::read_to_string(dir.join("config.json")) else {
        return String::new();
    };
    let Ok(cfg) = serde_json::from_str::<serde_json::Value>(&text) else {
        return String::new();
    };
    let Some(regs) = cfg["spec"]["regimes"].as_array().filter(|r| !r.is_empty()) else {
        return String::new();
    };
    let mut md = String::from(
        "## Regimes\n\n| regime | overrides | arms | what it is |\n|---|---|---|---|\n",
    );
    for r in regs {
        let overrides: Vec<String> = [
            "drift_injection",
            "mismatch",
            "router_lr_mult",
            "lr",
            "minibatches",
        ]
        .iter()
        .filter(|k| !r[**k].is_null())
        .map(|k| format!("`{k} = {}`", r[*k]))
        .collect();
        let arms = match r["arms"].as_array() {
            Some(a) => a
                .iter()
                .filter_map(|x| x.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            None => "all".into(),
        };
        md.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r["name"].as_str().unwrap_or("?"),
            if overrides.is_empty() {
                "none".into()
            } else {
                overrides.join(", ")
            },
            arms,
            r["description"].as_str().unwrap_or("")
        ));
    }
    md.push('\n');
    md
}

pub fn write_report(dir: &Path) -> Result<Vec<ArmSummary>> {
    let f = load_frames(dir).with_context(|| {
        format!(
            "{} does not hold a readable run (steps/updates/layers/events.parquet)",
            dir.display()
        )
    })?;
    let sums = summarize(&f)?;
    write_summary_files(dir, &sums)?;
    let plot_dirs = make_plots(dir, &f)?;
    let mut md = String::new();
    let name = str_col(&f.steps, "experiment")?
        .first()
        .cloned()
        .unwrap_or_default();
    writeln!(md, "# driftlab report: {name}\n")?;
    let steps = i64_col(&f.steps, "step")?;
    writeln!(
        md,
        "{} step rows, {} update rows, {} layer rows, {} events; up to step {}.\n",
        f.steps.height(),
        f.updates.height(),
        f.layers.height(),
        f.events.height(),
        steps.iter().max().copied().unwrap_or(0)
    )?;
    md.push_str(&regimes_section(dir));
    writeln!(md, "## Summary per arm (mean ± 95% CI over seeds)\n")?;
    writeln!(
        md,
        "| arm | algorithm | routing | seeds | final reward | final eval acc | steps to +0.1 reward | drift_expert_frac | clip_frac_tok | ratio_tok_var | ratio_seq_var | mismatch_kl_k3 | collapsed cells | cells with warnings only |"
    )?;
    writeln!(
        md,
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for a in &sums {
        writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {} ({}/{}) | {} | {} | {} | {} | {} | {} | {} |",
            a.arm,
            a.algorithm,
            a.routing,
            a.seeds,
            fmt_ci(&a.final_reward),
            fmt_ci(&a.final_eval),
            fmt_ci(&a.steps_to_target),
            a.reached,
            a.seeds,
            fmt_ci(&a.drift_expert_frac),
            fmt_ci(&a.clip_frac_tok),
            fmt_ci(&a.ratio_tok_var),
            fmt_ci(&a.ratio_seq_var),
            fmt_ci(&a.mismatch_kl_k3),
            a.collapsed_cells,
            a.warned_cells
        )?;
    }
    writeln!(
        md,
        "\nfinal reward: mean reward over each cell's last tenth of steps. Steps to +0.1: first step where the reward EMA(0.9) exceeds its start by 0.1 (cells that reached it / all). Collapsed cells: seeds with a reward, entropy, non-finite or expert collapse; warnings only: seeds with a ratio explosion or gradient spike and no collapse.\n"
    )?;
    writeln!(md, "## Collapse events\n")?;
    if f.events.height() == 0 {
        writeln!(md, "None.\n")?;
    } else {
        writeln!(md, "| arm | kind | cells | first step |\n|---|---|---|---|")?;
        for a in &sums {
            for (k, (n, first)) in &a.collapses {
                writeln!(md, "| {} | {k} | {n} | {first} |", a.arm)?;
            }
        }
        writeln!(md)?;
    }
    md.push_str(&findings::findings(&f)?);
    writeln!(md)?;
    writeln!(md, "## Plots\n")?;
    for (regime, folder) in &plot_dirs {
        if plot_dirs.len() > 1 {
            writeln!(md, "### Regime `{regime}`\n")?;
        }
        for p in PLOTS {
            writeln!(md, "![{p}]({folder}/{p}.svg)\n")?;
        }
    }
    crate::coldstart::write_atomic(&dir.join("report.md"), md.as_bytes())?;
    Ok(sums)
}
