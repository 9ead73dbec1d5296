//! The paired statistics the findings use, on hand-built and seeded synthetic data.

use driftlab::report::paired::{
    Scale, bootstrap_ci, cluster_means, holm, paired, seeds_needed, sign_flip_p,
    sign_flip_p_greater, t_crit,
};
use driftlab::report::sign_flip::{
    DRAWS, FlipMethod, Tail, enumerated, lattice, lattice_p, sign_flip,
};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Normal};

#[test]
fn sign_flip_p_values_by_hand() {
    // d = [2, −1, 3], Σ = 4. The 8 sign patterns give Σ ∈ {4, 0, 6, −2, 2, −6, 0, −4}; four
    // have |Σ| ≥ 4: p = 4/8.
    assert_eq!(sign_flip_p(&[2.0, -1.0, 3.0]), 0.5);
    // All of one sign: only the pattern and its mirror reach |Σ|: 2 / 2^n.
    assert_eq!(sign_flip_p(&[1.0, 2.0, 3.0]), 0.25);
    assert_eq!(sign_flip_p(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), 2.0 / 64.0);
    // Ties at the observed value count: [1, 1] has Σ = 2, patterns 2, 0, 0, −2 → p = 2/4.
    assert_eq!(sign_flip_p(&[1.0, 1.0]), 0.5);
    // Zero differences: every pattern ties → p = 1.
    assert_eq!(sign_flip_p(&[0.0, 0.0, 0.0]), 1.0);
    // Beyond 20 values equal values lie on a lattice: the exact p = 2 / 2^25, not the
    // sampled floor 1 / 200 001.
    assert_eq!(sign_flip_p(&[1.0; 25]), 2.0 / 2f64.powi(25));
}

#[test]
fn one_sided_sign_flip_p_values_by_hand() {
    // d = [2, −1, 3], Σ = 4: of Σ ∈ {4, 0, 6, −2, 2, −6, 0, −4}, two are ≥ 4: p = 2/8.
    assert_eq!(sign_flip_p_greater(&[2.0, -1.0, 3.0]), 0.25);
    // All positive: only the observed pattern: 1 / 2^n.
    assert_eq!(sign_flip_p_greater(&[1.0, 2.0, 3.0]), 0.125);
    assert_eq!(sign_flip_p_greater(&[1.0; 10]), 1.0 / 1024.0);
    // All negative: every pattern is at least as large: p = 1.
    assert_eq!(sign_flip_p_greater(&[-1.0, -2.0, -3.0]), 1.0);
    // Non-inferiority by a shift: d = [−0.01, 0.02, 0.00] + δ 0.05 is all positive.
    let shifted: Vec<f64> = [-0.01, 0.02, 0.0].iter().map(|d| d + 0.05).collect();
    assert_eq!(sign_flip_p_greater(&shifted), 0.125);
}

#[test]
fn holm_adjustment_of_a_known_list() {
    // Sorted 0.005, 0.01, 0.03, 0.04 × 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 → monotone:
    // 0.02, 0.03, 0.06, 0.06; back in input order.
    let adj = holm(&[0.01, 0.04, 0.03, 0.005]);
    let want = [0.03, 0.06, 0.06, 0.02];
    for (a, w) in adj.iter().zip(want) {
        assert!((a - w).abs() < 1e-12, "{adj:?}");
    }
    let capped = holm(&[0.5, 0.6, f64::NAN]);
    assert_eq!(capped[0], 1.0);
    assert_eq!(capped[1], 1.0);
    assert!(capped[2].is_nan(), "NaN stays NaN and is not counted");
    let one = holm(&[0.2, f64::NAN]);
    assert_eq!(one[0], 0.2, "one finite p-value: m = 1");
    assert!(one[1].is_nan());
}

