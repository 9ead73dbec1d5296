//! Faults a real run meets, on the binary: SIGKILL, SIGTERM and a double Ctrl-C keep every
//! finished cell (and `--resume` reruns only the others, ending with the frames of an
//! uninterrupted run); a second run into a busy folder fails at once; partial runs write their
//! own folder; a folder of another run is refused by name; a resume whose frames lost a
//! finished cell's rows is refused.

mod common;
use driftlab::experiment::ExperimentSpec;
use driftlab::experiment::merge::canonical;
use driftlab::experiment::resume::finished_statuses;
use driftlab::metrics::frames::{i64_col, str_col};
use driftlab::metrics::schema::frames;
use driftlab::util::io::read_parquet;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const STEPS: usize = 100;

const ARMS: &str = r#"
[[arms]]
name = "grpo"
algorithm = { kind = "grpo" }

[[arms]]
name = "gspo"
algorithm = { kind = "gspo" }

[[arms]]
name = "cispo"
algorithm = { kind = "cispo" }
"#;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("driftlab-faults-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The spec `fault_test` (3 arms × seeds 0, 1 × 100 steps on `tiny`) under `root/specs`, its
/// frames written every step unless written less than 0.3 s ago: mid-cell writes keep
/// resetting that clock, as a long cell's do in a real run.
fn write_spec(root: &Path) -> PathBuf {
    let specs = root.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    let text = common::tiny_spec_toml("fault_test", STEPS, 1, ARMS)
        .replace("flush_secs = 0\n", "flush_secs = 0.3\n");
    std::fs::write(specs.join("fault_test.toml"), text).unwrap();
    specs
}

/// `driftlab --threads 1 experiment fault_test --jobs 1 --out OUT EXTRA…`, run in `root`,
/// stderr into `log`.
fn driftlab(root: &Path, out: &Path, log: &Path, extra: &[&str]) -> Command {
    write_spec(root);
    common::experiment_cmd(root, "fault_test", out, log, extra)
}

/// Cells whose every step row is in `out`'s step frame.
fn complete_on_disk(out: &Path) -> usize {
    let Ok(df) = read_parquet(&out.join("steps.parquet")) else {
        return 0;
    };
    let (arm, seed) = (str_col(&df, "arm").unwrap(), i64_col(&df, "seed").unwrap());
    let mut n: BTreeMap<(String, i64), usize> = BTreeMap::new();
    for i in 0..df.height() {
        *n.entry((arm[i].clone(), seed[i])).or_insert(0) += 1;
    }
    n.values().filter(|&&k| k == STEPS).count()
}

