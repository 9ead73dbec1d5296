//! The context line each claim writes per regime under its table in the findings: the arm
//! means behind the endpoints, or why a regime does not measure the claim.

use super::fmt::fmt_ci;
use super::regime::Regime;
use super::roles::{collapses, n, ratio_explosions};
use super::stats::{MeanCi, mean_ci};
use super::summary::ArmSummary;
use crate::model::FfnKind;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::fmt::Write as _;

fn ci(m: &MeanCi) -> String {
    fmt_ci(m, "n/a")
}

/// The line of a claim whose arms this regime does not have: `needs` says which.
pub(super) fn not_measured(md: &mut String, r: &Regime, needs: &str) -> Result<()> {
    writeln!(md, "- `{}`: not measured (needs {needs}).", r.name)?;
    Ok(())
}

/// (a): the share of activated experts that change per update.
pub(super) fn drift_share(md: &mut String, r: &Regime) -> Result<()> {
    let moe: Vec<&ArmSummary> = r
        .arms
        .arms
        .iter()
        .filter(|(a, id)| id.ffn == FfnKind::Moe && a.drift_expert_frac.mean.is_finite())
        .filter(|(a, _)| !super::identical::is_repeat(&r.same, &a.name))
        .map(|(a, _)| a)
        .collect();
    let all = mean_ci(
        &moe.iter()
            .map(|a| a.drift_expert_frac.mean)
            .collect::<Vec<_>>(),
    );
    writeln!(
        md,
        "- `{}`: mean over the {} distinct MoE arms {} ({:.2}% of activated experts).",
        r.name,
        moe.len(),
        ci(&all),
        100.0 * all.mean,
    )?;
    Ok(())
}

/// (b): GRPO without replay against GRPO with R2 and R3.
pub(super) fn replay_stability(md: &mut String, r: &Regime) -> Result<()> {
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

/// (c): GSPO without replay, its stability.
pub(super) fn gspo_stable(md: &mut String, r: &Regime) -> Result<()> {
    let (Some(g), Some(r2)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::R2)) else {
        return not_measured(md, r, "a GSPO arm and a GRPO arm with r2 routing");
    };
    writeln!(
        md,
        "- `{}`: final reward {} {} vs {} {}; collapsed cells {} (cells with a token-ratio explosion, which GSPO's loss does not use: {}).",
        r.name,
        n(g),
        ci(&g.final_reward),
        n(r2),
        ci(&r2.final_reward),
        collapses(g),
        ratio_explosions(g),
    )?;
    Ok(())
}

/// (d): GSPO's clipping against GRPO's.
pub(super) fn gspo_clips(md: &mut String, r: &Regime) -> Result<()> {
    let (Some(g), Some(p)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::Native)) else {
        return not_measured(md, r, "a GSPO arm and a GRPO arm with native routing");
    };
    writeln!(
        md,
        "- `{}`: clipped-token fraction {} {} vs {} {}.",
        r.name,
        n(g),
        ci(&g.clip_frac_tok),
        n(p),
        ci(&p.clip_frac_tok),
    )?;
    Ok(())
}

/// (e): token against sequence ratio variance per cell.
pub(super) fn ratio_variance(md: &mut String, r: &Regime) -> Result<()> {
    let var = super::lengths::off_policy_variances(&r.frames.updates)?;
    let (t, s): (Vec<f64>, Vec<f64>) = var.values().copied().unzip();
    writeln!(
        md,
        "- `{}`: over {} cells (each the mean of its off-policy updates), token ratio variance {} vs sequence ratio variance {}.",
        r.name,
        t.len(),
        ci(&mean_ci(&t)),
        ci(&mean_ci(&s)),
    )?;
    Ok(())
}

/// (f): the engine–trainer KLs.
pub(super) fn mismatch(md: &mut String, r: &Regime) -> Result<()> {
    let Some(m) = r.arms.grpo(RoutingMode::Native) else {
        return not_measured(md, r, "a GRPO arm with native routing");
    };
    let mut line = format!(
        "- `{}`: k3 KL per token {} (MoE) {}; share of token-layer routes that differ {}",
        r.name,
        n(m),
        ci(&m.mismatch_kl_k3),
        ci(&m.mismatch_route_frac)
    );
    for a in [r.arms.grpo(RoutingMode::R3), r.arms.dense()]
        .into_iter()
        .flatten()
    {
        write!(line, "; {} {}", n(a), ci(&a.mismatch_kl_k3))?;
    }
    line.push_str(if r.mismatch {
        "."
    } else {
        "; no mismatch in this regime (the KLs are float rounding), so no endpoint."
    });
    writeln!(md, "{line}")?;
    Ok(())
}