#[test]
fn paired_differences_and_log_ratios_by_hand() {
    let a = [1.0, 2.0, 3.0, f64::NAN];
    let b = [2.0, 4.0, 5.0, 1.0];
    let p = paired(&a, &b, Scale::Difference).unwrap();
    assert_eq!(p.diffs, vec![1.0, 2.0, 2.0]);
    assert_eq!(p.n, 3);
    let (m, sd) = (5.0 / 3.0, (1.0f64 / 3.0).sqrt());
    assert!((p.mean - m).abs() < 1e-12);
    let half = t_crit(0.05, 2) * sd / 3f64.sqrt();
    assert!((p.t_ci.0 - (m - half)).abs() < 1e-9 && (p.t_ci.1 - (m + half)).abs() < 1e-9);
    assert!((p.dz - m / sd).abs() < 1e-9);
    assert_eq!(p.p, 0.25);
    assert!(p.boot_ci.0 >= 1.0 && p.boot_ci.1 <= 2.0, "{:?}", p.boot_ci);
    let r = paired(&[1.0, 2.0, -1.0], &[2.0, 8.0, 3.0], Scale::LogRatio).unwrap();
    assert_eq!(r.n, 2, "a non-positive value leaves its seed out");
    assert!((r.diffs[0] - 2f64.ln()).abs() < 1e-12 && (r.diffs[1] - 4f64.ln()).abs() < 1e-12);
    assert!(paired(&[f64::NAN], &[1.0], Scale::Difference).is_none());
}

/// The seed-bootstrap 95% interval covers the true mean at about the stated rate (a percentile
/// bootstrap undercovers a little at small n; seeded simulation, 400 data sets of 12 draws).
#[test]
fn bootstrap_interval_covers_at_the_stated_rate() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
    let normal = Normal::new(1.0, 2.0).unwrap();
    let trials = 400;
    let covered = (0..trials)
        .filter(|&i| {
            let v: Vec<f64> = (0..12).map(|_| normal.sample(&mut rng)).collect();
            let (lo, hi) = bootstrap_ci(&v, 2000, 0.05, i);
            lo <= 1.0 && 1.0 <= hi
        })
        .count();
    let rate = covered as f64 / trials as f64;
    assert!((0.88..=0.98).contains(&rate), "coverage {rate}");
}

/// Per-update metrics are autocorrelated within a cell: treating 4 × 500 AR(1) updates as
/// independent gives intervals far too narrow (they miss the true mean most of the time), while
/// averaging within cells first gives intervals that cover it at about 95%.
#[test]
fn cluster_then_average_beats_pooling_on_autocorrelated_updates() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(11);
    let noise = Normal::new(0.0, 1.0).unwrap();
    let (cells, per_cell, phi) = (4, 500, 0.98);
    let ci = |v: &[f64]| {
        let n = v.len() as f64;
        let m = v.iter().sum::<f64>() / n;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        let h = t_crit(0.05, v.len() - 1) * sd / n.sqrt();
        (m - h, m + h)
    };
    let (mut pooled_hits, mut cluster_hits) = (0, 0);
    let trials = 200;
    for _ in 0..trials {
        let mut values = Vec::new();
        let mut clusters = Vec::new();
        for c in 0..cells {
            let mut x = noise.sample(&mut rng) / (1.0f64 - phi * phi).sqrt();
            for _ in 0..per_cell {
                x = phi * x + noise.sample(&mut rng);
                values.push(x);
                clusters.push(c);
            }
        }
        let (lo, hi) = ci(&values);
        pooled_hits += usize::from(lo <= 0.0 && 0.0 <= hi);
        let means = cluster_means(&values, &clusters);
        assert_eq!(means.len(), cells);
        let (lo, hi) = ci(&means);
        cluster_hits += usize::from(lo <= 0.0 && 0.0 <= hi);
    }
    let (pooled, cluster) = (
        pooled_hits as f64 / trials as f64,
        cluster_hits as f64 / trials as f64,
    );
    assert!(pooled < 0.6, "pooled coverage {pooled}");
    assert!(cluster > 0.88, "cluster coverage {cluster}");
}

