//! The findings section: for each published claim, its endpoints ([`super::endpoints`]) per
//! regime with paired statistics over seeds, Holm-adjusted verdicts, and the arm means that
//! put them in context. Computed from the Parquet frames and `config.json` only. The arms a
//! claim compares are found by what they are (objective, routing mode, FFN, default settings),
//! never by their names; a claim whose arms the run does not have is reported as not measured.

use super::context::{
    compute_line, control_line, depth_line, drift_share, extreme_share, gspo_clips, gspo_stable,
    gvpo_reward, mismatch, ratio_variance, replay_stability, tis_reward,
};
use super::endpoints::{
    ALPHA, Claimed, Endpoint, REWARD_MARGIN, RegimeData, Verdict, declare, evaluate, num, p_text,
    verdict_text,
};
use super::load::RunFrames;
use super::paired::Scale;
pub use super::regime::{Regime, regimes_of};
use super::run_info::RunInfo;
use anyhow::Result;
use std::fmt::Write as _;

/// Every endpoint of the run, tested, adjusted and given its verdict.
pub fn endpoints(regs: &[Regime]) -> Result<Vec<Endpoint>> {
    let mut eps = Vec::new();
    for r in regs {
        eps.extend(declare(&RegimeData {
            name: &r.name,
            arms: &r.arms,
            frames: &r.frames,
            same: &r.same,
            mismatch: r.mismatch,
            claims: &r.claims,
        })?);
    }
    if regs.first().is_some_and(|r| r.claims.contains(&'k')) {
        eps.extend(super::endpoints::depth_endpoints(regs));
    }
    if regs.first().is_some_and(|r| r.claims.contains(&'l')) {
        eps.extend(super::endpoints::control_endpoints(regs));
    }
    // A claim the spec declares secondary is described: no verdict, outside Holm's family.
    if let Some(r) = regs.first() {
        for e in eps.iter_mut().filter(|e| r.secondary.contains(&e.claim)) {
            e.primary = false;
        }
    }
    evaluate(&mut eps, regs.first().is_some_and(|r| r.reversal));
    Ok(eps)
}

/// The claims: letter, heading, and the function that writes a regime's context line.
type Claim = (char, &'static str, fn(&mut String, &Regime) -> Result<()>);

const CLAIMS: [Claim; 12] = [
    (
        'a',
        "**(a) Share of activated experts that change per update** (GSPO paper: ~10% on a 48-layer MoE).",
        drift_share,
    ),
    (
        'b',
        "**(b) GRPO without replay is less stable than with R2/R3** (GSPO paper: without replay the reward decays).",
        replay_stability,
    ),
    (
        'c',
        "**(c) GSPO is stable without replay**: its final reward is not below GRPO with R2 by more than δ.",
        gspo_stable,
    ),
    (
        'd',
        "**(d) GSPO clips far more tokens than GRPO** (paper: 0.15 vs 0.0013).",
        gspo_clips,
    ),
    (
        'e',
        "**(e) Token-level ratio variance exceeds the sequence-level one and grows with response length** (GSPO §4).",
        ratio_variance,
    ),
    (
        'f',
        "**(f) Train–inference mismatch is larger for MoE than for the dense control, and R3 reduces its routing part** (R3 paper: k3 KL 1.5e-3 MoE vs 6.4e-4 dense, 7.5e-4 with R3).",
        mismatch,
    ),
    (
        'g',
        "**(g) The share of tokens whose engine/trainer probability ratio is beyond 2 is higher for MoE than dense, and R3 cuts it** (R3 paper: ~10× each; compared as ln((b + ε)/(a + ε)), ε = 1e-5 ≈ one token of a cell).",
        extreme_share,
    ),
    (
        'h',
        "**(h) GVPO trains at least as well as GRPO, on- and off-policy** (GVPO paper: AIME24 20.7 vs 14.8; robust to off-policy samples).",
        gvpo_reward,
    ),
    (
        'i',
        "**(i) Truncated importance sampling against the rollout engine helps GRPO under a mismatch** (TIS, cap 2).",
        tis_reward,
    ),
    (
        'j',
        "**(j) GSPO reaches GRPO + R2's reward with less training compute** (GSPO Fig. 1: the same reward with ~60% of the compute; compute = response tokens trained, the target 90% of R2's reward-EMA gain in the same seed).",
        compute_line,
    ),
    (
        'k',
        "**(k) More experts change per update in deeper models** (GSPO paper: ~10% per update on a 48-layer MoE): per arm and seed, drift ∝ n_layers^b fitted over the depths (least squares on logs), its exponent b and its value at 48 layers.",
        depth_line,
    ),
    (
        'l',
        "**(l) Where training breaks: the paired change of every arm's final eval accuracy (greedy, held-out prompts; the map's cells) and final training reward against its regime's control** (the stability map; described, with 95% intervals read at δ = 0.05).",
        control_line,
    ),
];

/// The estimate and its 95% t interval; log-ratios also as a factor.
pub fn estimate_text(e: &Endpoint) -> String {
    let Some(x) = &e.est else {
        return "n/a".into();
    };
    let base = if x.n >= 2 {
        format!("{} [{}, {}]", num(x.mean), num(x.t_ci.0), num(x.t_ci.1))
    } else {
        num(x.mean)
    };
    match e.scale {
        Scale::LogRatio => format!("{base} (×{})", num(x.mean.exp())),
        Scale::Difference => base,
    }
}

fn short(v: &Verdict) -> &'static str {
    match v {
        Verdict::Holds {
            below_margin: false,
        } => "holds",
        Verdict::Holds { below_margin: true } => "holds (below δ)",
        Verdict::DoesNotHold => "does not hold",
        Verdict::Reversed => "reversed",
        Verdict::Inconclusive { .. } => "inconclusive",
        Verdict::Secondary => "–",
    }
}

