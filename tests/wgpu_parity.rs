//! The GPU code path (burn wgpu on a software Vulkan in CI) matches flex.
//!
//! Tolerances: logits within 1e-4 absolute, gradients within 1e-4 absolute plus 1e-3 relative to
//! the largest gradient entry of that tensor (float summation order differs between backends).

mod common;
use common::*;
use driftlab::device::DeviceChoice;
use driftlab::model::moe::active_mask;
use driftlab::model::{ForwardOptions, Model, Weights};
use driftlab::util::tensors::to_vec;

fn wgpu_cpu() -> burn::tensor::Device {
    DeviceChoice::WgpuCpu
        .device()
        .expect("wgpu-cpu needs a software Vulkan (mesa-vulkan-drivers); .ci/run installs it")
}

#[test]
fn wgpu_cpu_forward_and_backward_match_flex() {
    parity(tiny_model(21));
}

/// The sigmoid_bias router, with a non-zero bias, on both devices.
#[test]
fn wgpu_cpu_sigmoid_bias_router_matches_flex() {
    let cfg = driftlab::model::ModelConfig {
        router: driftlab::model::RouterKind::SigmoidBias,
        ..tiny_cfg()
    };
    let mut m = Model::init(cfg, 21, &flex());
    m.weights
        .nudge_router_bias(&[vec![9.0, 1.0, 1.0, 1.0], vec![0.0, 4.0, 4.0, 4.0]], 0.02);
    assert!(
        m.weights
            .router_biases()
            .iter()
            .all(|b| b.iter().any(|&x| x != 0.0))
    );
    parity(m);
}

/// One RL step of every objective on wgpu-cpu with the new settings on: the rollout engine's
/// π_old, staleness, the router shift, a sigmoid_bias router and a route-flip mismatch.
#[test]
fn wgpu_cpu_runs_every_objective_with_the_engine_settings() {
    use driftlab::rl::{Algorithm, Mismatch, OldLogp, RouterShiftConfig, RoutingMode, Trainer};
    let wgpu = wgpu_cpu();
    let cfg = driftlab::model::ModelConfig {
        router: driftlab::model::RouterKind::SigmoidBias,
        ..tiny_cfg()
    };
    for alg in Algorithm::all_defaults() {
        let mut rl = tiny_rl(alg.clone(), RoutingMode::R3);
        rl.old_logp = OldLogp::Rollout;
        rl.rollout_staleness = 1;
        rl.mismatch = Mismatch::RouteFlip { sigma: 0.5 };
        rl.router_shift = alg.has_ratio().then(RouterShiftConfig::default);
        let mut t = with_teacher_if_set(
            Trainer::new(rl, Model::init(cfg.clone(), 3, &wgpu), short_sort(), 3).unwrap(),
        );
        for _ in 0..2 {
            let out = t.step();
            for u in &out.updates {
                assert!(
                    u.applied && u.loss_total.is_finite(),
                    "{}: {u:?}",
                    alg.name()
                );
                assert!(!u.routes_bias_only.is_empty(), "{}", alg.name());
            }
        }
    }
}

fn parity(flex_model: Model) {
    let wgpu = wgpu_cpu();
    let gpu_model = Model::new(
        flex_model.cfg.clone(),
        Weights::from_bytes(&flex_model.cfg, &flex_model.weights.to_bytes(), &wgpu).unwrap(),
        &wgpu,
    );
    let task = sort_task(0);
    let batch = batch_of(&problems(&task, 6, 4));

    let run = |m: &Model, routes: Option<&Vec<Vec<u16>>>| {
        let train = m.require_grad();
        let opts = routes.map_or_else(ForwardOptions::default, |r| ForwardOptions::replay(r));
        let out = train.forward(&batch, &opts);
        let native: Vec<Vec<u16>> = out.traces.iter().map(|t| t.native.clone()).collect();
        let logits = to_vec(out.logits.clone().inner());
        // A loss on the real tokens, as every loss driftlab takes (the CPU backend's attention
        // leaves padding queries out, so a padding position's logits are not the tensor path's).
        let mask = active_mask(&batch.valid, &out.logits.device());
        let n_real = batch.valid.iter().filter(|&&v| v).count() as f32;
        let loss = ((out.logits.powi_scalar(2) * mask).sum() / n_real + out.aux_loss).sum();
        let grads = loss.backward();
        let g: Vec<Vec<f32>> = train
            .weights
            .tensors()
            .iter()
            .map(|p| to_vec(p.grad(&grads).expect("grad")))
            .collect();
        (logits, g, native)
    };
    let (lf, gf, routes) = run(&flex_model, None);
    // Same experts on both devices: near-ties could otherwise route differently.
    let (lg, gg, native_gpu) = run(&gpu_model, Some(&routes));
    let v = flex_model.cfg.vocab_size;
    let d = max_abs(
        &at_real(&lf, v, &batch.valid),
        &at_real(&lg, v, &batch.valid),
    );
    assert!(d <= 1e-4, "logits differ by {d}");
    let k = flex_model.cfg.top_k;
    let real_slots = |r: &Vec<u16>| at_real(r, k, &batch.valid);
    let (routes, native_gpu): (Vec<Vec<u16>>, Vec<Vec<u16>>) = (
        routes.iter().map(real_slots).collect(),
        native_gpu.iter().map(real_slots).collect(),
    );
    let agree = routes
        .iter()
        .flatten()
        .zip(native_gpu.iter().flatten())
        .filter(|(a, b)| a == b)
        .count();
    let total = routes.iter().map(Vec::len).sum::<usize>();
    assert!(
        agree as f64 >= 0.99 * total as f64,
        "native routes agree on only {agree}/{total} slots"
    );
    let names = flex_model.weights.names();
    for ((a, b), (name, _)) in gf.iter().zip(&gg).zip(&names) {
        let scale = a.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = max_abs(a, b);
        assert!(
            d <= 1e-4 + 1e-3 * scale,
            "{name}: gradients differ by {d} (scale {scale})"
        );
    }
}

