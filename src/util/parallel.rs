//! Running independent pieces of work on several cores without letting the schedule change a
//! number: results are always collected in index order.

use anyhow::Result;
use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

thread_local! {
    /// Set by [`serial_while`]: this thread's [`par_map`]s run one after the other.
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// While the returned guard lives, every [`par_map`] and [`par_map_mut`] on this thread runs
/// its items one after the other when `serial` holds (and as before when not). For work on a GPU
/// device: the device runs one kernel queue, so host threads add nothing there, and kernels
/// submitted from several threads made a run's numbers depend on the schedule (measured on
/// wgpu-cpu: the check's metrics differed from run to run, its dense arm's rollout-vs-π_old KL up
/// to 7e-5 instead of 3e-14; with one submitting thread they repeat).
#[must_use = "the scope ends when the guard is dropped"]
pub fn serial_while(serial: bool) -> SerialGuard {
    SerialGuard {
        before: SERIAL.replace(serial || SERIAL.get()),
        _this_thread: std::marker::PhantomData,
    }
}

/// [`serial_while`] on any device but the CPU backend: the scope a step, an evaluation and a
/// cold start run in.
#[must_use = "the scope ends when the guard is dropped"]
pub fn serial_off_host(device: &burn::tensor::Device) -> SerialGuard {
    serial_while(!super::tensors::is_host(device))
}

/// The scope of a [`serial_while`]: dropping it (also in a panic's unwinding) restores this
/// thread's setting; it cannot leave the thread.
pub struct SerialGuard {
    before: bool,
    _this_thread: std::marker::PhantomData<*const ()>,
}

impl Drop for SerialGuard {
    fn drop(&mut self) {
        SERIAL.set(self.before);
    }
}

/// Whether a [`par_map`] on this thread may use the rayon pool.
fn parallel() -> bool {
    rayon::current_num_threads() > 1 && !SERIAL.get()
}

/// `f(0), …, f(n − 1)` in order, on the rayon pool when it has more than one thread (outside a
/// [`serial_while`] that holds), else one after the other on this thread. Each call must be
/// independent of the others, so the results never depend on the thread count.
pub fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    if n > 1 && parallel() {
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
    if items.len() > 1 && parallel() {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// While a `serial_while(true)` guard lives every item runs on the calling thread, in order,
    /// also under a nested `serial_while(false)`; after it (also after a panic inside it) a pool
    /// of two threads is used again.
    #[test]
    fn serial_while_keeps_the_items_on_the_calling_thread() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            let me = std::thread::current().id();
            let on_me = |n: usize| par_map(n, |_| std::thread::current().id() == me);
            {
                let _serial = serial_while(true);
                let inner = {
                    let _not = serial_while(false);
                    on_me(64)
                };
                let mut items = vec![0usize; 64];
                let mut_on_me = par_map_mut(&mut items, |i, x| {
                    *x = i;
                    std::thread::current().id() == me
                });
                assert_eq!(items, (0..64).collect::<Vec<_>>());
                assert!(inner.iter().chain(&mut_on_me).all(|&b| b));
            }
            assert!(parallel(), "a two-thread pool is used again");
            let caught = std::panic::catch_unwind(|| {
                let _serial = serial_while(true);
                panic!("inside")
            });
            assert!(caught.is_err());
            assert!(!SERIAL.get(), "the setting is restored after a panic");
        });
    }
}
