//! How each cell of a run ended: what `status.json` records, the runner writes, `--resume`
//! and `merge` read back.

use serde::{Deserialize, Serialize};

crate::named_enum! {
    /// How a cell ended.
    pub enum CellState("cell status") {
        /// Every step ran.
        Ok = "ok",
        /// `non_finite_stop` non-finite updates in a row.
        Collapsed = "collapsed",
        /// Interrupted (Ctrl-C) before its last step; the rows it wrote are kept.
        Stopped = "stopped",
    }
}

impl PartialEq<&str> for CellState {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// Final state of one cell.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CellStatus {
    pub regime: String,
    pub arm: String,
    pub seed: u64,
    pub status: CellState,
    pub steps_done: usize,
    pub coldstart_accuracy: f64,
    pub drift_sigma: Option<f64>,
}
