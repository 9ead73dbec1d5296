//! Claim (o): what sets drift per update. Per seed, a multiplicative fit of drift (activated
//! expert slots, (token, layer) routers) and of the bf16 engine's mismatch (routers that
//! differ, k3 KL) on depth, width, experts, learning rate and minibatches over the fitting
//! configurations; its exponents, its error on the held-out configurations, its prediction at
//! the GSPO paper's model beside the papers' values, and the share of the gap each factor
//! closes. Every endpoint is described (an extrapolation is not a test).

use super::claim_def::{ClaimDef, Scope};
use crate::experiment::Claim;
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::regime::scale_points as points;
use crate::report::scale::{
    FACTORS, Factors, From, P, PAPER, Points, fits, holdout_error, tokens_from_routers,
};
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (o)
pub(super) const SCALE: ClaimDef = ClaimDef {
    heading: "**(o) What sets drift per update** (C1 at scale; GSPO paper: ~10% of activated experts per update on Qwen3-30B-A3B, 48 layers, d 2048, 128 experts top-8; R3 paper: ~10% of routers, 94% of tokens): per seed, ln y = c + Σ b_f ln x_f fitted by least squares over the fitting configurations (not the held-out ones), its exponents, its error on the held-out configurations, its prediction at the paper's model (learning rate 1e-6 assumed, and at 1e-4) and the share of the gap ln(paper / centre) each factor's term closes. Described, not tested.",
    scope: Scope::AcrossRegimes(scale),
    context: scale_line,
};

/// A fitted metric: (name in the report, frame, column, the paper's value and its source).
const METRICS: &[(&str, From, &str, Option<(f64, &str)>)] = &[
    (
        "drift per update, activated expert slots",
        From::Updates,
        "drift_expert_frac",
        Some((0.10, "GSPO paper: ~10% of activated experts")),
    ),
    (
        "drift per update, (token, layer) routers",
        From::Updates,
        "drift_router_frac",
        Some((0.10, "R3 paper: ~10% of routers")),
    ),
    (
        "bf16 engine vs trainer, (token, layer) routers that differ",
        From::Steps,
        "mismatch_router_frac",
        Some((0.10, "R3 paper: ~10% of routers")),
    ),
    (
        "bf16 engine vs trainer, k3 KL per token",
        From::Steps,
        "mismatch_kl_k3",
        Some((1.5e-3, "R3 paper: MoE 1.5e-3")),
    ),
];

fn describe(what: String) -> Endpoint {
    Endpoint::new(
        Claim::ScaleDrift,
        "all",
        what,
        Scale::Difference,
        Claimed::Describe,
    )
}

/// A described per-seed prediction on the log scale (ln of the value against 1 per seed), so
/// its interval is geometric and never below 0.
fn describe_log(what: String, v: &BTreeMap<i64, f64>) -> Endpoint {
    Endpoint::new(
        Claim::ScaleDrift,
        "all",
        what,
        Scale::LogRatio,
        Claimed::Describe,
    )
    .maps(&v.keys().map(|s| (*s, 1.0)).collect(), v)
}

/// The fitting configurations without those at the widest d_model (the held-out ones kept):
/// how much the width exponent hangs on its last point.
fn without_widest(p: &Points) -> (f64, Points) {
    let widest = (p.iter().filter(|x| !x.2))
        .map(|x| x.1.d_model)
        .fold(f64::NAN, f64::max);
    let kept = (p.iter().filter(|x| x.2 || x.1.d_model != widest))
        .cloned()
        .collect();
    (widest, kept)
}

/// The configuration the gap is measured from: the first fitting regime (the spec's centre).
fn centre(regs: &[Regime]) -> Option<Factors> {
    regs.iter().find(|r| !r.holdout).and_then(|r| r.factors)
}

