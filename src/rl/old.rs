//! π_old: the trainer's no-graph pass over the rollout batch before the first update (its
//! log-probs, entropy, native routes and router distributions, and the reference model's
//! log-probs), a stage function the step (`step.rs`) calls; with the forward options and the
//! route extraction that every forward of the trainer shares. These forwards, and the probe's,
//! compute the prompt positions a group's G rows share once ([`Model::forward_sharing`]), bit
//! for bit the numbers of the full forward.

use super::config::{RlConfig, RoutingMode};
use super::micro::{Batch, Minibatch, concat_layers};
use super::predictor::Predictor;
use crate::model::{ForwardOptions, LayerRouting, Model, RoutingTrace, token_logp};
use crate::util::parallel::par_map;
use crate::util::tensors::{floats, ints, to_vec};
use burn::tensor::{Int, Tensor};

/// What the π_old pass computed for one micro-batch.
pub(super) struct OldPass {
    pub entropy_sum: f64,
    pub logp: Vec<f32>,
    /// Per MoE layer: native routes and router distributions.
    pub routes: Vec<Vec<u16>>,
    /// Per MoE layer: the ids this pass ran (the rollout engine's under R3).
    pub used: Vec<Vec<u16>>,
    pub probs: Vec<Vec<f32>>,
    pub logp_ref: Option<Vec<f32>>,
    /// The teacher's log-probs of the sampled tokens, when a teacher is set.
    pub logp_teacher: Option<Vec<f32>>,
    /// The teacher's logits of the response tokens `[n_tok, vocab]` (row-major), for the
    /// full-vocabulary losses only.
    pub teacher_logits: Option<Vec<f32>>,
    /// Per MoE layer of a MoE teacher: its native routes `[tokens, k_T]` and its router's mass
    /// on them per token (empty for a dense teacher or none).
    pub teacher_routes: Vec<Vec<u16>>,
    pub teacher_mass: Vec<Vec<f32>>,
    /// PR²: per MoE layer, the router inputs `[tokens, d_model]` (empty without PR²).
    pub inputs: Vec<Vec<f32>>,
    /// PR²: per MoE layer, the predicted routes the updates replay instead of `routes`.
    pub predicted: Option<Vec<Vec<u16>>>,
}

impl OldPass {
    /// The routes r2 replays: PR²'s prediction where it is on, else π_old's native routes.
    pub fn replay_routes(&self) -> &[Vec<u16>] {
        self.predicted.as_deref().unwrap_or(&self.routes)
    }
}

/// π_old of the whole rollout batch.
pub(super) struct OldPolicy {
    pub passes: Vec<OldPass>,
    pub logp: Vec<f32>,
    pub entropy: f32,
    /// Per minibatch, per MoE layer: π_old's native routes.
    pub routes: Vec<Vec<Vec<u16>>>,
    /// The teacher's log-probs of every sampled token, when a teacher is set.
    pub logp_teacher: Option<Vec<f32>>,
    /// Per MoE layer of a MoE teacher over the whole layout: its native routes and its
    /// router's top-k mass per token (empty for a dense teacher or none).
    pub teacher_routes: Vec<Vec<u16>>,
    pub teacher_mass: Vec<Vec<f32>>,
}

