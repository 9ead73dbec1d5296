//! End to end on `tiny`: runner → Parquet → report; interruption keeps readable data.

mod common;
use driftlab::experiment::{ArmSpec, ExperimentSpec, RunOptions, run_experiment};
use driftlab::metrics::frames::{f64_col, i64_col};
use driftlab::model::FfnKind;
use driftlab::report::{PLOTS, write_report};
use driftlab::rl::{Algorithm, DriftInjection, GrpoConfig, GspoConfig, RoutingMode};
use driftlab::util::io::read_parquet;
use polars::prelude::DataType;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

fn spec(steps: usize) -> ExperimentSpec {
    let mut s = common::tiny_experiment(
        steps,
        vec![
            ArmSpec::new(
                "grpo_r2",
                Algorithm::Grpo(GrpoConfig::default()),
                RoutingMode::R2,
                FfnKind::Moe,
            ),
            ArmSpec::new(
                "gspo",
                Algorithm::Gspo(GspoConfig::default()),
                RoutingMode::Native,
                FfnKind::Moe,
            ),
        ],
    );
    s.rl.drift_injection = Some(DriftInjection::Sigma { sigma: 0.5 });
    s
}

fn opts(tag: &str) -> RunOptions {
    let out = std::env::temp_dir().join(format!("driftlab-{tag}-{}", std::process::id()));
    common::run_options(tag, out.join("cache"))
}

