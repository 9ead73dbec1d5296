//! The claims the report tests, as one registry. Each claim has a heading, its endpoints
//! (declared here in code, before any run is read) and the context line written under its
//! table. There is one file per claim family, and [`def`] is the one `match` from a [`Claim`]
//! to its definition. Adding a claim takes its row in the `claims!` registry
//! (`src/experiment/claim.rs`: variant, letter, what it claims), a [`ClaimDef`] constant in its
//! family's file and its arm in [`def`] (which the compiler asks for).

mod claim_def;
mod compare;
mod control;
mod drift;
mod mismatch;
mod objectives;
mod opd;
mod organic;
mod precision;
mod ratios;
mod replay;
mod scale;
#[cfg(test)]
mod tests;
mod width;

pub use claim_def::{ClaimDef, Scope};
pub use compare::RegimeData;
pub use control::CONTROL_METRICS;
pub use opd::{DRIFT_UNITS, seed_means, teacher_eval};

use crate::experiment::Claim;
use crate::report::endpoints::Endpoint;
use crate::report::regime::Regime;
use anyhow::Result;

/// The definition of a claim.
pub fn def(c: Claim) -> ClaimDef {
    match c {
        Claim::DriftShare => drift::SHARE,
        Claim::Replay => replay::REPLAY,
        Claim::GspoStable => objectives::GSPO_STABLE,
        Claim::GspoClips => ratios::CLIPS,
        Claim::RatioVariance => ratios::VARIANCE,
        Claim::Mismatch => mismatch::KL,
        Claim::ExtremeShare => mismatch::EXTREME,
        Claim::GvpoReward => objectives::GVPO,
        Claim::TisReward => mismatch::TIS,
        Claim::ComputeToReach => objectives::COMPUTE,
        Claim::DepthDrift => drift::DEPTH,
        Claim::Control => control::CONTROL,
        Claim::PrefixVariance => ratios::PREFIX,
        Claim::FixLeaderboard => replay::LEADERBOARD,
        Claim::ScaleDrift => scale::SCALE,
        Claim::Opd => opd::OPD,
        Claim::Organic => organic::ORGANIC,
        Claim::RouterPrecision => precision::PRECISION,
        Claim::WidthDrift => width::WIDTH,
    }
}

/// The endpoints of one regime's declared per-regime claims, in claim order.
pub fn declare_regime(r: &RegimeData) -> Result<Vec<Endpoint>> {
    let mut out = Vec::new();
    for c in Claim::ALL.iter().copied().filter(|c| r.claims.contains(c)) {
        if let Scope::PerRegime(f) = def(c).scope {
            f(r, &mut out)?;
        }
    }
    compare::set_aside_twins(r.same, &mut out);
    Ok(out)
}

/// Every endpoint of the run's declared claims: each regime's, then those across regimes.
pub fn declare(regs: &[Regime]) -> Result<Vec<Endpoint>> {
    let mut eps = Vec::new();
    for r in regs {
        eps.extend(declare_regime(&RegimeData {
            name: &r.name,
            arms: &r.arms,
            frames: &r.frames,
            same: &r.same,
            mismatch: r.mismatch,
            claims: &r.claims,
            has_control: r.control.is_some(),
            compute_target: r.compute_target,
        })?);
    }
    let declared = regs.first().map_or(&[][..], |r| r.claims.as_slice());
    for c in Claim::ALL.iter().copied().filter(|c| declared.contains(c)) {
        if let Scope::AcrossRegimes(f) = def(c).scope {
            eps.extend(f(regs));
        }
    }
    Ok(eps)
}