/// The verdict table: every primary endpoint, one line each.
fn verdict_table(md: &mut String, eps: &[Endpoint]) -> Result<()> {
    writeln!(
        md,
        "| claim | regime | endpoint | seeds | estimate [95% CI] | verdict |\n|---|---|---|---|---|---|"
    )?;
    for e in eps.iter().filter(|e| e.primary) {
        writeln!(
            md,
            "| ({}) | {} | {} | {} | {} | {} |",
            e.claim,
            e.regime,
            e.what,
            e.est.as_ref().map_or(0, |x| x.n),
            estimate_text(e),
            short(&e.verdict)
        )?;
    }
    Ok(())
}

/// The full statistics of one claim's endpoints.
fn claim_table(md: &mut String, eps: &[&Endpoint]) -> Result<()> {
    writeln!(
        md,
        "| regime | endpoint | seeds | estimate [95% t CI] | 95% bootstrap CI | d_z | p (one-sided) | p_Holm | δ | paper | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for e in eps {
        let (n, boot, dz) = e.est.as_ref().map_or((0, "n/a".into(), f64::NAN), |x| {
            (
                x.n,
                if x.n >= 2 {
                    format!("[{}, {}]", num(x.boot_ci.0), num(x.boot_ci.1))
                } else {
                    "n/a".into()
                },
                x.dz,
            )
        });
        let paper = e
            .reference
            .as_ref()
            .map_or("–".into(), |(v, src)| format!("{} ({src})", num(*v)));
        writeln!(
            md,
            "| {} | {} | {n} | {} | {boot} | {} | {} | {} | {} | {paper} | {} |",
            e.regime,
            e.what,
            estimate_text(e),
            num(dz),
            if e.claimed == Claimed::Describe {
                "–".into()
            } else {
                p_text(e.p)
            },
            p_text(e.p_holm),
            if e.claimed == Claimed::Describe {
                "–".into()
            } else {
                num(e.margin)
            },
            verdict_text(e)
        )?;
    }
    Ok(())
}

