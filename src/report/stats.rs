//! Statistics over seeds: means with 95% Student-t intervals (critical values from `statrs`),
//! and the exact small-sample tests the findings use.

use serde::Serialize;

/// Two-sided 95% Student-t critical value for `n` samples (n − 1 degrees of freedom), from
/// `statrs`.
fn t95(n: usize) -> f64 {
    if n < 2 {
        return f64::NAN;
    }
    super::paired::t_crit(0.05, n - 1)
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
    let m = v.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        f64::NAN
    };
    MeanCi {
        mean: m,
        ci95: t95(n) * sd / (n as f64).sqrt(),
        n,
    }
}

/// Do two 95% intervals (each over at least two seeds) not overlap, with `a` below `b`?
pub fn below(a: &MeanCi, b: &MeanCi) -> bool {
    a.n >= 2
        && b.n >= 2
        && a.ci95.is_finite()
        && b.ci95.is_finite()
        && a.mean + a.ci95 < b.mean - b.ci95
}

/// Every seed of `a` below every seed of `b`, with at least 3 seeds each: an exact one-sided
/// Mann–Whitney test at p = 1/C(n_a + n_b, n_a) ≤ 0.05. Used for positive, heavy-tailed
/// quantities (KLs) whose t-intervals straddle zero.
pub fn separated(a: &[f64], b: &[f64]) -> bool {
    let a: Vec<f64> = a.iter().copied().filter(|x| x.is_finite()).collect();
    let b: Vec<f64> = b.iter().copied().filter(|x| x.is_finite()).collect();
    a.len() >= 3
        && b.len() >= 3
        && a.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            < b.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Pearson correlation.
pub fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    if x.len() < 3 {
        return f64::NAN;
    }
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let syy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    sxy / (sxx * syy).sqrt()
}

/// 95% interval of a Pearson correlation over `n` pairs (Fisher z).
pub fn pearson_ci(r: f64, n: usize) -> (f64, f64) {
    if n < 4 || !r.is_finite() {
        return (f64::NAN, f64::NAN);
    }
    let z = r.clamp(-0.999_999, 0.999_999).atanh();
    let se = 1.0 / ((n - 3) as f64).sqrt();
    let q = super::paired::z_quantile(0.975);
    ((z - q * se).tanh(), (z + q * se).tanh())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separated_needs_every_seed_beyond_every_other() {
        assert!(separated(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]));
        assert!(!separated(&[1.0, 2.0, 5.0], &[4.0, 5.0, 6.0]));
        assert!(!separated(&[1.0, 2.0], &[4.0, 5.0]));
    }

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
