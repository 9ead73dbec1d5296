//! Validation before any compute: every non-finite float of a spec, the `[collapse]` and
//! `[coldstart]` ranges, duplicate seeds, the task's sequence length against the model's, and
//! each cell's estimated memory against the machine's, each refused with the key it concerns.

mod common;

use driftlab::experiment::memory::{check_cells_fit, machine_memory};
use driftlab::experiment::{ExperimentSpec, list_specs};
use driftlab::model::{FfnKind, ModelConfig, Preset, Weights};
use driftlab::rl::{Algorithm, RoutingMode};
use std::path::Path;
use std::process::{Command, Stdio};

/// Bytes in a GiB.
const GIB: u64 = 1 << 30;

const ARMS: &str = "[[arms]]\nname = \"grpo\"\nalgorithm = { kind = \"grpo\" }\n";

/// The tiny test spec with the line `line` (`key = value`) set in the table `at` (a header
/// such as `[rl]`, replacing the key's line there if the table has it, adding the table at the
/// end if the spec has none; an empty `at` puts the line at the top).
fn spec_with(at: &str, line: &str) -> String {
    let text = common::tiny_spec_toml("x", 4, 2, ARMS);
    if at.is_empty() {
        return format!("{line}\n{text}");
    }
    let header = format!("\n{at}\n");
    let Some(start) = text.find(&header).map(|i| i + header.len()) else {
        return format!("{text}\n{at}\n{line}\n");
    };
    let end = text[start..].find("\n\n").map_or(text.len(), |i| start + i);
    let key = format!("{} =", line.split('=').next().unwrap().trim());
    let mut table: Vec<&str> = text[start..end].lines().collect();
    table.retain(|l| !l.starts_with(&key));
    table.push(line);
    format!("{}{}{}", &text[..start], table.join("\n"), &text[end..])
}

