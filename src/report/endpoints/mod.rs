//! The endpoints of the findings, declared here before any run is looked at: for each
//! published claim, which arms are compared on which per-cell value and scale, in which
//! direction the claim points, the equivalence margin δ below which a difference does not
//! matter, and the paper's value where it reports one. Then the statistics of every endpoint
//! (paired over shared seeds, [`super::paired`]), Holm's adjustment over the report's primary
//! endpoints, and the verdict.
//!
//! Tests are one-sided sign-flip tests in the claimed direction (declared, so one-sided; exact
//! by enumeration or over the lattice of the differences, sampled only where neither applies,
//! [`super::sign_flip`]); a spec that declares `reversal` doubles the smaller one-sided p into a
//! two-sided one before Holm. "Does not hold" needs positive evidence: both one-sided tests of
//! |mean| < δ (TOST) for a claimed difference, or "worse by more than δ" for a claimed
//! non-inferiority. Otherwise the verdict is "inconclusive at n seeds", with the seeds that
//! would resolve it.

pub use super::fmt::{num, p_text};
use super::paired::{
    FlipMethod, Paired, Scale, Tail, paired, seeds_needed, sign_flip, sign_test_p_greater,
};
use super::summary::ArmSummary;
use crate::experiment::Claim;
use crate::util::moments::{mean, sample_sd};
use serde::Serialize;
use std::collections::BTreeMap;

/// Per seed, the arm's per-cell value of `metric`.
pub fn seeds_of(a: &ArmSummary, metric: &str) -> BTreeMap<i64, f64> {
    a.per_seed
        .get(metric)
        .map(|v| a.seed_ids.iter().copied().zip(v.iter().copied()).collect())
        .unwrap_or_default()
}

/// The values of the seeds both maps hold, in seed order.
pub(crate) fn aligned(a: &BTreeMap<i64, f64>, b: &BTreeMap<i64, f64>) -> (Vec<f64>, Vec<f64>) {
    a.iter()
        .filter_map(|(s, x)| b.get(s).map(|y| (*x, *y)))
        .unzip()
}

/// Family-wise error rate of the report.
pub const ALPHA: f64 = 0.05;
/// Power the seed estimate aims for.
pub const POWER: f64 = 0.8;
/// Margin of reward differences: a 0.05 reward drop is the smallest one that matters (the
/// stability map's resolution).
pub const REWARD_MARGIN: f64 = 0.05;
/// Margin of log-ratios (KLs, variances, clip fractions): within a factor of 1.5.
pub const RATIO_MARGIN: f64 = 0.405_465_108_108_164_4; // ln 1.5
/// Margin of length exponents β (var ∝ length^β).
pub const EXPONENT_MARGIN: f64 = 0.25;

/// What a claim says about the compared value `d` (b − a, or one arm's value).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Claimed {
    /// d > 0.
    Greater,
    /// d < 0.
    Less,
    /// d > −δ: not worse by more than the margin.
    NotWorse,
    /// A measured quantity set beside the paper's, no test.
    Describe,
}

/// The verdict of an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// The claim holds; `below_margin`: the 95% interval still includes effects smaller
    /// than δ (significant, but not shown to matter).
    Holds { below_margin: bool },
    /// Does not hold: |d| < δ (TOST), or worse by more than δ for a non-inferiority claim.
    DoesNotHold,
    /// Significant in the direction opposite to the claim, in the same Holm family; only
    /// where the spec declared it (`reversal = true`).
    Reversed,
    /// Neither; `seeds` would resolve it toward "holds" at the observed effect (None when
    /// the estimate points away from the claim), `seeds_equivalent` toward "does not hold"
    /// (TOST, when the estimate lies inside ±δ).
    Inconclusive {
        seeds: Option<usize>,
        seeds_equivalent: Option<usize>,
    },
    /// A secondary endpoint or a description: no verdict of its own.
    Secondary,
}

/// One endpoint: what is compared, and (once evaluated) its statistics and verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Endpoint {
    /// The claim it tests (written as its letter).
    pub claim: Claim,
    pub regime: String,
    /// What is compared, in markdown (arm names in backticks).
    pub what: String,
    pub scale: Scale,
    pub claimed: Claimed,
    /// Equivalence margin δ on `scale`.
    pub margin: f64,
    /// The paper's value on `scale`, and its source.
    pub reference: Option<(f64, String)>,
    /// Primary endpoints carry verdicts and count toward Holm's m.
    pub primary: bool,
    pub est: Option<Paired>,
    /// One-sided p of the claim (for `NotWorse`, of d > −δ).
    pub p: f64,
    /// One-sided p of the opposite direction (d < 0 for `Greater`, d > 0 for `Less`).
    pub p_against: f64,
    /// Tested two-sided, with "reversed" as an outcome (the spec's `reversal`).
    pub two_sided: bool,
    /// One-sided p of "does not hold": TOST max(p(d > −δ), p(d < δ)), or p(d < −δ).
    pub p_not: f64,
    pub p_holm: f64,
    pub p_not_holm: f64,
    /// How its sign-flip p-values were computed: the least exact of them (None untested).
    pub p_method: Option<FlipMethod>,
    pub verdict: Verdict,
    /// Why an endpoint was not evaluated (identical arms, too few seeds), or what a reader
    /// must know to read it (censored seeds).
    pub note: Option<String>,
    /// Per seed of `est.diffs`: the value is only a lower bound (right-censored: the arm never
    /// got there within the run). Empty when nothing is censored.
    pub censored: Vec<bool>,
    /// The two arms a paired endpoint compares (`a`, then `b` of `b` against `a`).
    #[serde(skip)]
    pub arms: Option<(String, String)>,
}

