//! Runs every (arm, seed) cell of an experiment, streaming metric rows into frames that are
//! flushed to Parquet every few steps, so an interrupted run keeps what it computed.

use super::spec::{ArmSpec, ExperimentSpec, RegimeSpec};
use crate::coldstart::{load_or_train, write_atomic};
use crate::generate::Sampling;
use crate::metrics::collapse::{CollapseDetector, StepSignals};
use crate::metrics::frames::{Frame, write_parquet};
use crate::metrics::rows::{
    CellId, Shape, Val, layer_rows, mismatch_stats, step_loads, step_row, update_row,
};
use crate::rl::Trainer;
use crate::task::Task;
use anyhow::{Context, Result};
use burn::tensor::Device;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rand::SeedableRng;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// How a run is carried out (not part of the experiment's identity).
pub struct RunOptions {
    pub out: PathBuf,
    pub device: Device,
    pub device_name: String,
    pub cache_dir: PathBuf,
    pub show_progress: bool,
    /// Set (by Ctrl-C, or a test) to stop after the current step; data is flushed.
    pub stop: Arc<AtomicBool>,
    /// Cells run at once (each on its own thread).
    pub jobs: usize,
    /// Called after every completed step with (arm, seed, step).
    pub on_step: Option<Box<dyn Fn(&str, u64, usize) + Send + Sync>>,
}

/// Final state of one cell.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CellStatus {
    pub regime: String,
    pub arm: String,
    pub seed: u64,
    /// `ok`, `collapsed` (non-finite updates in a row) or `stopped` (interrupted).
    pub status: String,
    pub steps_done: usize,
    pub coldstart_accuracy: f64,
    pub drift_sigma: Option<f64>,
}

/// The four frames of a run.
#[derive(Default)]
pub struct Frames {
    pub steps: Frame,
    pub updates: Frame,
    pub layers: Frame,
    pub events: Frame,
}

impl Frames {
    /// Rewrite every frame under `dir` (atomically, file by file).
    pub fn flush(&self, dir: &Path) -> Result<()> {
        for (name, f) in [
            ("steps", &self.steps),
            ("updates", &self.updates),
            ("layers", &self.layers),
            ("events", &self.events),
        ] {
            let mut df = if f.is_empty() && name == "events" {
                empty_events()?
            } else {
                f.to_df()?
            };
            write_parquet(&mut df, &dir.join(format!("{name}.parquet")))?;
        }
        Ok(())
    }
}

fn empty_events() -> Result<polars::prelude::DataFrame> {
    use polars::prelude::*;
    let s = |n: &str| Column::new(n.into(), Vec::<String>::new());
    let i = |n: &str| Column::new(n.into(), Vec::<i64>::new());
    let f = |n: &str| Column::new(n.into(), Vec::<Option<f64>>::new());
    Ok(DataFrame::new(
        0,
        vec![
            s("experiment"),
            s("regime"),
            s("arm"),
            s("algorithm"),
            s("routing"),
            i("seed"),
            i("step"),
            s("kind"),
            f("value"),
            f("threshold"),
            s("detail"),
        ],
    )?)
}

fn event_row(id: &CellId, e: &crate::metrics::collapse::Event) -> crate::metrics::rows::Row {
    let mut row = id.row(e.step);
    row.extend([
        ("kind", Val::S(e.kind.clone())),
        ("value", Val::F(e.value.is_finite().then_some(e.value))),
        (
            "threshold",
            Val::F(e.threshold.is_finite().then_some(e.threshold)),
        ),
        ("detail", Val::S(e.detail.clone())),
    ]);
    row
}

#[derive(Serialize)]
struct RunConfig<'a> {
    spec: &'a ExperimentSpec,
    crate_version: &'static str,
    git_commit: Option<String>,
    device: &'a str,
    start_unix: u64,
}

fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Greedy exact-match accuracy on the task's eval set.
pub fn greedy_eval(model: &crate::model::Model, task: &Task) -> f64 {
    let s = Sampling {
        temperature: 1.0,
        greedy: true,
        max_new: task.cfg.max_answer_tokens(),
        logit_noise: 0.0,
    };
    let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(0);
    crate::coldstart::accuracy(&model.inner(), task, &task.eval, &s, &mut rng)
}

