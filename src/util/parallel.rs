//! Running independent pieces of work on several cores without letting the schedule change a
//! number: results are always collected in index order.

use anyhow::Result;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `f(0), …, f(n − 1)` in order, on the rayon pool when it has more than one thread, else one
/// after the other on this thread. Each call must be independent of the others, so the results
/// never depend on the thread count.
pub fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    if n > 1 && rayon::current_num_threads() > 1 {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// `f(i, &mut items[i])` for every item, in order, like [`par_map`].
pub fn par_map_mut<S: Send, T: Send>(
    items: &mut [S],
    f: impl Fn(usize, &mut S) -> T + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    if items.len() > 1 && rayon::current_num_threads() > 1 {
        items
            .par_iter_mut()
            .enumerate()
            .map(|(i, s)| f(i, s))
            .collect()
    } else {
        items.iter_mut().enumerate().map(|(i, s)| f(i, s)).collect()
    }
}

/// `work(0..n)` on `jobs` OS threads, each taking the next index (cold starts and experiment
/// cells, one thread each); the first error stops further pickups and is returned once the
/// running items end.
pub fn work_queue(n: usize, jobs: usize, work: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let abort = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n || abort.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Err(e) = work(i) {
                        abort.store(true, Ordering::SeqCst);
                        failed.lock().expect("error lock").get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    match failed.into_inner().expect("error lock") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
