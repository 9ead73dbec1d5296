//! MoE feed-forward: router (softmax, or sigmoid with a selection bias) → native top-k → gates →
//! sparse dispatch to SwiGLU experts (on the CPU backend through the fused expert node of
//! [`crate::kernels::fused_experts`], bitwise the same numbers).
//!
//! The router always computes its native top-k (for the trace and for drift), even when the
//! experts to run are forced (Routing Replay). Forced or not, the gates are the live router
//! probabilities gathered at the ids that run, renormalised over the k when `norm_topk`, so the
//! router keeps receiving gradient under replay.

use super::config::{ModelConfig, RouterKind};
use super::routes::used_ids;
pub use super::routes::{NO_ROUTE, native_topk};
use super::weights::{MoeWeights, SwiGlu};
use crate::kernels::softmax;
use crate::util::tensors::{floats, ints, to_vec};
use burn::tensor::{IndexingUpdateOp, Tensor};

/// What one MoE layer routed, on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct RoutingTrace {
    pub n_tokens: usize,
    pub k: usize,
    /// Native top-k expert ids, `[tokens, k]` row-major, by descending probability (softmax) or
    /// affinity plus bias (sigmoid_bias).
    pub native: Vec<u16>,
    /// The ids that actually ran, `[tokens, k]` (equal to `native` unless forced).
    pub used: Vec<u16>,
    /// Full router distribution `[tokens, n_experts]`, when asked for.
    pub probs: Option<Vec<f32>>,
    /// Replayed slots (`k` per token with a forced row), and how many of them the replay
    /// filter replaced with a live choice (0 without a filter).
    pub replay_slots: usize,
    pub replay_replaced: usize,
    /// The router's input `[tokens, d_model]`, when asked for (PR²'s predictors read it).
    pub input: Option<Vec<f32>>,
}

/// Per-layer routing controls for one forward.
#[derive(Clone, Debug, Default)]
pub struct LayerRouting<'a> {
    /// Expert ids to run, `[tokens, k]`; a token whose slots are all [`NO_ROUTE`] uses its native ids.
    pub forced: Option<&'a [u16]>,
    /// Added to the router logits before the softmax (or the sigmoid), `[tokens, n_experts]`
    /// (drift injection, rollout router noise).
    pub logit_offset: Option<Tensor<2>>,
    /// Added to the router logits for the top-k *choice* only, `[tokens, n_experts]` on the
    /// host: the gates stay those of the live router (rollout `route_flip` mismatch).
    pub choice_offset: Option<Vec<f32>>,
    /// Replay's filter ratio (prime-rl PR #2703, `router_replay_score_threshold_ratio`): a
    /// forced expert whose live router score is below this × the weakest score of the live
    /// top-k is replaced, in order, by the live top-k's experts the row does not hold yet.
    /// `None` (or 0) replays every forced expert.
    pub replay_filter: Option<f32>,
    /// Return the router's input in the trace.
    pub want_input: bool,
    /// Round the router logits to bf16 before the scores and the top-k (a rollout engine's
    /// `router_precision.logits = "bf16"`; never the trainer).
    pub round_logits: bool,
    /// Per token, how many tokens of a larger batch it stands for (a forward that computes rows
    /// shared by several batch rows once, `super::shared`): the fused path's expert products
    /// keep that batch's gemm path (the sharing forwards require the fused path).
    pub repeats: Option<&'a [usize]>,
}

pub struct MoeOutput {
    /// `[tokens, d_model]`.
    pub out: Tensor<2>,
    pub trace: RoutingTrace,
    /// Switch load-balancing loss `n_experts · Σ_e f_e · P_e` (scalar, `[1]`).
    pub aux_loss: Tensor<1>,
    /// The pieces of `aux_loss`, for batches processed in parts ([`load_balance_part`]).
    pub load: LoadTerms,
    /// Router z-loss `mean(logsumexp(z)²)` (scalar, `[1]`).
    pub z_loss: Tensor<1>,
}

/// The pieces of one layer's load-balancing loss over a batch: a batch split into parts (micro-
/// batches) adds up its parts' `counts` and `n_active` to get the whole batch's `f_e`, then each
/// part contributes [`load_balance_part`] with its own `p_sum`.
#[derive(Clone, Debug)]
pub struct LoadTerms {
    /// Σ over active tokens of the live router probabilities, `[1, n_experts]` (with graph).
    pub p_sum: Tensor<2>,
    /// Native routed slots per expert over active tokens.
    pub counts: Vec<f32>,
    pub n_active: usize,
}

