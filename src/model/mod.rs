//! The instrumented MoE transformer: decoder-only, RoPE attention, RMSNorm, MoE or dense FFN.

pub mod attention;
pub mod config;
pub mod device_routes;
mod expert_groups;
pub mod moe;
pub mod routes;
pub mod shared;
pub mod weights;

pub use crate::util::bf16::{bf16_round, round_bf16};
pub use attention::LayerCache;
pub use config::{ExpertPath, FfnKind, ModelConfig, Preset, RouterKind};
pub use moe::{LayerRouting, NO_ROUTE, RoutingTrace, native_topk};
pub use weights::{ParamGroup, Weights};

use crate::kernels::log_softmax;
use attention::{Mask, Rope, attention};
use burn::tensor::{Device, Tensor};
use weights::FfnWeights;

const RMS_EPS: f32 = 1e-5;

/// A batch of token rows on the host: `[batch, seq]` row-major, `valid = false` on padding.
/// Prompts are left-padded and responses right-padded, so every row shares one layout.
#[derive(Clone, Debug, PartialEq)]
pub struct SeqBatch {
    pub batch: usize,
    pub seq: usize,
    pub tokens: Vec<u32>,
    pub valid: Vec<bool>,
}

impl SeqBatch {
    pub fn n_tokens(&self) -> usize {
        self.batch * self.seq
    }
}

/// Groups of `group` consecutive batch rows whose first `prefix` positions hold the same
/// tokens: a prompt group (G responses to one prompt, left-padded to the batch's prompt width).
#[derive(Clone, Copy, Debug)]
pub struct Shared {
    pub group: usize,
    pub prefix: usize,
}

/// Options of one forward.
#[derive(Clone, Debug, Default)]
pub struct ForwardOptions<'a> {
    /// Per layer routing controls (forced ids, logit offsets); empty = all native.
    pub routing: Vec<LayerRouting<'a>>,
    /// Return the full router distribution in each trace.
    pub want_probs: bool,
    /// Round the residual stream to bfloat16 precision after every sublayer (a rollout engine
    /// with lower-precision numerics; never used by the trainer).
    pub round_bf16: bool,
    /// Keep every MoE layer's routes on the device ([`device_routes`]): no traces, no loss
    /// terms, the ids in [`ForwardOutput::device_routes`]. For a generation's forwards off the
    /// CPU backend; every layer's routing must allow it ([`device_routes::allows`]).
    pub routes_on_device: bool,
}

impl<'a> ForwardOptions<'a> {
    /// Run exactly the given expert ids, `routes[layer]` being `[tokens, k]` (Routing Replay
    /// of a recorded trace); no logit offsets, no router distributions.
    pub fn replay(routes: &'a [Vec<u16>]) -> Self {
        ForwardOptions {
            routing: routes
                .iter()
                .map(|r| LayerRouting {
                    forced: Some(r),
                    ..LayerRouting::default()
                })
                .collect(),
            ..ForwardOptions::default()
        }
    }
}

pub struct ForwardOutput {
    /// `[batch·seq, vocab]`.
    pub logits: Tensor<2>,
    /// One trace per MoE layer (empty for the dense model).
    pub traces: Vec<crate::model::RoutingTrace>,
    /// Mean over layers of the load-balancing loss (`[1]`).
    pub aux_loss: Tensor<1>,
    /// Its pieces, one per MoE layer (see [`aux_loss_of_parts`]).
    pub load: Vec<moe::LoadTerms>,
    /// Mean over layers of the router z-loss (`[1]`).
    pub z_loss: Tensor<1>,
    /// With [`ForwardOptions::routes_on_device`], each MoE layer's used ids `[tokens, k]` (and
    /// no traces); else empty.
    pub device_routes: Vec<Tensor<2, burn::tensor::Int>>,
}

/// Weights plus the constant tables a forward needs. Cheap to clone (tensor handles).
#[derive(Clone, Debug)]
pub struct Model {
    pub cfg: ModelConfig,
    pub weights: Weights,
    rope: Rope,
    /// Each block's extended QKV projection ([`Rope::extend_qkv`]) computed once, for a model
    /// without a graph that runs many forwards with the same weights (generation: a prompt's
    /// forward and one per decoded position). `None`: each forward extends the projection
    /// itself. Only [`Model::with_extended_qkv`] sets it, on a copy whose weights its holder
    /// never changes (a generation's or a π_old pass's own copy, the frozen reference model);
    /// [`Model::inner`] and [`Model::require_grad`] drop it.
    qkv_ext: Option<std::sync::Arc<Vec<Tensor<2>>>>,
}