/// The error of loading `text` as `experiments/x.toml`, with its chain.
fn load_err(text: &str) -> String {
    match ExperimentSpec::from_toml(text, "experiments/x.toml") {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn the_tiny_spec_loads() {
    ExperimentSpec::from_toml(&spec_with("", ""), "x.toml").unwrap();
}

/// Why 4: NaN and infinity passed validation, trained, and left a `config.json` that never
/// parsed again (serde_json writes them as null); `[coldstart] aux_coef = nan` named neither
/// the key nor NaN, `lr = nan` printed a Debug dump of the optimizer settings.
#[test]
fn every_non_finite_float_is_refused_naming_its_key_path_and_value() {
    let grpo =
        |kv: &str| format!("[[arms]]\nname = \"grpo\"\nalgorithm = {{ kind = \"grpo\", {kv} }}\n");
    let cases: Vec<(String, &str)> = vec![
        (
            spec_with("[rl]", "aux_coef = inf"),
            "key 'rl.aux_coef' = inf",
        ),
        (spec_with("[rl]", "z_coef = -inf"), "key 'rl.z_coef' = -inf"),
        (
            spec_with("[rl]", "optimizer = { lr = nan }"),
            "key 'rl.optimizer.lr' = nan",
        ),
        (
            spec_with("[rl]", "optimizer = { router_lr_mult = inf }"),
            "key 'rl.optimizer.router_lr_mult' = inf",
        ),
        (
            spec_with("[rl]", "optimizer = { weight_decay = inf }"),
            "key 'rl.optimizer.weight_decay' = inf",
        ),
        (
            spec_with("[rl]", "tis = { cap = inf }"),
            "key 'rl.tis.cap' = inf",
        ),
        (
            spec_with("[collapse]", "ratio_max = nan"),
            "key 'collapse.ratio_max' = nan",
        ),
        (
            spec_with("[coldstart]", "aux_coef = nan"),
            "key 'coldstart.aux_coef' = nan",
        ),
        (
            common::tiny_spec_toml("x", 4, 2, &grpo("kl_beta = inf")),
            "key 'arms[0].algorithm.kl_beta' = inf",
        ),
        (
            common::tiny_spec_toml("x", 4, 2, &grpo("eps_high = inf")),
            "key 'arms[0].algorithm.eps_high' = inf",
        ),
        (
            common::tiny_spec_toml(
                "x",
                4,
                2,
                &format!(
                    "{ARMS}[[regimes]]\nname = \"r\"\nrl = {{ optimizer = {{ lr = nan }} }}\n"
                ),
            ),
            "key 'regimes[0].rl.optimizer.lr' = nan",
        ),
        (
            common::tiny_spec_toml(
                "x",
                4,
                2,
                &format!("{ARMS}[[regimes]]\nname = \"r\"\ncoldstart = {{ lr = inf }}\n"),
            ),
            "key 'regimes[0].coldstart.lr' = inf",
        ),
    ];
    for (text, want) in cases {
        let e = load_err(&text);
        assert!(
            e.starts_with("experiments/x.toml")
                && e.contains(want)
                && e.contains("must be a finite number"),
            "want {want:?}, got: {e}"
        );
        assert!(!e.contains("AdamWConfig {"), "a Debug dump: {e}");
    }
}

/// A spec built in code (no TOML) holds its floats as typed fields: resolving it names the
/// field, before any range check could misreport a NaN.
#[test]
fn a_spec_built_in_code_names_its_non_finite_field() {
    let arm = driftlab::experiment::ArmSpec::new(
        "grpo",
        Algorithm::all_defaults().remove(0),
        RoutingMode::Native,
        FfnKind::Moe,
    );
    let mut s = common::tiny_experiment(2, vec![arm]);
    s.rl.optimizer.lr = f64::NAN;
    let e = format!("{:#}", s.resolve("flex").unwrap_err());
    assert!(e.contains("key 'rl.optimizer.lr' = nan"), "{e}");
    assert!(!e.contains("AdamWConfig {"), "{e}");
    let mut s = common::tiny_experiment(2, s.arms.clone());
    s.collapse.grad_spike = f64::INFINITY;
    let e = format!("{:#}", s.validate().unwrap_err());
    assert!(e.contains("key 'collapse.grad_spike' = inf"), "{e}");
}

/// Why 6: `[collapse]` and `[coldstart]` were not range-checked (`max_steps = 0` ran RL from
/// the random initial model).
#[test]
fn collapse_and_coldstart_ranges_name_the_key_and_the_allowed_range() {
    let cases = [
        (
            "[coldstart]",
            "max_steps = 0",
            "coldstart.max_steps = 0: must be at least 1",
        ),
        (
            "[coldstart]",
            "lr = -1.0",
            "coldstart.lr = -1: must be a finite number > 0",
        ),
        (
            "[coldstart]",
            "aux_coef = -0.5",
            "coldstart.aux_coef = -0.5: must be a finite number >= 0",
        ),
        (
            "[coldstart]",
            "target_accuracy = -0.1",
            "coldstart.target_accuracy = -0.1: must be a finite number >= 0",
        ),
        (
            "[collapse]",
            "non_finite_stop = 0",
            "collapse.non_finite_stop = 0: must be at least 1",
        ),
        (
            "[collapse]",
            "reward_patience = 0",
            "collapse.reward_patience = 0: must be at least 1",
        ),
        (
            "[collapse]",
            "expert_patience = 0",
            "collapse.expert_patience = 0: must be at least 1",
        ),
        (
            "[collapse]",
            "reward_ema = 1.0",
            "collapse.reward_ema = 1: must be in [0, 1)",
        ),
        (
            "[collapse]",
            "reward_drop = 1.5",
            "collapse.reward_drop = 1.5: must be in [0, 1]",
        ),
        (
            "[collapse]",
            "reward_min_max = -0.1",
            "collapse.reward_min_max = -0.1: must be in [0, 1]",
        ),
        (
            "[collapse]",
            "entropy_drop = 2.0",
            "collapse.entropy_drop = 2: must be in [0, 1]",
        ),
        (
            "[collapse]",
            "extreme_frac = -1.0",
            "collapse.extreme_frac = -1: must be in [0, 1]",
        ),
        (
            "[collapse]",
            "expert_min_load = 3.0",
            "collapse.expert_min_load = 3: must be in [0, 1]",
        ),
        (
            "[collapse]",
            "ratio_max = 0.5",
            "collapse.ratio_max = 0.5: must be a finite number of at least 1",
        ),
        (
            "[collapse]",
            "grad_spike = 0.0",
            "collapse.grad_spike = 0: must be a finite number of at least 1",
        ),
    ];
    for (at, line, want) in cases {
        let e = load_err(&spec_with(at, line));
        assert!(e.contains(want), "{line}: want {want:?}, got: {e}");
    }
    // A regime's own cold start is checked too, and named.
    let text = common::tiny_spec_toml(
        "x",
        4,
        2,
        &format!("{ARMS}[[regimes]]\nname = \"short\"\ncoldstart = {{ max_steps = 0 }}\n"),
    );
    let e = load_err(&text);
    assert!(
        e.contains("regime 'short'") && e.contains("coldstart.max_steps = 0"),
        "{e}"
    );
    // The edges of each range are allowed (target_accuracy above 1 disables the early stop).
    for (at, line) in [
        ("[coldstart]", "max_steps = 1"),
        ("[coldstart]", "target_accuracy = 2.0"),
        ("[collapse]", "reward_ema = 0.0"),
        ("[collapse]", "reward_drop = 1.0"),
        ("[collapse]", "ratio_max = 1.0"),
        ("[collapse]", "expert_min_load = 0.0"),
    ] {
        ExperimentSpec::from_toml(&spec_with(at, line), "x.toml")
            .unwrap_or_else(|e| panic!("{line}: {e:#}"));
    }
}

/// Why 6: `seeds = [0, 0]` and `--seeds 0,0` ran every cell twice.
#[test]
fn duplicate_seeds_are_refused_naming_the_seed() {
    let e = load_err(&spec_with("", "").replace("seeds = [0, 1]", "seeds = [0, 1, 0]"));
    assert!(
        e.contains("key 'seeds'") && e.contains("seed 0 appears twice"),
        "{e}"
    );
    let text = common::tiny_spec_toml(
        "x",
        4,
        2,
        &format!("{ARMS}[[regimes]]\nname = \"r\"\nseeds = [4, 5, 5]\n"),
    );
    let e = load_err(&text);
    assert!(
        e.contains("regime 'r', key 'seeds'") && e.contains("seed 5 appears twice"),
        "{e}"
    );
    // `--seeds` replaces every list with its own: the check after the overrides sees it.
    let mut s = ExperimentSpec::from_toml(&spec_with("", ""), "x.toml").unwrap();
    s.set_seeds(vec![3, 3]);
    let e = format!("{:#}", s.validate().unwrap_err());
    assert!(e.contains("seed 3 appears twice"), "{e}");
}

/// Why 6: a `max_seq_len` shorter than the task needs panicked in the cold start (exit 101).
#[test]
fn a_model_shorter_than_the_task_is_refused_before_the_cold_start() {
    // sort, max_len 5: prompt S + 5 digits + = (7), answer 5 digits + <eos> (6).
    let e = load_err(&spec_with("", "").replace("[rl]", "[model]\nmax_seq_len = 12\n\n[rl]"));
    assert!(
        e.contains("model.max_seq_len = 12")
            && e.contains("needs 13 tokens")
            && e.contains("task.max_len"),
        "{e}"
    );
    let exact = spec_with("", "").replace("[rl]", "[model]\nmax_seq_len = 13\n\n[rl]");
    ExperimentSpec::from_toml(&exact, "x.toml").unwrap();
    // A regime's longer task against the preset's 160 positions: add with 64 digits needs
    // 131 + 66 = 197.
    let text = common::tiny_spec_toml(
        "x",
        4,
        2,
        &format!("{ARMS}[[regimes]]\nname = \"long\"\ntask = {{ kind = \"add\", max_len = 64 }}\n"),
    );
    let e = load_err(&text);
    assert!(
        e.contains("regime 'long'") && e.contains("needs 197 tokens") && e.contains("160"),
        "{e}"
    );
}

/// Why 6: `d_model = 65536` or `batch_prompts = 4000000` aborted on an allocation (exit 134).
#[test]
fn a_cell_too_large_for_the_machine_is_refused_with_its_estimate_and_knobs() {
    let huge = [
        spec_with("", "").replace("[rl]", "[model]\nd_model = 65536\n\n[rl]"),
        spec_with("", "").replace("batch_prompts = 4", "batch_prompts = 4000000"),
    ];
    for text in &huge {
        // Resolving alone (what `report` does with a recorded spec) does not look at memory...
        let doc: ExperimentSpec = toml::from_str(text).unwrap();
        let cells = doc.resolve("").unwrap();
        // ...the check does, naming the cell, the estimate, the memory and the knobs.
        let e = format!("{:#}", check_cells_fit(&cells, 24 * GIB).unwrap_err());
        assert!(
            e.contains("regime 'default', arm 'grpo', seed 0")
                && e.contains("this machine has 24.0 GiB")
                && e.contains("d_model = ")
                && e.contains("batch_prompts = ")
                && e.contains("GiB"),
            "{e}"
        );
        // Loading the spec checks against this machine's memory, before any compute.
        if machine_memory().is_some() {
            let e = load_err(text);
            assert!(
                e.contains("needs about") && e.contains("this machine has"),
                "{e}"
            );
        }
    }
    let doc: ExperimentSpec = toml::from_str(&huge[0]).unwrap();
    let e = doc.resolve("").unwrap()[0].memory_estimate();
    assert!(
        e.weights > e.activations && e.weights > 100.0 * GIB as f64,
        "{e:?}"
    );
    let doc: ExperimentSpec = toml::from_str(&huge[1]).unwrap();
    let e = doc.resolve("").unwrap()[0].memory_estimate();
    assert!(
        e.activations > e.weights && e.activations > 100.0 * GIB as f64,
        "{e:?}"
    );
}

/// No committed spec, at its own preset or at `deep` or `medium`, is refused on a 24 GiB
/// machine; every one loads (on this machine) and resolves.
#[test]
fn every_committed_spec_resolves_and_fits_24_gib_at_every_large_preset() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let specs = list_specs(&dir).unwrap();
    assert!(specs.len() >= 10, "{}", specs.len());
    for (name, spec) in specs {
        let spec = spec.unwrap_or_else(|e| panic!("{name}: {e:#}"));
        for preset in [None, Some(Preset::Deep), Some(Preset::Medium)] {
            let mut s = spec.clone();
            if let Some(p) = preset {
                s.preset = p;
            }
            let cells = s
                .resolve("")
                .unwrap_or_else(|e| panic!("{name} at {preset:?}: {e:#}"));
            check_cells_fit(&cells, 24 * GIB)
                .unwrap_or_else(|e| panic!("{name} at {preset:?}: {e:#}"));
        }
    }
}

/// The estimate sits above what a step was measured to hold, within a small factor: the peak
/// RSS of `bench --rl` (sort 4-16, B 16, G 8, N 4; docs/speed.md) was 857 MiB at `deep` and
/// 5.3 GiB at `medium`.
#[test]
fn the_estimate_is_above_the_measured_peak_rss_within_a_factor_of_two() {
    for (preset, measured_gib) in [("deep", 857.0 / 1024.0), ("medium", 5.3)] {
        let text = format!(
            "name = 'x'\ndescription = 'd'\npreset = '{preset}'\nseeds = [0]\nsteps = 1\n{ARMS}"
        );
        let s: ExperimentSpec = toml::from_str(&text).unwrap();
        let gib = s.resolve("").unwrap()[0].memory_estimate().total() / GIB as f64;
        assert!(
            gib > measured_gib && gib < 2.0 * measured_gib,
            "{preset}: estimate {gib:.2} GiB, measured {measured_gib:.2} GiB"
        );
    }
}

/// The parameter count from the sizes alone equals the allocated weights' count.
#[test]
fn the_parameter_count_from_the_sizes_matches_the_weights() {
    let base = common::tiny_cfg();
    let shapes = [
        base.clone(),
        ModelConfig {
            shared_expert: true,
            ..base.clone()
        },
        ModelConfig {
            ffn: FfnKind::Dense,
            ..base.clone()
        },
        ModelConfig {
            n_layers: 3,
            n_experts: 6,
            top_k: 3,
            d_ff: 24,
            ..base
        },
    ];
    for cfg in shapes {
        let w = Weights::init(&cfg, 0, &common::flex());
        assert_eq!(cfg.num_params(), w.num_params() as u128, "{cfg:?}");
    }
}

/// Through the binary: `--seeds 0,0` and a too-short `max_seq_len` end at once with exit 1
/// and the key named, before a cold start (old builds ran every cell twice, or panicked with
/// exit 101).
#[test]
fn the_binary_refuses_before_any_compute() {
    let root = std::env::temp_dir().join(format!("driftlab-validation-{}", std::process::id()));
    let specs = root.join("specs");
    std::fs::create_dir_all(&specs).unwrap();
    std::fs::write(
        specs.join("ok.toml"),
        spec_with("", "").replace("\"x\"", "\"ok\""),
    )
    .unwrap();
    std::fs::write(
        specs.join("short.toml"),
        spec_with("", "")
            .replace("\"x\"", "\"short\"")
            .replace("[rl]", "[model]\nmax_seq_len = 8\n\n[rl]"),
    )
    .unwrap();
    let run = |name: &str, extra: &[&str]| {
        let o = Command::new(env!("CARGO_BIN_EXE_driftlab"))
            .args(["--threads", "1", "experiment", name, "--jobs", "1"])
            .arg("--specs")
            .arg(&specs)
            .arg("--cache-dir")
            .arg(root.join("cache"))
            .arg("--out")
            .arg(root.join("out"))
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (code, err) = run("ok", &["--seeds", "0,0"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("seed 0 appears twice"), "{err}");
    let (code, err) = run("short", &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("model.max_seq_len = 8"), "{err}");
    assert!(!root.join("cache").exists(), "a cold start ran");
    let _ = std::fs::remove_dir_all(&root);
}
