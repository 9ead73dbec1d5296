//! The settings papers run MoE RL in: π_old from the rollout engine, asynchronous staleness,
//! a fixed minibatch size.

mod common;
use common::*;
use driftlab::rl::rollout::rollout;
use driftlab::rl::{Algorithm, GrpoConfig, Mismatch, OldLogp, RlConfig, RoutingMode, StepOutput};

fn grpo(routing: RoutingMode) -> RlConfig {
    tiny_rl(Algorithm::Grpo(GrpoConfig::default()), routing)
}

/// The largest |w − 1| over the first minibatch's token ratios.
fn first_minibatch_dev(out: &StepOutput) -> f32 {
    out.updates[0]
        .stats
        .ratio_tok
        .iter()
        .map(|w| (w - 1.0).abs())
        .fold(0.0, f32::max)
}

fn one_step(cfg: RlConfig, seed: u64) -> StepOutput {
    trainer(cfg, seed).step()
}

/// Without a mismatch the rollout engine's log-probs are the trainer's up to KV-cache rounding,
/// so π_old from either source gives the same losses; with the recompute, minibatch 1 is
/// exactly on-policy.
#[test]
fn rollout_old_logp_without_mismatch_matches_the_recompute_up_to_rounding() {
    for alg in Algorithm::all_defaults() {
        let mut cfg = tiny_rl(alg.clone(), RoutingMode::Native);
        let a = one_step(cfg.clone(), 3);
        cfg.old_logp = OldLogp::Rollout;
        let b = one_step(cfg, 3);
        assert_eq!(a.rewards, b.rewards, "{}: same rollout", alg.name());
        assert_eq!(first_minibatch_dev(&a), 0.0, "{}", alg.name());
        let dev = first_minibatch_dev(&b);
        assert!(
            dev < 1e-5,
            "{}: rollout π_old is the recompute up to rounding: {dev}",
            alg.name()
        );
        for (x, y) in a.updates.iter().zip(&b.updates) {
            let (lx, ly) = (x.stats.loss_policy, y.stats.loss_policy);
            assert!(
                (lx - ly).abs() <= 1e-4 * (1.0 + lx.abs()),
                "{} minibatch {}: loss {lx} vs {ly}",
                alg.name(),
                x.minibatch
            );
        }
    }
}

/// An engine that picks other experts (route_flip) moves the ratios of minibatch 1 away from 1
/// when π_old is the engine's; replaying the engine's routes (R3) brings them back to rounding.
/// Router-logit noise also moves the engine's gates, which R3 does not replay.
#[test]
fn under_a_routing_mismatch_r3_brings_rollout_ratios_back_to_one() {
    let dev = |mismatch: Mismatch, routing: RoutingMode| {
        let mut cfg = grpo(routing);
        cfg.mismatch = mismatch;
        cfg.old_logp = OldLogp::Rollout;
        first_minibatch_dev(&one_step(cfg, 5))
    };
    let flip = Mismatch::RouteFlip { sigma: 1.0 };
    let (native, r3) = (dev(flip, RoutingMode::Native), dev(flip, RoutingMode::R3));
    assert!(native > 0.05, "changed experts move the ratios: {native}");
    assert!(r3 < 1e-5, "R3 replays the engine's experts: {r3}");
    let noise = Mismatch::RouterNoise { sigma: 1.0 };
    let (native_n, r3_n) = (dev(noise, RoutingMode::Native), dev(noise, RoutingMode::R3));
    assert!(
        native_n > 0.05 && r3_n > 1e-3,
        "noisy gates stay under R3: native {native_n}, r3 {r3_n}"
    );
    // With the recompute, minibatch 1 is on-policy whatever the engine did.
    let mut cfg = grpo(RoutingMode::Native);
    cfg.mismatch = flip;
    assert_eq!(first_minibatch_dev(&one_step(cfg, 5)), 0.0);
}

