//! The `sigmoid_bias` router (DeepSeek-V3's auxiliary-loss-free balancing): gates and top-k by
//! hand, the bias update, replay under a moving bias, the drift the bias alone causes, and
//! router freezing.

mod common;
use burn::tensor::Tensor;
use common::*;
use driftlab::model::moe::{moe_forward, swiglu};
use driftlab::model::weights::{MoeWeights, SwiGlu};
use driftlab::model::{LayerRouting, Model, ModelConfig, RouterKind};
use driftlab::rl::{Algorithm, GrpoConfig, RlConfig, RoutingMode, Trainer};
use driftlab::util::tensors::{floats, to_vec};

fn sig(z: f32) -> f32 {
    1.0 / (1.0 + (-z).exp())
}

/// One layer, 3 experts, top-2, d = 2; token 0 has router logits [0, 1, −1], token 1 [1, 0, 0].
fn layer(bias: Vec<f32>) -> (ModelConfig, MoeWeights, Tensor<2>) {
    let device = flex();
    let cfg = ModelConfig {
        router: RouterKind::SigmoidBias,
        ..hand_cfg()
    };
    let router = floats(vec![0.0, 1.0, -1.0, 1.0, 0.0, 0.0], [2, 3], &device);
    let experts = (0..3)
        .map(|e| SwiGlu {
            w1: floats(vec![1.0, 0.5, 0.3, 0.7], [2, 2], &device),
            w3: floats(vec![2.0, -1.0, 1.5, 0.2], [2, 2], &device),
            w2: floats(vec![0.4 * (e + 1) as f32, -0.2, 0.1, 0.9], [2, 2], &device),
        })
        .collect();
    let w = MoeWeights {
        router,
        experts,
        shared: None,
        bias,
    };
    (cfg, w, floats(vec![1.0, 0.0, 0.0, 1.0], [2, 2], &device))
}

#[test]
fn sigmoid_bias_gates_and_top_k_by_hand() {
    // Token 0: s = σ([0, 1, −1]) = [.5, .731, .269]; with b = [0, −.3, .6], s + b =
    // [.5, .431, .869] → experts {2, 0}, gates s₂ / (s₂ + s₀), s₀ / (s₂ + s₀). Without the bias
    // it would be {1, 0}. Token 1: s = σ([1, 0, 0]), s + b = [.731, .2, 1.1] → {2, 0}.
    let (cfg, w, x) = layer(vec![0.0, -0.3, 0.6]);
    let o = moe_forward(
        &w,
        &cfg,
        x.clone(),
        &[true, true],
        LayerRouting::default(),
        true,
    );
    assert_eq!(o.trace.native, vec![2, 0, 2, 0]);
    let (_, w0, _) = layer(vec![0.0; 3]);
    let o0 = moe_forward(
        &w0,
        &cfg,
        x.clone(),
        &[true, true],
        LayerRouting::default(),
        false,
    );
    assert_eq!(o0.trace.native, vec![1, 0, 0, 1], "no bias: top-2 of s");
    let s = [
        [sig(0.0), sig(1.0), sig(-1.0)],
        [sig(1.0), sig(0.0), sig(0.0)],
    ];
    let out = to_vec(o.out);
    for tok in 0..2 {
        let xt = x.clone().slice([tok..tok + 1, 0..2]);
        let y = |e: usize| to_vec(swiglu(&w.experts[e], xt.clone()));
        let (g2, g0) = (s[tok][2], s[tok][0]);
        let (y2, y0) = (y(2), y(0));
        for j in 0..2 {
            let want = (g2 * y2[j] + g0 * y0[j]) / (g2 + g0);
            assert!(
                (out[tok * 2 + j] - want).abs() < 1e-6,
                "token {tok}: {out:?}"
            );
        }
        // The trace's distribution is the normalised affinities.
        let p = &o.trace.probs.as_ref().unwrap()[tok * 3..tok * 3 + 3];
        let sum: f32 = s[tok].iter().sum();
        for e in 0..3 {
            assert!((p[e] - s[tok][e] / sum).abs() < 1e-6);
        }
    }
}

