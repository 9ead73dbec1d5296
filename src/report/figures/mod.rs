//! The plots of a run, from its frames: which series each figure shows (the drawing is in
//! [`super::charts`]). Every curve is a mean over seeds with its 95% Student-t band; paper
//! values are dashed reference lines labelled with their source.

use super::charts::{Chart, Faint, LineChart};
use super::endpoints::Endpoint;
use super::load::RunFrames;
use super::regime::Regime;
use anyhow::{Context, Result};
use std::path::Path;

mod frame_charts;
mod leaderboard;
mod opd;
mod panels;
mod scale;
mod series;
mod stability;
mod sweep;
use frame_charts::{
    clip_bars, clip_by_minibatch, drift_chart, drift_units, event_markers, reward_vs_compute,
};
pub(crate) use leaderboard::defect_caption;
pub use opd::OPD_PLOTS;
use panels::{drift_heatmap, forest, mechanism, variance_by_length, variance_by_prefix};
pub use scale::{SCALE_PLOTS, scale_plots};
use series::{band_chart, curves, line, reference};
pub use stability::{MAP_PLOTS, map_plots};
pub use sweep::{SWEEP_PLOTS, sweep_plots};

/// The plot files `report` writes for every regime (each as PNG and SVG).
/// One regime's plot folder: (regime, folder relative to the run, the plots made there).
pub type RegimePlots = (String, String, Vec<&'static str>);

pub const PLOTS: &[&str] = &[
    "forest",
    "reward",
    "reward_vs_compute",
    "eval_accuracy",
    "mechanism",
    "clip_frac",
    "clip_frac_by_minibatch",
    "drift",
    "drift_heatmap",
    "ratio_var_vs_len",
    "ratio_var_vs_prefix",
    "mismatch_kl",
    "drift_units",
];

/// Identical arms drawn once: the group's first arm named "a = b", the others dropped with
/// their faint lines (their rewards and accuracies are the same bits).
fn merge_twins(chart: &mut LineChart, same: &[Vec<String>]) {
    let mut keep = Vec::new();
    for (i, s) in chart.series.iter_mut().enumerate() {
        if super::identical::is_repeat(same, &s.name) {
            continue;
        }
        if let Some(g) = same.iter().find(|g| g[0] == s.name) {
            s.name = g.join(" = ");
        }
        keep.push(i);
    }
    chart.series = keep_only(std::mem::take(&mut chart.series), &keep);
    chart.faint = keep_only(std::mem::take(&mut chart.faint), &keep);
}

fn keep_only<T>(v: Vec<T>, keep: &[usize]) -> Vec<T> {
    v.into_iter()
        .enumerate()
        .filter(|(i, _)| keep.contains(i))
        .map(|(_, x)| x)
        .collect()
}

/// One regime's plot folder: in a run of several regimes each figure's title starts with
/// "Regime NAME:", so a figure read on its own says which regime it shows (the forest plot and
/// the leaderboard name it in their own titles).
struct Folder<'a> {
    dir: &'a Path,
    regime: Option<&'a str>,
}

impl Folder<'_> {
    fn save(&self, mut chart: impl Chart, stem: &str) -> Result<()> {
        if let Some(r) = self.regime {
            let t = chart.title_mut();
            *t = format!("Regime {r}: {t}");
        }
        chart.save(self.dir, stem)
    }
}

