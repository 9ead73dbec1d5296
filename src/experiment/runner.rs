//! Runs every (regime, arm, seed) cell of an experiment, streaming metric rows into frames that
//! are flushed to Parquet every few steps, so an interrupted run keeps what it computed.

use super::cell::CellConfig;
use super::spec::ExperimentSpec;
use crate::coldstart::{ColdStart, load_or_train};
use crate::generate::Sampling;
use crate::io::write_json;
use crate::metrics::collapse::{CollapseDetector, StepSignals};
use crate::metrics::frames::Frames;
use crate::metrics::rows::{
    CellId, Shape, StepMeasures, event_row, layer_rows, length_rows, ratio_tok_max, step_row,
    update_row,
};
use crate::parallel::work_queue;
use crate::rl::{StepOutput, Trainer};
use crate::task::Task;
use anyhow::{Context, Result};
use burn::tensor::Device;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use rand::SeedableRng;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// A callback after every completed step, with (arm, seed, step).
pub type OnStep = Box<dyn Fn(&str, u64, usize) + Send + Sync>;

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
    pub on_step: Option<OnStep>,
}

crate::named_enum! {
    /// How a cell ended.
    pub enum CellState("cell status") {
        /// Every step ran.
        Ok = "ok",
        /// `non_finite_stop` non-finite updates in a row.
        Collapsed = "collapsed",
        /// Interrupted (Ctrl-C) before its last step; the rows it wrote are kept.
        Stopped = "stopped",
    }
}

impl PartialEq<&str> for CellState {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

/// Final state of one cell.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CellStatus {
    pub regime: String,
    pub arm: String,
    pub seed: u64,
    pub status: CellState,
    pub steps_done: usize,
    pub coldstart_accuracy: f64,
    pub drift_sigma: Option<f64>,
}

