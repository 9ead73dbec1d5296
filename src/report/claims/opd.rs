//! Claim (p): on-policy distillation of a MoE student. GVPD (GVPO++'s distillation objective)
//! against token-level PG-OPD on the final greedy eval accuracy (GVPO++, arXiv 2609.21432:
//! 35.99 vs 24.75–27.80 on math); the student's drift per update under GVPD and PG-OPD against
//! GRPO at the same learning rate and batch, in the three units papers use (described: no paper
//! claims a direction, so no test is declared); under a rollout engine that differs from the
//! trainer, R3 on the GVPD student against native routing (the engine–trainer KL, claimed lower;
//! the final accuracy, claimed not worse); GVPD's length exponent α and the full-vocabulary
//! forward KL as secondary rows beside their defaults.

use super::claim_def::{ClaimDef, Scope};
use super::compare::{RegimeData, ci, name, not_measured};
use crate::experiment::{Claim, Role};
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::{collapses, n};
use crate::report::summary::ArmSummary;
use crate::rl::AlgorithmKind;
use anyhow::Result;
use polars::prelude::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (p)
pub(super) const OPD: ClaimDef = ClaimDef {
    heading: "**(p) On-policy distillation of a MoE student: GVPD reaches a higher accuracy than token-level PG-OPD** (GVPO++: 35.99 vs 24.75–27.80 on math); the student's drift per update against GRPO at the same learning rate (described), and R3 on the student under a bf16 engine.",
    scope: Scope::PerRegime(opd),
    context: opd_line,
};

/// The drift columns of the updates frame in the three units, and what each counts.
pub const DRIFT_UNITS: [(&str, &str); 3] = [
    ("drift_expert_frac", "activated expert slots"),
    ("drift_router_frac", "(token, layer) routers"),
    ("drift_token_frac", "tokens"),
];

/// Per seed, the mean of `column` over `arm`'s rows of `df` (empty where the frame lacks the
/// column: a run from before it existed).
pub fn seed_means(df: &DataFrame, arm: &str, column: &str) -> BTreeMap<i64, f64> {
    per_seed(df, Some(arm), column)
}

/// Per seed, the finite means of `column` over the rows of `arm` (of every arm: None).
fn per_seed(df: &DataFrame, arm: Option<&str>, column: &str) -> BTreeMap<i64, f64> {
    let go = || -> PolarsResult<BTreeMap<i64, f64>> {
        let rows = match arm {
            Some(a) => df.clone().lazy().filter(col("arm").eq(lit(a.to_string()))),
            None => df.clone().lazy(),
        };
        let g = rows
            .group_by([col("seed")])
            .agg([col(column).cast(DataType::Float64).mean()])
            .collect()?;
        let (s, v) = (g.column("seed")?.cast(&DataType::Int64)?, g.column(column)?);
        let (s, v) = (s.i64()?, v.f64()?);
        Ok(s.iter()
            .zip(v.iter())
            .filter_map(|(s, v)| Some((s?, v?)))
            .filter(|(_, v)| v.is_finite())
            .collect())
    };
    if df.height() == 0 || df.column(column).is_err() {
        return BTreeMap::new();
    }
    go().unwrap_or_default()
}

/// `b` against `a` on a per-update column, seed by seed; None where either arm has no rows
/// with the column (a run from before it existed).
fn frame_pair(
    e: Endpoint,
    df: &DataFrame,
    a: &ArmSummary,
    b: &ArmSummary,
    c: &str,
) -> Option<Endpoint> {
    let (x, y) = (seed_means(df, &a.name, c), seed_means(df, &b.name, c));
    if x.is_empty() || y.is_empty() {
        return None;
    }
    let mut e = e.maps(&x, &y);
    e.arms = Some((a.name.clone(), b.name.clone()));
    Some(e)
}

fn eval_gain(r: &RegimeData, a: &ArmSummary, b: &ArmSummary, claimed: Claimed) -> Endpoint {
    Endpoint::new(
        Claim::Opd,
        r.name,
        format!("final greedy eval accuracy, {} − {}", name(b), name(a)),
        Scale::Difference,
        claimed,
    )
    .pair(a, b, "final_eval")
}

/// The arms of an objective that set knobs of their own and declare no role (GVPD with α = 1,
/// the forward KL): the secondary rows.
fn variants<'a>(r: &RegimeData<'a>, kind: AlgorithmKind) -> Vec<&'a ArmSummary> {
    r.arms
        .arms
        .iter()
        .filter(|(_, id)| id.algorithm == kind && id.role.is_none() && !id.default_knobs)
        .map(|(a, _)| a)
        .collect()
}

