//! Runs every (regime, arm, seed) cell of an experiment, streaming metric rows into frames that
//! are flushed to Parquet every few steps, so an interrupted run keeps what it computed.

use super::book::{Book, FrameSink, LastWrite, lock};
use super::cell::CellConfig;
use super::shard::Shard;
use super::spec::ExperimentSpec;
use super::status::{CellState, CellStatus};
use super::version::git_commit;
use crate::coldstart::{ColdStart, load_or_train};
use crate::generate::{Sampler, Sampling};
use crate::metrics::collapse::{CollapseDetector, StepSignals};
use crate::metrics::responses::{length_rows, prefix_rows};
use crate::metrics::rows::{
    CellId, Shape, StepMeasures, event_row, layer_rows, ratio_tok_max, step_row, update_row,
};
use crate::model::Model;
use crate::rl::{StepOutput, Trainer};
use crate::task::Task;
use crate::util::io::write_json;
use crate::util::parallel::work_queue;
use crate::util::progress::{Progress, Stage};
use anyhow::{Context, Result};
use burn::tensor::Device;
use rand::SeedableRng;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A callback after every completed step, with (arm, seed, step).
pub type OnStep = Box<dyn Fn(&str, u64, usize) + Send + Sync>;

/// How a run is carried out (not part of the experiment's identity).
pub struct RunOptions {
    pub out: PathBuf,
    pub device: Device,
    pub device_name: String,
    pub cache_dir: PathBuf,
    /// Bars, plain lines (stderr not a terminal) or nothing.
    pub progress: Progress,
    /// Run only this shard's cells (into `out`, which the caller points at the shard's folder).
    pub shard: Option<Shard>,
    /// Keep the finished cells already in `out` and run only the others.
    pub resume: bool,
    /// Set (by Ctrl-C, or a test) to stop after the current step; data is flushed.
    pub stop: Arc<AtomicBool>,
    /// Cells run at once (each on its own thread).
    pub jobs: usize,
    /// Called after every completed step with (arm, seed, step).
    pub on_step: Option<OnStep>,
}

impl RunOptions {
    /// One job, every cell, no resume, a stop flag of its own: what a command that runs a
    /// spec for its own measurement (`check`, `bench --rl --spec`) needs.
    pub fn one_job(
        out: PathBuf,
        device: Device,
        device_name: String,
        cache_dir: PathBuf,
        progress: Progress,
    ) -> Self {
        RunOptions {
            out,
            device,
            device_name,
            cache_dir,
            progress,
            shard: None,
            resume: false,
            stop: Arc::new(AtomicBool::new(false)),
            jobs: 1,
            on_step: None,
        }
    }
}

/// `config.json`: every cell's resolved configuration, and the spec they came from.
#[derive(Serialize)]
struct RunConfig<'a> {
    spec: &'a ExperimentSpec,
    cells: &'a [CellConfig],
    crate_version: &'static str,
    git_commit: Option<String>,
    device: &'a str,
    /// The wgpu adapter the run got (name, backend, device type, driver, software or not);
    /// `None` on flex and cuda.
    #[serde(skip_serializing_if = "Option::is_none")]
    adapter: Option<crate::device::Adapter>,
    /// CPU model and kernel-relevant features (see [`crate::util::host`]).
    host: crate::util::host::Host,
    start_unix: u64,
    /// The shard this folder holds (`cells` lists every cell of the spec; `ran` the
    /// canonical indices of this shard's).
    shard: Option<Shard>,
    ran: Vec<usize>,
    /// Finished cells kept from an earlier run of this folder (`--resume`).
    resumed: usize,
}

/// Greedy exact-match accuracy on the task's eval set.
pub fn greedy_eval(model: &crate::model::Model, task: &Task) -> f64 {
    let s = Sampling {
        temperature: 1.0,
        greedy: true,
        max_new: task.cfg.max_answer_tokens(),
        logit_noise: 0.0,
        sampler: Sampler::Auto,
    };
    let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(0);
    crate::coldstart::accuracy(&model.inner(), task, &task.eval, &s, &mut rng)
}

