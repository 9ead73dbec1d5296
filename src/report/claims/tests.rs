//! The claims' endpoints by hand.

use super::compare::{RegimeData, reward_gain};
use super::declare_regime as declare;
use super::mismatch::{EXTREME_MARGIN, extreme};
use crate::experiment::Claim;
use crate::model::FfnKind;
use crate::report::endpoints::Claimed;
use crate::report::load::RunFrames;
use crate::report::roles::Arms;
use crate::report::run_info::Identity;
use crate::report::summary::ArmSummary;
use crate::rl::AlgorithmKind;
use crate::rl::RoutingMode;
use polars::prelude::DataFrame;

fn id(routing: RoutingMode, ffn: FfnKind) -> Identity {
    Identity {
        algorithm: AlgorithmKind::Grpo,
        routing,
        ffn,
        default_knobs: true,
        tis: false,
        role: None,
    }
}

fn arms_and_frames(x: &str) -> (Arms, RunFrames) {
    // MoE 1e-4 and 3e-5 in two seeds; dense none beyond 2 at all; R3 none either.
    let arms = Arms {
        arms: vec![
            (
                ArmSummary::blank("grpo", &[(x, vec![1e-4, 3e-5])]),
                id(RoutingMode::Native, FfnKind::Moe),
            ),
            (
                ArmSummary::blank("grpo_r3", &[(x, vec![0.0, 0.0])]),
                id(RoutingMode::R3, FfnKind::Moe),
            ),
            (
                ArmSummary::blank("dense", &[(x, vec![0.0, 0.0])]),
                id(RoutingMode::Native, FfnKind::Dense),
            ),
        ],
    };
    let empty = RunFrames {
        steps: DataFrame::empty(),
        updates: DataFrame::empty(),
        layers: DataFrame::empty(),
        lengths: DataFrame::empty(),
        prefixes: DataFrame::empty(),
        events: DataFrame::empty(),
        bench: None,
    };
    (arms, empty)
}

/// No pseudo-count: the shares are compared as a difference, the seeds with any such token
/// (1 or 0 per seed) beside it, and neither depends on an ε.
#[test]
fn the_beyond_two_share_is_compared_by_difference_and_seeds_with_any() {
    let x = "mismatch_extreme_frac";
    let (arms, empty) = arms_and_frames(x);
    let mut r = RegimeData {
        name: "bf16",
        arms: &arms,
        frames: &empty,
        same: &[],
        mismatch: true,
        claims: &[Claim::ExtremeShare],
        has_control: false,
        compute_target: Default::default(),
    };
    let mut out = Vec::new();
    extreme(&r, &mut out).unwrap();
    assert_eq!(out.len(), 4);
    let diffs = |k: usize| out[k].est.as_ref().unwrap().diffs.clone();
    // MoE − dense: the share difference (primary, δ one token of a cell), then the seeds
    // with any such token (secondary): both seeds in MoE, none in dense.
    assert_eq!(diffs(0), vec![1e-4, 3e-5]);
    assert_eq!(
        (out[0].claimed, out[0].margin),
        (Claimed::Greater, EXTREME_MARGIN)
    );
    assert!(out[0].primary);
    assert_eq!(diffs(1), vec![1.0, 1.0]);
    assert!(!out[1].primary);
    // R3 − native: the negatives.
    assert_eq!(diffs(2), vec![-1e-4, -3e-5]);
    assert_eq!(out[2].claimed, Claimed::Less);
    assert_eq!(diffs(3), vec![-1.0, -1.0]);
    // Without a mismatch there is nothing to compare; an undeclared claim makes nothing.
    r.mismatch = false;
    let mut none = Vec::new();
    extreme(&r, &mut none).unwrap();
    assert!(none.is_empty());
    r.mismatch = true;
    r.claims = &[Claim::DriftShare];
    assert!(
        declare(&r)
            .unwrap()
            .iter()
            .all(|e| e.claim == Claim::DriftShare)
    );
}

