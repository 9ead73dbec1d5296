//! driftlab: routing-stability simulator for MoE language models under RL post-training.

pub mod bench;
pub mod cli;
pub mod coldstart;
pub mod device;
pub mod generate;
pub mod model;
pub mod optim;
pub mod run;
pub mod task;
pub mod tensors;
pub mod util;