/// Run the experiment; returns the status of every cell. Frames, `config.json` and
/// `status.json` are written under `opts.out`.
pub fn run_experiment(spec: &ExperimentSpec, opts: &RunOptions) -> Result<Vec<CellStatus>> {
    std::fs::create_dir_all(&opts.out).with_context(|| {
        format!(
            "cannot create output folder {} (is it writable?)",
            opts.out.display()
        )
    })?;
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let cfg = RunConfig {
        spec,
        crate_version: env!("CARGO_PKG_VERSION"),
        git_commit: git_commit(),
        device: &opts.device_name,
        start_unix,
    };
    write_atomic(
        &opts.out.join("config.json"),
        serde_json::to_string_pretty(&cfg)?.as_bytes(),
    )
    .with_context(|| format!("cannot write into {}", opts.out.display()))?;

    let mp = if opts.show_progress {
        MultiProgress::new()
    } else {
        MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden())
    };
    let cells = spec.cells();
    let total = (cells.len() * spec.steps) as u64;
    let overall = mp.add(ProgressBar::new(total));
    overall.set_style(
        ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} steps [{elapsed}<{eta}]")
            .expect("template"),
    );
    overall.set_prefix(spec.name.clone());

    // Cold starts first, `jobs` at a time: cells of the same seed and FFN share one cached
    // model, and each cold start is deterministic whichever worker trains it.
    let mut keys = Vec::new();
    for (_, arm, seed) in &cells {
        let key = (arm.ffn == crate::model::FfnKind::Dense, *seed);
        if !keys.iter().any(|(k, _, _)| *k == key) {
            keys.push((key, arm, *seed));
        }
    }
    parallel(keys.len(), opts.jobs, |i| {
        if opts.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        cold_start(spec, keys[i].1, keys[i].2, opts, &mp).map(|_| ())
    })?;

    // Cells in parallel (`jobs` workers); each cell's numbers do not depend on the schedule.
    let frames = Mutex::new(Frames::default());
    let statuses: Mutex<Vec<Option<CellStatus>>> = Mutex::new(vec![None; cells.len()]);
    parallel(cells.len(), opts.jobs, |i| {
        let (regime, arm, seed) = (&cells[i].0, &cells[i].1, cells[i].2);
        let st = if opts.stop.load(Ordering::SeqCst) {
            CellStatus {
                regime: regime.name.clone(),
                arm: arm.name.clone(),
                seed,
                status: "stopped".into(),
                steps_done: 0,
                coldstart_accuracy: f64::NAN,
                drift_sigma: None,
            }
        } else {
            run_cell(spec, regime, arm, seed, opts, &frames, &mp, &overall)?
        };
        let mut all = statuses.lock().expect("status lock");
        all[i] = Some(st);
        frames.lock().expect("frames lock").flush(&opts.out)?;
        let done: Vec<&CellStatus> = all.iter().flatten().collect();
        write_atomic(
            &opts.out.join("status.json"),
            serde_json::to_string_pretty(&done)?.as_bytes(),
        )
    })?;
    let statuses: Vec<CellStatus> = statuses
        .into_inner()
        .expect("status lock")
        .into_iter()
        .flatten()
        .collect();
    overall.finish_and_clear();
    Ok(statuses)
}