/// Arms that ran bitwise-identical trajectories are compared, but outside Holm's family:
/// a difference that is 0 by construction is no evidence. One rule for every claim's paired
/// endpoints: the reward gains of (b) and the mismatch shares of (g) alike.
#[test]
fn identical_arms_are_out_of_holms_family() {
    let x = "final_reward";
    let (arms, empty) = arms_and_frames(x);
    let same = vec![vec!["grpo".to_string(), "grpo_r3".to_string()]];
    let r = RegimeData {
        name: "n1",
        arms: &arms,
        frames: &empty,
        same: &same,
        mismatch: false,
        claims: &[Claim::Replay],
        has_control: false,
        compute_target: Default::default(),
    };
    let g = &arms.arms[0].0;
    let r3 = &arms.arms[1].0;
    let mut eps = vec![
        reward_gain(Claim::Replay, &r, g, r3, Claimed::Greater),
        reward_gain(Claim::Replay, &r, &arms.arms[2].0, g, Claimed::Greater),
    ];
    assert!(eps.iter().all(|e| e.primary), "set aside by the one rule");
    super::compare::set_aside_twins(&same, &mut eps);
    assert!(!eps[0].primary);
    assert!(
        eps[0]
            .note
            .as_deref()
            .unwrap()
            .contains("bitwise-identical")
    );
    assert!(eps[1].primary);
    crate::report::endpoints::evaluate(&mut eps, false);
    assert_eq!(eps[0].verdict, crate::report::endpoints::Verdict::Secondary);
    assert!(eps[0].p_holm.is_nan());
    // (g) in a mismatch regime where R3 and native happened to run identically.
    let x = "mismatch_extreme_frac";
    let (arms, empty) = arms_and_frames(x);
    let r = RegimeData {
        name: "bf16",
        arms: &arms,
        frames: &empty,
        same: &same,
        mismatch: true,
        claims: &[Claim::ExtremeShare],
        has_control: false,
        compute_target: Default::default(),
    };
    let eps = declare(&r).unwrap();
    let r3_vs_native: Vec<_> = eps.iter().filter(|e| e.what.contains("grpo_r3")).collect();
    assert!(!r3_vs_native.is_empty());
    assert!(r3_vs_native.iter().all(|e| !e.primary));
    assert!(
        eps.iter().any(|e| e.primary && e.what.contains("dense")),
        "MoE vs dense stays in the family"
    );
}

/// (n) makes one primary per MoE arm against GRPO without replay, only in a regime with a
/// control; the dense control is not a fix.
#[test]
fn the_leaderboard_compares_every_moe_fix_with_grpo_where_a_control_exists() {
    let (arms, empty) = arms_and_frames("final_eval");
    let mut r = RegimeData {
        name: "stale4_d20",
        arms: &arms,
        frames: &empty,
        same: &[],
        mismatch: false,
        claims: &[Claim::FixLeaderboard],
        has_control: true,
        compute_target: Default::default(),
    };
    let eps = declare(&r).unwrap();
    let primary: Vec<_> = eps.iter().filter(|e| e.primary).collect();
    assert_eq!(primary.len(), 1, "grpo_r3 only");
    assert!(primary[0].what.contains("`grpo_r3` − `grpo`"));
    assert_eq!(primary[0].est.as_ref().unwrap().diffs, vec![-1e-4, -3e-5]);
    assert_eq!(eps.len(), 3, "and two secondaries");
    r.has_control = false;
    assert!(declare(&r).unwrap().is_empty());
}