/// The bias update: `b_e += γ · sign(mean − c_e)`; on a synthetic skewed router, repeated
/// updates bring the load toward balance.
#[test]
fn the_bias_moves_toward_balance() {
    let (_, mut w, _) = layer(vec![0.0; 3]);
    w.nudge_bias(&[10.0, 0.0, 2.0], 0.5);
    assert_eq!(w.bias, vec![-0.5, 0.5, 0.5], "mean 4: one over, two under");
    w.nudge_bias(&[2.0, 2.0, 2.0], 0.5);
    assert_eq!(w.bias, vec![-0.5, 0.5, 0.5], "balanced: no change");
    // 8 experts, top-2, a router that prefers expert 0 strongly.
    let device = flex();
    let cfg = ModelConfig {
        n_experts: 8,
        top_k: 2,
        router: RouterKind::SigmoidBias,
        ..tiny_cfg()
    };
    let d = cfg.d_model;
    let mut model = Model::init(cfg.clone(), 3, &device);
    let driftlab::model::weights::FfnWeights::Moe(mut mw) = model.weights.blocks[0].ffn.clone()
    else {
        panic!("moe")
    };
    // Diverse router logits (a random router on normal inputs) plus a synthetic skew: +2 on
    // expert 0's logit for every token.
    let t = 256;
    let mut rng = <rand::rngs::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(1);
    let normal = rand_distr::Normal::new(0.0f32, 1.0).unwrap();
    let mut draw = |n: usize, scale: f32| -> Vec<f32> {
        (0..n)
            .map(|_| scale * rand_distr::Distribution::sample(&normal, &mut rng))
            .collect()
    };
    mw.router = floats(draw(d * 8, 1.0 / (d as f32).sqrt()), [d, 8], &device);
    let x = floats(draw(t * d, 1.0), [t, d], &device);
    let skew: Vec<f32> = (0..t * 8)
        .map(|i| if i % 8 == 0 { 2.0 } else { 0.0 })
        .collect();
    let active = vec![true; t];
    let max_load = |mw: &MoeWeights| {
        let routing = LayerRouting {
            logit_offset: Some(floats(skew.clone(), [t, 8], &device)),
            ..LayerRouting::default()
        };
        let o = moe_forward(mw, &cfg, x.clone(), &active, routing, false);
        (
            o.load.counts.iter().copied().fold(0.0, f32::max) / (2 * t) as f32,
            o.load.counts,
        )
    };
    let (start, _) = max_load(&mw);
    let mut last = Vec::new();
    for i in 0..300 {
        let (m, counts) = max_load(&mw);
        if i >= 250 {
            last.push(m);
        }
        mw.nudge_bias(&counts, 0.01);
    }
    // The sign rule ends in a small limit cycle around balance (1/8 of the slots each).
    let end = last.iter().sum::<f32>() / last.len() as f32;
    assert!(start > 0.3, "skewed to start: {start}");
    assert!(
        end < 0.2,
        "near balance after the updates: {start} → {end} ({last:?})"
    );
    model.weights.blocks[0].ffn = driftlab::model::weights::FfnWeights::Moe(mw);
    // The bias travels with the checkpoint.
    let bytes = model.weights.to_bytes();
    let back = driftlab::model::Weights::from_bytes(&cfg, &bytes, &device).unwrap();
    assert_eq!(back.router_biases(), model.weights.router_biases());
    assert!(back.router_biases()[0].iter().any(|&b| b != 0.0));
    let softmax = ModelConfig {
        router: RouterKind::Softmax,
        ..cfg
    };
    assert!(driftlab::model::Weights::from_bytes(&softmax, &bytes, &device).is_err());
}

fn sigmoid_trainer(routing: RoutingMode, lr: f64, speed: f64) -> Trainer {
    let cfg = ModelConfig {
        router: RouterKind::SigmoidBias,
        bias_update_speed: speed,
        ..tiny_cfg()
    };
    let mut rl = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), routing);
    rl.optimizer.lr = lr;
    Trainer::new(rl, Model::init(cfg, 5, &flex()), short_sort(), 5).unwrap()
}

