//! Model invariants: replay, forced routing, router gradients, sparse dispatch, aux loss.

mod common;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{IndexingUpdateOp, Tensor};
use common::*;
use driftlab::kernels::hooks::{self, Node, Switch};
use driftlab::model::moe::{LayerRouting, moe_forward, native_topk, swiglu};
use driftlab::model::weights::{MoeWeights, SwiGlu};
use driftlab::model::{ForwardOptions, ModelConfig, NO_ROUTE};
use driftlab::util::tensors::{floats, ints, to_vec};

#[test]
fn replaying_the_native_trace_gives_identical_logits() {
    let model = tiny_model(1);
    let task = sort_task(0);
    let batch = batch_of(&problems(&task, 6, 3));
    let native = model.forward(&batch, &ForwardOptions::default());
    let routes: Vec<Vec<u16>> = native.traces.iter().map(|t| t.native.clone()).collect();
    let opts = ForwardOptions::replay(&routes);
    let replay = model.forward(&batch, &opts);
    let d = max_abs(&to_vec(native.logits), &to_vec(replay.logits));
    assert!(d <= 1e-6, "replay changed logits by {d}");
    for (a, b) in native.traces.iter().zip(&replay.traces) {
        assert_eq!(
            a.native, b.native,
            "native top-k must be the same under replay of itself"
        );
        assert_eq!(b.used, a.native);
    }
}

#[test]
fn forcing_other_ids_changes_output_and_still_reports_native() {
    let model = tiny_model(2);
    let task = sort_task(0);
    let batch = batch_of(&problems(&task, 4, 5));
    let native = model.forward(&batch, &ForwardOptions::default());
    let e = model.cfg.n_experts as u16;
    // Shift every id by one expert: a different set for every token.
    let shifted: Vec<Vec<u16>> = native
        .traces
        .iter()
        .map(|t| t.native.iter().map(|&i| (i + 1) % e).collect())
        .collect();
    let opts = ForwardOptions::replay(&shifted);
    let forced = model.forward(&batch, &opts);
    let d = max_abs(&to_vec(native.logits), &to_vec(forced.logits));
    assert!(
        d > 1e-3,
        "forcing other experts should change the output (max diff {d})"
    );
    assert_eq!(
        forced.traces[0].native, native.traces[0].native,
        "first layer's native choice does not depend on forcing"
    );
    assert_eq!(forced.traces[0].used, shifted[0]);
}

/// d_model 2, 3 experts, top-2; the router makes token [1, 0] have p = [1/6, 2/6, 3/6] and token
/// [0, 1] have p = [3/5, 1/5, 1/5]. Expert e outputs (e + 1) · base(x).
fn hand_layer(norm_topk: bool) -> (ModelConfig, MoeWeights, Tensor<2>) {
    let device = flex();
    let cfg = ModelConfig {
        norm_topk,
        ..hand_cfg()
    };
    let (l2, l3) = (2f32.ln(), 3f32.ln());
    let router = floats(vec![0.0, l2, l3, l3, 0.0, 0.0], [2, 3], &device);
    let w1 = floats(vec![1.0, 0.5, 0.3, 0.7], [2, 2], &device);
    let w3 = floats(vec![2.0, -1.0, 1.5, 0.2], [2, 2], &device);
    let w2 = [0.4f32, -0.2, 0.1, 0.9];
    let experts = (0..3)
        .map(|e| SwiGlu {
            w1: w1.clone(),
            w3: w3.clone(),
            w2: floats(
                w2.iter().map(|v| v * (e + 1) as f32).collect(),
                [2, 2],
                &device,
            ),
        })
        .collect();
    let x = floats(vec![1.0, 0.0, 0.0, 1.0], [2, 2], &device);
    (
        cfg,
        MoeWeights {
            router,
            experts,
            shared: None,
            bias: Vec::new(),
        },
        x,
    )
}

#[test]
fn gates_match_hand_computed_values_native_and_forced() {
    let (cfg, w, x) = hand_layer(true);
    let base = to_vec(swiglu(&w.experts[0], x.clone()));
    let active = [true, true];
    let native = moe_forward(&w, &cfg, x.clone(), &active, LayerRouting::default(), false);
    assert_eq!(
        native.trace.native,
        vec![2, 1, 0, 1],
        "top-2 by probability, ties to the lower id"
    );
    // Token 0 native {2,1}: gates 3/5, 2/5 → 3·3/5 + 2·2/5 = 13/5. Token 1 {0,1}: 3/4, 1/4 → 1·3/4 + 2·1/4 = 5/4.
    // Forced token 0 → {0,1}: gates 1/3, 2/3 → 1/3 + 4/3 = 5/3; token 1 → {2, 0}: 1/4, 3/4 → 3/4 + 3/4 = 3/2.
    let forced_ids = [0u16, 1, 2, 0];
    let forced = moe_forward(
        &w,
        &cfg,
        x,
        &active,
        LayerRouting {
            forced: Some(&forced_ids),
            ..LayerRouting::default()
        },
        false,
    );
    let out_n = to_vec(native.out);
    let out_f = to_vec(forced.out);
    for (tok, (cn, cf)) in [(13.0 / 5.0, 5.0 / 3.0), (5.0 / 4.0, 3.0 / 2.0)]
        .into_iter()
        .enumerate()
    {
        for j in 0..2 {
            let b = base[tok * 2 + j];
            assert!(
                (out_n[tok * 2 + j] - cn * b).abs() < 1e-6,
                "native token {tok}: {} vs {}",
                out_n[tok * 2 + j],
                cn * b
            );
            assert!(
                (out_f[tok * 2 + j] - cf * b).abs() < 1e-6,
                "forced token {tok}: {} vs {}",
                out_f[tok * 2 + j],
                cf * b
            );
        }
    }
    assert_eq!(
        forced.trace.native,
        vec![2, 1, 0, 1],
        "native ids are still computed under forcing"
    );
    assert_eq!(forced.trace.used, forced_ids.to_vec());
}

