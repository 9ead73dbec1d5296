//! What one cell needs in memory, estimated from its sizes before anything is allocated, and
//! the check of that estimate against the machine's memory: a spec too large for the machine
//! is refused with the knobs to turn instead of aborting on an allocation mid-run.
//!
//! The estimate is an order of magnitude, on the side of too much, in f32 (4 bytes):
//! - **weights and optimizer state**: the parameters
//!   ([`crate::model::ModelConfig::num_params`]) ×
//!   (7 + `rollout_staleness`) copies: the policy, its gradient, AdamW's two moments, the
//!   frozen reference, the rollout engine's copy, the cold start it came from, and one
//!   snapshot per step of staleness;
//! - **activations**: one forward kept for its backward and as much again for its gradients,
//!   over the larger of an RL minibatch (`batch_prompts / minibatches × group_size` rows) and a
//!   cold-start batch (`coldstart.batch_size` rows), each row the task's longest sequence; per
//!   token and layer 10·d_model (norms, q, k, v, attention output, projections, residual),
//!   n_heads × seq attention probabilities, and the FFN's own (router logits and gates,
//!   top_k × (2·d_model + 3·d_ff) for the experts, 3·d_ff for a shared expert, 3·dense_d_ff
//!   for a dense FFN); per token at the head 3·vocab + 2·d_model;
//! - **rollout**: the whole batch (`batch_prompts × group_size` rows of the longest sequence),
//!   per token and layer the KV cache (2·d_model) and the routes and router probabilities the
//!   drift metrics read (n_experts + 2·top_k), and the logits of a decoding step.
//!
//! At sort 4-16, B 16, G 8 it gives 1.4 GiB for `deep` and 6.8 GiB for `medium`, where a step
//! was measured at a peak RSS of 857 MiB and 5.3 GiB (docs/speed.md); every committed spec at
//! `deep` and `medium` stays below 24 GiB (both tested). A `d_model` or `batch_prompts` a
//! thousand times too large is refused.

use super::cell::CellConfig;
use crate::model::FfnKind;
use anyhow::{Result, bail};

/// Bytes of one f32.
const F32: f64 = 4.0;

/// Copies of the parameters a cell holds at once besides its staleness snapshots (see the
/// module docs).
const WEIGHT_COPIES: f64 = 7.0;

/// Bytes in a GiB, for messages.
const GIB: f64 = (1u64 << 30) as f64;

/// One cell's estimated peak memory, in bytes, by where it goes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MemoryEstimate {
    /// The model's parameter count.
    pub params: f64,
    /// Parameters, gradients, AdamW's moments, the reference, the engine's copy, snapshots.
    pub weights: f64,
    /// A training forward's activations and their gradients.
    pub activations: f64,
    /// The rollout batch's KV cache, routes and logits.
    pub rollout: f64,
}

impl MemoryEstimate {
    /// The estimate in bytes.
    pub fn total(&self) -> f64 {
        self.weights + self.activations + self.rollout
    }
}

impl CellConfig {
    /// This cell's estimated peak memory (see the module docs for what is counted).
    pub fn memory_estimate(&self) -> MemoryEstimate {
        let m = &self.model;
        let f = |x: usize| x as f64;
        let (d, layers, vocab) = (f(m.d_model), f(m.n_layers), f(m.vocab_size));
        let seq = f(self.task.max_seq_tokens());
        let params = m.num_params() as f64;
        let copies = WEIGHT_COPIES + f(self.rl.rollout_staleness);
        let weights = params * copies * F32;

        let shared = if m.shared_expert {
            3.0 * f(m.d_ff)
        } else {
            0.0
        };
        let ffn = match m.ffn {
            FfnKind::Moe => {
                2.0 * f(m.n_experts) + f(m.top_k) * (2.0 * d + 3.0 * f(m.d_ff)) + shared
            }
            FfnKind::Dense => 3.0 * f(m.dense_d_ff()) + d,
        };
        let per_layer = 10.0 * d + f(m.n_heads) * seq + ffn;
        let per_token = layers * per_layer + 3.0 * vocab + 2.0 * d;
        let minibatch_rows =
            f(self.rl.batch_prompts) / f(self.rl.minibatches.max(1)) * f(self.rl.group_size);
        let rows = minibatch_rows.max(f(self.coldstart.batch_size));
        let activations = 2.0 * rows * seq * per_token * F32;

        let batch_rows = f(self.rl.batch_prompts) * f(self.rl.group_size);
        let per_rollout_token = layers * (2.0 * d + f(m.n_experts) + 2.0 * f(m.top_k)) + vocab;
        let rollout = batch_rows * seq * per_rollout_token * F32;
        MemoryEstimate {
            params,
            weights,
            activations,
            rollout,
        }
    }