#[test]
fn seeds_needed_grows_as_the_effect_shrinks() {
    // d_z = 1 at 80% power, α = 0.05: about 10 seeds (the exact noncentral-t answer is 10).
    let n1 = seeds_needed(1.0, 0.05, 0.8).unwrap();
    assert!((9..=11).contains(&n1), "{n1}");
    let n_half = seeds_needed(0.5, 0.05, 0.8).unwrap();
    assert!((32..=36).contains(&n_half), "{n_half}");
    assert_eq!(seeds_needed(0.0, 0.05, 0.8), None);
}

/// Random integer vectors of 1 to 16 values (some zero), seeded.
fn random_lattice_vectors() -> Vec<Vec<i64>> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(61);
    (0..120)
        .map(|i| {
            let n = 1 + i % 16;
            (0..n).map(|_| rng.random_range(-40i64..=40)).collect()
        })
        .collect()
}

/// The lattice count equals enumeration bit for bit where the float sums are exact (steps of
/// 1/256, accuracies on 256 prompts), and to 1e-15 on a step that binary cannot hold (1/100)
/// and on a shift by a margin (0.05 on 1/256: the lattice 1/1280).
#[test]
fn lattice_count_equals_enumeration() {
    for k in random_lattice_vectors() {
        for tail in [Tail::Greater, Tail::TwoSided] {
            let dyadic: Vec<f64> = k.iter().map(|&x| x as f64 / 256.0).collect();
            let want = enumerated(&dyadic, tail);
            assert_eq!(
                lattice_p(&k, tail).to_bits(),
                want.to_bits(),
                "{k:?} {tail:?}"
            );
            let found = lattice(&dyadic).expect("on the 1/256 lattice");
            assert_eq!(lattice_p(&found, tail).to_bits(), want.to_bits(), "{k:?}");
            for d in [
                k.iter().map(|&x| x as f64 / 100.0).collect::<Vec<f64>>(),
                dyadic.iter().map(|x| x + 0.05).collect(),
                dyadic.iter().map(|x| -x + 0.05).collect(),
            ] {
                let found = lattice(&d).unwrap_or_else(|| panic!("{d:?} on a lattice"));
                let (got, want) = (lattice_p(&found, tail), enumerated(&d, tail));
                assert!(
                    (got - want).abs() <= 1e-15,
                    "{d:?} {tail:?}: {got} vs {want}"
                );
            }
        }
    }
}

/// By hand, ties included.
#[test]
fn lattice_count_by_hand() {
    // ±2 ±1 ±3: sums {6, 4, 2, 0, 0, −2, −4, −6}; observed 2 − 1 + 3 = 4.
    assert_eq!(lattice_p(&[2, -1, 3], Tail::Greater), 2.0 / 8.0);
    assert_eq!(lattice_p(&[2, -1, 3], Tail::TwoSided), 4.0 / 8.0);
    // Zeros flip to themselves: every pattern ties.
    assert_eq!(lattice_p(&[0, 0, 0], Tail::Greater), 1.0);
    // 21 values of +1 and one of −1 (22 > 20: the lattice path): Σ = 22 − 2m with m minus
    // signs, observed 20, so the hits are m ≤ 1, the observed pattern's 21 ties among them:
    // (1 + 22) / 2^22.
    let mut d = vec![1.0 / 256.0; 21];
    d.push(-1.0 / 256.0);
    let got = sign_flip(&d, Tail::Greater);
    assert_eq!(got.method, FlipMethod::Lattice);
    assert_eq!(got.p, 23.0 / 2f64.powi(22));
    assert_eq!(sign_flip(&d, Tail::TwoSided).p, 46.0 / 2f64.powi(22));
}

