//! The rollout engine's router precision (`rl.router_precision`) changes exactly what it names,
//! bit for bit elsewhere, and the router check (`rl.router_check`) measures the engine's
//! choices against an f64 router.

mod common;
use common::*;
use driftlab::model::{ForwardOptions, LayerRouting, ParamGroup, bf16_round};
use driftlab::rl::rollout::engine_model;
use driftlab::rl::{
    Algorithm, GrpoConfig, Mismatch, Precision, RlConfig, RouterPrecision, RoutingMode,
};
use driftlab::util::tensors::{floats, to_vec};

/// Every parameter of a model, with its group, on the host.
fn params(m: &driftlab::model::Model) -> Vec<(ParamGroup, Vec<f32>)> {
    let mut out = Vec::new();
    let mut w = m.inner().weights;
    w.visit_mut(&mut |_, g, t| out.push((g, to_vec(t.clone()))));
    out
}

fn rounded(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| bf16_round(x)).collect()
}

#[test]
fn router_weights_precision_rounds_the_router_alone() {
    let policy = tiny_model(3);
    let p = params(&policy);
    let fp32 = RouterPrecision {
        weights: Some(Precision::Fp32),
        ..RouterPrecision::default()
    };
    let bf16 = RouterPrecision {
        weights: Some(Precision::Bf16),
        ..RouterPrecision::default()
    };
    let cases = [
        // (engine, router precision, router rounded, others rounded)
        (Mismatch::Bf16, RouterPrecision::default(), true, true),
        (Mismatch::Bf16, fp32, false, true),
        (Mismatch::None, RouterPrecision::default(), false, false),
        (Mismatch::None, bf16, true, false),
    ];
    for (mismatch, prec, router, others) in cases {
        let e = params(&engine_model(&policy, mismatch, prec));
        let mut routers = 0;
        for ((g, want), (_, got)) in p.iter().zip(&e) {
            let round = if *g == ParamGroup::Router {
                routers += 1;
                router
            } else {
                others
            };
            let want = if round { rounded(want) } else { want.clone() };
            assert_eq!(&want, got, "{mismatch:?} {prec:?} {g:?}");
        }
        assert!(routers > 0);
    }
}

#[test]
fn router_logits_precision_rounds_the_logits_alone() {
    let model = tiny_model(5);
    let task = sort_task(1);
    let batch = batch_of(&problems(&task, 4, 2));
    let opts = |round: bool| ForwardOptions {
        routing: (0..model.cfg.n_layers)
            .map(|_| LayerRouting {
                want_input: true,
                round_logits: round,
                ..LayerRouting::default()
            })
            .collect(),
        want_probs: true,
        round_bf16: false,
        routes_on_device: false,
    };
    let plain = model.route_traces(&batch, &opts(false));
    let round = model.route_traces(&batch, &opts(true));
    let moe: Vec<_> = model
        .inner()
        .weights
        .blocks
        .into_iter()
        .filter_map(|b| match b.ffn {
            driftlab::model::weights::FfnWeights::Moe(m) => Some(m.router),
            _ => None,
        })
        .collect();
    let (d, e) = (model.cfg.d_model, model.cfg.n_experts);
    // The first MoE layer's input is upstream of every rounding: bitwise the same; its
    // distribution is the softmax of the rounded logits, which differ from the plain ones.
    let (a, b) = (&plain[0], &round[0]);
    assert_eq!(a.input, b.input);
    let x = a.input.as_ref().unwrap();
    let (pa, pb) = (a.probs.as_ref().unwrap(), b.probs.as_ref().unwrap());
    assert_ne!(
        pa, pb,
        "rounding the logits changes the router's distribution"
    );
    // The logits by the same product the router runs, then rounded and a softmax by hand.
    let n = x.len() / d;
    let z = to_vec(floats(x.clone(), [n, d], &model.device()).matmul(moe[0].clone()));
    for (t, z) in z.chunks_exact(e).enumerate() {
        let zr = rounded(z);
        let m = zr.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let s: f32 = zr.iter().map(|v| (v - m).exp()).sum();
        for j in 0..e {
            let want = (zr[j] - m).exp() / s;
            let got = pb[t * e + j];
            assert!(
                (want - got).abs() < 2e-6,
                "token {t} expert {j}: {want} vs {got}"
            );
        }
    }
}

fn grpo() -> RlConfig {
    tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native)
}

#[test]
fn precision_settings_at_their_defaults_change_nothing_and_are_not_written() {
    let cfg = grpo();
    let json = serde_json::to_string(&cfg).unwrap();
    assert!(!json.contains("router_precision") && !json.contains("router_check"));
    let mut explicit = cfg.clone();
    explicit.router_precision = RouterPrecision {
        weights: None,
        logits: Precision::Fp32,
    };
    let (a, b) = (one(cfg), one(explicit));
    assert_eq!(a.rewards, b.rewards);
    assert_eq!(a.logp_mu, b.logp_mu);
    assert!(a.router_check.is_empty());
}

fn one(cfg: RlConfig) -> driftlab::rl::StepOutput {
    trainer(cfg, 7).step()
}

#[test]
fn the_router_check_sees_the_bf16_router_and_not_the_exact_one() {
    let mut cfg = grpo();
    cfg.router_check = true;
    let exact = one(cfg.clone());
    assert!(!exact.router_check.is_empty());
    let mut sum = driftlab::rl::engine_router::RouterCheck::default();
    exact.router_check.iter().for_each(|c| sum.add(c));
    // An fp32 engine's router against f64 on the same inputs: f32 rounding can flip only
    // exact near-ties.
    assert!(sum.choices > 0);
    assert!(sum.disagree <= sum.ties, "{sum:?}");
    cfg.mismatch = Mismatch::Bf16;
    cfg.router_precision.logits = Precision::Bf16;
    let bf16 = one(cfg.clone());
    let mut b = driftlab::rl::engine_router::RouterCheck::default();
    bf16.router_check.iter().for_each(|c| b.add(c));
    let [d, t, f] = b.shares();
    assert!(d.unwrap() >= 0.0 && d.unwrap() <= 1.0);
    assert!(t.unwrap() >= 0.0);
    assert!(f.is_none_or(|f| (0.0..=1.0).contains(&f)));
    // The check only reads: the same rollout and training as without it.
    cfg.router_check = false;
    let off = one(cfg);
    assert_eq!(off.rewards, bf16.rewards);
    assert_eq!(off.logp_old, bf16.logp_old);
}

#[test]
fn a_router_precision_spec_key_is_read_and_a_wrong_one_named() {
    let ok: RlConfig = serde_json::from_value(serde_json::json!({
        "router_precision": { "weights": "fp32", "logits": "bf16" },
        "router_check": true,
    }))
    .unwrap();
    assert_eq!(ok.router_precision.weights, Some(Precision::Fp32));
    assert!(ok.router_check);
    let err = serde_json::from_value::<RlConfig>(serde_json::json!({
        "router_precision": { "weight": "fp32" },
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("weight"), "{err}");
    let err = serde_json::from_value::<RlConfig>(serde_json::json!({
        "router_precision": { "logits": "fp16" },
    }))
    .unwrap_err()
    .to_string();
    assert!(err.contains("fp16"), "{err}");
}