/// With staleness k the rollout of step s is bitwise the rollout the policy at the start of
/// step s − k (the cold start for s < k) draws from the same random streams.
#[test]
fn stale_rollouts_are_the_snapshots_rollouts() {
    let k = 2;
    let mut cfg = grpo(RoutingMode::Native);
    cfg.rollout_staleness = k;
    cfg.mismatch = Mismatch::RouterNoise { sigma: 0.2 };
    let mut t = trainer(cfg.clone(), 11);
    let mut snapshots = Vec::new();
    for s in 0..5 {
        snapshots.push(t.model.clone());
        let (mut rs, mut rn) = t.rollout_rngs();
        let out = t.step();
        assert_eq!(out.staleness, s.min(k));
        let want = rollout(&snapshots[s - s.min(k)], &t.task, &cfg, &mut rs, &mut rn);
        let want_logp: Vec<f32> = want.generation.logp.iter().flatten().copied().collect();
        assert_eq!(out.logp_mu, want_logp, "step {s}");
        assert_eq!(out.rewards, want.rewards, "step {s}");
        assert_eq!(out.routes_rollout, want.generation.routes, "step {s}");
    }
}

/// Without a mismatch, the behaviour policy's KL to the current one is rounding at k = 0 and
/// grows once the sampler lags (k = 2); both sample the same first batch.
#[test]
fn staleness_moves_the_behaviour_policy_off_the_current_one() {
    let run = |k: usize| {
        let mut cfg = grpo(RoutingMode::Native);
        cfg.rollout_staleness = k;
        cfg.optimizer.lr = 3e-3;
        let mut t = trainer(cfg, 12);
        (0..4).map(|_| t.step()).collect::<Vec<_>>()
    };
    let (fresh, stale) = (run(0), run(2));
    assert_eq!(
        fresh[0].logp_mu, stale[0].logp_mu,
        "step 0 samples the cold start in both"
    );
    assert_ne!(fresh[2].logp_mu, stale[2].logp_mu);
    let kl = |o: &StepOutput| driftlab::metrics::rows::mismatch_stats(o).0;
    for s in 1..4 {
        assert!(kl(&fresh[s]) < 1e-9, "k = 0, step {s}: {}", kl(&fresh[s]));
        assert!(
            kl(&stale[s]) > 1e3 * kl(&fresh[s]).max(1e-12),
            "k = 2, step {s}: {}",
            kl(&stale[s])
        );
    }
}

