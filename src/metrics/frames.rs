//! Row buffers → Polars DataFrames → Parquet, written atomically so a reader never sees a
//! half-written file.

use super::rows::{Row, Val};
use anyhow::{Context as _, Result, bail};
use polars::prelude::*;
use std::path::Path;

enum Buf {
    S(Vec<String>),
    I(Vec<i64>),
    F(Vec<Option<f64>>),
}

/// A growing table whose schema is fixed by its first row.
#[derive(Default)]
pub struct Frame {
    names: Vec<&'static str>,
    cols: Vec<Buf>,
    len: usize,
}

impl Frame {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, row: Row) -> Result<()> {
        if self.names.is_empty() {
            self.names = row.iter().map(|(n, _)| *n).collect();
            self.cols = row
                .iter()
                .map(|(_, v)| match v {
                    Val::S(_) => Buf::S(Vec::new()),
                    Val::I(_) => Buf::I(Vec::new()),
                    Val::F(_) => Buf::F(Vec::new()),
                })
                .collect();
        }
        if row.len() != self.names.len() {
            bail!(
                "row has {} columns, frame has {}",
                row.len(),
                self.names.len()
            );
        }
        for ((name, v), (want, col)) in row.into_iter().zip(self.names.iter().zip(&mut self.cols)) {
            if name != *want {
                bail!("column '{name}' where the frame has '{want}'");
            }
            match (col, v) {
                (Buf::S(c), Val::S(x)) => c.push(x),
                (Buf::I(c), Val::I(x)) => c.push(x),
                (Buf::F(c), Val::F(x)) => c.push(x),
                _ => bail!("column '{name}' changed type"),
            }
        }
        self.len += 1;
        Ok(())
    }

    pub fn to_df(&self) -> Result<DataFrame> {
        let cols: Vec<Column> = self
            .names
            .iter()
            .zip(&self.cols)
            .map(|(n, c)| match c {
                Buf::S(v) => Column::new((*n).into(), v.clone()),
                Buf::I(v) => Column::new((*n).into(), v.clone()),
                Buf::F(v) => Column::new((*n).into(), v.clone()),
            })
            .collect();
        Ok(DataFrame::new(self.len, cols)?)
    }
}

/// Write `df` as Parquet via a temporary file and a rename.
pub fn write_parquet(df: &mut DataFrame, path: &Path) -> Result<()> {
    let tmp = path.with_extension("parquet.tmp");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    ParquetWriter::new(file)
        .finish(df)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    Ok(())
}

pub fn read_parquet(path: &Path) -> Result<DataFrame> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    ParquetReader::new(file)
        .finish()
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
}

pub fn write_csv(df: &mut DataFrame, path: &Path) -> Result<()> {
    let tmp = path.with_extension("csv.tmp");
    let file =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    CsvWriter::new(file)
        .finish(df)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming {}", tmp.display()))?;
    Ok(())
}

/// The column `name` of `df` as floats (nulls kept).
pub fn f64_col(df: &DataFrame, name: &str) -> Result<Vec<Option<f64>>> {
    let s = df
        .column(name)
        .map_err(|e| anyhow::anyhow!("missing column '{name}': {e}"))?
        .cast(&DataType::Float64)?;
    Ok(s.f64()?.iter().collect())
}

/// The column `name` of `df` as integers.
pub fn i64_col(df: &DataFrame, name: &str) -> Result<Vec<i64>> {
    let s = df
        .column(name)
        .map_err(|e| anyhow::anyhow!("missing column '{name}': {e}"))?
        .cast(&DataType::Int64)?;
    Ok(s.i64()?.iter().map(|v| v.unwrap_or(0)).collect())
}

/// The column `name` of `df` as strings.
pub fn str_col(df: &DataFrame, name: &str) -> Result<Vec<String>> {
    let s = df
        .column(name)
        .map_err(|e| anyhow::anyhow!("missing column '{name}': {e}"))?;
    Ok(s.str()?
        .iter()
        .map(|v| v.unwrap_or("").to_string())
        .collect())
}