fn scale(regs: &[Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    let Some(c) = centre(regs) else {
        return out;
    };
    let at_lr4 = Factors { lr: 1e-4, ..PAPER };
    let mut routers_at_paper: BTreeMap<i64, f64> = BTreeMap::new();
    for (what, from, col, paper) in METRICS {
        let Ok(p) = points(regs, *from, col) else {
            continue;
        };
        let fit = fits(&p);
        if fit.is_empty() {
            continue;
        }
        let per = |f: &dyn Fn(&[f64; P]) -> f64| -> BTreeMap<i64, f64> {
            fit.iter().map(|(s, b)| (*s, f(b))).collect()
        };
        for (i, name) in FACTORS.iter().enumerate() {
            out.push(describe(format!("{what}: exponent on {name}")).one(&per(&|b| b[i + 1])));
        }
        if *col == "drift_expert_frac" {
            let (widest, kept) = without_widest(&p);
            let refit = fits(&kept);
            if !refit.is_empty() {
                let b: BTreeMap<i64, f64> = refit.iter().map(|(s, b)| (*s, b[2])).collect();
                out.push(
                    describe(format!(
                        "{what}: exponent on d_model, fitted without the widest configuration (d_model {widest})"
                    ))
                    .one(&b),
                );
            }
        }
        let err = holdout_error(&p, &fit);
        if !err.is_empty() {
            out.push(
                describe(format!(
                    "{what}: held-out error, mean over held-out configurations of abs(ln predicted − ln measured)"
                ))
                .one(&err),
            );
        }
        let mut e = describe_log(
            format!(
                "{what}: predicted at the paper's model ({}), ln",
                PAPER.describe()
            ),
            &per(&|b| PAPER.predict(b)),
        );
        if let Some((v, src)) = paper {
            e = e.reference(v.ln(), src);
        }
        out.push(e);
        out.push(describe_log(
            format!("{what}: predicted at the paper's model with lr 1e-4, ln"),
            &per(&|b| at_lr4.predict(b)),
        ));
        if *col == "drift_router_frac" {
            routers_at_paper = per(&|b| PAPER.predict(b));
        }
        if *col == "drift_expert_frac"
            && let Some((v, _)) = paper
        {
            // Each factor's term from the centre to the paper's model, as a share of the gap.
            let (rc, rp) = (c.row(), PAPER.row());
            for (i, name) in FACTORS.iter().enumerate() {
                out.push(
                    describe(format!(
                        "{what}: share of the gap ln(paper / centre) closed by {name}"
                    ))
                    .one(&per(&|b| {
                        let gap = v.ln() - c.predict(b).ln();
                        b[i + 1] * (rp[i + 1] - rc[i + 1]) / gap
                    })),
                );
            }
        }
    }
    if !routers_at_paper.is_empty() {
        let tokens: BTreeMap<i64, f64> = routers_at_paper
            .iter()
            .map(|(s, r)| (*s, tokens_from_routers(*r, PAPER.layers)))
            .collect();
        out.push(
            describe(
                "drift per update, tokens with any layer changed: 1 − (1 − routers)^48 from the predicted routers".into(),
            )
            .reference(0.94, "R3 paper: 94% of tokens")
            .one(&tokens),
        );
    }
    out
}

/// (o): a configuration's measured values, and the tokens its routers imply.
fn scale_line(md: &mut String, r: &Regime) -> Result<()> {
    let Some(f) = r.factors else {
        return Ok(());
    };
    let mean = |from: From, col: &str| -> Result<Option<f64>> {
        let p = points(std::slice::from_ref(r), from, col)?;
        let v: Vec<f64> = p.iter().flat_map(|x| x.3.values().copied()).collect();
        Ok((!v.is_empty()).then(|| crate::util::moments::mean(&v)))
    };
    let pct = |x: Option<f64>| x.map_or("n/a".into(), |v| format!("{:.3}%", 100.0 * v));
    let routers = mean(From::Updates, "drift_router_frac")?;
    writeln!(
        md,
        "- `{}` ({}{}): per update {} of slots, {} of routers, {} of tokens (independent layers would give {}); bf16 engine vs trainer {} of routers, k3 KL {}.",
        r.name,
        f.describe(),
        if r.holdout { "; held out" } else { "" },
        pct(mean(From::Updates, "drift_expert_frac")?),
        pct(routers),
        pct(mean(From::Updates, "drift_token_frac")?),
        pct(routers.map(|x| tokens_from_routers(x, f.layers))),
        pct(mean(From::Steps, "mismatch_router_frac")?),
        mean(From::Steps, "mismatch_kl_k3")?.map_or("n/a".into(), |v| format!("{v:.2e}")),
    )?;
    Ok(())
}
