//! `driftlab slurm NAME --shards n`: a Slurm job array that runs experiment NAME one shard per
//! task (`--shard $SLURM_ARRAY_TASK_ID/n --resume`), and a merge job that runs once every task
//! ended (and names the cells a failed task left missing). The scripts go to `<out>/slurm/`;
//! `--submit` hands them to `sbatch`.

use super::experiment::{self, ExperimentArgs};
use crate::device::DeviceArgs;
use crate::util::io::{DEFAULT_CACHE_DIR, write_atomic, write_json};
use anyhow::{Context, Result, bail};
use clap::Parser;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct SlurmArgs {
    /// Experiment name (experiments/<name>.toml).
    pub name: String,
    /// Array tasks, one shard each.
    #[arg(long, default_value_t = 4)]
    pub shards: usize,
    /// Output folder of the merged run (default results/<name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    #[arg(long, default_value = "experiments")]
    pub specs: PathBuf,
    /// Cold-start cache, shared by the tasks (on a cluster: a shared file system).
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// An extra `#SBATCH` option for both jobs, e.g. --sbatch=--partition=cpu
    /// --sbatch=--time=02:00:00 (repeatable).
    #[arg(long = "sbatch", allow_hyphen_values = true)]
    pub sbatch: Vec<String>,
    /// CPUs per task (the task's `--threads`).
    #[arg(long, default_value_t = 1)]
    pub cpus_per_task: usize,
    /// Submit with sbatch (else only write the scripts and print the commands).
    #[arg(long)]
    pub submit: bool,
    /// Arguments for every task's `driftlab experiment`, after `--` (e.g. -- --steps 50).
    #[arg(last = true)]
    pub experiment_args: Vec<String>,
}

/// A task's command line as the binary reads it: the options of every command, then
/// `experiment` with its arguments (checked before the job is queued).
#[derive(Parser)]
#[command(name = "driftlab")]
struct TaskLine {
    #[command(flatten)]
    _global: DeviceArgs,
    #[command(subcommand)]
    command: TaskCommand,
}

#[derive(clap::Subcommand)]
enum TaskCommand {
    Experiment(ExperimentArgs),
}

