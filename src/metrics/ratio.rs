//! Importance-ratio statistics of one update (DESIGN §7).

use crate::util::moments::{mean, population_var};

/// Mean and population variance (NaN for an empty slice).
pub fn mean_var(v: &[f64]) -> (f64, f64) {
    (mean(v), population_var(v))
}

/// Effective sample size of weights: `(Σw)² / (n·Σw²)`; 1 for equal weights.
pub fn ess(w: &[f64]) -> f64 {
    let s: f64 = w.iter().sum();
    let s2: f64 = w.iter().map(|x| x * x).sum();
    if w.is_empty() || s2 == 0.0 {
        f64::NAN
    } else {
        s * s / (w.len() as f64 * s2)
    }
}

/// Mean over responses of the variance of the log-ratio within each response.
pub fn within_seq_var(logratio: &[f64], seg: &[usize], n_resp: usize) -> f64 {
    let mut by: Vec<Vec<f64>> = vec![Vec::new(); n_resp];
    for (x, &i) in logratio.iter().zip(seg) {
        by[i].push(*x);
    }
    let vars: Vec<f64> = by
        .iter()
        .filter(|v| !v.is_empty())
        .map(|v| mean_var(v).1)
        .collect();
    mean_var(&vars).0
}

/// Mean k3 divergence `e^d − d − 1` with `d = b − a` per token.
pub fn k3(a: &[f32], b: &[f32]) -> f64 {
    if a.is_empty() {
        return f64::NAN;
    }
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(y) - f64::from(x);
            d.exp() - d - 1.0
        })
        .sum::<f64>()
        / a.len() as f64
}
