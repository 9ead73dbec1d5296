//! Statistics over seeds: means with 95% Student-t intervals (critical values from `statrs`),
//! and the exact small-sample tests the findings use.

use crate::util::moments::{mean, sample_sd};
use serde::Serialize;
use statrs::distribution::{ContinuousCDF, Normal, StudentsT};

/// Two-sided `1 − alpha` Student-t critical value with `df` degrees of freedom.
pub fn t_crit(alpha: f64, df: usize) -> f64 {
    if df == 0 {
        return f64::NAN;
    }
    StudentsT::new(0.0, 1.0, df as f64)
        .map(|t| t.inverse_cdf(1.0 - alpha / 2.0))
        .unwrap_or(f64::NAN)
}

/// Standard normal quantile.
pub fn z_quantile(p: f64) -> f64 {
    Normal::standard().inverse_cdf(p)
}

/// Two-sided 95% Student-t critical value for `n` samples (n − 1 degrees of freedom), from
/// `statrs`.
fn t95(n: usize) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    t_crit(0.05, n - 1)
}

/// Mean and 95% CI half-width over seeds.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct MeanCi {
    pub mean: f64,
    pub ci95: f64,
    pub n: usize,
}

pub fn mean_ci(v: &[f64]) -> MeanCi {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let n = v.len();
    if n == 0 {
        return MeanCi {
            mean: f64::NAN,
            ci95: f64::NAN,
            n,
        };
    }
    let (m, sd) = (mean(&v), sample_sd(&v));
    MeanCi {
        mean: m,
        ci95: t95(n) * sd / (n as f64).sqrt(),
        n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_ci_by_hand() {
        // Values 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.3027, half-width 4.3027 / sqrt(3).
        let m = mean_ci(&[1.0, f64::NAN, 2.0, 3.0]);
        assert_eq!((m.mean, m.n), (2.0, 3));
        assert!((m.ci95 - 4.302_653 / 3f64.sqrt()).abs() < 1e-5);
        // Beyond 10 seeds the interval uses t, not 1.96: t(0.975, 14) = 2.1448.
        let v: Vec<f64> = (0..15).map(f64::from).collect();
        let sd = (v.iter().map(|x| (x - 7.0f64).powi(2)).sum::<f64>() / 14.0).sqrt();
        assert!((mean_ci(&v).ci95 - 2.144_787 * sd / 15f64.sqrt()).abs() < 1e-5);
    }
}