/// PR²'s π_old pass on the hand layer, with W_p moving token 0's logits by h·W_p = (ln 6, 0, 0)
/// (token 1's by nothing). Shifted logits of token 0: (ln 6, ln 2, ln 3), p̂ = (6, 2, 3)/11, so
/// both forms force the predicted top-2 {0, 2}. The authors' form (`gates = "shifted"`, the
/// default: Megatron's `routing(logits + h W_p)`) takes the gates from the shifted softmax at
/// {0, 2}: 6/11, 3/11, renormalised 2/3, 1/3, so token 0's output is (1·2/3 + 3·1/3)·base =
/// 5/3·base (raw, without `norm_topk`: 15/11), and the pass's own top-k of the shifted logits is
/// the predicted one. The native form keeps the unshifted router's gates at {0, 2}: 1/6, 3/6 →
/// 1/4, 3/4, i.e. 5/2·base (raw 10/6), driftlab's earlier π_old. Token 1 (no shift, top-2
/// {0, 1}: 3/4, 1/4) gives 5/4·base in both (raw 1).
#[test]
fn pr2_old_pass_gates_are_the_shifted_routers_in_the_authors_form_and_the_live_ones_in_native() {
    use driftlab::rl::predictor::Predictor;
    use driftlab::rl::{Pr2Config, Pr2Gates};
    for norm_topk in [true, false] {
        let (cfg, w, x) = hand_layer(norm_topk);
        let base = to_vec(swiglu(&w.experts[0], x.clone()));
        let h = to_vec(x.clone());
        let active = [true, true];
        let old = moe_forward(&w, &cfg, x.clone(), &active, LayerRouting::default(), true);
        let probs = old.trace.probs.clone().unwrap();
        let run = |gates: Pr2Gates| {
            let mut p = Predictor::new(
                1,
                2,
                3,
                2,
                &Pr2Config {
                    gates,
                    ..Pr2Config::default()
                },
            );
            p.w[0] = vec![6f32.ln(), 0.0, 0.0, 0.0, 0.0, 0.0];
            let (routes, offset) = p.old_pass(0, &h, &probs);
            assert_eq!(routes, vec![0, 2, 0, 1], "{gates}: the predicted top-2");
            assert_eq!(offset.is_some(), gates == Pr2Gates::Shifted, "{gates}");
            let routing = LayerRouting {
                forced: Some(&routes),
                logit_offset: offset.map(|o| floats(o, [2, 3], &flex())),
                ..LayerRouting::default()
            };
            let o = moe_forward(&w, &cfg, x.clone(), &active, routing, true);
            assert_eq!(o.trace.used, routes, "{gates}: the predicted experts run");
            (to_vec(o.out), o.trace)
        };
        let (shifted, trace) = run(Pr2Gates::Shifted);
        assert_eq!(
            trace.native,
            vec![0, 2, 0, 1],
            "routing(logits + h W_p) picks the predicted experts itself"
        );
        let p0: Vec<f32> = trace.probs.unwrap()[..3].to_vec();
        let want_p0 = [6.0 / 11.0, 2.0 / 11.0, 3.0 / 11.0];
        assert!(
            p0.iter().zip(want_p0).all(|(a, b)| (a - b).abs() < 1e-6),
            "the pass's router distribution is the shifted softmax: {p0:?}"
        );
        let (native, _) = run(Pr2Gates::Native);
        let want = |shift: bool| -> [f32; 2] {
            match (shift, norm_topk) {
                (true, true) => [5.0 / 3.0, 5.0 / 4.0],
                (false, true) => [5.0 / 2.0, 5.0 / 4.0],
                (true, false) => [15.0 / 11.0, 1.0],
                (false, false) => [10.0 / 6.0, 1.0],
            }
        };
        for (out, shift) in [(&shifted, true), (&native, false)] {
            for tok in 0..2 {
                for j in 0..2 {
                    let (got, b) = (out[tok * 2 + j], base[tok * 2 + j]);
                    let c = want(shift)[tok];
                    assert!(
                        (got - c * b).abs() < 1e-6,
                        "norm_topk {norm_topk}, shifted {shift}, token {tok}: {got} vs {}",
                        c * b
                    );
                }
            }
        }
    }
}

#[test]
fn raw_gates_without_renormalisation() {
    let (cfg, w, x) = hand_layer(false);
    let base = to_vec(swiglu(&w.experts[0], x.clone()));
    let o = to_vec(moe_forward(&w, &cfg, x, &[true, true], LayerRouting::default(), false).out);
    // Token 0: 3·(3/6) + 2·(2/6) = 13/6.
    assert!((o[0] - 13.0 / 6.0 * base[0]).abs() < 1e-6);
}

#[test]
fn load_balancing_loss_matches_hand_computation() {
    let (cfg, w, x) = hand_layer(true);
    let o = moe_forward(&w, &cfg, x, &[true, true], LayerRouting::default(), true);
    // f = [1, 2, 1] / 4; P = mean(p) = [(1/6 + 3/5)/2, (2/6 + 1/5)/2, (3/6 + 1/5)/2]; aux = 3 Σ f·P = 0.95.
    let aux = to_vec(o.aux_loss)[0];
    assert!((aux - 0.95).abs() < 1e-5, "aux {aux}");
    // z-loss: logsumexp of [0, ln2, ln3] = ln 6; of [ln3, 0, 0] = ln 5.
    let z = to_vec(o.z_loss)[0];
    let want = (6f32.ln().powi(2) + 5f32.ln().powi(2)) / 2.0;
    assert!((z - want).abs() < 1e-5, "z {z} vs {want}");
    let p = o.trace.probs.expect("probs asked for");
    assert!((p[0] - 1.0 / 6.0).abs() < 1e-6 && (p[3] - 0.6).abs() < 1e-6);
}

