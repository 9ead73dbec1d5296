//! Utilities with no simulation in them: files, hashes, locks, names, progress output, parallel
//! maps, the host's description, host/device tensor conversions, fast elementwise maths and the
//! mean and variance every statistic uses.

pub mod fastmath;
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
pub mod transpose;

/// `f` with the thread-local `flag` set on this thread, restored after (the test hooks that
/// switch a path off for one comparison: `with_tensor_attention`, `with_every_query`,
/// `with_every_row`).
pub fn with_flag<T>(
    flag: &'static std::thread::LocalKey<std::cell::Cell<bool>>,
    f: impl FnOnce() -> T,
) -> T {
    let before = flag.with(|c| c.replace(true));
    let out = f();
    flag.with(|c| c.set(before));
    out
}

/// Rows `rows` of `x` `[_, width]` row-major, in that order (a row may come several times).
pub fn rows_from<T: Copy>(x: &[T], rows: &[usize], width: usize) -> Vec<T> {
    (rows.iter())
        .flat_map(|&r| x[r * width..(r + 1) * width].iter().copied())
        .collect()
}