/// (p) per regime; the module docs say what each endpoint compares.
pub(super) fn opd(r: &RegimeData, out: &mut Vec<Endpoint>) -> Result<()> {
    let (gvpd, pg) = (r.arms.role(Role::Gvpd), r.arms.role(Role::OpdPg));
    if let (Some(v), Some(p)) = (gvpd, pg) {
        out.push(eval_gain(r, p, v, Claimed::Greater).reference(
            0.3599 - 0.2780,
            "GVPO++: 35.99 vs 27.80 (best PG-OPD), math",
        ));
    }
    if let (Some(k), Some(p)) = (r.arms.role(Role::OpdKl), pg) {
        out.push(eval_gain(r, p, k, Claimed::Describe));
    }
    if let (Some(g), Some(v)) = (r.arms.role(Role::Grpo), gvpd) {
        out.push(eval_gain(r, g, v, Claimed::Describe));
    }
    drift(r, out);
    if r.mismatch {
        replay(r, out);
    }
    let bases = [
        (AlgorithmKind::Gvpd, gvpd),
        (AlgorithmKind::OpdKl, r.arms.role(Role::OpdKl)),
    ];
    for (kind, base) in bases {
        let Some(base) = base else { continue };
        for v in variants(r, kind) {
            out.push(eval_gain(r, base, v, Claimed::Describe));
        }
    }
    Ok(())
}

/// Drift per update of the distilled students against GRPO, ln(OPD / GRPO), in three units.
fn drift(r: &RegimeData, out: &mut Vec<Endpoint>) {
    let Some(g) = r.arms.role(Role::Grpo) else {
        return;
    };
    for role in [Role::Gvpd, Role::OpdPg, Role::OpdKl] {
        let Some(a) = r.arms.role(role) else { continue };
        for (c, unit) in DRIFT_UNITS {
            let e = Endpoint::new(
                Claim::Opd,
                r.name,
                format!("drift per update ({unit}), ln({} / {})", name(a), name(g)),
                Scale::LogRatio,
                Claimed::Describe,
            );
            out.extend(frame_pair(e, &r.frames.updates, g, a, c));
        }
    }
}

/// R3 on the GVPD student under an engine mismatch: the k3 KL (claimed lower, as the R3 paper
/// found for RL) and the final accuracy (claimed not worse by more than δ).
fn replay(r: &RegimeData, out: &mut Vec<Endpoint>) {
    let (Some(v), Some(r3)) = (r.arms.role(Role::Gvpd), r.arms.role(Role::GvpdR3)) else {
        return;
    };
    out.push(
        Endpoint::new(
            Claim::Opd,
            r.name,
            format!("mismatch k3 KL, ln({} / {})", name(r3), name(v)),
            Scale::LogRatio,
            Claimed::Less,
        )
        .reference((7.5e-4f64 / 1.5e-3).ln(), "R3 paper (RL): 7.5e-4 vs 1.5e-3")
        .pair(v, r3, "mismatch_kl_k3"),
    );
    out.push(eval_gain(r, v, r3, Claimed::NotWorse));
}

/// The teacher's greedy eval accuracy per seed (the steps frame's `teacher_eval`, the same
/// evaluation as the student's), averaged over the regime's cells of that seed.
pub fn teacher_eval(steps: &DataFrame) -> BTreeMap<i64, f64> {
    per_seed(steps, None, "teacher_eval")
}

/// (p): the teacher's accuracy, each arm's final accuracy as a share of it, and the events.
pub(super) fn opd_line(md: &mut String, r: &Regime) -> Result<()> {
    let distilled: Vec<&ArmSummary> = r
        .arms
        .arms
        .iter()
        .filter(|(_, id)| {
            matches!(
                id.algorithm,
                AlgorithmKind::Gvpd | AlgorithmKind::OpdPg | AlgorithmKind::OpdKl
            )
        })
        .map(|(a, _)| a)
        .collect();
    if distilled.is_empty() {
        return not_measured(
            md,
            r,
            "a distillation arm (gvpd, opd_pg or opd_kl)",
            &[Role::Gvpd, Role::OpdPg, Role::OpdKl],
        );
    }
    let t = teacher_eval(&r.frames.steps);
    let tm = crate::report::stats::mean_ci(&t.values().copied().collect::<Vec<_>>());
    let mut line = format!(
        "- `{}`: teacher's greedy eval accuracy {} (same evaluation as the student's); final greedy eval accuracy, as a share of the teacher's per seed",
        r.name,
        ci(&tm)
    );
    for (a, _) in &r.arms.arms {
        let own = crate::report::endpoints::seeds_of(a, "final_eval");
        let rel: Vec<f64> = own
            .iter()
            .filter_map(|(s, v)| t.get(s).filter(|t| **t > 0.0).map(|t| v / t))
            .collect();
        let rel = crate::report::stats::mean_ci(&rel);
        write!(
            line,
            "; {} {} ({}, collapsed cells {})",
            n(a),
            ci(&a.final_eval),
            ci(&rel),
            collapses(a)
        )?;
    }
    writeln!(md, "{line}.")?;
    Ok(())
}
