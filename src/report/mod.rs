//! `driftlab report <dir>`: rebuilds the summary, every plot and `report.md` from the Parquet
//! files and `config.json` alone (no training state).

pub mod charts;
pub mod checks;
pub mod claims;
pub mod compute;
pub mod defects;
pub mod depth;
pub mod endpoints;
pub mod figures;
pub mod findings;
pub mod fmt;
pub mod identical;
pub mod lengths;
pub mod load;
pub mod markdown;
pub mod metric;
pub mod paired;
pub mod regime;
pub mod roles;
pub mod run_info;
pub mod scale;
pub mod sign_flip;
pub mod slim;
pub mod stats;
pub mod summary;

pub use figures::PLOTS;
pub use load::{RunFrames, load_frames, regimes};
pub use run_info::RunInfo;
pub use stats::{MeanCi, mean_ci};
pub use summary::{ArmSummary, summarize};

use anyhow::{Context, Result};
use std::path::Path;

/// What `report` tolerates (the default: nothing).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportOptions {
    /// Report a folder without `config.json` (with a banner saying what that leaves out).
    pub allow_missing_config: bool,
}

/// Rebuild `summary.csv`, `summary.json`, `endpoints.json`, `plots/` and `report.md` in `dir`
/// from its files.
pub fn write_report(dir: &Path) -> Result<Vec<ArmSummary>> {
    write_report_with(dir, ReportOptions::default())
}

/// [`write_report`] with `opts`. Before it writes anything it checks the folder (see
/// [`checks`]): frames, `status.json` and `config.json` must hold the same cells; cells that
/// stopped before their last step are named in a banner and left out of the summary and
/// endpoints when any cell finished.
pub fn write_report_with(dir: &Path, opts: ReportOptions) -> Result<Vec<ArmSummary>> {
    let info = RunInfo::load(dir)?;
    anyhow::ensure!(
        info.found || opts.allow_missing_config,
        "{} is missing: without it the report cannot know the run's cells, declared steps or \
         claims; `driftlab report {} --allow-missing-config` reports the frames anyway, with \
         a banner saying what that leaves out",
        dir.join("config.json").display(),
        dir.display()
    );
    let f = load::load_frames_of(dir, &info).with_context(|| {
        format!(
            "{} does not hold a readable run (steps/updates/layers/events.parquet)",
            dir.display()
        )
    })?;
    let checked = checks::check(dir, &info, &f)?;
    let banners: Vec<String> = (!info.found)
        .then(|| checks::NO_CONFIG.to_string())
        .into_iter()
        .chain(checked.banner())
        .collect();
    let f = checked.frames_used(f)?;
    let sums = summarize(&f)?;
    summary::write_summary_files(dir, &sums)?;
    let regs = findings::regimes_of(&f, &info)?;
    let eps = findings::endpoints(&regs)?;
    crate::util::io::write_json_lines(&dir.join("endpoints.json"), &eps)?;
    // Every figure is remade from the frames: clear the old ones first, so that a figure the
    // report no longer makes does not linger beside the new ones.
    let plot_dir = dir.join("plots");
    if plot_dir.is_dir() {
        std::fs::remove_dir_all(&plot_dir)
            .with_context(|| format!("clearing {}", plot_dir.display()))?;
    }
    let plots = markdown::PlotFolders {
        regimes: figures::make_plots(dir, &regs, &eps)?,
        sweep: figures::sweep_plots(dir, &info, &regs, &eps)?,
        map: figures::map_plots(dir, &regs, &eps)?,
        scale: figures::scale_plots(dir, &regs)?,
    };
    let md = markdown::report(&f, &info, &sums, &regs, &eps, &plots, &banners)?;
    crate::util::io::write_atomic(&dir.join("report.md"), md.as_bytes())?;
    Ok(sums)
}
