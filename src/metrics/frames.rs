//! Row buffers → Polars DataFrames → Parquet. Every frame is declared in [`super::schema`];
//! a row that does not match its frame's columns and dtypes is an error, never a new column.

use super::rows::{Row, Val};
use super::schema::{Col, Dtype, FrameSchema};
use anyhow::{Result, bail};
use polars::prelude::*;
use std::path::Path;

enum Buf {
    S(Vec<String>),
    I(Vec<i64>),
    F(Vec<Option<f64>>),
}

/// A growing table with the columns of its schema.
pub struct Frame {
    schema: &'static FrameSchema,
    cols: Vec<Buf>,
    len: usize,
}

impl Frame {
    pub fn new(schema: &'static FrameSchema) -> Self {
        let cols = schema
            .columns()
            .map(|c| match c.dtype {
                Dtype::Str => Buf::S(Vec::new()),
                Dtype::Int => Buf::I(Vec::new()),
                Dtype::Float => Buf::F(Vec::new()),
            })
            .collect();
        Frame {
            schema,
            cols,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Append a row; its columns must be the schema's, in order, with the schema's dtypes.
    pub fn push(&mut self, row: Row) -> Result<()> {
        let frame = self.schema.name;
        if row.len() != self.cols.len() {
            bail!(
                "{frame}: row has {} columns, the schema {}",
                row.len(),
                self.cols.len()
            );
        }
        // Check the whole row before appending any of it, so a bad row leaves no trace.
        for ((name, v), want) in row.iter().zip(self.schema.columns()) {
            let ok = matches!(
                (want.dtype, v),
                (Dtype::Str, Val::S(_)) | (Dtype::Int, Val::I(_)) | (Dtype::Float, Val::F(_))
            );
            if *name != want.name || !ok {
                bail!(
                    "{frame}: column '{name}' ({v:?}) where the schema has '{}' ({:?})",
                    want.name,
                    want.dtype
                );
            }
        }
        for ((_, v), col) in row.into_iter().zip(&mut self.cols) {
            match (col, v) {
                (Buf::S(c), Val::S(x)) => c.push(x),
                (Buf::I(c), Val::I(x)) => c.push(x),
                (Buf::F(c), Val::F(x)) => c.push(x),
                _ => unreachable!("checked above"),
            }
        }
        self.len += 1;
        Ok(())
    }

    /// Append the rows `keep` marks of `df`, a frame read back from this schema's Parquet file
    /// (a resumed run keeps the rows of its finished cells).
    pub fn extend_from(&mut self, df: &DataFrame, keep: &[bool]) -> Result<()> {
        let frame = self.schema.name;
        anyhow::ensure!(
            keep.len() == df.height(),
            "{frame}: {} row marks for {} rows",
            keep.len(),
            df.height()
        );
        let names: Vec<&str> = df.get_column_names().iter().map(|n| n.as_str()).collect();
        let want: Vec<&str> = self.schema.columns().map(|c| c.name).collect();
        // A file an earlier build wrote may lack float columns added since (null in its rows:
        // what they measure did not exist then); any other difference is refused.
        let added = |c: &Col| !names.contains(&c.name) && c.dtype == Dtype::Float;
        let known: Vec<&str> = (self.schema.columns())
            .filter(|c| !added(c))
            .map(|c| c.name)
            .collect();
        if names != known {
            bail!("{frame}: the file has columns {names:?}, the schema {want:?}");
        }
        fn kept<'a, T: 'a>(col: Vec<T>, keep: &'a [bool]) -> impl Iterator<Item = T> + 'a {
            col.into_iter().zip(keep).filter(|x| *x.1).map(|x| x.0)
        }
        let n_kept = keep.iter().filter(|&&k| k).count();
        for (c, buf) in self.schema.columns().zip(&mut self.cols) {
            if added(c) {
                if let Buf::F(v) = buf {
                    v.extend(std::iter::repeat_n(None, n_kept));
                }
                continue;
            }
            match buf {
                Buf::S(v) => v.extend(kept(str_col(df, c.name)?, keep)),
                Buf::I(v) => v.extend(kept(i64_col(df, c.name)?, keep)),
                Buf::F(v) => v.extend(kept(f64_col(df, c.name)?, keep)),
            }
        }
        self.len += keep.iter().filter(|&&k| k).count();
        Ok(())
    }

    /// The rows in the order `order` gives (a permutation of `0..len`).
    pub fn reorder(&mut self, order: &[usize]) -> Result<()> {
        let mut seen = vec![false; self.len];
        for &i in order {
            anyhow::ensure!(i < self.len && !seen[i], "not a permutation of the rows");
            seen[i] = true;
        }
        anyhow::ensure!(order.len() == self.len, "not a permutation of the rows");
        fn take<T: Clone>(v: &mut Vec<T>, order: &[usize]) {
            *v = order.iter().map(|&i| v[i].clone()).collect();
        }
        for b in &mut self.cols {
            match b {
                Buf::S(v) => take(v, order),
                Buf::I(v) => take(v, order),
                Buf::F(v) => take(v, order),
            }
        }
        Ok(())
    }

    /// Per row, its cell: the identity columns `regime`, `arm` and `seed`.
    pub fn cells(&self) -> Result<Vec<(&str, &str, u64)>> {
        let col = |name: &str| {
            self.schema
                .columns()
                .position(|c| c.name == name)
                .map(|i| &self.cols[i])
                .ok_or_else(|| anyhow::anyhow!("{}: no column '{name}'", self.schema.name))
        };
        let (Buf::S(regime), Buf::S(arm), Buf::I(seed)) =
            (col("regime")?, col("arm")?, col("seed")?)
        else {
            bail!(
                "{}: regime, arm and seed are not str, str, int",
                self.schema.name
            );
        };
        Ok((0..self.len)
            .map(|i| (regime[i].as_str(), arm[i].as_str(), seed[i] as u64))
            .collect())
    }

    pub fn to_df(&self) -> Result<DataFrame> {
        let cols: Vec<Column> = self
            .schema
            .columns()
            .zip(&self.cols)
            .map(|(c, b)| match b {
                Buf::S(v) => Column::new(c.name.into(), v.clone()),
                Buf::I(v) => Column::new(c.name.into(), v.clone()),
                Buf::F(v) => Column::new(c.name.into(), v.clone()),
            })
            .collect();
        Ok(DataFrame::new(self.len, cols)?)
    }
}

/// The six frames of a run.
pub struct Frames {
    pub steps: Frame,
    pub updates: Frame,
    pub layers: Frame,
    pub lengths: Frame,
    pub prefixes: Frame,
    pub events: Frame,
    /// When [`Frames::flush`] last wrote them (none yet: never).
    written: std::cell::Cell<Option<std::time::Instant>>,
}

impl Default for Frames {
    fn default() -> Self {
        use super::schema::{EVENTS, LAYERS, LENGTHS, PREFIXES, STEPS, UPDATES};
        Frames {
            steps: Frame::new(&STEPS),
            updates: Frame::new(&UPDATES),
            layers: Frame::new(&LAYERS),
            lengths: Frame::new(&LENGTHS),
            prefixes: Frame::new(&PREFIXES),
            events: Frame::new(&EVENTS),
            written: Default::default(),
        }
    }
}

impl Frames {
    /// The six frames, in the order of [`super::schema::frames`].
    pub fn all_mut(&mut self) -> [&mut Frame; 6] {
        [
            &mut self.steps,
            &mut self.updates,
            &mut self.layers,
            &mut self.lengths,
            &mut self.prefixes,
            &mut self.events,
        ]
    }

    /// Rewrite every frame under `dir` (atomically, file by file).
    pub fn flush(&self, dir: &Path) -> Result<()> {
        for f in [
            &self.steps,
            &self.updates,
            &self.layers,
            &self.lengths,
            &self.prefixes,
            &self.events,
        ] {
            crate::util::io::write_parquet(&mut f.to_df()?, &dir.join(f.schema.file_name()))?;
        }
        self.written.set(Some(std::time::Instant::now()));
        Ok(())
    }

    /// Whether at least `gap` has passed since the last [`Frames::flush`] (or none was made).
    pub fn flush_due(&self, gap: std::time::Duration) -> bool {
        self.written.get().is_none_or(|t| t.elapsed() >= gap)
    }

    /// [`Frames::flush`] if it is due after `gap`; whether it wrote.
    pub fn flush_if_due(&self, dir: &Path, gap: std::time::Duration) -> Result<bool> {
        let due = self.flush_due(gap);
        if due {
            self.flush(dir)?;
        }
        Ok(due)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::schema::{EVENTS, STEPS};

    #[test]
    fn a_flush_is_due_once_the_gap_has_passed_since_the_last() {
        let dir = std::env::temp_dir().join(format!("driftlab-flush-due-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = Frames::default();
        let hour = std::time::Duration::from_secs(3600);
        assert!(f.flush_due(hour), "never written: due");
        f.flush(&dir).unwrap();
        assert!(!f.flush_due(hour), "written just now");
        assert!(
            f.flush_due(std::time::Duration::ZERO),
            "a zero gap is always due"
        );
        assert!(dir.join(STEPS.file_name()).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rows_must_match_the_schema() {
        let mut f = Frame::new(&EVENTS);
        let mut row: Row = crate::metrics::schema::IDENTITY
            .iter()
            .map(|c| {
                let v = match c.dtype {
                    Dtype::Str => Val::S("x".into()),
                    Dtype::Int => Val::I(1),
                    Dtype::Float => Val::F(None),
                };
                (c.name, v)
            })
            .collect();
        row.extend([
            ("kind", Val::S("grad_spike".into())),
            ("value", Val::F(Some(1.0))),
            ("threshold", Val::F(Some(0.5))),
            ("detail", Val::S(String::new())),
        ]);
        f.push(row.clone()).unwrap();
        let mut wrong_type = row.clone();
        wrong_type[row.len() - 2] = ("threshold", Val::I(1));
        assert!(
            f.push(wrong_type)
                .unwrap_err()
                .to_string()
                .contains("threshold")
        );
        let mut wrong_name = row.clone();
        wrong_name[row.len() - 1] = ("details", Val::S(String::new()));
        assert!(f.push(wrong_name).is_err());
        assert!(f.push(row[..row.len() - 1].to_vec()).is_err());
        assert_eq!(f.len(), 1, "rejected rows leave nothing behind");
        let df = f.to_df().unwrap();
        assert_eq!(df.width(), EVENTS.columns().count());
        // An empty frame still has every column with its dtype.
        let empty = Frame::new(&EVENTS).to_df().unwrap();
        assert_eq!(empty.height(), 0);
        assert_eq!(empty.column("value").unwrap().dtype(), &DataType::Float64);
    }
}
