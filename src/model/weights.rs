//! The transformer's parameters as plain tensors, their initialisation, a visitor over them, and
//! checkpoint (de)serialisation with a checksum.
//!
//! Every parameter is a `Tensor<2>` (norm gains are `[1, d]`), so one visitor, one optimizer and
//! one file format cover the whole model. Initialisation draws from our own seeded RNG, not the
//! backend's, so the same seed gives the same weights on every device.

use super::config::{FfnKind, ModelConfig};
use crate::util::tensors::{floats, to_vec};
use anyhow::{Context, Result, bail};
use burn::tensor::{Device, Tensor};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use rand_distr::{Distribution, Normal};

/// Which optimizer group a parameter belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamGroup {
    /// Router weights: own learning-rate multiplier (`router_lr_mult`).
    Router,
    /// Matrices other than the router: weight decay applies.
    Matrix,
    /// Norm gains and embeddings: no weight decay.
    NoDecay,
}

/// One SwiGLU: `(silu(x·w1) ⊙ x·w3) · w2`; `w1`, `w3` `[d_model, d_ff]`, `w2` `[d_ff, d_model]`.
#[derive(Clone, Debug)]
pub struct SwiGlu {
    pub w1: Tensor<2>,
    pub w3: Tensor<2>,
    pub w2: Tensor<2>,
}

/// MoE FFN parameters.
#[derive(Clone, Debug)]
pub struct MoeWeights {
    /// `[d_model, n_experts]`, no bias.
    pub router: Tensor<2>,
    pub experts: Vec<SwiGlu>,
    pub shared: Option<SwiGlu>,
    /// The `sigmoid_bias` router's per-expert selection bias, `[n_experts]` on the host (empty
    /// for the softmax router). Part of the policy, so every copy of the weights carries the
    /// bias of its moment; never trained by gradient, so the parameter visitor skips it.
    pub bias: Vec<f32>,
}

impl MoeWeights {
    /// `b_e += γ · sign(mean − c_e)` over the layer's routed slots per expert `counts` (nothing
    /// for an expert exactly at the mean, nor for a softmax layer, which has no bias).
    pub fn nudge_bias(&mut self, counts: &[f32], speed: f64) {
        let mean = counts.iter().sum::<f32>() / counts.len().max(1) as f32;
        for (b, &x) in self.bias.iter_mut().zip(counts) {
            let dir = if x < mean {
                1.0
            } else if x > mean {
                -1.0
            } else {
                0.0
            };
            *b += (speed * dir) as f32;
        }
    }
}

// One value per block, always matched by reference: boxing the larger variant buys nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum FfnWeights {
    Moe(MoeWeights),
    Dense(SwiGlu),
}

#[derive(Clone, Debug)]
pub struct BlockWeights {
    pub attn_norm: Tensor<2>,
    /// `[d_model, 3·d_model]`: q | k | v.
    pub wqkv: Tensor<2>,
    /// `[d_model, d_model]`.
    pub wo: Tensor<2>,
    pub ffn_norm: Tensor<2>,
    pub ffn: FfnWeights,
}

#[derive(Clone, Debug)]
pub struct Weights {
    /// `[vocab, d_model]`.
    pub embed: Tensor<2>,
    pub blocks: Vec<BlockWeights>,
    pub final_norm: Tensor<2>,
    /// `[d_model, vocab]`, untied.
    pub head: Tensor<2>,
}

struct Init {
    rng: Xoshiro256PlusPlus,
    device: Device,
}

impl Init {
    fn normal(&mut self, rows: usize, cols: usize, std: f32) -> Tensor<2> {
        let dist = Normal::new(0.0f32, std).expect("valid std");
        let v: Vec<f32> = (0..rows * cols)
            .map(|_| dist.sample(&mut self.rng))
            .collect();
        floats(v, [rows, cols], &self.device)
    }
    fn ones(&self, cols: usize) -> Tensor<2> {
        floats(vec![1.0; cols], [1, cols], &self.device)
    }
    fn swiglu(&mut self, d: usize, f: usize, out_std: f32) -> SwiGlu {
        let std = 1.0 / (d as f32).sqrt();
        SwiGlu {
            w1: self.normal(d, f, std),
            w3: self.normal(d, f, std),
            w2: self.normal(f, d, out_std),
        }
    }
}