/// `x / sqrt(mean(x²) + ε) · gain`, row by row ([`crate::kernels::rms_norm`]).
pub fn rms_norm(x: Tensor<2>, gain: &Tensor<2>) -> Tensor<2> {
    crate::kernels::rms_norm(x, gain, RMS_EPS)
}

impl Model {
    pub fn new(cfg: ModelConfig, weights: Weights, device: &Device) -> Self {
        let rope = attention::rope(&cfg, device);
        Model {
            cfg,
            weights,
            rope,
            qkv_ext: None,
        }
    }

    /// Fresh model from a seed.
    pub fn init(cfg: ModelConfig, seed: u64, device: &Device) -> Self {
        let w = Weights::init(&cfg, seed, device);
        Model::new(cfg, w, device)
    }

    pub fn device(&self) -> Device {
        self.weights.embed.device()
    }

    /// The same model with gradient-recording leaves.
    pub fn require_grad(&self) -> Self {
        Model {
            cfg: self.cfg.clone(),
            weights: self.weights.clone().require_grad(),
            rope: self.rope.clone(),
            qkv_ext: None,
        }
    }

    /// The same model without autodiff (rollout, probes, evaluation).
    pub fn inner(&self) -> Self {
        Model {
            cfg: self.cfg.clone(),
            weights: self.weights.clone().inner(),
            rope: self.rope.clone(),
            qkv_ext: None,
        }
    }

    /// This model (without a graph) with every block's extended QKV projection computed now,
    /// for a caller that runs many forwards with these weights and then drops the copy. Each
    /// forward would compute the same extension ([`Rope::extend_qkv`]) with the same
    /// operations, so every number is the same.
    pub fn with_extended_qkv(&self) -> Self {
        let ext = (self.weights.blocks.iter())
            .map(|blk| crate::kernels::extend_qkv(&self.rope, blk.wqkv.clone()))
            .collect();
        Model {
            qkv_ext: Some(std::sync::Arc::new(ext)),
            ..self.inner()
        }
    }

    /// Full forward over `batch`.
    pub fn forward(&self, batch: &SeqBatch, opts: &ForwardOptions<'_>) -> ForwardOutput {
        self.forward_at(batch, 0, &batch.valid, opts, None)
    }

    /// Forward over `batch` whose first position is `pos0`, appending to `cache` (one
    /// [`LayerCache`] per layer) when given. `key_valid` covers all `pos0 + seq` positions.
    pub fn forward_at(
        &self,
        batch: &SeqBatch,
        pos0: usize,
        key_valid: &[bool],
        opts: &ForwardOptions<'_>,
        cache: Option<&mut Vec<LayerCache>>,
    ) -> ForwardOutput {
        let device = self.device();
        let r = self.blocks(batch, (pos0, key_valid), opts, cache, false);
        let x = r.x.expect("a model has at least one block");
        let x = rms_norm(x, &self.weights.final_norm);
        let logits = x.matmul(self.weights.head.clone());
        ForwardOutput {
            logits,
            traces: r.traces,
            aux_loss: layer_mean(r.aux, &device),
            z_loss: layer_mean(r.z, &device),
            load: r.load,
            device_routes: r.device_routes,
        }
    }

    /// The routing traces of [`Model::forward`] over `batch` — the same ids and router
    /// distributions, bit for bit — computed only as far as they need: the blocks up to the last
    /// MoE layer's router, without that layer's experts, the later blocks or the head. Empty for
    /// the dense model. What a drift probe reads.
    pub fn route_traces(&self, batch: &SeqBatch, opts: &ForwardOptions<'_>) -> Vec<RoutingTrace> {
        self.blocks(batch, (0, &batch.valid), opts, None, true)
            .traces
    }