/// (g): the share of tokens beyond a ratio of 2.
pub(super) fn extreme_share(md: &mut String, r: &Regime) -> Result<()> {
    let arms: Vec<&ArmSummary> = [
        r.arms.grpo(RoutingMode::Native),
        r.arms.grpo(RoutingMode::R3),
        r.arms.dense(),
    ]
    .into_iter()
    .flatten()
    .collect();
    if arms.is_empty() {
        return not_measured(md, r, "GRPO arms (native, r3) or a dense control");
    }
    let parts: Vec<String> = arms
        .iter()
        .map(|a| format!("{} {}", n(a), ci(&a.mismatch_extreme_frac)))
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

/// (h): GVPO against GRPO and GSPO.
pub(super) fn gvpo_reward(md: &mut String, r: &Regime) -> Result<()> {
    let Some(v) = r.arms.gvpo() else {
        return not_measured(md, r, "a GVPO arm");
    };
    let mut line = format!(
        "- `{}`: final reward {} {}, collapsed cells {}",
        r.name,
        n(v),
        ci(&v.final_reward),
        collapses(v)
    );
    for a in [r.arms.grpo(RoutingMode::Native), r.arms.gspo()]
        .into_iter()
        .flatten()
    {
        write!(
            line,
            "; {} {}, collapsed cells {}",
            n(a),
            ci(&a.final_reward),
            collapses(a)
        )?;
    }
    writeln!(md, "{line} (of {} seeds).", v.seeds)?;
    Ok(())
}

/// (i): GRPO with TIS against plain GRPO.
pub(super) fn tis_reward(md: &mut String, r: &Regime) -> Result<()> {
    let (Some(t), Some(g)) = (r.arms.grpo_tis(), r.arms.grpo(RoutingMode::Native)) else {
        return not_measured(md, r, "GRPO arms with and without TIS");
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

/// (j): total compute of the arms compared on it.
pub(super) fn compute_line(md: &mut String, r: &Regime) -> Result<()> {
    let Some(r2) = r.arms.grpo(RoutingMode::R2) else {
        return not_measured(md, r, "a GRPO arm with r2 routing");
    };
    let c = super::compute::curves(&r.frames.steps)?;
    let total = |a: &ArmSummary| {
        mean_ci(
            &c.iter()
                .filter(|((n, _), _)| *n == a.name)
                .filter_map(|(_, v)| v.last().map(|p| p.0))
                .collect::<Vec<_>>(),
        )
    };
    let mut line = format!(
        "- `{}`: response tokens trained per cell {} {}",
        r.name,
        n(r2),
        ci(&total(r2))
    );
    for a in [r.arms.gspo(), r.arms.grpo(RoutingMode::Native)]
        .into_iter()
        .flatten()
    {
        write!(line, ", {} {}", n(a), ci(&total(a)))?;
    }
    writeln!(md, "{line}.")?;
    Ok(())
}

/// (k): the per-regime drift the fit runs over.
pub(super) fn depth_line(md: &mut String, r: &Regime) -> Result<()> {
    let parts: Vec<String> = r
        .arms
        .arms
        .iter()
        .map(|(a, _)| format!("{} {}", n(a), ci(&a.drift_expert_frac)))
        .collect();
    writeln!(
        md,
        "- `{}` (x = {}): drift per update {}.",
        r.name,
        r.x.map_or("–".into(), |x| format!("{x}")),
        parts.join(", ")
    )?;
    Ok(())
}

/// (l): the control a regime is compared against and its collapses.
pub(super) fn control_line(md: &mut String, r: &Regime) -> Result<()> {
    let Some(c) = &r.control else {
        return writeln!(
            md,
            "- `{}`: a control (no regime compared against).",
            r.name
        )
        .map_err(Into::into);
    };
    let parts: Vec<String> = r
        .arms
        .arms
        .iter()
        .map(|(a, _)| format!("{} {}", n(a), collapses(a)))
        .collect();
    writeln!(
        md,
        "- `{}` against `{c}`: collapsed cells {} (of {} seeds).",
        r.name,
        parts.join(", "),
        r.arms.arms.first().map_or(0, |(a, _)| a.seeds)
    )?;
    Ok(())
}
