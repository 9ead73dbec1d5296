//! Mean and variance of a slice, written once: Σx / n, and Σ(x − mean)² / (n − ddof) about
//! that mean, each sum taken left to right.
//!
//! Why not `statrs::statistics`: its mean and variance fold an online (Welford) update, which
//! rounds differently from Σx / n. These moments feed committed numbers (the frames' ratio and
//! reward statistics, the report's intervals and effect sizes), so they keep the summation
//! order those numbers were computed with; the tests hold them to statrs to rounding.

/// Σx / n; NaN for an empty slice.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Σ(x − m)² / (n − ddof) with m the [`mean`].
fn var(v: &[f64], ddof: f64) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len() as f64 - ddof)
}

/// Population variance Σ(x − mean)² / n; NaN for an empty slice.
pub fn population_var(v: &[f64]) -> f64 {
    var(v, 0.0)
}

/// Sample variance Σ(x − mean)² / (n − 1); NaN below two values.
pub fn sample_var(v: &[f64]) -> f64 {
    if v.len() < 2 { f64::NAN } else { var(v, 1.0) }
}

/// Sample standard deviation, the square root of [`sample_var`].
pub fn sample_sd(v: &[f64]) -> f64 {
    sample_var(v).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use statrs::statistics::Statistics;

    #[test]
    fn moments_by_hand() {
        let v = [1.0, 2.0, 3.0, 6.0];
        assert_eq!(mean(&v), 3.0);
        assert_eq!(population_var(&v), 14.0 / 4.0);
        assert_eq!(sample_var(&v), 14.0 / 3.0);
        assert_eq!(sample_sd(&[1.0, 3.0]), 2f64.sqrt());
        assert!(mean(&[]).is_nan() && population_var(&[]).is_nan());
        assert!(sample_var(&[1.0]).is_nan());
    }

    /// The same statistics as statrs's, to rounding (not bitwise: statrs sums online).
    #[test]
    fn moments_agree_with_statrs_to_rounding() {
        let v: Vec<f64> = (0..97)
            .map(|i| (f64::from(i) * 0.37).sin() * 1e3 + 0.1)
            .collect();
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
        assert!(close(mean(&v), v.iter().mean()));
        assert!(close(population_var(&v), v.iter().population_variance()));
        assert!(close(sample_var(&v), v.iter().variance()));
        assert!(close(sample_sd(&v), v.iter().std_dev()));
    }
}