impl Weights {
    /// Fresh weights from `seed`. Residual output projections are scaled down by
    /// `1/sqrt(2·layers)` (GPT-2 style) so depth does not blow up the residual stream.
    pub fn init(cfg: &ModelConfig, seed: u64, device: &Device) -> Self {
        let mut init = Init {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            device: device.clone(),
        };
        let d = cfg.d_model;
        let out_std = 0.5 / ((d as f32).sqrt() * (2.0 * cfg.n_layers as f32).sqrt());
        let embed = init.normal(cfg.vocab_size, d, 1.0);
        let blocks = (0..cfg.n_layers)
            .map(|_| {
                let attn_norm = init.ones(d);
                let wqkv = init.normal(d, 3 * d, 1.0 / (d as f32).sqrt());
                let wo = init.normal(d, d, out_std);
                let ffn_norm = init.ones(d);
                let ffn = match cfg.ffn {
                    FfnKind::Moe => FfnWeights::Moe(MoeWeights {
                        router: init.normal(d, cfg.n_experts, 0.02),
                        experts: (0..cfg.n_experts)
                            .map(|_| init.swiglu(d, cfg.d_ff, out_std))
                            .collect(),
                        shared: cfg.shared_expert.then(|| init.swiglu(d, cfg.d_ff, out_std)),
                        bias: if cfg.has_router_bias() {
                            vec![0.0; cfg.n_experts]
                        } else {
                            Vec::new()
                        },
                    }),
                    FfnKind::Dense => FfnWeights::Dense(init.swiglu(d, cfg.dense_d_ff(), out_std)),
                };
                BlockWeights {
                    attn_norm,
                    wqkv,
                    wo,
                    ffn_norm,
                    ffn,
                }
            })
            .collect();
        let final_norm = init.ones(d);
        let head = init.normal(d, cfg.vocab_size, 1.0 / (d as f32).sqrt());
        Weights {
            embed,
            blocks,
            final_norm,
            head,
        }
    }

    /// Visit every parameter in a fixed order with its name and group.
    pub fn visit_mut(&mut self, f: &mut dyn FnMut(&str, ParamGroup, &mut Tensor<2>)) {
        use ParamGroup::*;
        f("embed", NoDecay, &mut self.embed);
        for (l, b) in self.blocks.iter_mut().enumerate() {
            f(&format!("blocks.{l}.attn_norm"), NoDecay, &mut b.attn_norm);
            f(&format!("blocks.{l}.wqkv"), Matrix, &mut b.wqkv);
            f(&format!("blocks.{l}.wo"), Matrix, &mut b.wo);
            f(&format!("blocks.{l}.ffn_norm"), NoDecay, &mut b.ffn_norm);
            match &mut b.ffn {
                FfnWeights::Moe(m) => {
                    f(&format!("blocks.{l}.router"), Router, &mut m.router);
                    for (e, ex) in m.experts.iter_mut().enumerate() {
                        f(&format!("blocks.{l}.expert.{e}.w1"), Matrix, &mut ex.w1);
                        f(&format!("blocks.{l}.expert.{e}.w3"), Matrix, &mut ex.w3);
                        f(&format!("blocks.{l}.expert.{e}.w2"), Matrix, &mut ex.w2);
                    }
                    if let Some(s) = &mut m.shared {
                        f(&format!("blocks.{l}.shared.w1"), Matrix, &mut s.w1);
                        f(&format!("blocks.{l}.shared.w3"), Matrix, &mut s.w3);
                        f(&format!("blocks.{l}.shared.w2"), Matrix, &mut s.w2);
                    }
                }
                FfnWeights::Dense(s) => {
                    f(&format!("blocks.{l}.dense.w1"), Matrix, &mut s.w1);
                    f(&format!("blocks.{l}.dense.w3"), Matrix, &mut s.w3);
                    f(&format!("blocks.{l}.dense.w2"), Matrix, &mut s.w2);
                }
            }
        }
        f("final_norm", NoDecay, &mut self.final_norm);
        f("head", Matrix, &mut self.head);
    }

