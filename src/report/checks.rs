//! What `report` checks of a folder before it writes: its frames, `status.json` and
//! `config.json` hold the same cells, and which cells stopped before their declared last step.
//!
//! A frame may be empty, or absent where the committed form leaves it out (see
//! [`super::load`]): what it holds is checked, not that it holds something. A frame that holds
//! rows must hold them of cells the status lists, up to the step the status says each ran to
//! (`steps` and `updates`, which every step writes, exactly that step).

use super::load::RunFrames;
use super::run_info::RunInfo;
use crate::experiment::CellState;
use crate::experiment::resume::{CellName, rows_of, show};
use crate::metrics::frames::{i64_col, str_col};
use crate::metrics::schema;
use anyhow::{Context, Result, bail};
use polars::prelude::{BooleanChunked, DataFrame, NewChunkedArray};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How many cells a message names before it counts the rest.
const NAMED: usize = 8;

/// One cell of `status.json` as the report reads it (its other fields may be null: a cell a
/// stop came before has no cold-start accuracy).
#[derive(Clone, Debug)]
struct Status {
    name: CellName,
    state: String,
    steps_done: usize,
}

/// A cell that stopped before its declared last step.
#[derive(Clone, Debug)]
pub struct Partial {
    pub name: CellName,
    pub steps_done: usize,
    /// Its declared steps (config.json's cell); `None` without the config.
    pub steps: Option<usize>,
}

/// What the checks found: the folder's cells and those among them that are partial.
#[derive(Clone, Debug)]
pub struct Checked {
    /// Cells in `status.json`.
    pub cells: usize,
    pub partial: Vec<Partial>,
}

/// Check `dir`'s frames `f` against its `status.json` and its config `info`; an error names
/// the file and the first cell that does not fit.
pub fn check(dir: &Path, info: &RunInfo, f: &RunFrames) -> Result<Checked> {
    let status = read_status(dir)?;
    if info.found && !info.cells.is_empty() {
        against_config(&status, info)?;
    }
    let done: BTreeMap<CellName, usize> = status
        .iter()
        .map(|s| (s.name.clone(), s.steps_done))
        .collect();
    let frames = [
        (&schema::STEPS, &f.steps),
        (&schema::UPDATES, &f.updates),
        (&schema::LAYERS, &f.layers),
        (&schema::LENGTHS, &f.lengths),
        (&schema::PREFIXES, &f.prefixes),
        (&schema::EVENTS, &f.events),
    ];
    for (s, df) in frames {
        check_frame(s, df, &done, info).with_context(|| {
            format!("{} does not fit its run", dir.join(s.file_name()).display())
        })?;
    }
    Ok(Checked {
        cells: status.len(),
        partial: partial(&status, info),
    })
}

/// Every cell of `dir/status.json`; an error when the file is missing or a cell is listed
/// twice.
fn read_status(dir: &Path) -> Result<Vec<Status>> {
    let path = dir.join("status.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (a run writes it when it ends or is stopped; a run killed before \
             that is finished by `driftlab experiment NAME --resume --out {}`)",
            path.display(),
            dir.display()
        )
    })?;
    let all: Vec<Value> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a list of cell statuses", path.display()))?;
    let mut seen = BTreeSet::new();
    let mut out = Vec::with_capacity(all.len());
    for v in all {
        let st: Option<Status> = (|| {
            Some(Status {
                name: (
                    v.get("regime")?.as_str()?.to_string(),
                    v.get("arm")?.as_str()?.to_string(),
                    v.get("seed")?.as_u64()?,
                ),
                state: v.get("status")?.as_str()?.to_string(),
                steps_done: v.get("steps_done")?.as_u64()? as usize,
            })
        })();
        let st = st.with_context(|| {
            format!(
                "{}: a cell without regime, arm, seed, status or steps_done: {v}",
                path.display()
            )
        })?;
        if !seen.insert(st.name.clone()) {
            bail!("{} lists cell {} twice", path.display(), show(&st.name));
        }
        out.push(st);
    }
    Ok(out)
}

