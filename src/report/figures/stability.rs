//! The stability map (`plots/map/`): where in the space of drift, length, staleness and
//! mismatch each arm's reward drops against its regime's control, and how often it collapses.
//! Regimes place themselves with `map = { row, col }`; cells without a regime or without a
//! control are grey.

use crate::report::charts::{Chart, MapCell, MapPanel, StabilityMap};
use crate::report::claims::CONTROL_METRICS;
use crate::report::endpoints::{Endpoint, REWARD_MARGIN};
use crate::report::load::distinct;
use crate::report::regime::Regime;
use crate::report::stats::mean_ci;
use anyhow::{Context, Result};
use std::path::Path;

/// The plot files of a map, under `plots/map/` (each as PNG and SVG).
pub const MAP_PLOTS: &[&str] = &[
    "reward_change",
    "train_reward_change",
    "collapse_rate",
    "explosion_rate",
];

/// Write the map's plots; returns their folder (relative to `dir`), or None when no regime
/// places itself on a map.
pub fn map_plots(dir: &Path, regs: &[Regime], eps: &[Endpoint]) -> Result<Option<String>> {
    let placed: Vec<&Regime> = regs.iter().filter(|r| r.map.is_some()).collect();
    if placed.is_empty() {
        return Ok(None);
    }
    let at = |r: &Regime| r.map.clone().expect("placed");
    let rows = distinct(placed.iter().map(|r| at(r).row));
    let cols = distinct(placed.iter().map(|r| at(r).col));
    let arms = distinct(
        placed
            .iter()
            .flat_map(|r| r.arms.arms.iter().map(|(a, _)| a.name.clone())),
    );
    let pdir = dir.join("plots").join("map");
    std::fs::create_dir_all(&pdir).with_context(|| format!("creating {}", pdir.display()))?;
    // `paired`: the cells compare a regime with its control, so controls are labelled.
    let grid = |cell: &dyn Fn(&Regime, &str) -> MapCell, paired: bool| -> Vec<MapPanel> {
        arms.iter()
            .map(|arm| MapPanel {
                title: arm.clone(),
                cells: rows
                    .iter()
                    .map(|row| {
                        cols.iter()
                            .map(|col| {
                                placed
                                    .iter()
                                    .find(|r| at(r).row == *row && at(r).col == *col)
                                    .map_or(MapCell::EMPTY, |r| {
                                        let runs = r.arms.arms.iter().any(|(a, _)| a.name == *arm);
                                        match (runs, paired && r.control.is_none()) {
                                            (false, _) => MapCell::EMPTY,
                                            (true, true) => MapCell::CONTROL,
                                            (true, false) => cell(r, arm),
                                        }
                                    })
                            })
                            .collect()
                    })
                    .collect(),
            })
            .collect()
    };
    let rate = |metric: &'static str| {
        move |r: &Regime, arm: &str| {
            r.arms
                .arms
                .iter()
                .find(|(a, _)| a.name == arm)
                .and_then(|(a, _)| a.per_seed.get(metric))
                .map_or(MapCell::EMPTY, |v| MapCell {
                    mean: mean_ci(v).mean,
                    n: v.len(),
                    ..MapCell::EMPTY
                })
        }
    };
    let map = |title: &str, margin: Option<f64>, panels: Vec<MapPanel>| StabilityMap {
        title: title.into(),
        row_label: "drift per update".into(),
        rows: rows.clone(),
        cols: cols.clone(),
        margin,
        panels,
    };
    let [(eval, _), (train, _)] = CONTROL_METRICS;
    map(
        "Final eval accuracy (greedy, held-out prompts) change vs the no-drift control, paired by seed",
        Some(REWARD_MARGIN),
        grid(&|r, arm| change(eps, eval, r, arm), true),
    )
    .save(&pdir, "reward_change")?;
    map(
        "Final training reward change vs the no-drift control, paired by seed",
        Some(REWARD_MARGIN),
        grid(&|r, arm| change(eps, train, r, arm), true),
    )
    .save(&pdir, "train_reward_change")?;
    map(
        "Share of cells that collapsed",
        None,
        grid(&rate("collapsed"), false),
    )
    .save(&pdir, "collapse_rate")?;
    map(
        "Share of cells with a token-ratio explosion",
        None,
        grid(&rate("ratio_explosion"), false),
    )
    .save(&pdir, "explosion_rate")?;
    Ok(Some("plots/map".into()))
}

/// The map cell of (l)'s quantity `what` ([`CONTROL_METRICS`]) for this regime and arm.
fn change(eps: &[Endpoint], what: &str, r: &Regime, arm: &str) -> MapCell {
    eps.iter()
        .find(|e| {
            e.claim == crate::experiment::Claim::Control
                && e.regime == r.name
                && e.what.starts_with(&format!("{what}, `{arm}` "))
        })
        .and_then(|e| e.est.as_ref())
        .map_or(MapCell::EMPTY, |x| MapCell {
            mean: x.mean,
            lo: if x.n >= 2 { x.t_ci.0 } else { f64::NAN },
            hi: if x.n >= 2 { x.t_ci.1 } else { f64::NAN },
            control: false,
            n: x.n,
        })
}
