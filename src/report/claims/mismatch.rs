//! Claims (f), (g) and (i): the gap between rollout engine and trainer (MoE against dense, R3 against native) and truncated importance sampling against it.

use super::claim_def::{ClaimDef, Scope};
use super::compare::{RegimeData, ci, name, not_measured, reward_gain, seeds_of};
use crate::experiment::{Claim, Role};
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::{collapses, n};
use crate::report::summary::ArmSummary;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (f)
pub(super) const KL: ClaimDef = ClaimDef {
    heading: "**(f) Train–inference mismatch is larger for MoE than for the dense control, and R3 reduces its routing part** (R3 paper: k3 KL 1.5e-3 MoE vs 6.4e-4 dense, 7.5e-4 with R3).",
    scope: Scope::PerRegime(kl),
    context: kl_line,
};

/// (g)
pub(super) const EXTREME: ClaimDef = ClaimDef {
    heading: "**(g) The share of tokens whose engine/trainer probability ratio is beyond 2 is higher for MoE than dense, and R3 cuts it** (R3 paper: ~10× each; compared as a paired difference in share, δ = 1e-5 ≈ one token of a cell, with the seeds that have any such token beside it).",
    scope: Scope::PerRegime(extreme),
    context: extreme_line,
};

/// (i)
pub(super) const TIS: ClaimDef = ClaimDef {
    heading: "**(i) Truncated importance sampling against the rollout engine helps GRPO under a mismatch** (TIS, cap 2).",
    scope: Scope::PerRegime(tis),
    context: tis_line,
};

/// The smallest difference in the share of tokens beyond ratio 2 that matters: about one token
/// of a cell (50 steps × 128 responses × ~12 tokens ≈ 77,000 tokens). This is the resolution
/// that an earlier version of (g) declared as its pseudo-count.
pub const EXTREME_MARGIN: f64 = 1e-5;

/// (f) the engine–trainer KL: MoE above dense, R3 below native. Only where the engine
/// differs from the trainer: elsewhere both are float rounding.
pub(super) fn kl(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let (a, g) = (r.arms, r.arms.grpo(RoutingMode::Native));
    let r3 = a.grpo(RoutingMode::R3);
    if r.mismatch {
        if let (Some(d), Some(g)) = (a.dense(), g) {
            out.push(
                Endpoint::new(
                    Claim::Mismatch,
                    r.name,
                    format!(
                        "mismatch k3 KL, ln({} (MoE) / {} (dense))",
                        name(g),
                        name(d)
                    ),
                    Scale::LogRatio,
                    Claimed::Greater,
                )
                .reference((1.5e-3f64 / 6.4e-4).ln(), "R3 paper: 1.5e-3 vs 6.4e-4")
                .pair(d, g, "mismatch_kl_k3"),
            );
        }
        if let (Some(g), Some(r3)) = (g, r3) {
            out.push(
                Endpoint::new(
                    Claim::Mismatch,
                    r.name,
                    format!("mismatch k3 KL, ln({} / {})", name(r3), name(g)),
                    Scale::LogRatio,
                    Claimed::Less,
                )
                .reference((7.5e-4f64 / 1.5e-3).ln(), "R3 paper: 7.5e-4 vs 1.5e-3")
                .pair(g, r3, "mismatch_kl_k3"),
            );
        }
    }
    Ok(())
}

/// (f): the engine–trainer KLs.
pub(super) fn kl_line(md: &mut String, r: &Regime) -> Result<()> {
    let Some(m) = r.arms.grpo(RoutingMode::Native) else {
        return not_measured(md, r, "a GRPO arm with native routing", &[Role::Grpo]);
    };
    let mut line = format!(
        "- `{}`: k3 KL per token {} (MoE) {}; share of token-layer routes that differ {}",
        r.name,
        n(m),
        ci(m.m("mismatch_kl_k3")),
        ci(m.m("mismatch_route_frac"))
    );
    for a in [r.arms.grpo(RoutingMode::R3), r.arms.dense()]
        .into_iter()
        .flatten()
    {
        write!(line, "; {} {}", n(a), ci(a.m("mismatch_kl_k3")))?;
    }
    line.push_str(if r.mismatch {
        "."
    } else {
        "; no mismatch in this regime (the KLs are float rounding), so no endpoint."
    });
    writeln!(md, "{line}")?;
    Ok(())
}

/// (g) the share of tokens whose engine/trainer probability ratio is beyond 2 either way:
/// MoE above dense, R3 below native (R3 paper: ~10× each). An arm often has no such token at
/// all in a cell, so a ratio of shares is undefined there, and a pseudo-count would set its
/// value. The shares are therefore compared as a paired difference, b − a, with
/// δ = [`EXTREME_MARGIN`]. The number of seeds with any such token (1 or 0 per seed, b − a) is
/// described beside it.
pub(super) fn extreme(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    if !r.mismatch {
        return Ok(());
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
            Claim::ExtremeShare,
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
        .pair(lo, hi, "mismatch_extreme_frac");
        share.note = Some(format!(
            "{paper}, as a ratio; compared here as a difference"
        ));
        let seeds = Endpoint::new(
            Claim::ExtremeShare,
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
    Ok(())
}

/// (g): the share of tokens beyond a ratio of 2.
pub(super) fn extreme_line(md: &mut String, r: &Regime) -> Result<()> {
    let arms: Vec<&ArmSummary> = [
        r.arms.grpo(RoutingMode::Native),
        r.arms.grpo(RoutingMode::R3),
        r.arms.dense(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if arms.is_empty() {
        return not_measured(
            md,
            r,
            "GRPO arms (native, r3) or a dense control",
            &[Role::Grpo, Role::GrpoR3, Role::Dense],
        );
    }
    let parts: Vec<String> = arms
        .iter()
        .map(|a| format!("{} {}", n(a), ci(a.m("mismatch_extreme_frac"))))
        .collect();
    writeln!(
        md,
        "- `{}`: share of tokens with max(ρ, 1/ρ) > 2: {}{}",
        r.name,
        parts.join("; "),
        if r.mismatch {
            "."
        } else {
            "; no mismatch in this regime, so no endpoint."
        }
    )?;
    Ok(())
}

/// (i) truncated importance sampling against the engine helps GRPO under a mismatch: final
/// reward, GRPO + TIS − GRPO.
pub(super) fn tis(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    if !r.mismatch {
        return Ok(());
    }
    if let (Some(t), Some(g)) = (r.arms.grpo_tis(), r.arms.grpo(RoutingMode::Native)) {
        out.push(reward_gain(Claim::TisReward, r, g, t, Claimed::Greater));
    }
    Ok(())
}

/// (i): GRPO with TIS against plain GRPO.
pub(super) fn tis_line(md: &mut String, r: &Regime) -> Result<()> {
    let (Some(t), Some(g)) = (r.arms.grpo_tis(), r.arms.grpo(RoutingMode::Native)) else {
        return not_measured(
            md,
            r,
            "GRPO arms with and without TIS",
            &[Role::GrpoTis, Role::Grpo],
        );
    };
    writeln!(
        md,
        "- `{}`: final reward {} {} vs {} {}; collapsed cells {} / {}.",
        r.name,
        n(t),
        ci(&t.final_reward),
        n(g),
        ci(&g.final_reward),
        collapses(t),
        collapses(g)
    )?;
    Ok(())
}