/// The status's cells are the cells config.json says this folder ran.
fn against_config(status: &[Status], info: &RunInfo) -> Result<()> {
    let ran: Vec<CellName> = info
        .ran_cells()
        .iter()
        .map(|c| (c.regime.clone(), c.arm.clone(), c.seed))
        .collect();
    let ran_set: BTreeSet<&CellName> = ran.iter().collect();
    let listed: BTreeSet<&CellName> = status.iter().map(|s| &s.name).collect();
    if let Some(s) = status.iter().find(|s| !ran_set.contains(&s.name)) {
        bail!(
            "status.json lists cell {}, which config.json's cells do not hold ({} there, {} in \
             status.json): is config.json another run's?",
            show(&s.name),
            ran.len(),
            status.len()
        );
    }
    if let Some(c) = ran.iter().find(|c| !listed.contains(c)) {
        bail!(
            "config.json's cell {} has no status in status.json ({} of {} cells listed): the \
             run did not end (killed, or a cell failed); `driftlab experiment NAME --resume` \
             finishes it",
            show(c),
            status.len(),
            ran.len()
        );
    }
    Ok(())
}

/// Per cell of a frame, in order of first appearance: its rows and its last step.
fn frame_cells(df: &DataFrame) -> Result<Vec<(CellName, usize, i64)>> {
    let (regime, arm, seed, step) = (
        str_col(df, "regime")?,
        str_col(df, "arm")?,
        i64_col(df, "seed")?,
        i64_col(df, "step")?,
    );
    let mut cells: Vec<(CellName, usize, i64)> = Vec::new();
    let mut at: BTreeMap<CellName, usize> = BTreeMap::new();
    for i in 0..df.height() {
        let name = (regime[i].clone(), arm[i].clone(), seed[i] as u64);
        let k = *at.entry(name.clone()).or_insert_with(|| {
            cells.push((name, 0, i64::MIN));
            cells.len() - 1
        });
        cells[k].1 += 1;
        cells[k].2 = cells[k].2.max(step[i]);
    }
    Ok(cells)
}

/// One frame's rows against the statuses `done` (cell → steps it ran).
fn check_frame(
    s: &schema::FrameSchema,
    df: &DataFrame,
    done: &BTreeMap<CellName, usize>,
    info: &RunInfo,
) -> Result<()> {
    if df.height() == 0 {
        return Ok(());
    }
    if info.found && !info.cells.is_empty() {
        let names: BTreeSet<&str> = info.cells.iter().map(|c| c.experiment.as_str()).collect();
        if let Some(e) = str_col(df, "experiment")?
            .iter()
            .find(|e| !names.contains(e.as_str()))
        {
            bail!(
                "it holds rows of experiment '{e}', config.json is of '{}'",
                names.into_iter().collect::<Vec<_>>().join("', '")
            );
        }
    }
    let cells = frame_cells(df)?;
    // Every step writes one step row and at least one update row.
    let every_step = s.name == schema::STEPS.name || s.name == schema::UPDATES.name;
    for (name, rows, last) in &cells {
        let Some(&n) = done.get(name) else {
            bail!(
                "it holds rows of cell {}, which status.json does not list",
                show(name)
            );
        };
        if *last >= n as i64 || (every_step && *last + 1 != n as i64) {
            bail!(
                "its rows of cell {} end at step {last}, status.json says the cell ran {n} steps \
                 (frames written at different times: a write failed part way, e.g. on a full \
                 disk; rerun the cell)",
                show(name)
            );
        }
        if s.name == schema::STEPS.name && *rows != n {
            bail!(
                "it holds {rows} rows of cell {}, status.json says the cell ran {n} steps",
                show(name)
            );
        }
    }
    if every_step {
        let held: BTreeSet<&CellName> = cells.iter().map(|c| &c.0).collect();
        // Arms whose rows the committed form left out of this frame by design (`rows_kept`).
        let kept = info.rows_kept.get(s.name);
        let expected = |c: &CellName| kept.is_none_or(|arms| arms.contains(&c.1));
        if let Some((name, n)) = done
            .iter()
            .find(|(c, n)| **n > 0 && !held.contains(c) && expected(c))
        {
            bail!(
                "it holds no rows of cell {}, which status.json says ran {n} steps ({} of {} \
                 cells there: a write failed part way, e.g. on a full disk; rerun the run)",
                show(name),
                held.len(),
                done.values().filter(|&&n| n > 0).count()
            );
        }
    }
    Ok(())
}

