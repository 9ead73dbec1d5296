//! Named experiments: specs, the cells they resolve to, and the runner over those cells.

pub mod book;
pub mod catalog;
pub mod cell;
pub mod cell_groups;
pub mod claim;
mod figure_keys;
pub mod memory;
pub mod merge;
pub mod regime;
pub mod resume;
pub mod role;
pub mod runner;
pub mod shard;
pub mod spec;
pub mod status;
pub(crate) mod version;

pub use catalog::{find_spec, list_specs};
pub use cell::CellConfig;
pub use claim::{CLAIM_LETTERS, Claim, ComputeTarget, DEFAULT_CLAIMS};
pub use role::Role;
pub use runner::{RunOptions, cold_start, run_experiment};
pub use shard::Shard;
pub use spec::{ArmSpec, ExperimentSpec, MapAt, RegimeSpec};
pub use status::{CellState, CellStatus};
