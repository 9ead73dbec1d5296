//! A run's frames as the report reads them: from Parquet, each sorted by cell, regime by
//! regime.

use super::run_info::RunInfo;
use crate::metrics::frames::str_col;
use crate::metrics::schema;
use crate::util::io::read_parquet;
use anyhow::Result;
use polars::prelude::*;
use std::path::Path;

/// The six frames of a run, rows in a fixed order (see [`load_frames`]).
#[derive(Clone)]
pub struct RunFrames {
    pub steps: DataFrame,
    pub updates: DataFrame,
    pub layers: DataFrame,
    /// Empty for runs written before the lengths frame existed.
    pub lengths: DataFrame,
    /// Empty for runs written before the prefixes frame existed.
    pub prefixes: DataFrame,
    pub events: DataFrame,
    /// The folder's `bench.json` (`driftlab bench --rl --spec`), where it has one: per-arm
    /// step costs measured in interleaved rounds, which the fix leaderboard shows.
    pub bench: Option<crate::bench::arms::ArmBench>,
}

impl RunFrames {
    /// The rows of one regime.
    pub fn regime(&self, regime: &str) -> Result<RunFrames> {
        self.map(|df| {
            if df.width() == 0 {
                return Ok(df.clone());
            }
            Ok(df
                .clone()
                .lazy()
                .filter(col("regime").eq(lit(regime)))
                .collect()?)
        })
    }

    /// Every frame through `keep` (the rows a view of the run keeps), the bench as it is.
    pub fn map(&self, keep: impl Fn(&DataFrame) -> Result<DataFrame>) -> Result<RunFrames> {
        Ok(RunFrames {
            steps: keep(&self.steps)?,
            updates: keep(&self.updates)?,
            layers: keep(&self.layers)?,
            lengths: keep(&self.lengths)?,
            prefixes: keep(&self.prefixes)?,
            events: keep(&self.events)?,
            bench: self.bench.clone(),
        })
    }
}

/// Distinct values of the `regime` column in order of appearance.
pub fn regimes(df: &DataFrame) -> Vec<String> {
    distinct(str_col(df, "regime").unwrap_or_default())
}

pub use crate::util::names::distinct;

/// The frames of the run in `dir`, each sorted by cell — in spec order (`config.json`), else
/// in order of first appearance — then seed, step, minibatch and layer (those present), so
/// that summaries and reports do not depend on the order in which parallel cells flushed.
pub fn load_frames(dir: &Path) -> Result<RunFrames> {
    load_frames_of(dir, &RunInfo::load(dir)?)
}

/// [`load_frames`] with the run's `config.json` already read.
pub fn load_frames_of(dir: &Path, info: &RunInfo) -> Result<RunFrames> {
    let order = info.order();
    let [steps, updates, layers, lengths, prefixes, events] = schema::frames().map(|s| {
        let path = dir.join(s.file_name());
        // A folder may leave out its per-layer, per-length and per-prefix frames (a run from
        // before a frame existed; the committed stability map, whose Parquet budget holds its
        // step, update and event frames only): the figures that read them are then left out.
        let optional = [&schema::LENGTHS, &schema::LAYERS, &schema::PREFIXES];
        if optional.iter().any(|o| o.name == s.name) && !path.exists() {
            return Ok(DataFrame::empty());
        }
        read_parquet(&path)
            .and_then(|df| with_dropped(df, s, info))
            .and_then(|df| sorted_by_cell(df, &order))
    });
    Ok(RunFrames {
        steps: steps?,
        updates: updates?,
        layers: layers?,
        lengths: lengths?,
        prefixes: prefixes?,
        events: events?,
        bench: crate::bench::arms::ArmBench::load(dir)?,
    })
}

/// A metric column that `driftlab slim --drop` took out of a committed folder (beyond the
/// columns no report reads) comes back as nulls, the schema's "does not apply": summaries
/// leave its metric out and figures of it are not drawn, as for a run that never measured it.
fn with_dropped(mut df: DataFrame, s: &schema::FrameSchema, info: &RunInfo) -> Result<DataFrame> {
    let unread = crate::report::slim::unread(s.name);
    let n = df.height();
    for name in info.slimmed.get(s.name).into_iter().flatten() {
        let float = s
            .columns()
            .any(|c| c.name == name && matches!(c.dtype, schema::Dtype::Float));
        if float && !unread.contains(&name.as_str()) && df.column(name).is_err() {
            df.with_column(Column::full_null(name.into(), n, &DataType::Float64))?;
        }
    }
    Ok(df)
}

fn sorted_by_cell(df: DataFrame, order: &[(String, String)]) -> Result<DataFrame> {
    if df.height() == 0 {
        return Ok(df);
    }
    let arms = str_col(&df, "arm")?;
    let regimes = str_col(&df, "regime")?;
    let mut ranks: Vec<(String, String)> = order.to_vec();
    let rank: Vec<u32> = regimes
        .into_iter()
        .zip(arms)
        .map(|key| {
            let i = ranks.iter().position(|k| *k == key).unwrap_or_else(|| {
                ranks.push(key);
                ranks.len() - 1
            });
            i as u32
        })
        .collect();
    let mut df = df;
    df.with_column(Column::new("__cell_rank".into(), rank))?;
    let keys: Vec<&str> = [
        "__cell_rank",
        "seed",
        "step",
        "minibatch",
        "layer",
        "len_lo",
        "prefix",
    ]
    .into_iter()
    .filter(|k| df.column(k).is_ok())
    .collect();
    let sorted = df.sort(
        keys,
        SortMultipleOptions::default().with_maintain_order(true),
    )?;
    Ok(sorted.drop("__cell_rank")?)
}

/// The value named `name` in `v`, appended with its default when absent: per-name
/// accumulators that keep the order of first appearance.
pub fn named<'a, T: Default>(v: &'a mut Vec<(String, T)>, name: &str) -> &'a mut T {
    let k = match v.iter().position(|(n, _)| n == name) {
        Some(k) => k,
        None => {
            v.push((name.to_string(), T::default()));
            v.len() - 1
        }
    };
    &mut v[k].1
}
