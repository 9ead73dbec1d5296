//! Carries out a parsed command.

use crate::cli::{Cli, Command};
use crate::coldstart::{ColdStartConfig, load_or_train, train};
use crate::experiment::{ExperimentSpec, RunOptions, run_experiment};
use crate::model::{FfnKind, ModelConfig};
use crate::report::write_report;
use crate::task::{Task, TaskConfig, TaskKind, Tokenizer};
use anyhow::{Context, Result, bail};
use indicatif::MultiProgress;
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
            "unknown experiment '{name}' (no {}); known: {}{}",
            path.display(),
            refs.join(", "),
            crate::util::suggest(name, &refs)
        );
    }
    ExperimentSpec::load(&path)
}

pub fn run(cli: Cli) -> Result<()> {
    // Cells in parallel use one thread each: small models use two cores better that way than by
    // threading inside tiny ops (measured; see README).
    let jobs = match &cli.command {
        Command::Experiment { jobs, .. } => {
            jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        }
        _ => 1,
    };
    let threads = cli.threads.or((jobs > 1).then_some(1));
    if let Some(n) = threads {
        anyhow::ensure!(n >= 1, "--threads must be at least 1");
        rayon_threads(n)?;
    }
    let device = cli.device.device()?;
    match cli.command {
        Command::Coldstart {
            preset,
            task,
            seed,
            min_len,
            max_len,
            target_accuracy,
            max_steps,
            dense,
            no_cache,
            cache_dir,
        } => {
            let mut model_cfg = ModelConfig::preset(&preset, Tokenizer.vocab_size())?;
            if dense {
                model_cfg.ffn = FfnKind::Dense;
            }
            let task_cfg = TaskConfig {
                kind: TaskKind::parse(&task)?,
                min_len,
                max_len,
                ..TaskConfig::default()
            };
            let t = Task::new(task_cfg, seed)?;
            let mut cs = ColdStartConfig::default();
            if let Some(a) = target_accuracy {
                cs.target_accuracy = a;
            }
            if let Some(s) = max_steps {
                cs.max_steps = s;
            }
            let started = std::time::Instant::now();
            let out = if no_cache {
                train(
                    &model_cfg,
                    &t,
                    &cs,
                    seed,
                    &device,
                    Some(&MultiProgress::new()),
                )?
            } else {
                load_or_train(
                    &model_cfg,
                    &t,
                    &cs,
                    seed,
                    &device,
                    &cache_dir,
                    Some(&MultiProgress::new()),
                )?
            };
            println!(
                "cold start {preset}/{task} seed {seed}: {} steps, eval accuracy sampled {:.3}, greedy {:.3}, {:.1}s{}",
                out.steps,
                out.accuracy.sampled,
                out.accuracy.greedy,
                started.elapsed().as_secs_f64(),
                if out.from_cache { " (from cache)" } else { "" }
            );
            Ok(())
        }
        Command::Bench {
            reps,
            layer_only,
            rl,
        } => crate::bench::run(&device, reps, layer_only, rl),
        Command::Learn(args) => crate::learn::run(&device, &args),
        Command::Experiment {
            name,
            regime,
            jobs: _,
            steps,
            seeds,
            preset,
            out,
            quick,
            arms,
            specs,
            cache_dir,
        } => {
            let mut spec = find_spec(&specs, &name)?;
            if quick {
                spec.seeds.truncate(1);
                spec.steps = 15;
                spec.eval_every = 5;
            }
            if let Some(s) = steps {
                spec.steps = s;
            }
            if let Some(s) = seeds {
                spec.seeds = s;
            }
            if let Some(p) = preset {
                spec.preset = p;
            }
            if let Some(a) = arms {
                spec.select_arms(&a)?;
            }
            if let Some(r) = regime {
                spec.select_regimes(&r)?;
            }
            spec.validate().context("after command-line overrides")?;
            let out = out.unwrap_or_else(|| std::path::PathBuf::from("results").join(&spec.name));
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
                device_name: cli.device.to_string(),
                cache_dir,
                show_progress: true,
                stop: stop.clone(),
                on_step: None,
            };
            let started = std::time::Instant::now();
            let statuses = run_experiment(&spec, &opts)?;
            write_report(&out)?;
            for s in &statuses {
                println!(
                    "{:>10} {:>14} seed {}: {} after {} steps",
                    s.regime, s.arm, s.seed, s.status, s.steps_done
                );
            }
            println!(
                "wrote {} ({:.0}s)",
                out.join("report.md").display(),
                started.elapsed().as_secs_f64()
            );
            if stop.load(Ordering::SeqCst) {
                bail!(
                    "interrupted: the data computed so far is in {}",
                    out.display()
                );
            }
            Ok(())
        }
        Command::Check {
            update,
            baseline,
            specs,
            cache_dir,
        } => {
            let spec = find_spec(&specs, "check")?;
            let out = std::env::temp_dir().join(format!("driftlab-check-{}", std::process::id()));
            let opts = RunOptions {
                jobs: 1,
                out: out.clone(),
                device,
                device_name: cli.device.to_string(),
                cache_dir,
                show_progress: false,
                stop: Arc::new(AtomicBool::new(false)),
                on_step: None,
            };
            let result = crate::check::check(&spec, &opts, &baseline, update);
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

fn rayon_threads(n: usize) -> Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .map_err(|e| anyhow::anyhow!("could not size the thread pool: {e}"))
}
