//! The clock of the benchmarks: one call's seconds, and medians of repeated calls.

use std::time::Instant;

/// Median of `reps` timings (seconds) of `f`, after 3 warm-up calls.
pub fn median_secs(reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..3 {
        f();
    }
    median((0..reps.max(1)).map(|_| secs(&mut f)).collect())
}

/// Seconds one call of `f` takes.
pub fn secs(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

/// The upper median of `v` (non-empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