impl Endpoint {
    pub(crate) fn new(
        claim: Claim,
        regime: &str,
        what: String,
        scale: Scale,
        claimed: Claimed,
    ) -> Self {
        Endpoint {
            claim,
            regime: regime.into(),
            what,
            scale,
            claimed,
            margin: match scale {
                Scale::Difference => REWARD_MARGIN,
                Scale::LogRatio => RATIO_MARGIN,
            },
            reference: None,
            primary: claimed != Claimed::Describe,
            est: None,
            p: f64::NAN,
            p_against: f64::NAN,
            two_sided: false,
            p_not: f64::NAN,
            p_holm: f64::NAN,
            p_not_holm: f64::NAN,
            p_method: None,
            verdict: Verdict::Secondary,
            note: None,
            censored: Vec::new(),
            arms: None,
        }
    }

    pub(crate) fn reference(mut self, value: f64, source: &str) -> Self {
        self.reference = Some((value, source.into()));
        self
    }

    pub(crate) fn margin(mut self, m: f64) -> Self {
        self.margin = m;
        self
    }

    pub(crate) fn secondary(mut self) -> Self {
        self.primary = false;
        self
    }

    /// Compare `b` against `a` seed by seed on `metric` (seeds both arms ran).
    pub(crate) fn pair(mut self, a: &ArmSummary, b: &ArmSummary, metric: &str) -> Self {
        let (x, y) = aligned(&seeds_of(a, metric), &seeds_of(b, metric));
        self.est = paired(&x, &y, self.scale);
        self.arms = Some((a.name.clone(), b.name.clone()));
        self
    }

    /// Compare per-seed values `b` against `a` (seeds both hold).
    pub(crate) fn maps(mut self, a: &BTreeMap<i64, f64>, b: &BTreeMap<i64, f64>) -> Self {
        let (x, y) = aligned(a, b);
        self.est = paired(&x, &y, self.scale);
        self
    }

    /// One value per seed (no second arm).
    pub(crate) fn one(mut self, v: &BTreeMap<i64, f64>) -> Self {
        let y: Vec<f64> = v.values().copied().collect();
        self.est = paired(&vec![0.0; y.len()], &y, Scale::Difference);
        self
    }

    /// The effect in the claimed direction per seed (positive supports the claim).
    fn toward_claim(&self) -> Vec<f64> {
        let d = self.est.as_ref().map_or(&[][..], |e| &e.diffs[..]);
        match self.claimed {
            Claimed::Greater | Claimed::Describe => d.to_vec(),
            Claimed::Less => d.iter().map(|x| -x).collect(),
            Claimed::NotWorse => d.iter().map(|x| x + self.margin).collect(),
        }
    }

    /// The one-sided p-values of the claim and of its negation.
    fn test(&mut self) {
        let Some(e) = &self.est else { return };
        if e.n < 2 || self.claimed == Claimed::Describe {
            return;
        }
        let d = &e.diffs;
        let shift = |s: f64, k: f64| d.iter().map(|x| s * x + k).collect::<Vec<f64>>();
        let mut method = None;
        // Each test is one-sided toward a positive mean of the vector it is given; a margin
        // enters as a shift of every value (the lattice count takes the shifted values).
        let mut greater = |v: &[f64]| {
            let r = sign_flip(v, Tail::Greater);
            method = method.max(Some(r.method));
            r.p
        };
        let toward = self.toward_claim();
        self.p = greater(&toward);
        if matches!(self.claimed, Claimed::Greater | Claimed::Less) {
            self.p_against = greater(&toward.iter().map(|x| -x).collect::<Vec<_>>());
        }
        self.p_not = match self.claimed {
            Claimed::NotWorse => greater(&shift(-1.0, -self.margin)),
            _ => greater(&shift(1.0, self.margin)).max(greater(&shift(-1.0, self.margin))),
        };
        self.p_method = method;
        if self.censored.iter().any(|&c| c) {
            self.test_censored();
        }
    }

