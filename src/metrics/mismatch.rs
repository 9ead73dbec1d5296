//! The train–inference mismatch of a step: the trainer's recompute of the sampled tokens'
//! log-probs (π_old) against the rollout engine's, `ln ρ = logp_old − logp_mu` per token.

use crate::rl::StepOutput;

/// Per token of a step, `ln ρ = logp_old − logp_mu` (trainer against rollout engine).
fn log_ratios(out: &StepOutput) -> Vec<f64> {
    out.logp_old
        .iter()
        .zip(&out.logp_mu)
        .map(|(o, m)| f64::from(o - m))
        .collect()
}

/// Train–inference mismatch of a step: `(mismatch_kl_k3, mismatch_extreme_frac)`, with
/// `ρ = exp(logp_old − logp_mu)`: mean of `ρ − 1 − ln ρ`, and the share of tokens with
/// `max(ρ, 1/ρ) > 2`.
pub fn mismatch_stats(out: &StepOutput) -> (f64, f64) {
    let rho: Vec<f64> = log_ratios(out).into_iter().map(f64::exp).collect();
    let n = rho.len().max(1) as f64;
    let kl = rho.iter().map(|p| p - 1.0 - p.ln()).sum::<f64>() / n;
    let extreme = rho.iter().filter(|&&p| p.max(1.0 / p) > 2.0).count() as f64 / n;
    (kl, extreme)
}

/// The rest of a step's mismatch suite, with `ln ρ = logp_old − logp_mu`: mean |ln ρ|, mean
/// (ln ρ)², and the share of tokens with max(ρ, 1/ρ) > 5.
pub fn mismatch_suite(out: &StepOutput) -> [f64; 3] {
    let d = log_ratios(out);
    let n = d.len().max(1) as f64;
    [
        d.iter().map(|x| x.abs()).sum::<f64>() / n,
        d.iter().map(|x| x * x).sum::<f64>() / n,
        d.iter().filter(|x| x.abs() > 5f64.ln()).count() as f64 / n,
    ]
}
