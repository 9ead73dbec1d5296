//! `report` checks a folder before it writes (frames, status.json and config.json hold the same
//! cells; partial cells are named and left out; a missing config.json needs a flag), and
//! `--device wgpu` names its adapter and refuses a software one without `--allow-software`.

mod common;
use driftlab::experiment::{ArmSpec, ExperimentSpec, RunOptions, run_experiment};
use driftlab::model::FfnKind;
use driftlab::report::write_report;
use driftlab::rl::{Algorithm, GrpoConfig, GspoConfig, RoutingMode};
use driftlab::util::io::{read_parquet, write_parquet};
use polars::prelude::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

const STEPS: usize = 4;

/// Two arms × two seeds of `STEPS` steps, named `prefix_grpo` and `prefix_gspo`.
fn spec(name: &str, prefix: &str) -> ExperimentSpec {
    let mut s = common::tiny_experiment(
        STEPS,
        vec![
            ArmSpec::new(
                &format!("{prefix}_grpo"),
                Algorithm::Grpo(GrpoConfig::default()),
                RoutingMode::R3,
                FfnKind::Moe,
            ),
            ArmSpec::new(
                &format!("{prefix}_gspo"),
                Algorithm::Gspo(GspoConfig::default()),
                RoutingMode::Native,
                FfnKind::Moe,
            ),
        ],
    );
    s.name = name.into();
    s
}

fn root() -> PathBuf {
    std::env::temp_dir().join(format!("driftlab-report-checks-{}", std::process::id()))
}

fn opts(tag: &str) -> RunOptions {
    let mut o = common::run_options("unused", root().join("cache"));
    o.out = root().join(tag);
    let _ = std::fs::remove_dir_all(&o.out);
    o
}

/// The finished run every check starts from (run once per test binary).
fn base() -> &'static Path {
    static BASE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BASE.get_or_init(|| {
        let o = opts("base");
        run_experiment(&spec("tiny_test", "a"), &o).unwrap();
        o.out
    })
}

/// A fresh copy of the base run's files (not its plots) in `tag`.
fn copy_of(tag: &str) -> PathBuf {
    let to = root().join(tag);
    let _ = std::fs::remove_dir_all(&to);
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(base()).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
        }
    }
    to
}

/// Rewrite `dir/<frame>.parquet` as `edit` makes it.
fn edit_frame(dir: &Path, frame: &str, edit: impl FnOnce(LazyFrame) -> LazyFrame) {
    let path = dir.join(format!("{frame}.parquet"));
    let mut df = edit(read_parquet(&path).unwrap().lazy()).collect().unwrap();
    write_parquet(&mut df, &path).unwrap();
}

fn report_error(dir: &Path) -> String {
    format!("{:#}", write_report(dir).expect_err("report must refuse"))
}

fn driftlab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_driftlab"))
        .args(args)
        .output()
        .unwrap()
}

/// The finished run reports, and its report has no banner.
#[test]
fn a_consistent_folder_reports_without_a_banner() {
    let dir = copy_of("clean");
    write_report(&dir).unwrap();
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(
        !md.contains("Interrupted run") && !md.contains("No config.json"),
        "{md}"
    );
}

/// After a full disk the frames disagree: steps.parquet holds every step, updates.parquet the
/// rows of an earlier flush. The report names the frame and the first cell.
#[test]
fn a_frame_written_at_another_time_is_an_error_naming_it() {
    let dir = copy_of("stale");
    edit_frame(&dir, "updates", |f| f.filter(col("step").lt(lit(2i64))));
    let e = report_error(&dir);
    assert!(e.contains("updates.parquet"), "{e}");
    assert!(e.contains("seed 0") && e.contains("end at step 1"), "{e}");
    assert!(e.contains("ran 4 steps"), "{e}");

    // A frame without one cell's rows at all.
    let dir = copy_of("lost_cell");
    edit_frame(&dir, "updates", |f| {
        f.filter(col("arm").neq(lit("a_gspo")).or(col("seed").neq(lit(1i64))))
    });
    let e = report_error(&dir);
    assert!(e.contains("updates.parquet"), "{e}");
    assert!(
        e.contains("holds no rows of cell default/a_gspo seed 1"),
        "{e}"
    );

    // The step frame against the status: fewer rows than the steps it says ran.
    let dir = copy_of("short_steps");
    edit_frame(&dir, "steps", |f| f.filter(col("step").neq(lit(1i64))));
    let e = report_error(&dir);
    assert!(
        e.contains("steps.parquet") && e.contains("3 rows of cell"),
        "{e}"
    );
}