/// Wait until `out`'s frames hold `k` complete cells; the run must still be going.
fn wait_for_cells(child: &mut Child, out: &Path, k: usize) {
    let t0 = Instant::now();
    while complete_on_disk(out) < k {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before {k} cells were on disk"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "no {k} cells in 5 minutes"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, sig) }, 0);
}

/// Every finished cell in status.json has all its step rows in the frames.
fn statuses_agree_with_frames(out: &Path) -> usize {
    let done = finished_statuses(out).unwrap();
    let df = read_parquet(&out.join("steps.parquet")).unwrap();
    let (arm, seed) = (str_col(&df, "arm").unwrap(), i64_col(&df, "seed").unwrap());
    for s in &done {
        let rows = (0..df.height())
            .filter(|&i| arm[i] == s.arm && seed[i] as u64 == s.seed)
            .count();
        assert_eq!(
            rows, s.steps_done,
            "{}/{}: status vs frame rows",
            s.arm, s.seed
        );
    }
    done.len()
}

/// `--resume` into `out` runs exactly `6 - kept` cells and ends with the frames of an
/// uninterrupted run.
fn resume_matches_a_whole_run(root: &Path, out: &Path, kept: usize) {
    let log = root.join("resume.log");
    let st = driftlab(root, out, &log, &["--resume"]).status().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(st.success(), "{text}");
    let started = text
        .lines()
        .filter(|l| l.starts_with("[driftlab] cell ") && l.contains(": started"))
        .count();
    assert_eq!(
        started,
        6 - kept,
        "only the unfinished cells ran again:\n{text}"
    );
    assert_eq!(finished_statuses(out).unwrap().len(), 6);
    let whole = root.join("whole");
    let st = driftlab(root, &whole, &root.join("whole.log"), &[])
        .status()
        .unwrap();
    assert!(st.success());
    let spec = ExperimentSpec::load(&root.join("specs/fault_test.toml")).unwrap();
    let cells = spec.resolve("flex").unwrap();
    for schema in frames() {
        let read = |d: &Path| {
            let df = read_parquet(&d.join(schema.file_name())).unwrap();
            common::without_timings(canonical(&df, schema, &cells).unwrap())
        };
        assert!(
            read(out).equals_missing(&read(&whole)),
            "{} differs from the uninterrupted run's",
            schema.name
        );
    }
}

#[test]
fn sigkill_keeps_every_cell_finished_before_the_last_write_and_resume_runs_only_the_rest() {
    let root = tmp("kill");
    let out = root.join("out");
    let mut child = driftlab(&root, &out, &root.join("first.log"), &[])
        .spawn()
        .unwrap();
    wait_for_cells(&mut child, &out, 3);
    // A write at most `flush_secs` (0.3 s) and a step after the third cell finished lists it
    // in status.json (killed the instant its rows are on disk, the status written right after
    // them may not be there yet). Allow 3 s; then kill, in the middle of a later cell.
    let t0 = Instant::now();
    while finished_statuses(&out).map_or(0, |v| v.len()) < 3 {
        assert!(
            t0.elapsed() < Duration::from_secs(3),
            "status.json lists {} cells 3 s after the frames held 3 complete ones",
            finished_statuses(&out).map_or(0, |v| v.len())
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before it could be killed"
    );
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let kept = statuses_agree_with_frames(&out);
    assert!(kept >= 3, "status.json lists {kept} cells after the kill");
    assert!(kept < 6, "killed after every cell finished");
    resume_matches_a_whole_run(&root, &out, kept);
    let _ = std::fs::remove_dir_all(&root);
}

/// A run of `fault_test` that got `signals` (30 ms apart: two signals sent together may arrive
/// as one, a pending signal is not queued twice) once its frames held `k` complete cells: its
/// root, its folder, how it exited and its log.
fn signalled(tag: &str, k: usize, signals: &[libc::c_int]) -> (PathBuf, PathBuf, i32, String) {
    let root = tmp(tag);
    let out = root.join("out");
    let log = root.join("first.log");
    let mut child = driftlab(&root, &out, &log, &[]).spawn().unwrap();
    wait_for_cells(&mut child, &out, k);
    for (i, &sig) in signals.iter().enumerate() {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(30));
        }
        signal(&child, sig);
    }
    let st = child.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    let code = st
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {st:?}\n{text}"));
    (root, out, code, text)
}