/// `n_experts · Σ_e f_e · P_e` restricted to one part of a batch: `P_e` sums the part's
/// probabilities (`p_sum`) over the whole batch's `n_active` tokens, `f` is the whole batch's
/// routed-slot fraction. The parts' values add up to the whole batch's loss; for a single part
/// this is exactly the loss [`moe_forward`] returns.
pub fn load_balance_part(p_sum: Tensor<2>, f: &[f32], n_active: usize) -> Tensor<1> {
    let e_n = f.len();
    let device = p_sum.device();
    let p_mean = p_sum / n_active as f32; // [1, E]
    (p_mean * floats(f.to_vec(), [1, e_n], &device)).sum() * e_n as f32
}

/// One SwiGLU on `x` `[n, d_model]` → `[n, d_model]`.
pub fn swiglu(w: &SwiGlu, x: Tensor<2>) -> Tensor<2> {
    let a1 = x.clone().matmul(w.w1.clone()); // [n, d_ff]
    let a3 = x.matmul(w.w3.clone()); // [n, d_ff]
    silu_mul(a1, a3).matmul(w.w2.clone())
}

/// `silu(a1) ⊙ a3` ([`crate::kernels::silu_mul`]: built so that a backward needs no `exp`).
pub fn silu_mul(a1: Tensor<2>, a3: Tensor<2>) -> Tensor<2> {
    crate::kernels::silu_mul(a1, a3)
}

/// The router half of a MoE layer: its logits, what the gates are gathered from, the router
/// distribution (on the device and on the host), the native and the used ids.
struct Routed {
    /// Tokens and k: the trace's shape.
    shape: (usize, usize),
    logits: Tensor<2>,
    gate_src: Tensor<2>,
    probs: Tensor<2>,
    probs_host: Vec<f32>,
    native: Vec<u16>,
    used: Vec<u16>,
    replay_slots: usize,
    replay_replaced: usize,
    input: Option<Vec<f32>>,
}

impl Routed {
    /// The layer's trace (the distribution kept when `want_probs`).
    fn trace(&mut self, want_probs: bool) -> RoutingTrace {
        let (n_tokens, k) = self.shape;
        RoutingTrace {
            n_tokens,
            k,
            native: std::mem::take(&mut self.native),
            used: std::mem::take(&mut self.used),
            probs: want_probs.then(|| std::mem::take(&mut self.probs_host)),
            replay_slots: self.replay_slots,
            replay_replaced: self.replay_replaced,
            input: self.input.take(),
        }
    }
}

/// The router on `x` `[tokens, d_model]`: logits (plus the routing's offset), scores, native
/// top-k and the ids to run.
fn route(w: &MoeWeights, cfg: &ModelConfig, x: &Tensor<2>, routing: &LayerRouting<'_>) -> Routed {
    let [t, _d] = x.dims();
    let (e_n, k) = (cfg.n_experts, cfg.top_k);
    let input = routing.want_input.then(|| to_vec(x.clone().inner()));
    let logits = router_logits(w, x, routing);
    let (gate_src, probs) = router_scores(cfg, logits.clone());
    let probs_host = to_vec(probs.clone().inner());
    let native = native_choice(w, cfg, &logits, &gate_src, &probs_host, routing);
    let filter = routing.replay_filter.filter(|&r| r > 0.0);
    let (used, replay_slots, replay_replaced) = used_ids(
        &native,
        routing.forced,
        (t, k, e_n),
        filter.map(|r| (r, probs_host.as_slice())),
    );
    Routed {
        shape: (t, k),
        logits,
        gate_src,
        probs,
        probs_host,
        native,
        used,
        replay_slots,
        replay_replaced,
        input,
    }
}

/// The trace of a MoE layer's router on `x` without running its experts (the same ids and
/// distribution as [`moe_forward`]'s trace): what a probe that reads routes needs.
pub fn moe_routes(
    w: &MoeWeights,
    cfg: &ModelConfig,
    x: Tensor<2>,
    routing: LayerRouting<'_>,
    want_probs: bool,
) -> RoutingTrace {
    route(w, cfg, &x, &routing).trace(want_probs)
}