/// π_old: one no-graph forward of `model` per micro-batch, before the first update, in exactly
/// the layout and routing the updates will use, so minibatch 1 is exactly on-policy. The
/// `reference` model's log-probs come from the same pass, and so do the `teacher`'s, which
/// routes natively whatever the student's routing mode (no forced routes, offsets or filter).
pub(super) fn old_policy(
    model: &Model,
    reference: Option<&Model>,
    teacher: Option<&Model>,
    cfg: &RlConfig,
    b: &Batch,
    predictor: Option<&Predictor>,
) -> OldPolicy {
    // One forward per micro-batch with the same weights: the QKV projections extended once.
    let inner = model.with_extended_qkv();
    let temp = cfg.temperature;
    let n_layers = model.cfg.n_layers;
    let passes: Vec<OldPass> = par_map(b.micros.len(), |i| {
        let mb = &b.micros[i];
        let forced = (cfg.routing == RoutingMode::R3).then(|| b.rollout_routes[i].as_slice());
        let filter = cfg.replay_threshold.as_ref().map(|t| t.ratio as f32);
        let want_inputs = predictor.is_some();
        // The positions a prompt group's rows share are computed once (same bits).
        let (logits, mut traces) = inner.forward_sharing(
            &mb.batch,
            &routing(n_layers, forced, None, filter, want_inputs),
            mb.groups,
        );
        let device = logits.device();
        let rows = || ints(&mb.logit_rows, [mb.logit_rows.len()], &device);
        let used = traces.iter().map(|t| t.used.clone()).collect();
        let inputs: Vec<Vec<f32>> = traces.iter_mut().filter_map(|t| t.input.take()).collect();
        let (routes, probs) = native_and_probs(traces);
        // PR²: per MoE layer, the predicted routes and (gates = "shifted") the router-logit
        // offset h W_p of π_old's pass.
        let (predicted, offsets): (Option<Vec<Vec<u16>>>, Option<Vec<Option<Vec<f32>>>>) =
            match predictor {
                Some(p) => {
                    let (r, o) = (inputs.iter().zip(&probs).enumerate())
                        .map(|(l, (h, pr))| p.old_pass(l, h, pr))
                        .unzip();
                    (Some(r), Some(o))
                }
                None => (None, None),
            };
        // PR²: the updates replay the predicted routes, so π_old's log-probs are those of a
        // second pass on exactly those routes (the authors' implementation routes π_old's pass
        // through the prediction), its gates from the shifted logits (`gates = "shifted"`, the
        // authors') or the unshifted router's (`"native"`, minibatch 1 exactly on-policy).
        // Native routes, router distributions and inputs stay the first pass's.
        let logits = match &predicted {
            Some(pred) => pr2_pass(&inner, mb, pred, offsets, n_layers),
            None => logits,
        };
        let picked = logits.select(0, rows());
        let host = to_vec(picked.clone());
        let tp = teacher.map(|t| teacher_pass(t, mb, rows(), cfg));
        let (logp_teacher, teacher_logits) = (
            tp.as_ref().map(|t| t.logp.clone()),
            tp.as_ref().and_then(|t| t.logits.clone()),
        );
        let (teacher_routes, teacher_mass) = tp.map(|t| (t.routes, t.mass)).unwrap_or_default();
        OldPass {
            entropy_sum: entropy_sum(&host, model.cfg.vocab_size, temp),
            logp: to_vec(token_logp(picked, &mb.targets, temp)),
            routes,
            used,
            probs,
            logp_ref: reference.map(|r| {
                let (logits, _) =
                    r.forward_sharing(&mb.batch, &ForwardOptions::default(), mb.groups);
                to_vec(token_logp(logits.select(0, rows()), &mb.targets, temp))
            }),
            logp_teacher,
            teacher_logits,
            teacher_routes,
            teacher_mass,
            inputs,
            predicted,
        }
    });
    let logp: Vec<f32> = passes.iter().flat_map(|o| o.logp.iter().copied()).collect();
    let ent_sum: f64 = passes.iter().map(|o| o.entropy_sum).sum();
    let entropy = (ent_sum / logp.len().max(1) as f64) as f32;
    let routes = passes
        .chunks(b.n_micro)
        .map(|c| concat_layers(c.iter().map(|o| &o.routes), n_layers))
        .collect();
    let logp_teacher = teacher.map(|_| {
        (passes.iter())
            .flat_map(|o| o.logp_teacher.iter().flatten().copied())
            .collect()
    });
    let (teacher_routes, teacher_mass) = teacher_layers(&passes, teacher, model);
    OldPolicy {
        passes,
        logp,
        entropy,
        routes,
        logp_teacher,
        teacher_routes,
        teacher_mass,
    }
}

/// The teacher's routes and router mass over the whole rollout layout, per MoE layer, from the
/// micro-batches' passes in order (as π_old's routes are joined).
fn teacher_layers(
    passes: &[OldPass],
    teacher: Option<&Model>,
    model: &Model,
) -> (Vec<Vec<u16>>, Vec<Vec<f32>>) {
    let t_layers = passes.first().map_or(0, |p| p.teacher_routes.len());
    // The teacher's routes name the student's experts only when it has the same layers,
    // experts and k (the default teacher is the student's own cold start trained longer,
    // from the same initialisation, so expert e is the same expert in both).
    let comparable = teacher.is_some_and(|t| {
        (t.cfg.n_layers, t.cfg.n_experts, t.cfg.top_k)
            == (model.cfg.n_layers, model.cfg.n_experts, model.cfg.top_k)
            && t.cfg.is_moe()
            && model.cfg.is_moe()
    });
    let teacher_routes = if comparable {
        concat_layers(passes.iter().map(|o| &o.teacher_routes), t_layers)
    } else {
        Vec::new()
    };
    let teacher_mass = (0..t_layers)
        .map(|l| {
            (passes.iter())
                .flat_map(|o| o.teacher_mass[l].iter().copied())
                .collect()
        })
        .collect();
    (teacher_routes, teacher_mass)
}