/// `s` quoted for a POSIX shell.
fn sh(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-=,:+@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn absolute(p: &Path) -> Result<PathBuf> {
    let p = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    // `#SBATCH` lines are not shell-parsed: a path with spaces or `%` would be cut or expanded.
    let s = p.to_string_lossy();
    if s.chars().any(|c| c.is_whitespace() || c == '%') {
        bail!("{s}: Slurm scripts need paths without spaces or '%'");
    }
    Ok(p)
}

/// The two scripts, as (array, merge).
pub struct Scripts {
    pub array: String,
    pub merge: String,
}

struct Paths {
    bin: PathBuf,
    cwd: PathBuf,
    out: PathBuf,
    specs: PathBuf,
    cache: PathBuf,
}

fn scripts(a: &SlurmArgs, p: &Paths) -> Scripts {
    let n = a.shards;
    let logs = p.out.join("slurm");
    let extra: String = a.sbatch.iter().map(|o| format!("#SBATCH {o}\n")).collect();
    let head = |job: &str, log: &str| {
        format!(
            "#!/bin/bash\n#SBATCH --job-name={job}\n#SBATCH --ntasks=1\n#SBATCH --output={}\n\
             #SBATCH --chdir={}\n{extra}",
            logs.join(log).display(),
            p.cwd.display()
        )
    };
    let args: Vec<String> = a.experiment_args.iter().map(|s| sh(s)).collect();
    let array = format!(
        "{}#SBATCH --array=0-{}\n#SBATCH --cpus-per-task={}\n\
         # driftlab {}: experiment '{}', shard $SLURM_ARRAY_TASK_ID of {n}.\n\
         # Resubmitting this script resumes: cells a shard finished are kept.\n\
         set -euo pipefail\n\
         exec {} --threads {} experiment {} --specs {} --cache-dir {} --out {} \\\n  \
         --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --resume --jobs 1{}\n",
        head(
            &format!("driftlab-{}", a.name),
            &format!("shard-%a-of-{n}.log")
        ),
        n - 1,
        a.cpus_per_task,
        env!("CARGO_PKG_VERSION"),
        a.name,
        sh(&p.bin.to_string_lossy()),
        a.cpus_per_task,
        sh(&a.name),
        sh(&p.specs.to_string_lossy()),
        sh(&p.cache.to_string_lossy()),
        sh(&p.out.to_string_lossy()),
        args.iter().map(|s| format!(" {s}")).collect::<String>()
    );
    let merge = format!(
        "{}#SBATCH --cpus-per-task=1\n\
         # driftlab: merge the {n} shards of '{}' into one results folder, then report.\n\
         set -euo pipefail\nexec {} --threads 1 merge {}\n",
        head(&format!("driftlab-{}-merge", a.name), "merge.log"),
        a.name,
        sh(&p.bin.to_string_lossy()),
        sh(&p.out.to_string_lossy())
    );
    Scripts { array, merge }
}

/// The job id `sbatch --parsable` printed (`id` or `id;cluster`).
fn sbatch(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .context("running sbatch (is Slurm installed and this a submit host?)")?;
    if !out.status.success() {
        bail!(
            "sbatch {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        bail!("sbatch printed no job id: '{}'", text.trim());
    }
    Ok(id)
}

pub fn run(a: &SlurmArgs) -> Result<()> {
    anyhow::ensure!(a.shards >= 1, "--shards must be at least 1");
    anyhow::ensure!(a.cpus_per_task >= 1, "--cpus-per-task must be at least 1");
    // The tasks' arguments are checked here, not an hour later in a queue.
    let mut argv: Vec<String> = ["driftlab", "experiment", &a.name]
        .iter()
        .map(|s| s.to_string())
        .collect();
    argv.extend(a.experiment_args.iter().cloned());
    let line = TaskLine::try_parse_from(&argv)
        .map_err(|e| anyhow::anyhow!("the arguments after `--`: {e}"))?;
    for bad in [
        "--shard",
        "--out",
        "--resume",
        "--specs",
        "--cache-dir",
        "--jobs",
        "--threads",
    ] {
        if a.experiment_args.iter().any(|x| x.starts_with(bad)) {
            bail!("{bad} is set by `driftlab slurm` itself; give it to `slurm`, not after `--`");
        }
    }
    let TaskCommand::Experiment(mut e) = line.command;
    e.specs = a.specs.clone();
    let spec = experiment::spec(&e)?;
    let cells = spec.cells().len();
    if a.shards > cells {
        eprintln!(
            "warning: {} shards for {cells} cells: {} tasks will have nothing to run",
            a.shards,
            a.shards - cells
        );
    }
    let out = absolute(
        &a.out
            .clone()
            .unwrap_or_else(|| PathBuf::from("results").join(&a.name)),
    )?;
    let paths = Paths {
        bin: std::env::current_exe().context("locating the driftlab binary")?,
        cwd: absolute(&std::env::current_dir()?)?,
        specs: absolute(&a.specs)?,
        cache: absolute(&a.cache_dir)?,
        out,
    };
    let dir = paths.out.join("slurm");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let s = scripts(a, &paths);
    let (array, merge) = (dir.join("array.sbatch"), dir.join("merge.sbatch"));
    write_atomic(&array, s.array.as_bytes())?;
    write_atomic(&merge, s.merge.as_bytes())?;
    if !a.submit {
        println!(
            "wrote {} and {}; submit with:\n  jid=$(sbatch --parsable {})\n  sbatch --dependency=afterany:$jid {}",
            array.display(),
            merge.display(),
            array.display(),
            merge.display()
        );
        return Ok(());
    }
    let array_id = sbatch(&[&array.to_string_lossy()])?;
    // afterany: the merge runs even when a task failed, and its log names the missing cells.
    let dep = format!("--dependency=afterany:{array_id}");
    let merge_id = sbatch(&[&dep, &merge.to_string_lossy()])?;
    write_json(
        &dir.join("jobs.json"),
        &serde_json::json!({"array": array_id, "merge": merge_id, "shards": a.shards}),
    )?;
    println!(
        "submitted array job {array_id} ({} tasks, {cells} cells) and merge job {merge_id} \
         (after every task ended); follow with `squeue -j {array_id},{merge_id}`, logs in {}",
        a.shards,
        dir.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_run_one_shard_per_task_and_quote_their_arguments() {
        let a = SlurmArgs {
            name: "moe_drift".into(),
            shards: 3,
            out: None,
            specs: "experiments".into(),
            cache_dir: DEFAULT_CACHE_DIR.into(),
            sbatch: vec!["--partition=cpu".into()],
            cpus_per_task: 2,
            submit: false,
            experiment_args: vec![
                "--seeds".into(),
                "0,1".into(),
                "--arms".into(),
                "a b".into(),
            ],
        };
        let p = Paths {
            bin: "/opt/driftlab".into(),
            cwd: "/w".into(),
            out: "/w/results/x".into(),
            specs: "/w/experiments".into(),
            cache: "/w/results/.cache".into(),
        };
        let s = scripts(&a, &p);
        assert!(s.array.contains("#SBATCH --array=0-2\n"), "{}", s.array);
        assert!(s.array.contains("#SBATCH --partition=cpu\n"));
        assert!(
            s.array
                .contains("--shard \"$SLURM_ARRAY_TASK_ID/3\" --resume")
        );
        assert!(s.array.contains("--threads 2 experiment moe_drift"));
        assert!(
            s.array.contains(" --seeds 0,1 --arms 'a b'\n"),
            "{}",
            s.array
        );
        assert!(
            s.array
                .contains("#SBATCH --output=/w/results/x/slurm/shard-%a-of-3.log")
        );
        assert!(
            s.merge
                .contains("exec /opt/driftlab --threads 1 merge /w/results/x\n")
        );
        assert!(s.merge.contains("#SBATCH --partition=cpu\n"));
        assert_eq!(sh("it's"), r"'it'\''s'");
    }
}
