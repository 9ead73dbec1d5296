//! `driftlab check`: passes against the committed baseline, fails loudly on a perturbed copy,
//! and invariants that hold whatever the baseline.

mod common;
use driftlab::check::{Baseline, check, compare, measure};
use driftlab::experiment::{ExperimentSpec, RunOptions};
use std::path::Path;

fn opts(tag: &str) -> RunOptions {
    common::run_options(
        &format!("check-{tag}"),
        Path::new(driftlab::util::io::DEFAULT_CACHE_DIR).into(),
    )
}

#[test]
fn check_passes_on_main_and_fails_on_a_perturbed_baseline() {
    let spec = ExperimentSpec::load(Path::new("experiments/check.toml")).unwrap();
    let base_path = Path::new("results/baselines/check.json");
    let o = opts("pass");
    let msg = check(&spec, &o, base_path, false, None)
        .expect("check passes against the committed baseline");
    assert!(msg.contains("check passed"));

    // Perturb a copy: one drift value beyond its tolerance, one clip fraction within it.
    let mut base: Baseline =
        serde_json::from_str(&std::fs::read_to_string(base_path).unwrap()).unwrap();
    let d = base
        .arms
        .get_mut("grpo")
        .unwrap()
        .get_mut("drift_expert_frac")
        .unwrap();
    *d *= 1.5;
    let c = base
        .arms
        .get_mut("gspo")
        .unwrap()
        .get_mut("clip_frac_tok")
        .unwrap();
    *c *= 1.001;
    let copy = o.out.with_extension("baseline.json");
    std::fs::write(&copy, serde_json::to_string(&base).unwrap()).unwrap();
    let o2 = opts("fail");
    let junit = o2.out.with_extension("junit.xml");
    let err = format!(
        "{:#}",
        check(&spec, &o2, &copy, false, Some(&junit)).unwrap_err()
    );
    // The JUnit report parses as XML and marks the perturbed metric, and only it, as failed.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let doc = roxmltree::Document::parse(&xml).expect("check --junit writes well-formed XML");
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a testsuite element");
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(
        suite.attribute("tests"),
        Some(cases.len().to_string().as_str())
    );
    assert!(cases.len() > 10);
    let failed: Vec<_> = cases
        .iter()
        .filter(|c| c.children().any(|f| f.has_tag_name("failure")))
        .collect();
    assert_eq!(suite.attribute("failures"), Some("1"));
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].attribute("classname"), Some("check.grpo"));
    assert_eq!(failed[0].attribute("name"), Some("drift_expert_frac"));
    let msg = failed[0]
        .children()
        .find(|f| f.has_tag_name("failure"))
        .and_then(|f| f.attribute("message"))
        .unwrap();
    assert!(
        msg.contains("measured") && msg.contains("baseline"),
        "{msg}"
    );
    assert!(
        err.contains("REGRESSED") && err.contains("drift_expert_frac") && err.contains("grpo"),
        "{err}"
    );
    assert!(
        !err.contains("clip_frac_tok"),
        "a move within tolerance is not reported: {err}"
    );
    for p in [&o.out, &o2.out, &copy, &junit] {
        let _ = std::fs::remove_dir_all(p);
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn invariants_that_hold_whatever_the_baseline() {
    let spec = ExperimentSpec::load(Path::new("experiments/check.toml")).unwrap();
    let o = opts("inv");
    let (m, _) = measure(&spec, &o).unwrap();
    assert!(
        m["gspo"]["clip_frac_tok"] > m["grpo"]["clip_frac_tok"],
        "GSPO's token-weighted clip fraction exceeds GRPO's"
    );
    assert_eq!(
        m["dense"]["drift_expert_frac"], 0.0,
        "the dense control has no expert drift"
    );
    assert!(m["grpo"]["drift_expert_frac"] > 0.0);
    // A missing arm or metric is a failure, not a silent pass.
    let base = Baseline {
        experiment: "check".into(),
        device: None,
        tolerances: driftlab::check::tolerances(),
        arms: m.clone(),
    };
    let mut fewer = m.clone();
    fewer.remove("gspo");
    assert!(
        compare(&base, &fewer)
            .iter()
            .any(|r| !r.ok && r.arm == "gspo")
    );
    assert!(compare(&base, &m).iter().all(|r| r.ok));
    let _ = std::fs::remove_dir_all(&o.out);
}

/// Each device is compared with its own baseline: flex's is `check.json`, wgpu-cpu's (the
/// software Vulkan CI has) `check-wgpu-cpu.json`; a run on one device refuses the other's record
/// before running anything.
#[test]
fn wgpu_cpu_passes_against_its_own_baseline_and_refuses_flex_s() {
    use driftlab::commands::check::baseline_for;
    let spec = ExperimentSpec::load(Path::new("experiments/check.toml")).unwrap();
    assert_eq!(
        baseline_for("flex"),
        Path::new("results/baselines/check.json")
    );
    let mut o = opts("wgpu-cpu");
    o.device = driftlab::device::DeviceChoice::WgpuCpu
        .device()
        .expect("wgpu-cpu needs a software Vulkan (mesa-vulkan-drivers); .ci/run installs it");
    o.device_name = "wgpu-cpu".into();
    let err = format!(
        "{:#}",
        check(&spec, &o, &baseline_for("flex"), false, None).unwrap_err()
    );
    assert!(err.contains("measured on device 'flex'"), "{err}");
    assert!(!o.out.exists(), "refused before running: {err}");
    let own = baseline_for("wgpu-cpu");
    assert_eq!(own, Path::new("results/baselines/check-wgpu-cpu.json"));
    // The run repeats bit for bit on wgpu-cpu (one submitting thread per step, lavapipe on the
    // submitting thread: `parallel::serial_while`, `device::wgpu`), so no rerun.
    let msg = check(&spec, &o, &own, false, None)
        .expect("check on wgpu-cpu passes against its own baseline");
    assert!(msg.contains("check passed"));
    let _ = std::fs::remove_dir_all(&o.out);
}
