//! `driftlab merge OUT`: the shard folders of a run (`OUT/shards/<i>-of-<n>/`) into one results
//! folder `OUT`, rows in the spec's canonical cell order. It refuses shards of different specs
//! or driftlab versions, and cells that no shard finished or that two shards finished.

use super::cell::CellConfig;
use super::resume::{CellName, finished_statuses, name_of, rows_of, show};
use super::shard::SHARDS_DIR;
use super::status::CellStatus;
use crate::metrics::frames::{Frame, Frames};
use crate::util::io::{read_parquet, write_json};
use anyhow::{Context, Result, bail};
use polars::prelude::DataFrame;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One shard folder's run record.
struct ShardRun {
    dir: PathBuf,
    config: Value,
    finished: Vec<CellStatus>,
}

impl ShardRun {
    fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default()
    }
}

fn shard_runs(out: &Path) -> Result<Vec<ShardRun>> {
    let root = out.join(SHARDS_DIR);
    let entries = std::fs::read_dir(&root).with_context(|| {
        format!(
            "no shard folders in {} (run `driftlab experiment NAME --shard i/n --out {}` first)",
            root.display(),
            out.display()
        )
    })?;
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    if dirs.is_empty() {
        bail!("{} holds no shard folders", root.display());
    }
    dirs.into_iter()
        .map(|dir| {
            let path = dir.join("config.json");
            let config: Value = serde_json::from_slice(
                &std::fs::read(&path)
                    .with_context(|| format!("{} (did this shard start?)", path.display()))?,
            )
            .with_context(|| format!("reading {}", path.display()))?;
            let finished = finished_statuses(&dir)?;
            Ok(ShardRun {
                dir,
                config,
                finished,
            })
        })
        .collect()
}

/// The first shard whose `key` differs from the first shard's (`cells` in either form: a
/// shard committed with `slim --shard` holds them grouped).
fn same(runs: &[ShardRun], key: &str, what: &str) -> Result<()> {
    let first = &runs[0];
    let get = |r: &ShardRun| match key {
        "cells" => Some(super::cell_groups::cells_value(&r.config)),
        _ => r.config.get(key).cloned(),
    };
    for r in &runs[1..] {
        let (a, b) = (get(first), get(r));
        if a != b {
            let (a, b) = (a.unwrap_or(Value::Null), b.unwrap_or(Value::Null));
            let differs = crate::util::json_diff::first_difference(&a, &b).unwrap_or_default();
            let differs = match differs.strip_prefix("(top): ") {
                Some(values) => values.to_string(),
                None if differs.starts_with('[') => format!("{key}{differs}"),
                None => format!("{key}.{differs}"),
            };
            bail!(
                "shards {} and {} come from different {what}: {differs}; rerun the odd one out",
                first.name(),
                r.name(),
            );
        }
    }
    Ok(())
}

/// Which shard finished each cell; an error names every cell finished by none or by several.
fn owners(runs: &[ShardRun], cells: &[CellConfig]) -> Result<BTreeMap<CellName, usize>> {
    let mut by: BTreeMap<CellName, Vec<usize>> = BTreeMap::new();
    for (k, r) in runs.iter().enumerate() {
        for s in &r.finished {
            by.entry((s.regime.clone(), s.arm.clone(), s.seed))
                .or_default()
                .push(k);
        }
    }
    let mut missing = Vec::new();
    let mut twice = Vec::new();
    let mut owner = BTreeMap::new();
    for c in cells {
        let n = name_of(c);
        match by.remove(&n).unwrap_or_default().as_slice() {
            [] => missing.push(show(&n)),
            [k] => {
                owner.insert(n, *k);
            }
            ks => twice.push(format!(
                "{} (in {})",
                show(&n),
                ks.iter()
                    .map(|&k| runs[k].name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }
    let strays: Vec<String> = by.keys().map(show).collect();
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "{} cell(s) finished in no shard: {} (rerun their shard with --resume)",
            missing.len(),
            listed(&missing)
        ));
    }
    if !twice.is_empty() {
        problems.push(format!(
            "{} cell(s) present twice: {} (remove the extra shard folder)",
            twice.len(),
            listed(&twice)
        ));
    }
    if !strays.is_empty() {
        problems.push(format!(
            "{} cell(s) not in the spec: {}",
            strays.len(),
            listed(&strays)
        ));
    }
    if !problems.is_empty() {
        bail!("cannot merge: {}", problems.join("; "));
    }
    Ok(owner)
}

/// The first few of `items`, comma separated, and how many more there are: a merge of a
/// map's shards half way through would otherwise name hundreds of cells.
fn listed(items: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut s = items[..items.len().min(SHOWN)].join(", ");
    if items.len() > SHOWN {
        s.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    s
}

/// `df` (a frame of `schema`) with its rows in canonical cell order; within a cell, rows keep
/// the order they were written in.
pub fn canonical(
    df: &DataFrame,
    schema: &'static crate::metrics::schema::FrameSchema,
    cells: &[CellConfig],
) -> Result<DataFrame> {
    let mut f = Frame::new(schema);
    f.extend_from(df, &vec![true; df.height()])?;
    let names: Vec<CellName> = cells.iter().map(name_of).collect();
    let order = canonical_rows(&f, &names)?;
    f.reorder(&order)?;
    f.to_df()
}

/// The order that puts `f`'s rows in the canonical order of their cells, `cells` (every cell
/// of the spec, canonical order); rows of one cell keep the order they were written in. A row
/// of a cell not in `cells` is an error naming it.
pub fn canonical_rows(f: &Frame, cells: &[CellName]) -> Result<Vec<usize>> {
    let index: std::collections::HashMap<(&str, &str, u64), usize> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.0.as_str(), c.1.as_str(), c.2), i))
        .collect();
    let mut keyed = Vec::with_capacity(f.len());
    for (i, c) in f.cells()?.into_iter().enumerate() {
        let Some(&k) = index.get(&c) else {
            bail!(
                "rows of a cell not in the spec: {}/{} seed {}",
                c.0,
                c.1,
                c.2
            );
        };
        keyed.push((k, i));
    }
    keyed.sort_unstable();
    Ok(keyed.into_iter().map(|(_, i)| i).collect())
}

