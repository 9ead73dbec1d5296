//! RSPO's router-shift weighting (arXiv 2510.23027), a modifier of the ratio-based objectives.
//!
//! Per response token t and MoE layer l, over the k experts that π_old's forward ran at the
//! position that predicts t, `d_l(t) = (1/k) Σ_e |ln p_θ,l(e) − ln p_old,l(e)|`, `p` being the
//! router distributions of the update forward and of π_old's pass. Over the L MoE layers,
//! `γ_t = exp(−(1/L) Σ_l d_l(t))` (the geometric mean of the per-layer `exp(−d_l)`), in
//! (0, 1]; `γ̃_t = sg(max(γ_t, floor))`. θ_old is π_old's recompute at the start of the step,
//! also under `rollout_staleness` (the shift does not see how the sampler's routing lagged). The token ratio is rescaled before clipping,
//! `w̃_t = w_t · γ̃_t`, i.e. `ln π_old` is raised by `−ln γ̃_t`, so every ratio-based objective
//! (grpo, gspo, gspo_token, gmpo, cispo) applies it through its own ratio; a token whose
//! routing moved since π_old gets less weight. A dense model has no router: γ = 1.
//!
//! What the paper fixes and what is ours: stop-gradient, the floor and "rescale before clipping"
//! are from the paper's abstract (v2); the per-layer mean absolute log-probability shift over
//! π_old's activated experts and the geometric mean over layers follow the paper's equations as
//! quoted by secondary sources; the paper's text available to us names no floor value, and
//! 0.8 is the value of the public implementations. The paper's configuration is GMPO with the
//! router shift (RSPO = GMPO + RS).

use super::loss::LossStats;

/// γ̃ per response token. Per MoE layer: `now[l]` and `old[l]` are router distributions
/// `[positions, n_experts]`, `old_ids[l]` the ids π_old ran `[positions, k]`; `positions[t]`
/// is the layout position whose logits predict token t.
pub fn router_shift(
    now: &[Vec<f32>],
    old: &[Vec<f32>],
    old_ids: &[Vec<u16>],
    positions: &[usize],
    (n_experts, k): (usize, usize),
    floor: f64,
) -> Vec<f32> {
    let n_layers = now.len();
    positions
        .iter()
        .map(|&p| {
            if n_layers == 0 {
                return 1.0;
            }
            let mut sum = 0f64;
            for l in 0..n_layers {
                let ids = &old_ids[l][p * k..(p + 1) * k];
                let d: f64 = ids
                    .iter()
                    .map(|&e| {
                        let i = p * n_experts + e as usize;
                        (f64::from(now[l][i]).ln() - f64::from(old[l][i]).ln()).abs()
                    })
                    .sum();
                sum += d / k as f64;
            }
            (-sum / n_layers as f64).exp().max(floor) as f32
        })
        .collect()
}

/// `ln π_old` raised by `−ln γ̃` per token, so that `exp(logp − result) = w · γ̃`.
pub fn shifted_old_logp(logp_old: &[f32], gamma: &[f32]) -> Vec<f32> {
    logp_old
        .iter()
        .zip(gamma)
        .map(|(o, g)| o - g.ln())
        .collect()
}

impl LossStats {
    /// Report the raw ratios `π_θ / π_old` after an objective ran on the rescaled ones: token
    /// ratios divided by γ̃, sequence ratios by the geometric mean of γ̃ over the response
    /// (`seg`: response of each token, `lens`: tokens per response). The clipping statistics
    /// stay those of the rescaled ratios, which is what the objective clipped.
    pub fn unshift_ratios(&mut self, gamma: &[f32], seg: &[usize], lens: &[usize]) {
        let mut log_sum = vec![0f64; lens.len()];
        for ((w, &g), &i) in self.ratio_tok.iter_mut().zip(gamma).zip(seg) {
            *w /= g;
            log_sum[i] += f64::from(g).ln();
        }
        for ((s, l), &n) in self.ratio_seq.iter_mut().zip(log_sum).zip(lens) {
            *s = (f64::from(*s) / (l / n as f64).exp()) as f32;
        }
    }
}
