//! Claim (l): where training breaks: every arm against its regime's control (the stability map's cells, described).

use super::claim_def::{ClaimDef, Scope};
use super::compare::name;
use crate::experiment::Claim;
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::{collapses, n};
use crate::report::summary::ArmSummary;
use anyhow::Result;
use std::fmt::Write as _;

/// (l)
pub(super) const CONTROL: ClaimDef = ClaimDef {
    heading: "**(l) Where training breaks: the paired change of every arm's final eval accuracy (greedy, held-out prompts; the map's cells) and final training reward against its regime's control** (the stability map; described, with 95% intervals read at δ = 0.05).",
    scope: Scope::AcrossRegimes(control),
    context: control_line,
};

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
pub(super) fn control(regs: &[Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for (r, c) in with_controls(regs) {
        for (a, _) in &r.arms.arms {
            let Some((b, _)) = c.arms.arms.iter().find(|(b, _)| b.name == a.name) else {
                continue;
            };
            for (what, metric) in CONTROL_METRICS {
                out.push(
                    Endpoint::new(
                        Claim::Control,
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

/// Every regime that names a `control`, with that control regime and the GRPO arm without
/// replay of each (regimes where either lacks one are left out).
pub(super) fn with_grpo_controls(
    regs: &[Regime],
) -> impl Iterator<Item = (&Regime, &Regime, &ArmSummary, &ArmSummary)> {
    with_controls(regs).filter_map(|(r, c)| {
        let g = r.arms.grpo(crate::rl::RoutingMode::Native)?;
        Some((r, c, g, c.arms.grpo(crate::rl::RoutingMode::Native)?))
    })
}

/// Every regime that names a `control`, with that control regime.
pub(super) fn with_controls(regs: &[Regime]) -> impl Iterator<Item = (&Regime, &Regime)> {
    regs.iter().filter_map(|r| {
        let c = r.control.as_ref()?;
        Some((r, regs.iter().find(|x| x.name == *c)?))
    })
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
