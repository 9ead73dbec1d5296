//! driftlab: routing-stability simulator for MoE language models under RL post-training.
//!
//! # Layers
//!
//! The modules form layers, listed bottom up. A module imports from its own layer and the
//! layers below it, never from a layer above; `tests/source_shape.rs` checks that the file
//! graph has no import cycle and that the layer rules hold.
//!
//! 1. **Utilities**, no simulation in them: [`util`] ([`util::io`]: Parquet, CSV, JSON, atomic
//!    writes; [`util::hash`]: stable hashes, seeds of random streams; [`util::lock`]: lock files
//!    for work several processes share; [`util::names`]: typed names of closed sets;
//!    [`util::progress`]: bars and log lines; [`util::parallel`]: order-stable parallel maps;
//!    [`util::host`]: the machine a run ran on; [`util::tensors`]: host/device conversions), and
//!    [`device`] (`--device`, `--threads`).
//! 2. **The kernels**: [`kernels`], the one surface of the ops whose CPU-backend form differs
//!    from its plain burn form (attention, the QKV projection, the expert products, SwiGLU,
//!    RMS norm, `exp`/softmax, the gradient norm), each choosing its reference or its flex form
//!    in one place; the rules that keep them bitwise ([`kernels::gemm_paths`]); the test hooks
//!    ([`kernels::hooks`]). They import `util` only.
//! 3. **The model and the task**: [`model`] (the instrumented MoE transformer, written against
//!    the kernels' surface: no backend in it), [`task`] (the verifiable tasks, their tokenizer, rewards and eval sets),
//!    [`optim`] (AdamW with parameter groups and global gradient clipping).
//! 4. **Training**: [`generate`] (sampling with routing traces), [`coldstart`] (the supervised
//!    cold start and its cache), [`rl`] (rollouts, objectives, routing modes, drift knobs, the
//!    trainer).
//! 5. **Measurement**: [`metrics`] (per-step, per-update and per-layer rows, collapse events,
//!    the frames' schema).
//! 6. **Experiments**: [`experiment`] (specs, cells, the runner, shards, resume, merge),
//!    [`bench`](mod@bench) (throughput measurements).
//! 7. **The report** of a results folder: [`report`] (summaries, statistics, plots,
//!    report.md), and [`check`] (the CI regression against a baseline, which reads it).
//! 8. **Commands**: [`cli`] (the top-level parser) and [`commands`] (one file per subcommand:
//!    its arguments and what it runs). Nothing below imports them; `main.rs` only parses and
//!    dispatches.

pub mod bench;
pub mod check;
pub mod cli;
pub mod coldstart;
pub mod commands;
pub mod device;
pub mod experiment;
pub mod generate;
pub mod kernels;
pub mod metrics;
pub mod model;
pub mod optim;
pub mod report;
pub mod rl;
pub mod task;
pub mod util;

// flex allocates a fresh buffer for most tensor ops; mimalloc keeps freed pages for reuse
// instead of returning them to the OS and faulting them back in (≈10% of MoE layer time).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tell mimalloc never to return freed memory to the OS, unless `MIMALLOC_PURGE_DELAY` is set
/// (then that value holds). By default it purges freed memory a second after the free. A
/// `medium` step frees and reallocates buffers of tens of MB; each such buffer came back as
/// fresh huge pages that the kernel zeroes, which was a fifth of a cold-start step's profile.
/// The peak RSS is the same either way: freed memory is reused, not added to. The binary
/// calls this first; `bench` compares both settings.
pub fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        set_purge_delay_ms(-1);
    }
}

// `mi_option_purge_delay` is 15 in both the v2 and the v3 `mi_option_e` of the
// libmimalloc-sys 0.1.49 that Cargo.lock pins (v3, whose default for it, 1000, is tested); the
// crate exports these functions only with its `extended` feature, so they are declared here.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

/// Set mimalloc's `purge_delay` option, in milliseconds (-1: never purge; 1000 by default).
pub fn set_purge_delay_ms(ms: i64) {
    // SAFETY: mi_option_set only stores the value; mimalloc reads options atomically.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, ms as std::ffi::c_long) }
}

/// mimalloc's `purge_delay` option now, in milliseconds.
#[allow(clippy::useless_conversion)] // c_long is i64 here, i32 on Windows
pub fn purge_delay_ms() -> i64 {
    // SAFETY: reads an option value.
    i64::from(unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) })
}

#[cfg(test)]
mod allocator_tests {
    /// Option 15 is `purge_delay`: its default in mimalloc v3 is 1000 ms (its neighbours
    /// default to 1 and 0), and a set value reads back. No other test touches it.
    #[test]
    fn option_15_is_mimallocs_purge_delay() {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(super::purge_delay_ms(), 1000);
        }
        super::set_purge_delay_ms(-1);
        assert_eq!(super::purge_delay_ms(), -1);
        super::set_purge_delay_ms(1000);
        assert_eq!(super::purge_delay_ms(), 1000);
    }
}