    /// The tests when some seeds' values are lower bounds (the true value is at least the
    /// recorded one), so that no test treats a bound as an observation in the direction it
    /// cannot vouch for:
    /// - a claimed decrease (`Less`) is tested by an exact sign test of who got there first:
    ///   a seed supports the claim only when its value is observed and below 0; a censored
    ///   seed counts against the claim (a bound at or below 0 is undetermined, counted
    ///   against: conservative); exact zeros drop out;
    /// - the opposite direction (d > 0) keeps the sign-flip test on the bounds, which can only
    ///   understate an increase (conservative);
    /// - equivalence cannot be shown: the mean is unbounded above, so p(d < δ) = 1.
    fn test_censored(&mut self) {
        let Some(e) = &self.est else { return };
        if e.diffs.len() != self.censored.len() {
            // The mask does not line up with the pairs: no test on bounds read as values.
            (self.p, self.p_against, self.p_not) = (1.0, 1.0, 1.0);
            return;
        }
        if self.claimed == Claimed::Less {
            let (mut k, mut n) = (0, 0);
            for (&d, &cens) in e.diffs.iter().zip(&self.censored) {
                if cens || d != 0.0 {
                    n += 1;
                    k += usize::from(!cens && d < 0.0);
                }
            }
            self.p = sign_test_p_greater(k, n);
        }
        if self.claimed != Claimed::NotWorse {
            self.p_not = 1.0;
        }
    }

    /// Seeds whose value is a lower bound.
    fn n_censored(&self) -> usize {
        self.censored.iter().filter(|&&c| c).count()
    }

    /// Seeds at which the claim's one-sided test at level `alpha` has [`POWER`] against the
    /// observed effect: the t approximation, and at least the log2(1/α) seeds a sign-flip test
    /// needs to reach α at all. None when the estimate points away from the claim.
    fn seeds_to_resolve(&self, alpha: f64) -> Option<usize> {
        let t = self.toward_claim();
        let (m, sd) = (mean(&t), sample_sd(&t));
        if m.is_nan() || m <= 0.0 {
            return None;
        }
        let floor = (1.0 / alpha).log2().ceil() as usize;
        let dz = if sd > 0.0 { m / sd } else { f64::INFINITY };
        let by_t = if dz.is_finite() {
            seeds_needed(dz, 2.0 * alpha, POWER)?
        } else {
            0
        };
        Some(by_t.max(floor))
    }
}

impl Endpoint {
    /// Seeds at which TOST at level `alpha` (each one-sided test) has [`POWER`] to show
    /// |d| < δ, if the true effect were the observed one (t approximation, floor as
    /// [`Endpoint::seeds_to_resolve`]). None when the estimate lies outside ±δ, or for a
    /// non-inferiority claim (whose "does not hold" is "worse by more than δ").
    fn seeds_to_equivalence(&self, alpha: f64) -> Option<usize> {
        let e = self.est.as_ref()?;
        if e.n < 2
            || self.n_censored() > 0
            || matches!(self.claimed, Claimed::NotWorse | Claimed::Describe)
        {
            return None;
        }
        let m = e.mean.abs();
        let sd = sample_sd(&e.diffs);
        if m >= self.margin || m.is_nan() || !sd.is_finite() {
            return None;
        }
        let floor = (1.0 / alpha).log2().ceil() as usize;
        let dz = if sd > 0.0 {
            (self.margin - m) / sd
        } else {
            f64::INFINITY
        };
        // Both one-sided tests must pass: power 1 − (1 − POWER)/2 each (Bonferroni bound).
        let by_t = if dz.is_finite() {
            seeds_needed(dz, 2.0 * alpha, 1.0 - (1.0 - POWER) / 2.0)?
        } else {
            0
        };
        Some(by_t.max(floor))
    }

    /// The 95% interval in the claimed direction includes effects smaller than δ.
    fn below_margin(&self) -> bool {
        let Some(e) = &self.est else { return false };
        // Lower bounds understate the interval's reach: it may include anything.
        if self.n_censored() > 0 {
            return true;
        }
        match self.claimed {
            Claimed::Greater => e.t_ci.0 < self.margin || e.t_ci.0.is_nan(),
            Claimed::Less => e.t_ci.1 > -self.margin || e.t_ci.1.is_nan(),
            Claimed::NotWorse | Claimed::Describe => false,
        }
    }
}

