//! On-policy distillation in the loop: the teacher's settings and their errors, a teacher that
//! never replays, every distillation objective under every routing mode, and a run whose
//! frames log the teacher KL.

mod common;
use common::*;
use driftlab::experiment::{ExperimentSpec, run_experiment};
use driftlab::model::{Model, ModelConfig};
use driftlab::rl::{Algorithm, AlgorithmKind, Mismatch, RoutingMode, TeacherConfig, Trainer};
use driftlab::util::io::read_parquet;

/// Arms with every distillation objective and every key each takes.
const OPD_ARMS: &str = r#"[[arms]]
name = "gvpd"
algorithm = { kind = "gvpd", beta = 0.2, alpha = 1.0 }

[[arms]]
name = "anchored"
algorithm = { kind = "gvpd", beta = 0.1, lambda = 0.5 }

[[arms]]
name = "pg"
algorithm = { kind = "opd_pg", lambda = 0.5, gamma = 0.9, form = { ppo = { eps_low = 0.2, eps_high = 0.28 } }, aggregation = "seq_mean_token_mean", student = "engine", env_advantage = true }

[[arms]]
name = "kl"
algorithm = { kind = "opd_kl", beta = 0.5, temperature = 2.0 }
"#;

/// The tiny test spec with `arms` and `teacher` (a TOML inline table, or empty for none).
fn spec(arms: &str, teacher: &str) -> String {
    let text = tiny_spec_toml("opd", 2, 1, arms);
    if teacher.is_empty() {
        return text;
    }
    text.replace("[rl]\n", &format!("[rl]\nteacher = {teacher}\n"))
}

