//! The plots of a run, from its frames: which series each figure shows (the drawing is in
//! [`super::charts`]).

use super::charts::{BarChart, Chart, LineChart, Series, spans_decades};
use super::load::{RunFrames, distinct, regimes};
use super::stats::mean_ci;
use super::summary::{labelled, seed_means};
use crate::metrics::frames::{f64_col, i64_col, str_col};
use anyhow::{Context, Result};
use polars::prelude::*;
use std::path::Path;

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

/// Per label, per `x`: the mean over seeds of each seed's mean of `column` at that `x`, with
/// the min–max over seeds as a band (when there are several).
fn series_by(df: &DataFrame, multi: bool, x: &str, column: &str) -> Result<Vec<Series>> {
    let df = labelled(df, multi)?;
    let names = distinct(str_col(&df, "label")?);
    let per_seed = df
        .lazy()
        .filter(col(column).is_not_null())
        .group_by_stable([col("label"), col(x), col("seed")])
        .agg([col(column).mean().alias("v")])
        .group_by_stable([col("label"), col(x)])
        .agg([
            col("v").mean().alias("mean"),
            col("v").min().alias("lo"),
            col("v").max().alias("hi"),
            col("v").count().alias("n"),
        ])
        .sort(
            [x],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .collect()?;
    let label = str_col(&per_seed, "label")?;
    let xs = i64_col(&per_seed, x)?;
    let (m, lo, hi) = (
        f64_col(&per_seed, "mean")?,
        f64_col(&per_seed, "lo")?,
        f64_col(&per_seed, "hi")?,
    );
    let n = i64_col(&per_seed, "n")?;
    let mut out: Vec<Series> = Vec::new();
    for name in names {
        let mut s = Series {
            name: name.clone(),
            points: Vec::new(),
            band: Vec::new(),
        };
        for i in (0..label.len()).filter(|&i| label[i] == name) {
            let (Some(m), Some(lo), Some(hi)) = (m[i], lo[i], hi[i]) else {
                continue;
            };
            s.points.push((xs[i] as f64, m));
            if n[i] > 1 {
                s.band.push((xs[i] as f64, lo, hi));
            }
        }
        out.push(s);
    }
    Ok(out)
}

fn line(title: &str, x_label: &str, y_label: &str, series: Vec<Series>, log_y: bool) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series,
        log_y,
        markers: vec![],
        scatter: false,
    }
}

/// Collapse events as markers on the arm's mean reward at that step.
fn event_markers(f: &RunFrames, multi: bool, reward: &[Series]) -> Result<Vec<(f64, f64, String)>> {
    let ev_label = str_col(&labelled(&f.events, multi)?, "label")?;
    let ev_step = i64_col(&f.events, "step")?;
    Ok((0..ev_label.len())
        .filter_map(|i| {
            let s = reward.iter().find(|s| s.name == ev_label[i])?;
            let y = s
                .points
                .iter()
                .find(|p| p.0 as i64 == ev_step[i])
                .map(|p| p.1)?;
            Some((ev_step[i] as f64, y, ev_label[i].clone()))
        })
        .collect())
}

/// Token and sequence ratio variance of every off-policy update against its mean length.
fn variance_vs_length(f: &RunFrames) -> Result<LineChart> {
    let len = f64_col(&f.updates, "resp_len_mean")?;
    let mb = i64_col(&f.updates, "minibatch")?;
    let pts = |c: &str| -> Result<Vec<(f64, f64)>> {
        let v = f64_col(&f.updates, c)?;
        Ok((0..len.len())
            .filter(|&i| mb[i] > 0)
            .filter_map(|i| Some((len[i]?, v[i]?)))
            .filter(|p| p.1 > 0.0)
            .collect())
    };
    let series = vec![
        Series {
            name: "token ratio variance".into(),
            points: pts("ratio_tok_var")?,
            band: vec![],
        },
        Series {
            name: "sequence ratio variance".into(),
            points: pts("ratio_seq_var")?,
            band: vec![],
        },
    ];
    let mut chart = line(
        "Importance-ratio variance vs response length (updates after the first minibatch)",
        "mean response length (tokens)",
        "variance",
        series,
        true,
    );
    chart.scatter = true;
    Ok(chart)
}

