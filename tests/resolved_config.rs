//! One resolved configuration per cell: keys at the wrong level are errors, `config.json`
//! records what every cell ran, and findings find arms by what they are, not by name.

mod common;
use driftlab::experiment::{ArmSpec, CellConfig, ExperimentSpec, run_experiment};
use driftlab::model::FfnKind;
use driftlab::report::{RunInfo, findings::findings, load_frames};
use driftlab::rl::{Algorithm, AlgorithmKind, GrpoConfig, GspoConfig, RlConfig, RoutingMode};
use driftlab::util::io::{read_parquet, write_parquet};
use polars::prelude::*;
use std::path::Path;

const HEAD: &str = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n";
const ARM: &str = "[[arms]]\nname = 'a'\nalgorithm = { kind = 'grpo' }\n";

fn err(text: &str) -> String {
    format!(
        "{:#}",
        ExperimentSpec::from_toml(text, "x.toml").unwrap_err()
    )
}

/// The error of a spec whose one regime, `r`, carries `extra` (and any regimes after it).
fn regime_err(extra: &str) -> String {
    err(&format!("{HEAD}{ARM}[[regimes]]\nname = 'r'\n{extra}"))
}

#[test]
fn arm_owned_keys_at_another_level_are_errors_that_name_the_key() {
    let e = err(&format!(
        "{HEAD}[rl]\nalgorithm = {{ kind = 'gspo' }}\n{ARM}"
    ));
    assert!(
        e.contains("x.toml") && e.contains("'rl.algorithm'") && e.contains("[[arms]]"),
        "{e}"
    );
    let e = err(&format!("{HEAD}routing = 'r2'\n{ARM}"));
    assert!(e.contains("'routing'") && e.contains("[[arms]]"), "{e}");
    let e = err(&format!("{HEAD}[model]\nffn = 'dense'\n{ARM}"));
    assert!(e.contains("'model.ffn'") && e.contains("[[arms]]"), "{e}");
    let e = err(&format!(
        "{HEAD}{ARM}[[regimes]]\nname = 'r'\nalgorithm = {{ kind = 'gvpo' }}\n"
    ));
    assert!(e.contains("'regimes.algorithm'"), "{e}");
    let e = err(&format!("{HEAD}[rl]\ntotal_steps = 5\n{ARM}"));
    assert!(
        e.contains("'rl.total_steps'") && e.contains("`steps`"),
        "{e}"
    );
    let e = err(&format!("{HEAD}{ARM}rl = {{ routing = 'r3' }}\n"));
    assert!(e.contains("arm 'a'") && e.contains("'rl.routing'"), "{e}");
}

#[test]
fn arms_override_rl_and_model_keys_with_the_same_checks() {
    let spec = |arm_extra: &str| {
        ExperimentSpec::from_toml(
            &format!(
                "{HEAD}preset = 'tiny'\n[rl]\nbatch_prompts = 4\nminibatches = 2\n{ARM}{arm_extra}"
            ),
            "x.toml",
        )
    };
    let s = spec("rl = { minibatches = 4, optimizer = { lr = 0.5 } }\nmodel = { n_layers = 3 }\n")
        .unwrap();
    let c = &s.resolve("flex").unwrap()[0];
    assert_eq!(
        (c.rl.minibatches, c.rl.optimizer.lr, c.model.n_layers),
        (4, 0.5, 3)
    );
    assert_eq!(
        c.rl.optimizer.beta1,
        RlConfig::default().optimizer.beta1,
        "untouched keys keep their values"
    );
    let e = format!("{:#}", spec("rl = { minibatches = 3 }\n").unwrap_err());
    assert!(e.contains("arm 'a'") && e.contains("must divide"), "{e}");
    let e = format!("{:#}", spec("model = { top_k = 9 }\n").unwrap_err());
    assert!(e.contains("arm 'a'") && e.contains("top_k"), "{e}");
    let e = format!("{:#}", spec("rl = { minibatchs = 2 }\n").unwrap_err());
    assert!(e.contains("minibatchs"), "{e}");
}