#[test]
fn router_gets_gradient_under_forced_routing() {
    let model = tiny_model(3);
    let task = sort_task(0);
    let batch = batch_of(&problems(&task, 4, 9));
    let native = model.forward(&batch, &ForwardOptions::default());
    let e = model.cfg.n_experts as u16;
    let shifted: Vec<Vec<u16>> = native
        .traces
        .iter()
        .map(|t| t.native.iter().map(|&i| (i + 2) % e).collect())
        .collect();
    let train = model.require_grad();
    let opts = ForwardOptions::replay(&shifted);
    let out = train.forward(&batch, &opts);
    let grads = out.logits.powi_scalar(2).mean().backward();
    for (l, blk) in train.weights.blocks.iter().enumerate() {
        let driftlab::model::weights::FfnWeights::Moe(m) = &blk.ffn else {
            panic!("moe")
        };
        let g = to_vec(m.router.grad(&grads).expect("router gradient exists"));
        let norm: f32 = g.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!(
            norm > 1e-8,
            "layer {l} router gradient is zero under forced routing"
        );
    }
}

/// Reference: every token runs its k experts one at a time.
fn naive_moe(w: &MoeWeights, cfg: &ModelConfig, x: Tensor<2>, ids: &[u16]) -> Tensor<2> {
    let [t, d] = x.dims();
    let k = cfg.top_k;
    let device = x.device();
    let probs = softmax(x.clone().matmul(w.router.clone()), 1);
    let rows: Vec<Tensor<2>> = (0..t)
        .map(|tok| {
            let xt = x.clone().slice([tok..tok + 1, 0..d]);
            let pt = probs.clone().slice([tok..tok + 1, 0..cfg.n_experts]);
            let sel: Vec<usize> = ids[tok * k..(tok + 1) * k]
                .iter()
                .map(|&e| e as usize)
                .collect();
            let g = pt.gather(1, ints(&sel, [1, k], &device));
            let g = g.clone() / g.sum_dim(1);
            let mut acc = Tensor::zeros([1, d], &device);
            for (j, &e) in sel.iter().enumerate() {
                let ex = &w.experts[e];
                // burn's own silu: an independent check of the custom-gradient silu_mul.
                let h = silu(xt.clone().matmul(ex.w1.clone())) * xt.clone().matmul(ex.w3.clone());
                acc = acc + h.matmul(ex.w2.clone()) * g.clone().slice([0..1, j..j + 1]);
            }
            acc
        })
        .collect();
    Tensor::cat(rows, 0)
}