/// Under replay the experts that run are the recorded ones while the bias, and so the native
/// choice, moves between minibatches.
#[test]
fn replay_forces_ids_while_the_bias_moves() {
    for routing in [RoutingMode::R2, RoutingMode::R3] {
        let mut t = sigmoid_trainer(routing, 1e-3, 0.05);
        let out = t.step();
        let u0 = &out.updates[0];
        assert_ne!(
            u0.routes_bias_only, u0.routes_before,
            "{routing}: the first bias update moved the native choice"
        );
        let mut native_moved = false;
        for u in &out.updates {
            if routing == RoutingMode::R2 {
                assert_eq!(u.routes_used, u.routes_old, "R2 replays π_old's routes");
            }
            native_moved |= u.routes_before != u.routes_used;
        }
        if routing == RoutingMode::R3 {
            // The rollout engine's routes, in the minibatch layouts, are what every update ran.
            let used: Vec<u16> = out
                .updates
                .iter()
                .flat_map(|u| u.routes_used[0].clone())
                .collect();
            let known: Vec<(u16, u16)> = used
                .iter()
                .zip(&out.routes_rollout[0])
                .filter(|(_, r)| **r != driftlab::model::NO_ROUTE)
                .map(|(a, b)| (*a, *b))
                .collect();
            assert!(
                !known.is_empty() && known.iter().all(|(a, b)| a == b),
                "R3 replays the engine"
            );
        }
        assert!(
            native_moved,
            "{routing}: the moving bias changes the native choice"
        );
    }
}

/// With the weights frozen (lr = 0), the bias update alone moves routes: the bias-only probe
/// sees drift, and so does the ordinary probe, while every weight stays bit for bit.
#[test]
fn the_bias_alone_drifts_routes_when_weights_are_frozen() {
    let mut t = sigmoid_trainer(RoutingMode::Native, 0.0, 0.05);
    let w0 = t.model.weights.to_host();
    let out = t.step();
    assert_eq!(
        t.model.weights.to_host(),
        w0,
        "lr = 0 leaves every weight unchanged"
    );
    let k = t.model.cfg.top_k;
    let drift = |a: &[Vec<u16>], b: &[Vec<u16>], v: &[bool]| {
        driftlab::metrics::drift::model_drift(a, b, v, k).0
    };
    for u in &out.updates {
        let bias_only = drift(&u.routes_before, &u.routes_bias_only, &u.valid);
        let all = drift(&u.routes_before, &u.routes_after, &u.valid);
        assert!(bias_only > 0.0, "minibatch {}: {bias_only}", u.minibatch);
        assert_eq!(
            bias_only, all,
            "frozen weights: all the drift is the bias's"
        );
    }
    // The softmax router has no bias-only probe.
    let soft = trainer(
        tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native),
        1,
    )
    .step();
    assert!(soft.updates.iter().all(|u| u.routes_bias_only.is_empty()));
}

/// Router freezing (`router_lr_mult = 0`, the baseline RSPO compares with) leaves every router
/// matrix bit for bit unchanged while the other weights train.
#[test]
fn router_lr_mult_zero_freezes_the_router_bit_for_bit() {
    let mut rl: RlConfig = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
    rl.optimizer.router_lr_mult = 0.0;
    rl.optimizer.lr = 3e-3;
    let mut t = trainer(rl, 2);
    let names = t.model.weights.names();
    let before = t.model.weights.to_host();
    for _ in 0..3 {
        t.step();
    }
    let after = t.model.weights.to_host();
    let mut trained = 0;
    for ((name, group), (a, b)) in names.iter().zip(before.iter().zip(&after)) {
        if *group == driftlab::model::ParamGroup::Router {
            assert_eq!(a, b, "{name} unchanged");
        } else if a != b {
            trained += 1;
        }
    }
    assert!(trained > 0, "the other weights trained");
}

