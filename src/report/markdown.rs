//! `report.md`: the regimes, the summary table, the events, the findings and the plots.

use super::endpoints::Endpoint;
use super::findings::{Regime, findings_md};
use super::fmt::fmt_ci;
use super::load::RunFrames;
use super::metric::METRICS;
use super::run_info::RunInfo;
use super::stats::MeanCi;
use super::summary::ArmSummary;
use crate::metrics::frames::{i64_col, str_col};
use anyhow::Result;
use std::fmt::Write as _;

fn summary_table(md: &mut String, sums: &[ArmSummary]) -> Result<()> {
    writeln!(md, "## Summary per arm (mean ± 95% CI over seeds)\n")?;
    let shown: Vec<&str> = METRICS
        .iter()
        .filter(|m| m.in_table)
        .map(|m| m.name)
        .collect();
    let head = [
        "arm",
        "algorithm",
        "routing",
        "seeds",
        "final reward",
        "final eval acc",
        "steps to +0.1 reward",
    ]
    .into_iter()
    .chain(shown.iter().copied())
    .chain(["collapsed cells", "cells with warnings only"])
    .collect::<Vec<_>>();
    writeln!(md, "| {} |", head.join(" | "))?;
    writeln!(md, "|{}", "---|".repeat(head.len()))?;
    let c = |m: &MeanCi| fmt_ci(m, "–");
    for a in sums {
        let mut row = vec![
            a.arm.clone(),
            a.algorithm.clone(),
            a.routing.clone(),
            a.seeds.to_string(),
            c(&a.final_reward),
            c(&a.final_eval),
            format!("{} ({}/{})", c(&a.steps_to_target), a.reached, a.seeds),
        ];
        row.extend(shown.iter().map(|m| c(a.m(m))));
        row.extend([a.collapsed_cells.to_string(), a.warned_cells.to_string()]);
        writeln!(md, "| {} |", row.join(" | "))?;
    }
    writeln!(
        md,
        "\nfinal reward: mean reward over each cell's last tenth of steps. Steps to +0.1: first step where the reward EMA(0.9) exceeds its start by 0.1 (cells that reached it / all). Collapsed cells: seeds with a reward, entropy, non-finite or expert collapse; warnings only: seeds with a ratio explosion or gradient spike and no collapse.\n"
    )?;
    Ok(())
}

/// Arms that ran identical trajectories, per regime (see [`super::identical`]).
fn identical_arms(md: &mut String, regs: &[Regime]) -> Result<()> {
    let mut lines = Vec::new();
    for r in regs {
        for g in &r.same {
            let names: Vec<String> = g.iter().map(|a| format!("`{a}`")).collect();
            lines.push(format!("- regime `{}`: {}", r.name, names.join(" = ")));
        }
    }
    if lines.is_empty() {
        return Ok(());
    }
    writeln!(
        md,
        "## Identical arms
"
    )?;
    writeln!(
        md,
        "These arms sampled the same responses at every step of every seed (bitwise-equal rewards, accuracies and lengths), so they trained on the same data and differ by rounding only; they are one piece of evidence, and findings that pool arms count each group once.
"
    )?;
    for l in lines {
        writeln!(md, "{l}")?;
    }
    writeln!(md)?;
    Ok(())
}

fn events_table(md: &mut String, f: &RunFrames, sums: &[ArmSummary]) -> Result<()> {
    writeln!(md, "## Collapse events\n")?;
    if f.events.height() == 0 {
        writeln!(md, "None.\n")?;
        return Ok(());
    }
    writeln!(md, "| arm | kind | cells | first step |\n|---|---|---|---|")?;
    for a in sums {
        for (k, (n, first)) in &a.collapses {
            writeln!(md, "| {} | {k} | {n} | {first} |", a.arm)?;
        }
    }
    writeln!(md)?;
    Ok(())
}

