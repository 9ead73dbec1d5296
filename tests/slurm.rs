//! A real Slurm cluster: `driftlab slurm --submit` runs a tiny experiment as a 3-task job array
//! plus a dependent merge job; the merged frames equal a single-process run of the same spec.
//! `.ci/run` starts a one-node cluster and sets DRIFTLAB_SLURM=1, which makes this test
//! mandatory; elsewhere it runs when `squeue` answers and is skipped (saying why) when not.

mod common;
use driftlab::experiment::ExperimentSpec;
use driftlab::experiment::merge::canonical;
use driftlab::util::io::read_parquet;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const ARMS: &str = r#"
[[arms]]
name = "grpo_r3"
algorithm = { kind = "grpo" }
routing = "r3"

[[arms]]
name = "gspo"
algorithm = { kind = "gspo" }
"#;

fn squeue_answers() -> Result<(), String> {
    match Command::new("squeue").arg("-h").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr).trim().to_string()),
        Err(e) => Err(format!("no squeue: {e}")),
    }
}

fn logs(dir: &Path) -> String {
    let mut s = String::new();
    for e in std::fs::read_dir(dir.join("slurm"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "log") {
            s += &format!(
                "--- {}\n{}\n",
                e.path().display(),
                std::fs::read_to_string(e.path()).unwrap_or_default()
            );
        }
    }
    s
}

#[test]
fn a_three_task_job_array_and_its_merge_equal_one_process() {
    if let Err(why) = squeue_answers() {
        assert!(
            std::env::var_os("DRIFTLAB_SLURM").is_none(),
            "DRIFTLAB_SLURM is set but Slurm does not answer: {why}"
        );
        eprintln!("skipped: no Slurm cluster answers here ({why}); `.ci/run` starts one");
        return;
    }
    let root = std::env::temp_dir().join(format!("driftlab-slurm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let specs = root.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(
        specs.join("slurm_test.toml"),
        common::tiny_spec_toml("slurm_test", 4, 2, ARMS),
    )
    .unwrap();
    let bin = env!("CARGO_BIN_EXE_driftlab");
    let (sharded, single, cache) = (
        root.join("sharded"),
        root.join("single"),
        root.join("cache"),
    );
    let t0 = Instant::now();
    let out = Command::new(bin)
        .args(["slurm", "slurm_test", "--shards", "3", "--submit"])
        .arg("--specs")
        .arg(&specs)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--out")
        .arg(&sharded)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let jobs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(sharded.join("slurm/jobs.json")).unwrap()).unwrap();
    let merge_id = jobs["merge"].as_str().unwrap().to_string();
    let array_id = jobs["array"].as_str().unwrap().to_string();
    loop {
        let q = Command::new("squeue")
            .args(["-h", "-j", &format!("{array_id},{merge_id}")])
            .output()
            .unwrap();
        if q.status.success() && q.stdout.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "jobs still queued after 10 minutes:\n{}\n{}",
            String::from_utf8_lossy(&q.stdout),
            logs(&sharded)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "slurm: array of 3 tasks and its merge took {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        sharded.join("report.md").exists(),
        "the merge job wrote no report:\n{}",
        logs(&sharded)
    );
    for i in 0..3 {
        assert!(
            sharded
                .join(format!("shards/{i}-of-3/config.json"))
                .exists()
        );
    }

    let st = Command::new(bin)
        .args(["--threads", "1", "experiment", "slurm_test", "--jobs", "1"])
        .arg("--specs")
        .arg(&specs)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--out")
        .arg(&single)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let cells = ExperimentSpec::load(&specs.join("slurm_test.toml"))
        .unwrap()
        .resolve("flex")
        .unwrap();
    for schema in driftlab::metrics::schema::frames() {
        let read = |d: &Path| {
            canonical(
                &read_parquet(&d.join(schema.file_name())).unwrap(),
                schema,
                &cells,
            )
            .unwrap()
        };
        assert!(
            common::without_timings(read(&sharded))
                .equals_missing(&common::without_timings(read(&single))),
            "{} of the Slurm run differs from the single process's",
            schema.name
        );
    }
    assert_eq!(
        std::fs::read_to_string(sharded.join("summary.csv")).unwrap(),
        std::fs::read_to_string(single.join("summary.csv")).unwrap()
    );
    let _ = std::fs::remove_dir_all(&root);
}
