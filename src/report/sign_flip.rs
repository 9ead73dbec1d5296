//! The paired sign-flip permutation test: the null distribution of T = Σ s_i d_i over the 2ⁿ
//! sign patterns s ∈ {±1}ⁿ, computed exactly wherever it can be and sampled only where not.
//!
//! Under "the differences are symmetric about 0" every sign pattern is equally likely, so a
//! p-value is the share of patterns whose T is at least as extreme as the observed Σ d_i. Three
//! ways to get that share, tried in this order ([`sign_flip`]):
//! 1. **Enumerated** (n ≤ [`ENUMERATE_MAX`]): all 2ⁿ patterns, sums in floating point, ties
//!    with the observed sum kept by a tolerance of 1e-12 Σ|d_i|.
//! 2. **Lattice** (more values, on a lattice): when every d_i is an integer multiple k_i q of
//!    one step q ([`lattice`]): accuracies on n eval prompts differ by multiples of 1/n, and a
//!    margin shift δ stays on a (finer) lattice when δ is commensurate (0.05 and 1/256 are both
//!    multiples of 1/1280). T = q Σ s_i k_i, so the distribution of the integer Σ s_i k_i is
//!    counted exactly by dynamic programming over its values, and a tie is an integer equality.
//! 3. **Sampled** otherwise: [`DRAWS`] seeded random patterns with the observed one counted,
//!    (hits + 1) / (draws + 1), so no p is below the floor 1 / (draws + 1); the report says so.

use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Uniform};
use serde::Serialize;

/// Up to this many values every sign pattern is enumerated (2²⁰ ≈ 10⁶ sums).
pub const ENUMERATE_MAX: usize = 20;
/// Random sign patterns of the sampled test; its smallest p is 1 / (DRAWS + 1).
pub const DRAWS: usize = 200_000;
/// The seed of the sampled sign-flip stream.
const SIGN_FLIP_SEED: u64 = 0xf11b;
/// The largest Σ|k_i| the lattice count takes: its table holds 2·cap + 1 sums, and the count
/// costs about n·cap additions (a 46-seed accuracy difference on 256 prompts, shifted by 0.05,
/// needs at most 46 · 1344).
pub const LATTICE_CAP: u64 = 1 << 20;
/// How close to the lattice a value must be, relative to the largest |d_i|: far above the
/// rounding of a difference of two accuracies (plus a shift), far below any lattice step
/// within [`LATTICE_CAP`] (≥ 1e-6 of the largest value).
const LATTICE_TOL: f64 = 1e-9;

/// How a sign-flip p-value was computed, from exact to sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlipMethod {
    /// Every sign pattern summed.
    Enumerated,
    /// The exact distribution of the sum counted over the values' lattice.
    Lattice,
    /// [`DRAWS`] random patterns: (hits + 1) / (draws + 1), never below its floor.
    Sampled,
}

/// Which sums count as "at least as extreme" as the observed one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tail {
    /// Σ s_i d_i ≥ Σ d_i: a positive mean.
    Greater,
    /// |Σ s_i d_i| ≥ |Σ d_i|.
    TwoSided,
}

/// A sign-flip p-value and how it was computed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlipP {
    pub p: f64,
    pub method: FlipMethod,
}

/// The sign-flip p-value of `d` on `tail` (NaN without values), by enumeration, by the
/// lattice count, or sampled, in that order of preference.
pub fn sign_flip(d: &[f64], tail: Tail) -> FlipP {
    let n = d.len();
    if n == 0 {
        return FlipP {
            p: f64::NAN,
            method: FlipMethod::Enumerated,
        };
    }
    if n <= ENUMERATE_MAX {
        return FlipP {
            p: enumerated(d, tail),
            method: FlipMethod::Enumerated,
        };
    }
    match lattice(d) {
        Some(k) => FlipP {
            p: lattice_p(&k, tail),
            method: FlipMethod::Lattice,
        },
        None => FlipP {
            p: sampled(d, tail),
            method: FlipMethod::Sampled,
        },
    }
}

/// Whether a signed sum `s` is at least as extreme as the observed `obs` on `tail`, with a
/// rounding tolerance `tol` (the float paths).
fn hit(tail: Tail, s: f64, obs: f64, tol: f64) -> bool {
    match tail {
        Tail::Greater => s >= obs - tol,
        Tail::TwoSided => s.abs() >= obs.abs() - tol,
    }
}

/// The float paths' tie tolerance.
fn tie_tol(d: &[f64]) -> f64 {
    1e-12 * d.iter().map(|x| x.abs()).sum::<f64>().max(1e-300)
}

/// The exact share of all 2ⁿ sign patterns whose sum hits (n ≤ [`ENUMERATE_MAX`]).
pub fn enumerated(d: &[f64], tail: Tail) -> f64 {
    let n = d.len();
    assert!(n <= ENUMERATE_MAX, "{n} values are too many to enumerate");
    let (obs, tol) = (d.iter().sum::<f64>(), tie_tol(d));
    let total = 1u64 << n;
    let hits = (0..total)
        .filter(|&mask| {
            let s: f64 = d
                .iter()
                .enumerate()
                .map(|(i, &x)| if mask >> i & 1 == 1 { -x } else { x })
                .sum();
            hit(tail, s, obs, tol)
        })
        .count();
    hits as f64 / total as f64
}

