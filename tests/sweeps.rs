//! Sweeps beyond one process: shards merge to the unsharded run, merge refuses what does not
//! fit together, a killed run resumes with only its missing cells, concurrent cold starts make
//! one cache file, and a batch log gets plain progress lines.

mod common;
use driftlab::experiment::merge::{canonical, merge};
use driftlab::experiment::{ArmSpec, ExperimentSpec, RunOptions, Shard, run_experiment};
use driftlab::metrics::schema::frames;
use driftlab::model::FfnKind;
use driftlab::report::write_report;
use driftlab::rl::{Algorithm, GrpoConfig, GspoConfig, RoutingMode};
use driftlab::util::io::read_parquet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn spec(steps: usize) -> ExperimentSpec {
    common::tiny_experiment(
        steps,
        vec![
            ArmSpec::new(
                "grpo",
                Algorithm::Grpo(GrpoConfig::default()),
                RoutingMode::Native,
                FfnKind::Moe,
            ),
            ArmSpec::new(
                "gspo",
                Algorithm::Gspo(GspoConfig::default()),
                RoutingMode::Native,
                FfnKind::Moe,
            ),
        ],
    )
}

fn tmp(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("driftlab-sweeps-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// Every frame of `a` equals the frame of `b` once both are in canonical cell order.
fn assert_same_frames(a: &Path, b: &Path, cells: &[driftlab::experiment::CellConfig]) {
    for schema in frames() {
        let read = |d: &Path| {
            let df = read_parquet(&d.join(schema.file_name())).unwrap();
            canonical(&df, schema, cells).unwrap()
        };
        // Wall-clock columns (t_rollout, t_update, t_probe) are the one thing a rerun
        // cannot repeat.
        let (x, y) = (
            common::without_timings(read(a)),
            common::without_timings(read(b)),
        );
        assert!(
            x.height() > 0 || schema.name == "events",
            "{} is empty",
            schema.name
        );
        assert!(
            x.equals_missing(&y),
            "{} differs between {} and {}",
            schema.name,
            a.display(),
            b.display()
        );
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn edit_json(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(path, serde_json::to_vec(&v).unwrap()).unwrap();
}

fn opts(out: PathBuf, cache: &Path) -> RunOptions {
    let mut o = common::run_options("unused", cache.to_path_buf());
    o.out = out;
    o
}

#[test]
fn three_shards_merge_to_the_unsharded_run_and_merge_refuses_what_does_not_fit() {
    let root = tmp("merge");
    let cache = root.join("cache");
    let s = spec(3);
    let cells = s.resolve("flex").unwrap();
    run_experiment(&s, &opts(root.join("single"), &cache)).unwrap();
    write_report(&root.join("single")).unwrap();
    let sharded = root.join("sharded");
    for i in 0..3 {
        let sh = Shard { index: i, count: 3 };
        let mut o = opts(sh.dir(&sharded), &cache);
        o.shard = Some(sh);
        let st = run_experiment(&s, &o).unwrap();
        assert_eq!(
            st.len(),
            (0..cells.len()).filter(|&c| sh.selects(c)).count()
        );
    }
    // A shard in its committed form (`slim --shard`: cells grouped, compact codec, every
    // column kept) merges with the others as it was written.
    driftlab::report::slim::slim_shard(&Shard { index: 1, count: 3 }.dir(&sharded)).unwrap();
    let statuses = merge(&sharded).unwrap();
    assert_eq!(statuses.len(), cells.len());
    write_report(&sharded).unwrap();
    assert_same_frames(&root.join("single"), &sharded, &cells);
    for f in ["report.md", "summary.csv", "endpoints.json"] {
        assert_eq!(
            std::fs::read_to_string(root.join("single").join(f)).unwrap(),
            std::fs::read_to_string(sharded.join(f)).unwrap(),
            "{f} of the merged run differs from the unsharded run's"
        );
    }

    // Canonical order: cell 1 is default/grpo seed 1 (shard 1 of 3), cells 0 and 3 are shard 0's.
    let broken = |tag: &str, f: &dyn Fn(&Path)| {
        let d = root.join(tag);
        copy_dir(&sharded, &d);
        f(&d);
        format!("{:#}", merge(&d).unwrap_err())
    };
    let e = broken("missing", &|d| {
        std::fs::remove_dir_all(d.join("shards/1-of-3")).unwrap()
    });
    assert!(
        e.contains("finished in no shard") && e.contains("default/grpo seed 1"),
        "{e}"
    );
    let e = broken("twice", &|d| {
        copy_dir(&d.join("shards/0-of-3"), &d.join("shards/0-of-3-again"))
    });
    assert!(
        e.contains("present twice")
            && e.contains("default/grpo seed 0")
            && e.contains("default/gspo seed 1")
            && e.contains("0-of-3-again"),
        "{e}"
    );
    let e = broken("spec", &|d| {
        edit_json(&d.join("shards/2-of-3/config.json"), |v| {
            v["spec"]["steps"] = 99.into()
        })
    });
    assert!(
        e.contains("different specs") && e.contains("2-of-3") && e.contains("spec.steps: 3 vs 99"),
        "the merge names the key that differs: {e}"
    );
    let e = broken("version", &|d| {
        edit_json(&d.join("shards/1-of-3/config.json"), |v| {
            v["crate_version"] = "9.9.9".into()
        })
    });
    assert!(
        e.contains("different driftlab versions") && e.contains("9.9.9"),
        "{e}"
    );
    let e = broken("commit", &|d| {
        edit_json(&d.join("shards/1-of-3/config.json"), |v| {
            v["git_commit"] = "0123abc-dirty-feed".into()
        })
    });
    assert!(
        e.contains("different driftlab commits") && e.contains("1-of-3 0123abc-dirty-feed"),
        "{e}"
    );
    trimmed_shards_merge(&sharded, &root.join("trimmed"));
    let _ = std::fs::remove_dir_all(&root);
}

/// Shards trimmed to the budget (`slim --shard --keep updates.drift_expert_frac --without
/// layers`) still merge and report: the kept column as it was, the update frame's other metric
/// columns null, no layer rows; what may not be trimmed is refused by name.
fn trimmed_shards_merge(sharded: &Path, d: &Path) {
    use driftlab::report::slim::slim_shard_trimmed;
    copy_dir(sharded, d);
    let keep = [("updates".to_string(), "drift_expert_frac".to_string())];
    for i in 0..3 {
        let sh = Shard { index: i, count: 3 }.dir(d);
        slim_shard_trimmed(&sh, &keep, &["layers".to_string()]).unwrap();
        assert!(!sh.join("layers.parquet").exists());
    }
    merge(d).unwrap();
    write_report(d).unwrap();
    let full = read_parquet(&sharded.join("updates.parquet")).unwrap();
    let trimmed = read_parquet(&d.join("updates.parquet")).unwrap();
    assert!(
        full.column("drift_expert_frac")
            .unwrap()
            .equals_missing(trimmed.column("drift_expert_frac").unwrap())
    );
    assert_eq!(
        trimmed.column("loss_total").unwrap().null_count(),
        trimmed.height()
    );
    assert_eq!(full.width(), trimmed.width(), "the schema stays whole");
    let layers = d.join("layers.parquet");
    assert!(!layers.exists() || read_parquet(&layers).unwrap().height() == 0);
    let sh = Shard { index: 0, count: 3 }.dir(d);
    let err = |keep: &[(String, String)], without: &[String]| {
        format!("{:#}", slim_shard_trimmed(&sh, keep, without).unwrap_err())
    };
    let pair = |f: &str, c: &str| vec![(f.to_string(), c.to_string())];
    assert!(err(&[], &["steps".into()]).contains("--without steps"));
    assert!(err(&pair("updates", "seed"), &[]).contains("identifies rows"));
    assert!(err(&pair("update", "x"), &[]).contains("no frame 'update'"));
    assert!(err(&pair("updates", "nope"), &[]).contains("no column 'nope'"));
}

#[test]
fn two_processes_wanting_one_cold_start_train_it_once_and_leave_one_cache_file() {
    let dir = tmp("lock");
    let spawn = |tag: &str| {
        Command::new(env!("CARGO_BIN_EXE_driftlab"))
            .args([
                "--threads",
                "1",
                "coldstart",
                "--preset",
                "tiny",
                "--seed",
                "7",
            ])
            .args(["--min-len", "2", "--max-len", "5", "--max-steps", "150"])
            .args(["--target-accuracy", "2"])
            .arg("--cache-dir")
            .arg(&dir)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.with_extension(format!("{tag}.log"))).unwrap())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    let outs: Vec<String> = [a, b]
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success());
            String::from_utf8_lossy(&o.stdout).to_string()
        })
        .collect();
    let cached = outs.iter().filter(|o| o.contains("(from cache)")).count();
    assert_eq!(
        cached, 1,
        "one process trained, the other loaded its result: {outs:?}"
    );
    let logs: String = ["a", "b"]
        .iter()
        .map(|t| std::fs::read_to_string(dir.with_extension(format!("{t}.log"))).unwrap())
        .collect();
    assert!(
        logs.contains("is being trained by"),
        "the second process waited on the first's lock: {logs}"
    );
    // Both report the same accuracy: the loaded weights are the trained ones.
    let acc = |o: &str| o.split("sampled ").nth(1).map(|r| r[..5].to_string());
    assert_eq!(acc(&outs[0]), acc(&outs[1]));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    assert_eq!(
        files.len(),
        2,
        "one weights file and its metadata, no lock or temporaries: {files:?}"
    );
    assert!(
        files[0].ends_with(".bin") && files[1].ends_with(".json"),
        "{files:?}"
    );
    let cfg = common::tiny_cfg();
    let w = std::fs::read(dir.join(&files[0])).unwrap();
    driftlab::model::Weights::from_bytes(&cfg, &w, &common::flex()).expect("a valid cache file");
    let _ = std::fs::remove_dir_all(&dir);
}

