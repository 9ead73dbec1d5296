//! Utilities with no simulation in them: files, hashes, locks, names, progress output, parallel
//! maps, the host's description, host/device tensor conversions, and the mean and variance every
//! statistic uses.

pub mod bf16;
pub mod finite;
pub mod hash;
pub mod host;
pub mod io;
pub mod json_diff;
pub mod lock;
pub mod moments;
pub mod names;
pub mod parallel;
pub mod progress;
pub mod tensors;

/// Rows `rows` of `x` `[_, width]` row-major, in that order (a row may come several times).
pub fn rows_from<T: Copy>(x: &[T], rows: &[usize], width: usize) -> Vec<T> {
    (rows.iter())
        .flat_map(|&r| x[r * width..(r + 1) * width].iter().copied())
        .collect()
}