/// A margin shift keeps 46 accuracy differences on a (finer) lattice: the p of d + 0.05 is the
/// exact p of the integers 5 k + 64 (steps of 1/1280), and a shift that makes every value
/// positive gives the smallest p, 1 / 2^46.
#[test]
fn margin_shifted_differences_stay_exact() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(62);
    let k: Vec<i64> = (0..46).map(|_| rng.random_range(-30i64..=50)).collect();
    let d: Vec<f64> = k.iter().map(|&x| x as f64 / 256.0).collect();
    let shifted: Vec<f64> = d.iter().map(|x| x + 0.05).collect();
    let got = sign_flip(&shifted, Tail::Greater);
    assert_eq!(got.method, FlipMethod::Lattice);
    let ints: Vec<i64> = k.iter().map(|x| 5 * x + 64).collect();
    assert_eq!(got.p, lattice_p(&ints, Tail::Greater));
    let up: Vec<f64> = d.iter().map(|x| x + 0.5).collect();
    assert_eq!(sign_flip_p_greater(&up), 1.0 / 2f64.powi(46));
}

/// Values on no lattice (log-ratios, draws from a normal) beyond 20 seeds are sampled, with
/// the observed pattern counted, so their p is never below 1 / (draws + 1).
#[test]
fn off_lattice_values_fall_back_to_sampling() {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(63);
    let normal = Normal::new(2.0, 1.0).unwrap();
    let d: Vec<f64> = (0..30).map(|_| normal.sample(&mut rng)).collect();
    assert_eq!(lattice(&d), None);
    let got = sign_flip(&d, Tail::Greater);
    assert_eq!(got.method, FlipMethod::Sampled);
    let floor = 1.0 / (DRAWS + 1) as f64;
    assert!(got.p >= floor && got.p < 1e-3, "{}", got.p);
    let logs: Vec<f64> = (2..27).map(|i| (i as f64).ln()).collect();
    assert_eq!(lattice(&logs), None);
    // A lattice too fine for the count (Σ|k| beyond the cap) is sampled too.
    let fine: Vec<f64> = (0..25).map(|i| 1.0 + i as f64 * 1e-7).collect();
    assert_eq!(sign_flip(&fine, Tail::Greater).method, FlipMethod::Sampled);
    // Up to 20 values every pattern is enumerated, lattice or not.
    assert_eq!(
        sign_flip(&d[..20], Tail::Greater).method,
        FlipMethod::Enumerated
    );
}

/// Lattice detection: differences of accuracies on 256 prompts give back their integers (in
/// steps of 1/256, or of a common multiple), a margin shift gives the finer lattice, and a
/// value off the lattice, values on none, or non-finite values give none.
#[test]
fn lattice_detection() {
    let acc = |a: i64, b: i64| a as f64 / 256.0 - b as f64 / 256.0;
    let d = [acc(140, 137), acc(120, 125), acc(99, 99), acc(200, 190)];
    assert_eq!(lattice(&d), Some(vec![3, -5, 0, 10]));
    // A common factor is the step: 2/256 and 4/256 are 1 and 2 steps of 2/256.
    assert_eq!(lattice(&[2.0 / 256.0, -4.0 / 256.0]), Some(vec![1, -2]));
    // Shifted by δ = 0.05: the integers 5 k + 64 of steps of 1/1280 (gcd 1 here).
    let shifted: Vec<f64> = d.iter().map(|x| x + 0.05).collect();
    assert_eq!(lattice(&shifted), Some(vec![79, 39, 64, 114]));
    assert_eq!(lattice(&[0.0, 0.0]), Some(vec![0, 0]));
    // One value a millionth of a step off: no lattice.
    let mut off = d.to_vec();
    off[0] += 1e-6 / 256.0;
    assert_eq!(lattice(&off), None);
    assert_eq!(lattice(&[1.0, 2f64.sqrt(), 3f64.sqrt()]), None);
    assert_eq!(lattice(&[1.0, f64::NAN]), None);
}
