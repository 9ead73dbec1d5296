//! The endpoints each claim declares for one regime.

use super::{Claimed, EXPONENT_MARGIN, Endpoint};
use crate::report::lengths::{Bin, cell_bins, length_exponent, off_policy_variances};
use crate::report::load::RunFrames;
use crate::report::paired::Scale;
use crate::report::roles::Arms;
use crate::report::summary::ArmSummary;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::collections::BTreeMap;

use super::paper::{compute_to_reach, extreme_share, gvpo_reward, tis_reward};

/// Per seed, the arm's per-cell value of `metric`.
pub(super) fn seeds_of(a: &ArmSummary, metric: &str) -> BTreeMap<i64, f64> {
    a.per_seed
        .get(metric)
        .map(|v| a.seed_ids.iter().copied().zip(v.iter().copied()).collect())
        .unwrap_or_default()
}

/// The values of the seeds both maps hold, in seed order.
pub(super) fn aligned(a: &BTreeMap<i64, f64>, b: &BTreeMap<i64, f64>) -> (Vec<f64>, Vec<f64>) {
    a.iter()
        .filter_map(|(s, x)| b.get(s).map(|y| (*x, *y)))
        .unzip()
}

/// What the endpoints of one regime need.
pub struct RegimeData<'a> {
    pub name: &'a str,
    pub arms: &'a Arms,
    pub frames: &'a RunFrames,
    /// Identical-arm groups ([`super::identical`]).
    pub same: &'a [Vec<String>],
    /// The rollout engine differs from the trainer in this regime.
    pub mismatch: bool,
    /// The claims the experiment declared: only their endpoints are made.
    pub claims: &'a [char],
}

/// Per seed, the mean over the regime's distinct arms of a per-cell value.
fn over_distinct_arms(r: &RegimeData, cells: &BTreeMap<(String, i64), f64>) -> BTreeMap<i64, f64> {
    let mut per: BTreeMap<i64, (f64, usize)> = BTreeMap::new();
    for ((arm, seed), v) in cells {
        if crate::report::identical::is_repeat(r.same, arm) || !v.is_finite() {
            continue;
        }
        let e = per.entry(*seed).or_default();
        e.0 += v;
        e.1 += 1;
    }
    per.into_iter()
        .map(|(s, (sum, n))| (s, sum / n as f64))
        .collect()
}

/// Are `a` and `b` in one identical-arm group?
fn twins(same: &[Vec<String>], a: &str, b: &str) -> bool {
    same.iter()
        .any(|g| g.iter().any(|x| x == a) && g.iter().any(|x| x == b))
}

pub(super) fn name(a: &ArmSummary) -> String {
    format!("`{}`", a.name)
}

/// The final reward of `b` minus `a`, seed by seed, under claim `claim` of regime `r`.
pub(super) fn reward_gain(
    claim: char,
    r: &RegimeData,
    a: &ArmSummary,
    b: &ArmSummary,
    claimed: Claimed,
) -> Endpoint {
    let mut e = Endpoint::new(
        claim,
        r.name,
        format!("final reward, {} − {}", name(b), name(a)),
        Scale::Difference,
        claimed,
    )
    .pair(a, b, "final_reward");
    if twins(r.same, &a.name, &b.name) {
        // A difference that is 0 by construction would pass TOST on every seed count.
        e.primary = false;
        e.note = Some(format!(
            "{} and {} ran bitwise-identical trajectories here (0 by construction): not tested, \
             outside Holm's family",
            name(b),
            name(a)
        ));
    }
    e
}

/// The endpoints of one regime, in claim order. Arms are found by what they are.
pub fn declare(r: &RegimeData) -> Result<Vec<Endpoint>> {
    type Declare = fn(&RegimeData, &mut Vec<Endpoint>);
    let claims: [(char, Declare); 9] = [
        ('a', drift_share),
        ('b', replay),
        ('c', gspo_stable),
        ('d', gspo_clips),
        ('f', mismatch),
        ('g', extreme_share),
        ('h', gvpo_reward),
        ('i', tis_reward),
        ('j', compute_to_reach),
    ];
    let mut out = Vec::new();
    for (c, f) in claims {
        if r.claims.contains(&c) {
            f(r, &mut out);
        }
        // (e) reads the frames and can fail: declared in its place, after (d).
        if c == 'd' && r.claims.contains(&'e') {
            ratio_variance(r, &mut out)?;
        }
    }
    Ok(out)
}

