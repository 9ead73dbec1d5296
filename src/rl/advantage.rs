//! Group-relative advantages: each response's reward against its prompt group.

use super::config::AdvantageMode;
use crate::util::moments::{mean, sample_var};

/// Advantages for rewards laid out as consecutive groups of `group_size`.
/// `MeanStd`: `(r − mean) / (std + 1e-6)` with the unbiased std (G − 1); `MeanOnly`: `r − mean`.
/// A group with identical rewards gets zeros (never NaN).
pub fn advantages(rewards: &[f32], group_size: usize, mode: AdvantageMode) -> Vec<f32> {
    assert!(
        group_size >= 2 && rewards.len().is_multiple_of(group_size),
        "rewards must form whole groups of at least 2"
    );
    let mut out = Vec::with_capacity(rewards.len());
    for g in rewards.chunks_exact(group_size) {
        let g: Vec<f64> = g.iter().map(|&r| f64::from(r)).collect();
        let (m, var) = (mean(&g), sample_var(&g));
        for r in g {
            let c = r - m;
            out.push(match mode {
                AdvantageMode::MeanStd => (c / (var.sqrt() + 1e-6)) as f32,
                AdvantageMode::MeanOnly => c as f32,
            });
        }
    }
    out
}