/// Where `report` wrote its plots, relative to the run's folder.
pub struct PlotFolders {
    /// (regime, folder) per regime.
    pub regimes: Vec<super::figures::RegimePlots>,
    /// (folder, axis) of a sweep.
    pub sweep: Option<(String, String)>,
    /// The stability map's folder.
    pub map: Option<String>,
    /// Claim (o)'s folder.
    pub scale: Option<String>,
}

/// The whole of `report.md`; `banners` (what the folder's checks found: an interrupted run,
/// a missing config) come first, under the title.
pub fn report(
    f: &RunFrames,
    info: &RunInfo,
    sums: &[ArmSummary],
    regs: &[Regime],
    eps: &[Endpoint],
    plots: &PlotFolders,
    banners: &[String],
) -> Result<String> {
    let plot_dirs = &plots.regimes;
    let mut md = String::new();
    let name = str_col(&f.steps, "experiment")?
        .first()
        .cloned()
        .unwrap_or_default();
    writeln!(md, "# driftlab report: {name}\n")?;
    for b in banners {
        writeln!(md, "> {b}\n")?;
    }
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
    if f.updates.height() == 0 && f.steps.height() > 0 {
        md.push_str(
            "This folder keeps no per-update frame (committed without it, for the repository's size): the summary's per-update columns read –, and the drift, ratio and clipping figures are not drawn. The run's command rebuilds it.\n\n",
        );
    }
    md.push_str(&super::defects::header_md(info));
    md.push_str(&info.regimes_table());
    summary_table(&mut md, sums)?;
    identical_arms(&mut md, regs)?;
    events_table(&mut md, f, sums)?;
    md.push_str(&findings_md(regs, eps)?);
    writeln!(md)?;
    writeln!(md, "## Plots\n")?;
    let kept = |folder: &str| {
        info.plots_kept.as_ref().is_none_or(|k| {
            // `plots/<name>`, or `plots` itself (`.`) for a run of one regime.
            let sub = folder.strip_prefix("plots/").unwrap_or(".");
            k.iter().any(|x| x == sub)
        })
    };
    if let Some(folder) = &plots.map {
        writeln!(md, "### Stability map\n")?;
        figure_links(&mut md, folder, super::figures::MAP_PLOTS, kept(folder))?;
    }
    if let Some((folder, axis)) = &plots.sweep {
        writeln!(md, "### Along the sweep axis `{axis}`\n")?;
        let mut names = super::figures::SWEEP_PLOTS.to_vec();
        if regs
            .first()
            .is_some_and(|r| r.claims.contains(&crate::experiment::Claim::DepthDrift))
        {
            names.push("drift_fit");
        }
        figure_links(&mut md, folder, &names, kept(folder))?;
    }
    if let Some(folder) = &plots.scale {
        writeln!(md, "### What sets drift per update\n")?;
        figure_links(&mut md, folder, super::figures::SCALE_PLOTS, kept(folder))?;
    }
    for (regime, folder, made) in plot_dirs {
        if plot_dirs.len() > 1 {
            writeln!(md, "### Regime `{regime}`\n")?;
        }
        if !kept(folder) {
            figure_links(&mut md, folder, made, false)?;
            continue;
        }
        for p in made {
            writeln!(md, "![{p}]({folder}/{p}.svg)\n")?;
            if *p == "leaderboard"
                && let Some(r) = regs.iter().find(|r| r.name == *regime)
                && let Some(note) = super::figures::defect_caption(r)?
            {
                writeln!(md, "{note}\n")?;
            }
        }
    }
    Ok(md)
}

/// The figures `names` of `folder`: linked where the committed folder keeps them, else named
/// in one line (config.json's `plots_kept` leaves the folder out for the repository's size;
/// `driftlab report` draws them from the committed frames).
fn figure_links(md: &mut String, folder: &str, names: &[&str], kept: bool) -> Result<()> {
    if kept {
        for p in names {
            writeln!(md, "![{p}]({folder}/{p}.svg)\n")?;
        }
    } else {
        writeln!(
            md,
            "Not committed, for the repository's size: {}. `driftlab report` on this folder draws them into `{folder}/` from the committed frames.\n",
            names.join(", ")
        )?;
    }
    Ok(())
}