#[test]
fn three_steps_two_arms_two_seeds_write_readable_frames_and_a_report() {
    let o = opts("frames");
    let statuses = run_experiment(&spec(3), &o).unwrap();
    assert!(
        statuses
            .iter()
            .all(|s| s.status == "ok" && s.steps_done == 3),
        "{statuses:?}"
    );
    let read = |n: &str| read_parquet(&o.out.join(format!("{n}.parquet"))).unwrap();
    let (steps, updates, layers, lengths, prefixes, events) = (
        read("steps"),
        read("updates"),
        read("layers"),
        read("lengths"),
        read("prefixes"),
        read("events"),
    );
    assert_eq!(steps.height(), 2 * 2 * 3);
    assert_eq!(updates.height(), 2 * 2 * 3 * 2);
    assert_eq!(
        layers.height(),
        2 * 2 * 3 * 2 * 2,
        "two MoE layers per update"
    );
    // Every frame has exactly the columns of its schema, in order, with the schema's dtypes.
    for (df, frame) in [&steps, &updates, &layers, &lengths, &prefixes, &events]
        .into_iter()
        .zip(driftlab::metrics::schema::frames())
    {
        let want: Vec<(&str, DataType)> = frame
            .columns()
            .map(|c| {
                let dtype = match c.dtype {
                    driftlab::metrics::schema::Dtype::Str => DataType::String,
                    driftlab::metrics::schema::Dtype::Int => DataType::Int64,
                    driftlab::metrics::schema::Dtype::Float => DataType::Float64,
                };
                (c.name, dtype)
            })
            .collect();
        let got: Vec<(&str, DataType)> = df
            .columns()
            .iter()
            .map(|c| (c.name().as_str(), c.dtype().clone()))
            .collect();
        assert_eq!(got, want, "{}", frame.name);
    }
    let expect = |df: &polars::prelude::DataFrame, cols: &[&str]| {
        for c in cols {
            let col = df
                .column(c)
                .unwrap_or_else(|_| panic!("missing column {c}"));
            assert!(
                matches!(col.dtype(), DataType::Float64 | DataType::Int64),
                "{c} has type {:?}",
                col.dtype()
            );
            assert!(
                col.null_count() < df.height(),
                "metric column {c} is all null"
            );
        }
    };
    expect(
        &steps,
        &[
            "reward_mean",
            "reward_std",
            "accuracy",
            "eval_accuracy",
            "resp_len_mean",
            "entropy",
            "frac_zero_adv_groups",
            "mismatch_kl_k3",
            "mismatch_extreme_frac",
            "mismatch_route_frac",
            "load_max_violation",
            "dead_experts",
            "t_rollout",
            "t_update",
            "t_probe",
            "n_tokens",
        ],
    );
    expect(
        &updates,
        &[
            "minibatch",
            "ratio_tok_mean",
            "ratio_tok_var",
            "ratio_tok_max",
            "ratio_tok_min",
            "logratio_tok_var",
            "ratio_seq_var",
            "logratio_within_seq_var",
            "ess",
            "clip_frac_tok",
            "clip_frac_low",
            "clip_frac_high",
            "clip_frac_seq",
            "kl_old",
            "kl_ref",
            "grad_norm",
            "loss_policy",
            "loss_aux",
            "drift_expert_frac",
            "drift_token_frac",
            "drift_flips_per_token",
            "drift_since_rollout_frac",
            "router_js",
        ],
    );
    expect(
        &layers,
        &[
            "minibatch",
            "layer",
            "drift_expert_frac",
            "drift_token_frac",
            "drift_since_rollout_frac",
            "router_js",
            "router_entropy",
            "load_max_violation",
            "dead_experts",
        ],
    );
    expect(
        &lengths,
        &["n_resp", "df", "len_mean", "logw_sum_var", "logw_mean_var"],
    );
    // The lengths frame pools the off-policy minibatch (the second of two: 8 of the step's 16
    // responses), bins are 4 tokens wide, and Var(mean log w) = Var(Σ log w) / L² within each
    // exact length L, so it sits between the bin's bounds.
    let (lo, hi) = (
        i64_col(&lengths, "len_lo").unwrap(),
        i64_col(&lengths, "len_hi").unwrap(),
    );
    let (vs, vm) = (
        f64_col(&lengths, "logw_sum_var").unwrap(),
        f64_col(&lengths, "logw_mean_var").unwrap(),
    );
    let len = f64_col(&lengths, "len_mean").unwrap();
    for i in 0..lengths.height() {
        assert_eq!(hi[i] - lo[i], 3);
        assert!((lo[i] as f64..=hi[i] as f64).contains(&len[i].unwrap()));
        if let (Some(s), Some(m)) = (vs[i], vm[i]) {
            let (l2, h2) = ((lo[i] * lo[i]) as f64, (hi[i] * hi[i]) as f64);
            assert!(m * l2 <= s * (1.0 + 1e-9) && s <= m * h2 * (1.0 + 1e-9));
        }
    }
    let n_resp = i64_col(&lengths, "n_resp").unwrap();
    assert_eq!(
        n_resp.iter().sum::<i64>(),
        (steps.height() * 8) as i64,
        "8 off-policy responses per step"
    );
    assert!(vs.iter().flatten().any(|&v| v > 0.0), "log-ratios vary");
    // Drift in three units: routers = flips per token / layers; replay staleness is null
    // without replay, and 0 on a step's first minibatch under r2 (π_old's routes are the
    // live ones there).
    let (flips, routers) = (
        f64_col(&updates, "drift_flips_per_token").unwrap(),
        f64_col(&updates, "drift_router_frac").unwrap(),
    );
    let (stale, mb) = (
        f64_col(&updates, "replay_stale_frac").unwrap(),
        i64_col(&updates, "minibatch").unwrap(),
    );
    let routing = driftlab::metrics::frames::str_col(&updates, "routing").unwrap();
    for i in 0..updates.height() {
        if let (Some(a), Some(b)) = (flips[i], routers[i]) {
            assert!((a / 2.0 - b).abs() < 1e-12, "two layers");
        }
        assert_eq!(stale[i].is_none(), routing[i] == "native", "row {i}");
        if routing[i] == "r2" && mb[i] == 0 {
            assert_eq!(stale[i], Some(0.0));
        }
    }
    let mass = f64_col(&updates, "router_topk_mass").unwrap();
    assert!(
        mass.iter()
            .all(|m| m.is_some_and(|m| m > 0.0 && m <= 1.0 + 1e-6))
    );
    // Prefixes: ℓ = 1 holds every off-policy response, and one token's variance is its own
    // uncorrelated-token value.
    let (pl, pn) = (
        i64_col(&prefixes, "prefix").unwrap(),
        i64_col(&prefixes, "n_resp").unwrap(),
    );
    let (ps, pv) = (
        f64_col(&prefixes, "prefix_sum_var").unwrap(),
        f64_col(&prefixes, "pos_var_sum").unwrap(),
    );
    let first: Vec<usize> = (0..prefixes.height()).filter(|&i| pl[i] == 1).collect();
    assert_eq!(
        first.iter().map(|&i| pn[i]).sum::<i64>(),
        (steps.height() * 8) as i64
    );
    for i in 0..prefixes.height() {
        assert!(pl[i].count_ones() == 1, "prefix lengths are powers of two");
        if let (Some(s), Some(v)) = (ps[i], pv[i]) {
            assert!(s >= 0.0 && v >= 0.0);
            if pl[i] == 1 {
                assert!((s - v).abs() <= 1e-12 * s.max(1e-300), "{s} vs {v}");
            }
        }
    }
    assert!(ps.iter().flatten().any(|&v| v > 0.0), "prefix sums vary");
    assert_eq!(steps.column("arm").unwrap().dtype(), &DataType::String);
    // Under r2 the forward replays π_old's routes, yet the probe measures native drift.
    let arm = driftlab::metrics::frames::str_col(&updates, "arm").unwrap();
    let drift = f64_col(&updates, "drift_expert_frac").unwrap();
    let r2_drift: f64 = arm
        .iter()
        .zip(&drift)
        .filter(|(a, _)| *a == "grpo_r2")
        .filter_map(|(_, d)| *d)
        .sum();
    assert!(r2_drift > 0.0, "native drift is measured under replay");

    let sums = write_report(&o.out).unwrap();
    assert_eq!(sums.len(), 2);
    for p in PLOTS {
        for ext in ["png", "svg"] {
            let f: PathBuf = o.out.join("plots").join(format!("{p}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(
                len > 1000,
                "{} is missing or empty ({len} bytes)",
                f.display()
            );
        }
    }
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    assert!(md.contains("| grpo_r2 |") && md.contains("plots/drift.svg"));
    assert!(
        md.contains("## Findings") && md.contains("**(d) GSPO clips far more tokens than GRPO**")
    );
    assert!(
        md.contains("not measured (needs a GRPO arm with native routing and one with r2 or r3)"),
        "absent arms are said to be absent"
    );
    assert!(
        o.out.join("summary.csv").exists()
            && o.out.join("summary.json").exists()
            && o.out.join("config.json").exists()
    );
    let _ = std::fs::remove_dir_all(&o.out);
}

/// How often the frames are written changes what is on disk while a run goes, never what is on
/// disk after it: two jobs writing at every step and cell (`flush_secs` 0) and at most once an
/// hour (so only the run's last write) leave the same rows and the same `status.json`.
#[test]
fn how_often_frames_are_written_changes_no_row_of_a_finished_run() {
    let run = |tag: &str, secs: f64| {
        let mut o = opts(tag);
        o.jobs = 2;
        let mut s = spec(3);
        s.flush_secs = secs;
        run_experiment(&s, &o).unwrap();
        o.out
    };
    let (every, hourly) = (run("flush-every", 0.0), run("flush-hourly", 3600.0));
    let status = |d: &std::path::Path| {
        let mut v = driftlab::experiment::resume::finished_statuses(d).unwrap();
        v.sort_by(|a, b| (&a.arm, a.seed).cmp(&(&b.arm, b.seed)));
        serde_json::to_string(&v).unwrap()
    };
    assert_eq!(status(&every), status(&hourly));
    for frame in driftlab::metrics::schema::frames() {
        let rows = |d: &std::path::Path| {
            let df = read_parquet(&d.join(frame.file_name())).unwrap();
            let keep: Vec<String> = df
                .get_column_names()
                .iter()
                .map(|c| c.to_string())
                .filter(|c| !c.starts_with("t_"))
                .collect();
            let sort_by: Vec<String> = ["arm", "seed", "step"]
                .iter()
                .map(|c| c.to_string())
                .filter(|c| keep.contains(c))
                .collect();
            df.select(keep)
                .unwrap()
                .sort(
                    sort_by,
                    polars::prelude::SortMultipleOptions::default().with_maintain_order(true),
                )
                .unwrap()
        };
        let (a, b) = (rows(&every), rows(&hourly));
        assert!(
            a.height() > 0 || frame.name == "events",
            "{} is empty",
            frame.name
        );
        assert!(a.equals_missing(&b), "{} differs", frame.name);
    }
    let _ = std::fs::remove_dir_all(&every);
    let _ = std::fs::remove_dir_all(&hourly);
}

#[test]
fn a_run_stopped_after_step_k_keeps_readable_parquet() {
    let mut o = opts("stop");
    let stop = o.stop.clone();
    let k = 1;
    o.on_step = Some(Box::new(move |_, _, step| {
        if step == k {
            stop.store(true, Ordering::SeqCst);
        }
    }));
    let statuses = run_experiment(&spec(6), &o).unwrap();
    assert_eq!(statuses[0].status, "stopped");
    assert_eq!(statuses[0].steps_done, k + 1);
    assert!(
        statuses[1..]
            .iter()
            .all(|s| s.status == "stopped" && s.steps_done == 0)
    );
    let steps = read_parquet(&o.out.join("steps.parquet")).unwrap();
    let st = i64_col(&steps, "step").unwrap();
    assert_eq!(st.len(), k + 1);
    assert!(st.iter().all(|&s| s <= k as i64));
    write_report(&o.out).expect("an interrupted run can be re-reported");
    let _ = std::fs::remove_dir_all(&o.out);
}

#[test]
fn malformed_specs_are_clear_errors() {
    let e = ExperimentSpec::from_toml(
        "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\narms = []\nbogus = 1",
        "experiments/x.toml",
    )
    .unwrap_err();
    assert!(
        format!("{e:#}").contains("experiments/x.toml") && format!("{e:#}").contains("bogus"),
        "{e:#}"
    );
    let text = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n[[arms]]\nname = 'a'\nalgorithm = { kind = 'grpoo' }";
    let e = format!(
        "{:#}",
        ExperimentSpec::from_toml(text, "x.toml").unwrap_err()
    );
    assert!(e.contains("grpoo"), "{e}");
    let text = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n[rl]\nminibatches = 3\n[[arms]]\nname = 'a'\nalgorithm = { kind = 'grpo' }";
    let e = format!(
        "{:#}",
        ExperimentSpec::from_toml(text, "x.toml").unwrap_err()
    );
    assert!(
        e.contains("minibatches") && e.contains("must divide"),
        "{e}"
    );
    let mut s = spec(1);
    let e = format!("{:#}", s.select_arms(&["gpso".into()]).unwrap_err());
    assert!(e.contains("did you mean 'gspo'"), "{e}");
    // Declared claims and sweeps: unknown letters, and `x` without an axis or an axis
    // without `x`, name the key.
    let head = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n";
    let arm = "[[arms]]\nname = 'a'\nalgorithm = { kind = 'grpo' }\n";
    let err = |text: String| {
        format!(
            "{:#}",
            ExperimentSpec::from_toml(&text, "x.toml").unwrap_err()
        )
    };
    let e = err(format!("{head}claims = ['b', 'z']\n{arm}"));
    assert!(e.contains("key 'claims'") && e.contains("'z'"), "{e}");
    let e = err(format!("{head}claims = []\n{arm}"));
    assert!(e.contains("key 'claims'"), "{e}");
    let e = err(format!("{head}{arm}[[regimes]]\nname = 'r'\nx = 2\n"));
    assert!(e.contains("regime 'r'") && e.contains("no `sweep`"), "{e}");
    let e = err(format!(
        "{head}sweep = 'N'\n{arm}[[regimes]]\nname = 'r1'\nx = 1\n[[regimes]]\nname = 'r2'\n"
    ));
    assert!(e.contains("regime 'r2'") && e.contains("sweeps 'N'"), "{e}");
    let ok = format!(
        "{head}sweep = 'N'\nclaims = ['b', 'k']\n{arm}[[regimes]]\nname = 'r1'\nx = 1\n[[regimes]]\nname = 'r2'\nx = 2\n"
    );
    let s = ExperimentSpec::from_toml(&ok, "x.toml").unwrap();
    assert_eq!(s.claims, Some(vec!['b', 'k']));
    assert_eq!(s.regimes[1].x, Some(2.0));
    // The least time between two writes of the frames: seconds, at least 0, finite; left out
    // of the spec's record at its default, so folders written before the key existed match.
    for bad in ["-1", "nan", "inf"] {
        let e = err(format!("{head}flush_secs = {bad}\n{arm}"));
        assert!(e.contains("key 'flush_secs'"), "{e}");
    }
    // (given, the value read, whether the spec's record names the key)
    for (given, want, recorded) in [("flush_secs = 0\n", 0.0, true), ("", 30.0, false)] {
        let s = ExperimentSpec::from_toml(&format!("{head}{given}{arm}"), "x.toml").unwrap();
        assert_eq!(s.flush_secs, want);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(v.get("flush_secs").is_some(), recorded, "{given:?}");
    }
}

#[test]
fn an_unwritable_output_folder_is_a_clear_error() {
    let mut o = opts("unwritable");
    let file = std::env::temp_dir().join(format!("driftlab-not-a-dir-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    o.out = file.join("sub");
    let e = format!("{:#}", run_experiment(&spec(1), &o).unwrap_err());
    assert!(e.contains("cannot create output folder"), "{e}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn regimes_override_settings_and_get_their_own_plots() {
    use driftlab::experiment::RegimeSpec;
    use driftlab::rl::Mismatch;
    let mut s = spec(2);
    s.seeds = vec![0];
    s.arms.truncate(1);
    s.rl.drift_injection = None;
    s.regimes = vec![
        RegimeSpec {
            name: "natural".into(),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "mismatch".into(),
            rl: rl_table(serde_json::json!({ "mismatch": Mismatch::RouterNoise { sigma: 1.0 } })),
            ..RegimeSpec::default_regime()
        },
    ];
    s.validate().unwrap();
    let o = opts("regimes");
    let st = run_experiment(&s, &o).unwrap();
    assert_eq!(
        st.iter().map(|c| c.regime.as_str()).collect::<Vec<_>>(),
        vec!["natural", "mismatch"]
    );
    let sums = write_report(&o.out).unwrap();
    let labels: Vec<&str> = sums.iter().map(|a| a.arm.as_str()).collect();
    assert_eq!(labels, vec!["natural/grpo_r2", "mismatch/grpo_r2"]);
    assert!(
        sums[1].m("mismatch_route_frac").mean > 0.05
            && sums[0].m("mismatch_route_frac").mean < 1e-3,
        "{:?}",
        sums.iter()
            .map(|a| a.m("mismatch_route_frac").mean)
            .collect::<Vec<_>>()
    );
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    // Every figure of every regime, as non-empty PNG and SVG, embedded in report.md; the
    // figures of a frame this tiny run has no data for (length bins with enough responses)
    // are left out and not embedded, rather than drawn empty.
    let optional = [
        "drift_heatmap",
        "ratio_var_vs_len",
        "ratio_var_vs_prefix",
        "drift_units",
    ];
    for r in ["natural", "mismatch"] {
        for p in PLOTS {
            let embedded = md.contains(&format!("(plots/{r}/{p}.svg)"));
            for ext in ["png", "svg"] {
                let f = o.out.join("plots").join(r).join(format!("{p}.{ext}"));
                let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
                if optional.contains(p) && !embedded {
                    assert_eq!(len, 0, "{} is made but not embedded", f.display());
                } else {
                    assert!(len > 1000, "{} is missing or empty", f.display());
                }
            }
            assert!(embedded || optional.contains(p), "{p} of {r} embedded");
        }
        // A figure read on its own says which regime it shows.
        for p in ["reward", "eval_accuracy", "mechanism", "drift", "forest"] {
            let svg = std::fs::read_to_string(o.out.join("plots").join(r).join(format!("{p}.svg")))
                .unwrap();
            assert!(
                svg.contains(&format!("Regime {r}:")),
                "{p} of {r}: no regime in its title"
            );
        }
    }
    assert!(
        md.contains("## Regimes")
            && md.contains("| natural | none | all |")
            && md.contains(
                r#"| mismatch | `rl.mismatch = {"kind":"router_noise","sigma":1.0}` | all |"#
            ),
        "{md}"
    );
    let mut s2 = s.clone();
    let e = format!("{:#}", s2.select_regimes(&["at_scal".into()]).unwrap_err());
    assert!(e.contains("allowed: natural, mismatch"), "{e}");
    let _ = std::fs::remove_dir_all(&o.out);
}

/// A spec that sweeps N over two regimes and declares claims (b) and (c) only: the report
/// makes no endpoint of another claim, draws every sweep figure (PNG and SVG) and links it.
#[test]
fn a_sweep_draws_its_axis_and_tests_only_its_declared_claims() {
    use driftlab::experiment::RegimeSpec;
    use driftlab::report::figures::SWEEP_PLOTS;
    let mut s = spec(2);
    s.rl.drift_injection = None;
    s.arms.push(ArmSpec::new(
        "grpo",
        Algorithm::Grpo(GrpoConfig::default()),
        RoutingMode::Native,
        FfnKind::Moe,
    ));
    s.claims = Some(vec!['b', 'c']);
    s.sweep = Some("N".into());
    s.regimes = [(1, "n1"), (2, "n2")]
        .iter()
        .map(|&(n, name)| RegimeSpec {
            name: name.into(),
            rl: rl_table(serde_json::json!({ "minibatches": n })),
            x: Some(n as f64),
            ..RegimeSpec::default_regime()
        })
        .collect();
    s.validate().unwrap();
    let o = opts("sweep");
    run_experiment(&s, &o).unwrap();
    write_report(&o.out).unwrap();
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    for p in SWEEP_PLOTS {
        for ext in ["png", "svg"] {
            let f = o.out.join("plots/sweep").join(format!("{p}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(len > 1000, "{} is missing or empty", f.display());
        }
        assert!(md.contains(&format!("(plots/sweep/{p}.svg)")), "{p} linked");
    }
    assert!(
        md.contains("| n2 | `x = 2.0`, `rl.minibatches = 2` | all |"),
        "{md}"
    );
    let eps: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(o.out.join("endpoints.json")).unwrap())
            .unwrap();
    let letters: Vec<&str> = eps
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["claim"].as_str().unwrap())
        .collect();
    assert!(
        letters.contains(&"b") && letters.contains(&"c"),
        "{letters:?}"
    );
    assert!(
        letters.iter().all(|l| *l == "b" || *l == "c"),
        "{letters:?}"
    );
    assert!(!md.contains("**(d)") && md.contains("**(b)"));
    let _ = std::fs::remove_dir_all(&o.out);
}

/// A control regime and a drift regime placed on a stability map: every arm's paired change
/// against the control is a described endpoint (l), and the map figures are drawn and linked.
/// A control that names no regime, or the regime itself, is refused. A claim declared
/// `secondary` is described without a verdict; one not declared cannot be secondary.
#[test]
fn a_stability_map_compares_each_regime_with_its_control() {
    use driftlab::experiment::{MapAt, RegimeSpec};
    use driftlab::report::figures::MAP_PLOTS;
    let mut s = spec(2);
    s.rl.drift_injection = None;
    s.claims = Some(vec!['c', 'l']);
    s.secondary = vec!['c'];
    let at = |row: &str| {
        Some(MapAt {
            row: row.into(),
            col: "len".into(),
        })
    };
    s.regimes = vec![
        RegimeSpec {
            name: "d0".into(),
            map: at("0%"),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "d1".into(),
            map: at("some"),
            control: Some("d0".into()),
            rl: rl_table(serde_json::json!({
                "drift_injection": DriftInjection::Sigma { sigma: 0.5 }
            })),
            ..RegimeSpec::default_regime()
        },
    ];
    s.validate().unwrap();
    let mut bad = s.clone();
    bad.regimes[1].control = Some("d9".into());
    let e = format!("{:#}", bad.validate().unwrap_err());
    assert!(
        e.contains("regime 'd1', key 'control'") && e.contains("d9"),
        "{e}"
    );
    bad.regimes[1].control = Some("d1".into());
    assert!(format!("{:#}", bad.validate().unwrap_err()).contains("its own control"));
    bad.regimes[1].control = Some("d0".into());
    bad.regimes[1].map = at("0%");
    assert!(format!("{:#}", bad.validate().unwrap_err()).contains("is taken"));
    let mut bad = s.clone();
    bad.secondary = vec!['b'];
    let e = format!("{:#}", bad.validate().unwrap_err());
    assert!(e.contains("key 'secondary'") && e.contains("'b'"), "{e}");
    let o = opts("map");
    run_experiment(&s, &o).unwrap();
    write_report(&o.out).unwrap();
    let md = std::fs::read_to_string(o.out.join("report.md")).unwrap();
    for p in MAP_PLOTS {
        for ext in ["png", "svg"] {
            let f = o.out.join("plots/map").join(format!("{p}.{ext}"));
            let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(0);
            assert!(len > 1000, "{} is missing or empty", f.display());
        }
        assert!(md.contains(&format!("(plots/map/{p}.svg)")), "{p} linked");
    }
    let eps: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(o.out.join("endpoints.json")).unwrap())
            .unwrap();
    let of = |c: &str| -> Vec<&serde_json::Value> {
        eps.as_array()
            .unwrap()
            .iter()
            .filter(|e| e["claim"] == c)
            .collect()
    };
    // (c) in both regimes, declared secondary: described, no verdict.
    assert_eq!(of("c").len(), 2, "{eps}");
    for e in of("c") {
        assert_eq!(e["primary"], false);
        assert_eq!(e["verdict"]["kind"], "secondary", "{e}");
    }
    // Two per arm (eval accuracy, then training reward), in the drift regime only, paired
    // over both seeds, and no verdict.
    let l = of("l");
    assert_eq!(l.len(), 4, "{eps}");
    for (k, e) in l.iter().enumerate() {
        assert_eq!(e["regime"], "d1");
        assert_eq!(e["est"]["n"], 2);
        assert_eq!(e["primary"], false);
        let what = e["what"].as_str().unwrap();
        let want = ["final eval accuracy, `", "final reward, `"][k % 2];
        assert!(what.starts_with(want), "{what}");
    }
    // Without its per-layer and per-length frames (the committed map keeps its step, update
    // and event frames: the files .gitignore leaves out) the folder still reports, with the
    // same summary and endpoints.
    let (sum, ends) = (
        std::fs::read(o.out.join("summary.json")).unwrap(),
        std::fs::read(o.out.join("endpoints.json")).unwrap(),
    );
    for f in ["layers.parquet", "lengths.parquet"] {
        std::fs::remove_file(o.out.join(f)).unwrap();
    }
    write_report(&o.out).unwrap();
    assert!(sum == std::fs::read(o.out.join("summary.json")).unwrap());
    assert!(ends == std::fs::read(o.out.join("endpoints.json")).unwrap());
    let _ = std::fs::remove_dir_all(&o.out);
}

/// `slim` drops only columns the report does not read: the slim folder reports the same
/// summary, endpoints, report.md and figures, byte for byte, and config.json names what went.
#[test]
fn a_slim_folder_reports_the_same_files() {
    use driftlab::experiment::RegimeSpec;
    use driftlab::rl::Mismatch;
    let mut s = spec(3);
    s.regimes = vec![
        RegimeSpec {
            name: "drift".into(),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "noise".into(),
            rl: rl_table(serde_json::json!({ "mismatch": Mismatch::RouterNoise { sigma: 0.5 } })),
            ..RegimeSpec::default_regime()
        },
    ];
    let o = opts("slim");
    run_experiment(&s, &o).unwrap();
    write_report(&o.out).unwrap();
    let slim = o.out.with_extension("slim");
    let _ = std::fs::remove_dir_all(&slim);
    let copy = |from: &std::path::Path, to: &std::path::Path| {
        for e in walk(from) {
            let t = to.join(e.strip_prefix(from).unwrap());
            std::fs::create_dir_all(t.parent().unwrap()).unwrap();
            std::fs::copy(&e, &t).unwrap();
        }
    };
    copy(&o.out, &slim);
    let (before, after) = driftlab::report::slim::slim(&slim).unwrap();
    assert!(after < before, "{before} -> {after}");
    write_report(&slim).unwrap();
    let mut compared = 0;
    for f in walk(&o.out) {
        let rel = f.strip_prefix(&o.out).unwrap();
        let name = rel.to_string_lossy();
        if name.ends_with(".parquet") || name == "config.json" || name.ends_with(".png") {
            continue;
        }
        let (a, b) = (
            std::fs::read(&f).unwrap(),
            std::fs::read(slim.join(rel)).unwrap(),
        );
        assert!(a == b, "{name} differs after slim");
        compared += 1;
    }
    assert!(compared > 20, "{compared} files compared");
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(slim.join("config.json")).unwrap()).unwrap();
    // The same JSON value as the full folder's, apart from the record of what went and the
    // cells grouped: one group per (regime, arm), two seeds each, that read back as the list.
    let mut full: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(o.out.join("config.json")).unwrap()).unwrap();
    use driftlab::experiment::cell_groups::cells_value;
    assert!(cfg.get("cells").is_none());
    let pairs: std::collections::BTreeSet<(String, String)> = full["cells"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["regime"].to_string(), c["arm"].to_string()))
        .collect();
    assert_eq!(pairs.len(), 4);
    assert_eq!(
        cfg["cell_groups"].as_array().map(Vec::len),
        Some(pairs.len())
    );
    assert_eq!(cells_value(&cfg), full["cells"]);
    let mut cfg = cfg;
    cfg["cells"] = cells_value(&cfg);
    cfg.as_object_mut().unwrap().remove("cell_groups");
    full["slim"] = cfg["slim"].clone();
    assert!(
        full == cfg,
        "config.json changed beyond its `slim` record and grouped cells"
    );
    assert!(
        cfg["slim"]["updates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "grad_norm")
    );

    // `--drop`: a metric the report reads goes too; the report then treats it as not
    // measured (no mismatch chart, no KL in the summary), re-reports identically, and the
    // record keeps what went before. Names the schema lacks, or identity columns, are refused.
    use driftlab::report::slim::slim_dropping;
    let pair = |f: &str, c: &str| vec![(f.to_string(), c.to_string())];
    for (bad, why) in [
        (pair("stepz", "mismatch_kl_k3"), "no frame 'stepz'"),
        (pair("steps", "kl_nope"), "no column 'kl_nope'"),
        (pair("steps", "arm"), "only metric (float) columns"),
    ] {
        let e = format!("{:#}", slim_dropping(&slim, &bad).unwrap_err());
        assert!(e.contains(why), "{e}");
    }
    slim_dropping(&slim, &pair("steps", "mismatch_kl_k3")).unwrap();
    let plots = slim.join("plots");
    std::fs::remove_dir_all(&plots).unwrap();
    write_report(&slim).unwrap();
    let made: Vec<String> = walk(&plots)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(made.iter().any(|n| n == "reward.svg"), "{made:?}");
    assert!(!made.iter().any(|n| n == "mismatch_kl.svg"), "{made:?}");
    let summary = std::fs::read(slim.join("summary.json")).unwrap();
    write_report(&slim).unwrap();
    assert!(summary == std::fs::read(slim.join("summary.json")).unwrap());
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(slim.join("config.json")).unwrap()).unwrap();
    let steps: Vec<&str> = cfg["slim"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    assert!(
        steps.contains(&"entropy") && steps.contains(&"mismatch_kl_k3"),
        "{steps:?}"
    );

    // `--plots-kept`: a folder that keeps none of its figures names them instead of linking
    // them; a folder not under plots/ is refused before anything is recorded.
    use driftlab::report::slim::record_plots_kept;
    let e = format!(
        "{:#}",
        record_plots_kept(&slim, &["nope".into()]).unwrap_err()
    );
    assert!(e.contains("--plots-kept nope"), "{e}");
    let before = std::fs::read(slim.join("config.json")).unwrap();
    for bad in ["..", "/tmp", "a/b"] {
        assert!(record_plots_kept(&slim, &[bad.into()]).is_err(), "{bad}");
    }
    assert!(before == std::fs::read(slim.join("config.json")).unwrap());
    // Keeping one regime's folder (a trailing `/` as a shell completes it) links its figures
    // and names the other's.
    record_plots_kept(&slim, &["drift/".into()]).unwrap();
    write_report(&slim).unwrap();
    let md = std::fs::read_to_string(slim.join("report.md")).unwrap();
    assert!(md.contains("](plots/drift/reward.svg)"), "{md}");
    assert!(!md.contains("](plots/noise/"), "{md}");
    assert!(md.contains("draws them into `plots/noise/`"), "{md}");
    record_plots_kept(&slim, &[]).unwrap();
    write_report(&slim).unwrap();
    let md = std::fs::read_to_string(slim.join("report.md")).unwrap();
    assert!(!md.contains("](plots/"), "{md}");
    assert!(
        md.contains("Not committed, for the repository's size: forest, reward"),
        "{md}"
    );
    let _ = std::fs::remove_dir_all(&o.out);
    let _ = std::fs::remove_dir_all(&slim);
}

/// Every file under `dir`, recursively.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

#[test]
fn a_regime_can_run_a_subset_of_the_arms() {
    use driftlab::experiment::RegimeSpec;
    let mut s = spec(2);
    s.regimes = vec![
        RegimeSpec {
            name: "all".into(),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "one".into(),
            arms: Some(vec!["gspo".into()]),
            ..RegimeSpec::default_regime()
        },
    ];
    s.validate().unwrap();
    let cells: Vec<(String, String, u64)> = s
        .cells()
        .into_iter()
        .map(|(r, a, seed)| (r.name, a.name, seed))
        .collect();
    let want: Vec<(String, String, u64)> = [
        ("all", "grpo_r2", 0),
        ("all", "grpo_r2", 1),
        ("all", "gspo", 0),
        ("all", "gspo", 1),
        ("one", "gspo", 0),
        ("one", "gspo", 1),
    ]
    .iter()
    .map(|&(r, a, x)| (r.into(), a.into(), x))
    .collect();
    assert_eq!(cells, want);
    // --arms narrows the regime's list too; a regime naming an unknown arm is an error.
    let mut narrowed = s.clone();
    narrowed.select_arms(&["grpo_r2".into()]).unwrap();
    narrowed.validate().unwrap();
    assert!(narrowed.cells().iter().all(|(r, _, _)| r.name == "all"));
    s.regimes[1].arms = Some(vec!["gsp".into()]);
    let e = format!("{:#}", s.validate().unwrap_err());
    assert!(
        e.contains("regime 'one'") && e.contains("unknown arm 'gsp'") && e.contains("gspo"),
        "{e}"
    );
}

/// Why `moe_drift` runs its dense control in the natural regime only: drift injection and
/// router-logit noise act on router logits, which a dense model does not have, so its cells
/// would repeat the natural ones bit for bit. This checks that they do.
#[test]
fn router_only_knobs_leave_a_dense_model_untouched() {
    use driftlab::experiment::RegimeSpec;
    use driftlab::metrics::frames::str_col;
    use driftlab::rl::Mismatch;
    let mut s = spec(2);
    s.seeds = vec![0];
    s.rl.drift_injection = None;
    s.arms = vec![ArmSpec::new(
        "dense",
        Algorithm::Grpo(GrpoConfig::default()),
        RoutingMode::Native,
        FfnKind::Dense,
    )];
    s.regimes = vec![
        RegimeSpec {
            name: "natural".into(),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "at_scale".into(),
            rl: rl_table(
                serde_json::json!({ "drift_injection": DriftInjection::Sigma { sigma: 2.0 } }),
            ),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "mismatch".into(),
            rl: rl_table(serde_json::json!({ "mismatch": Mismatch::RouterNoise { sigma: 2.0 } })),
            ..RegimeSpec::default_regime()
        },
    ];
    let o = opts("dense-knobs");
    run_experiment(&s, &o).unwrap();
    let df = read_parquet(&o.out.join("updates.parquet")).unwrap();
    let regime = str_col(&df, "regime").unwrap();
    for col in ["loss_total", "ratio_tok_var", "grad_norm", "kl_old"] {
        let v = f64_col(&df, col).unwrap();
        let of = |r: &str| -> Vec<Option<f64>> {
            (0..v.len())
                .filter(|&i| regime[i] == r)
                .map(|i| v[i])
                .collect()
        };
        let natural = of("natural");
        assert!(
            natural.len() >= 4 && natural.iter().all(|x| x.is_some()),
            "{col}"
        );
        assert_eq!(of("at_scale"), natural, "{col}");
        assert_eq!(of("mismatch"), natural, "{col}");
    }
    let _ = std::fs::remove_dir_all(&o.out);
}

#[test]
fn parallel_cells_give_the_same_numbers_as_serial_ones() {
    let run = |jobs: usize, tag: &str| {
        let mut o = opts(tag);
        o.jobs = jobs;
        run_experiment(&spec(2), &o).unwrap();
        let df = read_parquet(&o.out.join("updates.parquet")).unwrap();
        let arm = driftlab::metrics::frames::str_col(&df, "arm").unwrap();
        let seed = i64_col(&df, "seed").unwrap();
        let step = i64_col(&df, "step").unwrap();
        let mb = i64_col(&df, "minibatch").unwrap();
        let v = f64_col(&df, "loss_total").unwrap();
        let d = f64_col(&df, "drift_expert_frac").unwrap();
        let mut rows: Vec<_> = (0..df.height())
            .map(|i| {
                (
                    arm[i].clone(),
                    seed[i],
                    step[i],
                    mb[i],
                    v[i].map(f64::to_bits),
                    d[i].map(f64::to_bits),
                )
            })
            .collect();
        rows.sort();
        let _ = std::fs::remove_dir_all(&o.out);
        rows
    };
    assert_eq!(run(1, "serial"), run(2, "parallel"));
}

/// Every event of a run is counted under its own `regime/arm` in the summary, also when only
/// some regimes had events (the committed default run: events in `at_scale` only).
#[test]
fn the_summary_counts_every_event_under_its_regime() {
    use driftlab::metrics::frames::str_col;
    use driftlab::report::{load_frames, summarize};
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/moe_drift");
    let f = load_frames(&dir).unwrap();
    let (regime, arm, kind, seed) = (
        str_col(&f.events, "regime").unwrap(),
        str_col(&f.events, "arm").unwrap(),
        str_col(&f.events, "kind").unwrap(),
        i64_col(&f.events, "seed").unwrap(),
    );
    assert!(!kind.is_empty(), "the committed run has events");
    let sums = summarize(&f).unwrap();
    let mut cells = std::collections::BTreeMap::new();
    for i in 0..kind.len() {
        let cell = (format!("{}/{}", regime[i], arm[i]), kind[i].clone());
        cells
            .entry(cell)
            .or_insert_with(std::collections::BTreeSet::new)
            .insert(seed[i]);
    }
    for ((label, k), seeds) in &cells {
        let a = sums
            .iter()
            .find(|a| &a.arm == label)
            .unwrap_or_else(|| panic!("no summary row {label}"));
        assert_eq!(
            a.collapses.get(k).map(|c| c.0),
            Some(seeds.len()),
            "{label} {k}"
        );
    }
    // Collapsed and warned cells are distinct seeds, whatever the number of event kinds.
    for a in &sums {
        let with_events: std::collections::BTreeSet<i64> = cells
            .iter()
            .filter(|((label, _), _)| label == &a.arm)
            .flat_map(|(_, s)| s.iter().copied())
            .collect();
        assert_eq!(
            a.collapsed_cells + a.warned_cells,
            with_events.len(),
            "{}",
            a.arm
        );
        assert!(a.collapsed_cells + a.warned_cells <= a.seeds, "{}", a.arm);
    }
    assert!(
        sums.iter()
            .any(|a| a.collapses.len() > 1 && a.warned_cells + a.collapsed_cells > 0),
        "some arm has two kinds of events, so distinct-cell counting is exercised"
    );
}

#[test]
fn summaries_do_not_depend_on_the_order_cells_flushed_in() {
    use driftlab::report::{load_frames, summarize};
    use driftlab::util::io::write_parquet;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results/moe_drift");
    let tmp = std::env::temp_dir().join(format!("driftlab-reversed-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::copy(dir.join("config.json"), tmp.join("config.json")).unwrap();
    // The committed run keeps the frames its report reads (no layers frame): copy those present.
    for name in ["steps", "updates", "layers", "events"] {
        let file = format!("{name}.parquet");
        if !dir.join(&file).exists() {
            continue;
        }
        let mut df = read_parquet(&dir.join(&file)).unwrap().reverse();
        write_parquet(&mut df, &tmp.join(&file)).unwrap();
    }
    let json = |d: &std::path::Path| {
        serde_json::to_string(&summarize(&load_frames(d).unwrap()).unwrap()).unwrap()
    };
    let (a, b) = (json(&dir), json(&tmp));
    let _ = std::fs::remove_dir_all(&tmp);
    assert_eq!(a, b, "the same rows in reverse order summarise identically");
}

#[test]
fn a_regime_can_run_its_own_seeds_within_its_controls() {
    use driftlab::experiment::RegimeSpec;
    let mut s = spec(2);
    s.regimes = vec![
        RegimeSpec {
            name: "control".into(),
            seeds: Some(vec![0, 1, 2]),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "dose".into(),
            control: Some("control".into()),
            arms: Some(vec!["gspo".into()]),
            seeds: Some(vec![2, 0]),
            ..RegimeSpec::default_regime()
        },
        RegimeSpec {
            name: "plain".into(),
            arms: Some(vec!["gspo".into()]),
            ..RegimeSpec::default_regime()
        },
    ];
    s.validate().unwrap();
    let names = |s: &driftlab::experiment::ExperimentSpec| -> Vec<(String, String, u64)> {
        s.cells()
            .into_iter()
            .map(|(r, a, seed)| (r.name, a.name, seed))
            .collect()
    };
    let want: Vec<(String, String, u64)> = [
        ("control", "grpo_r2", 0),
        ("control", "grpo_r2", 1),
        ("control", "grpo_r2", 2),
        ("control", "gspo", 0),
        ("control", "gspo", 1),
        ("control", "gspo", 2),
        ("dose", "gspo", 2),
        ("dose", "gspo", 0),
        ("plain", "gspo", 0),
        ("plain", "gspo", 1),
    ]
    .iter()
    .map(|&(r, a, x)| (r.into(), a.into(), x))
    .collect();
    assert_eq!(names(&s), want);
    // The command line's seeds replace every list.
    let mut one = s.clone();
    one.set_seeds(vec![7]);
    one.validate().unwrap();
    assert!(names(&one).iter().all(|c| c.2 == 7));
    assert_eq!(names(&one).len(), 4);
    // A dose seed its control does not run has nothing to be paired with.
    let mut bad = s.clone();
    bad.regimes[1].seeds = Some(vec![0, 3]);
    let err = format!("{:#}", bad.validate().unwrap_err());
    assert!(
        err.contains("seed 3 is not among the seeds of its control"),
        "{err}"
    );
    let mut twice = s.clone();
    twice.regimes[0].seeds = Some(vec![1, 1]);
    assert!(format!("{:#}", twice.validate().unwrap_err()).contains("appears twice"));
    let mut empty = s;
    empty.regimes[2].seeds = Some(vec![]);
    assert!(format!("{:#}", empty.validate().unwrap_err()).contains("at least one seed"));
}

/// A regime's `rl` table from a JSON object.
fn rl_table(v: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    v.as_object().unwrap().clone()
}

/// `bench --rl --spec`: every arm of the regime timed in interleaved rounds, one median each;
/// an unknown regime is an error naming it.
#[test]
fn the_arms_of_a_regime_are_timed_in_interleaved_rounds() {
    use driftlab::bench::arms::bench_arms;
    let s = spec(2);
    let o = opts("bench-arms");
    let b = bench_arms(&s, None, &o, 1, 3).unwrap();
    let arms: Vec<&str> = b.median_s.keys().map(String::as_str).collect();
    assert_eq!(arms, ["grpo_r2", "gspo"]);
    assert!(
        b.steps_s
            .values()
            .all(|v| v.len() == 3 && v.iter().all(|x| *x > 0.0)),
        "{:?}",
        b.steps_s
    );
    assert_eq!((b.rounds, b.warmup, b.threads), (3, 1, 1));
    let e = format!("{:#}", bench_arms(&s, Some("nope"), &o, 1, 1).unwrap_err());
    assert!(e.contains("nope"), "{e}");
    let _ = std::fs::remove_dir_all(o.cache_dir.parent().unwrap());
}
