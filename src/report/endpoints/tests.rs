//! Verdicts by hand: Holm's families, reversal, the margin, censoring.

use super::*;
use crate::experiment::Claim;
use crate::report::paired::paired;

fn ep(claimed: Claimed, diffs: &[f64]) -> Endpoint {
    let mut e = Endpoint::new(
        Claim::DriftShare,
        "r",
        "x".into(),
        Scale::Difference,
        claimed,
    );
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
    evaluate(&mut eps, false);
    assert_eq!(
        eps[0].verdict,
        Verdict::Holds {
            below_margin: false
        }
    );
    assert!((eps[0].p - 1.0 / 1024.0).abs() < 1e-15);
    assert!((eps[0].p_holm - 2.0 / 1024.0).abs() < 1e-15);
    assert_eq!(eps[1].verdict, Verdict::DoesNotHold);
    // Three seeds can never hold: 1/8 > 0.05.
    let mut few = vec![ep(Claimed::Greater, &up[..3])];
    evaluate(&mut few, false);
    assert!(matches!(few[0].verdict, Verdict::Inconclusive { seeds: Some(k), .. } if k >= 5));
    // Against the claim: no seed count would resolve it.
    let down: Vec<f64> = up.iter().map(|x| -x).collect();
    let mut against = vec![ep(Claimed::Greater, &down)];
    evaluate(&mut against, false);
    assert!(matches!(
        against[0].verdict,
        Verdict::Inconclusive { seeds: None, .. }
    ));
}

#[test]
fn non_inferiority_and_less_use_their_own_direction() {
    // Slightly negative, far inside −δ: not worse.
    let small: Vec<f64> = (0..10).map(|i| -0.01 + 0.001 * i as f64).collect();
    let mut eps = vec![ep(Claimed::NotWorse, &small)];
    evaluate(&mut eps, false);
    assert_eq!(
        eps[0].verdict,
        Verdict::Holds {
            below_margin: false
        }
    );
    // Much worse than −δ: does not hold.
    let worse: Vec<f64> = (0..10).map(|i| -0.2 - 0.001 * i as f64).collect();
    let mut eps = vec![ep(Claimed::NotWorse, &worse)];
    evaluate(&mut eps, false);
    assert_eq!(eps[0].verdict, Verdict::DoesNotHold);
    let mut eps = vec![ep(Claimed::Less, &worse)];
    evaluate(&mut eps, false);
    assert_eq!(
        eps[0].verdict,
        Verdict::Holds {
            below_margin: false
        }
    );
}

#[test]
fn secondary_endpoints_do_not_count_toward_m() {
    let up: Vec<f64> = (1..=10).map(|i| 0.1 + 0.01 * i as f64).collect();
    let mut eps = vec![
        ep(Claimed::Greater, &up),
        ep(Claimed::Greater, &up).secondary(),
    ];
    evaluate(&mut eps, false);
    assert!((eps[0].p_holm - 1.0 / 1024.0).abs() < 1e-15, "m = 1");
    assert_eq!(eps[1].verdict, Verdict::Secondary);
    assert!(eps[1].p_holm.is_nan());
}

/// A declared reversal: an effect significantly against the claim reads "reversed" in
/// the same Holm family (two-sided p = 2·min); undeclared, it stays inconclusive.
#[test]
fn a_declared_reversal_is_a_verdict_and_an_undeclared_one_is_not() {
    let up: Vec<f64> = (1..=10).map(|i| 0.1 + 0.01 * i as f64).collect();
    let down: Vec<f64> = up.iter().map(|x| -x).collect();
    let mut eps = vec![ep(Claimed::Greater, &down), ep(Claimed::Greater, &up)];
    evaluate(&mut eps, true);
    assert_eq!(eps[0].verdict, Verdict::Reversed);
    assert!(eps[0].two_sided);
    // Two-sided: 2/1024 each, Holm over two: 4/1024 for both.
    assert!((eps[0].p_holm - 4.0 / 1024.0).abs() < 1e-15);
    assert!((eps[1].p_holm - 4.0 / 1024.0).abs() < 1e-15);
    assert_eq!(
        eps[1].verdict,
        Verdict::Holds {
            below_margin: false
        }
    );
    assert!(verdict_text(&eps[0]).starts_with("**reversed**"));
    let mut eps = vec![ep(Claimed::Greater, &down)];
    evaluate(&mut eps, false);
    assert!(matches!(
        eps[0].verdict,
        Verdict::Inconclusive { seeds: None, .. }
    ));
    assert!(verdict_text(&eps[0]).contains("not a declared outcome"));
    // A claimed decrease that went up is reversed too.
    let mut eps = vec![ep(Claimed::Less, &up)];
    evaluate(&mut eps, true);
    assert_eq!(eps[0].verdict, Verdict::Reversed);
    // Non-inferiority has no reversal: worse than −δ is "does not hold".
    let worse: Vec<f64> = (0..10).map(|i| -0.2 - 0.001 * i as f64).collect();
    let mut eps = vec![ep(Claimed::NotWorse, &worse)];
    evaluate(&mut eps, true);
    assert_eq!(eps[0].verdict, Verdict::DoesNotHold);
}