const ARMS: &str = r#"
[[arms]]
name = "grpo"
algorithm = { kind = "grpo" }

[[arms]]
name = "gspo"
algorithm = { kind = "gspo" }
"#;

/// `driftlab --threads 1 experiment sweep_test --jobs 1` into `out`, stderr into `log`.
fn driftlab(root: &Path, out: &Path, log: &Path, extra: &[&str]) -> Command {
    let specs = root.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(
        specs.join("sweep_test.toml"),
        common::tiny_spec_toml("sweep_test", 25, 5, ARMS),
    )
    .unwrap();
    common::experiment_cmd(root, "sweep_test", out, log, extra)
}

fn finished(out: &Path) -> usize {
    driftlab::experiment::resume::finished_statuses(out)
        .map(|v| v.len())
        .unwrap_or(0)
}

#[test]
fn a_killed_run_resumes_with_only_its_missing_cells_and_logs_progress_lines() {
    let root = tmp("resume");
    let out = root.join("killed");
    let mut child = driftlab(&root, &out, &root.join("first.log"), &[])
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    // Kill in the middle of a cell: one finished, and the next one's first rows flushed.
    let rows = |out: &Path| {
        read_parquet(&out.join("steps.parquet"))
            .map(|d| d.height())
            .unwrap_or(0)
    };
    while finished(&out) == 0 || rows(&out) <= 25 * finished(&out) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it could be killed"
        );
        assert!(
            t0.elapsed().as_secs() < 300,
            "no cell finished in 5 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let kept = finished(&out);
    assert!(rows(&out) > 25 * kept, "the killed cell left partial rows");
    assert!((1..4).contains(&kept), "killed after {kept} of 4 cells");

    // A batch log (stderr a file) has plain progress lines for cold starts and cells.
    let first = std::fs::read_to_string(root.join("first.log")).unwrap();
    for want in [
        "[driftlab] cold start moe 2L seed 0: started",
        "[driftlab] cell default/grpo seed 0: started (25 steps at most)",
        "[driftlab] cell default/grpo seed 0: ok after 25 steps",
        "steps/s, elapsed",
    ] {
        assert!(first.contains(want), "'{want}' not in the log:\n{first}");
    }

    let st = driftlab(&root, &out, &root.join("resume.log"), &["--resume"])
        .status()
        .unwrap();
    assert!(st.success());
    let again = std::fs::read_to_string(root.join("resume.log")).unwrap();
    let kept_cells = driftlab::experiment::resume::finished_statuses(&out).unwrap();
    assert_eq!(kept_cells.len(), 4);
    let started = again
        .lines()
        .filter(|l| l.starts_with("[driftlab] cell ") && l.contains(": started"))
        .count();
    assert_eq!(
        started,
        4 - kept,
        "only the missing cells ran again:\n{again}"
    );
    let cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["resumed"], kept);
    // The folder names the commit the binary was built from (build.rs), which in a checkout is
    // HEAD as cargo built it here, not a later checkout's.
    if let Ok(o) = Command::new("git").args(["rev-parse", "HEAD"]).output()
        && o.status.success()
    {
        let head = String::from_utf8_lossy(&o.stdout).trim().to_string();
        let rec = cfg["git_commit"].as_str().expect("a commit is recorded");
        assert!(rec.starts_with(&head), "recorded {rec}, HEAD {head}");
    }
    // A folder written by another build is refused, and keeps its cells.
    edit_json(&out.join("config.json"), |v| {
        v["git_commit"] = "0123abc".into()
    });
    let st = driftlab(&root, &out, &root.join("other.log"), &["--resume"])
        .status()
        .unwrap();
    assert!(!st.success());
    let log = std::fs::read_to_string(root.join("other.log")).unwrap();
    assert!(
        log.contains("cannot resume") && log.contains("0123abc"),
        "{log}"
    );
    assert_eq!(
        driftlab::experiment::resume::finished_statuses(&out)
            .unwrap()
            .len(),
        4
    );

    let whole = root.join("whole");
    assert!(
        driftlab(&root, &whole, &root.join("whole.log"), &[])
            .status()
            .unwrap()
            .success()
    );
    let spec = ExperimentSpec::load(&root.join("specs/sweep_test.toml")).unwrap();
    assert_same_frames(&out, &whole, &spec.resolve("flex").unwrap());
    let _ = std::fs::remove_dir_all(&root);
}