    /// [`Model::forward`]'s logits and traces, with the positions that groups of rows share
    /// computed once where [`shared`] applies (the same numbers, bit for bit), else by the
    /// full forward.
    pub fn forward_sharing(
        &self,
        batch: &SeqBatch,
        opts: &ForwardOptions<'_>,
        sh: Shared,
    ) -> (Tensor<2>, Vec<RoutingTrace>) {
        if let Some(out) = self.forward_shared(batch, opts, sh) {
            return out;
        }
        let o = self.forward(batch, opts);
        (o.logits, o.traces)
    }

    /// [`Model::route_traces`], sharing as [`Model::forward_sharing`] does.
    pub fn route_traces_sharing(
        &self,
        batch: &SeqBatch,
        opts: &ForwardOptions<'_>,
        sh: Shared,
    ) -> Vec<RoutingTrace> {
        if let Some(t) = self.route_traces_shared(batch, opts, sh) {
            return t;
        }
        self.route_traces(batch, opts)
    }

    /// The blocks of a forward over every position of `batch`: the residual stream after the
    /// last block run, and each MoE layer's trace and loss terms. With `routes_only`, stop at
    /// the last MoE layer's router.
    fn blocks(
        &self,
        batch: &SeqBatch,
        (pos0, key_valid): (usize, &[bool]),
        opts: &ForwardOptions<'_>,
        mut cache: Option<&mut Vec<LayerCache>>,
        routes_only: bool,
    ) -> Blocks {
        let cfg = &self.cfg;
        let (b, s) = (batch.batch, batch.seq);
        assert!(
            pos0 + s <= cfg.max_seq_len,
            "sequence of {} exceeds max_seq_len {}",
            pos0 + s,
            cfg.max_seq_len
        );
        let mask = Mask::new(key_valid, b, pos0, s, &self.device());
        if let Some(c) = cache.as_deref_mut() {
            c.resize_with(cfg.n_layers, LayerCache::default);
        }
        let pass = Pass {
            tokens: &batch.tokens,
            valid: &batch.valid,
            attend: &mut |l, blk, h| {
                let layer_cache = cache.as_deref_mut().map(|c| &mut c[l]);
                let ext = (&self.rope, self.qkv_ext.as_ref().map(|e| &e[l]));
                Some(attention(blk, cfg, ext, h, (b, s), &mask, layer_cache))
            },
            routing: &|l| opts.routing.get(l).cloned().unwrap_or_default(),
        };
        self.run_blocks(pass, opts, routes_only)
            .expect("a full forward's attention always applies")
    }

    /// The block loop every forward runs, full or over compact rows (what differs is in
    /// `pass`): per block, RMS norm, attention, the residual; RMS norm, the MoE or dense FFN, the
    /// residual (rounded to bf16 after each sublayer where the options ask). `None` where
    /// `pass`'s attention does not apply (a compact forward then falls back to the full one).
    fn run_blocks(
        &self,
        pass: Pass<'_, '_>,
        opts: &ForwardOptions<'_>,
        routes_only: bool,
    ) -> Option<Blocks> {
        let cfg = &self.cfg;
        let round = |x: Tensor<2>| if opts.round_bf16 { round_bf16(x) } else { x };
        let moe = |f: &FfnWeights| matches!(f, FfnWeights::Moe(_));
        let n_blocks = match routes_only {
            true => (self.weights.blocks.iter())
                .rposition(|blk| moe(&blk.ffn))
                .map_or(0, |l| l + 1),
            false => self.weights.blocks.len(),
        };
        let mut out = Blocks::default();
        if n_blocks == 0 {
            return Some(out);
        }
        let ids: Vec<usize> = pass.tokens.iter().map(|&t| t as usize).collect();
        let ids = crate::util::tensors::ints(&ids, [ids.len()], &self.device());
        let mut x = round(self.weights.embed.clone().select(0, ids)); // [rows, D]
        for (l, blk) in self.weights.blocks.iter().enumerate().take(n_blocks) {
            let h = rms_norm(x.clone(), &blk.attn_norm);
            x = round(x + (pass.attend)(l, blk, h)?);
            let h = rms_norm(x.clone(), &blk.ffn_norm);
            let y = match &blk.ffn {
                FfnWeights::Moe(mw) if routes_only && l + 1 == n_blocks => {
                    let t = moe::moe_routes(mw, cfg, h, (pass.routing)(l), opts.want_probs);
                    out.traces.push(t);
                    return Some(out);
                }
                FfnWeights::Moe(mw) if opts.routes_on_device => {
                    let routing = (pass.routing)(l);
                    assert!(
                        device_routes::allows(&routing),
                        "routes on the device: {routing:?}"
                    );
                    let (y, ids) =
                        device_routes::moe_forward_on_device(mw, cfg, h, pass.valid, &routing);
                    out.device_routes.push(ids);
                    y
                }
                FfnWeights::Moe(mw) => {
                    let routing = (pass.routing)(l);
                    let o = moe::moe_forward(mw, cfg, h, pass.valid, routing, opts.want_probs);
                    out.traces.push(o.trace);
                    out.aux.push(o.aux_loss);
                    out.z.push(o.z_loss);
                    out.load.push(o.load);
                    o.out
                }
                FfnWeights::Dense(sw) => moe::swiglu(sw, h),
            };
            x = round(x + y);
        }
        out.x = Some(x);
        Some(out)
    }
}

