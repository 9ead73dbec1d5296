//! `--resume`: what an earlier, interrupted run of the same cells left in its folder. Cells
//! whose status says finished (every step ran, or collapsed) are kept with every row they
//! flushed; the others are run again from their first step, their partial rows dropped.

use super::cell::CellConfig;
use super::shard::Shard;
use super::status::{CellState, CellStatus};
use crate::metrics::frames::{Frames, i64_col, str_col};
use crate::util::io::read_parquet;
use anyhow::{Context, Result, bail};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;

/// The finished cells of an earlier run and their rows.
#[derive(Default)]
pub struct Prior {
    pub finished: Vec<CellStatus>,
    pub frames: Frames,
}

/// (regime, arm, seed): what names a cell within one experiment.
pub type CellName = (String, String, u64);

pub fn name_of(c: &CellConfig) -> CellName {
    (c.regime.clone(), c.arm.clone(), c.seed)
}

/// `regime/arm seed N`.
pub fn show(n: &CellName) -> String {
    format!("{}/{} seed {}", n.0, n.1, n.2)
}

/// The finished statuses in `status.json` (none when it is absent).
pub fn finished_statuses(dir: &Path) -> Result<Vec<CellStatus>> {
    let path = dir.join("status.json");
    if !path.exists() {
        return Ok(Vec::new());
    }
    let all: Vec<Value> = serde_json::from_slice(&std::fs::read(&path)?)
        .with_context(|| format!("reading {}", path.display()))?;
    let done = |v: &Value| {
        let s = v.get("status").and_then(Value::as_str).unwrap_or("");
        s == CellState::Ok.name() || s == CellState::Collapsed.name()
    };
    all.into_iter()
        .filter(done)
        .map(|v| serde_json::from_value(v).with_context(|| format!("reading {}", path.display())))
        .collect()
}

/// Per row of `df`: whether its (regime, arm, seed) is in `keep`.
pub fn rows_of(df: &polars::prelude::DataFrame, keep: &BTreeSet<CellName>) -> Result<Vec<bool>> {
    let (regime, arm, seed) = (
        str_col(df, "regime")?,
        str_col(df, "arm")?,
        i64_col(df, "seed")?,
    );
    Ok((0..df.height())
        .map(|i| keep.contains(&(regime[i].clone(), arm[i].clone(), seed[i] as u64)))
        .collect())
}