/// Run the experiment (this shard's cells of it); returns the status of every cell run or kept.
/// Frames, `config.json` and `status.json` are written under `opts.out`.
pub fn run_experiment(spec: &ExperimentSpec, opts: &RunOptions) -> Result<Vec<CellStatus>> {
    let all = spec.resolve(&opts.device_name)?;
    let ran: Vec<usize> = (0..all.len())
        .filter(|&i| opts.shard.is_none_or(|s| s.selects(i)))
        .collect();
    // Each cell was checked against the machine's memory with the spec; cells side by side
    // share it (an upper estimate, so this warns rather than refuses).
    if let Some(mem) = super::memory::machine_memory() {
        let side_by_side = opts.jobs.min(ran.len()).max(1);
        let most = (ran.iter())
            .map(|&i| all[i].memory_estimate().total())
            .fold(0.0, f64::max);
        if most * side_by_side as f64 > mem as f64 {
            eprintln!(
                "warning: {side_by_side} cells side by side may need up to {:.1} GiB of this \
                 machine's {:.1} GiB (an upper estimate); --jobs 1 runs one at a time",
                most * side_by_side as f64 / (1u64 << 30) as f64,
                mem as f64 / (1u64 << 30) as f64
            );
        }
    }
    std::fs::create_dir_all(&opts.out).with_context(|| {
        format!(
            "cannot create output folder {} (is it writable?)",
            opts.out.display()
        )
    })?;
    // One run a folder at a time: a second run into it fails here, naming the holder.
    let _hold = crate::util::lock::hold_folder(&opts.out)?;
    let prior = if opts.resume {
        super::resume::load(&opts.out, &all, opts.shard)?
    } else {
        // A fresh run in an old folder: nothing of the old run may pass for this one's (a later
        // `--resume` or `merge` trusts status.json).
        super::resume::clear(&opts.out)?;
        super::resume::Prior::default()
    };
    let kept: std::collections::BTreeSet<_> = prior
        .finished
        .iter()
        .map(|s| (s.regime.clone(), s.arm.clone(), s.seed))
        .collect();
    write_config(spec, &all, opts, &ran, kept.len())?;

    let mine: Vec<&CellConfig> = ran.iter().map(|&i| &all[i]).collect();
    let todo: Vec<usize> = (0..mine.len())
        .filter(|&j| !kept.contains(&super::resume::name_of(mine[j])))
        .collect();
    let total = todo.iter().map(|&j| mine[j].steps as u64).sum();
    let overall = opts.progress.stage(
        format!("{} ({} cells)", spec.name, todo.len()),
        total,
        "steps",
        "{prefix:>10} {bar:30} {pos}/{len} steps [{elapsed}<{eta}]",
    );
    overall.set_prefix(spec.name.clone());

    let todo_cells: Vec<&CellConfig> = todo.iter().map(|&j| mine[j]).collect();
    cold_starts(&todo_cells, opts)?;

    // Cells in parallel (`jobs` workers); each cell's numbers do not depend on the schedule.
    let book = Arc::new(Mutex::new(Book {
        frames: prior.frames,
        statuses: placed(&mine, prior.finished),
        order: all.iter().map(super::resume::name_of).collect(),
    }));
    let sink = FrameSink {
        book: &book,
        dir: &opts.out,
        gap: Duration::from_secs_f64(spec.flush_secs),
    };
    // A second interrupt writes the book as it stands before the process quits.
    let _registered = LastWrite::register(book.clone(), opts.out.clone());
    let ran = work_queue(todo.len(), opts.jobs, |t| {
        let j = todo[t];
        let cell = mine[j];
        let st = if opts.stop.load(Ordering::SeqCst) {
            not_started(cell)
        } else {
            run_cell(cell, opts, &sink, &overall)?
        };
        let mut b = lock(&book);
        b.statuses[j] = Some(st);
        // A finished cell is written at once unless the book was written less than `sink.gap`
        // ago; then the next write (a step's flush, another cell's end, or the run's last)
        // lists it.
        b.write_if_due(sink.dir, sink.gap)
    });
    // The run's last write, also after a stop or a failed cell (reported first): every finished
    // cell is kept, and a resumed run with nothing left to do writes its kept frames again.
    let last = lock(&book).write(&opts.out);
    ran?;
    last?;
    let statuses: Vec<CellStatus> = lock(&book).statuses.iter().flatten().cloned().collect();
    overall.finish("done");
    Ok(statuses)
}

