//! Sweep figures: when a spec puts its regimes on one axis (`sweep`, each regime's `x`), every
//! arm's per-cell values and every paired reward endpoint against that axis, one point per
//! regime with its 95% interval over seeds.

use super::series::{line, reference};
use crate::report::charts::{Chart, Series, spans_decades};
use crate::report::endpoints::Endpoint;
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::run_info::RunInfo;
use crate::report::stats::mean_ci;
use anyhow::{Context, Result};
use std::path::Path;

/// The plot files of a sweep, under `plots/sweep/` (each as PNG and SVG).
pub const SWEEP_PLOTS: &[&str] = &[
    "final_reward",
    "paired_reward",
    "drift",
    "clip_frac",
    "ratio_tok_var",
    "mismatch_kl",
    "ratio_explosion",
    "collapsed",
];

/// (file, per-seed metric, what it is, log axis when it spans decades).
const METRICS: &[(&str, &str, &str, bool)] = &[
    (
        "final_reward",
        "final_reward",
        "Final reward (last tenth of steps)",
        false,
    ),
    ("drift", "drift_expert_frac", "Drift per update", true),
    ("clip_frac", "clip_frac_tok", "Clipped-token fraction", true),
    (
        "ratio_tok_var",
        "ratio_tok_var",
        "Token-ratio variance",
        true,
    ),
    (
        "mismatch_kl",
        "mismatch_kl_k3",
        "Engine–trainer k3 KL per token",
        true,
    ),
    (
        "ratio_explosion",
        "ratio_explosion",
        "Share of cells with a token-ratio explosion (Wilson 95%)",
        false,
    ),
    (
        "collapsed",
        "collapsed",
        "Share of cells that collapsed (Wilson 95%)",
        false,
    ),
];

/// Per-cell 0/1 values: their band is the Wilson score interval of the share, not a t band.
const RATES: &[&str] = &["ratio_explosion", "collapsed"];

/// The 95% Wilson score interval of a share `p` of `n` cells (inside [0, 1]).
fn wilson(p: f64, n: usize) -> (f64, f64) {
    let (z, n) = (1.959_963_984_540_054, n as f64);
    let c = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let h = z / (1.0 + z * z / n) * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
    (c - h, c + h)
}

/// The series named `name`, appended empty when absent.
fn series_named<'a>(out: &'a mut Vec<Series>, name: &str) -> &'a mut Series {
    let k = match out.iter().position(|s| s.name == name) {
        Some(k) => k,
        None => {
            out.push(Series {
                name: name.into(),
                points: Vec::new(),
                band: Vec::new(),
                dashed: false,
                color: None,
            });
            out.len() - 1
        }
    };
    &mut out[k]
}