/// (a) drift per update of GRPO without replay, beside the paper's ~10%.
fn drift_share(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if let Some(g) = r.arms.grpo(RoutingMode::Native) {
        out.push(
            Endpoint::new(
                'a',
                r.name,
                format!(
                    "share of activated experts that change per update, {}",
                    name(g)
                ),
                Scale::Difference,
                Claimed::Describe,
            )
            .reference(0.10, "GSPO paper, 48-layer MoE")
            .one(&seeds_of(g, "drift_expert_frac")),
        );
    }
}

/// (b) final reward of GRPO with replay minus without; ratio explosions (secondary).
fn replay(r: &RegimeData, out: &mut Vec<Endpoint>) {
    let a = r.arms;
    let (Some(g), r2, r3) = (
        a.grpo(RoutingMode::Native),
        a.grpo(RoutingMode::R2),
        a.grpo(RoutingMode::R3),
    ) else {
        return;
    };
    for rep in [r2, r3].into_iter().flatten() {
        let mut e = reward_gain('b', r, g, rep, Claimed::Greater);
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
                'b',
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
}

/// (c) GSPO without replay not worse than GRPO with R2.
fn gspo_stable(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if let (Some(gs), Some(rep)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::R2)) {
        out.push(reward_gain('c', r, rep, gs, Claimed::NotWorse));
    }
}

/// (d) GSPO clips more tokens than GRPO.
fn gspo_clips(r: &RegimeData, out: &mut Vec<Endpoint>) {
    if let (Some(gs), Some(g)) = (r.arms.gspo(), r.arms.grpo(RoutingMode::Native)) {
        out.push(
            Endpoint::new(
                'd',
                r.name,
                format!("clipped-token fraction, ln({} / {})", name(gs), name(g)),
                Scale::LogRatio,
                Claimed::Greater,
            )
            .reference((0.15f64 / 0.0013).ln(), "GSPO paper: 0.15 vs 0.0013")
            .pair(g, gs, "clip_frac_tok"),
        );
    }
}

/// (e) as the claim is stated (GSPO §4): token-level ratio noise accumulates over a response
/// *beyond* what independent tokens give, and the length-normalised ratio does not accumulate.
/// With Var(Σ_t log w) ∝ length^β_sum and Var(mean_t log w) ∝ length^β_mean, independent
/// tokens give β_sum = 1 and β_mean = −1; the claim is β_sum > 1 and β_mean < 0. "Token
/// variance above sequence variance" and "β_sum > 0" hold for any noise, so they are only
/// described. The exponents are fitted across the response lengths of one task, where length
/// and difficulty go together (a longer sort is harder): the note says so.
fn ratio_variance(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let var = off_policy_variances(&r.frames.updates)?;
    let tok_over_seq: BTreeMap<(String, i64), f64> = var
        .iter()
        .map(|(k, (t, s))| (k.clone(), (t / s).ln()))
        .collect();
    if !tok_over_seq.is_empty() {
        out.push(
            Endpoint::new(
                'e',
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
            'e',
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
            'e',
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
                'e',
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

/// (f) the engine–trainer KL: MoE above dense, R3 below native. Only where the engine
/// differs from the trainer: elsewhere both are float rounding.
fn mismatch(r: &RegimeData, out: &mut Vec<Endpoint>) {
    let (a, g) = (r.arms, r.arms.grpo(RoutingMode::Native));
    let r3 = a.grpo(RoutingMode::R3);
    if r.mismatch {
        if let (Some(d), Some(g)) = (a.dense(), g) {
            out.push(
                Endpoint::new(
                    'f',
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
                    'f',
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
}
