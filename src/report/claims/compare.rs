//! How claims compare arms: the regime's data a claim reads, arms named in markdown, paired
//! reward gains (identical arms kept out of Holm's family), per-seed means over distinct arms,
//! and the context lines' shared pieces.

use crate::experiment::{Claim, Role};
use crate::report::endpoints::{Claimed, Endpoint};
use crate::report::fmt::fmt_ci;
use crate::report::load::RunFrames;
use crate::report::paired::Scale;
use crate::report::regime::Regime;
use crate::report::roles::Arms;
use crate::report::stats::MeanCi;
use crate::report::summary::ArmSummary;
use anyhow::Result;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub use crate::report::endpoints::seeds_of;

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
    pub claims: &'a [Claim],
    /// The spec names a control regime for this one (a drift regime of a paired design).
    pub has_control: bool,
    /// Claim (j)'s target (the spec's `compute_target`).
    pub compute_target: crate::experiment::ComputeTarget,
}

/// Per seed, the mean over the regime's distinct arms of a per-cell value.
pub(crate) fn over_distinct_arms(
    r: &RegimeData,
    cells: &BTreeMap<(String, i64), f64>,
) -> BTreeMap<i64, f64> {
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
pub(crate) fn twins(same: &[Vec<String>], a: &str, b: &str) -> bool {
    same.iter()
        .any(|g| g.iter().any(|x| x == a) && g.iter().any(|x| x == b))
}

pub(crate) fn name(a: &ArmSummary) -> String {
    format!("`{}`", a.name)
}

/// The final reward of `b` minus `a`, seed by seed, under claim `claim` of regime `r`.
pub(crate) fn reward_gain(
    claim: Claim,
    r: &RegimeData,
    a: &ArmSummary,
    b: &ArmSummary,
    claimed: Claimed,
) -> Endpoint {
    Endpoint::new(
        claim,
        r.name,
        format!("final reward, {} − {}", name(b), name(a)),
        Scale::Difference,
        claimed,
    )
    .pair(a, b, "final_reward")
}

/// Every paired endpoint of arms that ran bitwise-identical trajectories in this regime is
/// taken out of Holm's family with a note: its difference is 0 by construction and would
/// pass TOST on every seed count. The one rule for every claim.
pub(crate) fn set_aside_twins(same: &[Vec<String>], eps: &mut [Endpoint]) {
    for e in eps {
        let Some((a, b)) = &e.arms else { continue };
        if a == b || !twins(same, a, b) || !e.primary {
            continue;
        }
        e.primary = false;
        e.note = Some(format!(
            "`{b}` and `{a}` ran bitwise-identical trajectories here (0 by construction): not \
             tested, outside Holm's family"
        ));
    }
}

pub(crate) fn ci(m: &MeanCi) -> String {
    fmt_ci(m, "n/a")
}

/// The line of a claim whose arms this regime does not have: `needs` says which, and the
/// arms that would fit one of `roles` but were passed over (knobs of their own, no declared
/// role) are named.
pub(crate) fn not_measured(md: &mut String, r: &Regime, needs: &str, roles: &[Role]) -> Result<()> {
    let passed: Vec<String> = roles
        .iter()
        .flat_map(|&role| {
            r.arms
                .passed_over(role)
                .into_iter()
                .map(move |a| format!("`{}` for `{role}`", a.name))
        })
        .collect();
    let passed = if passed.is_empty() {
        String::new()
    } else {
        format!(
            "; passed over, as it sets knobs of its own and declares no `role`: {}",
            passed.join(", ")
        )
    };
    writeln!(md, "- `{}`: not measured (needs {needs}{passed}).", r.name)?;
    Ok(())
}