/// Merge the shards under `out` into `out`; returns every cell's status, in canonical order.
pub fn merge(out: &Path) -> Result<Vec<CellStatus>> {
    let runs = shard_runs(out)?;
    // The merged folder is written like a run's: by one process at a time.
    let _hold = crate::util::lock::hold_folder(out)?;
    same(&runs, "spec", "specs")?;
    same(&runs, "cells", "resolved cells (spec, device or defaults)")?;
    same(&runs, "crate_version", "driftlab versions")?;
    // A shard started outside a checkout records no commit; those that record one must agree.
    let commits: std::collections::BTreeSet<&str> = runs
        .iter()
        .filter_map(|r| r.config.get("git_commit").and_then(Value::as_str))
        .collect();
    if commits.len() > 1 {
        bail!(
            "shards come from different driftlab commits: {}; rerun the odd ones out",
            runs.iter()
                .map(|r| format!(
                    "{} {}",
                    r.name(),
                    r.config
                        .get("git_commit")
                        .and_then(Value::as_str)
                        .unwrap_or("(none)")
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let cells: Vec<CellConfig> =
        serde_json::from_value(super::cell_groups::cells_value(&runs[0].config))
            .context("reading the cells of the first shard's config.json")?;
    let owner = owners(&runs, &cells)?;
    let names: Vec<CellName> = cells.iter().map(name_of).collect();
    let mut frames = Frames::default();
    for (frame, schema) in frames
        .all_mut()
        .into_iter()
        .zip(crate::metrics::schema::frames())
    {
        for (k, r) in runs.iter().enumerate() {
            let path = r.dir.join(schema.file_name());
            if !path.exists() {
                continue;
            }
            let df = read_parquet(&path)?;
            let mine: std::collections::BTreeSet<CellName> = owner
                .iter()
                .filter(|&(_, &o)| o == k)
                .map(|(n, _)| n.clone())
                .collect();
            let keep = rows_of(&df, &mine)?;
            frame
                .extend_from(&df, &keep)
                .with_context(|| format!("merging {}", path.display()))?;
        }
        let order = canonical_rows(frame, &names)?;
        frame.reorder(&order)?;
    }
    frames.flush(out)?;
    let mut statuses: Vec<CellStatus> = Vec::new();
    for c in &cells {
        let k = owner[&name_of(c)];
        let st = runs[k]
            .finished
            .iter()
            .find(|s| (&s.regime, &s.arm, s.seed) == (&c.regime, &c.arm, c.seed))
            .expect("owner finished it");
        statuses.push(st.clone());
    }
    write_json(&out.join("status.json"), &statuses)?;
    let mut config = runs[0].config.clone();
    config["shard"] = Value::Null;
    // Which figures a committed folder keeps is said of that folder, not of its shards.
    if let Some(o) = config.as_object_mut() {
        o.remove("plots_kept");
    }
    config["ran"] = serde_json::to_value((0..cells.len()).collect::<Vec<_>>())?;
    config["merged_from"] = Value::Array(
        runs.iter()
            .map(|r| {
                serde_json::json!({
                    "folder": format!("{SHARDS_DIR}/{}", r.name()),
                    "shard": r.config.get("shard"),
                    "host": r.config.get("host"),
                    "start_unix": r.config.get("start_unix"),
                    "resumed": r.config.get("resumed"),
                })
            })
            .collect(),
    );
    write_json(&out.join("config.json"), &config)?;
    Ok(statuses)
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_lists_name_the_first_eight_and_count_the_rest() {
        let items: Vec<String> = (0..10).map(|i| format!("c{i}")).collect();
        assert_eq!(super::listed(&items[..3]), "c0, c1, c2");
        assert_eq!(
            super::listed(&items),
            "c0, c1, c2, c3, c4, c5, c6, c7 and 2 more"
        );
        assert_eq!(super::listed(&items[..8]).matches(", ").count(), 7);
        assert_eq!(super::listed(&[]), "");
    }
}
