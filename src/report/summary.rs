//! Per-arm summaries over seeds, computed with Polars: a lazy `group_by` per cell, then a mean
//! and 95% interval over the cells (seeds) of each arm.

use super::load::{RunFrames, distinct, regimes};
use super::metric::{METRICS, MetricMeans, Source, columns};
use super::stats::{MeanCi, mean_ci};
use crate::metrics::collapse::EventKind;
use crate::metrics::frames::{f64_col, i64_col, str_col};
use crate::util::io::{write_csv, write_json_lines};
use anyhow::Result;
use polars::prelude::*;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Per-arm summary over seeds.
#[derive(Clone, Debug, Serialize)]
pub struct ArmSummary {
    /// `regime/arm` in a run with several regimes, else the arm's name.
    pub arm: String,
    pub regime: String,
    /// The arm's name in the spec.
    pub name: String,
    pub algorithm: String,
    pub routing: String,
    /// `moe` or `dense` (empty for frames written before the `ffn` column existed).
    pub ffn: String,
    pub seeds: usize,
    /// Mean reward over each cell's last tenth of steps.
    pub final_reward: MeanCi,
    /// Each cell's last greedy eval accuracy.
    pub final_eval: MeanCi,
    /// First step where the reward EMA(0.9) exceeds its step-0 value by 0.1 (cells that never do are left out; `reached` counts those that do).
    pub steps_to_target: MeanCi,
    pub reached: usize,
    /// Every per-arm metric of the registry ([`super::metric::METRICS`]); read one with
    /// [`ArmSummary::m`].
    #[serde(flatten)]
    pub metrics: MetricMeans,
    /// Per event kind: (cells with at least one event, first step over cells).
    pub collapses: BTreeMap<String, (usize, i64)>,
    /// Cells (seeds) where training broke down: an event whose kind [`EventKind::is_collapse`].
    pub collapsed_cells: usize,
    /// Cells with a warning event only (ratio explosion, gradient spike) and no collapse.
    pub warned_cells: usize,
    /// The seeds of the arm's cells, in order; `per_seed` values are in this order.
    pub seed_ids: Vec<i64>,
    /// Per metric, the per-cell value of every seed (what the intervals above are over):
    /// `final_reward`, `final_eval`, `steps_to_target`, the per-cell means of the update and
    /// step metrics, and 1/0 per cell for `ratio_explosion` and `collapsed`.
    pub per_seed: BTreeMap<String, Vec<f64>>,
}

#[cfg(test)]
impl ArmSummary {
    /// A GRPO arm on the MoE with native routing, named `name`, with `per_seed` values of
    /// the given metrics (seeds 0, 1, …) and every summary statistic empty.
    pub(crate) fn blank(name: &str, per_seed: &[(&str, Vec<f64>)]) -> ArmSummary {
        let m = mean_ci(&[]);
        let n = per_seed.first().map_or(0, |p| p.1.len());
        ArmSummary {
            arm: name.into(),
            regime: "r".into(),
            name: name.into(),
            algorithm: "grpo".into(),
            ffn: "moe".into(),
            routing: "native".into(),
            seeds: n,
            final_reward: m,
            final_eval: m,
            steps_to_target: m,
            reached: 0,
            metrics: MetricMeans(vec![m; METRICS.len()]),
            collapses: BTreeMap::new(),
            collapsed_cells: 0,
            warned_cells: 0,
            seed_ids: (0..n as i64).collect(),
            per_seed: per_seed
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        }
    }
}

impl ArmSummary {
    /// The arm's mean and interval of the registry's metric `name`.
    pub fn m(&self, name: &str) -> &MeanCi {
        self.metrics.get(name)
    }
}

/// `df` with a `label` column: `regime/arm` when the run (`multi`) holds several regimes, else
/// the arm. Decided per run, not per frame: a frame may hold rows of only some regimes (events).
pub fn labelled(df: &DataFrame, multi: bool) -> Result<DataFrame> {
    let arm = str_col(df, "arm")?;
    let labels: Vec<String> = if multi {
        let reg = str_col(df, "regime")?;
        reg.iter()
            .zip(&arm)
            .map(|(r, a)| format!("{r}/{a}"))
            .collect()
    } else {
        arm
    };
    let mut out = df.clone();
    out.with_column(Column::new("label".into(), labels))?;
    Ok(out)
}