/// Test every endpoint, adjust the primary ones with Holm (claims and negations as two
/// families), and give each its verdict.
///
/// With `reversal` (declared in the spec) each primary endpoint with a direction is tested
/// two-sided: its p is 2·min(p, p_against), Holm adjusts those in one family, and the sign of
/// the estimate decides between "holds" and "reversed".
pub fn evaluate(eps: &mut [Endpoint], reversal: bool) {
    for e in eps.iter_mut() {
        e.test();
        e.two_sided = reversal && e.p_against.is_finite();
    }
    let prim: Vec<usize> = (0..eps.len())
        .filter(|&i| eps[i].primary && eps[i].p.is_finite())
        .collect();
    let m = prim.len().max(1);
    let p_family = |e: &Endpoint| {
        if e.two_sided {
            (2.0 * e.p.min(e.p_against)).min(1.0)
        } else {
            e.p
        }
    };
    let adj = super::paired::holm(&prim.iter().map(|&i| p_family(&eps[i])).collect::<Vec<_>>());
    let adj_not = super::paired::holm(&prim.iter().map(|&i| eps[i].p_not).collect::<Vec<_>>());
    for (k, &i) in prim.iter().enumerate() {
        eps[i].p_holm = adj[k];
        eps[i].p_not_holm = adj_not[k];
    }
    let alpha = ALPHA / m as f64;
    for e in eps.iter_mut() {
        let against = e.two_sided && e.p_against < e.p;
        e.verdict = if !e.primary {
            Verdict::Secondary
        } else if e.p_holm < ALPHA && against {
            Verdict::Reversed
        } else if e.p_holm < ALPHA {
            Verdict::Holds {
                below_margin: e.below_margin(),
            }
        } else if e.p_not_holm < ALPHA {
            Verdict::DoesNotHold
        } else {
            let enough = e.est.as_ref().is_some_and(|x| x.n >= 2);
            // Two-sided tests spend α over both directions.
            let a = if e.two_sided { alpha / 2.0 } else { alpha };
            Verdict::Inconclusive {
                seeds: enough.then(|| e.seeds_to_resolve(a)).flatten(),
                seeds_equivalent: enough.then(|| e.seeds_to_equivalence(alpha)).flatten(),
            }
        };
    }
}

/// The verdict in words, followed by the endpoint's note when it has one.
pub fn verdict_text(e: &Endpoint) -> String {
    let n = e.est.as_ref().map_or(0, |x| x.n);
    let sided = if e.two_sided { ", two-sided" } else { "" };
    let resolve = |k: Option<usize>, k_eq: Option<usize>| {
        let mut ways = Vec::new();
        if let Some(k) = k {
            ways.push(format!("≈{k} toward \"holds\""));
        }
        if let Some(k) = k_eq {
            ways.push(format!("≈{k} toward \"does not hold\" (equivalence)"));
        }
        ways.join(", ")
    };
    let text = match &e.verdict {
        Verdict::Holds { below_margin } => {
            let base = format!("**holds** (p_Holm = {}{sided})", p_text(e.p_holm));
            if *below_margin {
                format!(
                    "{base}, below δ: the interval includes effects smaller than δ = {}",
                    num(e.margin)
                )
            } else {
                base
            }
        }
        Verdict::Reversed => format!(
            "**reversed**: significant against the claim (p_Holm = {}{sided})",
            p_text(e.p_holm)
        ),
        Verdict::DoesNotHold => match e.claimed {
            Claimed::NotWorse => format!(
                "**does not hold**: worse by more than δ = {} (p_Holm = {})",
                num(e.margin),
                p_text(e.p_not_holm)
            ),
            _ => format!(
                "**does not hold**: equivalent within ±{} (TOST p_Holm = {})",
                num(e.margin),
                p_text(e.p_not_holm)
            ),
        },
        Verdict::Inconclusive { .. } if n < 2 => format!("inconclusive at {n} seeds"),
        Verdict::Inconclusive {
            seeds,
            seeds_equivalent,
        } => {
            let ways = resolve(*seeds, *seeds_equivalent);
            let toward = e.toward_claim();
            let away = e.est.as_ref().is_some_and(|x| x.n >= 2)
                && matches!(e.claimed, Claimed::Greater | Claimed::Less)
                && toward.iter().sum::<f64>() <= 0.0;
            let against = if away && !e.two_sided && e.p_against < ALPHA {
                format!(
                    "; the estimate points away from the claim (one-sided p against = {}, \
                     not a declared outcome of this spec)",
                    p_text(e.p_against)
                )
            } else if away {
                "; the estimate points away from the claim".into()
            } else {
                String::new()
            };
            if ways.is_empty() {
                format!("inconclusive at {n} seeds{against}")
            } else {
                format!("inconclusive at {n} seeds ({ways} at the observed effect){against}")
            }
        }
        Verdict::Secondary => {
            return e.note.clone().unwrap_or_else(|| {
                if e.claimed == Claimed::Describe {
                    "measured (no test)".into()
                } else {
                    format!("secondary (p = {}, not adjusted)", p_text(e.p))
                }
            });
        }
    };
    match &e.note {
        Some(note) => format!("{text}; {note}"),
        None => text,
    }
}

#[cfg(test)]
mod tests;
