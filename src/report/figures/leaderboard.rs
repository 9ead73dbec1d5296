//! The fix leaderboard of a regime with a control (claim (n)): each arm's paired effect on the
//! final greedy eval accuracy against GRPO without replay, with its verdict, the share of its
//! cells that collapsed or had a token-ratio explosion, and its median seconds per RL step in
//! `bench.json` (`driftlab bench --rl --spec`: interleaved rounds, one thread) or else in this
//! run (where the frames keep the timings; cells ran side by side, so those costs compare arms
//! within the run, not machines). An arm that ran a defect of the run's build
//! ([`crate::report::defects`]) is marked † and a footnote says so, and whether its cost was
//! measured on a build without the defect.

use super::panels::{tone_of, verdict_tones};
use crate::experiment::Claim;
use crate::metrics::frames::{f64_col, str_col};
use crate::report::charts::{LeaderRow, Leaderboard};
use crate::report::endpoints::Endpoint;
use crate::report::regime::Regime;
use crate::util::moments::mean;
use anyhow::Result;
use std::collections::BTreeMap;

/// Median seconds per RL step of each arm (rollout + update + probe): from the folder's
/// `bench.json` where it was measured for this regime (interleaved rounds on one thread, the
/// cost of the arm itself), else from the steps frame (the cells' own steps, beside whatever
/// else ran); empty when neither is there. The second element says which.
/// The third element is the build the seconds came from (bench.json's, or the run's own).
#[allow(clippy::type_complexity)]
fn step_secs(r: &Regime) -> Result<(BTreeMap<String, f64>, &'static str, Option<String>)> {
    if let Some(b) = r.frames.bench.as_ref().filter(|b| b.regime == r.name) {
        return Ok((
            b.median_s.clone(),
            "cost: bench --rl, one thread",
            b.git_commit.clone(),
        ));
    }
    Ok((frame_secs(r)?, "cost in this run", r.build.clone()))
}

/// The footnote of the arms marked †: what they ran, and, where the cost was measured on a
/// build without the defect, that their cost is not the run's version's.
fn defect_note(r: &Regime, cost_build: Option<&str>) -> Option<String> {
    let short = |c: Option<&str>| c.map_or("?".to_string(), |c| c[..7.min(c.len())].to_string());
    let notes: Vec<String> = r
        .defects
        .iter()
        .map(|(arm, d)| {
            let cost = if d.in_build(cost_build) {
                String::new()
            } else {
                format!(
                    "; its cost is that of the corrected code (build {})",
                    short(cost_build)
                )
            };
            format!(
                "† {arm}: accuracy of {} (build {}, fixed in {}){cost}",
                d.short,
                short(r.build.as_deref()),
                d.fixed_in
            )
        })
        .collect();
    (!notes.is_empty()).then(|| notes.join("  "))
}

fn frame_secs(r: &Regime) -> Result<BTreeMap<String, f64>> {
    let s = &r.frames.steps;
    let cols = ["t_rollout", "t_update", "t_probe"];
    if s.height() == 0 || cols.iter().any(|c| s.column(c).is_err()) {
        return Ok(BTreeMap::new());
    }
    let arm = str_col(s, "arm")?;
    let t: Vec<Vec<Option<f64>>> = cols.iter().map(|c| f64_col(s, c)).collect::<Result<_>>()?;
    let mut by: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for i in 0..arm.len() {
        let parts: Option<Vec<f64>> = t.iter().map(|c| c[i]).collect();
        if let Some(p) = parts {
            by.entry(arm[i].clone()).or_default().push(p.iter().sum());
        }
    }
    Ok(by
        .into_iter()
        .map(|(a, mut v)| {
            v.sort_by(f64::total_cmp);
            (a, v[v.len() / 2])
        })
        .collect())
}

/// The leaderboard of `r` from its (n) endpoints, best effect first, the reference arm last;
/// `None` where the regime has none.
pub(super) fn leaderboard(r: &Regime, eps: &[&Endpoint]) -> Result<Option<Leaderboard>> {
    let mine: Vec<&Endpoint> = eps
        .iter()
        .copied()
        .filter(|e| e.claim == Claim::FixLeaderboard && e.primary)
        .collect();
    let Some(reference) = mine
        .iter()
        .find_map(|e| e.arms.as_ref().map(|a| a.0.clone()))
    else {
        return Ok(None);
    };
    let (secs, cost_from, cost_build) = step_secs(r)?;
    let marked = |name: &str| {
        if r.defects.iter().any(|(a, _)| a == name) {
            format!("{name} †")
        } else {
            name.to_string()
        }
    };
    let share = |name: &str, metric: &str| -> f64 {
        r.arms
            .arms
            .iter()
            .find(|(a, _)| a.name == name)
            .and_then(|(a, _)| a.per_seed.get(metric))
            .filter(|v| !v.is_empty())
            .map_or(0.0, |v| mean(v))
    };
    let row = |name: &str, effect: Option<(f64, (f64, f64))>, tone: usize| LeaderRow {
        label: marked(name),
        effect,
        tone,
        collapse: share(name, "collapsed"),
        explosion: share(name, "ratio_explosion"),
        secs: secs.get(name).copied(),
    };
    let mut rows: Vec<LeaderRow> = mine
        .iter()
        .filter_map(|e| {
            let (_, fix) = e.arms.as_ref()?;
            let x = e.est.as_ref()?;
            Some(row(fix, Some((x.mean, x.t_ci)), tone_of(&e.verdict)))
        })
        .collect();
    rows.sort_by(|a, b| {
        let m = |r: &LeaderRow| r.effect.map_or(f64::NEG_INFINITY, |e| e.0);
        m(b).total_cmp(&m(a))
    });
    rows.push(row(&reference, None, 3));
    let n = mine
        .first()
        .and_then(|e| e.est.as_ref())
        .map_or(0, |x| x.diffs.len());
    Ok(Some(Leaderboard {
        title: format!(
            "Regime {}: each arm against {reference} without replay, final greedy eval accuracy, {n} seeds",
            r.name
        ),
        x_label: format!("arm − {reference} (grey band: within ±δ)"),
        margin: mine[0].margin,
        cost_from,
        rows,
        tones: verdict_tones(),
        footnote: defect_note(r, cost_build.as_deref()),
    }))
}

/// report.md's note under `r`'s leaderboard, where an arm of it ran a defect of the run's
/// build: what the † rows ran, and which build their cost per step was measured on.
pub(crate) fn defect_caption(r: &Regime) -> Result<Option<String>> {
    if r.defects.is_empty() {
        return Ok(None);
    }
    let (_, _, cost_build) = step_secs(r)?;
    let short = |c: Option<&str>| c.map_or("?".to_string(), |c| c[..7.min(c.len())].to_string());
    let notes: Vec<String> = r
        .defects
        .iter()
        .map(|(arm, d)| {
            let cost = if d.in_build(cost_build.as_deref()) {
                "its cost per step was measured on that version too".to_string()
            } else {
                format!(
                    "its cost per step (`bench.json`) was measured on build `{}`, which has the fix: the figure pairs the accuracy of the version that ran with the cost of the corrected one",
                    short(cost_build.as_deref())
                )
            };
            format!(
                "`{arm}` (†) ran {} (build `{}`); its effect and its shares of broken cells are that version's, and {cost}.",
                d.short,
                short(r.build.as_deref()),
            )
        })
        .collect();
    Ok(Some(notes.join(" ")))
}
