//! Files on disk: every write goes through a temporary file and a rename, so a killed process,
//! a full disk or Ctrl-C never leaves a half-written file in place of a good one. Nothing is
//! fsynced: after a power cut the replaced file is whole only where the file system commits a
//! file's data before a rename that replaces another (ext4's default, `auto_da_alloc`).

use anyhow::{Context, Result};
use polars::prelude::*;
use polars_parquet::write::ZstdLevel;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// Where cold starts are cached unless `--cache-dir` says otherwise.
pub const DEFAULT_CACHE_DIR: &str = "results/.cache";

/// Write `path` by handing `fill` a temporary file beside it, then renaming it into place.
fn atomically(path: &Path, fill: impl FnOnce(&mut std::fs::File) -> Result<()>) -> Result<()> {
    // Unique per process and call, so concurrent writers (tests, parallel cells) never share one.
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp{}-{n}", std::process::id()));
    let written = std::fs::File::create(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))
        .and_then(|mut file| {
            fill(&mut file)?;
            file.flush()
                .with_context(|| format!("writing {}", tmp.display()))
        });
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))
}

/// Write `bytes` to `path` atomically.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    atomically(path, |f| {
        f.write_all(bytes)
            .with_context(|| format!("writing {}", path.display()))
    })
}

/// Write `value` as pretty JSON, atomically.
pub fn write_json<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    write_atomic(path, serde_json::to_string_pretty(value)?.as_bytes())
}

/// Write `value` as JSON with one value per line and no indentation, atomically: the form of
/// a report's `summary.json` and `endpoints.json`, a third smaller than pretty JSON (about
/// 0.75 MB over the committed folders) and still diffed line by line.
pub fn write_json_lines<T: Serialize + ?Sized>(path: &Path, value: &T) -> Result<()> {
    let mut bytes = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"");
    value.serialize(&mut serde_json::Serializer::with_formatter(&mut bytes, fmt))?;
    write_atomic(path, &bytes)
}

/// Write `df` as Parquet, atomically.
pub fn write_parquet(df: &mut DataFrame, path: &Path) -> Result<()> {
    write_parquet_with(df, path, ParquetCompression::default())
}

/// Write `df` as Parquet with zstd at level 19, atomically: the committed (slim) form of a
/// results folder, a few percent smaller than the default level and slower to write.
pub fn write_parquet_compact(df: &mut DataFrame, path: &Path) -> Result<()> {
    let level = ZstdLevel::try_new(19).map_err(|e| anyhow::anyhow!("zstd level: {e}"))?;
    write_parquet_with(df, path, ParquetCompression::Zstd(Some(level)))
}

/// The file is encoded in memory first and then written as bytes, so that a failed write (a
/// full disk) reports its cause ("No space left on device") rather than the encoder's view of
/// a broken stream; the bytes are those a writer into the file would produce.
fn write_parquet_with(df: &mut DataFrame, path: &Path, codec: ParquetCompression) -> Result<()> {
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes)
        .with_compression(codec)
        .finish(df)
        .map_err(|e| anyhow::anyhow!("encoding {}: {e}", path.display()))?;
    write_atomic(path, &bytes)
}

/// Write `df` as CSV, atomically.
pub fn write_csv(df: &mut DataFrame, path: &Path) -> Result<()> {
    atomically(path, |f| {
        CsvWriter::new(f)
            .finish(df)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))
    })
}

pub fn read_parquet(path: &Path) -> Result<DataFrame> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    ParquetReader::new(file)
        .finish()
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = std::env::temp_dir().join(format!("driftlab-io-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.json");
        write_atomic(&path, b"old").unwrap();
        let err = atomically(&path, |_| anyhow::bail!("disk full"));
        assert!(err.is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "the temporary file was removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
