//! The update loop: every objective × routing mode, on-policy invariants, replay, drift knobs,
//! determinism.

mod common;
use common::*;
use driftlab::metrics::drift::model_drift;
use driftlab::model::{Model, ModelConfig, NO_ROUTE};
use driftlab::rl::{
    Algorithm, DriftInjection, GrpoConfig, Mismatch, RlConfig, RoutingMode, Trainer,
};
use driftlab::task::{Task, TaskConfig, Tokenizer};

#[test]
fn every_objective_and_routing_mode_trains_every_parameter() {
    for alg in Algorithm::all_defaults() {
        for &routing in RoutingMode::ALL {
            let mut cfg = tiny_rl(alg.clone(), routing);
            cfg.optimizer.lr = 1e-2;
            let mut t = trainer(cfg, 3);
            let before = t.model.weights.to_host();
            let mut reward_spread = false;
            let names = t.model.weights.names();
            for _ in 0..2 {
                let out = t.step();
                reward_spread |= out.adv.iter().any(|&a| a != 0.0);
                assert_eq!(out.updates.len(), 2);
                for u in &out.updates {
                    assert!(
                        u.loss_total.is_finite() && u.applied,
                        "{} {}: loss {} applied {}",
                        alg.name(),
                        routing.name(),
                        u.loss_total,
                        u.applied
                    );
                }
                // First minibatch of every rollout batch is exactly on-policy.
                let u0 = &out.updates[0];
                assert!(
                    u0.stats.ratio_tok.iter().all(|&w| w == 1.0),
                    "{} {}: first minibatch off-policy",
                    alg.name(),
                    routing.name()
                );
                assert!(
                    u0.stats
                        .clip_low
                        .iter()
                        .chain(&u0.stats.clip_high)
                        .all(|c| !c)
                );
            }
            assert!(
                reward_spread,
                "rewards must vary within some group for this test to mean anything"
            );
            let after = t.model.weights.to_host();
            for ((a, b), (name, _)) in before.iter().zip(&after).zip(&names) {
                assert!(
                    a != b,
                    "{} {}: parameter {name} did not change",
                    alg.name(),
                    routing.name()
                );
            }
        }
    }
}

#[test]
fn replay_runs_exactly_the_recorded_routes() {
    let mut t = trainer(
        tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::R2),
        5,
    );
    t.cfg.optimizer.lr = 1e-2;
    for _ in 0..2 {
        let out = t.step();
        for u in &out.updates {
            assert_eq!(
                u.routes_used, u.routes_old,
                "r2 replays π_old's native routes in every update"
            );
        }
        // Minibatch 1's forward equals the native forward (its native routes are π_old's).
        assert_eq!(out.updates[0].routes_before, out.updates[0].routes_old);
    }
    let mut t = trainer(
        tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::R3),
        6,
    );
    let out = t.step();
    // With mismatch = none the rollout engine routes like the trainer wherever it routed.
    let k = t.model.cfg.top_k;
    for (ro, old) in out.routes_rollout.iter().zip(&out.routes_old) {
        let (mut compared, mut same) = (0, 0);
        for (a, b) in ro.chunks_exact(k).zip(old.chunks_exact(k)) {
            if a[0] != NO_ROUTE {
                compared += 1;
                same += usize::from(a == b);
            }
        }
        assert!(compared > 0);
        assert_eq!(
            same, compared,
            "r3 routes equal native π_old routes without mismatch"
        );
    }
    for u in &out.updates {
        let used_known: Vec<bool> = u.routes_used[0]
            .chunks_exact(k)
            .map(|c| c[0] != NO_ROUTE)
            .collect();
        assert!(
            used_known.iter().all(|&x| x),
            "every position runs some experts"
        );
    }
}