/// "Holds" whose interval reaches below δ says so; the equivalence route gets its seeds.
#[test]
fn holds_below_margin_and_seeds_for_equivalence() {
    // Mean 0.03 > 0 on every seed, δ = 0.05: significant, but not beyond δ.
    let small: Vec<f64> = (0..10).map(|i| 0.02 + 0.002 * i as f64).collect();
    let mut eps = vec![ep(Claimed::Greater, &small)];
    evaluate(&mut eps, false);
    assert_eq!(eps[0].verdict, Verdict::Holds { below_margin: true });
    assert!(verdict_text(&eps[0]).contains("below δ"));
    // Noisy, mean near 0: neither route yet, both counted.
    // Four seeds: no sign-flip test can reach 0.05 (the smallest p is 1/16).
    let noisy = [0.03, -0.02, 0.04, -0.01];
    let mut eps = vec![ep(Claimed::Greater, &noisy)];
    evaluate(&mut eps, false);
    let Verdict::Inconclusive {
        seeds,
        seeds_equivalent,
    } = eps[0].verdict
    else {
        panic!("{:?}", eps[0].verdict)
    };
    assert!(seeds.is_some_and(|k| k > 4), "{seeds:?}");
    assert!(
        seeds_equivalent.is_some_and(|k| k >= 5),
        "{seeds_equivalent:?}"
    );
    assert!(verdict_text(&eps[0]).contains("toward \"does not hold\" (equivalence)"));
}

/// Right-censored seeds (lower bounds) never count for a claimed decrease, and never
/// let equivalence be shown; the sign test of who got there first is exact.
#[test]
fn censored_seeds_are_tested_as_lower_bounds() {
    // Eight seeds: five observed well below 0 (claim: d < 0), three censored whose
    // bounds are slightly negative (the arm ran out of compute before getting there).
    let d = [-0.3, -0.25, -0.2, -0.35, -0.28, -0.05, -0.02, -0.04];
    let mut e = ep(Claimed::Less, &d);
    e.margin = RATIO_MARGIN;
    let mut plain = vec![e.clone()];
    evaluate(&mut plain, false);
    // Read as observations, all eight point the claim's way: 1/256.
    assert!((plain[0].p - 1.0 / 256.0).abs() < 1e-15);
    e.censored = vec![false, false, false, false, false, true, true, true];
    let mut eps = vec![e];
    evaluate(&mut eps, false);
    // Sign test: 5 of 8 for the claim, P(Bin(8, 1/2) >= 5) = 93/256.
    assert!((eps[0].p - 93.0 / 256.0).abs() < 1e-12, "{}", eps[0].p);
    assert_eq!(eps[0].p_not, 1.0);
    assert!(matches!(
        eps[0].verdict,
        Verdict::Inconclusive {
            seeds_equivalent: None,
            ..
        }
    ));
    assert!((sign_test_p_greater(8, 8) - 1.0 / 256.0).abs() < 1e-15);
    assert_eq!(sign_test_p_greater(0, 8), 1.0);
    assert_eq!(sign_test_p_greater(0, 0), 1.0);
}

/// An estimate that favours the claim, but so weakly that no seed count resolves it, does not
/// read "points away" (that words the sign, not the seed estimate).
#[test]
fn a_weak_effect_toward_the_claim_does_not_point_away() {
    let weak = [
        0.3, -0.299, 0.25, -0.249, 0.2, -0.199, 0.31, -0.309, 0.22, -0.219,
    ];
    let mut eps = vec![ep(Claimed::Greater, &weak)];
    evaluate(&mut eps, false);
    assert!(matches!(
        eps[0].verdict,
        Verdict::Inconclusive { seeds: None, .. }
    ));
    assert!(
        !verdict_text(&eps[0]).contains("points away"),
        "{}",
        verdict_text(&eps[0])
    );
    let mut eps = vec![ep(Claimed::Less, &weak)];
    evaluate(&mut eps, false);
    assert!(verdict_text(&eps[0]).contains("points away"));
}
