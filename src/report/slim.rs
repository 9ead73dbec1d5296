//! `driftlab slim <dir>`: the committed form of a results folder. Drops the frame columns the
//! report does not read, as the schema marks them ([`schema::Col::report_reads`]: optimizer
//! losses, gradient norms, ESS, update timings, per-layer entropy and the like), so `driftlab report` on the slim folder writes the same summary, endpoints,
//! figures and report.md as on the full one (tested), and records what it dropped in
//! `config.json` under `slim`. That file is written without indentation, and its resolved
//! cells as `cell_groups` (each config once, with the seeds that ran it; read back as the
//! same `cells` list by [`crate::experiment::cell_groups::cells_value`]). A rerun of the
//! experiment gives the full frames back.

use crate::metrics::schema;
use crate::util::io::{read_parquet, write_atomic, write_parquet_compact};
use anyhow::{Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// The columns of `frame` no report reads (those the schema marks so, in file order).
pub fn unread(frame: &str) -> Vec<&'static str> {
    schema::frames()
        .into_iter()
        .filter(|s| s.name == frame)
        .flat_map(|s| s.columns())
        .filter(|c| !c.report_reads)
        .map(|c| c.name)
        .collect()
}

/// Rewrite the frames of `dir` without their unread columns; returns the bytes before and
/// after. A folder slimmed before is slimmed again without change to its contents.
pub fn slim(dir: &Path) -> Result<(u64, u64)> {
    compact(dir, false, &[])
}

/// [`slim`], also dropping `extra` (frame, column) pairs the report does read: a folder over
/// the repository's budget gives up some figures and summary metrics (the report then treats
/// the column as not measured, see [`crate::report::load`]), recorded in config.json like the
/// rest. Only metric columns (Float) may go; a frame or column the schema lacks is an error
/// naming it.
pub fn slim_dropping(dir: &Path, extra: &[(String, String)]) -> Result<(u64, u64)> {
    for (frame, column) in extra {
        metric_column("--drop", frame, column, "may be dropped")?;
    }
    compact(dir, false, extra)
}

/// Check that FRAME.COLUMN of a `flag` names a metric (float) column of the schema; the error
/// names the culprit ("only metric (float) columns {what}" for an identity column).
fn metric_column(flag: &str, frame: &str, column: &str, what: &str) -> Result<()> {
    let s = schema::frames()
        .into_iter()
        .find(|s| s.name == frame)
        .with_context(|| {
            format!("{flag} {frame}.{column}: no frame '{frame}' (steps, updates, layers, lengths, prefixes, events)")
        })?;
    let c = s.columns().find(|c| c.name == column).with_context(|| {
        format!("{flag} {frame}.{column}: the {frame} frame has no column '{column}'")
    })?;
    anyhow::ensure!(
        matches!(c.dtype, schema::Dtype::Float),
        "{flag} {frame}.{column}: only metric (float) columns {what}; '{column}' identifies rows"
    );
    Ok(())
}

/// The committed form of a shard folder that `driftlab merge` will read in a later session:
/// every column kept (merge needs the whole schema), frames in the compact codec and the
/// config's cells grouped. Slim the merged folder afterwards.
pub fn slim_shard(dir: &Path) -> Result<(u64, u64)> {
    compact(dir, true, &[])
}

/// Frames a shard may leave out (`merge` skips a frame a shard lacks; the report draws without
/// them what it can).
pub const LEAVABLE: [&str; 3] = ["layers", "lengths", "prefixes"];