/// One row per cell (label, seed) in order of first appearance, with `firsts` (string
/// identity columns), each of `means` averaged over the cell's rows, and `extra` aggregations.
fn per_cell(
    df: &DataFrame,
    firsts: &[&str],
    means: &[&str],
    extra: Vec<Expr>,
) -> Result<DataFrame> {
    let mut aggs: Vec<Expr> = firsts.iter().map(|c| col(*c).first()).collect();
    aggs.extend(means.iter().map(|c| col(*c).mean()));
    aggs.extend(extra);
    Ok(df
        .clone()
        .lazy()
        .group_by_stable([col("label"), col("seed")])
        .agg(aggs)
        .collect()?)
}

/// Mean reward over the last tenth (at least one) of a cell's steps.
fn final_reward(r: &[f64]) -> f64 {
    let tail = (r.len() / 10).max(1);
    r[r.len().saturating_sub(tail)..].iter().sum::<f64>() / tail.min(r.len()).max(1) as f64
}

/// First step at which the reward EMA(0.9) is 0.1 above its start (NaN when never).
fn steps_to_target(r: &[f64]) -> f64 {
    let mut ema: Option<f64> = None;
    let mut start = None;
    for (k, &x) in r.iter().enumerate() {
        let e = ema.map_or(x, |e| 0.9 * e + 0.1 * x);
        ema = Some(e);
        if e >= *start.get_or_insert(e) + 0.1 {
            return k as f64;
        }
    }
    f64::NAN
}

/// Per label: (kind → (cells, first step)), collapsed cells, cells with warnings only.
type EventCounts = (BTreeMap<String, (usize, i64)>, usize, usize);

fn event_counts(events: &DataFrame) -> Result<HashMap<String, EventCounts>> {
    let collapse: Vec<bool> = str_col(events, "kind")?
        .iter()
        .map(|k| EventKind::parse(k).is_ok_and(EventKind::is_collapse))
        .collect();
    let mut ev = events.clone();
    ev.with_column(Column::new("collapse".into(), collapse))?;
    let by_kind = ev
        .clone()
        .lazy()
        .group_by_stable([col("label"), col("kind")])
        .agg([
            col("seed").n_unique().alias("cells"),
            col("step").min().alias("first"),
        ])
        .collect()?;
    let by_label = ev
        .lazy()
        .group_by_stable([col("label")])
        .agg([
            col("seed").n_unique().alias("all"),
            col("seed")
                .filter(col("collapse"))
                .n_unique()
                .alias("broke"),
        ])
        .collect()?;
    let mut out: HashMap<String, EventCounts> = HashMap::new();
    let (label, kind) = (str_col(&by_kind, "label")?, str_col(&by_kind, "kind")?);
    let (cells, first) = (i64_col(&by_kind, "cells")?, i64_col(&by_kind, "first")?);
    for i in 0..label.len() {
        let e = out.entry(label[i].clone()).or_default();
        e.0.insert(kind[i].clone(), (cells[i] as usize, first[i]));
    }
    let (label, all, broke) = (
        str_col(&by_label, "label")?,
        i64_col(&by_label, "all")?,
        i64_col(&by_label, "broke")?,
    );
    for i in 0..label.len() {
        let e = out.entry(label[i].clone()).or_default();
        e.1 = broke[i] as usize;
        e.2 = (all[i] - broke[i]) as usize;
    }
    Ok(out)
}

/// Every event as (label, seed, kind).
fn event_cells(ev: &DataFrame) -> Result<Vec<(String, i64, String)>> {
    let (l, s, k) = (
        str_col(ev, "label")?,
        i64_col(ev, "seed")?,
        str_col(ev, "kind")?,
    );
    Ok((0..l.len())
        .map(|i| (l[i].clone(), s[i], k[i].clone()))
        .collect())
}

/// Per seed of `label`, 1 where its cell had a ratio explosion (`ratio_explosion`) or a
/// collapse (`collapsed`), else 0.
fn event_flags(
    cells: &[(String, i64, String)],
    label: &str,
    seeds: &[i64],
) -> [(String, Vec<f64>); 2] {
    let has = |seed: i64, kind: &dyn Fn(&str) -> bool| {
        let hit = cells
            .iter()
            .any(|(l, s, k)| l == label && *s == seed && kind(k));
        f64::from(u8::from(hit))
    };
    let explosion = EventKind::RatioExplosion.name();
    let collapse = |k: &str| EventKind::parse(k).is_ok_and(EventKind::is_collapse);
    [
        (
            "ratio_explosion".into(),
            seeds.iter().map(|&s| has(s, &|k| k == explosion)).collect(),
        ),
        (
            "collapsed".into(),
            seeds.iter().map(|&s| has(s, &collapse)).collect(),
        ),
    ]
}

