//! The charts of one regime built from its frames: reward with its event markers, reward
//! against compute, clipping (per update and by minibatch), drift per update and the drift units.

use super::series::{band_chart, curves, line, reference};
use crate::metrics::collapse::EventKind;
use crate::metrics::frames::{i64_col, str_col};
use crate::report::charts::{BarChart, LineChart, Marker, MarkerKind, Series, spans_decades};
use crate::report::load::{RunFrames, distinct};
use crate::report::regime::Regime;
use crate::report::stats::mean_ci;
use crate::report::summary::{labelled, seed_means};
use anyhow::Result;
use polars::prelude::DataFrame;
use std::collections::BTreeMap;

/// The first collapse and the first warning of each cell, on the arm's smoothed mean reward
/// at that step (later events of the cell would bury the curves).
pub(super) fn event_markers(f: &RunFrames, multi: bool, reward: &[Series]) -> Result<Vec<Marker>> {
    if f.events.height() == 0 {
        return Ok(Vec::new());
    }
    let ev_label = str_col(&labelled(&f.events, multi)?, "label")?;
    let ev_step = i64_col(&f.events, "step")?;
    let ev_seed = i64_col(&f.events, "seed")?;
    let kind = str_col(&f.events, "kind")?;
    let mut seen = std::collections::HashSet::new();
    Ok((0..ev_label.len())
        .filter_map(|i| {
            let collapse = EventKind::parse(&kind[i]).is_ok_and(EventKind::is_collapse);
            // Events are in step order within a cell.
            if !seen.insert((ev_label[i].clone(), ev_seed[i], collapse)) {
                return None;
            }
            let s = reward.iter().find(|s| s.name == ev_label[i])?;
            let y = s
                .points
                .iter()
                .find(|p| p.0 as i64 == ev_step[i])
                .map(|p| p.1)?;
            Some(Marker {
                x: ev_step[i] as f64,
                y,
                kind: if collapse {
                    MarkerKind::Collapse
                } else {
                    MarkerKind::Warning
                },
            })
        })
        .collect())
}

/// Drift in the three units papers use (slots, routers, tokens with any layer changed), per
/// update and — where the regime has a mismatch — between the rollout engine and π_old: per
/// seed the mean over the regime's distinct MoE arms (a dense arm's drift is 0 by
/// construction), then mean and 95% interval over seeds,
/// with the papers' values in the same unit. `None` for a run whose frames lack the columns.
pub(super) fn drift_units(r: &Regime) -> Result<Option<BarChart>> {
    let f = &r.frames;
    let upd = [
        ("per update: slots", "drift_expert_frac"),
        ("per update: routers", "drift_router_frac"),
        ("per update: tokens", "drift_token_frac"),
    ];
    let mis = [
        ("engine vs π_old: slots", "mismatch_route_frac"),
        ("engine vs π_old: routers", "mismatch_router_frac"),
        ("engine vs π_old: tokens", "mismatch_token_frac"),
    ];
    let has = |df: &DataFrame, c: &str| df.height() > 0 && df.column(c).is_ok();
    if !upd.iter().all(|(_, c)| has(&f.updates, c)) {
        return Ok(None);
    }
    let mut wanted: Vec<(&str, &DataFrame, &str)> =
        upd.iter().map(|&(l, c)| (l, &f.updates, c)).collect();
    if r.mismatch && mis.iter().all(|(_, c)| has(&f.steps, c)) {
        wanted.extend(mis.iter().map(|&(l, c)| (l, &f.steps, c)));
    }
    let moe: Vec<&str> = r.distinct_moe().iter().map(|a| a.name.as_str()).collect();
    let mut bars = Vec::new();
    for (label, df, c) in wanted {
        let mut per_seed: BTreeMap<usize, (f64, usize)> = BTreeMap::new();
        for (arm, seeds) in seed_means(df, c)? {
            if !moe.contains(&arm.as_str()) {
                continue;
            }
            for (i, v) in seeds.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                let e = per_seed.entry(i).or_default();
                e.0 += v;
                e.1 += 1;
            }
        }
        let v: Vec<f64> = per_seed.values().map(|(s, n)| s / *n as f64).collect();
        if v.is_empty() {
            // Not measured in this folder (a column its committed form nulled or dropped): no
            // bar, rather than a bar at 0.
            continue;
        }
        let m = mean_ci(&v);
        let e = m
            .ci95
            .is_finite()
            .then(|| ((m.mean - m.ci95).max(1e-6), m.mean + m.ci95));
        bars.push((label.to_string(), m.mean.max(0.0), e));
    }
    let ten = if r.mismatch {
        "~10%: the GSPO paper's activated experts per update; the R3 paper's routers, engine vs trainer"
    } else {
        "GSPO paper: ~10% of activated experts per update"
    };
    let mut refs = vec![reference(0.10, ten)];
    if r.mismatch {
        refs.push(reference(
            0.94,
            "R3 paper: 94% of tokens differ in ≥ 1 layer, engine vs trainer",
        ));
    }
    let log = spans_decades(bars.iter().map(|b| b.1).chain(refs.iter().map(|x| x.y)));
    Ok(Some(BarChart {
        title: "Drift in three units: slots, routers, tokens (95% CI over seeds)".into(),
        y_label: "share that changed".into(),
        bars,
        log_y: log,
        refs,
    }))
}

