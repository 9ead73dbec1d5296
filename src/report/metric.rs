//! The per-arm metrics, in one registry. Each row names a per-update or per-step column of
//! the frames; the summary averages it within each cell, then over the arm's seeds, and writes
//! it to `summary.json` and `summary.csv`; `driftlab check` guards it within its tolerance;
//! the report's summary table shows it when `in_table` says so. A new per-arm metric is one row
//! of [`METRICS`].

use super::stats::MeanCi;
use serde::ser::{Serialize, SerializeMap, Serializer};

/// The frame a metric's rows come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// One row per update (minibatch): averaged over the cell's updates.
    Updates,
    /// One row per RL step: averaged over the cell's steps.
    Steps,
}

/// One per-arm metric.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    /// The frame's column, and the metric's name in summaries and the check baseline.
    pub name: &'static str,
    pub source: Source,
    /// `driftlab check` tolerance `(abs, rel)`: passes when |new − base| ≤ abs + rel·|base|;
    /// None: not guarded.
    pub check: Option<(f64, f64)>,
    /// A column of the report's per-arm summary table.
    pub in_table: bool,
}

/// Every per-arm metric, in the order summaries list them.
pub const METRICS: &[Metric] = &[
    Metric {
        name: "drift_expert_frac",
        source: Source::Updates,
        check: Some((1e-4, 0.05)),
        in_table: true,
    },
    Metric {
        name: "drift_since_rollout_frac",
        source: Source::Updates,
        check: Some((1e-4, 0.05)),
        in_table: false,
    },
    Metric {
        name: "clip_frac_tok",
        source: Source::Updates,
        check: Some((1e-3, 0.05)),
        in_table: true,
    },
    Metric {
        name: "ratio_tok_var",
        source: Source::Updates,
        check: Some((1e-6, 0.05)),
        in_table: true,
    },
    Metric {
        name: "ratio_seq_var",
        source: Source::Updates,
        check: Some((1e-7, 0.05)),
        in_table: true,
    },
    Metric {
        name: "mismatch_kl_k3",
        source: Source::Steps,
        check: Some((1e-6, 0.05)),
        in_table: true,
    },
    Metric {
        name: "mismatch_route_frac",
        source: Source::Steps,
        check: Some((1e-3, 0.05)),
        in_table: false,
    },
    Metric {
        name: "mismatch_extreme_frac",
        source: Source::Steps,
        check: None,
        in_table: false,
    },
];

/// The columns of the metrics from `source`, in registry order.
pub fn columns(source: Source) -> Vec<&'static str> {
    METRICS
        .iter()
        .filter(|m| m.source == source)
        .map(|m| m.name)
        .collect()
}

/// One arm's mean and interval of every metric, in [`METRICS`] order; written as
/// `name: {mean, ci95, n}` entries.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricMeans(pub Vec<MeanCi>);

impl MetricMeans {
    /// The metric called `name`; panics on a name the registry does not have (a typo in code).
    pub fn get(&self, name: &str) -> &MeanCi {
        let k = METRICS
            .iter()
            .position(|m| m.name == name)
            .unwrap_or_else(|| panic!("no per-arm metric '{name}' in report::metric::METRICS"));
        &self.0[k]
    }
}

impl Serialize for MetricMeans {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (m, v) in METRICS.iter().zip(&self.0) {
            map.serialize_entry(m.name, v)?;
        }
        map.end()
    }
}