/// Clipped-token fraction per arm with its 95% interval over seeds.
fn clip_bars(f: &RunFrames) -> Result<BarChart> {
    let mut bars = Vec::new();
    for (a, seeds) in seed_means(&f.updates, "clip_frac_tok")? {
        let m = mean_ci(&seeds);
        let e = m
            .ci95
            .is_finite()
            .then(|| ((m.mean - m.ci95).max(1e-6), m.mean + m.ci95));
        bars.push((a, m.mean.max(0.0), e));
    }
    let log = spans_decades(bars.iter().map(|b| b.1));
    Ok(BarChart {
        title: "Clipped-token fraction per update (95% CI over seeds)".into(),
        y_label: "clip_frac_tok".into(),
        bars,
        log_y: log,
    })
}

/// Every plot of `f` under `pdir`.
fn plots_in(pdir: &Path, f: &RunFrames) -> Result<()> {
    std::fs::create_dir_all(pdir).with_context(|| format!("creating {}", pdir.display()))?;
    let multi = regimes(&f.steps).len() > 1;
    let reward = series_by(&f.steps, multi, "step", "reward_mean")?;
    let mut chart = line(
        "Training reward (mean over seeds; band = seed range)",
        "RL step",
        "reward",
        reward,
        false,
    );
    chart.markers = event_markers(f, multi, &chart.series)?;
    chart.save(pdir, "reward")?;
    let eval = series_by(&f.steps, multi, "step", "eval_accuracy")?;
    line(
        "Greedy eval accuracy (held-out set)",
        "RL step",
        "eval accuracy",
        eval,
        false,
    )
    .save(pdir, "eval_accuracy")?;
    clip_bars(f)?.save(pdir, "clip_frac")?;
    let drift = series_by(&f.updates, multi, "step", "drift_expert_frac")?;
    let log = spans_decades(drift.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    line(
        "Expert drift per update: share of activated experts that changed",
        "RL step",
        "drift_expert_frac",
        drift,
        log,
    )
    .save(pdir, "drift")?;
    let layers = if f.layers.height() > 0 {
        series_by(&f.layers, multi, "layer", "drift_expert_frac")?
    } else {
        Vec::new()
    };
    let log = spans_decades(layers.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
    line(
        "Expert drift by layer (mean over updates and seeds)",
        "layer",
        "drift_expert_frac",
        layers,
        log,
    )
    .save(pdir, "drift_layers")?;
    variance_vs_length(f)?.save(pdir, "ratio_var_vs_len")?;
    // A KL is positive and spans decades across regimes: always a log axis.
    let mk = series_by(&f.steps, multi, "step", "mismatch_kl_k3")?;
    line(
        "Train–inference mismatch: k3 KL per token (rollout engine vs trainer)",
        "RL step",
        "mismatch_kl_k3",
        mk,
        true,
    )
    .save(pdir, "mismatch_kl")
}

/// Plots of every regime: `plots/<name>.png|svg` for a single-regime run, else
/// `plots/<regime>/<name>.png|svg`. Returns (regime, folder relative to `dir`) per folder.
pub fn make_plots(dir: &Path, f: &RunFrames) -> Result<Vec<(String, String)>> {
    let regs = regimes(&f.steps);
    if regs.len() <= 1 {
        plots_in(&dir.join("plots"), f)?;
        return Ok(vec![(
            regs.first().cloned().unwrap_or_default(),
            "plots".into(),
        )]);
    }
    let mut out = Vec::new();
    for r in regs {
        plots_in(&dir.join("plots").join(&r), &f.regime(&r)?)?;
        out.push((r.clone(), format!("plots/{r}")));
    }
    Ok(out)
}