/// Per-(label, seed) values of the `means` columns of a per-cell table.
fn cell_values(cells: &DataFrame, means: &[&str]) -> Result<HashMap<(String, i64), Vec<f64>>> {
    let (label, seed) = (str_col(cells, "label")?, i64_col(cells, "seed")?);
    let cols: Vec<Vec<Option<f64>>> = means
        .iter()
        .map(|c| f64_col(cells, c))
        .collect::<Result<_>>()?;
    Ok((0..label.len())
        .map(|i| {
            let v = cols.iter().map(|c| c[i].unwrap_or(f64::NAN)).collect();
            ((label[i].clone(), seed[i]), v)
        })
        .collect())
}

/// The steps frame per cell: identity, step means, the reward series and the last eval.
fn step_cells(df: &DataFrame, multi: bool) -> Result<DataFrame> {
    let mut steps = labelled(df, multi)?;
    if steps.column("ffn").is_err() {
        steps.with_column(Column::new(
            "ffn".into(),
            vec![String::new(); steps.height()],
        ))?;
    }
    per_cell(
        &steps,
        &["regime", "arm", "algorithm", "routing", "ffn"],
        &columns(Source::Steps),
        vec![
            col("reward_mean").drop_nulls().alias("rewards"),
            col("eval_accuracy").drop_nulls().last().alias("final_eval"),
        ],
    )
}

pub fn summarize(f: &RunFrames) -> Result<Vec<ArmSummary>> {
    let multi = regimes(&f.steps).len() > 1;
    let steps = step_cells(&f.steps, multi)?;
    let (update_cols, step_cols) = (columns(Source::Updates), columns(Source::Steps));
    let updates = cell_values(
        &per_cell(&labelled(&f.updates, multi)?, &[], &update_cols, vec![])?,
        &update_cols,
    )?;
    let ev = labelled(&f.events, multi)?;
    let events = event_counts(&ev)?;
    let ev_cells = event_cells(&ev)?;
    let label = str_col(&steps, "label")?;
    let seed = i64_col(&steps, "seed")?;
    let (regime, arm) = (str_col(&steps, "regime")?, str_col(&steps, "arm")?);
    let (alg, routing) = (str_col(&steps, "algorithm")?, str_col(&steps, "routing")?);
    let ffn = str_col(&steps, "ffn")?;
    let step_means = cell_values(&steps, &step_cols)?;
    let final_eval = f64_col(&steps, "final_eval")?;
    let rewards = steps.column("rewards")?.list()?.clone();
    let mut out: Vec<ArmSummary> = Vec::new();
    let mut i = 0;
    while i < label.len() {
        let rows: Vec<usize> = (i..label.len())
            .take_while(|&j| label[j] == label[i])
            .collect();
        i += rows.len();
        let l = &label[rows[0]];
        let (mut fin, mut stt) = (Vec::new(), Vec::new());
        for &j in &rows {
            let r: Vec<f64> = rewards
                .get_as_series(j)
                .map(|s| {
                    s.f64()
                        .map(|c| c.into_no_null_iter().collect())
                        .unwrap_or_default()
                })
                .unwrap_or_default();
            fin.push(final_reward(&r));
            stt.push(steps_to_target(&r));
        }
        let mut per_seed: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        let mut over_seeds = |table: &HashMap<(String, i64), Vec<f64>>, name: &str, k: usize| {
            let v: Vec<f64> = rows
                .iter()
                .map(|&j| table.get(&(l.clone(), seed[j])).map_or(f64::NAN, |v| v[k]))
                .collect();
            let m = mean_ci(&v);
            per_seed.insert(name.into(), v);
            m
        };
        let (collapses, collapsed_cells, warned_cells) = events.get(l).cloned().unwrap_or_default();
        let fev: Vec<f64> = rows
            .iter()
            .map(|&j| final_eval[j].unwrap_or(f64::NAN))
            .collect();
        let metrics = MetricMeans(
            METRICS
                .iter()
                .map(|m| {
                    let (table, cols) = match m.source {
                        Source::Updates => (&updates, &update_cols),
                        Source::Steps => (&step_means, &step_cols),
                    };
                    let k = cols.iter().position(|c| *c == m.name).expect("own column");
                    over_seeds(table, m.name, k)
                })
                .collect(),
        );
        let seeds: Vec<i64> = rows.iter().map(|&j| seed[j]).collect();
        per_seed.extend(event_flags(&ev_cells, l, &seeds));
        per_seed.insert("final_reward".into(), fin.clone());
        per_seed.insert("final_eval".into(), fev.clone());
        per_seed.insert("steps_to_target".into(), stt.clone());
        out.push(ArmSummary {
            arm: l.clone(),
            regime: regime[rows[0]].clone(),
            name: arm[rows[0]].clone(),
            algorithm: alg[rows[0]].clone(),
            routing: routing[rows[0]].clone(),
            ffn: ffn[rows[0]].clone(),
            seeds: rows.len(),
            final_reward: mean_ci(&fin),
            final_eval: mean_ci(&fev),
            reached: stt.iter().filter(|x| x.is_finite()).count(),
            steps_to_target: mean_ci(&stt),
            metrics,
            collapses,
            collapsed_cells,
            warned_cells,
            seed_ids: seeds,
            per_seed,
        });
    }
    Ok(out)
}