/// The share of [`DRAWS`] seeded random sign patterns whose sum hits, with the observed
/// pattern counted: (hits + 1) / (draws + 1).
fn sampled(d: &[f64], tail: Tail) -> f64 {
    let (obs, tol) = (d.iter().sum::<f64>(), tie_tol(d));
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(SIGN_FLIP_SEED);
    let coin = Uniform::new(0u8, 2).expect("range");
    let hits = (0..DRAWS)
        .filter(|_| {
            let s: f64 = d
                .iter()
                .map(|&x| if coin.sample(&mut rng) == 1 { -x } else { x })
                .sum();
            hit(tail, s, obs, tol)
        })
        .count();
    (hits + 1) as f64 / (DRAWS + 1) as f64
}

/// The integers k_i with d_i = k_i q for one step q > 0, when the values lie on a lattice:
/// q is the floating-point greatest common divisor of the |d_i| (Euclid, remainders within the
/// tolerance of 0 count as 0), refitted to the integers by least squares, and it is accepted
/// only if every d_i is within
/// `LATTICE_TOL · max|d|` of k_i q and Σ|k_i| ≤ [`LATTICE_CAP`]. Values off any such lattice
/// (log-ratios, exponents) drive q toward the tolerance and Σ|k_i| past the cap: `None`.
pub fn lattice(d: &[f64]) -> Option<Vec<i64>> {
    if d.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let top = d.iter().fold(0f64, |m, x| m.max(x.abs()));
    if top == 0.0 {
        return Some(vec![0; d.len()]);
    }
    let tol = LATTICE_TOL * top;
    let q = d
        .iter()
        .map(|x| x.abs())
        .filter(|&a| a > tol)
        .fold(0f64, |g, a| if g == 0.0 { a } else { float_gcd(g, a, tol) });
    if q < top / LATTICE_CAP as f64 {
        return None;
    }
    // Euclid's step carries the rounding of the values (a few ulps of each) into q, scaled up
    // by the quotients; the integers are robust to that, and q is then refitted to them by
    // least squares, so that the check below measures the values' own distance from the
    // lattice. (|k_i| ≤ top / q ≤ LATTICE_CAP: the casts are exact.)
    let k: Vec<i64> = d.iter().map(|&x| (x / q).round() as i64).collect();
    let (kx, kk) = k.iter().zip(d).fold((0f64, 0f64), |(kx, kk), (&ki, &x)| {
        (kx + ki as f64 * x, kk + (ki as f64) * (ki as f64))
    });
    let q = kx / kk;
    if k.iter()
        .zip(d)
        .any(|(&ki, &x)| (x - ki as f64 * q).abs() > tol)
    {
        return None;
    }
    let sum: u64 = k.iter().map(|x| x.unsigned_abs()).sum();
    (sum <= LATTICE_CAP).then_some(k)
}

/// Euclid's algorithm on positive floats: a remainder within `tol` of 0, or of the divisor
/// (0 rounded up: a multiple a hair short), counts as 0.
fn float_gcd(a: f64, b: f64, tol: f64) -> f64 {
    let (mut a, mut b) = (a.max(b), a.min(b));
    while b > tol {
        let r = a % b;
        (a, b) = (b, if b - r <= tol { 0.0 } else { r });
    }
    a
}

/// The exact p of the integer vector `k` on `tail`: the distribution of Σ s_i k_i over all sign
/// patterns, counted by dynamic programming over its values (each value flips with
/// probability ½, so the table holds probabilities: count / 2^i after i values). The entries
/// are dyadic and stay exact up to 53 non-zero values; beyond, each addition rounds at 2⁻⁵³
/// relative. Ties with the observed Σ k_i are integer equalities.
pub fn lattice_p(k: &[i64], tail: Tail) -> f64 {
    let width: u64 = k.iter().map(|x| x.unsigned_abs()).sum();
    let off = width as usize;
    // prob[off + s] = P(Σ s_i k_i = s) over the values taken so far.
    let mut prob = vec![0f64; 2 * off + 1];
    let mut next = prob.clone();
    prob[off] = 1.0;
    let mut reach = 0usize;
    for a in k
        .iter()
        .map(|x| x.unsigned_abs() as usize)
        .filter(|&a| a > 0)
    {
        let (lo, hi) = (off - reach - a, off + reach + a);
        next[lo..=hi].fill(0.0);
        for s in off - reach..=off + reach {
            let half = 0.5 * prob[s];
            next[s + a] += half;
            next[s - a] += half;
        }
        std::mem::swap(&mut prob, &mut next);
        reach += a;
    }
    let obs: i64 = k.iter().sum();
    let at = |s: i64| prob[(off as i64 + s) as usize];
    let w = width as i64;
    // From the outermost sums inward: the small terms first.
    let p: f64 = match tail {
        Tail::Greater => (obs..=w).rev().map(at).sum(),
        Tail::TwoSided => {
            let o = obs.abs();
            (o..=w)
                .rev()
                .map(|s| at(s) + if s == 0 { 0.0 } else { at(-s) })
                .sum()
        }
    };
    p.min(1.0)
}
