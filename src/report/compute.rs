//! Reward against training compute (GSPO Fig. 1): compute is counted as the response tokens
//! trained — every step trains each token of its rollout batch once, whatever the minibatch
//! split, so a cell's compute up to step s is the sum of `n_tokens` of steps 0..=s.

pub use crate::experiment::ComputeTarget;
use crate::metrics::frames::{f64_col, i64_col, str_col};
use anyhow::Result;
use polars::prelude::*;
use std::collections::BTreeMap;

/// Weight of the past in the reward EMA the compute is read from (as the reward figures).
const EMA: f64 = 0.9;
/// Share of the reference arm's gain (its best, or final, EMA reward minus its first) a cell
/// must reach.
pub const GAIN_SHARE: f64 = 0.9;

/// One cell's curve: per step, (response tokens trained so far, reward EMA).
pub type Curve = Vec<(f64, f64)>;

/// Per (arm, seed) of one regime's steps frame, its curve in step order.
pub fn curves(steps: &DataFrame) -> Result<BTreeMap<(String, i64), Curve>> {
    if steps.height() == 0 {
        return Ok(BTreeMap::new());
    }
    let df = steps
        .clone()
        .lazy()
        .select([
            col("arm"),
            col("seed"),
            col("step"),
            col("n_tokens"),
            col("reward_mean"),
        ])
        .sort(["arm", "seed", "step"], SortMultipleOptions::default())
        .collect()?;
    let (arm, seed) = (str_col(&df, "arm")?, i64_col(&df, "seed")?);
    let tokens = i64_col(&df, "n_tokens")?;
    let reward = f64_col(&df, "reward_mean")?;
    let mut out: BTreeMap<(String, i64), (f64, Option<f64>, Curve)> = BTreeMap::new();
    for i in 0..df.height() {
        let Some(r) = reward[i] else { continue };
        let e = out.entry((arm[i].clone(), seed[i])).or_default();
        e.0 += tokens[i] as f64;
        let v = e.1.map_or(r, |m| EMA * m + (1.0 - EMA) * r);
        e.1 = Some(v);
        e.2.push((e.0, v));
    }
    Ok(out.into_iter().map(|(k, (_, _, c))| (k, c)).collect())
}

/// The reward a cell must reach: `GAIN_SHARE` of the way from the reference curve's first
/// EMA to its best ([`ComputeTarget::Best`]) or to its mean over the last tenth of its steps
/// ([`ComputeTarget::FinalReward`]: the maximum of a noisy EMA is a high draw of its noise,
/// which an arm on the same plateau may never repeat, so under `Best` a share of seeds stays
/// censored however long the run).
pub fn target(reference: &Curve, kind: ComputeTarget) -> Option<f64> {
    let first = reference.first()?.1;
    let top = match kind {
        ComputeTarget::Best => reference
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max),
        ComputeTarget::FinalReward => {
            let k = (reference.len() / 10).max(1);
            let tail = &reference[reference.len() - k..];
            tail.iter().map(|p| p.1).sum::<f64>() / k as f64
        }
    };
    Some(first + GAIN_SHARE * (top - first))
}

/// Tokens trained when the curve first reaches `target`; `Err(total)` when it never does
/// (the run's whole compute, a lower bound).
pub fn tokens_to(curve: &Curve, target: f64) -> std::result::Result<f64, f64> {
    curve
        .iter()
        .find(|p| p.1 >= target)
        .map(|p| p.0)
        .ok_or_else(|| curve.last().map_or(f64::NAN, |p| p.0))
}

/// Per seed, ln(compute of `arm` / compute of `reference`) to reach the reference's target,
/// and the seeds where `arm` never reached it (their value uses its whole compute: a lower
/// bound on the ratio).
pub fn log_ratios(
    curves: &BTreeMap<(String, i64), Curve>,
    arm: &str,
    reference: &str,
    kind: ComputeTarget,
) -> (BTreeMap<i64, f64>, Vec<i64>) {
    let (mut out, mut censored) = (BTreeMap::new(), Vec::new());
    for ((a, seed), rc) in curves {
        if a != reference {
            continue;
        }
        let (Some(c), Some(t)) = (curves.get(&(arm.to_string(), *seed)), target(rc, kind)) else {
            continue;
        };
        let Ok(base) = tokens_to(rc, t) else { continue };
        let mine = tokens_to(c, t).unwrap_or_else(|total| {
            censored.push(*seed);
            total
        });
        out.insert(*seed, (mine / base).ln());
    }
    (out, censored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_to_reach_the_reference_gain_by_hand() {
        // Reference: EMA from 0.0 to best 1.0, so the target is 0.9.
        let r2: Curve = vec![(10.0, 0.0), (20.0, 0.5), (30.0, 0.95), (40.0, 1.0)];
        assert_eq!(target(&r2, ComputeTarget::Best), Some(0.9));
        assert_eq!(tokens_to(&r2, 0.9), Ok(30.0));
        let fast: Curve = vec![(5.0, 0.0), (12.0, 0.92)];
        let slow: Curve = vec![(10.0, 0.0), (20.0, 0.5)];
        let mut c = BTreeMap::new();
        c.insert(("r2".to_string(), 0), r2.clone());
        c.insert(("fast".to_string(), 0), fast);
        c.insert(("r2".to_string(), 1), r2);
        c.insert(("slow".to_string(), 1), slow);
        let (v, cens) = log_ratios(&c, "fast", "r2", ComputeTarget::Best);
        assert!((v[&0] - (12.0f64 / 30.0).ln()).abs() < 1e-12);
        assert!(cens.is_empty());
        // Never reached: the whole compute (20 tokens) as a lower bound, and the seed named.
        let (v, cens) = log_ratios(&c, "slow", "r2", ComputeTarget::Best);
        assert!((v[&1] - (20.0f64 / 30.0).ln()).abs() < 1e-12);
        assert_eq!(cens, vec![1]);
    }

    #[test]
    fn the_final_reward_target_reads_the_last_tenth_not_the_noisy_best() {
        // 20 points: a spike to 1.0 at step 5, then a plateau at 0.5 (the last two, a tenth).
        let mut r2: Curve = (0..20).map(|i| (i as f64, 0.5)).collect();
        r2[0].1 = 0.0;
        r2[5].1 = 1.0;
        assert_eq!(target(&r2, ComputeTarget::Best), Some(0.9));
        assert_eq!(target(&r2, ComputeTarget::FinalReward), Some(0.45));
        // An arm on the same plateau is censored against the spike, not against the plateau.
        let arm: Curve = (0..20)
            .map(|i| (i as f64, if i == 0 { 0.0 } else { 0.5 }))
            .collect();
        let mut c = BTreeMap::new();
        c.insert(("r2".to_string(), 0), r2);
        c.insert(("arm".to_string(), 0), arm);
        assert_eq!(log_ratios(&c, "arm", "r2", ComputeTarget::Best).1, vec![0]);
        let (v, cens) = log_ratios(&c, "arm", "r2", ComputeTarget::FinalReward);
        assert!(cens.is_empty() && v[&0] == 0.0);
    }
}