/// Rows of a cell that neither status.json nor config.json knows (another run's frame), and
/// rows of another experiment, are errors naming the frame.
#[test]
fn another_runs_frame_is_an_error_naming_it() {
    let dir = copy_of("stranger");
    let path = dir.join("layers.parquet");
    let df = read_parquet(&path).unwrap();
    let stranger = df
        .clone()
        .lazy()
        .filter(col("arm").eq(lit("a_grpo")))
        .with_column(lit("stranger").alias("arm"))
        .collect()
        .unwrap();
    write_parquet(&mut df.vstack(&stranger).unwrap(), &path).unwrap();
    let e = report_error(&dir);
    assert!(e.contains("layers.parquet"), "{e}");
    assert!(e.contains("default/stranger seed 0"), "{e}");

    let dir = copy_of("other_experiment");
    edit_frame(&dir, "updates", |f| {
        f.with_column(lit("moe_drift").alias("experiment"))
    });
    let e = report_error(&dir);
    assert!(
        e.contains("updates.parquet") && e.contains("'moe_drift'"),
        "{e}"
    );
}

/// config.json of another experiment (its cells are not the frames' cells) is an error naming
/// it; so is a status.json that lacks one of config.json's cells (a run that did not end), and
/// a folder without status.json.
#[test]
fn another_experiments_config_is_an_error() {
    let other = opts("other");
    let mut s = spec("other_test", "b");
    s.steps = 1;
    s.seeds = vec![0];
    run_experiment(&s, &other).unwrap();
    let dir = copy_of("foreign_config");
    std::fs::copy(other.out.join("config.json"), dir.join("config.json")).unwrap();
    let e = report_error(&dir);
    assert!(e.contains("config.json"), "{e}");
    assert!(e.contains("default/a_grpo seed 0"), "{e}");

    let dir = copy_of("short_status");
    let path = dir.join("status.json");
    let mut st: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let gone = st.pop().unwrap();
    std::fs::write(&path, serde_json::to_string(&st).unwrap()).unwrap();
    let e = report_error(&dir);
    assert!(e.contains("no status in status.json"), "{e}");
    assert!(e.contains(&format!("seed {}", gone["seed"])), "{e}");

    std::fs::remove_file(&path).unwrap();
    let e = report_error(&dir);
    assert!(e.contains("status.json"), "{e}");
}