/// (p): GVPD against PG-OPD is the one primary endpoint without a mismatch; drift against
/// GRPO is described in three units, read from the updates frame seed by seed; under a
/// mismatch R3 on the GVPD student adds two primaries (KL lower, accuracy not worse); an arm
/// with knobs of its own (α = 1) is a secondary row beside its default.
#[test]
fn opd_declares_gvpd_against_pg_opd_drift_against_grpo_and_r3_under_a_mismatch() {
    use polars::prelude::*;
    let arm = |name: &str, alg: AlgorithmKind, routing: RoutingMode, knobs: bool, v: Vec<f64>| {
        (
            ArmSummary::blank(
                name,
                &[("final_eval", v), ("mismatch_kl_k3", vec![1e-3, 2e-3])],
            ),
            Identity {
                algorithm: alg,
                routing,
                ffn: FfnKind::Moe,
                default_knobs: knobs,
                tis: false,
                role: None,
            },
        )
    };
    let n = RoutingMode::Native;
    let arms = Arms {
        arms: vec![
            arm("grpo", AlgorithmKind::Grpo, n, true, vec![0.5, 0.6]),
            arm("gvpd", AlgorithmKind::Gvpd, n, true, vec![0.7, 0.7]),
            arm("opd_pg", AlgorithmKind::OpdPg, n, true, vec![0.6, 0.5]),
            arm(
                "gvpd_r3",
                AlgorithmKind::Gvpd,
                RoutingMode::R3,
                true,
                vec![0.7, 0.6],
            ),
            arm("gvpd_alpha1", AlgorithmKind::Gvpd, n, false, vec![0.6, 0.6]),
        ],
    };
    let updates = df!(
        "arm" => ["grpo", "grpo", "grpo", "gvpd", "gvpd", "gvpd"],
        "seed" => [0i64, 0, 1, 0, 1, 1],
        "drift_expert_frac" => [0.01, 0.03, 0.02, 0.04, 0.04, 0.02],
        "drift_router_frac" => [0.02, 0.06, 0.04, 0.08, 0.08, 0.04],
        "drift_token_frac" => [0.1, 0.1, 0.1, 0.1, 0.1, 0.1],
    )
    .unwrap();
    let (_, mut frames) = arms_and_frames("final_eval");
    frames.updates = updates;
    let mut r = RegimeData {
        name: "natural",
        arms: &arms,
        frames: &frames,
        same: &[],
        mismatch: false,
        claims: &[Claim::Opd],
        has_control: false,
        compute_target: Default::default(),
    };
    let eps = declare(&r).unwrap();
    let primary: Vec<_> = eps.iter().filter(|e| e.primary).collect();
    assert_eq!(primary.len(), 1);
    assert!(primary[0].what.contains("`gvpd` − `opd_pg`"));
    assert_eq!(primary[0].claimed, Claimed::Greater);
    let d = &primary[0].est.as_ref().unwrap().diffs;
    assert!((d[0] - 0.1).abs() < 1e-12 && (d[1] - 0.2).abs() < 1e-12);
    // Drift of gvpd against grpo: seed 0 ln(0.04 / 0.02), seed 1 ln(0.03 / 0.02).
    let drift = eps
        .iter()
        .find(|e| e.what.contains("activated expert slots") && e.what.contains("`gvpd`"))
        .unwrap();
    assert_eq!(drift.claimed, Claimed::Describe);
    let d = &drift.est.as_ref().unwrap().diffs;
    assert!(
        (d[0] - 2f64.ln()).abs() < 1e-9 && (d[1] - 1.5f64.ln()).abs() < 1e-9,
        "{d:?}"
    );
    assert_eq!(
        eps.iter()
            .filter(|e| e.what.starts_with("drift per update"))
            .count(),
        3,
        "gvpd in three units; opd_pg has no update rows here"
    );
    assert!(
        eps.iter()
            .any(|e| !e.primary && e.what.contains("`gvpd_alpha1` − `gvpd`"))
    );
    r.mismatch = true;
    let eps = declare(&r).unwrap();
    let primary: Vec<_> = eps
        .iter()
        .filter(|e| e.primary)
        .map(|e| e.claimed)
        .collect();
    assert_eq!(
        primary,
        vec![Claimed::Greater, Claimed::Less, Claimed::NotWorse]
    );
}
