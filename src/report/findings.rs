//! The findings section: for each published claim, its endpoints ([`super::endpoints`]) per
//! regime with paired statistics over seeds, Holm-adjusted verdicts, and the arm means that
//! put them in context. Computed from the Parquet frames and `config.json` only. The arms a
//! claim compares are found by their declared role, else by what they are (objective, routing
//! mode, FFN, no knobs of their own; [`super::roles`]), never by their names; a claim whose arms
//! the run does not have is reported as not measured.

use super::claims::{CONTROL_METRICS, def};
use super::endpoints::{
    ALPHA, Claimed, Endpoint, REWARD_MARGIN, Verdict, evaluate, num, p_text, verdict_text,
};
use super::load::RunFrames;
use super::paired::{FlipMethod, Scale};
pub use super::regime::{Regime, regimes_of};
use super::run_info::RunInfo;
use super::sign_flip::DRAWS;
use crate::experiment::Claim;
use anyhow::Result;
use std::fmt::Write as _;

/// Every endpoint of the run, tested, adjusted and given its verdict.
pub fn endpoints(regs: &[Regime]) -> Result<Vec<Endpoint>> {
    let mut eps = super::claims::declare(regs)?;
    // A claim the spec declares secondary is described: no verdict, outside Holm's family.
    if let Some(r) = regs.first() {
        for e in eps.iter_mut().filter(|e| r.secondary.contains(&e.claim)) {
            e.primary = false;
        }
    }
    evaluate(&mut eps, regs.first().is_some_and(|r| r.reversal));
    Ok(eps)
}

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
                flip_p_text(e, e.p, &sampled_floor())
            },
            flip_p_text(e, e.p_holm, "sampled"),
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

/// What a sampled sign-flip p says of itself.
fn sampled_floor() -> String {
    format!(
        "sampled, floor 1/(draws+1) = {}",
        p_text(1.0 / (DRAWS + 1) as f64)
    )
}

/// A p-value of `e`'s sign-flip tests, with `mark` when they were sampled.
fn flip_p_text(e: &Endpoint, p: f64, mark: &str) -> String {
    if e.p_method == Some(FlipMethod::Sampled) && p.is_finite() {
        format!("{} ({mark})", p_text(p))
    } else {
        p_text(p)
    }
}

/// How this report's p-values were computed, in words: each method its tests used.
fn methods_used(eps: &[Endpoint]) -> String {
    let used = |m: FlipMethod| eps.iter().any(|e| e.p_method == Some(m));
    let mut ways = Vec::new();
    if used(FlipMethod::Enumerated) {
        ways.push(
            "computed exactly by enumerating all 2ⁿ sign patterns (up to 20 seeds)".to_string(),
        );
    }
    if used(FlipMethod::Lattice) {
        ways.push(
            "computed exactly, beyond 20 seeds, from the distribution of the signed sum counted by dynamic programming over the lattice the differences lie on (an accuracy on n prompts moves in steps of 1/n; a margin δ shifts the values onto a finer lattice)".to_string(),
        );
    }
    if used(FlipMethod::Sampled) {
        ways.push(format!(
            "sampled from {DRAWS} random sign patterns, beyond 20 seeds where the differences lie on no lattice ({}; marked so in the tables)",
            sampled_floor()
        ));
    }
    match ways.len() {
        0 => String::new(),
        1 => format!("Every p-value here is {}. ", ways[0]),
        n => format!(
            "The p-values here are {}, or {}, as each endpoint's differences allow. ",
            ways[..n - 1].join("; "),
            ways[n - 1]
        ),
    }
}

/// Which p Holm adjusts here, and what an effect against the claim reads as.
fn sidedness(eps: &[Endpoint], reversal: bool) -> String {
    let prim = |c: &dyn Fn(&Endpoint) -> bool| eps.iter().any(|e| e.primary && c(e));
    if reversal && prim(&|e| e.two_sided) {
        let one_sided = if prim(&|e| e.claimed == Claimed::NotWorse) {
            " Non-inferiority endpoints have no opposite direction: their p_Holm adjusts the one-sided p."
        } else {
            ""
        };
        format!(
            "This spec declares `reversal = true`, so every primary test with a direction is two-sided: p_Holm adjusts 2·min(p, p against), the smaller of the two one-sided p doubled (its verdict says \"two-sided\"), in the same family, and a significant effect against the claim is **reversed**.{one_sided} "
        )
    } else if reversal {
        "This spec declares `reversal = true`, but no primary endpoint here has an opposite direction to test: p_Holm adjusts the one-sided p in the claimed direction. ".into()
    } else {
        "This spec does not declare `reversal`, so p_Holm adjusts the one-sided p in the claimed direction, and a significant effect against the claim reads inconclusive, pointing away. ".into()
    }
}

