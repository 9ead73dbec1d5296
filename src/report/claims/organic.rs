//! Claim (q): C2 with drift the updates make. In every regime with a control (the same
//! staleness, the router's learning rate at its default), each fix against GRPO without replay
//! on the final greedy eval accuracy (primary for Routing Replay R2 and R3, described for the
//! other fixes), and each fix's arm × drift interaction: its gain over GRPO in the drift regime
//! minus its gain in the control, seed by seed, (fix_d − grpo_d) − (fix_c − grpo_c) (primary
//! for every MoE arm). A positive interaction says the fix handles the drift itself, not only
//! the stale samples it also corrects without drift.

use super::claim_def::{ClaimDef, Scope};
use super::compare::{ci, name, seeds_of, set_aside_twins, twins};
use crate::experiment::Claim;
use crate::model::FfnKind;
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::collapses;
use crate::report::summary::ArmSummary;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (q)
pub(super) const ORGANIC: ClaimDef = ClaimDef {
    heading: "**(q) C2 with drift the updates make: GRPO on a MoE does worse without Routing Replay when the router's own updates move its routes, and each fix's gain grows with that drift** (GSPO Fig. 3; the drift here comes from the router's learning rate, not from injected noise; the arm × drift interaction is the fix's gain over GRPO with drift minus its gain in the control).",
    scope: Scope::AcrossRegimes(organic),
    context: organic_line,
};

/// Per seed, `(fix_d − grpo_d) − (fix_c − grpo_c)` on `metric`, over the seeds all four hold.
pub(super) fn interaction(
    fix_d: &ArmSummary,
    grpo_d: &ArmSummary,
    fix_c: &ArmSummary,
    grpo_c: &ArmSummary,
    metric: &str,
) -> BTreeMap<i64, f64> {
    let [a, b, c, d] = [fix_d, grpo_d, fix_c, grpo_c].map(|x| seeds_of(x, metric));
    a.iter()
        .filter_map(|(s, fd)| Some((*s, (fd - b.get(s)?) - (c.get(s)? - d.get(s)?))))
        .filter(|(_, v)| v.is_finite())
        .collect()
}

/// The endpoint of `fix`'s arm × `what` interaction against GRPO `g` (regime `r`, its control
/// `c`; claimed > 0): per seed `(fix_d − g_d) − (fix_c − g_c)` on the final greedy eval
/// accuracy, `fc` and `gc` the arms in the control.
pub(super) fn interaction_endpoint(
    claim: Claim,
    what: &str,
    (r, c): (&Regime, &Regime),
    (fix, g): (&ArmSummary, &ArmSummary),
    (fc, gc): (&ArmSummary, &ArmSummary),
) -> Endpoint {
    let v = interaction(fix, g, fc, gc, "final_eval");
    let mut e = Endpoint::new(
        claim,
        &r.name,
        format!(
            "arm × {what} interaction, ({} − {}) in `{}` − in `{}`",
            name(fix),
            name(g),
            r.name,
            c.name
        ),
        Scale::Difference,
        Claimed::Greater,
    )
    .one(&v);
    e.arms = Some((g.name.clone(), fix.name.clone()));
    e
}

/// (q) per regime with a control; the module docs say what each endpoint compares.
pub(super) fn organic(regs: &[Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for (r, c, g, gc) in super::control::with_grpo_controls(regs) {
        let fixes = r
            .arms
            .arms
            .iter()
            .filter(|(a, id)| a.name != g.name && id.ffn == FfnKind::Moe);
        for (fix, id) in fixes {
            let replay = id.routing != RoutingMode::Native;
            let mut direct = Endpoint::new(
                Claim::Organic,
                &r.name,
                format!("final greedy eval accuracy, {} − {}", name(fix), name(g)),
                Scale::Difference,
                if replay {
                    Claimed::Greater
                } else {
                    Claimed::Describe
                },
            )
            .pair(g, fix, "final_eval");
            direct.primary = replay;
            let mut direct = [direct];
            set_aside_twins(&r.same, &mut direct);
            out.extend(direct);
            let Some((fc, _)) = c.arms.arms.iter().find(|(b, _)| b.name == fix.name) else {
                continue;
            };
            let mut e = interaction_endpoint(Claim::Organic, "drift", (r, c), (fix, g), (fc, gc));
            // A fix that ran GRPO's trajectory bit for bit in both regimes (on-policy, a
            // correction against an engine that is the policy) has an interaction of 0 by
            // construction: no evidence, outside Holm's family.
            if twins(&r.same, &g.name, &fix.name) && twins(&c.same, &gc.name, &fc.name) {
                e.primary = false;
                e.note = Some(format!(
                    "`{}` ran `{}`'s trajectory bit for bit in `{}` and in `{}` (0 by \
                     construction): not tested, outside Holm's family",
                    fix.name, g.name, r.name, c.name
                ));
            }
            out.push(e);
        }
    }
    out
}

/// (q): the regime's drift per update (the probe's, activated expert slots, mean over the
/// distinct MoE arms' cells) beside its control's, and each arm's collapsed cells.
pub(super) fn organic_line(md: &mut String, r: &Regime) -> Result<()> {
    let drift = |x: &Regime| {
        let v: Vec<f64> = x
            .distinct_moe()
            .iter()
            .map(|a| a.metrics.get("drift_expert_frac").mean)
            .filter(|v| v.is_finite())
            .collect();
        crate::report::stats::mean_ci(&v)
    };
    let parts: Vec<String> = r
        .arms
        .arms
        .iter()
        .map(|(a, _)| format!("`{}` {}", a.name, collapses(a)))
        .collect();
    let against = r
        .control
        .as_ref()
        .map_or(" (a control)".to_string(), |c| format!(" against `{c}`"));
    writeln!(
        md,
        "- `{}`{against}: drift per update (the probe's, activated expert slots, mean over the MoE arms) {}; collapsed cells {}.",
        r.name,
        ci(&drift(r)),
        parts.join(", "),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interaction is the fix's gain with drift minus its gain in the control, seed by
    /// seed, over the seeds all four cells hold.
    #[test]
    fn the_interaction_is_a_difference_of_paired_gains() {
        let arm = |v: Vec<f64>| ArmSummary::blank("x", &[("final_eval", v)]);
        let (fd, gd) = (arm(vec![0.6, 0.7, 0.5]), arm(vec![0.4, 0.5, 0.5]));
        let (fc, gc) = (arm(vec![0.6, 0.6, 0.6]), arm(vec![0.5, 0.6, 0.4]));
        let v = interaction(&fd, &gd, &fc, &gc, "final_eval");
        let want = [0.2 - 0.1, 0.2 - 0.0, 0.0 - 0.2];
        assert_eq!(v.len(), 3);
        for (k, w) in want.iter().enumerate() {
            assert!(
                (v[&(k as i64)] - w).abs() < 1e-12,
                "seed {k}: {} vs {w}",
                v[&(k as i64)]
            );
        }
        let short = ArmSummary::blank("x", &[("final_eval", vec![0.5, 0.5])]);
        assert_eq!(interaction(&fd, &gd, &short, &gc, "final_eval").len(), 2);
    }
}