/// MoE forward on `x` `[tokens, d_model]`. Only `active` tokens (not padding) are dispatched
/// and counted in the auxiliary losses; inactive tokens get a zero FFN output.
pub fn moe_forward(
    w: &MoeWeights,
    cfg: &ModelConfig,
    x: Tensor<2>,
    active: &[bool],
    routing: LayerRouting<'_>,
    want_probs: bool,
) -> MoeOutput {
    let [t, _d] = x.dims();
    assert_eq!(
        active.len(),
        t,
        "active mask has {} entries for {t} tokens",
        active.len()
    );
    let device = x.device();
    let mut r = route(w, cfg, &x, &routing);
    let mut out = dispatch(
        w,
        cfg,
        x.clone(),
        &r.gate_src,
        (&r.used, routing.repeats),
        active,
    );
    if let Some(shared) = &w.shared {
        let mask = active_mask(active, &device);
        out = out + swiglu(shared, x) * mask;
    }
    let (aux_loss, z_loss, load) =
        load_terms(r.logits.clone(), &r.probs, &r.native, active, cfg.top_k);
    MoeOutput {
        out,
        trace: r.trace(want_probs),
        aux_loss,
        load,
        z_loss,
    }
}

/// A layer's router logits on `x` `[T, d_model]`, `[T, E]`: plus the routing's offset, rounded
/// to bf16 where it asks.
pub(super) fn router_logits(
    w: &MoeWeights,
    x: &Tensor<2>,
    routing: &LayerRouting<'_>,
) -> Tensor<2> {
    let mut logits = x.clone().matmul(w.router.clone());
    if let Some(off) = routing.logit_offset.clone() {
        logits = logits + off;
    }
    if routing.round_logits {
        logits = crate::util::bf16::round_bf16(logits);
    }
    logits
}

/// What the gates are gathered from and the router distribution `[T, E]` of a layer: the
/// softmax probabilities twice for the softmax router; for `sigmoid_bias` the sigmoid
/// affinities `s` and their normalisation `s / Σ_e s` (the distribution the load-balancing
/// loss, the traces and the drift metrics use, as DeepSeek-V3's balance loss does).
pub(super) fn router_scores(cfg: &ModelConfig, logits: Tensor<2>) -> (Tensor<2>, Tensor<2>) {
    match cfg.router {
        RouterKind::Softmax => {
            let p = softmax(logits, 1);
            (p.clone(), p)
        }
        RouterKind::SigmoidBias => {
            let s = burn::tensor::activation::sigmoid(logits);
            (s.clone(), s.clone() / s.sum_dim(1))
        }
    }
}

/// The native top-k: on the probabilities (softmax), or on `s + b` (sigmoid_bias); a
/// `choice_offset` is added to the logits for the choice alone.
fn native_choice(
    w: &MoeWeights,
    cfg: &ModelConfig,
    logits: &Tensor<2>,
    gate_src: &Tensor<2>,
    probs_host: &[f32],
    routing: &LayerRouting<'_>,
) -> Vec<u16> {
    let (e_n, k) = (cfg.n_experts, cfg.top_k);
    let shifted = || -> Vec<f32> {
        let z = to_vec(logits.clone().inner());
        match &routing.choice_offset {
            Some(off) => z.iter().zip(off).map(|(a, b)| a + b).collect(),
            None => z,
        }
    };
    let scores: Vec<f32> = match cfg.router {
        RouterKind::Softmax if routing.choice_offset.is_none() => {
            return native_topk(probs_host, e_n, k);
        }
        RouterKind::Softmax => shifted(),
        RouterKind::SigmoidBias => {
            assert_eq!(
                w.bias.len(),
                e_n,
                "a sigmoid_bias layer needs one bias per expert"
            );
            let s = if routing.choice_offset.is_some() {
                shifted()
                    .iter()
                    .map(|&z| 1.0 / (1.0 + (-z).exp()))
                    .collect()
            } else {
                to_vec(gate_src.clone().inner())
            };
            s.chunks_exact(e_n)
                .flat_map(|row| row.iter().zip(&w.bias).map(|(a, b)| a + b))
                .collect()
        }
    };
    native_topk(&scores, e_n, k)
}