/// PR²'s second π_old pass: the micro-batch forced onto the `predicted` routes, with each MoE
/// layer's router-logit offset h·W_p when the gates come from the shifted logits.
fn pr2_pass(
    inner: &Model,
    mb: &Minibatch,
    predicted: &[Vec<u16>],
    offsets: Option<Vec<Option<Vec<f32>>>>,
    n_layers: usize,
) -> Tensor<2> {
    let e = inner.cfg.n_experts;
    let device = inner.device();
    let offsets: Option<Vec<Tensor<2>>> = offsets.and_then(|o| {
        (o.into_iter())
            .map(|x| x.map(|x| floats_rows(x, e, &device)))
            .collect()
    });
    let opts = routing(n_layers, Some(predicted), offsets, None, false);
    inner.forward_sharing(&mb.batch, &opts, mb.groups).0
}

/// `x` as a `[len / cols, cols]` tensor.
fn floats_rows(x: Vec<f32>, cols: usize, device: &burn::tensor::Device) -> Tensor<2> {
    let rows = x.len() / cols;
    floats(x, [rows, cols], device)
}

/// What the teacher's pass gives for one micro-batch.
struct TeacherPass {
    logp: Vec<f32>,
    logits: Option<Vec<f32>>,
    /// Per MoE layer: native routes `[tokens, k]` and the router's mass on them per token.
    routes: Vec<Vec<u16>>,
    mass: Vec<Vec<f32>>,
}

/// The teacher's log-probs of a micro-batch's response tokens (`rows` of its logits), for the
/// full-vocabulary losses only those rows' logits, and for a MoE teacher its native routes and
/// its router's top-k mass per token: one natively routed forward (no forced routes, offsets or
/// filter), no graph.
fn teacher_pass(t: &Model, mb: &Minibatch, rows: Tensor<1, Int>, cfg: &RlConfig) -> TeacherPass {
    let opts = if t.cfg.is_moe() {
        routing(t.cfg.n_layers, None, None, None, false)
    } else {
        ForwardOptions::default()
    };
    let (logits, traces) = t.forward_sharing(&mb.batch, &opts, mb.groups);
    let picked = logits.select(0, rows);
    let logp = to_vec(token_logp(picked.clone(), &mb.targets, cfg.temperature));
    let logits = cfg.algorithm.needs_teacher_logits().then(|| to_vec(picked));
    let (routes, probs) = native_and_probs(traces);
    let (k, e) = (t.cfg.top_k, t.cfg.n_experts);
    let mass = (routes.iter().zip(&probs))
        .map(|(r, p)| {
            (r.chunks_exact(k).zip(p.chunks_exact(e)))
                .map(|(ids, row)| ids.iter().map(|&i| row[usize::from(i)]).sum())
                .collect()
        })
        .collect();
    TeacherPass {
        logp,
        logits,
        routes,
        mass,
    }
}

/// Forward options with router distributions for a model of `n_layers` MoE layers: `forced`
/// ids per layer (replay), router-logit `offsets` per layer (drift walk) and replay's filter
/// ratio, each optional. The trainer's forwards (π_old, updates, probes) all route through
/// these.
pub(super) fn routing<'a>(
    n_layers: usize,
    forced: Option<&'a [Vec<u16>]>,
    offsets: Option<Vec<Tensor<2>>>,
    replay_filter: Option<f32>,
    want_inputs: bool,
) -> ForwardOptions<'a> {
    let mut offsets = offsets.map(|v| v.into_iter());
    let routing = (0..n_layers)
        .map(|l| LayerRouting {
            forced: forced.map(|f| f[l].as_slice()),
            logit_offset: offsets.as_mut().and_then(|o| o.next()),
            choice_offset: None,
            replay_filter: forced.and(replay_filter),
            want_input: want_inputs,
            round_logits: false,
            repeats: None,
        })
        .collect();
    ForwardOptions {
        routing,
        want_probs: true,
        round_bf16: false,
        routes_on_device: false,
    }
}

/// Per MoE layer: native routes `[tokens, k]` and router distributions `[tokens, n_experts]`.
pub(super) type LayerRoutes = (Vec<Vec<u16>>, Vec<Vec<f32>>);

/// Per MoE layer: the native routes and the router distributions of a forward's traces.
pub(super) fn native_and_probs(traces: Vec<RoutingTrace>) -> LayerRoutes {
    traces
        .into_iter()
        .map(|t| (t.native, t.probs.unwrap_or_default()))
        .unzip()
}

/// Σ over rows of the entropy of `softmax(row / temperature)`; `rows` is `[n, vocab]`.
fn entropy_sum(rows: &[f32], vocab: usize, temperature: f32) -> f64 {
    rows.chunks_exact(vocab)
        .map(|r| {
            let s: Vec<f64> = r.iter().map(|&x| f64::from(x / temperature)).collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            let lz = z.ln() + m;
            -s.iter().map(|x| (x - lz).exp() * (x - lz)).sum::<f64>()
        })
        .sum()
}
