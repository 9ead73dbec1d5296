//! Claims (b) and (n): GRPO without Routing Replay against GRPO with R2 and R3, and every
//! fix against GRPO where it breaks.

use super::claim_def::{ClaimDef, Scope};
use super::compare::{RegimeData, ci, name, not_measured, reward_gain, twins};
use crate::experiment::{Claim, Role};
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::{collapses, n, ratio_explosions};
use crate::report::summary::ArmSummary;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::fmt::Write as _;

/// (b)
pub(super) const REPLAY: ClaimDef = ClaimDef {
    heading: "**(b) GRPO without replay is less stable than with R2/R3** (GSPO paper: without replay the reward decays).",
    scope: Scope::PerRegime(replay),
    context: replay_line,
};

/// (b) final reward of GRPO with replay minus without; ratio explosions (secondary).
pub(super) fn replay(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let a = r.arms;
    let (Some(g), r2, r3) = (
        a.grpo(RoutingMode::Native),
        a.grpo(RoutingMode::R2),
        a.grpo(RoutingMode::R3),
    ) else {
        return Ok(());
    };
    for rep in [r2, r3].into_iter().flatten() {
        let mut e = reward_gain(Claim::Replay, r, g, rep, Claimed::Greater);
        if let (Some(x), true) = (r2, rep.routing == "r3")
            && twins(r.same, &x.name, &rep.name)
        {
            e.note = Some(format!(
                "same as {} (identical arms): not counted twice",
                name(x)
            ));
            e.primary = false;
        }
        out.push(e);
    }
    if let Some(rep) = r2 {
        out.push(
            Endpoint::new(
                Claim::Replay,
                r.name,
                format!(
                    "cells with a token-ratio explosion, {} − {}",
                    name(g),
                    name(rep)
                ),
                Scale::Difference,
                Claimed::Greater,
            )
            .margin(0.5)
            .secondary()
            .pair(rep, g, "ratio_explosion"),
        );
    }
    Ok(())
}

/// (b): GRPO without replay against GRPO with R2 and R3.
pub(super) fn replay_line(md: &mut String, r: &Regime) -> Result<()> {
    let a = &r.arms;
    let (g, r2, r3) = (
        a.grpo(RoutingMode::Native),
        a.grpo(RoutingMode::R2),
        a.grpo(RoutingMode::R3),
    );
    let Some(g) = g.filter(|_| r2.is_some() || r3.is_some()) else {
        return not_measured(
            md,
            r,
            "a GRPO arm with native routing and one with r2 or r3",
            &[Role::Grpo, Role::GrpoR2, Role::GrpoR3],
        );
    };
    let mut line = format!(
        "- `{}`: final reward {} {}",
        r.name,
        n(g),
        ci(&g.final_reward)
    );
    for rep in [r2, r3].into_iter().flatten() {
        write!(line, ", {} {}", n(rep), ci(&rep.final_reward))?;
    }
    let cells = |f: fn(&ArmSummary) -> usize| {
        [Some(g), r2, r3]
            .into_iter()
            .flatten()
            .map(|a| f(a).to_string())
            .collect::<Vec<_>>()
            .join(" / ")
    };
    writeln!(
        line,
        "; collapsed cells {}; cells with a token-ratio explosion {} (of {} seeds).",
        cells(collapses),
        cells(ratio_explosions),
        g.seeds
    )?;
    md.push_str(&line);
    Ok(())
}

/// (n)
pub(super) const LEADERBOARD: ClaimDef = ClaimDef {
    heading: "**(n) Where GRPO without replay breaks, each fix does better** (C2 for R2; the fixes the field uses for the rest): per seed, the final greedy eval accuracy on the held-out prompts of each arm minus GRPO's, in the regimes that have a control, one Holm family.",
    scope: Scope::PerRegime(leaderboard),
    context: leaderboard_line,
};

/// (n) every other MoE arm of a regime with a control minus GRPO without replay (default
/// settings), on the final greedy eval accuracy (primary, claimed > 0, δ = 0.05); the cells
/// with a token-ratio explosion and with a collapse, GRPO minus the arm (secondary).
pub(super) fn leaderboard(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    if !r.has_control {
        return Ok(());
    }
    let Some(g) = r.arms.grpo(RoutingMode::Native) else {
        return Ok(());
    };
    let fixes = r
        .arms
        .arms
        .iter()
        .filter(|(a, id)| a.name != g.name && id.ffn == crate::model::FfnKind::Moe)
        .map(|(a, _)| a);
    for fix in fixes {
        out.push(
            Endpoint::new(
                Claim::FixLeaderboard,
                r.name,
                format!("final greedy eval accuracy, {} − {}", name(fix), name(g)),
                Scale::Difference,
                Claimed::Greater,
            )
            .pair(g, fix, "final_eval"),
        );
        for (what, metric) in [
            ("cells with a token-ratio explosion", "ratio_explosion"),
            ("cells with a collapse", "collapsed"),
        ] {
            out.push(
                Endpoint::new(
                    Claim::FixLeaderboard,
                    r.name,
                    format!("{what}, {} − {}", name(g), name(fix)),
                    Scale::Difference,
                    Claimed::Greater,
                )
                .margin(0.5)
                .secondary()
                .pair(fix, g, metric),
            );
        }
    }
    Ok(())
}

/// (n): the arms' final eval accuracies, best first.
pub(super) fn leaderboard_line(md: &mut String, r: &Regime) -> Result<()> {
    if r.control.is_none() {
        return Ok(());
    }
    let mut arms: Vec<&ArmSummary> = r.arms.arms.iter().map(|(a, _)| a).collect();
    arms.sort_by(|a, b| b.final_eval.mean.total_cmp(&a.final_eval.mean));
    let list: Vec<String> = arms
        .iter()
        .map(|a| format!("{} {}", n(a), ci(&a.final_eval)))
        .collect();
    writeln!(
        md,
        "- `{}` (control `{}`): final greedy eval accuracy, best first: {}.",
        r.name,
        r.control.as_deref().unwrap_or(""),
        list.join("; ")
    )?;
    Ok(())
}