/// The sparse dispatch, the fused expert node (CPU) and the per-token loop agree on the output
/// and on every gradient: input, router and each expert's three matrices, with padding tokens
/// and with an expert no token reaches (no gradient in any path).
/// `through`: the input reaches the layer through an op (as a norm's output does in the model)
/// instead of being the leaf itself, which the fused node's gather treats differently.
fn three_paths_agree(active: &[bool], starve: Option<usize>, through: bool) -> usize {
    let model = tiny_model(4);
    let cfg = model.cfg.clone();
    let driftlab::model::weights::FfnWeights::Moe(w0) = model.weights.blocks[0].ffn.clone() else {
        panic!("moe")
    };
    let device = flex();
    let t = active.len();
    let xs: Vec<f32> = (0..t * cfg.d_model)
        .map(|i| ((i * 37 % 101) as f32 / 50.0) - 1.0)
        .collect();
    let x0 = floats(xs, [t, cfg.d_model], &device);
    let leaves = |w: &MoeWeights| MoeWeights {
        router: w.router.clone().autodiff().require_grad(),
        experts: w
            .experts
            .iter()
            .map(|e| SwiGlu {
                w1: e.w1.clone().autodiff().require_grad(),
                w3: e.w3.clone().autodiff().require_grad(),
                w2: e.w2.clone().autodiff().require_grad(),
            })
            .collect(),
        shared: None,
        bias: w.bias.clone(),
    };
    // Forcing every slot to other experts than `starve` leaves that one without tokens.
    let forced: Option<Vec<u16>> = starve.map(|s| {
        (0..t * cfg.top_k)
            .map(|i| ((s + 1 + i % cfg.top_k) % cfg.n_experts) as u16)
            .collect()
    });
    let routing = || LayerRouting {
        forced: forced.as_deref(),
        ..LayerRouting::default()
    };
    // A loss that weights each output differently, so every gradient path is exercised.
    let lw = floats(
        (0..t * cfg.d_model).map(|i| (i % 7) as f32 - 3.0).collect(),
        [t, cfg.d_model],
        &device,
    );
    let run = |fused: bool| {
        let (w, x) = (leaves(&w0), x0.clone().autodiff().require_grad());
        // × 1 is exact both ways, so the leaf's gradient is the layer input's.
        let input = if through { x.clone() * 1.0 } else { x.clone() };
        let c = ModelConfig {
            expert_path: expert_path(fused),
            ..cfg.clone()
        };
        let o = moe_forward(&w, &c, input, active, routing(), false);
        let ids = o.trace.used.clone();
        let out = to_vec(o.out.clone().inner());
        (w, x, ids, out, (o.out * lw.clone()).sum().backward())
    };
    let (wa, xa, ids, outa, ga) = run(false);
    let counts = hooks::counts();
    let (wf, xf, idsf, outf, gf) = run(true);
    assert!(
        counts.of(Node::FusedExperts) > 0,
        "the fused path ran on this thread"
    );
    assert_eq!(ids, idsf);
    assert!(
        outa.iter()
            .zip(&outf)
            .all(|(p, q)| p.to_bits() == q.to_bits()),
        "the fused output is not bitwise the sparse one"
    );
    let (wb, xb) = (leaves(&w0), x0.clone().autodiff().require_grad());
    let naive = naive_moe(&wb, &cfg, xb.clone(), &ids);
    let mask: Vec<f32> = active
        .iter()
        .flat_map(|&a| vec![if a { 1.0 } else { 0.0 }; cfg.d_model])
        .collect();
    let naive = naive * floats(mask, [t, cfg.d_model], &device);
    let outb = to_vec(naive.clone().inner());
    for (what, o) in [("sparse", &outa), ("fused", &outf)] {
        let d = max_abs(o, &outb);
        assert!(d <= 1e-5, "{what} forward differs from the loop by {d}");
    }
    let gb = (naive * lw).sum().backward();
    let grad = |x: &Tensor<2>, g: &burn::tensor::Gradients| x.grad(g).map(to_vec);
    let cmp = |a: &Tensor<2>, f: &Tensor<2>, b: &Tensor<2>, what: &str| {
        let (va, vf, vb) = (grad(a, &ga), grad(f, &gf), grad(b, &gb));
        // Every gradient is bitwise the sparse path's. The input's is compared as numbers: where
        // the node adds its rows into the held gradient in place, a row no expert reached keeps
        // the router's zero as it is, and the sparse path's `+ 0` may turn a −0 into a +0.
        if let (Some(x), Some(y)) = (&va, &vf) {
            let same = |p: &f32, q: &f32| match what {
                "input" => p == q,
                _ => p.to_bits() == q.to_bits(),
            };
            assert!(
                x.iter().zip(y).all(|(p, q)| same(p, q)),
                "{what}: the fused gradient is not bitwise the sparse one (largest difference {})",
                max_abs(x, y)
            );
        }
        match (&va, &vf) {
            (Some(va), Some(vf)) => {
                // The loop's graph keeps every expert; one that no token reached has zeros.
                let vb = vb.unwrap_or_else(|| vec![0.0; va.len()]);
                for (p, v) in [("sparse", va), ("fused", vf)] {
                    let d = max_abs(v, &vb);
                    assert!(
                        d <= 1e-5,
                        "{what}: {p} gradient differs from the loop by {d}"
                    );
                }
            }
            (None, None) => {}
            _ => panic!("{what}: the sparse and fused paths disagree on having a gradient"),
        }
        va.is_some()
    };
    assert!(cmp(&xa, &xf, &xb, "input"));
    assert!(cmp(&wa.router, &wf.router, &wb.router, "router"));
    let mut n_reached = 0;
    for e in 0..cfg.n_experts {
        let (a, f, b) = (&wa.experts[e], &wf.experts[e], &wb.experts[e]);
        let had = [
            cmp(&a.w1, &f.w1, &b.w1, "w1"),
            cmp(&a.w3, &f.w3, &b.w3, "w3"),
            cmp(&a.w2, &f.w2, &b.w2, "w2"),
        ];
        let reached = (0..t)
            .any(|i| active[i] && ids[i * cfg.top_k..(i + 1) * cfg.top_k].contains(&(e as u16)));
        assert_eq!(had, [reached; 3], "expert {e}: gradients present {had:?}");
        n_reached += usize::from(reached);
    }
    n_reached
}

#[test]
fn sparse_dispatch_fused_node_and_naive_loop_agree_forward_and_gradients() {
    let padded: Vec<bool> = (0..24).map(|i| i % 5 != 3).collect();
    for through in [false, true] {
        three_paths_agree(&[true; 24], None, through);
        three_paths_agree(&padded, None, through);
        // Forced onto experts 3 and 0, the other two get no token and no gradient in any path.
        assert_eq!(three_paths_agree(&padded, Some(2), through), 2);
    }
}

#[test]
fn padding_tokens_are_not_dispatched() {
    let (cfg, w, x) = hand_layer(true);
    let o = moe_forward(&w, &cfg, x, &[true, false], LayerRouting::default(), false);
    let out = to_vec(o.out);
    assert_eq!(&out[2..], &[0.0, 0.0], "inactive token gets no FFN output");
    // aux over the active token only: f = [0, .5, .5], P = [1/6, 2/6, 3/6] → 3·(1/6 + 1/4) = 1.25.
    assert!((to_vec(o.aux_loss)[0] - 1.25).abs() < 1e-5);
}

#[test]
fn no_route_slots_fall_back_to_native() {
    let (cfg, w, x) = hand_layer(true);
    let forced = [NO_ROUTE, NO_ROUTE, 2, 0];
    let o = moe_forward(
        &w,
        &cfg,
        x,
        &[true, true],
        LayerRouting {
            forced: Some(&forced),
            ..LayerRouting::default()
        },
        false,
    );
    assert_eq!(o.trace.used, vec![2, 1, 2, 0]);
}

#[test]
fn native_topk_breaks_ties_to_lower_id() {
    assert_eq!(native_topk(&[0.25, 0.25, 0.25, 0.25], 4, 2), vec![0, 1]);
    assert_eq!(native_topk(&[0.1, 0.4, 0.1, 0.4], 4, 3), vec![1, 3, 0]);
}

#[test]
fn select_assign_add_accumulates_duplicates() {
    // The dispatch relies on Add accumulating repeated indices (a token's k experts).
    let device = flex();
    let base = Tensor::<2>::zeros([2, 1], &device);
    let vals = floats(vec![1.0, 2.0, 4.0], [3, 1], &device);
    let out = base.select_assign(
        0,
        ints(&[1, 1, 0], [3], &device),
        vals,
        IndexingUpdateOp::Add,
    );
    assert_eq!(to_vec(out), vec![4.0, 3.0]);
}

