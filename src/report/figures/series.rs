//! The figures' shared pieces: per-seed curves from a frame, their mean with a 95% band (cut
//! at 0 for quantities that cannot go below it), the EMA of reward curves, a line chart with
//! its defaults, and the paper's reference lines.

use crate::metrics::frames::{f64_col, i64_col, str_col};
use crate::report::charts::{Faint, LineChart, RefLine, Series};
use crate::report::load::distinct;
use crate::report::stats::mean_ci;
use crate::report::summary::labelled;
use anyhow::Result;
use polars::prelude::*;
use std::collections::BTreeMap;

/// Smoothing of the reward curves: EMA with this weight on the past.
pub(crate) const EMA: f64 = 0.9;

/// Per label (in order of first appearance), per seed: the points `(x, mean of column)`.
pub(crate) type Curves = Vec<(String, BTreeMap<i64, Vec<(f64, f64)>>)>;

pub(crate) fn curves(df: &DataFrame, multi: bool, x: &str, column: &str) -> Result<Curves> {
    if df.height() == 0 {
        return Ok(Vec::new());
    }
    let df = labelled(df, multi)?;
    let names = distinct(str_col(&df, "label")?);
    let g = df
        .lazy()
        .filter(col(column).is_not_null())
        .group_by_stable([col("label"), col("seed"), col(x)])
        .agg([col(column).mean().alias("v")])
        .sort(
            [x],
            SortMultipleOptions::default().with_maintain_order(true),
        )
        .collect()?;
    let (label, seed, xs, v) = (
        str_col(&g, "label")?,
        i64_col(&g, "seed")?,
        i64_col(&g, x)?,
        f64_col(&g, "v")?,
    );
    let mut out: Curves = names.into_iter().map(|n| (n, BTreeMap::new())).collect();
    for i in 0..g.height() {
        let (Some(k), Some(y)) = (out.iter().position(|(n, _)| *n == label[i]), v[i]) else {
            continue;
        };
        out[k].1.entry(seed[i]).or_default().push((xs[i] as f64, y));
    }
    Ok(out)
}

/// Per x, the mean over seeds and its 95% t band (over two seeds or more).
pub(crate) fn mean_band(name: &str, seeds: &BTreeMap<i64, Vec<(f64, f64)>>) -> Series {
    let mut at: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    for pts in seeds.values() {
        for &(x, y) in pts {
            at.entry(x as i64).or_default().push(y);
        }
    }
    let mut s = Series {
        name: name.into(),
        points: Vec::new(),
        band: Vec::new(),
        dashed: false,
        color: None,
    };
    // A quantity that is never negative (a share, a variance) gets its band cut at 0: the t
    // interval of a skewed mean can reach below what the quantity can take.
    let floor = if seeds.values().flatten().all(|p| p.1 >= 0.0) {
        0.0
    } else {
        f64::NEG_INFINITY
    };
    for (x, v) in at {
        let m = mean_ci(&v);
        s.points.push((x as f64, m.mean));
        if m.ci95.is_finite() {
            s.band
                .push((x as f64, (m.mean - m.ci95).max(floor), m.mean + m.ci95));
        }
    }
    s
}

pub(crate) fn ema(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut e: Option<f64> = None;
    pts.iter()
        .map(|&(x, y)| {
            let v = e.map_or(y, |e| EMA * e + (1.0 - EMA) * y);
            e = Some(v);
            (x, v)
        })
        .collect()
}

pub(crate) fn line(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: Vec<Series>,
    log_y: bool,
) -> LineChart {
    LineChart {
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        series,
        faint: vec![],
        log_y,
        markers: vec![],
        refs: vec![],
        scatter: false,
        categorical_x: false,
    }
}

/// Mean ± 95% band per label; `smooth` applies the EMA to every seed first; the raw
/// per-seed curves are drawn faint behind.
pub(crate) fn band_chart(c: &Curves, smooth: bool) -> (Vec<Series>, Vec<Faint>) {
    let series = c
        .iter()
        .map(|(n, seeds)| {
            let s: BTreeMap<i64, Vec<(f64, f64)>> = seeds
                .iter()
                .map(|(k, p)| (*k, if smooth { ema(p) } else { p.clone() }))
                .collect();
            mean_band(n, &s)
        })
        .collect();
    let faint = c
        .iter()
        .map(|(_, seeds)| seeds.values().cloned().collect())
        .collect();
    (series, faint)
}

pub(crate) fn reference(y: f64, label: &str) -> RefLine {
    RefLine {
        y,
        label: label.into(),
    }
}