/// A depth sweep at fixed width is one spec: regimes set `[model]` and `[rl]` keys of their own
/// (short spellings allowed), arms still override both, and bad keys fail the same way.
#[test]
fn regimes_set_model_and_rl_tables_and_a_depth_override_changes_depth_only() {
    let text = format!(
        "{HEAD}preset = 'toy'\n{ARM}\
         [[regimes]]\nname = 'l2'\n\
         [[regimes]]\nname = 'l8'\nmodel = {{ layers = 8 }}\nrl = {{ minibatches = 2, optimizer = {{ lr = 0.25 }} }}\n"
    );
    let s = ExperimentSpec::from_toml(&text, "x.toml").unwrap();
    let cells = s.resolve("flex").unwrap();
    let (l2, l8) = (&cells[0], &cells[1]);
    assert_eq!((l2.model.n_layers, l8.model.n_layers), (2, 8));
    assert_eq!((l8.rl.minibatches, l8.rl.optimizer.lr), (2, 0.25));
    let mut same = l8.model.clone();
    same.n_layers = 2;
    assert_eq!(same, l2.model, "only the depth differs");
    assert_ne!(
        l2.coldstart_key(),
        l8.coldstart_key(),
        "one cold start per resolved model"
    );
    // Parameters by hand (toy: d 64, 8 experts of d_ff 128, untied head): embeddings and head
    // 2·V·d plus the final norm d; per block two norms 2d, qkv 3d², out d², router 8d and
    // 8 experts of 3·d·d_ff.
    let (v, d, f) = (l8.model.vocab_size, 64, 128);
    let per_block = 2 * d + 3 * d * d + d * d + 8 * d + 8 * 3 * d * f;
    let count = |c: &CellConfig| {
        driftlab::model::Model::init(c.model.clone(), 0, &common::flex())
            .weights
            .num_params()
    };
    assert_eq!(count(l8), 2 * v * d + d + 8 * per_block);
    assert_eq!(count(l8) - count(l2), 6 * per_block);
    let e = regime_err("model = { top_k = 99 }\n");
    assert!(e.contains("regime 'r'") && e.contains("top_k"), "{e}");
    let e = regime_err("model = { layers = 4, n_layers = 3 }\n");
    assert!(e.contains("n_layers") && e.contains("twice"), "{e}");
    let e = regime_err("rl = { routing = 'r2' }\n");
    assert!(e.contains("'regimes.rl.routing'"), "{e}");
    let e = regime_err("rl = { total_steps = 3 }\n");
    assert!(e.contains("'rl.total_steps'"), "{e}");
    let e = regime_err("rl = { minibatchs = 2 }\n");
    assert!(e.contains("minibatchs") && e.contains("regime"), "{e}");
}

/// A length axis is one regime per length: a regime's `task` and `coldstart` keys change its
/// cells' task and cold-start budget (and so the cold start they load), nothing else, and bad
/// keys name the regime.
#[test]
fn regimes_set_task_and_coldstart_keys_and_each_budget_has_its_own_cold_start() {
    let text = format!(
        "{HEAD}preset = 'toy'\n[coldstart]\nmax_steps = 900\n{ARM}\
         [[regimes]]\nname = 'short'\n\
         [[regimes]]\nname = 'long'\ntask = {{ max_len = 48, partial_credit = true }}\n\
         [[regimes]]\nname = 'long_budget'\ntask = {{ max_len = 48, partial_credit = true }}\n\
         coldstart = {{ max_steps = 300 }}\n"
    );
    let s = ExperimentSpec::from_toml(&text, "x.toml").unwrap();
    let cells = s.resolve("flex").unwrap();
    let (short, long, budget) = (&cells[0], &cells[1], &cells[2]);
    assert_eq!((short.task.max_len, short.task.partial_credit), (16, false));
    assert_eq!((long.task.max_len, long.task.partial_credit), (48, true));
    assert_eq!(long.task, budget.task);
    assert_eq!(
        (
            short.coldstart.max_steps,
            long.coldstart.max_steps,
            budget.coldstart.max_steps
        ),
        (900, 900, 300)
    );
    let mut same = budget.coldstart.clone();
    same.max_steps = 900;
    assert_eq!(same, long.coldstart, "only the budget differs");
    assert_eq!(long.model, budget.model);
    let keys = [
        short.coldstart_key(),
        long.coldstart_key(),
        budget.coldstart_key(),
    ];
    assert!(
        keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        "one cold start per task and budget: {keys:?}"
    );
    let e = regime_err("coldstart = { max_step = 3 }\n");
    assert!(e.contains("regime 'r'") && e.contains("max_step"), "{e}");
    let e = regime_err("coldstart = { batch_size = 0 }\n");
    assert!(e.contains("regime 'r'") && e.contains("batch_size"), "{e}");
    let e = regime_err("task = { min_len = 20 }\n");
    assert!(e.contains("regime 'r'") && e.contains("min_len"), "{e}");
    let e = regime_err("coldstart = { ulp_jitter = 3 }\n");
    assert!(
        e.contains("regime 'r'") && e.contains("--ulp-jitter"),
        "{e}"
    );
    // A regime paired with its control must start from the same cold start.
    let e = regime_err("[[regimes]]\nname = 'long'\ncontrol = 'r'\ntask = { max_len = 48 }\n");
    assert!(
        e.contains("regime 'long'") && e.contains("'task'") && e.contains("control 'r'"),
        "{e}"
    );
    let e =
        regime_err("[[regimes]]\nname = 'budget'\ncontrol = 'r'\ncoldstart = { max_steps = 9 }\n");
    assert!(e.contains("'coldstart'"), "{e}");
    let same = format!(
        "{HEAD}{ARM}[[regimes]]\nname = 'r'\ntask = {{ max_len = 48 }}\n\
         [[regimes]]\nname = 'd'\ncontrol = 'r'\ntask = {{ max_len = 48 }}\n"
    );
    ExperimentSpec::from_toml(&same, "x.toml").expect("a control with the same task is fine");
}