/// The figures a folder may lack the frames or columns for (a slimmed run's layers or
/// lengths, a run from before the prefixes frame or the drift units): each is drawn when its
/// data is there, and left out of `made` otherwise.
fn optional_plots(pdir: &Folder, r: &Regime, made: &mut Vec<&'static str>) -> Result<()> {
    let (f, same, multi) = (&r.frames, &r.same, false);
    let heat = drift_heatmap(f, multi, &same)?;
    if heat.panels.is_empty() {
        made.retain(|p| *p != "drift_heatmap");
    } else {
        pdir.save(heat, "drift_heatmap")?;
    }
    let by_len = variance_by_length(f, &same)?;
    if by_len.series.iter().all(|s| s.points.is_empty()) {
        made.retain(|p| *p != "ratio_var_vs_len");
    } else {
        pdir.save(by_len, "ratio_var_vs_len")?;
    }
    let by_prefix = variance_by_prefix(f, &same)?;
    if by_prefix.series.iter().all(|s| s.points.is_empty()) {
        made.retain(|p| *p != "ratio_var_vs_prefix");
    } else {
        pdir.save(by_prefix, "ratio_var_vs_prefix")?;
    }
    match drift_units(r)? {
        Some(c) => pdir.save(c, "drift_units")?,
        None => made.retain(|p| *p != "drift_units"),
    }
    Ok(())
}

/// At most this many seeds per series are drawn as faint lines; with more, the mean and its
/// band alone (hundreds of overlapping seed lines hide the means and swell the file).
const MAX_FAINT_SEEDS: usize = 20;

/// The faint per-seed lines when no series has more than [`MAX_FAINT_SEEDS`] seeds, and the
/// end of the chart's title that says whether they are drawn.
fn faint_if_few(faint: Vec<Faint>, drawn: &str) -> (Vec<Faint>, String) {
    let most = faint.iter().map(Vec::len).max().unwrap_or(0);
    if most <= MAX_FAINT_SEEDS {
        (faint, drawn.to_string())
    } else {
        (vec![], format!("{most} seeds per arm"))
    }
}

/// The figures drawn from the per-update frame: the mechanism, clipping and drift. A folder
/// committed without that frame (a study slimmed to its step and event frames) draws none of
/// them rather than empty axes.
fn update_plots(
    pdir: &Folder,
    f: &RunFrames,
    multi: bool,
    same: &[Vec<String>],
    made: &mut Vec<&'static str>,
) -> Result<()> {
    if f.updates.height() == 0 {
        made.retain(|p| !["mechanism", "clip_frac", "clip_frac_by_minibatch", "drift"].contains(p));
        return Ok(());
    }
    pdir.save(mechanism(f, multi, same)?, "mechanism")?;
    pdir.save(clip_bars(f)?, "clip_frac")?;
    let mut by_mb = clip_by_minibatch(f, multi)?;
    merge_twins(&mut by_mb, same);
    pdir.save(by_mb, "clip_frac_by_minibatch")?;
    pdir.save(drift_chart(f, multi)?, "drift")?;
    Ok(())
}