#[test]
fn load_balancing_loss_of_parts_adds_up_to_the_whole_batch() {
    use driftlab::model::aux_loss_of_parts;
    let (cfg, w, x) = hand_layer(true);
    let device = flex();
    let whole = moe_forward(
        &w,
        &cfg,
        x.clone(),
        &[true, true],
        LayerRouting::default(),
        false,
    );
    let part = |t: usize| {
        let xt = x.clone().slice([t..t + 1, 0..2]);
        moe_forward(&w, &cfg, xt, &[true], LayerRouting::default(), false)
    };
    let (p0, p1) = (part(0), part(1));
    // One part: exactly the layer's own loss.
    let one = aux_loss_of_parts(&[std::slice::from_ref(&whole.load)], cfg.top_k, &device);
    assert_eq!(to_vec(one[0].clone()), to_vec(whole.aux_loss.clone()));
    // Two one-token parts with the whole batch's f = [1, 2, 1] / 4: 3 · Σ f·p_t / 2 each,
    // p_0 = [1, 2, 3] / 6, p_1 = [3, 1, 1] / 5; together the hand-computed 0.95.
    let parts = aux_loss_of_parts(
        &[
            std::slice::from_ref(&p0.load),
            std::slice::from_ref(&p1.load),
        ],
        cfg.top_k,
        &device,
    );
    let (a0, a1) = (to_vec(parts[0].clone())[0], to_vec(parts[1].clone())[0]);
    let want0 = 3.0 * (1.0 / 6.0 * 0.25 + 2.0 / 6.0 * 0.5 + 3.0 / 6.0 * 0.25) / 2.0;
    let want1 = 3.0 * (0.6 * 0.25 + 0.2 * 0.5 + 0.2 * 0.25) / 2.0;
    assert!(
        (a0 - want0).abs() < 1e-6 && (a1 - want1).abs() < 1e-6,
        "{a0} {a1}"
    );
    assert!((a0 + a1 - 0.95).abs() < 1e-5);
    // Each part's own loss (its own f) averages to something else: 1.225, not 0.95.
    let own = (to_vec(p0.aux_loss)[0] + to_vec(p1.aux_loss)[0]) / 2.0;
    assert!((own - 1.225).abs() < 1e-5, "{own}");
}

/// The CPU backend's fused AdamW (one host pass per parameter) and the tensor-op AdamW give
/// bitwise the same weights over several steps, with gradient clipping on (and off: step 3's
/// gradients are small), weight decay on matrices and a router learning-rate multiplier. Each
/// path gets its own copies, so the fused path's in-place reads of unshared buffers run.
#[test]
fn the_fused_host_update_is_bitwise_the_tensor_update() {
    use driftlab::model::Weights;
    use driftlab::optim::AdamW;
    let model = tiny_model(3);
    let cfg = adamw_test_cfg();
    let deep = |ts: &[Tensor<2>]| -> Vec<Tensor<2>> {
        ts.iter()
            .map(|t| floats(to_vec(t.clone().inner()), t.dims(), &flex()))
            .collect()
    };
    let own = |w: &Weights| {
        let mut c = w.clone();
        c.put_tensors(deep(&w.tensors()));
        c
    };
    let mut fused = AdamW::new(cfg.clone(), &model.weights);
    assert!(
        fused.fused,
        "weights on the CPU backend take the fused path"
    );
    let mut plain = AdamW::new(cfg, &model.weights);
    plain.fused = false;
    let (mut wf, mut wp) = (own(&model.weights), own(&model.weights));
    let mut seed = 11u64;
    let mut clipped = Vec::new();
    for step in 0..4 {
        let size = [1.0, 1.0, 50.0, 1e-4][step];
        let grads = lcg_grads(&wf, size, &mut seed, &flex());
        let before = to_vec(wf.tensors()[0].clone().inner());
        let (a, ra) = fused.step(wf, deep(&grads), 3e-2);
        let (b, rb) = plain.step(wp, grads, 3e-2);
        assert_eq!(ra, rb);
        assert!(ra.applied);
        clipped.push(ra.grad_norm > 0.5);
        for (x, y) in a.tensors().into_iter().zip(b.tensors()) {
            let (x, y) = (to_vec(x.inner()), to_vec(y.inner()));
            assert!(
                x.iter().zip(&y).all(|(p, q)| p.to_bits() == q.to_bits()),
                "step {step}: the fused update differs from the tensor update"
            );
        }
        assert_ne!(
            to_vec(a.tensors()[0].clone().inner()),
            before,
            "step {step} moved the weights"
        );
        (wf, wp) = (a, b);
    }
    assert_eq!(clipped, [true, true, true, false], "clipping on, then off");
}

