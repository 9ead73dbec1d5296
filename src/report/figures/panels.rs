//! The figures built from several frames or from the endpoints: the length-binned variance,
//! the drift heatmap, the mechanism chain and the forest plot.

use super::series::{Curves, band_chart, curves, line, mean_band, reference};
use crate::metrics::frames::{f64_col, i64_col, str_col};
use crate::report::charts::{
    ForestRow, HeatPanel, Heatmap, LineChart, RefLine, Stack, spans_decades,
};
use crate::report::endpoints::{Claimed, Endpoint, Verdict};
use crate::report::lengths::cell_bins;
use crate::report::load::{RunFrames, distinct};
use crate::report::summary::labelled;
use anyhow::Result;
use polars::prelude::*;
use std::collections::BTreeMap;

/// A guide slope `y ∝ x^beta` through the middle point of `s` (an end point can hold a
/// degenerate variance, ~1e-38), drawn dashed at every x of `s` so that it bends as it should
/// on a linear x axis.
fn guide(
    s: &crate::report::charts::Series,
    beta: f64,
    name: &str,
    color: usize,
) -> Option<crate::report::charts::Series> {
    let (x0, y0) = *s.points.get(s.points.len() / 2)?;
    Some(crate::report::charts::Series {
        name: name.into(),
        points: s
            .points
            .iter()
            .map(|&(x, _)| (x, y0 * (x / x0).powf(beta)))
            .collect(),
        band: Vec::new(),
        dashed: true,
        color: Some(color),
    })
}