/// The arm's model configuration, the seed's task, and its (cached) cold start.
/// `work(0..n)` on `jobs` threads, each taking the next index; the first error stops further
/// pickups and is returned once the running items end.
fn parallel(n: usize, jobs: usize, work: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let abort = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1).min(n) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= n || abort.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Err(e) = work(i) {
                        abort.store(true, Ordering::SeqCst);
                        failed.lock().expect("error lock").get_or_insert(e);
                        break;
                    }
                }
            });
        }
    });
    match failed.into_inner().expect("error lock") {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn cold_start(
    spec: &ExperimentSpec,
    arm: &ArmSpec,
    seed: u64,
    opts: &RunOptions,
    mp: &MultiProgress,
) -> Result<(crate::model::ModelConfig, Task, crate::coldstart::ColdStart)> {
    let model_cfg = spec.model_config(arm)?;
    let task = Task::new(spec.task.clone(), seed)?;
    let cs = load_or_train(
        &model_cfg,
        &task,
        &spec.coldstart,
        seed,
        &opts.device,
        &opts.cache_dir,
        Some(mp),
    )?;
    Ok((model_cfg, task, cs))
}

#[allow(clippy::too_many_arguments)]
fn run_cell(
    spec: &ExperimentSpec,
    regime: &RegimeSpec,
    arm: &ArmSpec,
    seed: u64,
    opts: &RunOptions,
    frames: &Mutex<Frames>,
    mp: &MultiProgress,
    overall: &ProgressBar,
) -> Result<CellStatus> {
    let (model_cfg, task, cs) = cold_start(spec, arm, seed, opts, mp)?;
    let mut rl = regime.apply(&spec.rl);
    rl.algorithm = arm.algorithm.clone();
    rl.routing = arm.routing;
    rl.total_steps = spec.steps;
    if !model_cfg.is_moe() {
        rl.drift_injection = None;
    }
    let mut trainer = Trainer::new(rl, cs.model, task, seed)
        .with_context(|| format!("arm '{}' seed {seed}", arm.name))?;
    let id = CellId {
        experiment: spec.name.clone(),
        regime: regime.name.clone(),
        arm: arm.name.clone(),
        algorithm: arm.algorithm.name().into(),
        routing: arm.routing.name().into(),
        seed,
    };
    let shape = Shape {
        k: model_cfg.top_k,
        n_experts: model_cfg.n_experts,
        moe: model_cfg.is_moe(),
    };
    let mut detector = CollapseDetector::new(spec.collapse.clone());
    let bar = mp.add(ProgressBar::new(spec.steps as u64));
    bar.set_style(
        ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} {msg}").expect("template"),
    );
    bar.set_prefix(format!("{} s{seed}", arm.name));
    let mut status = "ok";
    let mut done = 0;
    for step in 0..spec.steps {
        if opts.stop.load(Ordering::SeqCst) {
            status = "stopped";
            break;
        }
        let out = trainer.step();
        let eval = (step == 0 || (step + 1) % spec.eval_every == 0 || step + 1 == spec.steps)
            .then(|| greedy_eval(&trainer.model, &trainer.task));
        let step_r = step_row(&id, &out, eval, shape, spec.rl.group_size);
        let (mut update_rs, mut layer_rs) = (Vec::new(), Vec::new());
        let mut signals = StepSignals {
            step,
            reward_mean: out.rewards.iter().map(|&r| f64::from(r)).sum::<f64>()
                / out.rewards.len().max(1) as f64,
            entropy: f64::from(out.entropy),
            loads: if shape.moe {
                step_loads(&out, shape)
            } else {
                Vec::new()
            },
            ..StepSignals::default()
        };
        signals.mismatch_extreme_frac = mismatch_stats(&out).1;
        for u in &out.updates {
            update_rs.push(update_row(&id, step, u, shape));
            layer_rs.extend(layer_rows(&id, step, u, shape));
            signals.ratio_tok_max = signals
                .ratio_tok_max
                .max(u.stats.ratio_tok.iter().copied().fold(0.0, f32::max) as f64);
            signals.skipped.push(!u.applied);
            if u.applied {
                signals.grad_norms.push(f64::from(u.grad_norm));
            }
        }
        let event_rs: Vec<_> = detector
            .observe(&signals)
            .iter()
            .map(|e| event_row(&id, e))
            .collect();
        done = step + 1;
        {
            let mut f = frames.lock().expect("frames lock");
            f.steps.push(step_r)?;
            for r in update_rs {
                f.updates.push(r)?;
            }
            for r in layer_rs {
                f.layers.push(r)?;
            }
            for r in event_rs {
                f.events.push(r)?;
            }
            if done % spec.flush_every == 0 {
                f.flush(&opts.out)?;
            }
        }
        bar.set_message(format!("reward {:.3}", signals.reward_mean));
        bar.inc(1);
        overall.inc(1);
        if let Some(f) = &opts.on_step {
            f(&arm.name, seed, step);
        }
        if detector.collapsed {
            status = "collapsed";
            break;
        }
    }
    overall.inc((spec.steps - done) as u64);
    bar.finish_and_clear();
    Ok(CellStatus {
        regime: regime.name.clone(),
        arm: arm.name.clone(),
        seed,
        status: status.into(),
        steps_done: done,
        coldstart_accuracy: cs.accuracy.sampled,
        drift_sigma: trainer.drift_sigma,
    })
}