/// The cells that stopped before their declared last step: stopped, or fewer steps than
/// config.json declares without a collapse.
fn partial(status: &[Status], info: &RunInfo) -> Vec<Partial> {
    let declared = |n: &CellName| {
        info.cells
            .iter()
            .find(|c| (&c.regime, &c.arm, c.seed) == (&n.0, &n.1, n.2))
            .map(|c| c.steps)
    };
    status
        .iter()
        .filter_map(|s| {
            let steps = declared(&s.name);
            let stopped = s.state == CellState::Stopped.name()
                || (s.state != CellState::Collapsed.name()
                    && steps.is_some_and(|d| s.steps_done < d));
            stopped.then(|| Partial {
                name: s.name.clone(),
                steps_done: s.steps_done,
                steps,
            })
        })
        .collect()
}

impl Checked {
    /// Whether the summary and endpoints leave the partial cells out: they do when at least
    /// one cell reached its last step.
    pub fn complete_only(&self) -> bool {
        !self.partial.is_empty() && self.partial.len() < self.cells
    }

    /// `f` without the rows of the partial cells when [`Checked::complete_only`], else `f`.
    pub fn frames_used(&self, f: RunFrames) -> Result<RunFrames> {
        if !self.complete_only() {
            return Ok(f);
        }
        let partial: BTreeSet<CellName> = self.partial.iter().map(|p| p.name.clone()).collect();
        f.map(|df| {
            if df.height() == 0 {
                return Ok(df.clone());
            }
            let keep: Vec<bool> = rows_of(df, &partial)?.into_iter().map(|p| !p).collect();
            Ok(df.filter(&BooleanChunked::from_slice("keep".into(), &keep))?)
        })
    }

    /// The banner at the top of report.md for a run with partial cells (`None` without).
    pub fn banner(&self) -> Option<String> {
        if self.partial.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .partial
            .iter()
            .take(NAMED)
            .map(|p| match p.steps {
                Some(d) => format!("{} ({} of {d} steps)", show(&p.name), p.steps_done),
                None => format!("{} ({} steps)", show(&p.name), p.steps_done),
            })
            .collect();
        let more = match self.partial.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        let used = if self.complete_only() {
            format!(
                "The summary, endpoints and figures use the {} cells that reached their last \
                 step only; `driftlab experiment NAME --resume` runs the others again.",
                self.cells - self.partial.len()
            )
        } else {
            "No cell reached its last step: the summary, endpoints and figures use every \
             cell's rows up to where it stopped, so their final values compare cells at \
             different steps."
                .to_string()
        };
        Some(format!(
            "**Interrupted run**: {} of {} cells stopped before their last step: {}{more}. {used}",
            self.partial.len(),
            self.cells,
            named.join(", ")
        ))
    }
}

/// The banner of a report written without config.json (`--allow-missing-config`).
pub const NO_CONFIG: &str = "**No config.json**: reported with `--allow-missing-config`. \
Without the run's resolved cells the report knows neither the cells' declared steps (a cell \
counts as stopped by its status only), nor the spec's claims (the default claims are tested, \
so Holm's m may differ from the run's), nor the regimes' descriptions, nor what each arm is \
(the findings that pick arms by it may be missing).";