/// The CPU backend's attention node and the tensor path agree: a whole model's logits at the
/// real tokens and the gradient of every weight under a loss on them, over left-padded rows
/// (masked keys, padding queries), with and without a graph;
/// and a KV-cached continuation (cached keys, `pos0 > 0`, then a single query) gives the same
/// logits both ways.
#[test]
fn attention_node_and_tensor_path_agree_forward_and_gradients() {
    use driftlab::model::LayerCache;

    let model = tiny_model(9);
    let task = sort_task(3);
    let batch = batch_of(&problems(&task, 5, 8));
    assert!(batch.valid.contains(&false), "left padding masks some keys");
    // A loss on the real tokens' logits, as every loss driftlab takes.
    let lw: Vec<f32> = (0..batch.n_tokens() * model.cfg.vocab_size)
        .map(|i| match batch.valid[i / model.cfg.vocab_size] {
            true => (i % 5) as f32 - 2.0,
            false => 0.0,
        })
        .collect();
    let run = |tensor_path: bool| {
        let go = || {
            let train = model.require_grad();
            let out = train.forward(&batch, &ForwardOptions::default());
            let logits = to_vec(out.logits.clone().inner());
            let shape = out.logits.dims();
            let w = floats(lw.clone(), shape, &out.logits.device());
            let grads = (out.logits * w).sum().backward();
            let g: Vec<Vec<f32>> = train
                .weights
                .tensors()
                .iter()
                .map(|t| to_vec(t.grad(&grads).expect("every weight has a gradient")))
                .collect();
            let plain = to_vec(model.forward(&batch, &ForwardOptions::default()).logits);
            (logits, plain, g)
        };
        if tensor_path {
            hooks::with(Switch::Reference, go)
        } else {
            go()
        }
    };
    let counts = hooks::counts();
    let (la, pa, ga) = run(false);
    assert!(counts.of(Node::AttnQkv) > 0, "the attention node ran");
    let counts = hooks::counts();
    let (lb, pb, gb) = run(true);
    assert_eq!(counts.any(), 0, "no fast node ran under the reference");
    assert_eq!(
        la, pa,
        "the node gives the same logits with and without a graph"
    );
    assert_eq!(lb, pb, "so does the tensor path");
    // At real tokens: the node gives a padding query context 0 (nothing reads it).
    let real = |l: &[f32]| at_real(l, model.cfg.vocab_size, &batch.valid);
    let d = max_abs(&real(&la), &real(&lb));
    assert!(d <= 1e-5, "logits differ between the paths by {d}");
    for (i, (a, b)) in ga.iter().zip(&gb).enumerate() {
        let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        let d = max_abs(a, b);
        assert!(
            d <= 1e-5 * scale,
            "weight {i}: gradients differ by {d} (scale {scale})"
        );
    }

    // Prefix then the rest through a KV cache, both ways.
    let s = batch.seq;
    let cut = s - 3;
    let cached = |tensor_path: bool| {
        let go = || {
            let take = |from: usize, to: usize| columns(&batch, from, to);
            let kv = |to: usize| key_valid(&batch, to);
            let mut cache: Vec<LayerCache> = Vec::new();
            let opts = ForwardOptions::default();
            let inner = model.inner();
            inner.forward_at(&take(0, cut), 0, &kv(cut), &opts, Some(&mut cache));
            // Two positions, then one (a generation step's single query).
            let mut logits = Vec::new();
            for (from, to) in [(cut, s - 1), (s - 1, s)] {
                let o = inner.forward_at(&take(from, to), from, &kv(to), &opts, Some(&mut cache));
                logits.extend(to_vec(o.logits));
            }
            logits
        };
        if tensor_path {
            hooks::with(Switch::Reference, go)
        } else {
            go()
        }
    };
    let d = max_abs(&cached(false), &cached(true));
    assert!(
        d <= 1e-5,
        "cached continuations differ between the paths by {d}"
    );
}

/// A forward with a graph (the fused node), one without (the fused forward on host slices)
/// and the sparse path's, with and without a graph, give bitwise the same logits: π_old's
/// recompute against the first update keeps on-policy ratios of exactly 1.
#[test]
fn fused_node_and_sparse_no_graph_forward_are_bitwise_equal() {
    let model = tiny_model(12);
    let batch = batch_of(&problems(&sort_task(2), 6, 4));
    let opts = ForwardOptions::default();
    let counts = hooks::counts();
    let logits = |fused: bool| {
        let model = on_path(&model, fused);
        let plain = to_vec(model.forward(&batch, &opts).logits);
        let graph = to_vec(model.require_grad().forward(&batch, &opts).logits.inner());
        (plain, graph)
    };
    let (plain, graph) = logits(true);
    assert!(
        counts.of(Node::FusedExperts) >= model.cfg.n_layers,
        "the forward with a graph took the node in every layer"
    );
    assert!(
        counts.of(Node::PlainExperts) >= model.cfg.n_layers,
        "the forward without a graph took the fused forward in every layer"
    );
    let (sparse_plain, sparse_graph) = logits(false);
    assert!(plain == graph && graph == sparse_plain && sparse_plain == sparse_graph);
    assert!(
        plain
            .iter()
            .zip(&sparse_plain)
            .all(|(p, q)| p.to_bits() == q.to_bits()),
        "bitwise, zeros' signs too"
    );
}

/// The SwiGLU product's autodiff node (CPU) gives bitwise the value and both gradients of the
/// tensor form it replaced, `(a1 − sg(a1)) ⊙ c1 + a3 ⊙ c3`, and agrees with burn's own
/// `silu(a1) ⊙ a3` to rounding.
#[test]
fn the_silu_mul_node_is_bitwise_the_tensor_form() {
    use driftlab::model::moe::silu_mul;
    let device = flex();
    let (n, f) = (7, 24);
    let values = |m: usize| -> Vec<f32> {
        (0..n * f)
            .map(|i| ((i * m % 97) as f32 / 12.0) - 4.0)
            .collect()
    };
    let (x1, x3, w) = (values(31), values(53), values(17));
    let leaf = |v: &Vec<f32>| floats(v.clone(), [n, f], &device).autodiff().require_grad();
    let weight = floats(w, [n, f], &device).autodiff();
    let run = |form: &dyn Fn(Tensor<2>, Tensor<2>) -> Tensor<2>| {
        let (a1, a3) = (leaf(&x1), leaf(&x3));
        let y = form(a1.clone(), a3.clone());
        let value = to_vec(y.clone().inner());
        let g = (y * weight.clone()).sum().backward();
        let grad = |t: &Tensor<2>| to_vec(t.grad(&g).expect("a gradient"));
        (value, grad(&a1), grad(&a3))
    };
    let counts = hooks::counts();
    let node = run(&silu_mul);
    assert!(counts.of(Node::SiluNode) > 0, "the node ran");
    let counts = hooks::counts();
    hooks::with(Switch::Reference, || run(&silu_mul));
    assert_eq!(counts.of(Node::SiluNode), 0, "not under the reference");
    let tensor_form = |a1: Tensor<2>, a3: Tensor<2>| {
        let (h1, h3) = (to_vec(a1.clone().inner()), to_vec(a3.clone().inner()));
        let (c1, c3) = driftlab::kernels::flex::fastmath::silu_mul_consts_vec(&h1, &h3);
        let (c1, c3) = (floats(c1, [n, f], &device), floats(c3, [n, f], &device));
        let a1c = a1.clone().inner().autodiff();
        (a1 - a1c) * c1.autodiff() + a3 * c3.autodiff()
    };
    let tensor = run(&tensor_form);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&node.0), bits(&tensor.0), "value");
    assert_eq!(bits(&node.1), bits(&tensor.1), "gradient of a1");
    assert_eq!(bits(&node.2), bits(&tensor.2), "gradient of a3");
    let burn = run(&|a1: Tensor<2>, a3: Tensor<2>| silu(a1) * a3);
    for (what, a, b) in [
        ("value", &node.0, &burn.0),
        ("da1", &node.1, &burn.1),
        ("da3", &node.2, &burn.2),
    ] {
        let d = max_abs(a, b);
        assert!(d <= 1e-4, "{what} differs from burn's silu by {d}");
    }
}

