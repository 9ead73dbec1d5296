//! What a run writes and when: its frames and the statuses of its cells under one lock, written
//! frames first and `status.json` last, so that the folder on disk is consistent at every moment
//! (`--resume` and `merge` trust `status.json`); and the write a second interrupt makes before
//! the process quits.

use super::status::CellStatus;
use crate::metrics::frames::Frames;
use crate::util::io::write_json;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a run has computed and what it writes: its frames and the statuses of its finished
/// (or stopped) cells, under one lock, so that every write is the frames first and then
/// `status.json` listing exactly the cells whose every row those frames hold. A status is set
/// only after its cell's last rows were pushed, so any write, at any moment, is consistent:
/// `--resume` and `merge` trust `status.json`, and a kill between the two files loses at most
/// the cells that finished since the write before.
pub(super) struct Book {
    pub(super) frames: Frames,
    /// Per cell of this run (shard), in canonical order; `None` while it runs or waits.
    pub(super) statuses: Vec<Option<CellStatus>>,
    /// Every cell of the spec in canonical order: the frames are written in this order of
    /// their cells (rows of one cell in the order they were computed), so two runs of the same
    /// cells write the same files whatever order the cells finished in.
    pub(super) order: Vec<super::resume::CellName>,
}

impl Book {
    /// Frames (atomically, file by file, rows in canonical cell order), then `status.json`.
    pub(super) fn write(&mut self, dir: &Path) -> Result<()> {
        for f in self.frames.all_mut() {
            let order = super::merge::canonical_rows(f, &self.order)?;
            if order.iter().enumerate().any(|(i, &k)| i != k) {
                f.reorder(&order)?;
            }
        }
        self.frames.flush(dir)?;
        let done: Vec<&CellStatus> = self.statuses.iter().flatten().collect();
        write_json(&dir.join("status.json"), &done)
    }

    /// [`Book::write`] unless the last write was less than `gap` ago.
    pub(super) fn write_if_due(&mut self, dir: &Path, gap: Duration) -> Result<()> {
        if self.frames.flush_due(gap) {
            self.write(dir)?;
        }
        Ok(())
    }
}

/// The book, even if a worker panicked while holding it (its rows are whole steps: a step's
/// rows are pushed under one hold).
pub(super) fn lock(book: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

/// The books of the runs in progress in this process, for [`write_now`].
static RUNNING: Mutex<Vec<(u64, Arc<Mutex<Book>>, PathBuf)>> = Mutex::new(Vec::new());

/// A run's place in [`RUNNING`] while it runs.
pub(super) struct LastWrite(u64);

impl LastWrite {
    pub(super) fn register(book: Arc<Mutex<Book>>, dir: PathBuf) -> LastWrite {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, book, dir));
        LastWrite(id)
    }
}

impl Drop for LastWrite {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(id, _, _)| *id != self.0);
    }
}

/// Write every running run's frames and `status.json` as they stand, for a process about to
/// quit (a second Ctrl-C or SIGTERM): each book is written at a step boundary (a step's rows
/// are pushed under one hold) and stays held afterwards, so no later write can start before
/// the process exits. Returns the folders written.
pub fn write_now() -> Result<Vec<PathBuf>> {
    let running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    let mut written = Vec::new();
    for (_, book, dir) in running.iter() {
        let mut b = lock(book);
        b.write(dir)
            .with_context(|| format!("writing {} before quitting", dir.display()))?;
        written.push(dir.clone());
        // Held until the process exits: nothing may write after this.
        std::mem::forget(b);
    }
    Ok(written)
}

/// Where a cell's rows go: the run's book, its folder, and the least time between two writes
/// of it (`flush_secs`).
pub(super) struct FrameSink<'a> {
    pub(super) book: &'a Mutex<Book>,
    pub(super) dir: &'a std::path::Path,
    pub(super) gap: Duration,
}
