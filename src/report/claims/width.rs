//! Claim (s): drift per update against width, on its own (C1's width term, the sensitivity
//! addendum of claim (o)). Over a sweep of `d_model` with every other factor at the centre and
//! one cold-start learning rate for every width, per arm and seed: the exponent b of drift ∝
//! d_model^b (least squares on logs, [`crate::report::depth::fit`]), the same fit without the
//! widest configuration (how much the exponent hangs on its last point), and the drift it gives
//! at the GSPO paper's width (d_model 2048) on the log scale. Described, not tested: an
//! exponent from one factor's sweep is a sensitivity check of (o)'s fit, not the paper's claim.

use super::claim_def::{ClaimDef, Scope};
use crate::experiment::Claim;
use crate::report::depth::{PowerLaw, drift_fits, fit};
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The GSPO paper's model width (Qwen3-30B-A3B).
pub const PAPER_WIDTH: f64 = 2048.0;

/// (s)
pub(super) const WIDTH: ClaimDef = ClaimDef {
    heading: "**(s) Drift per update against width alone** (the width term of (o)'s fit, as a sensitivity addendum: every other factor at the centre, one cold-start learning rate for every width): per arm and seed, drift ∝ d_model^b fitted over the widths (least squares on logs), the exponent b, the same without the widest configuration, and the drift it gives at the GSPO paper's d_model 2048 (geometric mean over seeds). Described, not tested.",
    scope: Scope::AcrossRegimes(width),
    context: width_line,
};

fn describe(what: String) -> Endpoint {
    Endpoint::new(
        Claim::WidthDrift,
        "all",
        what,
        Scale::Difference,
        Claimed::Describe,
    )
}

/// Per seed, `f` of each seed's fit.
fn per(fits: &BTreeMap<i64, PowerLaw>, f: impl Fn(&PowerLaw) -> f64) -> BTreeMap<i64, f64> {
    fits.iter().map(|(s, p)| (*s, f(p))).collect()
}

/// (s) across the regimes of a width sweep (each regime's `x` its d_model).
pub(super) fn width(regs: &[Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    let widest = regs.iter().filter_map(|r| r.x).fold(f64::NAN, f64::max);
    let narrower: Vec<&Regime> = regs.iter().filter(|r| r.x != Some(widest)).collect();
    for (arm, fits) in drift_fits(regs) {
        out.push(
            describe(format!(
                "exponent b of drift per update ∝ d_model^b, `{arm}`"
            ))
            .one(&per(&fits, |p| p.b)),
        );
        let without: BTreeMap<i64, PowerLaw> = drift_points(&narrower, &arm)
            .into_iter()
            .filter_map(|(s, pts)| fit(&pts).map(|p| (s, p)))
            .collect();
        if !without.is_empty() {
            out.push(
                describe(format!(
                    "exponent b without the widest configuration (d_model {widest}), `{arm}`"
                ))
                .one(&per(&without, |p| p.b)),
            );
        }
        // On the log scale: b / a with a = 1 per seed gives ln b back, so the interval is a
        // geometric one and never below 0.
        let at = per(&fits, |p| p.at(PAPER_WIDTH));
        out.push(
            Endpoint::new(
                Claim::WidthDrift,
                "all",
                format!("drift per update extrapolated to d_model 2048, ln, `{arm}`"),
                Scale::LogRatio,
                Claimed::Describe,
            )
            .maps(&at.keys().map(|s| (*s, 1.0)).collect(), &at),
        );
    }
    out
}

/// Per seed, (x, the cell's drift per update) of `arm` over `regs`.
fn drift_points(regs: &[&Regime], arm: &str) -> BTreeMap<i64, Vec<(f64, f64)>> {
    let mut out: BTreeMap<i64, Vec<(f64, f64)>> = BTreeMap::new();
    for r in regs {
        let Some(x) = r.x else { continue };
        for (a, _) in r.arms.arms.iter().filter(|(a, _)| a.name == arm) {
            let v = a.per_seed.get("drift_expert_frac");
            for (i, s) in a.seed_ids.iter().enumerate() {
                if let Some(y) = v.and_then(|v| v.get(i)) {
                    out.entry(*s).or_default().push((x, *y));
                }
            }
        }
    }
    out
}

/// (s): the regime's drift per update, and how it changes within the cell: the mean over its
/// cells of the first step's updates against the last step's (drift per update falls as the
/// policy settles, so a short window's mean depends on its length).
pub(super) fn width_line(md: &mut String, r: &Regime) -> Result<()> {
    let (first, last) = first_last_step_drift(r);
    let pct = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{:.3}%", 100.0 * v));
    let parts = super::drift::arm_drifts(r);
    writeln!(
        md,
        "- `{}` (d_model {}): drift per update {}; first step's updates {}, last step's {}.",
        r.name,
        r.x.map_or("–".into(), |x| format!("{x}")),
        parts.join(", "),
        pct(first),
        pct(last)
    )?;
    Ok(())
}

/// The mean drift per update of the regime's first and last step (all arms and seeds).
fn first_last_step_drift(r: &Regime) -> (Option<f64>, Option<f64>) {
    use crate::metrics::frames::{f64_col, i64_col};
    let df = &r.frames.updates;
    let (Ok(step), Ok(v)) = (i64_col(df, "step"), f64_col(df, "drift_expert_frac")) else {
        return (None, None);
    };
    let (lo, hi) = (step.iter().min().copied(), step.iter().max().copied());
    let mean_at = |at: Option<i64>| {
        let x: Vec<f64> = (step.iter().zip(&v))
            .filter(|(s, _)| Some(**s) == at)
            .filter_map(|(_, v)| *v)
            .collect();
        (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
    };
    (mean_at(lo), mean_at(hi))
}