/// `minibatch_prompts` fixes the minibatch and lets N set the batch.
#[test]
fn minibatch_prompts_sets_the_batch() {
    let mut cfg = grpo(RoutingMode::Native);
    cfg.minibatches = 3;
    cfg.minibatch_prompts = Some(2);
    let unresolved = driftlab::rl::Trainer::new(cfg.clone(), warm_tiny(), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(unresolved.contains("with_sizes"), "{unresolved}");
    let cfg = cfg.with_sizes();
    let out = one_step(cfg.clone(), 2);
    assert_eq!(out.rewards.len(), 6 * cfg.group_size);
    assert_eq!(out.updates.len(), 3);
    assert!(
        out.updates
            .iter()
            .all(|u| u.adv.len() == 2 * cfg.group_size)
    );
    let mut cfg = cfg;
    cfg.minibatch_prompts = Some(0);
    let e = driftlab::rl::Trainer::new(cfg, warm_tiny(), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("minibatch_prompts"), "{e}");
}

/// The router shift is exactly 1 on minibatch 1 (π_θ = π_old, so the routers agree), within
/// [floor, 1] after, and below 1 somewhere once the router has moved; every ratio objective
/// and routing mode runs with it; GVPO, which has no ratio, refuses it.
#[test]
fn router_shift_runs_with_every_ratio_objective_and_routing_mode() {
    use driftlab::rl::{AlgorithmKind, RouterShiftConfig};
    for kind in [
        AlgorithmKind::Grpo,
        AlgorithmKind::Gspo,
        AlgorithmKind::GspoToken,
        AlgorithmKind::Gmpo,
        AlgorithmKind::Cispo,
    ] {
        for &routing in RoutingMode::ALL {
            let mut cfg = tiny_rl(Algorithm::default_of(kind), routing);
            cfg.router_shift = Some(RouterShiftConfig::default());
            cfg.optimizer.lr = 3e-3;
            let out = one_step(cfg, 4);
            let what = format!("{kind} {routing}");
            let g0 = out.updates[0].stats.router_shift.clone().expect("recorded");
            assert_eq!(g0.len(), out.updates[0].stats.ratio_tok.len(), "{what}");
            assert!(g0.iter().all(|&g| g == 1.0), "{what}: minibatch 1 {g0:?}");
            let g1 = out.updates[1].stats.router_shift.clone().unwrap();
            assert!(
                g1.iter().all(|&g| (0.8..=1.0).contains(&g)),
                "{what}: {g1:?}"
            );
            assert!(g1.iter().any(|&g| g < 1.0), "{what}: the router moved");
        }
    }
    let mut cfg = tiny_rl(
        Algorithm::default_of(AlgorithmKind::Gvpo),
        RoutingMode::Native,
    );
    cfg.router_shift = Some(RouterShiftConfig::default());
    let e = driftlab::rl::Trainer::new(cfg, warm_tiny(), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("router_shift") && e.contains("gvpo"), "{e}");
}

/// Every routing mode runs with all the engine settings on at once (the rollout engine's π_old,
/// staleness, a fixed minibatch size, the router shift, a route-flip mismatch and a
/// sigmoid_bias router), for every objective.
#[test]
fn every_routing_mode_runs_with_every_engine_setting() {
    use driftlab::model::{Model, ModelConfig, RouterKind};
    use driftlab::rl::{RouterShiftConfig, Trainer};
    let cfg = ModelConfig {
        router: RouterKind::SigmoidBias,
        ..tiny_cfg()
    };
    for alg in Algorithm::all_defaults() {
        for &routing in RoutingMode::ALL {
            let mut rl = tiny_rl(alg.clone(), routing);
            rl.old_logp = OldLogp::Rollout;
            rl.rollout_staleness = 1;
            rl.minibatch_prompts = Some(1);
            let mut rl = rl.with_sizes();
            rl.mismatch = Mismatch::RouteFlip { sigma: 0.5 };
            rl.router_shift = alg.has_ratio().then(RouterShiftConfig::default);
            let model = Model::init(cfg.clone(), 6, &flex());
            let mut t = with_teacher_if_set(Trainer::new(rl, model, short_sort(), 6).unwrap());
            for s in 0..2 {
                let out = t.step();
                let what = format!("{} {routing} step {s}", alg.name());
                assert_eq!(out.updates.len(), 2, "{what}: B = N × 1");
                assert_eq!(out.staleness, s.min(1), "{what}");
                for u in &out.updates {
                    assert!(u.applied && u.loss_total.is_finite(), "{what}");
                }
            }
        }
    }
}

/// The update frame's router-shift columns: the mean of γ̃ and the share of tokens at the floor
/// (γ̃ is stored as f32, so a floor such as 0.8 must compare as f32).
#[test]
fn router_shift_columns_count_the_floored_tokens() {
    use driftlab::metrics::rows::{CellId, Shape, Val, update_row};
    use driftlab::rl::RouterShiftConfig;
    // The first floor (none is exact in f32) that binds for some tokens but not all.
    let (floor, t, cfg, out) = [0.8, 0.9, 0.95, 0.99, 0.995, 0.999]
        .into_iter()
        .find_map(|floor| {
            let mut cfg = grpo(RoutingMode::Native);
            cfg.router_shift = Some(RouterShiftConfig { floor });
            cfg.optimizer.lr = 3e-3;
            let mut t = trainer(cfg.clone(), 4);
            let out = t.step();
            let g = out.updates[1].stats.router_shift.clone().unwrap();
            let n = g.iter().filter(|&&x| x == floor as f32).count();
            (n > 0 && n < g.len()).then_some((floor, t, cfg, out))
        })
        .expect("some floor binds for part of the tokens");
    let u = &out.updates[1];
    let g = u.stats.router_shift.clone().unwrap();
    let at_floor = g.iter().filter(|&&x| x == floor as f32).count();
    let id = CellId {
        experiment: "x".into(),
        regime: "r".into(),
        arm: "a".into(),
        algorithm: cfg.algorithm.kind(),
        routing: cfg.routing,
        ffn: driftlab::model::FfnKind::Moe,
        old_logp: cfg.old_logp,
        staleness: 0,
        n_layers: t.model.cfg.n_layers,
        router: t.model.cfg.router,
        router_shift: Some(floor),
        seed: 4,
    };
    let shape = Shape {
        k: t.model.cfg.top_k,
        n_experts: t.model.cfg.n_experts,
        moe: true,
    };
    let row = update_row(&id, 0, u, shape);
    let get = |name: &str| match row.iter().find(|(n, _)| *n == name).map(|(_, v)| v) {
        Some(Val::F(Some(x))) => *x,
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(
        get("router_shift_floored"),
        at_floor as f64 / g.len() as f64
    );
    let mean = g.iter().map(|&x| f64::from(x)).sum::<f64>() / g.len() as f64;
    assert!((get("router_shift_mean") - mean).abs() < 1e-12);
}

/// The masking corrections on the trainer: with no mismatch nothing is masked (every
/// objective), with a strong one they mask, and a minibatch whose every token is masked takes
/// no optimizer step and says why.
#[test]
fn masking_corrections_mask_only_under_a_mismatch_and_an_all_masked_minibatch_is_skipped() {
    use driftlab::rl::{IcePopConfig, MisConfig, MisLevel, OpsmConfig};
    let all = |mut cfg: RlConfig| {
        cfg.icepop = Some(IcePopConfig::default());
        cfg.mis = Some(MisConfig::default());
        cfg.opsm = Some(OpsmConfig::default());
        // IcePop and MIS both weigh by the engine ratio: stacking them is declared.
        cfg.allow_stacked_engine_ratio = true;
        cfg
    };
    for alg in Algorithm::all_defaults() {
        let out = one_step(all(tiny_rl(alg.clone(), RoutingMode::Native)), 2);
        for u in &out.updates {
            assert!(u.applied, "{}", alg.name());
            let m = &u.stats.masked;
            for m in [
                m.of::<IcePopConfig>(),
                m.of::<MisConfig>(),
                m.of::<OpsmConfig>(),
            ] {
                assert!(m.unwrap().iter().all(|&x| !x), "{}", alg.name());
            }
        }
    }
    let mut noisy = grpo(RoutingMode::Native);
    noisy.mismatch = Mismatch::RouterNoise { sigma: 2.0 };
    noisy.icepop = Some(IcePopConfig {
        low: 0.9,
        high: 1.1,
    });
    let out = one_step(noisy.clone(), 2);
    let masked: usize = out
        .updates
        .iter()
        .map(|u| {
            (u.stats.masked.of::<IcePopConfig>())
                .unwrap()
                .iter()
                .filter(|&&x| x)
                .count()
        })
        .sum();
    assert!(masked > 0, "a strong mismatch leaves the band somewhere");
    noisy.icepop = None;
    noisy.mis = Some(MisConfig {
        level: MisLevel::Sequence,
        low: 1.0 - 1e-9,
        high: 1.0 + 1e-9,
        veto: None,
    });
    let mut t = trainer(noisy, 2);
    let before = t.model.clone();
    let out = t.step();
    for u in &out.updates {
        assert!(u.stats.masked.of::<MisConfig>().unwrap().iter().all(|&x| x));
        assert!(!u.applied);
        assert_eq!(
            u.skip_reason.as_deref(),
            Some(driftlab::rl::step::ALL_MASKED)
        );
    }
    assert!(
        t.model.weights.to_bytes() == before.weights.to_bytes(),
        "no step taken"
    );
}

/// Threshold-filtered replay: ratio 0 is plain replay (bitwise); on a step's first minibatch
/// under r2 the replayed routes are the live ones, so nothing is replaced; a native arm may
/// not ask for it.
#[test]
fn threshold_replay_at_ratio_zero_is_r2_and_replaces_nothing_on_policy() {
    use driftlab::rl::ReplayThresholdConfig;
    let r2 = grpo(RoutingMode::R2);
    let mut zero = r2.clone();
    zero.replay_threshold = Some(ReplayThresholdConfig { ratio: 0.0 });
    let (a, b) = (one_step(r2.clone(), 4), one_step(zero, 4));
    assert_eq!(a.rewards, b.rewards);
    for (x, y) in a.updates.iter().zip(&b.updates) {
        assert_eq!(x.stats.ratio_tok, y.stats.ratio_tok);
        assert_eq!(y.stats.replay_filter.map(|(_, r)| r), Some(0));
    }
    let mut half = r2.clone();
    half.replay_threshold = Some(ReplayThresholdConfig { ratio: 1.0 });
    let out = one_step(half, 4);
    let (slots, replaced) = out.updates[0].stats.replay_filter.unwrap();
    assert!(slots > 0);
    assert_eq!(replaced, 0, "minibatch 1 replays the live routes");
    let mut native = grpo(RoutingMode::Native);
    native.replay_threshold = Some(ReplayThresholdConfig::default());
    let e = driftlab::rl::Trainer::new(native, warm_tiny(), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("replay_threshold") && e.contains("r2 or r3"),
        "{e}"
    );
}

/// PR²: zero-initialised predictors make the first step exactly r2's (in both gate forms); its
/// predictors train on every minibatch after the first, and then move the routes; it needs r2
/// and a softmax router. π_old replays the predicted routes: with `gates = "native"` on the
/// unshifted router's gates, so minibatch 1 stays exactly on-policy; with the authors' form
/// (`"shifted"`, the default) on the shifted router's gates, which the updates do not carry, so
/// once W_p ≠ 0 minibatch 1's ratios move off 1 on the same rollouts and the same routes.
#[test]
fn pr2_starts_as_r2_and_its_predictors_learn() {
    use driftlab::rl::{Pr2Config, Pr2Gates};
    let r2 = grpo(RoutingMode::R2);
    let mut pr2 = r2.clone();
    pr2.pr2 = Some(Pr2Config::default());
    assert_eq!(
        Pr2Config::default().gates,
        Pr2Gates::Shifted,
        "the authors' form"
    );
    let mut native_cfg = r2.clone();
    native_cfg.pr2 = Some(Pr2Config {
        gates: Pr2Gates::Native,
        ..Pr2Config::default()
    });
    let mut a = trainer(r2, 5);
    let mut b = trainer(pr2, 5);
    let mut c = trainer(native_cfg, 5);
    let (x, y, z) = (a.step(), b.step(), c.step());
    assert_eq!(x.rewards, y.rewards);
    for (u, v) in x.updates.iter().zip(&y.updates) {
        assert_eq!(
            u.stats.ratio_tok, v.stats.ratio_tok,
            "same routes, same ratios"
        );
        assert_eq!(v.pr2_loss.is_some(), v.minibatch > 0);
        assert!(u.pr2_loss.is_none());
    }
    for (v, w) in y.updates.iter().zip(&z.updates) {
        assert_eq!(v.stats.ratio_tok, w.stats.ratio_tok, "W_p = 0: no shift");
    }
    assert!(
        y.updates[1..].iter().all(|u| u.pr2_loss.unwrap() > 0.0),
        "the router moved, so the zero prediction has a loss"
    );
    let w = &b.predictor.as_ref().unwrap().w;
    assert!(
        w.iter().flatten().any(|&x| x != 0.0),
        "the predictors trained"
    );
    assert_eq!(w, &c.predictor.as_ref().unwrap().w, "the same first step");
    // Step 2 of both forms: the same rollouts and the same predicted routes; only π_old's gates
    // differ.
    let (s, n) = (b.step(), c.step());
    assert_eq!(s.rewards, n.rewards);
    assert_eq!(s.updates[0].routes_used, n.updates[0].routes_used);
    assert!(
        n.updates[0].stats.ratio_tok.iter().all(|&r| r == 1.0),
        "native gates: minibatch 1 replays exactly what π_old ran"
    );
    assert!(
        s.updates[0].stats.ratio_tok.iter().any(|&r| r != 1.0),
        "shifted gates: π_old's gates carry h W_p, the updates' do not"
    );
    // Once the predictions move routes, π_old's log-probs are those of the predicted routes
    // the updates replay: with native gates, minibatch 1 stays exactly on-policy.
    let mut moved = false;
    for _ in 0..4 {
        let o = c.step();
        let first = &o.updates[0];
        moved |= first
            .routes_before
            .iter()
            .zip(&first.routes_used)
            .any(|(a, b)| a != b);
        assert!(
            first.stats.ratio_tok.iter().all(|&r| r == 1.0),
            "minibatch 1 replays the routes π_old ran"
        );
    }
    assert!(
        moved,
        "the predictions moved some route, so the check above bites"
    );
    let mut native = grpo(RoutingMode::Native);
    native.pr2 = Some(Pr2Config::default());
    let e = driftlab::rl::Trainer::new(native, warm_tiny(), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("pr2") && e.contains("r2"), "{e}");
}

/// `probe_every` and `kl_ref_every` only thin out measurement: the probe runs on steps 0, k,
/// 2k, … and the reference on its own k's steps; training (rollouts, losses, gradients, the
/// weights it reaches) is bitwise that of measuring every step, and a measured step's drift and
/// reference log-probs are the same too. A KL term needs the reference every step.
#[test]
fn measuring_every_kth_step_changes_nothing_but_what_is_measured() {
    let full = grpo(RoutingMode::Native);
    let thin = RlConfig {
        probe_every: 3,
        kl_ref_every: 2,
        ..full.clone()
    };
    let (mut a, mut b) = (trainer(full, 5), trainer(thin, 5));
    for s in 0..4 {
        let (x, y) = (a.step(), b.step());
        assert_eq!(x.rewards, y.rewards, "step {s}");
        assert_eq!(x.logp_old, y.logp_old, "step {s}");
        for (u, v) in x.updates.iter().zip(&y.updates) {
            assert_eq!(u.grad_norm.to_bits(), v.grad_norm.to_bits(), "step {s}");
            assert_eq!(u.routes_before, v.routes_before, "step {s}");
            assert!(!u.routes_after.is_empty() && !u.logp_ref.is_empty());
            match s % 3 == 0 {
                true => assert_eq!(u.routes_after, v.routes_after, "step {s}"),
                false => assert!(v.routes_after.is_empty(), "step {s}"),
            }
            match s % 2 == 0 {
                true => assert_eq!(u.logp_ref, v.logp_ref, "step {s}"),
                false => assert!(v.logp_ref.is_empty(), "step {s}"),
            }
        }
    }
    let w = |t: &driftlab::rl::Trainer| -> Vec<u32> {
        t.model
            .weights
            .tensors()
            .into_iter()
            .flat_map(driftlab::util::tensors::to_vec)
            .map(f32::to_bits)
            .collect()
    };
    assert_eq!(w(&a), w(&b), "the same weights after 4 steps");
    let kl = RlConfig {
        algorithm: Algorithm::Grpo(GrpoConfig {
            kl_beta: 0.05,
            ..GrpoConfig::default()
        }),
        kl_ref_every: 2,
        ..grpo(RoutingMode::Native)
    };
    let err = kl.validate().unwrap_err().to_string();
    assert!(err.contains("kl_ref_every") && err.contains("KL"), "{err}");
}