/// Remove the temporary files a killed process left in `dir` mid-write (`.NAME.tmpPID-N`,
/// see [`crate::util::io`]): never read, only in the way.
pub fn remove_temporaries(dir: &Path) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') && name.contains(".tmp") && e.path().is_file() {
            std::fs::remove_file(e.path())
                .with_context(|| format!("removing {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// Remove what a run leaves in `dir` (status, frames, config, temporaries), before a fresh
/// run there.
pub fn clear(dir: &Path) -> Result<()> {
    remove_temporaries(dir)?;
    let mut names: Vec<String> = crate::metrics::schema::frames()
        .iter()
        .map(|f| f.file_name())
        .collect();
    names.extend(["status.json".into(), "config.json".into()]);
    for n in names {
        let p = dir.join(n);
        if p.exists() {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    Ok(())
}

/// What `dir` holds of a run of exactly `cells` (as shard `shard`); an empty prior when `dir`
/// has no run yet, an error when it holds a run of something else.
pub fn load(dir: &Path, cells: &[CellConfig], shard: Option<Shard>) -> Result<Prior> {
    remove_temporaries(dir)?;
    let cfg_path = dir.join("config.json");
    if !cfg_path.exists() {
        return Ok(Prior::default());
    }
    let cfg: Value = serde_json::from_slice(&std::fs::read(&cfg_path)?)
        .with_context(|| format!("reading {}", cfg_path.display()))?;
    if let Some(what) = other_cells(&cfg, cells)? {
        bail!(
            "cannot resume {}: it holds a run of other cells ({what}); rerun without --resume \
             to start over, or choose another --out",
            dir.display(),
        );
    }
    let their_shard: Option<Shard> =
        serde_json::from_value(cfg.get("shard").cloned().unwrap_or(Value::Null))?;
    if their_shard != shard {
        bail!(
            "cannot resume {}: it holds shard {:?}, this run is shard {:?}",
            dir.display(),
            their_shard.map(|s| s.to_string()),
            shard.map(|s| s.to_string())
        );
    }
    let version = (env!("CARGO_PKG_VERSION"), super::version::git_commit());
    let theirs_v = (
        cfg.get("crate_version")
            .and_then(Value::as_str)
            .unwrap_or("?"),
        cfg.get("git_commit")
            .and_then(Value::as_str)
            .map(str::to_string),
    );
    if theirs_v.0 != version.0
        || (theirs_v.1.is_some() && version.1.is_some() && theirs_v.1 != version.1)
    {
        bail!(
            "cannot resume {}: it was written by driftlab {} ({}), this is {} ({}); rows of two \
             versions would mix. Rerun without --resume, or with the binary that started it",
            dir.display(),
            theirs_v.0,
            theirs_v.1.as_deref().unwrap_or("unknown commit"),
            version.0,
            version.1.as_deref().unwrap_or("unknown commit")
        );
    }
    let finished = finished_statuses(dir)?;
    let keep: BTreeSet<CellName> = finished
        .iter()
        .map(|s| (s.regime.clone(), s.arm.clone(), s.seed))
        .collect();
    let mut frames = Frames::default();
    for (frame, schema) in frames
        .all_mut()
        .into_iter()
        .zip(crate::metrics::schema::frames())
    {
        let path = dir.join(schema.file_name());
        if !path.exists() {
            continue;
        }
        let df = read_parquet(&path)?;
        frame
            .extend_from(&df, &rows_of(&df, &keep)?)
            .with_context(|| format!("resuming from {}", path.display()))?;
    }
    holds_rows_of(dir, &frames, &finished)?;
    Ok(Prior { finished, frames })
}

/// Whether the cells a folder's `config.json` (`cfg`) records differ from `cells`: how many
/// cells each has, the first differing cell and its first differing key path with both values.
pub fn other_cells(cfg: &Value, cells: &[CellConfig]) -> Result<Option<String>> {
    let theirs = super::cell_groups::cells_value(cfg);
    // Through text, as config.json was written, so f32 settings compare as they read back.
    let ours: Value = serde_json::from_str(&serde_json::to_string(cells)?)?;
    if theirs == ours {
        return Ok(None);
    }
    let n_theirs = theirs.as_array().map_or(0, Vec::len);
    let first = (0..cells.len().min(n_theirs))
        .find(|&i| theirs[i] != ours[i])
        .map(|i| {
            let key =
                crate::util::json_diff::first_difference(&theirs[i], &ours[i]).unwrap_or_default();
            format!(
                "; first different cell: {}, key {key} (there vs now)",
                show(&name_of(&cells[i]))
            )
        })
        .unwrap_or_default();
    Ok(Some(format!(
        "{n_theirs} cells there, {} now{first}",
        cells.len()
    )))
}

/// Every finished cell's rows are in the frames kept: every frame file is there, the step
/// frame has one row per step the status says ran and the update frame has some. A folder
/// that lost a frame (a full disk, a hand edit) is refused rather than resumed into a run
/// whose frames silently lack the kept cells.
fn holds_rows_of(dir: &Path, frames: &Frames, finished: &[CellStatus]) -> Result<()> {
    if finished.is_empty() {
        return Ok(());
    }
    for schema in crate::metrics::schema::frames() {
        let path = dir.join(schema.file_name());
        if !path.exists() {
            bail!(
                "cannot resume {}: status.json lists {} finished cells but {} is missing; \
                 rerun without --resume to start over",
                dir.display(),
                finished.len(),
                schema.file_name()
            );
        }
    }
    let count =
        |f: &crate::metrics::frames::Frame| -> Result<std::collections::BTreeMap<CellName, usize>> {
            let mut n = std::collections::BTreeMap::new();
            for (r, a, s) in f.cells()? {
                *n.entry((r.to_string(), a.to_string(), s)).or_insert(0) += 1;
            }
            Ok(n)
        };
    let (steps, updates) = (count(&frames.steps)?, count(&frames.updates)?);
    for st in finished {
        let name = (st.regime.clone(), st.arm.clone(), st.seed);
        let (n_steps, n_updates) = (
            steps.get(&name).copied().unwrap_or(0),
            updates.get(&name).copied().unwrap_or(0),
        );
        if n_steps != st.steps_done || (st.steps_done > 0 && n_updates == 0) {
            bail!(
                "cannot resume {}: status.json says {} finished after {} steps, but the frames \
                 hold {n_steps} step rows and {n_updates} update rows of it; rerun without \
                 --resume to start over",
                dir.display(),
                show(&name),
                st.steps_done
            );
        }
    }
    Ok(())
}