/// Clipped-token fraction per arm with its 95% interval over seeds, and GSPO's values.
pub(super) fn clip_bars(f: &RunFrames) -> Result<BarChart> {
    let mut bars = Vec::new();
    for (a, seeds) in seed_means(&f.updates, "clip_frac_tok")? {
        let m = mean_ci(&seeds);
        let e = m
            .ci95
            .is_finite()
            .then(|| ((m.mean - m.ci95).max(1e-6), m.mean + m.ci95));
        bars.push((a, m.mean.max(0.0), e));
    }
    let refs = vec![
        reference(0.15, "GSPO paper: GSPO 0.15"),
        reference(0.0013, "GSPO paper: GRPO 0.0013"),
    ];
    let log = spans_decades(bars.iter().map(|b| b.1).chain([0.15, 0.0013]));
    Ok(BarChart {
        title: "Clipped-token fraction per update (95% CI over seeds)".into(),
        y_label: "share of tokens clipped".into(),
        bars,
        log_y: log,
        refs,
    })
}

/// Clipped-token fraction per minibatch index of a step (GSPO splits each rollout batch into 4
/// minibatches, Fig. 2): the first minibatch of a step is on-policy, so clipping comes from the
/// later ones. Mean over seeds of the per-cell means, 95% band.
pub(super) fn clip_by_minibatch(f: &RunFrames, multi: bool) -> Result<LineChart> {
    let (series, _) = band_chart(
        &curves(&f.updates, multi, "minibatch", "clip_frac_tok")?,
        false,
    );
    let log = spans_decades(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|&v| v > 0.0)
            .chain([0.15, 0.0013]),
    );
    let mut chart = line(
        "Clipped-token fraction by minibatch index within a step (95% band over seeds)",
        "minibatch index (0: the first update after the rollout, on-policy; zeros are not drawn on a log axis)",
        "share of tokens clipped",
        series,
        log,
    );
    chart.categorical_x = true;
    chart.refs = vec![
        reference(0.15, "GSPO paper: GSPO 0.15"),
        reference(0.0013, "GSPO paper: GRPO 0.0013"),
    ];
    Ok(chart)
}

/// Training reward (EMA) against compute, the response tokens trained (GSPO Fig. 1): per step
/// the mean over seeds of both, with the reward's 95% band.
pub(super) fn reward_vs_compute(f: &RunFrames) -> Result<LineChart> {
    // Per arm, per step: the seeds' tokens trained and reward EMAs.
    type AtStep = BTreeMap<usize, (Vec<f64>, Vec<f64>)>;
    let mut per: Vec<(String, AtStep)> = Vec::new();
    for ((arm, _), c) in crate::report::compute::curves(&f.steps)? {
        let mine = crate::report::load::named(&mut per, &arm);
        for (step, (x, y)) in c.into_iter().enumerate() {
            let e = mine.entry(step).or_default();
            e.0.push(x);
            e.1.push(y);
        }
    }
    // Spec order of the arms, as every other figure.
    let order = distinct(str_col(&f.steps, "arm").unwrap_or_default());
    per.sort_by_key(|(n, _)| order.iter().position(|o| o == n));
    let series = per
        .into_iter()
        .map(|(name, at)| {
            let mut s = Series {
                name,
                points: Vec::new(),
                band: Vec::new(),
                dashed: false,
                color: None,
            };
            for (xs, ys) in at.values() {
                let x = crate::util::moments::mean(xs);
                let m = mean_ci(ys);
                s.points.push((x, m.mean));
                if m.ci95.is_finite() {
                    s.band.push((x, m.mean - m.ci95, m.mean + m.ci95));
                }
            }
            s
        })
        .collect();
    Ok(line(
        "Training reward against compute: EMA(0.9) mean over seeds, 95% band",
        "response tokens trained (mean over seeds at each step)",
        "reward",
        series,
        false,
    ))
}

/// Expert drift per update against the RL step, the GSPO paper's ~10% marked.
pub(super) fn drift_chart(f: &RunFrames, multi: bool) -> Result<LineChart> {
    let (series, _) = band_chart(
        &curves(&f.updates, multi, "step", "drift_expert_frac")?,
        false,
    );
    let log = spans_decades(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain([0.10]),
    );
    let mut drift = line(
        "Expert drift per update: share of activated experts that changed (95% band)",
        "RL step",
        "share of activated experts that changed",
        series,
        log,
    );
    drift.refs.push(reference(
        0.10,
        "GSPO paper: ~10% per update (48-layer MoE)",
    ));
    Ok(drift)
}