/// What a forward's rows are, for [`Model::run_blocks`]: their tokens and validity, their
/// attention per block (normalised input to output after `W_o`; `None` where it does not
/// apply), and their routing per layer.
struct Pass<'p, 'r> {
    tokens: &'p [u32],
    valid: &'p [bool],
    #[allow(clippy::type_complexity)]
    attend: &'p mut dyn FnMut(usize, &weights::BlockWeights, Tensor<2>) -> Option<Tensor<2>>,
    routing: &'p dyn Fn(usize) -> LayerRouting<'r>,
}

/// What [`Model::blocks`] ran: the residual stream (none if no block ran) and, per MoE layer,
/// the trace and the loss terms.
#[derive(Default)]
struct Blocks {
    x: Option<Tensor<2>>,
    traces: Vec<RoutingTrace>,
    aux: Vec<Tensor<1>>,
    z: Vec<Tensor<1>>,
    load: Vec<moe::LoadTerms>,
    device_routes: Vec<Tensor<2, burn::tensor::Int>>,
}

/// Mean of per-layer scalars (`[1]` each); zero without layers.
fn layer_mean(v: Vec<Tensor<1>>, device: &Device) -> Tensor<1> {
    if v.is_empty() {
        Tensor::zeros([1], device)
    } else {
        let n = v.len() as f32;
        Tensor::cat(v, 0).sum() / n
    }
}

/// The load-balancing losses of the parts of a batch processed in parts (micro-batches):
/// `parts[j]` is part `j`'s [`ForwardOutput::load`]. The routed-slot fractions `f_e` are those
/// of the whole batch, so the returned losses add up to the whole batch's `aux_loss` (up to
/// rounding), and a single part gets exactly its own `aux_loss`.
pub fn aux_loss_of_parts(
    parts: &[&[moe::LoadTerms]],
    top_k: usize,
    device: &Device,
) -> Vec<Tensor<1>> {
    let n_layers = parts.first().map_or(0, |p| p.len());
    let whole: Vec<(Vec<f32>, usize)> = (0..n_layers)
        .map(|l| {
            let mut counts = vec![0f32; parts[0][l].counts.len()];
            let mut n = 0;
            for p in parts {
                counts
                    .iter_mut()
                    .zip(&p[l].counts)
                    .for_each(|(a, b)| *a += b);
                n += p[l].n_active;
            }
            let denom = (n * top_k) as f32;
            (counts.into_iter().map(|c| c / denom).collect(), n)
        })
        .collect();
    parts
        .iter()
        .map(|p| {
            let per_layer: Vec<Tensor<1>> = p
                .iter()
                .zip(&whole)
                .map(|(t, (f, n))| {
                    if *n == 0 {
                        Tensor::zeros([1], device)
                    } else {
                        moe::load_balance_part(t.p_sum.clone(), f, *n)
                    }
                })
                .collect();
            layer_mean(per_layer, device)
        })
        .collect()
}

/// Log-probabilities of `targets` under `softmax(logits / temperature)`: `[rows]`.
pub fn token_logp(logits: Tensor<2>, targets: &[usize], temperature: f32) -> Tensor<1> {
    let [n, _v] = logits.dims();
    let device = logits.device();
    let lp = log_softmax(logits / temperature, 1);
    lp.gather(1, crate::util::tensors::ints(targets, [n, 1], &device))
        .reshape([n])
}