/// With the fused expert node on (the default on the CPU backend) every weight's gradient of a
/// whole model is bitwise the sparse path's: softmax and sigmoid_bias routers, a shared expert,
/// and replayed routes, through the load-balancing and z-losses too.
#[test]
fn the_fused_node_leaves_every_model_gradient_bitwise_unchanged() {
    use driftlab::model::{Model, RouterKind};
    use driftlab::optim::AdamW;
    let batch = batch_of(&problems(&sort_task(3), 6, 5));
    let variants = [
        tiny_cfg(),
        ModelConfig {
            router: RouterKind::SigmoidBias,
            ..tiny_cfg()
        },
        ModelConfig {
            shared_expert: true,
            ..tiny_cfg()
        },
    ];
    for (i, cfg) in variants.into_iter().enumerate() {
        let model = Model::init(cfg.clone(), 11 + i as u64, &flex());
        let native = model.forward(&batch, &ForwardOptions::default());
        // The routes of another model's forward: replay that differs from the native choice.
        let other = Model::init(cfg.clone(), 99, &flex());
        let routes: Vec<Vec<u16>> = other
            .forward(&batch, &ForwardOptions::default())
            .traces
            .iter()
            .map(|t| t.used.clone())
            .collect();
        let n = native.logits.dims();
        let lw = floats(
            (0..n[0] * n[1])
                .map(|j| (j % 11) as f32 / 5.0 - 1.0)
                .collect(),
            n,
            &flex(),
        );
        for replay in [false, true] {
            let opts = if replay {
                ForwardOptions::replay(&routes)
            } else {
                ForwardOptions::default()
            };
            let grads = |fused: bool| {
                let m = on_path(&model, fused).require_grad();
                let o = m.forward(&batch, &opts);
                let loss = (o.logits * lw.clone()).sum() + o.aux_loss * 0.1 + o.z_loss * 0.01;
                let g = loss.backward();
                AdamW::collect_grads(&m.weights, &g)
                    .into_iter()
                    .map(to_vec)
                    .collect::<Vec<_>>()
            };
            let sparse = grads(false);
            let counts = hooks::counts();
            let fused = grads(true);
            assert!(
                counts.of(Node::FusedExperts) >= cfg.n_layers,
                "variant {i}: the fused node ran in every layer"
            );
            assert_eq!(sparse.len(), fused.len());
            for (j, (a, b)) in sparse.iter().zip(&fused).enumerate() {
                assert!(
                    a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()),
                    "variant {i}, replay {replay}: weight {j}'s gradient differs by {}",
                    max_abs(a, b)
                );
            }
        }
    }
}

/// The expert path of `fused`.
fn expert_path(fused: bool) -> driftlab::model::ExpertPath {
    if fused {
        driftlab::model::ExpertPath::Fused
    } else {
        driftlab::model::ExpertPath::Sparse
    }
}

/// `model` with its MoE layers on the fused (or the sparse) expert path.
fn on_path(model: &driftlab::model::Model, fused: bool) -> driftlab::model::Model {
    let mut m = model.clone();
    m.cfg.expert_path = expert_path(fused);
    m
}

/// The no-graph RMSNorm on the CPU backend (one host pass) gives the bits of the tensor ops
/// it replaces (run here through the graph path), for widths that fill, split and undershoot the
/// vector lanes, and for zeros, huge values, infinities and NaN.
#[test]
fn the_host_rms_norm_is_bitwise_the_tensor_ops() {
    use driftlab::model::rms_norm;
    let device = flex();
    for (n, d) in [(5, 64), (3, 37), (4, 128), (2, 1), (7, 16)] {
        let mut x: Vec<f32> = (0..n * d)
            .map(|i| ((i * 7919) % 1013) as f32 / 97.0 - 5.0)
            .collect();
        x[0] = 0.0;
        if n * d > 8 {
            x[3] = 3e19;
            x[d] = -0.0;
        }
        if n > 2 {
            x[2 * d] = f32::INFINITY;
            x[d * (n - 1)] = f32::NAN;
        }
        let g: Vec<f32> = (0..d).map(|j| 0.5 + j as f32 / 13.0).collect();
        let (xt, gt) = (floats(x, [n, d], &device), floats(g, [1, d], &device));
        let host = to_vec(rms_norm(xt.clone(), &gt));
        let graph = to_vec(rms_norm(xt.autodiff(), &gt.autodiff()).inner());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&host), bits(&graph), "[{n}, {d}]");
    }
}

