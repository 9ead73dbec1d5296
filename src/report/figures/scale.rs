//! Claim (o)'s figures, under `plots/scale/`: drift per update against layer index for each
//! depth, drift against each factor with the fit (others at the centre), and the held-out
//! configurations' predicted against measured drift.

use super::series::{line, reference};
use crate::experiment::Claim;
use crate::metrics::frames::{f64_col, i64_col};
use crate::report::charts::{Chart, LineChart, Series, Stack};
use crate::report::regime::Regime;
use crate::report::regime::scale_points as points;
use crate::report::scale::{FACTORS, Factors, From, P, fits};
use crate::report::stats::mean_ci;
use anyhow::Result;
use std::collections::BTreeMap;
use std::path::Path;

/// The plot files of claim (o), under `plots/scale/` (each as PNG and SVG).
pub const SCALE_PLOTS: &[&str] = &["drift_by_layer", "scale_factors", "scale_holdout"];

/// The geometric mean of positive values with its 95% t interval (on logs): drift is fitted
/// multiplicatively, and an arithmetic interval of a few seeds reaches below 0.
fn geo(v: &[f64]) -> Option<(f64, f64, f64)> {
    let l: Vec<f64> = v.iter().filter(|x| **x > 0.0).map(|x| x.ln()).collect();
    let m = mean_ci(&l);
    if !m.mean.is_finite() {
        return None;
    }
    let h = if m.ci95.is_finite() { m.ci95 } else { 0.0 };
    Some((m.mean.exp(), (m.mean - h).exp(), (m.mean + h).exp()))
}

/// A series of geometric means with their bands.
fn geo_series(name: &str, pts: &[(f64, Vec<f64>)], dashed: bool) -> Series {
    let g: Vec<(f64, (f64, f64, f64))> = pts
        .iter()
        .filter_map(|(x, v)| geo(v).map(|g| (*x, g)))
        .collect();
    Series {
        name: name.into(),
        points: g.iter().map(|(x, (m, _, _))| (*x, *m)).collect(),
        band: g.iter().map(|(x, (_, lo, hi))| (*x, *lo, *hi)).collect(),
        dashed,
        ..Series::default()
    }
}

/// A factor's value in a configuration.
fn value(f: &Factors, i: usize) -> f64 {
    [f.layers, f.d_model, f.experts, f.lr, f.minibatches][i]
}

/// Whether `f` differs from `c` in factor `i` alone (or not at all).
fn only(f: &Factors, c: &Factors, i: usize) -> bool {
    (0..FACTORS.len()).all(|j| j == i || value(f, j) == value(c, j))
}

/// Per depth (regimes that differ from the centre in depth alone), drift per update against
/// layer index, mean over updates and seeds with its 95% band over seeds.
fn by_layer(regs: &[Regime], c: &Factors) -> Result<LineChart> {
    let mut series = Vec::new();
    for r in regs.iter().filter(|r| !r.holdout) {
        let Some(f) = r.factors.filter(|f| only(f, c, 0)) else {
            continue;
        };
        let df = &r.frames.layers;
        if df.height() == 0 || df.column("drift_expert_frac").is_err() {
            continue;
        }
        let (layer, seed, v) = (
            i64_col(df, "layer")?,
            i64_col(df, "seed")?,
            f64_col(df, "drift_expert_frac")?,
        );
        let mut acc: BTreeMap<(i64, i64), (f64, usize)> = BTreeMap::new();
        for i in 0..layer.len() {
            if let Some(x) = v[i].filter(|x| x.is_finite()) {
                let e = acc.entry((layer[i], seed[i])).or_insert((0.0, 0));
                e.0 += x;
                e.1 += 1;
            }
        }
        let mut per_layer: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        for ((l, _), (s, n)) in acc {
            per_layer.entry(l).or_default().push(s / n as f64);
        }
        let pts: Vec<(f64, Vec<f64>)> = per_layer.into_iter().map(|(l, v)| (l as f64, v)).collect();
        series.push(geo_series(&format!("{} layers", f.layers), &pts, false));
    }
    let mut chart = line(
        "Drift per update by MoE layer, one line per depth (geometric mean over seeds, 95% band)",
        "MoE layer index (0 = first)",
        "share of activated experts that change per update",
        series,
        true,
    );
    chart
        .refs
        .push(reference(0.10, "GSPO paper: ~10% (48 layers)"));
    Ok(chart)
}

