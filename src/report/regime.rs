//! The unit of the report: one regime's frames and arms, built once from the run's frames and
//! its `config.json`, with what the spec says of it (declared claims, sweep value, control,
//! map place, whether its engine differs from the trainer).

use super::load::{RunFrames, regimes};
use super::roles::Arms;
use super::run_info::RunInfo;
use super::summary::summarize;
use crate::experiment::Claim;
use anyhow::Result;

/// One regime's arms and rows, and how the report names it.
pub struct Regime {
    pub name: String,
    pub arms: Arms,
    pub frames: RunFrames,
    /// Arms that ran identical trajectories ([`super::identical`]); pooled findings count each
    /// group once.
    pub same: Vec<Vec<String>>,
    pub mismatch: bool,
    /// The claims the run declared, and those of them it describes without a test.
    pub claims: Vec<Claim>,
    pub secondary: Vec<Claim>,
    /// The spec declared "reversed" as an outcome (two-sided primary tests).
    pub reversal: bool,
    /// Claim (j)'s target (the spec's `compute_target`).
    pub compute_target: crate::experiment::ComputeTarget,
    /// The regime's value on the sweep axis, in a sweep.
    pub x: Option<f64>,
    /// The regime it is compared against, and its place in the stability map.
    pub control: Option<String>,
    pub map: Option<crate::experiment::MapAt>,
    /// The configuration's factors (depth, width, experts, lr, minibatches) of the regime's
    /// first cell, for claim (o)'s fit.
    pub factors: Option<super::scale::Factors>,
    /// Held out of claim (o)'s fit (the spec's `holdout`): predicted, not fitted.
    pub holdout: bool,
    /// The arms here that ran a defect of the run's build, fixed since ([`super::defects`]).
    pub defects: Vec<(String, &'static super::defects::Defect)>,
    /// The run's build (config.json's `git_commit`).
    pub build: Option<String>,
}

impl Regime {
    /// The MoE arms of this regime, each group of identical arms once (a dense arm has no
    /// routes, so its drift is 0 by construction).
    pub fn distinct_moe(&self) -> Vec<&super::summary::ArmSummary> {
        self.arms
            .arms
            .iter()
            .filter(|(a, id)| {
                id.ffn == crate::model::FfnKind::Moe
                    && !super::identical::is_repeat(&self.same, &a.name)
            })
            .map(|(a, _)| a)
            .collect()
    }
}

/// Every regime of the run, with its arms.
pub fn regimes_of(f: &RunFrames, info: &RunInfo) -> Result<Vec<Regime>> {
    let regs = regimes(&f.steps);
    let mut per = Vec::new();
    for r in &regs {
        let frames = if regs.len() == 1 {
            f.clone()
        } else {
            f.regime(r)?
        };
        per.push(Regime {
            name: r.clone(),
            arms: Arms::new(summarize(&frames)?, info),
            same: super::identical::identical_groups(&frames.steps)?,
            mismatch: regime_has_mismatch(info, r),
            claims: info.claims.clone(),
            secondary: info.secondary.clone(),
            reversal: info.reversal,
            compute_target: info.compute_target,
            x: info.regime(r).and_then(|x| x.x),
            control: info.regime(r).and_then(|x| x.control.clone()),
            map: info.regime(r).and_then(|x| x.map.clone()),
            factors: factors_of(info, r),
            holdout: info.regime(r).is_some_and(|x| x.holdout),
            defects: super::defects::affected(info, Some(r)),
            build: info.git_commit.clone(),
            frames,
        });
    }
    Ok(per)
}

/// The factors of the first cell of `regime` (claim (o)).
fn factors_of(info: &RunInfo, regime: &str) -> Option<super::scale::Factors> {
    let c = info.cells.iter().find(|c| c.regime == regime)?;
    Some(super::scale::Factors {
        layers: c.model.n_layers as f64,
        d_model: c.model.d_model as f64,
        experts: c.model.n_experts as f64,
        top_k: c.model.top_k as f64,
        lr: c.rl.optimizer.lr,
        minibatches: c.rl.minibatches as f64,
    })
}

/// Does the rollout engine of `regime` differ from the trainer?
pub fn regime_has_mismatch(info: &RunInfo, regime: &str) -> bool {
    info.cells
        .iter()
        .any(|c| c.regime == regime && c.rl.mismatch != crate::rl::Mismatch::None)
}

/// The per-seed values of `col` in every regime with factors, for the first arm.
pub fn scale_points(
    regs: &[Regime],
    from: super::scale::From,
    col: &str,
) -> Result<super::scale::Points> {
    let mut out = Vec::new();
    for r in regs {
        let (Some(f), Some((a, _))) = (r.factors, r.arms.arms.first()) else {
            continue;
        };
        let df = match from {
            super::scale::From::Updates => &r.frames.updates,
            super::scale::From::Steps => &r.frames.steps,
        };
        out.push((
            r.name.clone(),
            f,
            r.holdout,
            super::scale::cell_values(df, col, &a.name)?,
        ));
    }
    Ok(out)
}