#[test]
fn router_noise_mismatch_moves_rollout_routes_but_not_the_trainer() {
    let mut cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::R3);
    cfg.mismatch = Mismatch::RouterNoise { sigma: 1.0 };
    let mut t = trainer(cfg, 7);
    let out = t.step();
    let k = t.model.cfg.top_k;
    let valid_routed: Vec<bool> = out.routes_rollout[0]
        .chunks_exact(k)
        .map(|c| c[0] != NO_ROUTE)
        .collect();
    let (frac, _, _, _) = model_drift(&out.routes_old, &out.routes_rollout, &valid_routed, k);
    assert!(
        frac > 0.05,
        "noisy rollout routes differ from the trainer's: {frac}"
    );
    assert!(
        out.updates[0].stats.ratio_tok.iter().all(|&w| w == 1.0),
        "mismatch never touches the trainer"
    );
    let diff = out
        .logp_mu
        .iter()
        .zip(&out.logp_old)
        .filter(|(a, b)| a != b)
        .count();
    assert!(diff > 0, "logp_mu differs from logp_old under mismatch");
}

#[test]
fn drift_injection_keeps_the_first_minibatch_on_policy() {
    let mut cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
    cfg.minibatches = 4;
    cfg.batch_prompts = 4;
    cfg.drift_injection = Some(DriftInjection::Sigma { sigma: 1.0 });
    let mut t = trainer(cfg, 8);
    let out = t.step();
    assert!(out.updates[0].stats.ratio_tok.iter().all(|&w| w == 1.0));
    let k = t.model.cfg.top_k;
    let since: Vec<f64> = out
        .updates
        .iter()
        .map(|u| model_drift(&u.routes_old, &u.routes_after, &u.valid, k).0)
        .collect();
    assert!(
        since[0] > 0.05,
        "a σ = 1 walk step changes routes: {since:?}"
    );
    // Under r2 the injected walk only moves gates: the experts that run are the recorded ones.
    let mut cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::R2);
    cfg.drift_injection = Some(DriftInjection::Sigma { sigma: 1.0 });
    let mut t = trainer(cfg, 8);
    for u in &t.step().updates {
        assert_eq!(u.routes_used, u.routes_old);
    }
}

#[test]
fn calibrated_drift_injection_hits_its_target_on_toy() {
    let model_cfg =
        ModelConfig::preset(driftlab::model::Preset::Toy, Tokenizer.vocab_size()).unwrap();
    let task = Task::new(TaskConfig::default(), 1).unwrap();
    let cfg = RlConfig {
        drift_injection: Some(DriftInjection::TargetExpertFrac { target: 0.10 }),
        ..RlConfig::default()
    };
    let mut t = Trainer::new(cfg, Model::init(model_cfg, 1, &flex()), task, 1).unwrap();
    let k = t.model.cfg.top_k;
    let mut fracs = Vec::new();
    for _ in 0..2 {
        let out = t.step();
        let u = &out.updates[0];
        fracs.push(model_drift(&u.routes_before, &u.routes_after, &u.valid, k).0);
    }
    assert!(t.drift_sigma.unwrap() > 0.0);
    for f in &fracs {
        assert!(
            (0.07..=0.13).contains(f),
            "one-step share of changed experts {f} (all: {fracs:?})"
        );
    }
}