    /// Parameters in visiting order (cheap handle clones).
    pub fn tensors(&self) -> Vec<Tensor<2>> {
        let mut out = Vec::new();
        self.clone().visit_mut(&mut |_, _, t| out.push(t.clone()));
        out
    }

    /// Move every parameter out, in visiting order, leaving empty placeholders: the moved
    /// tensors are then the only handles on their buffers, so the CPU backend can read and
    /// rebuild them without a copy (the fused AdamW).
    pub fn take_tensors(&mut self) -> Vec<Tensor<2>> {
        let mut out = Vec::new();
        self.visit_mut(&mut |_, _, t| {
            let empty = Tensor::empty([0, 0], &t.device());
            out.push(std::mem::replace(t, empty));
        });
        out
    }

    /// Put parameters back in visiting order (the inverse of [`Weights::take_tensors`]).
    pub fn put_tensors(&mut self, tensors: Vec<Tensor<2>>) {
        let mut it = tensors.into_iter();
        self.visit_mut(&mut |_, _, t| *t = it.next().expect("one tensor per parameter"));
        assert!(it.next().is_none(), "one tensor per parameter");
    }

    /// These weights, moved out of `self` (left with empty placeholders).
    pub fn take(&mut self) -> Weights {
        let tensors = self.take_tensors();
        let mut w = self.clone();
        w.put_tensors(tensors);
        w
    }

    /// Names and groups in visiting order.
    pub fn names(&self) -> Vec<(String, ParamGroup)> {
        let mut out = Vec::new();
        self.clone()
            .visit_mut(&mut |n, g, _| out.push((n.to_string(), g)));
        out
    }

    /// Replace every parameter with `f(param)`, in visiting order.
    pub fn map(mut self, mut f: impl FnMut(Tensor<2>) -> Tensor<2>) -> Self {
        self.visit_mut(&mut |_, _, t| *t = f(t.clone()));
        self
    }

    /// Leaves that record gradients (on the autodiff version of their device).
    pub fn require_grad(self) -> Self {
        self.map(|t| t.inner().autodiff().require_grad())
    }

    /// Plain tensors, no autodiff association (rollout, probes, evaluation).
    pub fn inner(self) -> Self {
        self.map(|t| t.inner())
    }

    pub fn to_device(self, device: &Device) -> Self {
        self.map(|t| t.to_device(device))
    }

    pub fn num_params(&self) -> usize {
        self.tensors()
            .iter()
            .map(|t| t.shape().num_elements())
            .sum()
    }

    /// Host copies of all parameters, in visiting order.
    pub fn to_host(&self) -> Vec<Vec<f32>> {
        self.tensors()
            .into_iter()
            .map(|t| to_vec(t.inner()))
            .collect()
    }