/// How many of the map's cells could separate a drop of δ: per (l) quantity, the cells whose
/// 95% t interval is at most δ on each side, and the median half-width.
fn resolution(md: &mut String, eps: &[&Endpoint]) -> Result<()> {
    let mut parts = Vec::new();
    for (what, _) in CONTROL_METRICS {
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
    // As Holm's family in `evaluate`: the primary endpoints with a test (two seeds or more).
    let m = eps.iter().filter(|e| e.primary && e.p.is_finite()).count();
    let seeds = eps
        .iter()
        .filter_map(|e| e.est.as_ref().map(|x| x.n))
        .max()
        .unwrap_or(0);
    let how = methods_used(eps);
    let ni = if eps.iter().any(|e| e.claimed == Claimed::NotWorse) {
        "for a non-inferiority claim, of d > −δ; "
    } else {
        ""
    };
    let holm = if m == 0 {
        "No endpoint here is primary, so none gets a verdict. ".to_string()
    } else {
        format!(
            "Holm's step-down adjustment runs over the report's {m} primary endpoints at a family-wise α = {ALPHA}. A claim **holds** when its adjusted p is below α; it **does not hold** only on positive evidence — both one-sided tests of |mean| < δ (TOST, Holm over the same {m}), or, for (c), worse by more than δ; otherwise it is **inconclusive at n seeds**, with the seeds a one-sided test at α/{m} would need for 80% power at the observed d_z (at least log₂({m}/α) for the permutation test to reach that level at all), and the seeds TOST would need toward equivalence where the estimate lies inside ±δ. A claim that holds while its interval still includes effects smaller than δ is marked **below δ**. {}Arms with bitwise-identical trajectories are compared outside the family, and right-censored values (an arm that never reached a target) are tested as lower bounds. ",
            sidedness(eps, regs.first().is_some_and(|r| r.reversal))
        )
    };
    writeln!(md, "## Findings: the published claims, measured here\n")?;
    writeln!(
        md,
        "Each claim is tested on endpoints declared in code before the run (`src/report/claims/`, one file per claim family): which arms, which per-cell value (per-update metrics are averaged within their cell first), which direction the claim points, and a margin δ below which a difference does not matter (0.05 of reward; a factor of 1.5 on log-ratios; 0.25 on length exponents; ln 2 for the token/sequence variance ratio). Arms share seeds (the same cold start and first rollout), so every comparison is paired: the per-seed difference b − a (or ln b − ln a for clip fractions, variances and KLs), its mean with a 95% Student-t and a 95% seed-bootstrap interval, the effect size d_z = mean / sd, and a paired sign-flip permutation test whose p (the column \"p (one-sided)\") is one-sided in the claimed direction ({ni}with n seeds its smallest p is 1/2ⁿ). {how}{holm}Up to {seeds} seeds per endpoint here. Secondary endpoints are shown with unadjusted p-values and no verdict.\n"
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
    for claim in Claim::ALL.iter().copied().filter(|c| declared.contains(c)) {
        let def = def(claim);
        writeln!(md, "\n{}\n", def.heading)?;
        let mine: Vec<&Endpoint> = eps.iter().filter(|e| e.claim == claim).collect();
        if mine.is_empty() {
            writeln!(
                md,
                "No endpoint: no regime has the arms this claim compares.\n"
            )?;
        } else {
            claim_table(&mut md, &mine)?;
            writeln!(md)?;
            if claim == Claim::Control {
                resolution(&mut md, &mine)?;
            }
        }
        for r in regs {
            (def.context)(&mut md, r)?;
        }
    }
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::paired::paired;

    fn ep(diffs: &[f64]) -> Endpoint {
        let mut e = Endpoint::new(
            Claim::DriftShare,
            "r",
            "x".into(),
            Scale::Difference,
            Claimed::Greater,
        );
        e.est = paired(&vec![0.0; diffs.len()], diffs, Scale::Difference);
        e
    }

    /// The methods text names each method the tests used, and a sampled p says so with its
    /// floor where it is printed; an exact one is printed bare.
    #[test]
    fn the_methods_text_and_the_tables_say_how_each_p_was_computed() {
        // 30 seeds on the 1/256 lattice, and 30 on none (square roots).
        let exact: Vec<f64> = (0..30).map(|i| (20 + i % 7) as f64 / 256.0).collect();
        let off: Vec<f64> = (0..30).map(|i| (2.0 + i as f64).sqrt() / 10.0).collect();
        let mut eps = vec![ep(&exact), ep(&off), ep(&exact[..10])];
        evaluate(&mut eps, true);
        assert_eq!(eps[0].p_method, Some(FlipMethod::Lattice));
        assert_eq!(eps[1].p_method, Some(FlipMethod::Sampled));
        assert_eq!(eps[2].p_method, Some(FlipMethod::Enumerated));
        // Every value positive: the exact p is 1/2^30; the sampled one stops at its floor.
        assert_eq!(eps[0].p, 1.0 / 2f64.powi(30));
        assert_eq!(eps[1].p, 1.0 / (DRAWS + 1) as f64);
        let text = methods_used(&eps);
        for part in [
            "enumerating all 2ⁿ",
            "dynamic programming",
            "sampled, floor 1/(draws+1) = 5.0e-6",
        ] {
            assert!(text.contains(part), "{part} not in {text}");
        }
        assert_eq!(flip_p_text(&eps[0], eps[0].p, "sampled"), p_text(eps[0].p));
        assert_eq!(
            flip_p_text(&eps[1], eps[1].p_holm, "sampled"),
            format!("{} (sampled)", p_text(eps[1].p_holm))
        );
        assert!(sidedness(&eps, true).contains("2·min(p, p against)"));
        assert!(sidedness(&eps, false).contains("one-sided p in the claimed direction"));
    }
}