/// Points and bands in x order.
fn sorted(mut out: Vec<Series>) -> Vec<Series> {
    for s in &mut out {
        s.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        s.band.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// One series per arm name (in order of first appearance): per regime on the axis, the mean
/// of `metric` over seeds and its 95% band (t, or Wilson for shares of cells).
fn per_arm(regs: &[Regime], metric: &str) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in regs {
        let Some(x) = r.x else {
            continue;
        };
        for (a, _) in &r.arms.arms {
            let v: Vec<f64> = a
                .per_seed
                .get(metric)
                .into_iter()
                .flatten()
                .copied()
                .filter(|v| v.is_finite())
                .collect();
            if v.is_empty() {
                continue;
            }
            let m = mean_ci(&v);
            let s = series_named(&mut out, &a.name);
            s.points.push((x, m.mean));
            if RATES.contains(&metric) {
                let (lo, hi) = wilson(m.mean, v.len());
                s.band.push((x, lo, hi));
            } else if m.ci95.is_finite() {
                s.band.push((x, m.mean - m.ci95, m.mean + m.ci95));
            }
        }
    }
    sorted(out)
}

/// The paired reward endpoints (difference scale) along the axis: one series per compared
/// pair, its mean difference and 95% t interval per regime.
fn paired_reward(eps: &[Endpoint], regs: &[Regime]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for e in eps {
        let x = regs.iter().find(|r| r.name == e.regime).and_then(|r| r.x);
        let (Some(est), Some(x)) = (&e.est, x) else {
            continue;
        };
        if e.scale != Scale::Difference || !e.what.starts_with("final reward") {
            continue;
        }
        let s = series_named(
            &mut out,
            &format!("({}) {}", e.claim, e.what.replace('`', "")),
        );
        s.points.push((x, est.mean));
        if est.n >= 2 {
            s.band.push((x, est.t_ci.0, est.t_ci.1));
        }
    }
    sorted(out)
}

/// Drift per update against depth with each arm's power-law fit carried to the paper's 48
/// layers (the mean over seeds of the per-seed fits), on a log axis beside the paper's ~10%.
fn drift_fit(regs: &[Regime], axis: &str) -> Result<crate::report::charts::LineChart> {
    use crate::report::depth::{PAPER_DEPTH, drift_fits};
    let mut series = per_arm(regs, "drift_expert_frac");
    let lo = regs
        .iter()
        .filter_map(|r| r.x)
        .fold(f64::INFINITY, f64::min)
        .max(1.0);
    let hi = regs
        .iter()
        .filter_map(|r| r.x)
        .fold(f64::NEG_INFINITY, f64::max);
    for (arm, fits) in drift_fits(regs) {
        // The arm's measured series, whose colour its fit takes.
        let color = series.iter().position(|s| s.name == arm);
        // Per grid depth, the mean of the seeds' fits and its 95% t band; solid over the
        // measured depths, dashed where it is carried beyond them.
        let at = |x: f64| {
            let v: Vec<f64> = fits.values().map(|f| f.at(x)).collect();
            (x, crate::report::stats::mean_ci(&v))
        };
        let grid = |from: f64, to: f64| -> Vec<(f64, crate::report::stats::MeanCi)> {
            (0..=20)
                .map(|i| at(from * (to / from).powf(i as f64 / 20.0)))
                .collect()
        };
        let part =
            |pts: Vec<(f64, crate::report::stats::MeanCi)>, name: String, band: bool| Series {
                name,
                points: pts.iter().map(|(x, m)| (*x, m.mean)).collect(),
                band: pts
                    .iter()
                    .filter(|(_, m)| band && m.ci95.is_finite())
                    .map(|(x, m)| (*x, m.mean - m.ci95, m.mean + m.ci95))
                    .collect(),
                // Both parts dashed: only the measured series is drawn solid.
                dashed: true,
                color,
            };
        series.push(part(grid(lo, hi), String::new(), false));
        series.push(part(
            grid(hi, PAPER_DEPTH),
            format!("{arm}: fit ∝ n_layers^b carried to {PAPER_DEPTH} layers (95% band)"),
            true,
        ));
    }
    let mut chart = line(
        "Drift per update against depth, measured (95% band) and fitted drift ∝ n_layers^b carried to 48 layers",
        axis,
        "share of activated experts that change per update",
        series,
        true,
    );
    chart
        .refs
        .push(reference(0.10, "GSPO paper: ~10% per update (48 layers)"));
    Ok(chart)
}

/// Write the sweep's plots under `dir/plots/sweep/`; returns that folder (relative to `dir`)
/// and the axis, or None when the run is no sweep.
pub fn sweep_plots(
    dir: &Path,
    info: &RunInfo,
    regs: &[Regime],
    eps: &[Endpoint],
) -> Result<Option<(String, String)>> {
    let Some(axis) = &info.sweep else {
        return Ok(None);
    };
    let pdir = dir.join("plots").join("sweep");
    std::fs::create_dir_all(&pdir).with_context(|| format!("creating {}", pdir.display()))?;
    for &(file, metric, what, may_log) in METRICS {
        let series = per_arm(regs, metric);
        let log = may_log
            && series
                .iter()
                .flat_map(|s| s.points.iter())
                .all(|p| p.1 > 0.0)
            && spans_decades(series.iter().flat_map(|s| s.points.iter().map(|p| p.1)));
        let mut chart = line(
            &format!("{what}: mean over seeds, 95% interval"),
            axis,
            what.split(" (").next().unwrap_or(what),
            series,
            log,
        );
        if metric == "drift_expert_frac" {
            chart.refs.push(reference(
                0.10,
                "GSPO paper: ~10% per update (48-layer MoE)",
            ));
        }
        chart.save(&pdir, file)?;
    }
    let mut chart = line(
        "Paired final-reward differences (b − a): mean over seeds, 95% t interval",
        axis,
        "reward difference (b − a)",
        paired_reward(eps, regs),
        false,
    );
    chart.refs = vec![
        reference(crate::report::endpoints::REWARD_MARGIN, "±δ (0.05)"),
        reference(-crate::report::endpoints::REWARD_MARGIN, ""),
    ];
    chart.save(&pdir, "paired_reward")?;
    if regs
        .first()
        .is_some_and(|r| r.claims.contains(&crate::experiment::Claim::DepthDrift))
    {
        drift_fit(regs, axis)?.save(&pdir, "drift_fit")?;
    }
    Ok(Some(("plots/sweep".into(), axis.clone())))
}

#[cfg(test)]
mod tests {
    #[test]
    fn wilson_intervals_stay_inside_zero_and_one() {
        // 0 of 8 cells: [0, 0.324]; 7 of 8: [0.529, 0.978] (published Wilson values).
        let (lo, hi) = super::wilson(0.0, 8);
        assert!(lo.abs() < 1e-12 && (hi - 0.3244).abs() < 1e-3, "{lo} {hi}");
        let (lo, hi) = super::wilson(7.0 / 8.0, 8);
        assert!(
            (lo - 0.5291).abs() < 1e-3 && (hi - 0.9776).abs() < 1e-3,
            "{lo} {hi}"
        );
    }
}