#[test]
fn same_seed_same_rewards_and_losses() {
    let run = || {
        let mut t = trainer(
            tiny_rl(Algorithm::Gspo(Default::default()), RoutingMode::R2),
            9,
        );
        (0..2)
            .map(|_| t.step())
            .map(|o| {
                (
                    o.rewards,
                    o.updates.iter().map(|u| u.loss_total).collect::<Vec<_>>(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn impossible_rl_settings_are_errors() {
    let task = Task::new(TaskConfig::default(), 0).unwrap();
    let bad = RlConfig {
        minibatches: 3,
        ..RlConfig::default()
    };
    let e = format!(
        "{:#}",
        Trainer::new(bad, tiny_model(0), task.clone(), 0)
            .err()
            .unwrap()
    );
    assert!(
        e.contains("must divide") && e.contains("[1, 2, 4, 8, 16]"),
        "{e}"
    );
    let bad = RlConfig {
        group_size: 1,
        ..RlConfig::default()
    };
    assert!(
        format!(
            "{:#}",
            Trainer::new(bad, tiny_model(0), task.clone(), 0)
                .err()
                .unwrap()
        )
        .contains("group_size")
    );
    let long = Task::new(
        TaskConfig {
            min_len: 100,
            max_len: 120,
            ..TaskConfig::default()
        },
        0,
    )
    .unwrap();
    assert!(
        format!(
            "{:#}",
            Trainer::new(RlConfig::default(), tiny_model(0), long, 0)
                .err()
                .unwrap()
        )
        .contains("max_seq_len")
    );
}

#[test]
fn a_non_finite_loss_skips_the_update_and_never_poisons_the_weights() {
    let mut t = trainer(
        tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native),
        4,
    );
    t.cfg.aux_coef = f64::NAN; // validated configs cannot say this; it stands in for a NaN loss
    let before = t.model.weights.to_host();
    let out = t.step();
    for u in &out.updates {
        assert!(!u.applied);
        assert_eq!(u.skip_reason.as_deref(), Some("non-finite loss"));
    }
    assert_eq!(
        t.model.weights.to_host(),
        before,
        "skipped updates leave the weights untouched"
    );
    t.cfg.aux_coef = 1e-3;
    let out = t.step();
    assert!(
        out.updates.iter().all(|u| u.applied),
        "training resumes once the loss is finite"
    );
}

/// Two steps of a trainer on a rayon pool of `threads` threads.
fn steps_on(cfg: RlConfig, threads: usize) -> Vec<driftlab::rl::StepOutput> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap();
    pool.install(|| {
        let mut t = trainer(cfg, 5);
        (0..2).map(|_| t.step()).collect()
    })
}

#[test]
fn micro_batches_and_rollout_shards_give_the_same_numbers_on_one_thread_or_two() {
    let mut noisy = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::R3);
    noisy.mismatch = Mismatch::RouterNoise { sigma: 0.1 };
    let mut drifting = tiny_rl(Algorithm::Gspo(Default::default()), RoutingMode::R2);
    drifting.drift_injection = Some(DriftInjection::Sigma { sigma: 0.5 });
    for cfg in [noisy, drifting] {
        assert_eq!((cfg.micro_per_minibatch(), cfg.rollout_shards), (2, 2));
        let (a, b) = (steps_on(cfg.clone(), 1), steps_on(cfg, 2));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.rewards, y.rewards);
            assert_eq!(x.logp_mu, y.logp_mu);
            assert_eq!(x.logp_old, y.logp_old);
            assert_eq!(x.routes_rollout, y.routes_rollout);
            for (u, v) in x.updates.iter().zip(&y.updates) {
                assert_eq!(u.stats, v.stats);
                assert_eq!(
                    (u.loss_total, u.grad_norm, &u.routes_after, &u.probs_after),
                    (v.loss_total, v.grad_norm, &v.routes_after, &v.probs_after)
                );
            }
        }
    }
}

#[test]
fn micro_batches_and_rollout_shards_change_rounding_only() {
    // Load-balancing and z-loss on, at a weight where they move the total and the gradient.
    let mut base = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
    (base.aux_coef, base.z_coef) = (0.1, 0.01);
    let run = |micro: usize, shards: usize| {
        let mut cfg = base.clone();
        cfg.micro_batches = micro;
        cfg.rollout_shards = shards;
        trainer(cfg, 6).step()
    };
    let whole = run(1, 1);
    for (micro, shards) in [(2, 1), (1, 2), (2, 2)] {
        let o = run(micro, shards);
        let what = format!("micro_batches {micro}, rollout_shards {shards}");
        assert_eq!(o.rewards, whole.rewards, "{what}: same samples");
        let near = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-5);
        assert!(near(&o.logp_mu, &whole.logp_mu), "{what}");
        assert!(near(&o.logp_old, &whole.logp_old), "{what}");
        for (u, v) in o.updates.iter().zip(&whole.updates) {
            assert!(near(&u.stats.logp, &v.stats.logp), "{what}");
            assert!(
                (u.loss_aux - v.loss_aux).abs() <= 1e-5,
                "{what}: aux {} vs {}",
                u.loss_aux,
                v.loss_aux
            );
            assert!(
                (u.loss_z - v.loss_z).abs() <= 1e-4,
                "{what}: z {} vs {}",
                u.loss_z,
                v.loss_z
            );
            assert!(
                (u.loss_total - v.loss_total).abs() <= 1e-5,
                "{what}: {} vs {}",
                u.loss_total,
                v.loss_total
            );
            assert!(
                (u.grad_norm - v.grad_norm).abs() <= 1e-4 * v.grad_norm.max(1e-3),
                "{what}: grad norm {} vs {}",
                u.grad_norm,
                v.grad_norm
            );
        }
    }
}