/// [`slim_shard`] for a study whose shards must fit the repository's budget: in each frame
/// named in `keep` (FRAME.COLUMN pairs), every metric column not named is nulled — the schema
/// stays whole, as `merge` needs, and a null column costs almost nothing — and the frames in
/// `without` (of [`LEAVABLE`]) are removed. Recorded in config.json under `shard_trim`
/// (`{"nulled": {frame: [columns]}, "left_out": [frames]}`). An unknown frame or column, an
/// identity column, or a frame that cannot be left out is an error naming it.
pub fn slim_shard_trimmed(
    dir: &Path,
    keep: &[(String, String)],
    without: &[String],
) -> Result<(u64, u64)> {
    for f in without {
        anyhow::ensure!(
            LEAVABLE.contains(&f.as_str()),
            "--without {f}: a shard may leave out only {LEAVABLE:?} (merge needs the others)"
        );
    }
    for (frame, column) in keep {
        metric_column("--keep", frame, column, "are kept or nulled")?;
    }
    let before: u64 = (schema::frames().iter())
        .filter_map(|s| std::fs::metadata(dir.join(s.file_name())).ok())
        .map(|m| m.len())
        .sum();
    let mut nulled = Map::new();
    for s in schema::frames() {
        let named: Vec<&str> = (keep.iter())
            .filter(|(f, _)| f == s.name)
            .map(|(_, c)| c.as_str())
            .collect();
        let path = dir.join(s.file_name());
        if named.is_empty() || !path.exists() {
            continue;
        }
        let mut df = read_parquet(&path)?;
        let gone: Vec<&str> = (s.columns())
            .filter(|c| matches!(c.dtype, schema::Dtype::Float) && !named.contains(&c.name))
            .map(|c| c.name)
            .filter(|c| df.column(c).is_ok())
            .collect();
        for c in &gone {
            let n = df.height();
            df.with_column(polars::prelude::Column::full_null(
                (*c).into(),
                n,
                &polars::prelude::DataType::Float64,
            ))?;
        }
        write_parquet_compact(&mut df, &path)?;
        nulled.insert(
            s.name.into(),
            Value::from(gone.iter().map(|c| c.to_string()).collect::<Vec<_>>()),
        );
    }
    for f in without {
        let path = dir.join(format!("{f}.parquet"));
        if path.exists() {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    let (_, after) = compact(dir, true, &[])?;
    set_record(
        dir,
        "shard_trim",
        serde_json::json!({ "nulled": nulled, "left_out": without }),
    )?;
    Ok((before, after))
}

fn compact(dir: &Path, keep_columns: bool, extra: &[(String, String)]) -> Result<(u64, u64)> {
    let (mut before, mut after) = (0, 0);
    let mut dropped = Map::new();
    for s in schema::frames() {
        let path = dir.join(s.file_name());
        if !path.exists() {
            continue;
        }
        before += std::fs::metadata(&path)?.len();
        let df = read_parquet(&path)?;
        let never_read = if keep_columns {
            Vec::new()
        } else {
            unread(s.name)
        };
        let also = extra
            .iter()
            .filter(|(f, _)| f == s.name)
            .map(|(_, c)| c.as_str());
        let gone: Vec<&str> = never_read
            .iter()
            .copied()
            .chain(also)
            .filter(|c| df.column(c).is_ok())
            .collect();
        // Rewritten even when no column goes: the committed form is also the compact codec.
        let mut df = df.drop_many(gone.iter().copied());
        write_parquet_compact(&mut df, &path)?;
        if !gone.is_empty() {
            dropped.insert(
                s.name.into(),
                Value::from(gone.iter().map(|c| c.to_string()).collect::<Vec<_>>()),
            );
        }
        after += std::fs::metadata(&path)?.len();
    }
    let cfg_path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_slice(
        &std::fs::read(&cfg_path).with_context(|| format!("reading {}", cfg_path.display()))?,
    )
    .with_context(|| format!("reading {}", cfg_path.display()))?;
    if !dropped.is_empty() {
        let slim = cfg
            .as_object_mut()
            .context("config.json is not an object")?
            .entry("slim")
            .or_insert_with(|| Value::Object(Map::new()));
        // A folder slimmed again keeps the record of what went before.
        for (k, v) in dropped {
            let mut all: Vec<Value> = slim[k.as_str()].as_array().cloned().unwrap_or_default();
            for c in v.as_array().into_iter().flatten() {
                if !all.contains(c) {
                    all.push(c.clone());
                }
            }
            slim[k.as_str()] = Value::from(all);
        }
    }
    // The resolved cells grouped by what they share beyond the seed, and the file without
    // indentation: a map's cells are most of a committed folder's JSON.
    if let Some(o) = cfg.as_object_mut()
        && let Some(groups) = o
            .get("cells")
            .and_then(crate::experiment::cell_groups::group)
    {
        o.remove("cells");
        o.insert("cell_groups".into(), groups);
    }
    write_atomic(&cfg_path, &serde_json::to_vec(&cfg)?)?;
    Ok((before, after))
}

/// Record in `dir/config.json` which figure folders under `plots/` the committed folder keeps
/// (`plots_kept`): each a folder name (`map`, a regime's name; a trailing `/` is dropped) or
/// `.` for `plots/` itself (a run of one regime draws there), and each must exist, so a
/// misspelt name fails here and not as a report that names every figure as missing.
pub fn record_plots_kept(dir: &Path, kept: &[String]) -> Result<()> {
    let mut names = Vec::new();
    for k in kept {
        let name = k.trim_end_matches('/');
        let one = Path::new(name).components().count() == 1;
        anyhow::ensure!(
            name == "." || (one && name != ".." && !name.starts_with('/')),
            "--plots-kept {k}: expected one folder name under plots/ (or . for plots/ itself)"
        );
        anyhow::ensure!(
            dir.join("plots").join(name).is_dir(),
            "--plots-kept {k}: {} has no such folder",
            dir.join("plots").display()
        );
        names.push(name.to_string());
    }
    set_record(dir, "plots_kept", Value::from(names))
}

/// Set `key` of `dir/config.json` to `value` (a record of what the committed form did),
/// keeping the file's other keys.
fn set_record(dir: &Path, key: &str, value: Value) -> Result<()> {
    let cfg_path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_slice(
        &std::fs::read(&cfg_path).with_context(|| format!("reading {}", cfg_path.display()))?,
    )
    .with_context(|| format!("reading {}", cfg_path.display()))?;
    cfg.as_object_mut()
        .context("config.json is not an object")?
        .insert(key.into(), value);
    write_atomic(&cfg_path, &serde_json::to_vec(&cfg)?)
}
