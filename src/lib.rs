//! driftlab: routing-stability simulator for MoE language models under RL post-training.

pub mod bench;
pub mod check;
pub mod cli;
pub mod coldstart;
pub mod device;
pub mod experiment;
pub mod fastmath;
pub mod generate;
pub mod hash;
pub mod host;
pub mod io;
pub mod learn;
pub mod lock;
pub mod metrics;
pub mod model;
pub mod names;
pub mod optim;
pub mod parallel;
pub mod progress;
pub mod report;
pub mod rl;
pub mod run;
pub mod slurm;
pub mod task;
pub mod tensors;

// flex allocates a fresh buffer for most tensor ops; mimalloc keeps freed pages for reuse
// instead of returning them to the OS and faulting them back in (≈10% of MoE layer time).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