/// The kept statuses `finished` at the places of their cells in `mine`; `None` elsewhere.
fn placed(mine: &[&CellConfig], finished: Vec<CellStatus>) -> Vec<Option<CellStatus>> {
    let mut statuses: Vec<Option<CellStatus>> = vec![None; mine.len()];
    for st in finished {
        if let Some(j) = mine
            .iter()
            .position(|c| (&c.regime, &c.arm, c.seed) == (&st.regime, &st.arm, st.seed))
        {
            statuses[j] = Some(st);
        }
    }
    statuses
}

/// The status of a cell a stop came before.
fn not_started(cell: &CellConfig) -> CellStatus {
    CellStatus {
        regime: cell.regime.clone(),
        arm: cell.arm.clone(),
        seed: cell.seed,
        status: CellState::Stopped,
        steps_done: 0,
        coldstart_accuracy: f64::NAN,
        drift_sigma: None,
    }
}

/// `config.json`: the spec, every cell, this run's shard and what it ran or kept.
fn write_config(
    spec: &ExperimentSpec,
    all: &[CellConfig],
    opts: &RunOptions,
    ran: &[usize],
    resumed: usize,
) -> Result<()> {
    let start_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let cfg = RunConfig {
        spec,
        cells: all,
        crate_version: env!("CARGO_PKG_VERSION"),
        git_commit: git_commit(),
        device: &opts.device_name,
        adapter: crate::device::adapter_named(&opts.device_name),
        host: crate::util::host::Host::detect(),
        start_unix,
        shard: opts.shard,
        ran: ran.to_vec(),
        resumed,
    };
    write_json(&opts.out.join("config.json"), &cfg)
        .with_context(|| format!("cannot write into {}", opts.out.display()))
}

/// The cold starts of `cells`, `jobs` at a time: cells with the same model, task, cold-start
/// settings and seed share one cached model, and each cold start is deterministic whichever
/// worker trains it.
fn cold_starts(cells: &[&CellConfig], opts: &RunOptions) -> Result<()> {
    let mut keys: Vec<String> = Vec::new();
    let mut firsts: Vec<&CellConfig> = Vec::new();
    for c in cells {
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
        cold_start(firsts[i], opts).map(|_| ())
    })
}

/// The cell's task and its (cached) cold start, trained on the device its `coldstart.device`
/// names (else the run's) and handed over on the run's device.
pub fn cold_start(cell: &CellConfig, opts: &RunOptions) -> Result<(Task, ColdStart)> {
    let task = Task::new(cell.task.clone(), cell.seed)?;
    let train_on = match cell.coldstart.device {
        Some(d) => d.device().context("key 'coldstart.device'")?,
        None => opts.device.clone(),
    };
    let cs = load_or_train(
        &cell.model,
        &task,
        &cell.coldstart,
        cell.seed,
        &train_on,
        &opts.cache_dir,
        &opts.progress,
    )?;
    Ok((task, cs.to_device(&opts.device)?))
}

