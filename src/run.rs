//! Carries out a parsed command.

use crate::cli::{Cli, ColdstartArgs, Command, ExperimentArgs};
use crate::coldstart::{ColdStartConfig, load_or_train, train};
use crate::experiment::{ExperimentSpec, RunOptions, run_experiment};
use crate::model::{FfnKind, ModelConfig};
use crate::report::write_report;
use crate::task::{Task, TaskConfig, Tokenizer};
use anyhow::{Context, Result, bail};
use burn::tensor::Device;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Every `*.toml` in `dir` with its parsed spec (or the parse error).
pub fn list_specs(dir: &Path) -> Result<Vec<(String, Result<ExperimentSpec>)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading experiment folder {}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "toml") {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            out.push((name, ExperimentSpec::load(&path)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The spec `experiments/<name>.toml`; an unknown name lists the known ones.
pub fn find_spec(dir: &Path, name: &str) -> Result<ExperimentSpec> {
    let path = dir.join(format!("{name}.toml"));
    if !path.exists() {
        let names: Vec<String> = list_specs(dir)?.into_iter().map(|(n, _)| n).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        bail!(
            "{} (no {})",
            crate::names::unknown("experiment", name, &refs),
            path.display()
        );
    }
    ExperimentSpec::load(&path)
}

pub fn run(cli: Cli) -> Result<()> {
    // Cells in parallel use one thread each: small models use two cores better that way than by
    // threading inside tiny ops (measured; see README).
    let jobs = match &cli.command {
        Command::Experiment(a) => a
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        _ => 1,
    };
    let threads = cli.threads.or((jobs > 1).then_some(1));
    if let Some(n) = threads {
        anyhow::ensure!(n >= 1, "--threads must be at least 1");
        rayon_threads(n)?;
    }
    let device = cli.device.device()?;
    let device_name = cli.device.to_string();
    match cli.command {
        Command::Coldstart(a) => coldstart(&device, a),
        Command::Bench {
            reps,
            layer_only,
            rl,
            preset,
        } => crate::bench::run(&device, reps, layer_only, rl, preset),
        Command::Learn(args) => crate::learn::run(&device, &args),
        Command::Experiment(a) => experiment(device, device_name, jobs, a),
        Command::Check {
            update,
            baseline,
            specs,
            cache_dir,
            junit,
        } => {
            let spec = find_spec(&specs, "check")?;
            let out = std::env::temp_dir().join(format!("driftlab-check-{}", std::process::id()));
            let opts = RunOptions {
                jobs: 1,
                out: out.clone(),
                device,
                device_name,
                cache_dir,
                progress: crate::progress::Progress::Hidden,
                shard: None,
                resume: false,
                stop: Arc::new(AtomicBool::new(false)),
                on_step: None,
            };
            let result = crate::check::check(&spec, &opts, &baseline, update, junit.as_deref());
            let _ = std::fs::remove_dir_all(&out);
            println!("{}", result?);
            Ok(())
        }
        Command::List { specs } => {
            for (name, spec) in list_specs(&specs)? {
                println!(
                    "{name:<16} {}",
                    spec.map(|s| s.description)
                        .unwrap_or_else(|e| format!("(invalid: {e:#})"))
                );
            }
            Ok(())
        }
        Command::Schema => {
            println!("{}", crate::metrics::schema::to_json()?);
            Ok(())
        }
        Command::Merge { dir } => {
            let statuses = crate::experiment::merge::merge(&dir)?;
            let sums = write_report(&dir)?;
            println!(
                "merged {} cells into {}; wrote {} ({} arms)",
                statuses.len(),
                dir.display(),
                dir.join("report.md").display(),
                sums.len()
            );
            Ok(())
        }
        Command::Slurm(a) => crate::slurm::run(&a),
        Command::Slim { dir } => {
            let (before, after) = crate::report::slim::slim(&dir)?;
            println!(
                "slimmed {}: frames {:.2} MB -> {:.2} MB",
                dir.display(),
                before as f64 / 1e6,
                after as f64 / 1e6
            );
            Ok(())
        }
        Command::Report { dir } => {
            let sums = write_report(&dir)?;
            println!(
                "wrote {} ({} arms)",
                dir.join("report.md").display(),
                sums.len()
            );
            Ok(())
        }
    }
}

/// `driftlab coldstart`: train (or load) one cold start and print its accuracy.
fn coldstart(device: &Device, a: ColdstartArgs) -> Result<()> {
    let mut model_cfg = ModelConfig::preset(a.preset, Tokenizer.vocab_size())?;
    if a.dense {
        model_cfg.ffn = FfnKind::Dense;
    }
    let task_cfg = TaskConfig {
        kind: a.task,
        min_len: a.min_len,
        max_len: a.max_len,
        ..TaskConfig::default()
    };
    let t = Task::new(task_cfg, a.seed)?;
    let mut cs = ColdStartConfig::for_preset(a.preset);
    if let Some(x) = a.target_accuracy {
        cs.target_accuracy = x;
    }
    if let Some(s) = a.max_steps {
        cs.max_steps = s;
    }
    if let Some(b) = a.batch_size {
        cs.batch_size = b;
    }
    if let Some(lr) = a.lr {
        cs.lr = lr;
    }
    if let Some(e) = a.eval_every {
        cs.eval_every = e;
    }
    let started = std::time::Instant::now();
    let mp = crate::progress::Progress::auto();
    let out = if a.no_cache {
        train(&model_cfg, &t, &cs, a.seed, device, &mp)?
    } else {
        load_or_train(&model_cfg, &t, &cs, a.seed, device, &a.cache_dir, &mp)?
    };
    println!(
        "cold start {}/{} seed {}: {} steps, eval accuracy sampled {:.3}, greedy {:.3}, {:.1}s{}",
        a.preset,
        a.task,
        a.seed,
        out.steps,
        out.accuracy.sampled,
        out.accuracy.greedy,
        started.elapsed().as_secs_f64(),
        if out.from_cache { " (from cache)" } else { "" }
    );
    Ok(())
}

/// The spec of `driftlab experiment` with the command line's overrides applied.
pub fn experiment_spec(a: &ExperimentArgs) -> Result<ExperimentSpec> {
    let mut spec = find_spec(&a.specs, &a.name)?;
    if a.quick {
        let first = spec.seeds.iter().take(1).copied().collect();
        spec.set_seeds(first);
        spec.steps = 15;
        spec.eval_every = 5;
    }
    if let Some(s) = a.steps {
        spec.steps = s;
    }
    if let Some(s) = &a.seeds {
        spec.set_seeds(s.clone());
    }
    if let Some(p) = a.preset {
        spec.preset = p;
    }
    if let Some(draw) = a.ulp_jitter {
        spec.coldstart.insert("ulp_jitter".into(), draw.into());
    }
    if let Some(arms) = &a.arms {
        spec.select_arms(arms)?;
    }
    if let Some(r) = &a.regime {
        spec.select_regimes(r)?;
    }
    spec.validate().context("after command-line overrides")?;
    Ok(spec)
}

/// `driftlab experiment`: run every cell, then the report; Ctrl-C stops after the current step.
fn experiment(device: Device, device_name: String, jobs: usize, a: ExperimentArgs) -> Result<()> {
    let spec = experiment_spec(&a)?;
    let root = a
        .out
        .clone()
        .unwrap_or_else(|| std::path::PathBuf::from("results").join(&spec.name));
    let out = a.shard.map_or(root.clone(), |s| s.dir(&root));
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let _ = ctrlc::set_handler(move || {
        if flag.swap(true, Ordering::SeqCst) {
            std::process::exit(130);
        }
        eprintln!(
            "\ninterrupt: finishing the current step, then flushing and reporting (Ctrl-C again to quit now)"
        );
    });
    let opts = RunOptions {
        jobs,
        out: out.clone(),
        device,
        device_name,
        cache_dir: a.cache_dir.clone(),
        progress: crate::progress::Progress::auto(),
        shard: a.shard,
        resume: a.resume,
        stop: stop.clone(),
        on_step: None,
    };
    let started = std::time::Instant::now();
    let statuses = run_experiment(&spec, &opts)?;
    // A shard's report would cover a slice of the cells; the merged folder gets the report.
    if a.shard.is_none() {
        write_report(&out)?;
    }
    for s in &statuses {
        println!(
            "{:>10} {:>14} seed {}: {} after {} steps",
            s.regime, s.arm, s.seed, s.status, s.steps_done
        );
    }
    match a.shard {
        None => println!(
            "wrote {} ({:.0}s)",
            out.join("report.md").display(),
            started.elapsed().as_secs_f64()
        ),
        Some(s) => println!(
            "shard {s} wrote {} ({:.0}s); when every shard is done: driftlab merge {}",
            out.display(),
            started.elapsed().as_secs_f64(),
            root.display()
        ),
    }
    if stop.load(Ordering::SeqCst) {
        bail!(
            "interrupted: the data computed so far is in {}",
            out.display()
        );
    }
    Ok(())
}

fn rayon_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| anyhow::anyhow!("could not size the thread pool: {e}"))
}