/// An N sweep at a fixed minibatch size: `minibatch_prompts` sets the batch, and of it and
/// `batch_prompts` the one a later level sets wins; both in one table is an error.
#[test]
fn minibatch_prompts_fixes_the_minibatch_and_the_later_level_wins() {
    let text = format!(
        "{HEAD}preset = 'tiny'\n[rl]\nbatch_prompts = 4\nminibatches = 2\n{ARM}\
         [[arms]]\nname = 'b'\nalgorithm = {{ kind = 'gspo' }}\nrl = {{ batch_prompts = 8 }}\n\
         [[regimes]]\nname = 'n1'\nrl = {{ minibatches = 1, minibatch_prompts = 2 }}\n\
         [[regimes]]\nname = 'n4'\nrl = {{ minibatches = 4, minibatch_prompts = 2 }}\n"
    );
    let s = ExperimentSpec::from_toml(&text, "x.toml").unwrap();
    let got: Vec<(String, String, usize, usize)> = s
        .resolve("flex")
        .unwrap()
        .iter()
        .map(|c| {
            (
                c.regime.clone(),
                c.arm.clone(),
                c.rl.minibatches,
                c.rl.batch_prompts,
            )
        })
        .collect();
    let want = [
        ("n1", "a", 1, 2),
        ("n1", "b", 1, 8),
        ("n4", "a", 4, 8),
        ("n4", "b", 4, 8),
    ];
    let want: Vec<(String, String, usize, usize)> = want
        .iter()
        .map(|&(r, a, n, b)| (r.into(), a.into(), n, b))
        .collect();
    assert_eq!(got, want);
    let e = err(&format!(
        "{HEAD}[rl]\nbatch_prompts = 4\nminibatch_prompts = 2\n{ARM}"
    ));
    assert!(
        e.contains("batch_prompts") && e.contains("minibatch_prompts"),
        "{e}"
    );
}

/// A tiny two-seed run whose arms cover every claim, under the given arm names.
fn tiny_spec(names: [&str; 5]) -> ExperimentSpec {
    let grpo = || Algorithm::Grpo(GrpoConfig::default());
    let mut s = common::tiny_experiment(
        2,
        vec![
            ArmSpec::new(names[0], grpo(), RoutingMode::Native, FfnKind::Moe),
            ArmSpec::new(names[1], grpo(), RoutingMode::R2, FfnKind::Moe),
            ArmSpec::new(names[2], grpo(), RoutingMode::R3, FfnKind::Moe),
            ArmSpec::new(
                names[3],
                Algorithm::Gspo(GspoConfig::default()),
                RoutingMode::Native,
                FfnKind::Moe,
            ),
            ArmSpec::new(names[4], grpo(), RoutingMode::Native, FfnKind::Dense),
        ],
    );
    s.name = "names".into();
    s.flush_every = 2;
    s.rl.mismatch = driftlab::rl::Mismatch::RouterNoise { sigma: 0.3 };
    s
}

