//! Claim (r): router precision in the rollout engine. In every regime with a control (a bf16
//! router in a bf16 engine against the same engine with an fp32 router, the same response
//! lengths), GRPO without replay: the engine–trainer route mismatch (`mismatch_route_frac`,
//! ln regime / control) and mismatch KL (`mismatch_kl_k3`, ln) are higher with the bf16 router,
//! and its final greedy eval accuracy lower (regime − control); R3's arm × precision
//! interaction, (R3 − GRPO) in the regime minus in the control, says whether replaying the
//! engine's routes makes the router's precision irrelevant (positive: R3 recovers what the
//! bf16 router costs GRPO). The sources: sglang issue #38695 (GLM-5.2, a bf16 router GEMM
//! output: 66.8% against 79.4% SWE-bench Verified with fp32), local-inference-lab/vllm #652
//! (104 of 4096 expert choices against an fp64 reference with bf16 router scores, 1 after),
//! vLLM #54048 (batch-size-dependent choices through bf16 logits), prime-rl PR #2952 (fp32
//! routing by default).

use super::claim_def::{ClaimDef, Scope};
use super::compare::{ci, name};
use crate::experiment::Claim;
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::collapses;
use crate::rl::RoutingMode;
use anyhow::Result;
use std::fmt::Write as _;

/// (r)
pub(super) const PRECISION: ClaimDef = ClaimDef {
    heading: "**(r) Router precision in the rollout engine: a bf16 router (weights, logits or both) raises the engine–trainer route mismatch and mismatch KL of GRPO on a MoE and lowers its final accuracy against an fp32 router in the same bf16 engine, and Routing Replay R3 removes that cost** (sglang #38695, local-inference-lab/vllm #652, vLLM #54048, prime-rl #2952; the regime is the bf16 router, its control the fp32 router; the interaction is R3's gain over GRPO with the bf16 router minus its gain with the fp32 router).",
    scope: Scope::AcrossRegimes(precision),
    context: precision_line,
};

/// The primary per-regime comparisons of GRPO without replay: (what, metric, scale, claimed).
const GRPO_ENDPOINTS: [(&str, &str, Scale, Claimed); 3] = [
    (
        "engine–trainer route mismatch (slots)",
        "mismatch_route_frac",
        Scale::LogRatio,
        Claimed::Greater,
    ),
    (
        "mismatch KL (k3)",
        "mismatch_kl_k3",
        Scale::LogRatio,
        Claimed::Greater,
    ),
    (
        "final greedy eval accuracy",
        "final_eval",
        Scale::Difference,
        Claimed::Less,
    ),
];

/// (r) per regime with a control; the module docs say what each endpoint compares.
pub(super) fn precision(regs: &[Regime]) -> Vec<Endpoint> {
    let mut out = Vec::new();
    for (r, c, g, gc) in super::control::with_grpo_controls(regs) {
        for (what, metric, scale, claimed) in GRPO_ENDPOINTS {
            out.push(
                Endpoint::new(
                    Claim::RouterPrecision,
                    &r.name,
                    format!("{what}, {} in `{}` vs in `{}`", name(g), r.name, c.name),
                    scale,
                    claimed,
                )
                .pair(gc, g, metric),
            );
        }
        let (Some(r3), Some(r3c)) = (r.arms.grpo(RoutingMode::R3), c.arms.grpo(RoutingMode::R3))
        else {
            continue;
        };
        out.push(super::organic::interaction_endpoint(
            Claim::RouterPrecision,
            "precision",
            (r, c),
            (r3, g),
            (r3c, gc),
        ));
    }
    out
}

/// The mean over an arm's step rows of a steps-frame column (`None` where the frames lack it
/// or hold no value).
fn step_mean(r: &Regime, arm: &str, col: &str) -> Option<f64> {
    use crate::metrics::frames::{f64_col, str_col};
    let df = &r.frames.steps;
    let (arms, v) = (str_col(df, "arm").ok()?, f64_col(df, col).ok()?);
    let x: Vec<f64> = (arms.iter().zip(v))
        .filter(|(a, _)| *a == arm)
        .filter_map(|(_, v)| v)
        .collect();
    (!x.is_empty()).then(|| x.iter().sum::<f64>() / x.len() as f64)
}

/// (r): the engine router's measured disagreement with an f64 router (`router_disagree_frac`,
/// and the near-tie flips), per arm, and each arm's collapsed cells.
pub(super) fn precision_line(md: &mut String, r: &Regime) -> Result<()> {
    let pct = |v: Option<f64>| v.map_or("–".to_string(), |x| format!("{:.3}%", 100.0 * x));
    let parts: Vec<String> = r
        .arms
        .arms
        .iter()
        .map(|(a, _)| {
            format!(
                "`{}`: engine router vs f64 {} of expert choices, near-tie tokens {}, \
                 near-tie flips {}, collapsed cells {}",
                a.name,
                pct(step_mean(r, &a.name, "router_disagree_frac")),
                pct(step_mean(r, &a.name, "router_bf16_tie_frac")),
                pct(step_mean(r, &a.name, "router_bf16_tie_flip_frac")),
                collapses(a)
            )
        })
        .collect();
    let against = r
        .control
        .as_ref()
        .map_or(" (no control of its own)".to_string(), |c| {
            format!(" against `{c}`")
        });
    let route = r
        .arms
        .grpo(RoutingMode::Native)
        .map(|g| ci(g.metrics.get("mismatch_route_frac")))
        .unwrap_or_default();
    writeln!(
        md,
        "- `{}`{against}: GRPO's route mismatch {route}; {}.",
        r.name,
        parts.join("; ")
    )?;
    Ok(())
}