/// How many of the map's cells could separate a drop of δ: per (l) quantity, the cells whose
/// 95% t interval is at most δ on each side, and the median half-width.
fn resolution(md: &mut String, eps: &[&Endpoint]) -> Result<()> {
    let mut parts = Vec::new();
    for (what, _) in super::endpoints::CONTROL_METRICS {
        let mut half: Vec<f64> = eps
            .iter()
            .filter(|e| e.what.starts_with(&format!("{what}, ")))
            .filter_map(|e| e.est.as_ref())
            .filter(|x| x.n >= 2)
            .map(|x| (x.t_ci.1 - x.t_ci.0) / 2.0)
            .collect();
        if half.is_empty() {
            continue;
        }
        half.sort_by(f64::total_cmp);
        let narrow = half.iter().filter(|h| **h <= REWARD_MARGIN).count();
        parts.push(format!(
            "{what} {narrow} of {} (median half-width {}, widest {})",
            half.len(),
            num((half[(half.len() - 1) / 2] + half[half.len() / 2]) / 2.0),
            num(half[half.len() - 1])
        ));
    }
    if !parts.is_empty() {
        writeln!(
            md,
            "Cells whose 95% t interval is at most δ = {} on each side, so that an observed drop of δ would exclude no change: {}.\n",
            num(REWARD_MARGIN),
            parts.join("; ")
        )?;
    }
    Ok(())
}

/// The findings section of a run's frames (what [`findings_md`] writes, endpoints included).
pub fn findings(f: &RunFrames, info: &RunInfo) -> Result<String> {
    let regs = regimes_of(f, info)?;
    let eps = endpoints(&regs)?;
    findings_md(&regs, &eps)
}

/// Markdown of the findings (a)–(f): how to read them, the verdict table, and per claim its
/// endpoints' statistics and the arm means behind them.
pub fn findings_md(regs: &[Regime], eps: &[Endpoint]) -> Result<String> {
    let mut md = String::new();
    let m = eps.iter().filter(|e| e.primary).count();
    let seeds = eps
        .iter()
        .filter_map(|e| e.est.as_ref().map(|x| x.n))
        .max()
        .unwrap_or(0);
    let holm = if m == 0 {
        "No endpoint here is primary, so none gets a verdict. ".to_string()
    } else {
        format!(
            "Holm's step-down adjustment runs over the report's {m} primary endpoints at a family-wise α = {ALPHA}. A claim **holds** when its adjusted p is below α; it **does not hold** only on positive evidence — both one-sided tests of |mean| < δ (TOST, Holm over the same {m}), or, for (c), worse by more than δ; otherwise it is **inconclusive at n seeds**, with the seeds a one-sided test at α/{m} would need for 80% power at the observed d_z (at least log₂({m}/α) for the permutation test to reach that level at all). "
        )
    };
    writeln!(md, "## Findings: the published claims, measured here\n")?;
    writeln!(
        md,
        "Each claim is tested on endpoints declared in code before the run (`src/report/endpoints/declare.rs`): which arms, which per-cell value (per-update metrics are averaged within their cell first), which direction the claim points, and a margin δ below which a difference does not matter (0.05 of reward; a factor of 1.5 on log-ratios; 0.25 on length exponents; ln 2 for the token/sequence variance ratio). Arms share seeds (the same cold start and first rollout), so every comparison is paired: the per-seed difference b − a (or ln b − ln a for clip fractions, variances and KLs), its mean with a 95% Student-t and a 95% seed-bootstrap interval, the effect size d_z = mean / sd, and an exact one-sided sign-flip permutation test in the claimed direction (with n seeds its smallest p is 1/2ⁿ). {holm}Up to {seeds} seeds per endpoint here. Secondary endpoints are shown with unadjusted p-values and no verdict.\n"
    )?;
    writeln!(md, "### Verdicts\n")?;
    if m == 0 {
        writeln!(
            md,
            "No claim is tested here: every endpoint of this run is described (secondary or descriptive), so there is no verdict and no Holm family."
        )?;
    } else {
        verdict_table(&mut md, eps)?;
    }
    let declared = regs.first().map_or(&[][..], |r| r.claims.as_slice());
    for (letter, heading, line) in CLAIMS {
        if !declared.contains(&letter) {
            continue;
        }
        writeln!(md, "\n{heading}\n")?;
        let mine: Vec<&Endpoint> = eps.iter().filter(|e| e.claim == letter).collect();
        if mine.is_empty() {
            writeln!(
                md,
                "No endpoint: no regime has the arms this claim compares.\n"
            )?;
        } else {
            claim_table(&mut md, &mine)?;
            writeln!(md)?;
            if letter == 'l' {
                resolution(&mut md, &mine)?;
            }
        }
        for r in regs {
            line(&mut md, r)?;
        }
    }
    Ok(md)
}
