//! Named experiments: specs, the cells they resolve to, and the runner over those cells.

pub mod cell;
pub mod runner;
pub mod spec;

pub use cell::CellConfig;
pub use runner::{CellStatus, RunOptions, run_experiment};
pub use spec::{ArmSpec, ExperimentSpec, RegimeSpec};
