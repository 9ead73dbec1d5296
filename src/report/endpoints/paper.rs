//! The endpoints of the paper-figure experiments' claims (g)–(l), declared before their runs
//! like those of (a)–(f) in [`super::declare`].

use super::declare::{RegimeData, name, reward_gain, seeds_of};
use super::{Claimed, EXPONENT_MARGIN, Endpoint};
use crate::report::paired::Scale;
use crate::report::summary::ArmSummary;
use crate::rl::RoutingMode;
use std::collections::BTreeMap;

/// The smallest difference in the share of tokens beyond ratio 2 that matters: about one token
/// of a cell (50 steps × 128 responses × ~12 tokens ≈ 77,000 tokens). This is the resolution
/// that an earlier version of (g) declared as its pseudo-count.
pub const EXTREME_MARGIN: f64 = 1e-5;

/// (g) the share of tokens whose engine/trainer probability ratio is beyond 2 either way:
/// MoE above dense, R3 below native (R3 paper: ~10× each). An arm often has no such token at
/// all in a cell, so a ratio of shares is undefined there, and a pseudo-count would set its
/// value. The shares are therefore compared as a paired difference, b − a, with
/// δ = [`EXTREME_MARGIN`]. The number of seeds with any such token (1 or 0 per seed, b − a) is
/// described beside it.
pub(super) fn extreme_share(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if !r.mismatch {
        return;
    }
    let (a, g) = (r.arms, r.arms.grpo(RoutingMode::Native));
    let any = |x: &ArmSummary| -> BTreeMap<i64, f64> {
        seeds_of(x, "mismatch_extreme_frac")
            .into_iter()
            .map(|(s, v)| {
                (
                    s,
                    if v > 0.0 {
                        1.0
                    } else if v == 0.0 {
                        0.0
                    } else {
                        f64::NAN
                    },
                )
            })
            .collect()
    };
    let pair = |lo: &ArmSummary, hi: &ArmSummary, claimed: Claimed, tag: &str, paper: &str| {
        let mut share = Endpoint::new(
            'g',
            r.name,
            format!(
                "share of tokens with engine/trainer ratio beyond 2, {} − {}{tag}",
                name(hi),
                name(lo)
            ),
            Scale::Difference,
            claimed,
        )
        .margin(EXTREME_MARGIN)
        .maps(
            &seeds_of(lo, "mismatch_extreme_frac"),
            &seeds_of(hi, "mismatch_extreme_frac"),
        );
        share.note = Some(format!(
            "{paper}, as a ratio; compared here as a difference"
        ));
        let seeds = Endpoint::new(
            'g',
            r.name,
            format!(
                "seeds with any token whose engine/trainer ratio is beyond 2, {} − {}{tag}",
                name(hi),
                name(lo)
            ),
            Scale::Difference,
            claimed,
        )
        .margin(0.5)
        .secondary()
        .maps(&any(lo), &any(hi));
        [share, seeds]
    };
    if let (Some(d), Some(g)) = (a.dense(), g) {
        out.extend(pair(
            d,
            g,
            Claimed::Greater,
            " (MoE − dense)",
            "R3 paper: ~10× higher for MoE",
        ));
    }
    if let (Some(g), Some(r3)) = (g, a.grpo(RoutingMode::R3)) {
        out.extend(pair(g, r3, Claimed::Less, "", "R3 paper: R3 cuts it ~10×"));
    }
}

/// (h) GVPO learns at least as well as GRPO: final reward, GVPO − GRPO (GVPO paper: AIME24
/// 20.7 vs 14.8 on Qwen2.5-Math-7B, stable off-policy).
pub(super) fn gvpo_reward(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if let (Some(v), Some(g)) = (r.arms.gvpo(), r.arms.grpo(RoutingMode::Native)) {
        out.push(reward_gain('h', r, g, v, Claimed::Greater));
    }
    if let (Some(v), Some(s)) = (r.arms.gvpo(), r.arms.gspo()) {
        out.push(reward_gain('h', r, s, v, Claimed::Describe));
    }
}

/// (i) truncated importance sampling against the engine helps GRPO under a mismatch: final
/// reward, GRPO + TIS − GRPO.
pub(super) fn tis_reward(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if !r.mismatch {
        return;
    }
    if let (Some(t), Some(g)) = (r.arms.grpo_tis(), r.arms.grpo(RoutingMode::Native)) {
        out.push(reward_gain('i', r, g, t, Claimed::Greater));
    }
}