/// Without config.json `report` refuses (it would drop endpoints and change Holm's m
/// silently); `--allow-missing-config` reports with a banner.
#[test]
fn a_missing_config_is_an_error_unless_allowed() {
    let dir = copy_of("no_config");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    let d = dir.to_str().unwrap();
    let out = driftlab(&["report", d]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "report without config.json succeeded"
    );
    assert!(
        err.contains("config.json is missing") && err.contains("--allow-missing-config"),
        "{err}"
    );
    assert!(!dir.join("report.md").exists());

    let out = driftlab(&["report", d, "--allow-missing-config"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    let banner = md.lines().nth(2).unwrap_or_default();
    assert!(banner.starts_with("> **No config.json**"), "{md}");
}

/// A run stopped in its last cell: the report says which cell stopped where, and the summary
/// and endpoints use the three cells that reached their last step.
#[test]
fn an_interrupted_run_is_reported_as_such() {
    let mut o = opts("interrupted");
    let stop = o.stop.clone();
    let calls = std::sync::Arc::new(AtomicUsize::new(0));
    // One job: the cells run one after another; stop after the second step of the fourth.
    o.on_step = Some(Box::new(move |_, _, _| {
        if calls.fetch_add(1, Ordering::SeqCst) + 1 == 3 * STEPS + 2 {
            stop.store(true, Ordering::SeqCst);
        }
    }));
    let st = run_experiment(&spec("tiny_test", "a"), &o).unwrap();
    let stopped: Vec<_> = st.iter().filter(|s| s.status == "stopped").collect();
    assert_eq!(stopped.len(), 1, "{st:?}");
    assert_eq!(stopped[0].steps_done, 2);
    let name = format!("default/{} seed {}", stopped[0].arm, stopped[0].seed);
    write_report(&o.out).unwrap();
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    let want = format!(
        "> **Interrupted run**: 1 of 4 cells stopped before their last step: {name} (2 of 4 steps). The summary, endpoints and figures use the 3 cells that reached their last step only"
    );
    assert!(
        md.lines().nth(2).is_some_and(|l| l.starts_with(&want)),
        "{md}"
    );
    let sums: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(o.out.join("summary.json")).unwrap())
            .unwrap();
    let seeds = |arm: &str| {
        sums.iter()
            .find(|s| s["name"] == arm)
            .map(|s| s["seeds"].as_u64().unwrap())
    };
    assert_eq!(seeds(&stopped[0].arm), Some(1), "{sums:?}");
    let other = if stopped[0].arm == "a_grpo" {
        "a_gspo"
    } else {
        "a_grpo"
    };
    assert_eq!(seeds(other), Some(2));
}

/// `--device wgpu` on a software adapter is refused unless `--allow-software`; `wgpu-cpu`,
/// which asks for one, is not; a GPU adapter passes.
#[test]
fn a_software_adapter_is_refused_under_wgpu_unless_allowed() {
    use driftlab::device::{Adapter, DeviceChoice, check_adapter};
    let lavapipe = Adapter {
        name: "llvmpipe (LLVM 15.0.7, 256 bits)".into(),
        backend: "vulkan".into(),
        device_type: "cpu".into(),
        driver: "llvmpipe Mesa 22.3.6".into(),
        software: true,
    };
    let gpu = Adapter {
        name: "NVIDIA H100".into(),
        device_type: "discrete-gpu".into(),
        software: false,
        ..lavapipe.clone()
    };
    let e = format!(
        "{:#}",
        check_adapter(DeviceChoice::Wgpu, &lavapipe, false).unwrap_err()
    );
    assert!(
        e.contains("software adapter") && e.contains("--allow-software"),
        "{e}"
    );
    assert!(e.contains("llvmpipe"), "{e}");
    check_adapter(DeviceChoice::Wgpu, &lavapipe, true).unwrap();
    check_adapter(DeviceChoice::WgpuCpu, &lavapipe, false).unwrap();
    check_adapter(DeviceChoice::Wgpu, &gpu, false).unwrap();
    assert!(lavapipe.to_string().contains("software"));
    assert!(!gpu.to_string().contains("software"));
}

/// The binary prints the adapter it got, refuses a software one under `--device wgpu` and
/// records it in config.json. Needs a Vulkan driver (CI installs lavapipe); skipped without.
#[test]
fn the_wgpu_adapter_is_printed_checked_and_recorded() {
    let out = driftlab(&["--device", "wgpu-cpu", "schema"]);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() && err.contains("could not start") {
        eprintln!("skipped: no Vulkan driver here ({err})");
        return;
    }
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("device wgpu-cpu: adapter") && err.contains("software"),
        "{err}"
    );
    let gpu = driftlab(&["--device", "wgpu", "schema"]);
    let gpu_err = String::from_utf8_lossy(&gpu.stderr).to_string();
    assert!(gpu_err.contains("device wgpu: adapter"), "{gpu_err}");
    if gpu_err.contains("software") {
        assert!(
            !gpu.status.success() && gpu_err.contains("--allow-software"),
            "{gpu_err}"
        );
        let allowed = driftlab(&["--device", "wgpu", "--allow-software", "schema"]);
        assert!(
            allowed.status.success(),
            "{}",
            String::from_utf8_lossy(&allowed.stderr)
        );
    }
    // config.json records the adapter of a run.
    let device = driftlab::device::DeviceChoice::WgpuCpu.device().unwrap();
    let mut o = opts("wgpu_cpu");
    o.device = device;
    o.device_name = "wgpu-cpu".into();
    let mut s = spec("tiny_test", "a");
    s.steps = 1;
    s.seeds = vec![0];
    s.arms.truncate(1);
    run_experiment(&s, &o).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(o.out.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["adapter"]["software"], true, "{}", cfg["adapter"]);
    assert!(
        cfg["adapter"]["name"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
    );
}

/// A flex run's config.json has no adapter.
#[test]
fn a_flex_run_records_no_adapter() {
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(base().join("config.json")).unwrap())
            .unwrap();
    assert!(cfg.get("adapter").is_none());
    assert_eq!(cfg["device"], "flex");
}

/// A committed form that keeps only some arms' update rows says so in config.json's
/// `rows_kept`: the report then accepts the other arms' cells missing from that frame, and
/// still refuses a kept arm's cell that is missing.
#[test]
fn rows_kept_lets_a_frame_leave_out_the_arms_it_names_not_kept() {
    let dir = copy_of("rows_kept");
    edit_frame(&dir, "updates", |f| f.filter(col("arm").eq(lit("a_grpo"))));
    assert!(report_error(&dir).contains("holds no rows of cell default/a_gspo"));
    let path = dir.join("config.json");
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    cfg["rows_kept"] = serde_json::json!({ "updates": ["a_grpo"] });
    std::fs::write(&path, serde_json::to_string(&cfg).unwrap()).unwrap();
    write_report(&dir).expect("the left-out arm is declared");
    // A kept arm's cell missing is still a failed write.
    edit_frame(&dir, "updates", |f| f.filter(col("seed").neq(lit(1i64))));
    let e = report_error(&dir);
    assert!(
        e.contains("holds no rows of cell default/a_grpo seed 1"),
        "{e}"
    );
}
