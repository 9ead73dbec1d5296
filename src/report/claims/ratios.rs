//! Claims (d), (e) and (m): how much GSPO clips against GRPO, and how token-ratio noise grows
//! with response length (e) and along the prefixes of the same responses (m).

use super::claim_def::{ClaimDef, Scope};
use super::compare::{RegimeData, ci, name, not_measured, over_distinct_arms};
use crate::experiment::{Claim, Role};
use crate::report::endpoints::{Claimed, EXPONENT_MARGIN, Endpoint};
use crate::report::lengths::{
    Bin, Prefix, cell_bins, cell_prefixes, length_exponent, off_policy_variances, prefix_exponent,
};
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

/// (m)
pub(super) const PREFIX: ClaimDef = ClaimDef {
    heading: "**(m) The same, with difficulty held fixed: along the first ℓ tokens of the same responses, token-level ratio noise accumulates beyond uncorrelated tokens, and the length-normalised ratio does not accumulate** (GSPO §4): β_infl > 0 and β_mean < 0, where uncorrelated tokens give 0 and (for equal per-position variances) −1.",
    scope: Scope::PerRegime(prefix_variance),
    context: prefix_line,
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
        return not_measured(
            md,
            r,
            "a GSPO arm and a GRPO arm with native routing",
            &[Role::Gspo, Role::Grpo],
        );
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

/// (m): claim (e) on the prefixes frame, where every prefix length ℓ reads the same responses
/// to the same prompts, so the exponents are not a difficulty effect. With S_ℓ = Σ_{t<ℓ} log w_t:
/// Var(S_ℓ) / Σ_{t<ℓ} Var(log w_t) ∝ ℓ^β_infl is the design effect of correlated tokens (1 at
/// every ℓ for uncorrelated tokens, whatever each position's variance, so β_infl = 0), and
/// Var(S_ℓ / ℓ) ∝ ℓ^β_mean (−1 for uncorrelated tokens of equal variance). The claim is
/// β_infl > 0 and β_mean < 0. β_sum of Var(S_ℓ) and the uncorrelated-token exponent of
/// Σ_t Var(log w_t) are described: β_sum = β_infl + that exponent, and β_mean = β_sum − 2.
pub(super) fn prefix_variance(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let cells = cell_prefixes(&r.frames.prefixes)?;
    if cells.is_empty() {
        return Ok(());
    }
    let beta = |f: fn(&Prefix) -> f64| -> BTreeMap<i64, f64> {
        let per: BTreeMap<(String, i64), f64> = cells
            .iter()
            .map(|(k, ps)| (k.clone(), prefix_exponent(ps, f)))
            .collect();
        over_distinct_arms(r, &per)
    };
    let endpoint = |what: &str, claimed: Claimed| {
        Endpoint::new(
            Claim::PrefixVariance,
            r.name,
            format!("{what}, over prefix lengths ℓ of the same responses, within cells, mean over distinct arms"),
            Scale::Difference,
            claimed,
        )
        .margin(EXPONENT_MARGIN)
    };
    out.push(
        endpoint(
            "β_infl of Var(S_ℓ) / Σ_t Var(log w_t) ∝ ℓ^β (accumulation beyond uncorrelated tokens)",
            Claimed::Greater,
        )
        .reference(0.0, "uncorrelated token log-ratios: β_infl = 0")
        .one(&beta(Prefix::inflation)),
    );
    out.push(
        endpoint(
            "β_mean of Var(S_ℓ / ℓ) ∝ ℓ^β (the length-normalised ratio does not accumulate: β_mean < 0)",
            Claimed::Less,
        )
        .reference(-1.0, "uncorrelated token log-ratios of equal variance: β_mean = −1")
        .one(&beta(Prefix::mean_var)),
    );
    out.push(
        endpoint("β_sum of Var(S_ℓ) ∝ ℓ^β", Claimed::Describe)
            .reference(1.0, "uncorrelated token log-ratios of equal variance")
            .one(&beta(|p| p.sum_var)),
    );
    out.push(
        endpoint(
            "exponent of Σ_t Var(log w_t) ∝ ℓ^β (what uncorrelated tokens would give)",
            Claimed::Describe,
        )
        .reference(1.0, "equal variance at every position")
        .one(&beta(|p| p.pos_var)),
    );
    Ok(())
}

/// (m): the design effect at the longest prefix every cell reaches.
pub(super) fn prefix_line(md: &mut String, r: &Regime) -> Result<()> {
    let cells = cell_prefixes(&r.frames.prefixes)?;
    let longest = cells
        .values()
        .filter_map(|ps| {
            ps.iter()
                .filter(|p| p.df >= crate::report::lengths::MIN_DF)
                .map(|p| p.len)
                .max()
        })
        .min();
    let Some(l) = longest else {
        return not_measured(
            md,
            r,
            "a prefixes frame (runs from before it existed have none)",
            &[],
        );
    };
    let infl: Vec<f64> = cells
        .values()
        .filter_map(|ps| ps.iter().find(|p| p.len == l))
        .map(Prefix::inflation)
        .filter(|x| x.is_finite())
        .collect();
    writeln!(
        md,
        "- `{}`: over {} cells, Var(S_ℓ) / Σ_t Var(log w_t) at ℓ = {l} is {} (1 for uncorrelated tokens).",
        r.name,
        infl.len(),
        ci(&mean_ci(&infl)),
    )?;
    Ok(())
}