    /// `Err` when this cell's estimated memory exceeds `mem_bytes`, naming the cell, the
    /// estimate and its parts, the memory, and the sizes that drive it.
    pub fn check_fits(&self, mem_bytes: u64) -> Result<()> {
        let e = self.memory_estimate();
        if e.total() <= mem_bytes as f64 {
            return Ok(());
        }
        let (m, rl) = (&self.model, &self.rl);
        bail!(
            "regime '{}', arm '{}', seed {}: needs about {:.1} GiB but this machine has {:.1} GiB \
             (weights and optimizer state {:.1} GiB for {:.3e} parameters, activations {:.1} GiB, \
             rollout {:.1} GiB; an order-of-magnitude estimate, see docs/spec.md). The biggest \
             knobs: model d_model = {}, n_layers = {}, n_experts = {}, d_ff = {}, vocab_size = {}; \
             rl batch_prompts = {} × group_size = {} (minibatches = {}, rollout_staleness = {}), \
             coldstart.batch_size = {}, sequences of {} tokens (task.max_len = {})",
            self.regime,
            self.arm,
            self.seed,
            e.total() / GIB,
            mem_bytes as f64 / GIB,
            e.weights / GIB,
            e.params,
            e.activations / GIB,
            e.rollout / GIB,
            m.d_model,
            m.n_layers,
            m.n_experts,
            m.d_ff,
            m.vocab_size,
            rl.batch_prompts,
            rl.group_size,
            rl.minibatches,
            rl.rollout_staleness,
            self.coldstart.batch_size,
            self.task.max_seq_tokens(),
            self.task.max_len,
        );
    }
}

impl CellConfig {
    /// [`CellConfig::check_fits`] against this machine's memory ([`machine_memory`]); `Ok`
    /// where that is unknown.
    pub fn check_fits_machine(&self) -> Result<()> {
        machine_memory().map_or(Ok(()), |mem| self.check_fits(mem))
    }
}

/// `Err` naming the first of `cells` whose estimate exceeds `mem_bytes` (see
/// [`CellConfig::check_fits`]). Cells that run side by side share the memory: a runner with
/// `jobs` workers passes `mem_bytes / jobs`.
pub fn check_cells_fit(cells: &[CellConfig], mem_bytes: u64) -> Result<()> {
    cells.iter().try_for_each(|c| c.check_fits(mem_bytes))
}

/// This machine's memory in bytes (`MemTotal` of `/proc/meminfo`, read once), or `None` where
/// that file does not say (not Linux): the check is then skipped.
pub fn machine_memory() -> Option<u64> {
    static MEM: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *MEM.get_or_init(|| {
        let text = std::fs::read_to_string("/proc/meminfo").ok()?;
        parse_mem_total(&text)
    })
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let n: u64 = words.next()?.parse().ok()?;
    let unit = match words.next() {
        Some("kB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    n.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mem_total() {
        let text = "MemTotal:       24683772 kB\nMemFree:         1000 kB\n";
        assert_eq!(parse_mem_total(text), Some(24683772 * 1024));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    }
}
