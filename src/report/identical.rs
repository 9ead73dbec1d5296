//! Arms that ran the same experiment: within a regime, two arms whose every rollout of every
//! seed sampled the same responses (bitwise-equal rewards, accuracies and lengths at every
//! step) trained on the same data; whatever else differs between them is rounding in the
//! updates. Without a mismatch `grpo_r2` and `grpo_r3` replay the same routes, and
//! `gspo_token` has GSPO's value and gradient, so such pairs are expected. The report lists
//! them once, and findings that pool arms count each group once.

use crate::metrics::frames::{f64_col, i64_col, str_col};
use anyhow::Result;
use polars::prelude::*;

/// The steps columns that fix what a rollout sampled.
const TRAJECTORY: &[&str] = &["reward_mean", "reward_std", "accuracy", "resp_len_mean"];

/// Groups of two or more arms (spec order within a group, groups in order of their first arm)
/// of one regime's steps frame that ran identical trajectories on the same seeds and steps.
pub fn identical_groups(steps: &DataFrame) -> Result<Vec<Vec<String>>> {
    if steps.height() == 0 {
        return Ok(Vec::new());
    }
    let arms = str_col(steps, "arm")?;
    let (seed, step) = (i64_col(steps, "seed")?, i64_col(steps, "step")?);
    let cols: Vec<Vec<Option<f64>>> = TRAJECTORY
        .iter()
        .map(|c| f64_col(steps, c))
        .collect::<Result<_>>()?;
    // Per arm, its rows' (seed, step, trajectory bits), sorted.
    let mut order: Vec<String> = Vec::new();
    let mut rows: Vec<Vec<(i64, i64, Vec<u64>)>> = Vec::new();
    for i in 0..arms.len() {
        let k = match order.iter().position(|a| a == &arms[i]) {
            Some(k) => k,
            None => {
                order.push(arms[i].clone());
                rows.push(Vec::new());
                order.len() - 1
            }
        };
        let bits = cols
            .iter()
            .map(|c| c[i].map_or(u64::MAX, f64::to_bits))
            .collect();
        rows[k].push((seed[i], step[i], bits));
    }
    rows.iter_mut().for_each(|r| r.sort());
    let mut taken = vec![false; order.len()];
    let mut groups = Vec::new();
    for a in 0..order.len() {
        if taken[a] {
            continue;
        }
        let same: Vec<usize> = (a..order.len())
            .filter(|&b| !taken[b] && rows[b] == rows[a])
            .collect();
        if same.len() > 1 {
            same.iter().for_each(|&b| taken[b] = true);
            groups.push(same.iter().map(|&b| order[b].clone()).collect());
        }
    }
    Ok(groups)
}

/// Whether `arm` is not the first of its group (so pooled findings leave it out).
pub fn is_repeat(groups: &[Vec<String>], arm: &str) -> bool {
    groups.iter().any(|g| g.iter().skip(1).any(|a| a == arm))
}
