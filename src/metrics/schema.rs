//! The frame schema: every column of every frame, its dtype and its meaning (DESIGN §7–§8).
//! The writer checks each row against it, the report reads by it, and `driftlab schema` prints
//! it as JSON for readers in other languages (the Python interop test reads that output).

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    /// UTF-8 string (Polars `String`).
    Str,
    /// 64-bit integer (Polars `Int64`).
    Int,
    /// Nullable 64-bit float (Polars `Float64`); null where a metric does not apply.
    Float,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Col {
    pub name: &'static str,
    pub dtype: Dtype,
    pub doc: &'static str,
    /// Whether `driftlab report` reads the column; `driftlab slim` drops those it does not
    /// (optimizer losses, gradient norms, timings and the like), so a committed folder keeps
    /// what its report needs.
    pub report_reads: bool,
}

impl Col {
    /// The column, marked as one no report reads.
    const fn unread(self) -> Col {
        Col {
            report_reads: false,
            ..self
        }
    }
}

const fn s(name: &'static str, doc: &'static str) -> Col {
    Col {
        name,
        dtype: Dtype::Str,
        doc,
        report_reads: true,
    }
}
const fn i(name: &'static str, doc: &'static str) -> Col {
    Col {
        name,
        dtype: Dtype::Int,
        doc,
        report_reads: true,
    }
}
const fn f(name: &'static str, doc: &'static str) -> Col {
    Col {
        name,
        dtype: Dtype::Float,
        doc,
        report_reads: true,
    }
}

/// The columns every frame starts with: which cell (and step) a row belongs to.
pub const IDENTITY: &[Col] = &[
    s("experiment", "experiment name"),
    s(
        "regime",
        "regime name (a named block of overrides; `default` when the spec names none)",
    ),
    s("arm", "arm name as the spec spells it"),
    s(
        "algorithm",
        "objective: grpo | gspo | gspo_token | gvpo | cispo | gmpo",
    ),
    s("routing", "routing mode: native | r2 | r3"),
    s("ffn", "feed-forward block: moe | dense"),
    s(
        "old_logp",
        "where the ratios' π_old comes from: recompute (trainer) | rollout (engine log-probs)",
    ),
    i(
        "rollout_staleness",
        "configured staleness k: rollouts sampled by the policy of k steps before",
    ),
    i("n_layers", "transformer blocks of the cell's model"),
    s("router", "MoE router: softmax | sigmoid_bias"),
    s(
        "router_shift",
        "RSPO's router-shift weighting of the token ratios: on | off",
    ),
    i("seed", "seed of the cell (cold start, rollouts, noise)"),
    i("step", "RL step, from 0"),
];

/// One frame: a file `<name>.parquet` of rows at one grain.
#[derive(Debug, Serialize)]
pub struct FrameSchema {
    pub name: &'static str,
    pub grain: &'static str,
    /// Key columns after the identity (`minibatch`, `layer`).
    #[serde(skip)]
    keys: &'static [Col],
    #[serde(skip)]
    metrics: &'static [Col],
}

impl FrameSchema {
    /// Every column in file order: identity, keys, metrics.
    pub fn columns(&self) -> impl Iterator<Item = &'static Col> + use<> {
        let (keys, metrics) = (self.keys, self.metrics);
        IDENTITY.iter().chain(keys).chain(metrics)
    }

    pub fn file_name(&self) -> String {
        format!("{}.parquet", self.name)
    }
}

mod columns;

pub use columns::{EVENTS, LAYERS, LENGTHS, PREFIXES, STEPS, UPDATES};

/// The six frames of a run, in the order they are written.
pub fn frames() -> [&'static FrameSchema; 6] {
    [&STEPS, &UPDATES, &LAYERS, &LENGTHS, &PREFIXES, &EVENTS]
}

#[derive(Serialize)]
struct FrameJson {
    #[serde(flatten)]
    frame: &'static FrameSchema,
    columns: Vec<&'static Col>,
}

/// `driftlab schema`: every frame with its columns, as pretty JSON.
pub fn to_json() -> serde_json::Result<String> {
    let frames: Vec<FrameJson> = frames()
        .into_iter()
        .map(|frame| FrameJson {
            frame,
            columns: frame.columns().collect(),
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({ "frames": frames }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The events frame documents every event kind by its name, and nothing else.
    #[test]
    fn the_kind_column_lists_every_event_kind() {
        let doc = EVENTS.columns().find(|c| c.name == "kind").unwrap().doc;
        let listed: Vec<&str> = doc.split(" | ").collect();
        assert_eq!(listed, crate::metrics::collapse::EventKind::NAMES);
    }

    #[test]
    fn column_names_are_unique_within_a_frame() {
        for f in frames() {
            let mut names: Vec<&str> = f.columns().map(|c| c.name).collect();
            names.sort_unstable();
            let n = names.len();
            names.dedup();
            assert_eq!(names.len(), n, "{}", f.name);
        }
    }
}