/// Every plot of one regime's frames under `pdir`; returns the names of those made (a figure
/// whose frame the folder does not keep, e.g. a slimmed run's layers or lengths, is left out
/// rather than drawn empty).
fn plots_in(dir: &Path, r: &Regime, eps: &[&Endpoint], named: bool) -> Result<Vec<&'static str>> {
    let (f, regime) = (&r.frames, r.name.as_str());
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let pdir = &Folder {
        dir,
        regime: named.then_some(regime),
    };
    // One regime's frames: series are named by arm alone.
    let multi = false;
    let same = &r.same;
    forest(eps, regime).save(dir, "forest")?;
    let (series, faint) = band_chart(&curves(&f.steps, multi, "step", "reward_mean")?, true);
    let (faint, tail) = faint_if_few(faint, "raw seeds faint");
    let mut chart = line(
        &format!("Training reward: EMA(0.9) mean over seeds, 95% band; {tail}"),
        "RL step",
        "reward",
        series,
        false,
    );
    chart.faint = faint;
    chart.markers = event_markers(f, multi, &chart.series)?;
    merge_twins(&mut chart, &same);
    pdir.save(chart, "reward")?;
    let mut rc = reward_vs_compute(f)?;
    merge_twins(&mut rc, &same);
    pdir.save(rc, "reward_vs_compute")?;
    let (series, faint) = band_chart(&curves(&f.steps, multi, "step", "eval_accuracy")?, false);
    let (faint, tail) = faint_if_few(faint, "seeds faint");
    let mut eval = line(
        &format!("Greedy eval accuracy (held-out set): mean over seeds, 95% band; {tail}"),
        "RL step",
        "eval accuracy",
        series,
        false,
    );
    eval.faint = faint;
    merge_twins(&mut eval, &same);
    pdir.save(eval, "eval_accuracy")?;
    let mut made: Vec<&'static str> = PLOTS.to_vec();
    update_plots(pdir, f, multi, same, &mut made)?;
    optional_plots(pdir, r, &mut made)?;
    if let Some(board) = leaderboard::leaderboard(r, eps)? {
        board.save(dir, "leaderboard")?;
        made.insert(0, "leaderboard");
    }
    if r.claims.contains(&crate::experiment::Claim::Opd) {
        for (mut chart, stem) in opd::opd_charts(r)? {
            merge_twins(&mut chart, same);
            pdir.save(chart, stem)?;
            made.push(stem);
        }
    }
    // A KL is positive and spans decades across regimes: always a log axis.
    let (series, _) = band_chart(&curves(&f.steps, multi, "step", "mismatch_kl_k3")?, false);
    if series.iter().all(|s| s.points.is_empty()) {
        // A folder committed without its mismatch columns (`slim --drop`): no empty chart.
        made.retain(|p| *p != "mismatch_kl");
        return Ok(made);
    }
    let mut mk = line(
        "Train–inference mismatch: k3 KL per token, rollout engine vs trainer (95% band)",
        "RL step",
        "k3 KL per token (engine vs trainer)",
        series,
        true,
    );
    // The R3 paper's values are about an engine that differs from the trainer.
    if r.mismatch {
        mk.refs = vec![
            reference(1.5e-3, "R3 paper: MoE 1.5e-3"),
            reference(6.4e-4, "R3 paper: dense 6.4e-4"),
            reference(7.5e-4, "R3 paper: MoE with R3 7.5e-4"),
        ];
    }
    pdir.save(mk, "mismatch_kl")?;
    Ok(made)
}

/// Plots of every regime: `plots/<name>.png|svg` for a single-regime run, else
/// `plots/<regime>/<name>.png|svg`. Returns (regime, folder relative to `dir`, the plots made)
/// per folder.
///
/// A run that declares claim (o) or (s) draws none: its regimes are the points of one fit (a
/// few updates of one arm each), drawn together under `plots/scale/` or `plots/sweep/`, and a
/// training-curve set per configuration would add a dozen figures each that show nothing about
/// the claim.
pub fn make_plots(dir: &Path, regs: &[Regime], eps: &[Endpoint]) -> Result<Vec<RegimePlots>> {
    use crate::experiment::Claim::{ScaleDrift, WidthDrift};
    if regs.first().is_some_and(|r| {
        r.claims
            .iter()
            .any(|c| matches!(c, ScaleDrift | WidthDrift))
    }) {
        return Ok(Vec::new());
    }
    let mine = |r: &str| eps.iter().filter(|e| e.regime == r).collect::<Vec<_>>();
    let single = regs.len() <= 1;
    let mut out = Vec::new();
    for r in regs {
        let folder = if single {
            "plots".to_string()
        } else {
            format!("plots/{}", r.name)
        };
        let made = plots_in(&dir.join(&folder), r, &mine(&r.name), !single)?;
        out.push((r.name.clone(), folder, made));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_are_drawn_faint_up_to_twenty_per_arm() {
        let lines = |n: usize| vec![vec![vec![(0.0, 0.0)]; n]; 2];
        let (few, tail) = super::faint_if_few(lines(20), "seeds faint");
        assert_eq!((few.len(), tail.as_str()), (2, "seeds faint"));
        let (many, tail) = super::faint_if_few(lines(46), "seeds faint");
        assert_eq!((many.len(), tail.as_str()), (0, "46 seeds per arm"));
    }
}