/// A cold start trained on wgpu-cpu has its own cache entry (its bits differ from flex's), and
/// flex keeps the bare key every existing entry was written under.
#[test]
fn a_cold_start_on_wgpu_cpu_has_its_own_cache_key() {
    use driftlab::coldstart::device_key;
    let key = "0123456789abcdef";
    assert_eq!(device_key(key, &flex()), key);
    let tagged = device_key(key, &wgpu_cpu());
    assert!(tagged.starts_with(key) && tagged != key, "{tagged}");
    assert_eq!(tagged, device_key(key, &wgpu_cpu()), "stable within a run");
}

/// AdamW off the CPU backend runs as device tensor ops (one read per step: the global norm)
/// and equals the CPU backend's fused host pass within 2e-6 absolute on every weight over four
/// steps with clipping on then off, weight decay and a router learning-rate multiplier (the
/// same f32 operations in the same order; a software Vulkan may round a division or a square
/// root differently from the host). Without `AdamW::step`'s own serial scope, updates submitted
/// from the pool's threads at once came out a whole step of lr apart on some parameter.
#[test]
fn wgpu_cpu_adamw_on_the_device_equals_the_host_update() {
    use driftlab::optim::AdamW;
    let wgpu = wgpu_cpu();
    let host = tiny_model(3);
    let dev = Weights::from_bytes(&host.cfg, &host.weights.to_bytes(), &wgpu).unwrap();
    let cfg = adamw_test_cfg();
    let mut on_host = AdamW::new(cfg.clone(), &host.weights);
    let mut on_dev = AdamW::new(cfg, &dev);
    assert!(
        on_host.fused && !on_dev.fused,
        "the host pass on flex, tensor ops on wgpu"
    );
    let (mut wh, mut wd) = (host.weights, dev);
    let (mut sh, mut sd) = (5u64, 5u64);
    for step in 0..4 {
        let size = [1.0, 1.0, 50.0, 1e-4][step];
        let gh = lcg_grads(&wh, size, &mut sh, &flex());
        let gd = lcg_grads(&wd, size, &mut sd, &wgpu);
        let (a, ra) = on_host.step(wh, gh, 3e-2);
        let (b, rb) = on_dev.step(wd, gd, 3e-2);
        assert!(ra.applied && rb.applied);
        assert!(
            (ra.grad_norm - rb.grad_norm).abs() <= 1e-5 * ra.grad_norm,
            "step {step}: global norm {} on the host, {} on the device",
            ra.grad_norm,
            rb.grad_norm
        );
        for (i, (x, y)) in a.tensors().into_iter().zip(b.tensors()).enumerate() {
            let d = max_abs(&to_vec(x.inner()), &to_vec(y.inner()));
            assert!(d <= 2e-6, "step {step}, parameter {i}: {d} apart");
        }
        (wh, wd) = (a, b);
    }
}

/// On wgpu-cpu the default sampler is the device's, with the routers' top-k on the device and
/// the experts run densely (`model::device_routes`): the host sampler's tokens and routes, the
/// log-probs to float rounding (what it reads back: `tests/transfers.rs`).
#[test]
fn wgpu_cpu_samples_on_the_device_the_host_samplers_tokens() {
    let wgpu = wgpu_cpu();
    let (h, d) = common::host_and_device_samples(&wgpu);
    assert_eq!(h.0.responses, d.0.responses);
    assert_eq!(h.0.routes, d.0.routes);
    let d_lp = max_abs(&h.0.logp.concat(), &d.0.logp.concat());
    assert!(d_lp < 1e-5, "log-probs differ by {d_lp}");
}