/// The extended QKV projection computed as three blocks plus moved and negated copies
/// (`attn_core::project_extended`) is bitwise the full matrix product `x·[W_qkv | W_q·R |
/// W_k·R]`: values without and with a graph, and both gradients, with exact zeros and negative
/// zeros among the inputs and a row of zeros; a one-row product is left to the matrix product.
#[test]
fn the_projection_node_is_bitwise_the_matrix_product() {
    use driftlab::kernels::flex::attn_core::project_extended;
    use driftlab::kernels::rot_source;
    let device = flex();
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (n, d, heads) in [(40, 64, 4), (9, 128, 4), (3, 32, 2)] {
        let mut xs: Vec<f32> = (0..n * d)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 23.0)
            .collect();
        xs[..d].fill(0.0);
        xs[d] = -0.0;
        let w: Vec<f32> = (0..d * 3 * d)
            .map(|i| match i % 11 {
                0 => 0.0,
                1 => -0.0,
                _ => ((i * 53 % 97) as f32 - 48.0) / 97.0,
            })
            .collect();
        // [W | W_q·R | W_k·R] as the signed permutation builds it.
        let mut ext = vec![0f32; d * 5 * d];
        for r in 0..d {
            let row = &mut ext[r * 5 * d..(r + 1) * 5 * d];
            row[..3 * d].copy_from_slice(&w[r * 3 * d..(r + 1) * 3 * d]);
            for out in 0..2 * d {
                let (src, neg) = rot_source(out, d / heads);
                let v = w[r * 3 * d + src];
                row[3 * d + out] = if neg { -v } else { v };
            }
        }
        let dy: Vec<f32> = (0..n * 5 * d).map(|i| (i % 9) as f32 - 4.0).collect();
        let run = |node: bool| {
            let x = floats(xs.clone(), [n, d], &device);
            let we = floats(ext.clone(), [d, 5 * d], &device);
            let product = |x: &Tensor<2>, we: &Tensor<2>| match node {
                true => project_extended(x, we, heads).expect("the node applies"),
                false => x.clone().matmul(we.clone()),
            };
            let plain = to_vec(product(&x, &we));
            let (xa, wa) = (x.autodiff().require_grad(), we.autodiff().require_grad());
            let y = product(&xa, &wa);
            let value = to_vec(y.clone().inner());
            let g = (y * floats(dy.clone(), [n, 5 * d], &device).autodiff())
                .sum()
                .backward();
            let grad = |t: &Tensor<2>| to_vec(t.grad(&g).expect("a gradient"));
            (plain, value, grad(&xa), grad(&wa))
        };
        let (a, b) = (run(true), run(false));
        let what = format!("n {n}, d {d}");
        assert_eq!(bits(&a.0), bits(&b.0), "{what}: values without a graph");
        assert_eq!(bits(&a.1), bits(&b.1), "{what}: values with a graph");
        assert_eq!(bits(&a.2), bits(&b.2), "{what}: the input's gradient");
        assert_eq!(bits(&a.3), bits(&b.3), "{what}: the weight's gradient");
    }
    let one = floats(vec![0.5; 64], [1, 64], &device);
    let we = floats(vec![0.25; 64 * 320], [64, 320], &device);
    assert!(
        project_extended(&one, &we, 4).is_none(),
        "one row is left to the matrix product"
    );
}

/// The attention node computes a row's queries from its first real token to its last only
/// (`attn_core::query_spans`): at the real tokens the logits, and under a loss on them every
/// weight's gradient, are bitwise those of computing every query, with and without a graph,
/// over rows with left and right padding.
#[test]
fn padding_queries_left_out_change_no_bit() {
    let model = tiny_model(21);
    let mut batch = batch_of(&problems(&sort_task(4), 6, 12));
    // Right padding too: the last three positions of every other row.
    let (b, s, v) = (batch.batch, batch.seq, model.cfg.vocab_size);
    for r in (0..b).step_by(2) {
        for i in s - 3..s {
            batch.valid[r * s + i] = false;
            batch.tokens[r * s + i] = 0;
        }
    }
    assert!(batch.valid.contains(&false));
    let lw: Vec<f32> = (0..b * s * v)
        .map(|i| match batch.valid[i / v] {
            true => (i % 7) as f32 - 3.0,
            false => 0.0,
        })
        .collect();
    let run = || {
        let plain = to_vec(model.forward(&batch, &ForwardOptions::default()).logits);
        let train = model.require_grad();
        let out = train.forward(&batch, &ForwardOptions::default());
        let graph = to_vec(out.logits.clone().inner());
        let w = floats(lw.clone(), out.logits.dims(), &out.logits.device());
        let grads = (out.logits * w).sum().backward();
        let g: Vec<Vec<f32>> = (train.weights.tensors().iter())
            .map(|t| to_vec(t.grad(&grads).expect("a gradient")))
            .collect();
        (plain, graph, g)
    };
    let real = |l: &[f32]| -> Vec<u32> {
        let bits: Vec<u32> = l.iter().map(|x| x.to_bits()).collect();
        at_real(&bits, v, &batch.valid)
    };
    let counts = hooks::counts();
    let a = run();
    assert!(
        counts.of(Node::QueriesLeftOut) > 0,
        "padding queries were left out"
    );
    let counts = hooks::counts();
    let e = hooks::with(Switch::EveryQuery, run);
    assert_eq!(counts.of(Node::QueriesLeftOut), 0, "every query computed");
    assert_eq!(real(&a.0), real(&e.0), "logits without a graph");
    assert_eq!(real(&a.1), real(&e.1), "logits with a graph");
    for (i, (x, y)) in a.2.iter().zip(&e.2).enumerate() {
        // Equal as numbers: a padding position's zero may change sign.
        assert!(x == y, "weight {i}: gradients differ");
    }
}