/// `config.json`: every cell's resolved configuration, and the spec they came from.
#[derive(Serialize)]
struct RunConfig<'a> {
    spec: &'a ExperimentSpec,
    cells: &'a [CellConfig],
    crate_version: &'static str,
    git_commit: Option<String>,
    device: &'a str,
    /// CPU model and kernel-relevant features (see [`crate::host`]).
    host: crate::host::Host,
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
    let cells = spec.resolve(&opts.device_name)?;
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
        cells: &cells,
        crate_version: env!("CARGO_PKG_VERSION"),
        git_commit: git_commit(),
        device: &opts.device_name,
        host: crate::host::Host::detect(),
        start_unix,
    };
    write_json(&opts.out.join("config.json"), &cfg)
        .with_context(|| format!("cannot write into {}", opts.out.display()))?;

    let mp = if opts.show_progress {
        MultiProgress::new()
    } else {
        MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden())
    };
    let total = cells.iter().map(|c| c.steps as u64).sum();
    let overall = mp.add(ProgressBar::new(total));
    overall.set_style(
        ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} steps [{elapsed}<{eta}]")
            .expect("template"),
    );
    overall.set_prefix(spec.name.clone());

    // Cold starts first, `jobs` at a time: cells with the same model, task, cold-start
    // settings and seed share one cached model, and each cold start is deterministic whichever
    // worker trains it.
    let mut keys: Vec<String> = Vec::new();
    let mut firsts: Vec<&CellConfig> = Vec::new();
    for c in &cells {
        let key = c.coldstart_key();
        if !keys.contains(&key) {
            keys.push(key);
            firsts.push(c);
        }
    }
    work_queue(firsts.len(), opts.jobs, |i| {
        if opts.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        cold_start(firsts[i], opts, &mp).map(|_| ())
    })?;

    // Cells in parallel (`jobs` workers); each cell's numbers do not depend on the schedule.
    let frames = Mutex::new(Frames::default());
    let statuses: Mutex<Vec<Option<CellStatus>>> = Mutex::new(vec![None; cells.len()]);
    work_queue(cells.len(), opts.jobs, |i| {
        let cell = &cells[i];
        let st = if opts.stop.load(Ordering::SeqCst) {
            CellStatus {
                regime: cell.regime.clone(),
                arm: cell.arm.clone(),
                seed: cell.seed,
                status: CellState::Stopped,
                steps_done: 0,
                coldstart_accuracy: f64::NAN,
                drift_sigma: None,
            }
        } else {
            run_cell(cell, opts, &frames, &mp, &overall)?
        };
        let mut all = statuses.lock().expect("status lock");
        all[i] = Some(st);
        frames.lock().expect("frames lock").flush(&opts.out)?;
        let done: Vec<&CellStatus> = all.iter().flatten().collect();
        write_json(&opts.out.join("status.json"), &done)
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

/// The cell's task and its (cached) cold start.
fn cold_start(
    cell: &CellConfig,
    opts: &RunOptions,
    mp: &MultiProgress,
) -> Result<(Task, ColdStart)> {
    let task = Task::new(cell.task.clone(), cell.seed)?;
    let cs = load_or_train(
        &cell.model,
        &task,
        &cell.coldstart,
        cell.seed,
        &opts.device,
        &opts.cache_dir,
        Some(mp),
    )?;
    Ok((task, cs))
}

/// What the collapse detector reads from one step.
fn signals(out: &StepOutput, m: &StepMeasures) -> StepSignals {
    let mut s = StepSignals {
        step: out.step,
        reward_mean: out.rewards.iter().map(|&r| f64::from(r)).sum::<f64>()
            / out.rewards.len().max(1) as f64,
        entropy: f64::from(out.entropy),
        loads: m.loads.clone(),
        mismatch_extreme_frac: m.mismatch.1,
        ..StepSignals::default()
    };
    for u in &out.updates {
        s.ratio_tok_max = s.ratio_tok_max.max(ratio_tok_max(&u.stats.ratio_tok));
        s.skipped.push(!u.applied);
        if u.applied {
            s.grad_norms.push(f64::from(u.grad_norm));
        }
    }
    s
}

/// Append one step's rows (step, updates, layers, events) to the frames, flushing every
/// `flush_every` steps of the cell.
fn record_step(
    cell: &CellConfig,
    id: &CellId,
    out: &StepOutput,
    eval: Option<f64>,
    detector: &mut CollapseDetector,
    frames: &Mutex<Frames>,
    opts: &RunOptions,
) -> Result<f64> {
    let shape = Shape {
        k: cell.model.top_k,
        n_experts: cell.model.n_experts,
        moe: cell.model.is_moe(),
    };
    let measures = StepMeasures::of(out, shape);
    let sig = signals(out, &measures);
    let events = detector.observe(&sig);
    let mut f = frames.lock().expect("frames lock");
    f.steps.push(step_row(
        id,
        out,
        eval,
        shape,
        cell.rl.group_size,
        &measures,
    ))?;
    for u in &out.updates {
        f.updates.push(update_row(id, out.step, u, shape))?;
        for r in layer_rows(id, out.step, u, shape) {
            f.layers.push(r)?;
        }
    }
    for r in length_rows(id, out) {
        f.lengths.push(r)?;
    }
    for e in &events {
        f.events.push(event_row(id, e))?;
    }
    if (out.step + 1).is_multiple_of(cell.flush_every) {
        f.flush(&opts.out)?;
    }
    Ok(sig.reward_mean)
}

fn run_cell(
    cell: &CellConfig,
    opts: &RunOptions,
    frames: &Mutex<Frames>,
    mp: &MultiProgress,
    overall: &ProgressBar,
) -> Result<CellStatus> {
    let (task, cs) = cold_start(cell, opts, mp)?;
    let (arm, seed) = (&cell.arm, cell.seed);
    let mut trainer = Trainer::new(cell.rl.clone(), cs.model, task, seed)
        .with_context(|| format!("arm '{arm}' seed {seed}"))?;
    let id = cell.id();
    let mut detector = CollapseDetector::new(cell.collapse.clone());
    let bar = mp.add(ProgressBar::new(cell.steps as u64));
    bar.set_style(
        ProgressStyle::with_template("{prefix:>10} {bar:30} {pos}/{len} {msg}").expect("template"),
    );
    bar.set_prefix(format!("{arm} s{seed}"));
    let mut status = CellState::Ok;
    let mut done = 0;
    for step in 0..cell.steps {
        if opts.stop.load(Ordering::SeqCst) {
            status = CellState::Stopped;
            break;
        }
        let out = trainer.step();
        let last = step + 1 == cell.steps;
        let eval = (step == 0 || (step + 1) % cell.eval_every == 0 || last)
            .then(|| greedy_eval(&trainer.model, &trainer.task));
        let reward = record_step(cell, &id, &out, eval, &mut detector, frames, opts)?;
        done = step + 1;
        bar.set_message(format!("reward {reward:.3}"));
        bar.inc(1);
        overall.inc(1);
        if let Some(f) = &opts.on_step {
            f(arm, seed, step);
        }
        if detector.collapsed {
            status = CellState::Collapsed;
            break;
        }
    }
    overall.inc((cell.steps - done) as u64);
    bar.finish_and_clear();
    Ok(CellStatus {
        regime: cell.regime.clone(),
        arm: arm.clone(),
        seed,
        status,
        steps_done: done,
        coldstart_accuracy: cs.accuracy.sampled,
        drift_sigma: trainer.drift_sigma,
    })
}