/// Per label (in order of first appearance), per seed: the mean of `column` over that cell's
/// rows of `df`.
pub fn seed_means(df: &DataFrame, column: &str) -> Result<Vec<(String, Vec<f64>)>> {
    let multi = regimes(df).len() > 1;
    let cells = per_cell(&labelled(df, multi)?, &[], &[column], vec![])?;
    let (labels, v) = (str_col(&cells, "label")?, f64_col(&cells, column)?);
    Ok(distinct(labels.iter().cloned())
        .into_iter()
        .map(|l| {
            let seeds = (0..labels.len())
                .filter(|&i| labels[i] == l)
                .map(|i| v[i].unwrap_or(f64::NAN))
                .collect();
            (l, seeds)
        })
        .collect())
}

/// `summary.csv` (one row an arm of a regime: `regime` and `arm` in columns of their own) and
/// `summary.json`.
pub fn write_summary_files(dir: &Path, sums: &[ArmSummary]) -> Result<()> {
    let s = |f: &dyn Fn(&ArmSummary) -> String| sums.iter().map(f).collect::<Vec<String>>();
    let x = |f: &dyn Fn(&ArmSummary) -> f64| {
        sums.iter()
            .map(|a| Some(f(a)).filter(|v| v.is_finite()))
            .collect::<Vec<Option<f64>>>()
    };
    let n =
        |f: &dyn Fn(&ArmSummary) -> usize| sums.iter().map(|a| f(a) as i64).collect::<Vec<i64>>();
    let mut cols = vec![
        Column::new("regime".into(), s(&|a| a.regime.clone())),
        Column::new("arm".into(), s(&|a| a.name.clone())),
        Column::new("algorithm".into(), s(&|a| a.algorithm.clone())),
        Column::new("routing".into(), s(&|a| a.routing.clone())),
        Column::new("seeds".into(), n(&|a| a.seeds)),
        Column::new("final_reward_mean".into(), x(&|a| a.final_reward.mean)),
        Column::new("final_reward_ci95".into(), x(&|a| a.final_reward.ci95)),
        Column::new("final_eval_mean".into(), x(&|a| a.final_eval.mean)),
        Column::new("final_eval_ci95".into(), x(&|a| a.final_eval.ci95)),
        Column::new(
            "steps_to_target_mean".into(),
            x(&|a| a.steps_to_target.mean),
        ),
        Column::new("cells_reaching_target".into(), n(&|a| a.reached)),
        Column::new("collapse_cells".into(), n(&|a| a.collapsed_cells)),
        Column::new("warning_cells".into(), n(&|a| a.warned_cells)),
    ];
    // Every registry metric, its mean and interval, before the event counts.
    let events = cols.split_off(cols.len() - 2);
    for m in METRICS {
        cols.push(Column::new(
            format!("{}_mean", m.name).into(),
            x(&|a| a.m(m.name).mean),
        ));
        cols.push(Column::new(
            format!("{}_ci95", m.name).into(),
            x(&|a| a.m(m.name).ci95),
        ));
    }
    cols.extend(events);
    let mut df = DataFrame::new(sums.len(), cols)?;
    write_csv(&mut df, &dir.join("summary.csv"))?;
    write_json_lines(&dir.join("summary.json"), sums)
}