/// Sparse dispatch: per-expert token lists over the active tokens, each expert's SwiGLU on its
/// tokens times their gates (the live router scores at the `used` ids — probabilities, or
/// sigmoid affinities — renormalised over the k when `norm_topk`), added back in place.
/// Inactive tokens get zeros.
fn dispatch(
    w: &MoeWeights,
    cfg: &ModelConfig,
    x: Tensor<2>,
    probs: &Tensor<2>,
    (used, repeats): (&[u16], Option<&[usize]>),
    active: &[bool],
) -> Tensor<2> {
    let [t, _d] = x.dims();
    let (e_n, k) = (cfg.n_experts, cfg.top_k);
    let device = x.device();
    let mut by_expert: Vec<Vec<(usize, usize)>> = vec![Vec::new(); e_n];
    for tok in (0..t).filter(|&i| active[i]) {
        for j in 0..k {
            by_expert[used[tok * k + j] as usize].push((tok, tok * k + j));
        }
    }
    let perm_tok: Vec<usize> = by_expert.iter().flatten().map(|&(tok, _)| tok).collect();
    let n_routed = perm_tok.len();
    // The zeros the products are added into; the fused path writes its own output.
    let zeros = || Tensor::<2>::zeros([t, cfg.d_model], &device);
    if n_routed == 0 {
        return zeros();
    }
    let used_idx: Vec<usize> = used.iter().map(|&e| e as usize).collect();
    let mut gates = probs.clone().gather(1, ints(&used_idx, [t, k], &device)); // [T, k]
    if cfg.norm_topk {
        gates = gates.clone() / gates.sum_dim(1);
    }
    if cfg.expert_path == super::config::ExpertPath::Fused {
        let ws: Vec<[Tensor<2>; 3]> = (w.experts.iter())
            .map(|e| [e.w1.clone(), e.w3.clone(), e.w2.clone()])
            .collect();
        let (x, g) = (x.clone(), gates.clone());
        if let Some(y) = crate::kernels::fused_experts(x, g, &ws, (used, repeats), active) {
            return y;
        }
    }
    let gates = gates.reshape([t * k, 1]);
    let out = zeros();
    if !crate::util::tensors::is_host(&device) {
        return super::expert_groups::padded_group_products(w, x, gates, &by_expert, out, &device);
    }
    let mut ys = Vec::new();
    for list in &by_expert {
        if list.is_empty() {
            ys.push(None);
            continue;
        }
        let n = list.len();
        let toks: Vec<usize> = list.iter().map(|&(tok, _)| tok).collect();
        let slots: Vec<usize> = list.iter().map(|&(_, s)| s).collect();
        let xe = x.clone().select(0, ints(&toks, [n], &device)); // [n_e, D]
        let ge = gates.clone().select(0, ints(&slots, [n], &device)); // [n_e, 1]
        ys.push(Some((xe, ge)));
    }
    let ys: Vec<Tensor<2>> = ys
        .into_iter()
        .zip(&w.experts)
        .filter_map(|(xg, ew)| xg.map(|(xe, ge)| swiglu(ew, xe) * ge))
        .collect();
    let y = Tensor::cat(ys, 0); // [N, D], grouped by expert
    out.select_assign(
        0,
        ints(&perm_tok, [n_routed], &device),
        y,
        IndexingUpdateOp::Add,
    )
}

/// Load balance and z-loss over active tokens: f_e from the native choice (constant), P_e from
/// the live probabilities.
fn load_terms(
    logits: Tensor<2>,
    probs: &Tensor<2>,
    native: &[u16],
    active: &[bool],
    k: usize,
) -> (Tensor<1>, Tensor<1>, LoadTerms) {
    let [t, e_n] = probs.dims();
    let device = probs.device();
    let n_active = active.iter().filter(|&&a| a).count();
    let mut counts = vec![0f32; e_n];
    for tok in (0..t).filter(|&i| active[i]) {
        for j in 0..k {
            counts[native[tok * k + j] as usize] += 1.0;
        }
    }
    let (aux_loss, z_loss, p_sum) = if n_active == 0 {
        (
            Tensor::zeros([1], &device),
            Tensor::zeros([1], &device),
            Tensor::zeros([1, e_n], &device),
        )
    } else {
        let denom = (n_active * k) as f32;
        let f: Vec<f32> = counts.iter().map(|v| v / denom).collect();
        let mask = active_mask(active, &device); // [T, 1]
        let p_sum = (probs.clone() * mask.clone()).sum_dim(0); // [1, E]
        let aux = load_balance_part(p_sum.clone(), &f, n_active);
        let m = logits.clone().detach().max_dim(1); // [T, 1]
        let lse = (logits - m.clone()).exp().sum_dim(1).log() + m; // [T, 1]
        let z = (lse.powi_scalar(2) * mask).sum() / n_active as f32;
        (aux, z, p_sum)
    };
    let load = LoadTerms {
        p_sum,
        counts,
        n_active,
    };
    (aux_loss, z_loss, load)
}

/// `[tokens, 1]` float mask: 1 for active tokens.
pub fn active_mask(active: &[bool], device: &burn::tensor::Device) -> Tensor<2> {
    let v: Vec<f32> = active.iter().map(|&a| if a { 1.0 } else { 0.0 }).collect();
    floats(v, [active.len(), 1], device)
}