fn run(spec: &ExperimentSpec, tag: &str) -> std::path::PathBuf {
    let cache = std::env::temp_dir().join(format!("driftlab-names-cache-{}", std::process::id()));
    let opts = common::run_options(tag, cache);
    let out = opts.out.clone();
    run_experiment(spec, &opts).unwrap();
    out
}

const MOE_DRIFT_NAMES: [&str; 5] = ["grpo", "grpo_r2", "grpo_r3", "gspo", "dense"];
const OTHER_NAMES: [&str; 5] = ["baseline", "replay2", "replay3", "seqlevel", "ctrl"];

#[test]
fn config_json_records_every_cells_resolved_config() {
    let spec = tiny_spec(OTHER_NAMES);
    let out = run(&spec, "cells");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    let cells: Vec<CellConfig> = serde_json::from_value(v["cells"].clone()).unwrap();
    assert_eq!(cells, spec.resolve("flex").unwrap());
    assert_eq!(cells.len(), 5 * 2);
    for c in &cells {
        let arm = spec.arms.iter().find(|a| a.name == c.arm).unwrap();
        assert_eq!(c.rl.algorithm, arm.algorithm, "{}", c.arm);
        assert_eq!((c.rl.routing, c.model.ffn), (arm.routing, arm.ffn));
        assert_eq!((c.rl.total_steps, c.device.as_str()), (2, "flex"));
    }
    assert_eq!(cells[8].rl.algorithm.kind(), AlgorithmKind::Grpo);
    assert_eq!(cells[8].model.ffn, FfnKind::Dense);
    // The machine, so a reader can tell whether bits should match theirs.
    let host: driftlab::util::host::Host = serde_json::from_value(v["host"].clone()).unwrap();
    assert_eq!(
        host,
        driftlab::util::host::Host {
            threads: host.threads,
            ..driftlab::util::host::Host::detect()
        }
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Rename the arms of a run folder (frames and `config.json`).
fn rename(dir: &Path, to: &Path, map: &[(&str, &str)]) {
    std::fs::create_dir_all(to).unwrap();
    for frame in driftlab::metrics::schema::frames() {
        let df = read_parquet(&dir.join(frame.file_name())).unwrap();
        let arms: Vec<String> = driftlab::metrics::frames::str_col(&df, "arm")
            .unwrap()
            .iter()
            .map(|a| map.iter().find(|(f, _)| f == a).unwrap().1.to_string())
            .collect();
        let mut df = df.clone();
        df.with_column(Column::new("arm".into(), arms)).unwrap();
        write_parquet(&mut df, &to.join(frame.file_name())).unwrap();
    }
    let mut text = std::fs::read_to_string(dir.join("config.json")).unwrap();
    for (from, into) in map {
        text = text.replace(&format!("\"{from}\""), &format!("\"{into}\""));
    }
    std::fs::write(to.join("config.json"), text).unwrap();
}

#[test]
fn findings_do_not_depend_on_arm_names() {
    let out = run(&tiny_spec(OTHER_NAMES), "names");
    let renamed = out.with_extension("renamed");
    let map: Vec<(&str, &str)> = OTHER_NAMES.into_iter().zip(MOE_DRIFT_NAMES).collect();
    rename(&out, &renamed, &map);
    let text = |d: &Path| findings(&load_frames(d).unwrap(), &RunInfo::load(d).unwrap()).unwrap();
    let mut own = text(&out);
    for (from, into) in &map {
        own = own.replace(&format!("`{from}`"), &format!("`{into}`"));
    }
    let standard = text(&renamed);
    assert!(
        !standard.contains("not measured"),
        "every claim's arms are present:\n{standard}"
    );
    assert_eq!(own, standard, "the same findings under other arm names");
    let _ = std::fs::remove_dir_all(&out);
    let _ = std::fs::remove_dir_all(&renamed);
}

/// The README's example of the engine settings is a valid spec and resolves as it says.
#[test]
fn the_readme_engine_settings_example_resolves() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let at = readme
        .find("A depth sweep at fixed width, an asynchronous regime")
        .expect("the example is in the README");
    let block = &readme[at..];
    let start = block.find("```toml\n").unwrap() + "```toml\n".len();
    let toml = &block[start..start + block[start..].find("```").unwrap()];
    let s = ExperimentSpec::from_toml(&format!("{HEAD}{toml}"), "README.md").unwrap();
    let cells = s.resolve("flex").unwrap();
    assert_eq!(cells[0].model.n_layers, 8);
    let c = &cells[1].rl;
    assert_eq!(c.rollout_staleness, 2);
    assert_eq!(c.old_logp, driftlab::rl::OldLogp::Rollout);
    assert_eq!(c.algorithm.kind(), AlgorithmKind::Gmpo);
    assert_eq!(c.router_shift.as_ref().map(|r| r.floor), Some(0.8));
}

/// Two arms with identical frames are reported once: listed together under "Identical arms",
/// and the pooled drift finding counts them as one arm.
#[test]
fn identical_arms_are_merged_in_the_report() {
    let spec = tiny_spec(OTHER_NAMES);
    let out = run(&spec, "twins");
    let distinct = |md: &str| -> String {
        let at = md.find("mean over the ").expect("pooled drift line") + "mean over the ".len();
        md[at..].split_whitespace().next().unwrap().to_string()
    };
    driftlab::report::write_report(&out).unwrap();
    let md0 = std::fs::read_to_string(out.join("report.md")).unwrap();
    for frame in driftlab::metrics::schema::frames() {
        let path = out.join(frame.file_name());
        let df = read_parquet(&path).unwrap();
        let twin = df
            .clone()
            .lazy()
            .filter(col("arm").eq(lit("baseline")))
            .with_column(lit("twin").alias("arm"))
            .collect()
            .unwrap();
        let mut all = df.vstack(&twin).unwrap();
        write_parquet(&mut all, &path).unwrap();
    }
    // The twin's cells in config.json and status.json too: the report checks that the frames,
    // the status and the config hold the same cells.
    let twin_of = |list: &mut serde_json::Value| {
        let items = list.as_array_mut().unwrap();
        let twins: Vec<serde_json::Value> = items
            .iter()
            .filter(|c| c["arm"] == "baseline")
            .map(|c| {
                let mut t = c.clone();
                t["arm"] = "twin".into();
                t
            })
            .collect();
        items.extend(twins);
    };
    let edit_json = |name: &str, edit: &dyn Fn(&mut serde_json::Value)| {
        let path = out.join(name);
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&path, serde_json::to_string(&v).unwrap()).unwrap();
    };
    edit_json("status.json", &|v| twin_of(v));
    edit_json("config.json", &|v| {
        twin_of(&mut v["cells"]);
        let n = v["cells"].as_array().unwrap().len();
        v["ran"] = (0..n).collect::<Vec<_>>().into();
    });
    driftlab::report::write_report(&out).unwrap();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let groups = driftlab::report::identical::identical_groups(
        &read_parquet(&out.join("steps.parquet")).unwrap(),
    )
    .unwrap();
    assert!(
        groups
            .iter()
            .any(|g| g.contains(&"baseline".to_string()) && g.contains(&"twin".to_string())),
        "{groups:?}"
    );
    let section = &md[md.find("## Identical arms").expect("listed")..];
    let line = section
        .lines()
        .find(|l| l.contains("`twin`"))
        .expect("the twin is listed");
    assert!(line.contains("`baseline`"), "{line}");
    assert_eq!(
        distinct(&md),
        distinct(&md0),
        "the twin is not counted again"
    );
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn every_named_experiment_parses_resolves_and_says_what_it_is() {
    let specs = driftlab::experiment::list_specs(std::path::Path::new("experiments")).unwrap();
    assert!(specs.len() >= 3, "{} specs", specs.len());
    for (name, spec) in specs {
        let spec = spec.unwrap_or_else(|e| panic!("experiments/{name}.toml: {e:#}"));
        assert_eq!(
            spec.name, name,
            "experiments/{name}.toml names itself '{}'",
            spec.name
        );
        assert!(
            spec.description.len() > 20,
            "{name}: describe the experiment"
        );
        let cells = spec
            .resolve("flex")
            .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        assert!(!cells.is_empty(), "{name} has no cells");
    }
}

/// Cold-start settings come from the spec's preset, so `--preset` brings its own: `medium`
/// cells train at lr 1e-3, `toy` ones at 3e-3; a `[coldstart]` key overrides either, and a
/// misspelt one is an error that names it.
#[test]
fn cold_start_settings_follow_the_preset_under_the_specs_keys() {
    use driftlab::coldstart::ColdStartConfig;
    use driftlab::model::Preset;
    let lr = |s: &ExperimentSpec| s.resolve("flex").unwrap()[0].coldstart.lr;
    let toy = ExperimentSpec::from_toml(&format!("{HEAD}preset = 'toy'\n{ARM}"), "x.toml").unwrap();
    assert_eq!(lr(&toy), 3e-3);
    assert_eq!(
        toy.resolve("flex").unwrap()[0].coldstart,
        ColdStartConfig::default()
    );
    let mut medium = toy.clone();
    medium.preset = Preset::Medium;
    assert_eq!(lr(&medium), 1e-3);
    assert_eq!(
        medium.resolve("flex").unwrap()[0].coldstart,
        ColdStartConfig::for_preset(Preset::Medium)
    );
    let set = ExperimentSpec::from_toml(
        &format!("{HEAD}preset = 'medium'\n[coldstart]\nlr = 2e-3\n{ARM}"),
        "x.toml",
    )
    .unwrap();
    assert_eq!(lr(&set), 2e-3);
    let e = err(&format!("{HEAD}[coldstart]\nmax_step = 3\n{ARM}"));
    assert!(e.contains("'coldstart'") && e.contains("max_step"), "{e}");
}

/// Every committed results folder's recorded spec (written with the older, typed regime
/// override keys) still parses and resolves to exactly the cells that folder ran.
#[test]
fn committed_specs_resolve_to_the_cells_they_ran() {
    let mut checked = 0;
    for entry in std::fs::read_dir("results").unwrap() {
        let path = entry.unwrap().path().join("config.json");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut spec_json = v["spec"].clone();
        if spec_json.is_null() {
            continue;
        }
        spec_json.as_object_mut().unwrap().remove("target_reward");
        let spec: ExperimentSpec =
            serde_json::from_value(spec_json).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ran: Vec<CellConfig> =
            serde_json::from_value(driftlab::experiment::cell_groups::cells_value(&v)).unwrap();
        let device = ran.first().map_or(String::new(), |c| c.device.clone());
        let resolved = spec.resolve(&device).unwrap();
        assert_eq!(resolved.len(), ran.len(), "{}", path.display());
        for (a, b) in resolved.iter().zip(&ran) {
            assert_eq!(a, b, "{}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 9, "{checked} folders");
}

/// A regime overrides `[rl]` keys one way, in its `rl` table: the keys older specs set on the
/// regime itself are errors that show the `rl` form.
#[test]
fn regime_rl_keys_outside_its_rl_table_are_errors_that_show_the_rl_form() {
    let e = regime_err("minibatches = 2\n");
    assert!(
        e.contains("regime 'r', key 'minibatches'") && e.contains("`rl = { minibatches = 2 }`"),
        "{e}"
    );
    let e = regime_err("lr = 0.5\n");
    assert!(e.contains("`rl = { optimizer = { lr = 0.5 } }`"), "{e}");
    let ok = format!(
        "{HEAD}{ARM}[[regimes]]\nname = 'r'\nrl = {{ minibatches = 2, optimizer = {{ lr = 0.5 }} }}\n"
    );
    let cells = ExperimentSpec::from_toml(&ok, "x.toml")
        .unwrap()
        .resolve("flex")
        .unwrap();
    assert_eq!(
        (cells[0].rl.minibatches, cells[0].rl.optimizer.lr),
        (2, 0.5)
    );
}

/// Every masking correction is an `[rl]` key (and an arm's or regime's `rl` key) with its own
/// checks; a misspelt key or level is an error naming it.
#[test]
fn masking_corrections_are_rl_keys_and_misspellings_name_the_key() {
    let ok = format!(
        "{HEAD}[rl]\nicepop = {{ low = 0.5, high = 5.0 }}\n\
         mis = {{ level = 'geometric', low = 0.999, high = 1.001 }}\n\
         opsm = {{ threshold = 0.5 }}\nallow_stacked_engine_ratio = true\n{ARM}\
         [[arms]]\nname = 'b'\nalgorithm = {{ kind = 'gspo' }}\nrl = {{ mis = {{ level = 'token' }} }}\n"
    );
    let cells = ExperimentSpec::from_toml(&ok, "x.toml")
        .unwrap()
        .resolve("flex")
        .unwrap();
    let a = &cells[0].rl;
    assert_eq!(a.icepop.as_ref().unwrap().high, 5.0);
    assert_eq!(
        a.mis.as_ref().unwrap().level,
        driftlab::rl::MisLevel::Geometric
    );
    assert_eq!(a.opsm.as_ref().unwrap().threshold, 0.5);
    let b = &cells[1].rl;
    assert_eq!(b.mis.as_ref().unwrap().level, driftlab::rl::MisLevel::Token);
    assert_eq!(
        b.mis.as_ref().unwrap().high,
        1.001,
        "the arm's table merges into [rl]'s"
    );
    let e = err(&format!("{HEAD}[rl]\nicepop = {{ hgh = 5.0 }}\n{ARM}"));
    assert!(e.contains("hgh"), "{e}");
    let e = err(&format!("{HEAD}[rl]\nmis = {{ level = 'sequnce' }}\n{ARM}"));
    assert!(e.contains("sequnce"), "{e}");
    let e = err(&format!(
        "{HEAD}[rl]\nicepop = {{ low = 2.0, high = 5.0 }}\n{ARM}"
    ));
    assert!(e.contains("icepop") && e.contains("contain 1"), "{e}");
    let e = err(&format!("{HEAD}[rl]\nopsm = {{ threshold = -1.0 }}\n{ARM}"));
    assert!(e.contains("opsm.threshold"), "{e}");
}

/// Two fixes that weigh tokens by the same engine ratio (tis with icepop or mis, icepop with
/// mis) are refused unless the spec declares the stacking, with the reason in the error; one
/// such fix with opsm (which weighs by no engine ratio) needs no declaration.
#[test]
fn stacked_engine_ratio_fixes_are_refused_unless_declared() {
    for (a, b) in [("tis", "icepop"), ("tis", "mis"), ("icepop", "mis")] {
        let fixes = format!("{a} = {{}}\n{b} = {{}}\n");
        let e = err(&format!("{HEAD}[rl]\n{fixes}{ARM}"));
        assert!(
            e.contains(&format!("{a} and {b}"))
                && e.contains("same engine ratio")
                && e.contains("twice")
                && e.contains("allow_stacked_engine_ratio = true"),
            "{e}"
        );
        // Stacked by an arm on top of [rl]'s fix: refused too.
        let e = err(&format!(
            "{HEAD}[rl]\n{a} = {{}}\n{ARM}rl = {{ {b} = {{}} }}\n"
        ));
        assert!(e.contains(&format!("{a} and {b}")), "{e}");
        let cells = ExperimentSpec::from_toml(
            &format!("{HEAD}[rl]\n{fixes}allow_stacked_engine_ratio = true\n{ARM}"),
            "x.toml",
        )
        .unwrap()
        .resolve("flex")
        .unwrap();
        assert!(cells[0].rl.allow_stacked_engine_ratio);
        let on = cells[0].rl.fixes().iter().filter(|f| f.is_some()).count();
        assert_eq!(on, 2, "{a} and {b} on, as declared");
        let written = serde_json::to_value(&cells[0].rl).unwrap();
        assert_eq!(written["allow_stacked_engine_ratio"], true);
    }
    for one in ["tis", "icepop", "mis"] {
        let cells = ExperimentSpec::from_toml(
            &format!("{HEAD}[rl]\n{one} = {{}}\nopsm = {{}}\n{ARM}"),
            "x.toml",
        )
        .unwrap()
        .resolve("flex")
        .unwrap();
        let written = serde_json::to_value(&cells[0].rl).unwrap();
        assert!(
            written.get("allow_stacked_engine_ratio").is_none(),
            "left out when false, so older configs read the same"
        );
    }
}