/// Knobs that would do nothing are errors, and a dense control of a sigmoid_bias spec is the
/// plain dense model (same cold start as in a softmax spec).
#[test]
fn sigmoid_bias_settings_that_do_nothing_are_refused() {
    use driftlab::experiment::ExperimentSpec;
    let e = ModelConfig {
        bias_update_speed: 0.01,
        ..tiny_cfg()
    }
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bias_update_speed") && e.contains("sigmoid_bias"),
        "{e}"
    );
    let mut rl = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
    rl.drift_injection = Some(driftlab::rl::DriftInjection::TargetExpertFrac { target: 0.1 });
    let cfg = ModelConfig {
        router: RouterKind::SigmoidBias,
        ..tiny_cfg()
    };
    let e = Trainer::new(rl, Model::init(cfg, 0, &flex()), short_sort(), 0)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("target_expert_frac") && e.contains("sigma"),
        "{e}"
    );
    let spec = |router: &str| {
        let text = format!(
            "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\npreset = 'tiny'\n\
             [model]\nrouter = '{router}'\n\
             [[arms]]\nname = 'moe'\nalgorithm = {{ kind = 'grpo' }}\n\
             [[arms]]\nname = 'dense'\nalgorithm = {{ kind = 'grpo' }}\nffn = 'dense'\n"
        );
        ExperimentSpec::from_toml(&text, "x.toml")
            .unwrap()
            .resolve("flex")
            .unwrap()
    };
    let (sig, soft) = (spec("sigmoid_bias"), spec("softmax"));
    assert_eq!(sig[0].model.router, RouterKind::SigmoidBias);
    assert_eq!(sig[1].model.router, RouterKind::Softmax, "dense: no router");
    assert_eq!(sig[1].coldstart_key(), soft[1].coldstart_key());
    assert_ne!(sig[0].coldstart_key(), soft[0].coldstart_key());
}

/// The probe's forward that stops at the last router gives the full forward's traces bit for
/// bit (native and used ids, distributions), with router-logit offsets, for both routers, and
/// nothing for a dense model.
#[test]
fn route_traces_are_the_full_forwards_traces() {
    use driftlab::model::{FfnKind, ForwardOptions};
    let task = sort_task(0);
    let batch = batch_of(&problems(&task, 5, 7));
    for (router, ffn) in [
        (RouterKind::Softmax, FfnKind::Moe),
        (RouterKind::SigmoidBias, FfnKind::Moe),
        (RouterKind::Softmax, FfnKind::Dense),
    ] {
        let cfg = ModelConfig {
            router,
            ffn,
            n_layers: 3,
            ..tiny_cfg()
        };
        let device = flex();
        let model = Model::init(cfg.clone(), 11, &device);
        let t = batch.n_tokens();
        let offsets = |l: usize| {
            let v = (0..t * cfg.n_experts)
                .map(|i| ((i * 7 + l * 3) % 11) as f32 * 0.05 - 0.25)
                .collect();
            floats(v, [t, cfg.n_experts], &device)
        };
        let opts = ForwardOptions {
            routing: (0..cfg.n_layers)
                .map(|l| LayerRouting {
                    logit_offset: (l != 1).then(|| offsets(l)),
                    ..LayerRouting::default()
                })
                .collect(),
            want_probs: true,
            round_bf16: false,
            routes_on_device: false,
        };
        let full = model.forward(&batch, &opts).traces;
        let probe = model.route_traces(&batch, &opts);
        assert_eq!(probe.len(), full.len(), "{router} {ffn}");
        assert_eq!(full.is_empty(), ffn == FfnKind::Dense);
        for (a, b) in full.iter().zip(&probe) {
            assert_eq!(
                (a.native.clone(), a.used.clone()),
                (b.native.clone(), b.used.clone())
            );
            let bits = |p: &Option<Vec<f32>>| -> Vec<u32> {
                p.iter().flatten().map(|x| x.to_bits()).collect()
            };
            assert_eq!(bits(&a.probs), bits(&b.probs), "{router} {ffn}");
            assert!(a.probs.is_some());
        }
    }
}