    /// Serialise to bytes: magic, version, tensor count, then per tensor (rows, cols, values),
    /// and a trailing FNV-1a checksum of everything before it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        let tensors = self.tensors();
        out.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
        for t in tensors {
            let [r, c] = t.dims();
            out.extend_from_slice(&(r as u64).to_le_bytes());
            out.extend_from_slice(&(c as u64).to_le_bytes());
            for v in to_vec(t.inner()) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        // Router biases (sigmoid_bias only) after the tensors, so softmax checkpoints keep
        // their format.
        for b in self.router_biases() {
            for v in b {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        let sum = crate::util::hash::fnv1a64(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        out
    }

    /// The router bias of every MoE layer (empty ones for the softmax router).
    pub fn router_biases(&self) -> Vec<&[f32]> {
        self.blocks
            .iter()
            .filter_map(|b| match &b.ffn {
                FfnWeights::Moe(m) if !m.bias.is_empty() => Some(m.bias.as_slice()),
                _ => None,
            })
            .collect()
    }

    /// These weights with the router biases of `other` (same model).
    pub fn with_router_bias_of(mut self, other: &Weights) -> Self {
        for (a, b) in self.blocks.iter_mut().zip(&other.blocks) {
            if let (FfnWeights::Moe(x), FfnWeights::Moe(y)) = (&mut a.ffn, &b.ffn) {
                x.bias.clone_from(&y.bias);
            }
        }
        self
    }

    /// Nudge each `sigmoid_bias` layer's bias toward equal load: `b_e += γ · sign(mean − c_e)`,
    /// `counts[l]` being layer l's routed slots per expert over the batch of the step (no change
    /// for an expert exactly at the mean; no change at all for softmax layers).
    pub fn nudge_router_bias(&mut self, counts: &[Vec<f32>], speed: f64) {
        let mut layers = counts.iter();
        for b in &mut self.blocks {
            let FfnWeights::Moe(m) = &mut b.ffn else {
                continue;
            };
            let Some(c) = layers.next() else { break };
            m.nudge_bias(c, speed);
        }
    }

    /// Load weights for `cfg` from bytes written by [`Weights::to_bytes`]. A truncated, corrupt
    /// or mismatched file is an error, never a panic.
    pub fn from_bytes(cfg: &ModelConfig, bytes: &[u8], device: &Device) -> Result<Self> {
        if bytes.len() < MAGIC.len() + 16 || &bytes[..MAGIC.len()] != MAGIC {
            bail!("not a driftlab checkpoint (bad header)");
        }
        let (body, tail) = bytes.split_at(bytes.len() - 8);
        let want = u64::from_le_bytes(tail.try_into().expect("8 bytes"));
        if crate::util::hash::fnv1a64(body) != want {
            bail!("checkpoint checksum mismatch (file is corrupt or partial)");
        }
        let mut pos = MAGIC.len();
        let read_u64 = |pos: &mut usize| -> Result<u64> {
            let b = body.get(*pos..*pos + 8).context("checkpoint truncated")?;
            *pos += 8;
            Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
        };
        let n = read_u64(&mut pos)? as usize;
        let mut w = Weights::init(cfg, 0, device);
        let expected = w.tensors().len();
        if n != expected {
            bail!("checkpoint has {n} tensors, this model needs {expected}");
        }
        let mut loaded = Vec::with_capacity(n);
        for _ in 0..n {
            let r = read_u64(&mut pos)? as usize;
            let c = read_u64(&mut pos)? as usize;
            let len = r.checked_mul(c).context("bad tensor size")?;
            let raw = body
                .get(pos..pos + 4 * len)
                .context("checkpoint truncated")?;
            pos += 4 * len;
            let v: Vec<f32> = raw
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
                .collect();
            loaded.push((r, c, v));
        }
        let mut err = None;
        let mut it = loaded.into_iter();
        w.visit_mut(&mut |name, _, t| {
            let (r, c, v) = it.next().expect("count checked");
            if t.dims() != [r, c] {
                err.get_or_insert_with(|| {
                    format!("{name}: checkpoint shape [{r}, {c}], model {:?}", t.dims())
                });
                return;
            }
            *t = floats(v, [r, c], device);
        });
        if let Some(e) = err {
            bail!("checkpoint does not fit this model: {e}");
        }
        for b in &mut w.blocks {
            if let FfnWeights::Moe(m) = &mut b.ffn {
                for v in m.bias.iter_mut() {
                    let raw = body
                        .get(pos..pos + 4)
                        .context("checkpoint truncated (router bias)")?;
                    pos += 4;
                    *v = f32::from_le_bytes(raw.try_into().expect("4"));
                }
            }
        }
        if pos != body.len() {
            bail!(
                "checkpoint has {} bytes more than this model needs",
                body.len() - pos
            );
        }
        Ok(w)
    }
}

const MAGIC: &[u8; 8] = b"DRFTLAB1";
