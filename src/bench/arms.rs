//! `driftlab bench --rl --spec NAME --regime R`: the RL step of every arm of one regime of an
//! experiment as its cells run it (the regime's settings, each arm's cold start, one thread),
//! timed in interleaved rounds — one step of each arm per round, so that every arm sees the
//! same machine load — and reported as medians. With `--out`, written as JSON; a results
//! folder's `bench.json` is the cost per step its fix leaderboard shows.

use crate::experiment::{ExperimentSpec, RunOptions};
use crate::rl::Trainer;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// What `--out` writes: one regime's per-arm step seconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ArmBench {
    pub experiment: String,
    pub regime: String,
    /// The seed whose cold starts and cell settings were timed.
    pub seed: u64,
    pub threads: usize,
    /// Untimed steps per arm before the rounds.
    pub warmup: usize,
    pub rounds: usize,
    pub device: String,
    pub git_commit: Option<String>,
    pub host: crate::util::host::Host,
    /// Per arm, the median seconds of one RL step (rollout + update + probe).
    pub median_s: BTreeMap<String, f64>,
    /// Per arm, every timed step's seconds in round order.
    pub steps_s: BTreeMap<String, Vec<f64>>,
}

impl ArmBench {
    /// The `bench.json` of a results folder, if it has one.
    pub fn load(dir: &Path) -> Result<Option<ArmBench>> {
        let path = dir.join("bench.json");
        if !path.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text)
            .map(Some)
            .with_context(|| format!("parsing {}", path.display()))
    }
}

/// Time every arm of `regime` of `spec` (the cells of its first seed) for `rounds` rounds
/// after `warmup` steps each, on one thread.
pub fn bench_arms(
    spec: &ExperimentSpec,
    regime: Option<&str>,
    opts: &RunOptions,
    warmup: usize,
    rounds: usize,
) -> Result<ArmBench> {
    let cells = spec.resolve(&opts.device_name)?;
    let regimes = crate::util::names::distinct(cells.iter().map(|c| c.regime.clone()));
    let regime = match regime {
        Some(r) => {
            let names: Vec<&str> = regimes.iter().map(String::as_str).collect();
            anyhow::ensure!(
                regimes.iter().any(|x| x == r),
                "{}",
                crate::util::names::unknown("regime", r, &names)
            );
            r.to_string()
        }
        None if regimes.len() == 1 => regimes[0].clone(),
        None => anyhow::bail!(
            "experiment '{}' has {} regimes ({}): name one with --regime",
            spec.name,
            regimes.len(),
            regimes.join(", ")
        ),
    };
    let rounds = rounds.max(1);
    let seed = cells.first().context("the spec has no cells")?.seed;
    let mine: Vec<_> = cells
        .iter()
        .filter(|c| c.regime == regime && c.seed == seed)
        .collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let mut trainers = Vec::new();
    for c in &mine {
        let (task, cs) = crate::experiment::cold_start(c, opts)?;
        let t = Trainer::new(c.rl.clone(), cs.model, task, c.seed)
            .with_context(|| format!("arm '{}'", c.arm))?;
        trainers.push((c.arm.clone(), t));
    }
    let mut steps_s: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for round in 0..warmup + rounds {
        for (arm, t) in trainers.iter_mut() {
            let o = pool.install(|| t.step());
            if round >= warmup {
                let s = o.t_rollout + o.t_update + o.t_probe;
                steps_s.entry(arm.clone()).or_default().push(s);
            }
        }
    }
    let median_s = steps_s
        .iter()
        .map(|(a, v)| (a.clone(), super::timing::median(v.clone())))
        .collect();
    Ok(ArmBench {
        experiment: spec.name.clone(),
        regime,
        seed,
        threads: 1,
        warmup,
        rounds,
        device: opts.device_name.clone(),
        git_commit: crate::experiment::version::git_commit(),
        host: crate::util::host::Host::detect(),
        median_s,
        steps_s,
    })
}
