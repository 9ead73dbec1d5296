//! The endpoints of the findings, declared here before any run is looked at: for each
//! published claim, which arms are compared on which per-cell value and scale, in which
//! direction the claim points, the equivalence margin δ below which a difference does not
//! matter, and the paper's value where it reports one. Then the statistics of every endpoint
//! (paired over shared seeds, [`super::paired`]), Holm's adjustment over the report's primary
//! endpoints, and the verdict.
//!
//! Tests are one-sided exact sign-flip tests in the claimed direction (declared, so one-sided);
//! "does not hold" needs positive evidence: both one-sided tests of |mean| < δ (TOST) for a
//! claimed difference, or "worse by more than δ" for a claimed non-inferiority. Otherwise the
//! verdict is "inconclusive at n seeds", with the seeds that would resolve it.

mod declare;
mod paper;

pub use declare::{RegimeData, declare};
pub use paper::{CONTROL_METRICS, EXTREME_PSEUDO, control_endpoints, depth_endpoints};

use super::paired::{Paired, Scale, paired, seeds_needed, sign_flip_p_greater};
use super::run_info::RunInfo;
use super::summary::ArmSummary;
use declare::{aligned, seeds_of};
use serde::Serialize;
use std::collections::BTreeMap;

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
    Holds,
    /// Does not hold: |d| < δ (TOST), or worse by more than δ for a non-inferiority claim.
    DoesNotHold,
    /// Neither; `seeds` would resolve it at the observed effect (None when the estimate
    /// points away from the claim).
    Inconclusive {
        seeds: Option<usize>,
    },
    /// A secondary endpoint or a description: no verdict of its own.
    Secondary,
}

/// One endpoint: what is compared, and (once evaluated) its statistics and verdict.
#[derive(Clone, Debug, Serialize)]
pub struct Endpoint {
    /// The claim's letter, (a)–(i) (`crate::experiment::CLAIM_LETTERS`).
    pub claim: char,
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
    /// One-sided p of "does not hold": TOST max(p(d > −δ), p(d < δ)), or p(d < −δ).
    pub p_not: f64,
    pub p_holm: f64,
    pub p_not_holm: f64,
    pub verdict: Verdict,
    /// Why an endpoint was not evaluated (identical arms, too few seeds).
    pub note: Option<String>,
}

