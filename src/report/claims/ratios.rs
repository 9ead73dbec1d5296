//! Claims (d) and (e): how much GSPO clips against GRPO, and how token-ratio noise grows with response length.

use super::claim_def::{ClaimDef, Scope};
use super::compare::{RegimeData, ci, name, not_measured, over_distinct_arms};
use crate::experiment::Claim;
use crate::report::endpoints::{Claimed, EXPONENT_MARGIN, Endpoint};
use crate::report::lengths::{Bin, cell_bins, length_exponent, off_policy_variances};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::n;
use crate::report::stats::mean_ci;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (d)
pub(super) const CLIPS: ClaimDef = ClaimDef {
    heading: "**(d) GSPO clips far more tokens than GRPO** (paper: 0.15 vs 0.0013).",
    scope: Scope::PerRegime(clips),
    context: clips_line,
};

/// (e)
pub(super) const VARIANCE: ClaimDef = ClaimDef {
    heading: "**(e) Token-level ratio noise accumulates over a response beyond independent tokens, and the length-normalised sequence ratio does not accumulate** (GSPO §4): β_sum > 1 and β_mean < 0, where independent tokens give 1 and −1.",
    scope: Scope::PerRegime(variance),
    context: variance_line,
};

/// (d) GSPO clips more tokens than GRPO.
pub(super) fn clips(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    if let (Some(gs), Some(g)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::Native)) {
        out.push(
            Endpoint::new(
                Claim::GspoClips,
                r.name,
                format!("clipped-token fraction, ln({} / {})", name(gs), name(g)),
                Scale::LogRatio,
                Claimed::Greater,
            )
            .reference((0.15f64 / 0.0013).ln(), "GSPO paper: 0.15 vs 0.0013")
            .pair(g, gs, "clip_frac_tok"),
        );
    }
    Ok(())
}

/// (d): GSPO's clipping against GRPO's.
pub(super) fn clips_line(md: &mut String, r: &Regime) -> Result<()> {
    let (Some(g), Some(p)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::Native)) else {
        return not_measured(md, r, "a GSPO arm and a GRPO arm with native routing");
    };
    writeln!(
        md,
        "- `{}`: clipped-token fraction {} {} vs {} {}.",
        r.name,
        n(g),
        ci(g.m("clip_frac_tok")),
        n(p),
        ci(p.m("clip_frac_tok")),
    )?;
    Ok(())
}

/// (e) as the claim is stated (GSPO §4): token-level ratio noise accumulates over a response
/// *beyond* what independent tokens give, and the length-normalised ratio does not accumulate.
/// With Var(Σ_t log w) ∝ length^β_sum and Var(mean_t log w) ∝ length^β_mean, independent
/// tokens give β_sum = 1 and β_mean = −1; the claim is β_sum > 1 and β_mean < 0. "Token
/// variance above sequence variance" and "β_sum > 0" hold for any noise, so they are only
/// described. The exponents are fitted across the response lengths of one task, where length
/// and difficulty go together (a longer sort is harder): the note says so.
pub(super) fn variance(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let var = off_policy_variances(&r.frames.updates)?;
    let tok_over_seq: BTreeMap<(String, i64), f64> = var
        .iter()
        .map(|(k, (t, s))| (k.clone(), (t / s).ln()))
        .collect();
    if !tok_over_seq.is_empty() {
        out.push(
            Endpoint::new(
                Claim::RatioVariance,
                r.name,
                "ln(token / sequence ratio variance), off-policy updates, mean over distinct arms"
                    .into(),
                Scale::LogRatio,
                Claimed::Describe,
            )
            .margin(2f64.ln())
            .one(&over_distinct_arms(r, &tok_over_seq)),
        );
    }
    let bins = cell_bins(&r.frames.lengths)?;
    if !bins.is_empty() {
        let beta = |f: fn(&Bin) -> f64, shift: f64| -> BTreeMap<(String, i64), f64> {
            bins.iter()
                .map(|(k, b)| (k.clone(), length_exponent(b, f) - shift))
                .collect()
        };
        let confound = "length and difficulty vary together across the fit (longer responses \
                        answer longer, harder prompts)";
        let mut sum = Endpoint::new(
            Claim::RatioVariance,
            r.name,
            "β_sum − 1, β_sum of Var(Σ_t log w) ∝ length^β (accumulation beyond independent \
             tokens), within cells, mean over distinct arms"
                .into(),
            Scale::Difference,
            Claimed::Greater,
        )
        .margin(EXPONENT_MARGIN)
        .reference(0.0, "independent token log-ratios: β_sum = 1")
        .one(&over_distinct_arms(r, &beta(|b| b.sum_var, 1.0)));
        sum.note = Some(confound.into());
        out.push(sum);
        let mut mean = Endpoint::new(
            Claim::RatioVariance,
            r.name,
            "β_mean of Var(mean_t log w) ∝ length^β (the length-normalised ratio does not \
             accumulate: β_mean < 0), within cells, mean over distinct arms"
                .into(),
            Scale::Difference,
            Claimed::Less,
        )
        .margin(EXPONENT_MARGIN)
        .reference(-1.0, "independent token log-ratios: β_mean = −1")
        .one(&over_distinct_arms(r, &beta(|b| b.mean_var, 0.0)));
        mean.note = Some(confound.into());
        out.push(mean);
        out.push(
            Endpoint::new(
                Claim::RatioVariance,
                r.name,
                "β_sum of Var(Σ_t log w) ∝ length^β, within cells, mean over distinct arms".into(),
                Scale::Difference,
                Claimed::Describe,
            )
            .margin(EXPONENT_MARGIN)
            .reference(1.0, "independent token log-ratios")
            .one(&over_distinct_arms(r, &beta(|b| b.sum_var, 0.0))),
        );
    }
    Ok(())
}

/// (e): token against sequence ratio variance per cell.
pub(super) fn variance_line(md: &mut String, r: &Regime) -> Result<()> {
    let var = crate::report::lengths::off_policy_variances(&r.frames.updates)?;
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