/// One panel per factor: the measured drift of the configurations that move it alone (with
/// the centre) and the fit's prediction with the other factors at the centre, each the
/// geometric mean over seeds with its 95% band, on log10 of the factor.
fn factors(regs: &[Regime], c: &Factors) -> Result<Stack> {
    let p = points(regs, From::Updates, "drift_expert_frac")?;
    let fit = fits(&p);
    let mut panels = Vec::new();
    for (i, name) in FACTORS.iter().enumerate() {
        let mut meas: Vec<(f64, Vec<f64>)> = p
            .iter()
            .filter(|(_, f, held, _)| !held && only(f, c, i))
            .map(|(_, f, _, v)| (value(f, i).log10(), v.values().copied().collect()))
            .collect();
        meas.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pred = |x: f64| -> Vec<f64> {
            let mut f = *c;
            match i {
                0 => f.layers = x,
                1 => f.d_model = x,
                2 => f.experts = x,
                3 => f.lr = x,
                _ => f.minibatches = x,
            }
            fit.values().map(|b: &[f64; P]| f.predict(b)).collect()
        };
        let fitted: Vec<(f64, Vec<f64>)> = meas
            .iter()
            .map(|(lx, _)| (*lx, pred(10f64.powf(*lx))))
            .collect();
        let series = vec![
            geo_series(
                "measured: geometric mean over seeds, 95% band",
                &meas,
                false,
            ),
            geo_series(
                "fit, other factors at the centre (95% band over seeds' fits)",
                &fitted,
                true,
            ),
        ];
        panels.push(line(
            &format!("against {name}"),
            &format!("log10 {name}"),
            "drift per update (slots)",
            series,
            true,
        ));
    }
    Ok(Stack {
        title: "Drift per update against each factor, the others at the centre".into(),
        panels,
    })
}

/// The held-out configurations: predicted against measured drift per update, per seed, on
/// log10 axes, with the identity line.
fn holdout(regs: &[Regime]) -> Result<LineChart> {
    let mut series = Vec::new();
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for (unit, col) in [
        ("slots", "drift_expert_frac"),
        ("routers", "drift_router_frac"),
    ] {
        let p = points(regs, From::Updates, col)?;
        let fit = fits(&p);
        let mut pts = Vec::new();
        for (_, f, held, v) in &p {
            if !*held {
                continue;
            }
            for (s, y) in v {
                if let (Some(b), true) = (fit.get(s), *y > 0.0) {
                    let (x, y) = (f.predict(b).log10(), y.log10());
                    lo = lo.min(x.min(y));
                    hi = hi.max(x.max(y));
                    pts.push((x, y));
                }
            }
        }
        series.push(Series {
            name: format!("{unit}: one point per held-out configuration and seed"),
            points: pts,
            ..Series::default()
        });
    }
    if lo.is_finite() {
        series.push(Series {
            name: "predicted = measured".into(),
            points: vec![(lo, lo), (hi, hi)],
            dashed: true,
            ..Series::default()
        });
    }
    let mut chart = line(
        "Held-out configurations: drift per update predicted by the fit against measured",
        "log10 predicted",
        "log10 measured",
        series,
        false,
    );
    chart.scatter = true;
    Ok(chart)
}

/// Claim (o)'s plots under `plots/scale/`, when the run declares it; returns the folder.
pub fn scale_plots(dir: &Path, regs: &[Regime]) -> Result<Option<String>> {
    if !regs
        .first()
        .is_some_and(|r| r.claims.contains(&Claim::ScaleDrift))
    {
        return Ok(None);
    }
    let Some(c) = regs.iter().find(|r| !r.holdout).and_then(|r| r.factors) else {
        return Ok(None);
    };
    let pdir = dir.join("plots/scale");
    std::fs::create_dir_all(&pdir)?;
    by_layer(regs, &c)?.save(&pdir, "drift_by_layer")?;
    factors(regs, &c)?.save(&pdir, "scale_factors")?;
    holdout(regs)?.save(&pdir, "scale_holdout")?;
    Ok(Some("plots/scale".into()))
}