/// Var(Σ_t log w) and Var(mean_t log w) per length bin: per seed the mean over the regime's
/// distinct arms of each cell's pooled bin variance, then mean ± 95% band over seeds.
pub(super) fn variance_by_length(f: &RunFrames, same: &[Vec<String>]) -> Result<LineChart> {
    let bins = cell_bins(&f.lengths)?;
    // seed → bin → (Σ sum_var, Σ mean_var, Σ len_mean, arms)
    type Acc = BTreeMap<i64, BTreeMap<i64, (f64, f64, f64, usize)>>;
    let mut acc: Acc = BTreeMap::new();
    for ((arm, seed), bs) in &bins {
        if crate::report::identical::is_repeat(same, arm) {
            continue;
        }
        for b in bs.iter().filter(|b| b.df >= crate::report::lengths::MIN_DF) {
            let e = acc.entry(*seed).or_default().entry(b.len_lo).or_default();
            e.0 += b.sum_var;
            e.1 += b.mean_var;
            e.2 += b.len_mean;
            e.3 += 1;
        }
    }
    let per = |which: usize| -> BTreeMap<i64, Vec<(f64, f64)>> {
        acc.iter()
            .map(|(s, m)| {
                let pts = m
                    .iter()
                    .map(|(lo, v)| {
                        let y = if which == 0 { v.0 } else { v.1 };
                        (*lo as f64, y / v.3 as f64)
                    })
                    .collect();
                (*s, pts)
            })
            .collect()
    };
    let mut tok = mean_band("Var(Σ_t log w): the token ratios' product", &per(0));
    let mut seq = mean_band("Var(mean_t log w): GSPO's length-normalised ratio", &per(1));
    // Place each bin at its mean length over cells.
    let mut at: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
    for m in acc.values() {
        for (lo, v) in m {
            let e = at.entry(*lo).or_default();
            e.0 += v.2 / v.3 as f64;
            e.1 += 1;
        }
    }
    let x = |lo: f64| at.get(&(lo as i64)).map_or(lo, |(s, n)| s / *n as f64);
    for s in [&mut tok, &mut seq] {
        s.points.iter_mut().for_each(|p| p.0 = x(p.0));
        s.band.iter_mut().for_each(|b| b.0 = x(b.0));
    }
    // Guide slopes of independent token log-ratios: Var(Σ) ∝ length (β = 1), Var(mean) ∝
    // 1/length (β = −1).
    let guides: Vec<_> = [
        guide(&tok, 1.0, "guide: ∝ length (independent tokens, β = 1)", 0),
        guide(
            &seq,
            -1.0,
            "guide: ∝ 1/length (independent tokens, β = −1)",
            1,
        ),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut series = vec![tok, seq];
    series.extend(guides);
    Ok(line(
        "Log-ratio variance per response-length bin (off-policy updates; 95% band over seeds)",
        "response length (tokens, bin mean)",
        "variance over responses",
        series,
        true,
    ))
}

/// Var(S_ℓ), its uncorrelated-token value Σ_t Var(log w_t) and Var(S_ℓ / ℓ) against the prefix
/// length ℓ: per seed the mean over the regime's distinct arms of each cell's pooled value,
/// then mean ± 95% band over seeds, with guide slopes 1 and −1 through the middle prefix.
pub(super) fn variance_by_prefix(f: &RunFrames, same: &[Vec<String>]) -> Result<LineChart> {
    use crate::report::lengths::{MIN_DF, Prefix, cell_prefixes};
    let cells = cell_prefixes(&f.prefixes)?;
    let per = |v: fn(&Prefix) -> f64| -> BTreeMap<i64, Vec<(f64, f64)>> {
        // seed → ℓ → (Σ value, arms)
        let mut acc: BTreeMap<i64, BTreeMap<i64, (f64, usize)>> = BTreeMap::new();
        for ((arm, seed), ps) in &cells {
            if crate::report::identical::is_repeat(same, arm) {
                continue;
            }
            for p in ps.iter().filter(|p| p.df >= MIN_DF) {
                let e = acc.entry(*seed).or_default().entry(p.len).or_default();
                e.0 += v(p);
                e.1 += 1;
            }
        }
        acc.into_iter()
            .map(|(s, m)| {
                let pts = m
                    .iter()
                    .map(|(l, v)| (*l as f64, v.0 / v.1 as f64))
                    .collect();
                (s, pts)
            })
            .collect()
    };
    let sum = mean_band("Var(S_ℓ), S_ℓ = Σ_{t<ℓ} log w_t", &per(|p| p.sum_var));
    let indep = mean_band(
        "Σ_{t<ℓ} Var(log w_t): S_ℓ's variance with uncorrelated tokens",
        &per(|p| p.pos_var),
    );
    let mean = mean_band(
        "Var(S_ℓ / ℓ): the length-normalised ratio",
        &per(Prefix::mean_var),
    );
    let guides: Vec<_> = [
        guide(&sum, 1.0, "guide: ∝ ℓ (β = 1)", 0),
        guide(&mean, -1.0, "guide: ∝ 1/ℓ (β = −1)", 2),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut series = vec![sum, indep, mean];
    series.extend(guides);
    Ok(line(
        "Log-ratio variance over a response's first ℓ tokens (same responses at every ℓ; 95% band)",
        "prefix length ℓ (tokens)",
        "variance over responses",
        series,
        true,
    ))
}

/// Drift per (layer, step), mean over seeds and minibatches, one panel per distinct arm.
pub(super) fn drift_heatmap(f: &RunFrames, multi: bool, same: &[Vec<String>]) -> Result<Heatmap> {
    let mut panels = Vec::new();
    if f.layers.height() > 0 {
        let df = labelled(&f.layers, multi)?;
        let g = df
            .lazy()
            .filter(col("drift_expert_frac").is_not_null())
            .group_by_stable([col("label"), col("arm"), col("layer"), col("step")])
            .agg([col("drift_expert_frac").mean().alias("v")])
            .collect()?;
        let (label, arm) = (str_col(&g, "label")?, str_col(&g, "arm")?);
        let (layer, step, v) = (
            i64_col(&g, "layer")?,
            i64_col(&g, "step")?,
            f64_col(&g, "v")?,
        );
        for name in distinct(label.iter().cloned()) {
            let rows: Vec<usize> = (0..g.height()).filter(|&i| label[i] == name).collect();
            if crate::report::identical::is_repeat(same, &arm[rows[0]]) {
                continue;
            }
            let n_layers = rows.iter().map(|&i| layer[i]).max().unwrap_or(0) as usize + 1;
            let steps: Vec<i64> = {
                let mut s: Vec<i64> = rows.iter().map(|&i| step[i]).collect();
                s.sort();
                s.dedup();
                s
            };
            let mut values = vec![vec![f64::NAN; steps.len()]; n_layers];
            for &i in &rows {
                let c = steps.binary_search(&step[i]).expect("step listed");
                values[layer[i] as usize][c] = v[i].unwrap_or(f64::NAN);
            }
            panels.push(HeatPanel {
                title: name,
                rows: n_layers,
                cols: steps.iter().map(|&s| s as f64).collect(),
                values,
            });
        }
    }
    let log = spans_decades(
        panels
            .iter()
            .flat_map(|p| p.values.iter().flatten().copied()),
    );
    Ok(Heatmap {
        title: "Expert drift per update by layer and step, mean over seeds; grey: none".into(),
        x_label: "RL step".into(),
        y_label: "MoE layer".into(),
        log,
        panels,
    })
}

/// Drift → token ratios → clipping → reward, aligned on the step axis, for the regime's
/// distinct arms.
pub(super) fn mechanism(f: &RunFrames, multi: bool, same: &[Vec<String>]) -> Result<Stack> {
    let keep = |c: Curves| -> Curves {
        c.into_iter()
            .filter(|(l, _)| {
                !crate::report::identical::is_repeat(same, l.rsplit('/').next().unwrap_or(l))
            })
            .collect()
    };
    let panel =
        |df: &DataFrame, column: &str, y: &str, log: bool, smooth: bool| -> Result<LineChart> {
            let c = keep(curves(df, multi, "step", column)?);
            let (series, _) = band_chart(&c, smooth);
            let refs: Vec<RefLine> = if column == "drift_expert_frac" {
                vec![reference(0.10, "GSPO paper: ~10% (48 layers)")]
            } else {
                vec![]
            };
            // The largest ratio is heavy-tailed (a band over seeds reaches below 0 on a
            // linear axis): always logarithmic.
            let log = column == "ratio_tok_max"
                || log
                    && spans_decades(
                        series
                            .iter()
                            .flat_map(|s| s.points.iter().map(|p| p.1))
                            .chain(refs.iter().map(|r| r.y)),
                    );
            let mut chart = line("", "RL step", y, series, log);
            chart.refs = refs;
            Ok(chart)
        };
    // (frame, column, y label, log axis, smoothed, name in the title), top to bottom.
    let chain = [
        (
            &f.updates,
            "drift_expert_frac",
            "drift per update",
            true,
            false,
            "drift",
        ),
        (
            &f.updates,
            "ratio_tok_max",
            "largest token ratio",
            true,
            false,
            "ratio max",
        ),
        (
            &f.updates,
            "ratio_tok_var",
            "token-ratio variance",
            true,
            false,
            "ratio variance",
        ),
        (
            &f.updates,
            "clip_frac_tok",
            "clipped-token fraction",
            true,
            false,
            "clipping",
        ),
        (
            &f.steps,
            "reward_mean",
            "reward (EMA 0.9)",
            false,
            true,
            "reward",
        ),
    ];
    // A metric the folder's frames do not hold (a trimmed shard's nulls, a dense run's drift)
    // gets no empty panel, and the title names only what is drawn.
    let (mut panels, mut names) = (Vec::new(), Vec::new());
    for (df, column, y, log, smooth, name) in chain {
        let c = panel(df, column, y, log, smooth)?;
        if c.series.iter().any(|s| !s.points.is_empty()) {
            panels.push(c);
            names.push(name);
        }
    }
    Ok(Stack {
        title: format!("Mechanism: {} (seed mean, 95% band)", names.join(" → ")),
        panels,
    })
}

/// An endpoint's description short enough for a forest-plot row.
fn compact(what: &str) -> String {
    let mut s = what.replace('`', "");
    for cut in [
        ", mean over distinct arms",
        ", within cells",
        ", off-policy updates",
        "share of activated experts that change ",
    ] {
        s = s.replace(cut, "");
    }
    if s.chars().count() > 60 {
        s = s.chars().take(59).collect::<String>() + "…";
    }
    s
}

/// The forest plot of one regime's endpoints: effects in units of their margin δ.
pub(super) fn forest(eps: &[&Endpoint], regime: &str) -> crate::report::charts::Forest {
    let rows = eps
        .iter()
        .filter(|e| e.claimed != Claimed::Describe)
        .filter_map(|e| {
            let x = e.est.as_ref()?;
            let d = e.margin;
            Some(ForestRow {
                label: format!("({}) {}", e.claim, compact(&e.what)),
                effect: x.mean / d,
                ci: (x.t_ci.0 / d, x.t_ci.1 / d),
                reference: e.reference.as_ref().map(|r| r.0 / d),
                tone: tone_of(&e.verdict),
            })
        })
        .collect();
    crate::report::charts::Forest {
        title: format!("Regime {regime}: paired effects with 95% t intervals, in units of δ"),
        x_label: "effect / δ (0: no effect; grey band: within ±δ)".into(),
        rows,
        tones: verdict_tones(),
    }
}

/// The colour index of a verdict in the forest plot and the leaderboard.
pub(super) fn tone_of(v: &Verdict) -> usize {
    match v {
        Verdict::Holds { .. } => 0,
        Verdict::DoesNotHold => 1,
        Verdict::Inconclusive { .. } => 2,
        Verdict::Secondary => 3,
        Verdict::Reversed => 4,
    }
}

/// The legend words of [`tone_of`]'s indices.
pub(super) fn verdict_tones() -> Vec<String> {
    [
        "holds",
        "does not hold",
        "inconclusive",
        "secondary",
        "reversed",
    ]
    .map(String::from)
    .to_vec()
}