/// The cell's teacher (`rl.teacher`), a cold start of its own preset and recipe from the same
/// cache, trained where the cell's cold start trains and handed over on the run's device.
fn teacher(cell: &CellConfig, task: &Task, opts: &RunOptions) -> Result<Option<Model>> {
    let Some(t) = &cell.rl.teacher else {
        return Ok(None);
    };
    let train_on = match t.coldstart.device.or(cell.coldstart.device) {
        Some(d) => d.device().context("key 'rl.teacher.coldstart.device'")?,
        None => opts.device.clone(),
    };
    let cs = load_or_train(
        &t.model(cell.model.vocab_size)?,
        task,
        &t.coldstart,
        t.seed_in(cell.seed),
        &train_on,
        &opts.cache_dir,
        &opts.progress,
    )
    .context("rl.teacher")?;
    Ok(Some(cs.to_device(&opts.device)?.model))
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
        resp_len_mean: out.resp_lens.iter().sum::<usize>() as f64
            / out.resp_lens.len().max(1) as f64,
        teacher_kl: crate::metrics::rows::teacher_kl(out),
        ..StepSignals::default()
    };
    for u in &out.updates {
        s.ratio_tok_max = s.ratio_tok_max.max(ratio_tok_max(&u.stats.ratio_tok));
        let masked = u.skip_reason.as_deref() == Some(crate::rl::step::ALL_MASKED);
        s.skipped.push(!u.applied && !masked);
        s.all_masked.push(masked);
        if u.applied {
            s.grad_norms.push(f64::from(u.grad_norm));
        }
    }
    s
}

/// Append one step's rows (step, updates, layers, events) to the frames, writing the book
/// (frames, then `status.json`) every `flush_every` steps of the cell unless it was written
/// less than `sink.gap` ago (each write rewrites the whole run's rows; the run's last write
/// always happens).
fn record_step(
    cell: &CellConfig,
    id: &CellId,
    out: &StepOutput,
    eval: Option<f64>,
    teacher_eval: Option<f64>,
    detector: &mut CollapseDetector,
    sink: &FrameSink,
) -> Result<f64> {
    let shape = Shape {
        k: cell.model.top_k,
        n_experts: cell.model.n_experts,
        moe: cell.model.is_moe(),
    };
    let measures = StepMeasures {
        teacher_eval,
        ..StepMeasures::of(out, shape)
    };
    let sig = signals(out, &measures);
    let events = detector.observe(&sig);
    let mut b = lock(sink.book);
    let f = &mut b.frames;
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
        for r in layer_rows(id, out.step, u, shape, &out.router_check) {
            f.layers.push(r)?;
        }
    }
    for r in length_rows(id, out) {
        f.lengths.push(r)?;
    }
    for r in prefix_rows(id, out) {
        f.prefixes.push(r)?;
    }
    for e in &events {
        f.events.push(event_row(id, e))?;
    }
    if (out.step + 1).is_multiple_of(cell.flush_every) {
        b.write_if_due(sink.dir, sink.gap)?;
    }
    Ok(sig.reward_mean)
}

/// One cell; on a GPU device its evaluations and steps run from this thread only (see
/// [`crate::util::parallel::serial_while`]).
fn run_cell(
    cell: &CellConfig,
    opts: &RunOptions,
    sink: &FrameSink,
    overall: &Stage,
) -> Result<CellStatus> {
    let _serial = crate::util::parallel::serial_off_host(&opts.device);
    let (task, cs) = cold_start(cell, opts)?;
    let (arm, seed) = (&cell.arm, cell.seed);
    let teacher = teacher(cell, &task, opts)?;
    let teacher_eval = teacher.as_ref().map(|m| greedy_eval(m, &task));
    let mut trainer = Trainer::new(cell.rl.clone(), cs.model, task, seed)
        .and_then(|t| match teacher {
            Some(m) => t.with_teacher(m),
            None => Ok(t),
        })
        .with_context(|| format!("arm '{arm}' seed {seed}"))?;
    let id = cell.id();
    let mut detector = CollapseDetector::new(cell.collapse.clone());
    let bar = opts.progress.stage(
        format!("cell {}/{arm} seed {seed}", cell.regime),
        cell.steps as u64,
        "steps",
        "{prefix:>10} {bar:30} {pos}/{len} {msg}",
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
        let reward = record_step(cell, &id, &out, eval, teacher_eval, &mut detector, sink)?;
        done = step + 1;
        bar.inc(1, Some(format!("reward {reward:.3}")));
        overall.inc(1, None);
        if let Some(f) = &opts.on_step {
            f(arm, seed, step);
        }
        if detector.collapsed {
            status = CellState::Collapsed;
            break;
        }
    }
    overall.inc((cell.steps - done) as u64, None);
    bar.finish(status.name());
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