/// (j) GSPO reaches GRPO + R2's reward with less compute (GSPO Fig. 1: ~60%): per seed,
/// ln(response tokens GSPO trained until its reward EMA reached 90% of R2's gain / the
/// tokens R2 needed); a seed where GSPO never got there is right-censored: its whole compute
/// is a lower bound, and the tests treat it so ([`Endpoint::test`]). GRPO without replay the
/// same way, described.
pub(super) fn compute_to_reach(r: &RegimeData, out: &mut Vec<Endpoint>) {
    use crate::report::compute::{curves, log_ratios};
    let Some(r2) = r.arms.grpo(RoutingMode::R2) else {
        return;
    };
    let Ok(c) = curves(&r.frames.steps) else {
        return;
    };
    let arms = [
        (r.arms.gspo(), Claimed::Less),
        (r.arms.grpo(RoutingMode::Native), Claimed::Describe),
    ];
    for (a, claimed) in arms {
        let Some(a) = a else { continue };
        let (v, censored) = log_ratios(&c, &a.name, &r2.name);
        let mut e = Endpoint::new(
            'j',
            r.name,
            format!(
                "response tokens to reach 90% of {}'s reward gain, ln({} / {})",
                name(r2),
                name(a),
                name(r2)
            ),
            Scale::LogRatio,
            claimed,
        )
        // On the log-ratio scale: b / a with a = 1 per seed gives ln b back.
        .maps(
            &v.keys().map(|s| (*s, 1.0)).collect(),
            &v.iter().map(|(s, l)| (*s, l.exp())).collect(),
        );
        if claimed == Claimed::Less {
            e = e.reference(0.6f64.ln(), "GSPO paper: ~60% of the compute");
        }
        if !censored.is_empty() {
            // `maps` pairs the seeds of `v` in seed order, all finite.
            e.censored = v.keys().map(|s| censored.contains(s)).collect();
            let how = if claimed == Claimed::Describe {
                ""
            } else {
                "; the claim is tested by a sign test of who reached first (censored seeds count \
                 against it), and equivalence cannot be shown"
            };
            e.note = Some(format!(
                "{} of {} seeds censored: {} never reached the target in seeds {censored:?}, whose \
                 value is its whole compute (a lower bound){how}",
                censored.len(),
                v.len(),
                name(a)
            ));
        }
        out.push(e);
    }
}

/// (k) across the regimes of a depth sweep: per arm, the exponent b of drift ∝ n_layers^b
/// (claimed > 0, margin as the length exponents) and the drift it gives at 48 layers beside
/// the paper's ~10% (described). Their regime is "all". Only the spec's first arm's exponent
/// is primary (the others are secondary), so one test carries the claim and Holm's m stays 1.
pub fn depth_endpoints(regs: &[crate::report::regime::Regime]) -> Vec<Endpoint> {
    use crate::report::depth::{PAPER_DEPTH, drift_fits};
    let mut out = Vec::new();
    for (i, (arm, fits)) in drift_fits(regs).into_iter().enumerate() {
        let b: BTreeMap<i64, f64> = fits.iter().map(|(s, f)| (*s, f.b)).collect();
        let at: BTreeMap<i64, f64> = fits.iter().map(|(s, f)| (*s, f.at(PAPER_DEPTH))).collect();
        out.push(
            Endpoint::new(
                'k',
                "all",
                format!("exponent b of drift per update ∝ n_layers^b, `{arm}`"),
                Scale::Difference,
                Claimed::Greater,
            )
            .margin(EXPONENT_MARGIN)
            .one(&b),
        );
        if i > 0 {
            out.last_mut().expect("just pushed").primary = false;
        }
        out.push(
            Endpoint::new(
                'k',
                "all",
                format!("drift per update extrapolated to 48 layers, `{arm}`"),
                Scale::Difference,
                Claimed::Describe,
            )
            .reference(0.10, "GSPO paper, 48-layer MoE")
            .one(&at),
        );
    }
    out
}

/// The (l) endpoints' quantities: how their text names them, and the per-cell metric.
pub const CONTROL_METRICS: [(&str, &str); 2] = [
    ("final eval accuracy", "final_eval"),
    ("final reward", "final_reward"),
];

/// (l) per regime with a control, per arm that runs in both: the final greedy accuracy on the
/// task's held-out eval set, then the final training reward, in the regime minus in the
/// control, paired by seed (described: the map's cells, not tests of a claim). The eval
/// accuracy comes first: the same prompts for every arm of a seed, decoded greedily, it is the
/// less noisy of the two (the stability map at 6 seeds: median paired SD 0.036 against 0.069).
pub fn control_endpoints(regs: &[crate::report::regime::Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for r in regs {
        let Some(c) = r
            .control
            .as_ref()
            .and_then(|c| regs.iter().find(|x| x.name == *c))
        else {
            continue;
        };
        for (a, _) in &r.arms.arms {
            let Some((b, _)) = c.arms.arms.iter().find(|(b, _)| b.name == a.name) else {
                continue;
            };
            for (what, metric) in CONTROL_METRICS {
                out.push(
                    Endpoint::new(
                        'l',
                        &r.name,
                        format!("{what}, {} in `{}` − in `{}`", name(a), r.name, c.name),
                        Scale::Difference,
                        Claimed::Describe,
                    )
                    .pair(b, a, metric),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::declare::declare;
    use super::*;
    use crate::model::FfnKind;
    use crate::report::RunFrames;
    use crate::report::roles::Arms;
    use crate::report::run_info::Identity;
    use crate::rl::AlgorithmKind;
    use polars::prelude::DataFrame;

    fn id(routing: RoutingMode, ffn: FfnKind) -> Identity {
        Identity {
            algorithm: AlgorithmKind::Grpo,
            routing,
            ffn,
            default_knobs: true,
            tis: false,
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
            events: DataFrame::empty(),
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
            claims: &['g'],
        };
        let mut out = Vec::new();
        extreme_share(&r, &mut out);
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
        extreme_share(&r, &mut none);
        assert!(none.is_empty());
        r.mismatch = true;
        r.claims = &['a'];
        assert!(declare(&r).unwrap().iter().all(|e| e.claim == 'a'));
    }

    /// Arms that ran bitwise-identical trajectories are compared, but outside Holm's family:
    /// a difference that is 0 by construction is no evidence.
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
            claims: &['b'],
        };
        let g = &arms.arms[0].0;
        let r3 = &arms.arms[1].0;
        let mut eps = vec![
            reward_gain('b', &r, g, r3, Claimed::Greater),
            reward_gain('b', &r, &arms.arms[2].0, g, Claimed::Greater),
        ];
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
    }
}
