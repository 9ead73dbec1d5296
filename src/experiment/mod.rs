//! Named experiments: specs, and the runner over arms × seeds.

pub mod runner;
pub mod spec;

pub use runner::{CellStatus, RunOptions, run_experiment};
pub use spec::{ArmSpec, ExperimentSpec, RegimeSpec};
