//! Paired statistics for arms that share seeds: per-seed differences (or log-ratios), their
//! mean with a Student-t and a seed-bootstrap 95% interval, the effect size d_z, the paired
//! sign-flip permutation test ([`super::sign_flip`]), Holm's step-down adjustment over a
//! report's endpoints, cluster-then-average for per-update metrics, and the seeds a design
//! would need.
//!
//! Distributions come from `statrs`, never from typed-in tables.

pub use super::sign_flip::{FlipMethod, FlipP, Tail, sign_flip};
use super::stats::{MeanCi, mean_ci};
pub use super::stats::{t_crit, z_quantile};
use crate::util::moments::sample_sd;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Uniform};
use serde::Serialize;

/// How two arms' per-seed values are compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scale {
    /// `b − a`.
    Difference,
    /// `ln b − ln a` (positive, heavy-tailed quantities: KLs, variances); seeds where either
    /// value is not positive are left out.
    LogRatio,
}

/// A paired comparison of `b` against `a` over the seeds both have.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Paired {
    pub scale: Scale,
    /// Per-seed differences (on `scale`), in seed order.
    pub diffs: Vec<f64>,
    pub n: usize,
    pub mean: f64,
    /// 95% Student-t interval of the mean difference (NaN below 2 seeds).
    pub t_ci: (f64, f64),
    /// 95% percentile interval from resampling seeds (10 000 resamples, fixed seed).
    pub boot_ci: (f64, f64),
    /// Effect size d_z = mean / sd of the differences.
    pub dz: f64,
    /// Two-sided sign-flip permutation p-value ([`sign_flip`]; no report table prints it,
    /// the findings test one-sided in the claimed direction).
    pub p: f64,
}

/// The paired comparison of `b` against `a` (index i of each is seed i); pairs where either
/// side is not finite (or, on the log scale, not positive) are left out. `None` without a pair.
pub fn paired(a: &[f64], b: &[f64], scale: Scale) -> Option<Paired> {
    let diffs: Vec<f64> = a
        .iter()
        .zip(b)
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .filter_map(|(&x, &y)| match scale {
            Scale::Difference => Some(y - x),
            Scale::LogRatio => (x > 0.0 && y > 0.0).then(|| y.ln() - x.ln()),
        })
        .collect();
    let n = diffs.len();
    if n == 0 {
        return None;
    }
    let MeanCi {
        mean: m,
        ci95: half,
        ..
    } = mean_ci(&diffs);
    let s = sample_sd(&diffs);
    Some(Paired {
        scale,
        n,
        mean: m,
        t_ci: (m - half, m + half),
        boot_ci: bootstrap_ci(&diffs, 10_000, 0.05, 0x5eed),
        dz: m / s,
        p: sign_flip_p(&diffs),
        diffs,
    })
}

/// Percentile bootstrap `1 − alpha` interval of the mean, resampling the values with
/// replacement `reps` times from a seeded stream.
pub fn bootstrap_ci(v: &[f64], reps: usize, alpha: f64, seed: u64) -> (f64, f64) {
    let n = v.len();
    if n < 2 {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let pick = Uniform::new(0, n).expect("n > 0");
    let mut means: Vec<f64> = (0..reps)
        .map(|_| (0..n).map(|_| v[pick.sample(&mut rng)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * reps as f64).floor() as usize).min(reps - 1)];
    (at(alpha / 2.0), at(1.0 - alpha / 2.0))
}

/// Two-sided p-value of the paired sign-flip permutation test of "the differences are
/// symmetric about 0": the share of the 2^n sign patterns whose |Σ s_i d_i| is at least the
/// observed |Σ d_i| ([`sign_flip`]: exact by enumeration or over the values' lattice, else
/// sampled). With n values the smallest p is 2 / 2^n: 0.25 at 3 seeds, 0.031 at 6.
pub fn sign_flip_p(d: &[f64]) -> f64 {
    sign_flip(d, Tail::TwoSided).p
}

/// One-sided p-value of the sign-flip test against "the differences are symmetric about 0",
/// in favour of a positive mean: the share of sign patterns whose Σ s_i d_i is at least the
/// observed Σ d_i. The smallest p with n values is 1 / 2^n (0.00098 at 10 seeds). A shift
/// tests other nulls: `sign_flip_p_greater(d + δ)` is the non-inferiority test of mean > −δ.
pub fn sign_flip_p_greater(d: &[f64]) -> f64 {
    sign_flip(d, Tail::Greater).p
}

/// One-sided exact sign test: the probability of at least `k` successes in `n` fair coin
/// flips (1 when n = 0).
pub fn sign_test_p_greater(k: usize, n: usize) -> f64 {
    if k == 0 {
        return 1.0;
    }
    // Exact binomial tail, summed in logs so that n up to thousands stays finite.
    let ln_choose = |n: usize, i: usize| -> f64 {
        (1..=i)
            .map(|j| ((n + 1 - j) as f64).ln() - (j as f64).ln())
            .sum()
    };
    (k..=n)
        .map(|i| (ln_choose(n, i) - n as f64 * std::f64::consts::LN_2).exp())
        .sum::<f64>()
        .min(1.0)
}

/// Holm–Bonferroni step-down adjusted p-values, in the input order: sorted ascending, the
/// i-th (from 0) is multiplied by `m − i`, made non-decreasing, capped at 1. NaNs stay NaN and
/// do not count toward m.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..p.len()).filter(|&i| p[i].is_finite()).collect();
    idx.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let m = idx.len();
    let mut out = vec![f64::NAN; p.len()];
    let mut running = 0f64;
    for (rank, &i) in idx.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p[i]).min(1.0));
        out[i] = running;
    }
    out
}

/// Mean of each cluster (cell), in order of first appearance: per-update metrics are averaged
/// within their cell first, so that autocorrelated updates count once per cell.
pub fn cluster_means(values: &[f64], clusters: &[usize]) -> Vec<f64> {
    let mut order: Vec<usize> = Vec::new();
    let mut sums: Vec<(f64, usize)> = Vec::new();
    for (&v, &c) in values.iter().zip(clusters) {
        if !v.is_finite() {
            continue;
        }
        let k = match order.iter().position(|&o| o == c) {
            Some(k) => k,
            None => {
                order.push(c);
                sums.push((0.0, 0));
                order.len() - 1
            }
        };
        sums[k].0 += v;
        sums[k].1 += 1;
    }
    sums.iter().map(|(s, n)| s / *n as f64).collect()
}

/// The smallest number of seeds at which a paired two-sided t-test at level `alpha` has
/// `power` against the effect size `dz` (normal approximation of the noncentral t, refined
/// with the t critical value); `None` when dz is zero or not finite, or beyond 10 000.
pub fn seeds_needed(dz: f64, alpha: f64, power: f64) -> Option<usize> {
    if !dz.is_finite() || dz == 0.0 {
        return None;
    }
    let zb = z_quantile(power);
    (2..=10_000).find(|&n| {
        let ncp = dz.abs() * (n as f64).sqrt();
        ncp >= t_crit(alpha, n - 1) + zb
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_critical_values_match_the_tables() {
        for (df, want) in [
            (1, 12.706),
            (2, 4.303),
            (9, 2.262),
            (20, 2.086),
            (29, 2.045),
        ] {
            assert!((t_crit(0.05, df) - want).abs() < 1e-3, "df {df}");
        }
        assert!((z_quantile(0.975) - 1.959964).abs() < 1e-6);
    }
}
