//! Every fast node of the CPU backend proves it ran, on the thread that ran it, and its negative
//! twin proves the reference ran instead: the same work under `force_reference` leaves every
//! count at 0. A node that silently fell back would fail the first; a dispatch that ignored the
//! override would fail the second.

mod common;
use common::*;
use driftlab::kernels::hooks::{self, Node};
use driftlab::model::{FfnKind, ForwardOptions, LayerCache, Model, ModelConfig};
use driftlab::optim::AdamW;
use driftlab::util::tensors::{floats, to_vec};

/// What a step does to a model: a forward without a graph, one with a graph and its backward,
/// the gradient norm, and a prefix then one position through a KV cache. The logits of the two
/// full forwards at the real tokens (a padding query's context is the node's 0, which nothing
/// reads).
fn workload(model: &Model) -> Vec<Vec<f32>> {
    let batch = batch_of(&problems(&sort_task(3), 6, 7));
    let opts = ForwardOptions::default();
    let plain = to_vec(model.forward(&batch, &opts).logits);
    let train = model.require_grad();
    let out = train.forward(&batch, &opts);
    let graph = to_vec(out.logits.clone().inner());
    let dims = out.logits.dims();
    let w = floats(vec![0.5; dims[0] * dims[1]], dims, &out.logits.device());
    let grads = (out.logits * w).sum().backward();
    let norm = AdamW::global_norm(&AdamW::collect_grads(&train.weights, &grads));
    let s = batch.seq;
    let take = |from: usize, to: usize| columns(&batch, from, to);
    let kv = |to: usize| key_valid(&batch, to);
    let mut cache: Vec<LayerCache> = Vec::new();
    let inner = model.inner();
    inner.forward_at(&take(0, s - 1), 0, &kv(s - 1), &opts, Some(&mut cache));
    let step = inner.forward_at(&take(s - 1, s), s - 1, &kv(s), &opts, Some(&mut cache));
    let (v, real) = (model.cfg.vocab_size, &batch.valid);
    let _ = (norm, to_vec(step.logits));
    vec![at_real(&plain, v, real), at_real(&graph, v, real)]
}

/// The nodes a MoE model's workload runs.
const MOE_NODES: [Node; 8] = [
    Node::RmsNorm,
    Node::ExtendQkv,
    Node::Projection,
    Node::AttnQkv,
    Node::AttnCached,
    Node::FusedExperts,
    Node::PlainExperts,
    Node::Squares,
];

#[test]
fn every_fast_node_of_a_moe_model_runs_on_this_thread() {
    let model = tiny_model(5);
    let counts = hooks::counts();
    workload(&model);
    for node in MOE_NODES {
        assert!(counts.of(node) > 0, "{node} ran");
    }
}

#[test]
fn under_force_reference_no_fast_node_of_a_moe_model_runs() {
    let model = tiny_model(5);
    let counts = hooks::counts();
    let reference = {
        let _g = hooks::force_reference();
        workload(&model)
    };
    for node in Node::ALL {
        assert_eq!(counts.of(*node), 0, "{node} did not run");
    }
    // The two paths agree to rounding (bitwise where a node's doc says so, tested beside it).
    let fast = workload(&model);
    for (i, (a, b)) in fast.iter().zip(&reference).enumerate() {
        let scale = b.iter().fold(1.0f32, |m, x| m.max(x.abs()));
        assert!(max_abs(a, b) <= 1e-4 * scale, "output {i}");
    }
}

fn dense() -> Model {
    let cfg = ModelConfig {
        ffn: FfnKind::Dense,
        ..tiny_cfg()
    };
    Model::init(cfg, 5, &flex())
}

#[test]
fn a_dense_models_swiglu_runs_the_host_form_and_the_node_and_neither_under_the_reference() {
    let model = dense();
    let counts = hooks::counts();
    workload(&model);
    assert!(
        counts.of(Node::SiluHost) > 0,
        "the host form without a graph"
    );
    assert!(counts.of(Node::SiluNode) > 0, "the node with a graph");
    let counts = hooks::counts();
    hooks::with(hooks::Switch::Reference, || workload(&model));
    assert_eq!(counts.any(), 0, "nothing fast under the reference");
}

#[test]
fn a_guard_dropped_by_a_panic_leaves_the_fast_path_on() {
    let model = tiny_model(5);
    let caught = std::panic::catch_unwind(|| {
        let _g = hooks::force_reference();
        panic!("a failing comparison");
    });
    assert!(caught.is_err());
    let counts = hooks::counts();
    workload(&model);
    assert!(
        counts.of(Node::AttnQkv) > 0,
        "the override did not outlive its guard"
    );
}
