//! Group-relative advantages: each response's reward against its prompt group.

use super::config::AdvantageMode;

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
        let n = g.len() as f64;
        let mean = g.iter().map(|&r| f64::from(r)).sum::<f64>() / n;
        let var = g
            .iter()
            .map(|&r| (f64::from(r) - mean).powi(2))
            .sum::<f64>()
            / (n - 1.0);
        for &r in g {
            let c = f64::from(r) - mean;
            out.push(match mode {
                AdvantageMode::MeanStd => (c / (var.sqrt() + 1e-6)) as f32,
                AdvantageMode::MeanOnly => c as f32,
            });
        }
    }
    out
}