fn load_err(text: &str) -> String {
    match ExperimentSpec::from_toml(text, "x.toml").and_then(|s| s.resolve("flex").map(|_| ())) {
        Ok(()) => panic!("accepted:\n{text}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn a_spec_with_a_teacher_and_every_new_key_validates() {
    let teacher =
        r#"{ preset = "tiny", seed = 5, coldstart = { max_steps = 30, batch_size = 16 } }"#;
    let s = ExperimentSpec::from_toml(&spec(OPD_ARMS, teacher), "x.toml").unwrap();
    let cells = s.resolve("flex").unwrap();
    assert_eq!(cells.len(), 4 * 2);
    for c in &cells {
        let t = c.rl.teacher.as_ref().expect("every cell has the teacher");
        assert_eq!(t.seed_in(c.seed), 5);
        assert_eq!(t.coldstart.max_steps, 30);
        assert_eq!(
            t.coldstart.target_accuracy, 2.0,
            "the teacher never stops early"
        );
        assert!(c.rl.algorithm.needs_teacher());
    }
}

#[test]
fn a_distillation_objective_without_a_teacher_is_refused_naming_it() {
    for kind in ["gvpd", "opd_pg", "opd_kl"] {
        let arms = format!("[[arms]]\nname = \"a\"\nalgorithm = {{ kind = \"{kind}\" }}\n");
        let e = load_err(&spec(&arms, ""));
        assert!(
            e.contains(&format!("algorithm '{kind}' distils a teacher")) && e.contains("teacher ="),
            "{kind}: {e}"
        );
    }
}

#[test]
fn a_wrong_teacher_or_objective_key_is_refused_naming_it() {
    let gvpd = "[[arms]]\nname = \"a\"\nalgorithm = { kind = \"gvpd\" }\n";
    let e = load_err(&spec(gvpd, r#"{ preset = "tiny", layers = 3 }"#));
    assert!(e.contains("layers"), "{e}");
    let e = load_err(&spec(gvpd, r#"{ preset = "huge" }"#));
    assert!(e.contains("huge"), "{e}");
    let e = load_err(&spec(gvpd, r#"{ coldstart = { max_steps = 0 } }"#));
    assert!(
        e.contains("rl.teacher.coldstart") && e.contains("max_steps"),
        "{e}"
    );
    let bad = "[[arms]]\nname = \"a\"\nalgorithm = { kind = \"opd_kl\", beta = 1.5 }\n";
    let e = load_err(&spec(bad, "{}"));
    assert!(e.contains("opd_kl.beta"), "{e}");
    let bad = "[[arms]]\nname = \"a\"\nalgorithm = { kind = \"opd_pg\", lamda = 1 }\n";
    let e = load_err(&spec(bad, "{}"));
    assert!(e.contains("lamda"), "{e}");
    let bad = "[[arms]]\nname = \"a\"\nalgorithm = { kind = \"gvpd\", alpha = 1, lambda = 1 }\n";
    let e = load_err(&spec(bad, "{}"));
    assert!(e.contains("gvpd.lambda"), "{e}");
}

#[test]
fn a_teacher_with_another_vocabulary_is_refused_naming_both() {
    let cfg = tiny_rl(
        Algorithm::default_of(AlgorithmKind::Gvpd),
        RoutingMode::Native,
    );
    let t = Trainer::new(cfg, warm_tiny(), short_sort(), 0).unwrap();
    let other = ModelConfig {
        vocab_size: tiny_cfg().vocab_size + 3,
        ..tiny_cfg()
    };
    let e = match t.with_teacher(Model::init(other, 1, &flex())) {
        Ok(_) => panic!("a teacher with another vocabulary was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("vocabulary") && e.contains("tokenizer"), "{e}");
}

/// The teacher scores the same samples the same way whatever the student replays: its
/// log-probs under r2 and r3 (with an engine that picks other experts) are those of native
/// routing, bit for bit, while the student's π_old does move with the replayed routes.
#[test]
fn the_teacher_never_replays() {
    let run = |routing| {
        let mut cfg = tiny_rl(Algorithm::default_of(AlgorithmKind::Gvpd), routing);
        cfg.mismatch = Mismatch::RouteFlip { sigma: 0.5 };
        trainer(cfg, 4).step()
    };
    let native = run(RoutingMode::Native);
    let t = native.logp_teacher.clone().expect("teacher log-probs");
    assert_eq!(t.len(), native.logp_old.len());
    assert!(t.iter().all(|x| x.is_finite() && *x <= 0.0));
    for routing in [RoutingMode::R2, RoutingMode::R3] {
        let out = run(routing);
        assert_eq!(out.rewards, native.rewards, "{routing}: the same rollout");
        assert_eq!(
            out.logp_teacher.as_ref(),
            Some(&t),
            "{routing}: the teacher's log-probs moved with the student's routing"
        );
    }
    let r3 = run(RoutingMode::R3);
    assert_ne!(
        r3.logp_old, native.logp_old,
        "R3 replays the engine's routes for π_old"
    );
}

/// Every distillation objective trains under every routing mode and an engine mismatch:
/// finite losses, every update applied, minibatch 1 on-policy.
#[test]
fn every_distillation_objective_trains_under_every_routing_mode() {
    for kind in [
        AlgorithmKind::Gvpd,
        AlgorithmKind::OpdPg,
        AlgorithmKind::OpdKl,
    ] {
        for &routing in RoutingMode::ALL {
            let mut cfg = tiny_rl(Algorithm::default_of(kind), routing);
            cfg.mismatch = Mismatch::RouteFlip { sigma: 0.5 };
            let out = trainer(cfg, 5).step();
            for u in &out.updates {
                assert!(
                    u.applied && u.loss_total.is_finite(),
                    "{kind} {routing}: {:?} {:?}",
                    u.loss_total,
                    u.skip_reason
                );
            }
            assert!(out.updates[0].stats.ratio_tok.iter().all(|&w| w == 1.0));
        }
    }
}

/// GVPD moves the student towards the teacher: the teacher KL of the rollout batches falls
/// over a few steps at a large learning rate.
#[test]
fn gvpd_moves_the_student_towards_the_teacher() {
    let mut cfg = tiny_rl(
        Algorithm::default_of(AlgorithmKind::Gvpd),
        RoutingMode::Native,
    );
    cfg.optimizer.lr = 3e-3;
    let mut t = trainer(cfg, 6);
    let kl = |t: &mut Trainer| {
        let o = t.step();
        let tl = o.logp_teacher.unwrap();
        let gap: f64 = (o.logp_old.iter().zip(&tl))
            .map(|(&s, &t)| f64::from(s - t))
            .sum();
        gap / tl.len() as f64
    };
    let first = kl(&mut t);
    let mut last = first;
    for _ in 0..7 {
        last = kl(&mut t);
    }
    assert!(last < first, "teacher KL per token {first} → {last}");
}

/// A run with a teacher trains it from the cache's recipe and logs `teacher_kl` on every
/// step; a run without one leaves the column null.
#[test]
fn a_run_with_a_teacher_logs_the_teacher_kl() {
    let arms = "[[arms]]\nname = \"gvpd\"\nalgorithm = { kind = \"gvpd\" }\n\n[[arms]]\nname = \"grpo\"\nalgorithm = { kind = \"grpo\" }\n";
    let teacher =
        r#"{ preset = "tiny", coldstart = { max_steps = 20, batch_size = 16, eval_every = 10 } }"#;
    let s = ExperimentSpec::from_toml(&spec(arms, teacher), "x.toml").unwrap();
    let cache = std::env::temp_dir().join(format!("driftlab-opd-cache-{}", std::process::id()));
    let o = run_options("opd-run", cache);
    let st = run_experiment(&s, &o).unwrap();
    assert!(st.iter().all(|c| c.status == "ok"), "{st:?}");
    let steps = read_parquet(&o.out.join("steps.parquet")).unwrap();
    let kl = driftlab::metrics::frames::f64_col(&steps, "teacher_kl").unwrap();
    assert_eq!(kl.len(), 2 * 2 * 2);
    assert!(kl.iter().all(|x| x.is_some_and(f64::is_finite)), "{kl:?}");
    let plain =
        ExperimentSpec::from_toml(&spec(arms.split("\n\n").nth(1).unwrap(), ""), "x.toml").unwrap();
    let o2 = run_options("opd-run-plain", o.cache_dir.clone());
    run_experiment(&plain, &o2).unwrap();
    let steps = read_parquet(&o2.out.join("steps.parquet")).unwrap();
    let kl = driftlab::metrics::frames::f64_col(&steps, "teacher_kl").unwrap();
    assert!(kl.iter().all(Option::is_none), "{kl:?}");
    let _ = std::fs::remove_dir_all(&o.out);
    let _ = std::fs::remove_dir_all(&o2.out);
    let _ = std::fs::remove_dir_all(&o.cache_dir);
}

#[test]
fn the_default_teacher_is_a_longer_cold_start() {
    let t = TeacherConfig::default();
    let cs = driftlab::coldstart::ColdStartConfig::default();
    assert_eq!(t.coldstart.max_steps, 2000);
    assert!(t.coldstart.target_accuracy > 1.0);
    assert_eq!(t.coldstart.lr, cs.lr);
    assert_eq!(t.seed, None);
}

/// The teacher's routing beside the student's: a teacher with the student's own weights picks
/// the student's experts everywhere (overlap 1 in both units), and its router's mass on its k
/// experts is a share; a teacher of other weights overlaps less.
#[test]
fn the_teacher_student_router_overlap_is_one_for_the_student_itself() {
    use driftlab::metrics::rows::teacher_routing;
    let cfg = tiny_rl(
        Algorithm::default_of(AlgorithmKind::Gvpd),
        RoutingMode::Native,
    );
    let same = Trainer::new(cfg.clone(), warm_tiny(), short_sort(), 4)
        .unwrap()
        .with_teacher(warm_tiny())
        .unwrap()
        .step();
    let [top1, topk, mass] = teacher_routing(&same);
    assert_eq!((top1, topk), (Some(1.0), Some(1.0)));
    let mass = mass.expect("a MoE teacher's mass");
    assert!(mass > 0.0 && mass <= 1.0 + 1e-6, "{mass}");
    let other = trainer(cfg, 4).step();
    let [top1, topk, _] = teacher_routing(&other);
    let (top1, topk) = (top1.unwrap(), topk.unwrap());
    assert!(top1 < 1.0 && topk < 1.0 && topk > 0.0, "{top1} {topk}");
}