impl Endpoint {
    fn new(claim: char, regime: &str, what: String, scale: Scale, claimed: Claimed) -> Self {
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
            p_not: f64::NAN,
            p_holm: f64::NAN,
            p_not_holm: f64::NAN,
            verdict: Verdict::Secondary,
            note: None,
        }
    }

    fn reference(mut self, value: f64, source: &str) -> Self {
        self.reference = Some((value, source.into()));
        self
    }

    fn margin(mut self, m: f64) -> Self {
        self.margin = m;
        self
    }

    fn secondary(mut self) -> Self {
        self.primary = false;
        self
    }

    /// Compare `b` against `a` seed by seed on `metric` (seeds both arms ran).
    fn pair(mut self, a: &ArmSummary, b: &ArmSummary, metric: &str) -> Self {
        let (x, y) = aligned(&seeds_of(a, metric), &seeds_of(b, metric));
        self.est = paired(&x, &y, self.scale);
        self
    }

    /// Compare per-seed values `b` against `a` (seeds both hold).
    fn maps(mut self, a: &BTreeMap<i64, f64>, b: &BTreeMap<i64, f64>) -> Self {
        let (x, y) = aligned(a, b);
        self.est = paired(&x, &y, self.scale);
        self
    }

    /// One value per seed (no second arm).
    fn one(mut self, v: &BTreeMap<i64, f64>) -> Self {
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
        self.p = sign_flip_p_greater(&self.toward_claim());
        self.p_not = match self.claimed {
            Claimed::NotWorse => sign_flip_p_greater(&shift(-1.0, -self.margin)),
            _ => sign_flip_p_greater(&shift(1.0, self.margin))
                .max(sign_flip_p_greater(&shift(-1.0, self.margin))),
        };
    }

    /// Seeds at which the claim's one-sided test at level `alpha` has [`POWER`] against the
    /// observed effect: the t approximation, and at least the log2(1/α) seeds a sign-flip test
    /// needs to reach α at all. None when the estimate points away from the claim.
    fn seeds_to_resolve(&self, alpha: f64) -> Option<usize> {
        let t = self.toward_claim();
        let n = t.len() as f64;
        let m = t.iter().sum::<f64>() / n;
        let sd = (t.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
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

/// Test every endpoint, adjust the primary ones with Holm (claims and negations as two
/// families), and give each its verdict.
pub fn evaluate(eps: &mut [Endpoint]) {
    for e in eps.iter_mut() {
        e.test();
    }
    let prim: Vec<usize> = (0..eps.len())
        .filter(|&i| eps[i].primary && eps[i].p.is_finite())
        .collect();
    let m = prim.len().max(1);
    let adj = super::paired::holm(&prim.iter().map(|&i| eps[i].p).collect::<Vec<_>>());
    let adj_not = super::paired::holm(&prim.iter().map(|&i| eps[i].p_not).collect::<Vec<_>>());
    for (k, &i) in prim.iter().enumerate() {
        eps[i].p_holm = adj[k];
        eps[i].p_not_holm = adj_not[k];
    }
    let alpha = ALPHA / m as f64;
    for e in eps.iter_mut() {
        e.verdict = if !e.primary {
            Verdict::Secondary
        } else if e.p_holm < ALPHA {
            Verdict::Holds
        } else if e.p_not_holm < ALPHA {
            Verdict::DoesNotHold
        } else {
            Verdict::Inconclusive {
                seeds: e
                    .est
                    .as_ref()
                    .filter(|x| x.n >= 2)
                    .and_then(|_| e.seeds_to_resolve(alpha)),
            }
        };
    }
}

/// The verdict in words.
pub fn verdict_text(e: &Endpoint) -> String {
    let n = e.est.as_ref().map_or(0, |x| x.n);
    match &e.verdict {
        Verdict::Holds => format!("**holds** (p_Holm = {})", p_text(e.p_holm)),
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
        Verdict::Inconclusive { seeds: Some(k) } => {
            format!("inconclusive at {n} seeds (≈{k} would resolve it at the observed effect)")
        }
        Verdict::Inconclusive { seeds: None } => {
            format!("inconclusive at {n} seeds (the estimate points away from the claim)")
        }
        Verdict::Secondary => e.note.clone().unwrap_or_else(|| {
            if e.claimed == Claimed::Describe {
                "measured (no test)".into()
            } else {
                format!("secondary (p = {}, not adjusted)", p_text(e.p))
            }
        }),
    }
}

/// A p-value as the report prints it.
pub fn p_text(p: f64) -> String {
    if !p.is_finite() {
        "n/a".into()
    } else if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// A number as the report prints it ("n/a" when not finite).
pub fn num(x: f64) -> String {
    if x.is_finite() {
        super::markdown::sig(x)
    } else {
        "n/a".into()
    }
}

/// Does the rollout engine of `regime` differ from the trainer?
pub fn regime_has_mismatch(info: &RunInfo, regime: &str) -> bool {
    info.cells
        .iter()
        .any(|c| c.regime == regime && c.rl.mismatch != crate::rl::Mismatch::None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::paired::paired;

    fn ep(claimed: Claimed, diffs: &[f64]) -> Endpoint {
        let mut e = Endpoint::new('x', "r", "x".into(), Scale::Difference, claimed);
        let zeros = vec![0.0; diffs.len()];
        e.est = paired(&zeros, diffs, Scale::Difference);
        e
    }

    #[test]
    fn verdicts_follow_the_adjusted_tests() {
        // Ten seeds all in the claimed direction: p = 1/1024; with two primaries Holm gives
        // 2/1024 < 0.05.
        let up: Vec<f64> = (1..=10).map(|i| 0.1 + 0.01 * i as f64).collect();
        // Ten tiny differences of both signs: equivalent within ±0.05.
        let flat: Vec<f64> = (0..10)
            .map(|i| if i % 2 == 0 { 0.001 } else { -0.001 })
            .collect();
        let mut eps = vec![ep(Claimed::Greater, &up), ep(Claimed::Greater, &flat)];
        evaluate(&mut eps);
        assert_eq!(eps[0].verdict, Verdict::Holds);
        assert!((eps[0].p - 1.0 / 1024.0).abs() < 1e-15);
        assert!((eps[0].p_holm - 2.0 / 1024.0).abs() < 1e-15);
        assert_eq!(eps[1].verdict, Verdict::DoesNotHold);
        // Three seeds can never hold: 1/8 > 0.05.
        let mut few = vec![ep(Claimed::Greater, &up[..3])];
        evaluate(&mut few);
        assert!(matches!(few[0].verdict, Verdict::Inconclusive { seeds: Some(k) } if k >= 5));
        // Against the claim: no seed count would resolve it.
        let down: Vec<f64> = up.iter().map(|x| -x).collect();
        let mut against = vec![ep(Claimed::Greater, &down)];
        evaluate(&mut against);
        assert_eq!(against[0].verdict, Verdict::Inconclusive { seeds: None });
    }

    #[test]
    fn non_inferiority_and_less_use_their_own_direction() {
        // Slightly negative, far inside −δ: not worse.
        let small: Vec<f64> = (0..10).map(|i| -0.01 + 0.001 * i as f64).collect();
        let mut eps = vec![ep(Claimed::NotWorse, &small)];
        evaluate(&mut eps);
        assert_eq!(eps[0].verdict, Verdict::Holds);
        // Much worse than −δ: does not hold.
        let worse: Vec<f64> = (0..10).map(|i| -0.2 - 0.001 * i as f64).collect();
        let mut eps = vec![ep(Claimed::NotWorse, &worse)];
        evaluate(&mut eps);
        assert_eq!(eps[0].verdict, Verdict::DoesNotHold);
        let mut eps = vec![ep(Claimed::Less, &worse)];
        evaluate(&mut eps);
        assert_eq!(eps[0].verdict, Verdict::Holds);
    }

    #[test]
    fn secondary_endpoints_do_not_count_toward_m() {
        let up: Vec<f64> = (1..=10).map(|i| 0.1 + 0.01 * i as f64).collect();
        let mut eps = vec![
            ep(Claimed::Greater, &up),
            ep(Claimed::Greater, &up).secondary(),
        ];
        evaluate(&mut eps);
        assert!((eps[0].p_holm - 1.0 / 1024.0).abs() < 1e-15, "m = 1");
        assert_eq!(eps[1].verdict, Verdict::Secondary);
        assert!(eps[1].p_holm.is_nan());
    }
}