#[test]
fn sigterm_stops_after_the_current_step_writes_everything_and_exits_non_zero() {
    let (root, out, code, text) = signalled("term", 2, &[libc::SIGTERM]);
    assert_eq!(code, 1, "a stopped run exits 1:\n{text}");
    assert!(text.contains("interrupt"), "{text}");
    let kept = statuses_agree_with_frames(&out);
    assert!(kept >= 2, "status.json lists {kept} finished cells");
    // Every cell is listed: finished, stopped in its step, or stopped before it began.
    let all: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(out.join("status.json")).unwrap()).unwrap();
    assert_eq!(all.len(), 6, "{all:?}");
    assert!(
        out.join("report.md").exists(),
        "the report of a stopped run is written"
    );
    resume_matches_a_whole_run(&root, &out, kept);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_second_interrupt_writes_what_stands_and_quits_with_130() {
    let (root, out, code, text) = signalled("twice", 2, &[libc::SIGINT, libc::SIGINT]);
    assert_eq!(code, 130, "{text}");
    assert!(text.contains("second interrupt"), "{text}");
    let kept = statuses_agree_with_frames(&out);
    assert!(
        kept >= 2,
        "status.json lists {kept} finished cells:\n{text}"
    );
    resume_matches_a_whole_run(&root, &out, kept);
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_second_run_into_a_busy_folder_fails_at_once_naming_the_holder() {
    let root = tmp("busy");
    let out = root.join("out");
    let mut first = driftlab(&root, &out, &root.join("first.log"), &[])
        .spawn()
        .unwrap();
    wait_for_cells(&mut first, &out, 1);
    let log = root.join("second.log");
    let t0 = Instant::now();
    let st = driftlab(&root, &out, &log, &[]).status().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!st.success(), "{text}");
    assert!(
        text.contains("in use by another run") && text.contains(&first.id().to_string()),
        "{text}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "it failed at once");
    assert!(
        first.wait().unwrap().success(),
        "the first run is untouched"
    );
    assert_eq!(finished_statuses(&out).unwrap().len(), 6);
    assert!(!out.join(driftlab::util::lock::FOLDER_LOCK).exists());
    let _ = std::fs::remove_dir_all(&root);
}

/// `driftlab experiment fault_test EXTRA…` in `root` with no `--out`, after writing its spec.
fn default_out(root: &Path, log: &str, extra: &[&str]) -> (bool, String) {
    write_spec(root);
    run_in(root, log, &[&["--jobs", "1"], extra].concat())
}

/// `driftlab --threads 1 experiment fault_test EXTRA…` in `root` with the spec as it stands in
/// `root/specs`: whether it succeeded, and its stderr (kept in `root/LOG`).
fn run_in(root: &Path, log: &str, extra: &[&str]) -> (bool, String) {
    let st = Command::new(env!("CARGO_BIN_EXE_driftlab"))
        .current_dir(root)
        .args(["--threads", "1", "experiment", "fault_test"])
        .arg("--specs")
        .arg(root.join("specs"))
        .arg("--cache-dir")
        .arg(root.join("cache"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(root.join(log)).unwrap())
        .status()
        .unwrap();
    (
        st.success(),
        std::fs::read_to_string(root.join(log)).unwrap(),
    )
}

#[test]
fn partial_runs_write_their_own_folder_and_another_runs_folder_is_refused_by_key() {
    let root = tmp("folders");
    // The full run, then a quick and a selecting run: neither touches results/fault_test.
    let (ok, log) = default_out(
        &root,
        "full.log",
        &["--steps", "3", "--out", "results/fault_test"],
    );
    assert!(ok, "{log}");
    let full = root.join("results/fault_test");
    let before = std::fs::read(full.join("steps.parquet")).unwrap();
    let (ok, log) = default_out(&root, "quick.log", &["--quick", "--arms", "grpo"]);
    assert!(ok, "{log}");
    assert!(log.contains("results/fault_test-quick"), "{log}");
    assert!(root.join("results/fault_test-quick/report.md").exists());
    // A spec file's path works as well as a name.
    let file = root.join("specs/fault_test.toml");
    let st = Command::new(env!("CARGO_BIN_EXE_driftlab"))
        .current_dir(&root)
        .args(["--threads", "1", "experiment"])
        .arg(&file)
        .args([
            "--quick",
            "--arms",
            "gspo",
            "--jobs",
            "1",
            "--cache-dir",
            "cache",
        ])
        .args(["--out", "results/from-path"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        finished_statuses(&root.join("results/from-path")).unwrap()[0].arm,
        "gspo"
    );
    let (ok, log) = default_out(&root, "custom.log", &["--steps", "2", "--arms", "grpo"]);
    assert!(ok, "{log}");
    assert!(
        root.join("results/fault_test-custom/report.md").exists(),
        "{log}"
    );
    assert_eq!(std::fs::read(full.join("steps.parquet")).unwrap(), before);

    // A full run into a folder of other cells is refused, naming the first differing key.
    let (ok, log) = default_out(
        &root,
        "other.log",
        &["--steps", "4", "--out", "results/fault_test"],
    );
    assert!(!ok, "{log}");
    assert!(
        log.contains("holds a run of other cells")
            && log.contains("steps: 3 vs 4")
            && log.contains("--force"),
        "{log}"
    );
    assert_eq!(std::fs::read(full.join("steps.parquet")).unwrap(), before);
    // The same cells again are run (what the main command does to committed results) …
    let (ok, log) = default_out(
        &root,
        "same.log",
        &["--steps", "3", "--out", "results/fault_test"],
    );
    assert!(ok, "{log}");
    // … and --force replaces another run.
    let (ok, log) = default_out(
        &root,
        "force.log",
        &["--steps", "4", "--out", "results/fault_test", "--force"],
    );
    assert!(ok, "{log}");
    assert_eq!(finished_statuses(&full).unwrap()[0].steps_done, 4);

    // --resume names the key that changed.
    let (ok, log) = default_out(
        &root,
        "resume.log",
        &["--steps", "5", "--out", "results/fault_test", "--resume"],
    );
    assert!(
        !ok && log.contains("cannot resume") && log.contains("steps: 4 vs 5"),
        "{log}"
    );

    // A resume whose frames lost a finished cell's rows is refused, not resumed into an
    // empty frame.
    std::fs::remove_file(full.join("updates.parquet")).unwrap();
    let (ok, log) = default_out(
        &root,
        "lost.log",
        &["--steps", "4", "--out", "results/fault_test", "--resume"],
    );
    assert!(!ok && log.contains("updates.parquet is missing"), "{log}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn quick_forms_never_spend_a_studys_seeds_and_bad_seed_and_job_lists_are_refused() {
    let root = tmp("seeds");
    write_spec(&root);
    let specs = root.join("specs");
    let text = std::fs::read_to_string(specs.join("fault_test.toml"))
        .unwrap()
        .replace("seeds = [0, 1]", "seeds = [5, 6]\nquick_seeds = [0]");
    std::fs::write(specs.join("fault_test.toml"), &text).unwrap();
    let run = |log: &str, extra: &[&str]| run_in(&root, log, extra);
    let (ok, log) = run("quick.log", &["--quick", "--arms", "grpo", "--jobs", "1"]);
    assert!(ok, "{log}");
    let seeds: Vec<u64> = finished_statuses(&root.join("results/fault_test-quick"))
        .unwrap()
        .iter()
        .map(|s| s.seed)
        .collect();
    assert_eq!(seeds, [0], "the quick form ran the declared quick seed");
    // A quick seed that is a study seed is refused.
    std::fs::write(
        specs.join("fault_test.toml"),
        text.replace("quick_seeds = [0]", "quick_seeds = [6]"),
    )
    .unwrap();
    let (ok, log) = run("overlap.log", &["--quick"]);
    assert!(
        !ok && log.contains("quick_seeds") && log.contains("seed 6"),
        "{log}"
    );
    std::fs::write(specs.join("fault_test.toml"), &text).unwrap();
    let (ok, log) = run("twice.log", &["--seeds", "0,0"]);
    assert!(!ok && log.contains("seed 0 appears twice"), "{log}");
    let (ok, log) = run("jobs.log", &["--jobs", "0"]);
    assert!(!ok && log.contains("--jobs"), "{log}");
    let _ = std::fs::remove_dir_all(&root);
}

/// Every pre-registered spec in `experiments/` declares quick seeds outside its study seeds
/// (every regime's own list included), so no `--quick` form spends them.
#[test]
fn pre_registered_specs_declare_quick_seeds_outside_their_study() {
    let mut seen = 0;
    for e in std::fs::read_dir("experiments").unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.to_lowercase().contains("pre-regist") {
            continue;
        }
        seen += 1;
        let spec = ExperimentSpec::load(&path).unwrap();
        let quick = spec
            .quick_seeds
            .clone()
            .unwrap_or_else(|| panic!("{} declares no quick_seeds", path.display()));
        let mut study = spec.seeds.clone();
        for r in &spec.regimes {
            study.extend(r.seeds.clone().unwrap_or_default());
        }
        assert!(
            quick.iter().all(|s| !study.contains(s)),
            "{}: quick seeds {quick:?} overlap the study's",
            path.display()
        );
    }
    assert!(seen >= 3, "{seen} pre-registered specs");
}

/// The quick forms `.ci/run` runs, each as (spec name, its arguments after the name): the
/// lines that call `driftlab experiment NAME --quick`, and the entries of its loop over quick
/// forms (a quoted entry is one form, a bare word another), whose body runs `--quick` on each.
fn ci_quick_forms(script: &str) -> Vec<(String, Vec<String>)> {
    let mut forms = Vec::new();
    let words = |s: &str| -> (String, Vec<String>) {
        let mut w = s.split_whitespace().map(str::to_string);
        let name = w.next().unwrap_or_default();
        (name, w.collect())
    };
    for line in script.lines() {
        if let Some(rest) = line.split("driftlab experiment ").nth(1)
            && rest.contains("--quick")
            && !rest.starts_with("\"$@\"")
        {
            let cut = rest
                .find(" --out")
                .or(rest.find(" >"))
                .unwrap_or(rest.len());
            let (name, args) = words(&rest[..cut].replace("--quick", ""));
            forms.push((name, args));
        }
    }
    let joined = script.replace("\\\n", " ");
    for lp in joined.split("for name in ").skip(1) {
        let Some(end) = lp.find("; do") else { continue };
        let body = &lp[end..];
        assert!(
            body[..body.find("done").unwrap_or(body.len())]
                .contains("driftlab experiment \"$@\" --quick"),
            "the loop over {:?} does not run --quick forms",
            &lp[..end]
        );
        let mut list = &lp[..end];
        while !list.trim().is_empty() {
            list = list.trim_start();
            let (entry, rest) = if let Some(q) = list.strip_prefix('"') {
                let close = q.find('"').expect("a closed quote");
                (&q[..close], &q[close + 1..])
            } else {
                let sp = list.find(char::is_whitespace).unwrap_or(list.len());
                (&list[..sp], &list[sp..])
            };
            forms.push(words(entry));
            list = rest;
        }
    }
    forms
}

/// No quick form that CI runs (`.ci/run`) spends a study's seed: the seeds each one runs (its
/// `--seeds`, else its spec's `quick_seeds`, else the spec's first seed, as `--quick` picks
/// them) lie outside every study's seeds (specs pre-registered or on fresh seeds, or that
/// declare `quick_seeds`; every regime's own list included), and no two studies share a seed.
#[test]
fn ci_quick_forms_run_no_study_seed() {
    let mut study: BTreeMap<u64, String> = BTreeMap::new();
    let mut specs: BTreeMap<String, ExperimentSpec> = BTreeMap::new();
    for e in std::fs::read_dir("experiments").unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let spec = ExperimentSpec::load(&path).unwrap();
        let lower = text.to_lowercase();
        if lower.contains("pre-regist")
            || lower.contains("fresh seeds")
            || spec.quick_seeds.is_some()
        {
            let regimes = spec.regimes.iter().flat_map(|r| r.seeds.iter().flatten());
            let mine: std::collections::BTreeSet<u64> =
                spec.seeds.iter().chain(regimes).copied().collect();
            for s in mine {
                // No two studies share a seed: each draws its fresh seeds from a range of its own.
                if let Some(other) = study.insert(s, spec.name.clone()) {
                    panic!("seed {s} is a study seed of both {other} and {}", spec.name);
                }
            }
        }
        specs.insert(spec.name.clone(), spec);
    }
    for name in [
        "fix_leaderboard",
        "drift_scale",
        "token_noise",
        "stability_map",
        "opd",
        "c2_organic",
        "c8_confirm",
    ] {
        assert!(
            study.values().any(|n| n == name),
            "{name} is not read as a study"
        );
    }
    let forms = ci_quick_forms(&std::fs::read_to_string(".ci/run").unwrap());
    assert!(
        forms.len() >= 12,
        "{} quick forms read from .ci/run: {forms:?}",
        forms.len()
    );
    for name in [
        "moe_drift",
        "token_noise",
        "fix_leaderboard",
        "drift_scale",
        "stability_map",
    ] {
        assert!(
            forms.iter().any(|(n, _)| n == name),
            "{name}'s quick form not found in .ci/run"
        );
    }
    for (name, args) in &forms {
        let spec = specs
            .get(name)
            .unwrap_or_else(|| panic!(".ci/run runs {name}, which has no spec"));
        let seeds: Vec<u64> = match args.iter().position(|a| a == "--seeds") {
            Some(i) => args[i + 1]
                .split(',')
                .map(|s| s.parse().expect("a seed"))
                .collect(),
            None => spec
                .quick_seeds
                .clone()
                .unwrap_or_else(|| spec.seeds.iter().take(1).copied().collect()),
        };
        for s in seeds {
            if let Some(owner) = study.get(&s) {
                panic!(
                    ".ci/run's quick form `{name} {}` runs seed {s}, a seed of the study {owner}",
                    args.join(" ")
                );
            }
        }
    }
}

/// A small tmpfs mounted at a folder for one test, unmounted when dropped.
struct SmallDisk(PathBuf);

impl SmallDisk {
    /// A tmpfs of `bytes` at `dir`, or `None` (with the reason printed) where this machine
    /// does not let the test mount one.
    fn mount(dir: &Path, bytes: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}")])
            .arg("tmpfs")
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk(dir.to_path_buf())),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs here ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: no mount command ({e})");
                None
            }
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

fn frames_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".parquet"))
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn a_full_disk_fails_naming_the_file_and_keeps_every_cell_of_the_last_whole_write() {
    let root = tmp("disk");
    // The whole run's frames, to size a disk that fills in the middle of the run.
    let whole = root.join("sizing");
    let st = driftlab(&root, &whole, &root.join("sizing.log"), &["--steps", "25"])
        .status()
        .unwrap();
    assert!(st.success());
    let total = frames_bytes(&whole);
    // Every file takes whole 4 KiB pages on a tmpfs; a write needs the old file and its
    // replacement at once.
    let size = (total * 6 / 10).div_ceil(4096) * 4096 + 16 * 4096;
    let Some(disk) = SmallDisk::mount(&root.join("disk"), size) else {
        let _ = std::fs::remove_dir_all(&root);
        return;
    };
    let out = disk.0.join("out");
    let log = root.join("full.log");
    let st = driftlab(&root, &out, &log, &[]).status().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !st.success(),
        "the run filled {size} bytes and still succeeded:\n{text}"
    );
    assert!(
        text.contains("No space left") && (text.contains(".parquet") || text.contains(".json")),
        "the error names the file and the cause:\n{text}"
    );
    let kept = statuses_agree_with_frames(&out);
    assert!(kept < 6, "every cell finished on a full disk");
    let leftovers: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    // The folder, moved to a disk with room, resumes into the uninterrupted run's frames.
    let moved = root.join("moved");
    std::fs::create_dir_all(&moved).unwrap();
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, moved.join(p.file_name().unwrap())).unwrap();
    }
    drop(disk);
    resume_matches_a_whole_run(&root, &moved, kept);
    let _ = std::fs::remove_dir_all(&root);
}

/// Frames are written in canonical cell order: two cells at a time write the same rows in the
/// same order as one at a time (only the wall-clock columns differ), without any re-sorting by
/// the reader.
#[test]
fn frames_are_in_canonical_order_whatever_order_the_cells_finished_in() {
    let root = tmp("order");
    let (one, two) = (root.join("one"), root.join("two"));
    for (out, jobs) in [(&one, "1"), (&two, "2")] {
        let specs = write_spec(&root);
        let st = Command::new(env!("CARGO_BIN_EXE_driftlab"))
            .args([
                "--threads",
                "1",
                "experiment",
                "fault_test",
                "--steps",
                "10",
                "--jobs",
                jobs,
            ])
            .arg("--specs")
            .arg(&specs)
            .arg("--cache-dir")
            .arg(root.join("cache"))
            .arg("--out")
            .arg(out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success());
    }
    for schema in frames() {
        let read =
            |d: &Path| common::without_timings(read_parquet(&d.join(schema.file_name())).unwrap());
        assert!(
            read(&one).equals_missing(&read(&two)),
            "{}: the rows of --jobs 2 are not in --jobs 1's order",
            schema.name
        );
    }
    let _ = std::fs::remove_dir_all(&root);
}
