//! Model configuration: presets, validation with errors that say what is allowed.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

crate::named_enum! {
    /// Feed-forward block type.
    #[derive(Default)]
    pub enum FfnKind("ffn") {
        /// Mixture of experts with a learned top-k router.
        #[default]
        Moe = "moe",
        /// Dense control: one SwiGLU with the active parameter count of `top_k` experts.
        Dense = "dense",
    }
}

crate::named_enum! {
    /// How an MoE layer routes (`router`).
    #[derive(Default)]
    pub enum RouterKind("router") {
        /// Softmax over the router logits; top-k on the probabilities; gates are the
        /// probabilities at the chosen experts (default).
        #[default]
        Softmax = "softmax",
        /// DeepSeek-V3's auxiliary-loss-free balancing (arXiv 2412.19437, §2.1.2): sigmoid
        /// affinities `s = σ(logits)`, top-k on `s + b` with a per-expert bias `b` that is not
        /// trained by gradient but nudged by ±`bias_update_speed` after every optimizer step
        /// toward equal load; gates from `s` alone at the chosen experts (normalised over the
        /// k when `norm_topk`).
        SigmoidBias = "sigmoid_bias",
    }
}

crate::named_enum! {
    /// How an MoE layer computes its experts (`expert_path`), as candle's FFN enum chooses an
    /// implementation: the two give bitwise the same values and gradients (tested), so the
    /// choice is about speed only.
    #[derive(Default)]
    pub enum ExpertPath("expert_path") {
        /// On the CPU backend, the fused expert node (tokens gathered once per layer, the
        /// products on host slices); on other devices the sparse path (default).
        #[default]
        Fused = "fused",
        /// Per expert: select its tokens, SwiGLU, scatter back, as tensor ops on any device.
        Sparse = "sparse",
    }
}

fn is_fused(p: &ExpertPath) -> bool {
    *p == ExpertPath::Fused
}

/// DeepSeek-V3's bias update speed γ (0.001 for most of its training).
pub const DEFAULT_BIAS_UPDATE_SPEED: f64 = 1e-3;

fn is_softmax(r: &RouterKind) -> bool {
    *r == RouterKind::Softmax
}
fn default_bias_speed() -> f64 {
    DEFAULT_BIAS_UPDATE_SPEED
}
fn is_default_bias_speed(v: &f64) -> bool {
    *v == DEFAULT_BIAS_UPDATE_SPEED
}

/// Every size of the transformer. Built from a preset, then optionally overridden.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub n_layers: usize,
    pub d_model: usize,
    pub n_heads: usize,
    pub n_experts: usize,
    pub top_k: usize,
    /// Hidden width of one SwiGLU expert.
    pub d_ff: usize,
    /// Renormalise the k gates to sum to 1 (Qwen3-MoE); raw softmax probabilities otherwise.
    pub norm_topk: bool,
    /// Add one always-on shared expert (width `d_ff`).
    pub shared_expert: bool,
    pub ffn: FfnKind,
    /// Router scheme of the MoE layers. Left out of the serialised form when `softmax`, so
    /// existing cold-start cache keys stay valid.
    #[serde(default, skip_serializing_if = "is_softmax")]
    pub router: RouterKind,
    /// γ of the `sigmoid_bias` router's bias update (left out when at its default).
    #[serde(
        default = "default_bias_speed",
        skip_serializing_if = "is_default_bias_speed"
    )]
    pub bias_update_speed: f64,
    /// How the MoE layers compute their experts. Left out of the serialised form when `fused`
    /// (the default), so existing cold-start cache keys stay valid.
    #[serde(default, skip_serializing_if = "is_fused")]
    pub expert_path: ExpertPath,
    /// Longest sequence (prompt + response) the RoPE tables cover.
    pub max_seq_len: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    pub vocab_size: usize,
}

crate::named_enum! {
    /// A named model size (DESIGN §4); the names are a contract (`--preset`, spec files).
    pub enum Preset("preset") {
        /// Tests and the CI regression (seconds).
        Tiny = "tiny",
        /// Default CPU experiments (minutes).
        Toy = "toy",
        /// CPU, tens of minutes.
        Small = "small",
        /// Depth effect on drift.
        Deep = "deep",
        /// GPU (~150M parameters, mostly experts).
        Medium = "medium",
    }
}

impl ModelConfig {
    /// A preset from DESIGN §4. `vocab_size` comes from the tokenizer.
    pub fn preset(preset: Preset, vocab_size: usize) -> Result<Self> {
        let (n_layers, d_model, n_heads, n_experts, top_k, d_ff) = match preset {
            Preset::Tiny => (2, 32, 2, 4, 2, 64),
            Preset::Toy => (2, 64, 4, 8, 2, 128),
            Preset::Small => (4, 128, 4, 16, 4, 256),
            Preset::Deep => (12, 128, 4, 32, 4, 128),
            Preset::Medium => (12, 256, 8, 64, 8, 256),
        };
        let cfg = ModelConfig {
            n_layers,
            d_model,
            n_heads,
            n_experts,
            top_k,
            d_ff,
            norm_topk: true,
            shared_expert: false,
            ffn: FfnKind::Moe,
            router: RouterKind::Softmax,
            bias_update_speed: DEFAULT_BIAS_UPDATE_SPEED,
            expert_path: ExpertPath::Fused,
            max_seq_len: 160,
            rope_theta: 10_000.0,
            vocab_size,
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reject impossible sizes with a message that says what is allowed.
    pub fn validate(&self) -> Result<()> {
        let nonzero = [
            ("n_layers", self.n_layers),
            ("d_model", self.d_model),
            ("n_heads", self.n_heads),
            ("n_experts", self.n_experts),
            ("top_k", self.top_k),
            ("d_ff", self.d_ff),
            ("max_seq_len", self.max_seq_len),
            ("vocab_size", self.vocab_size),
        ];
        for (name, v) in nonzero {
            if v == 0 {
                bail!("model.{name} = 0; it must be at least 1");
            }
        }
        if !self.d_model.is_multiple_of(self.n_heads) {
            bail!(
                "model.n_heads = {} does not divide model.d_model = {}; allowed head counts: {:?}",
                self.n_heads,
                self.d_model,
                (1..=self.d_model)
                    .filter(|&h| self.d_model.is_multiple_of(h))
                    .collect::<Vec<_>>()
            );
        }
        if !(self.d_model / self.n_heads).is_multiple_of(2) {
            bail!(
                "head dimension d_model / n_heads = {} is odd; RoPE needs an even head dimension",
                self.d_model / self.n_heads
            );
        }
        if self.top_k > self.n_experts {
            bail!(
                "model.top_k = {} exceeds model.n_experts = {}; allowed: 1..={}",
                self.top_k,
                self.n_experts,
                self.n_experts
            );
        }
        if self.n_experts > u16::MAX as usize {
            bail!("model.n_experts = {} exceeds {}", self.n_experts, u16::MAX);
        }
        if self.bias_update_speed != DEFAULT_BIAS_UPDATE_SPEED && !self.has_router_bias() {
            bail!(
                "model.bias_update_speed = {} applies to router = \"sigmoid_bias\" MoE layers only; this model has router = \"{}\" ({})",
                self.bias_update_speed,
                self.router,
                self.ffn
            );
        }
        if !(self.bias_update_speed.is_finite() && self.bias_update_speed >= 0.0) {
            bail!(
                "model.bias_update_speed = {} must be a finite number >= 0",
                self.bias_update_speed
            );
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            bail!(
                "model.rope_theta = {} must be a finite number > 1",
                self.rope_theta
            );
        }
        Ok(())
    }

    /// Parameters of a model of this shape, counted from the sizes alone (the same count as
    /// [`super::Weights::num_params`], without allocating them): saturating, so an absurd
    /// size gives a huge count rather than an overflow.
    pub fn num_params(&self) -> u128 {
        let n = |x: usize| x as u128;
        let mul = |a: u128, b: u128| a.saturating_mul(b);
        let (d, v) = (n(self.d_model), n(self.vocab_size));
        let swiglu = |f: usize| mul(3, mul(d, n(f)));
        let ffn = match self.ffn {
            FfnKind::Moe => mul(d, n(self.n_experts))
                .saturating_add(mul(n(self.n_experts), swiglu(self.d_ff)))
                .saturating_add(if self.shared_expert {
                    swiglu(self.d_ff)
                } else {
                    0
                }),
            FfnKind::Dense => swiglu(self.dense_d_ff()),
        };
        // Norm gains, q|k|v, the output projection, the FFN.
        let block = mul(2, d)
            .saturating_add(mul(4, mul(d, d)))
            .saturating_add(ffn);
        // Embedding and the untied head, the final norm, the blocks.
        mul(2, mul(v, d))
            .saturating_add(d)
            .saturating_add(mul(n(self.n_layers), block))
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Hidden width of the dense control FFN: same active parameters as `top_k` experts
    /// (plus the shared expert, if any).
    pub fn dense_d_ff(&self) -> usize {
        self.d_ff * (self.top_k + usize::from(self.shared_expert))
    }

    pub fn is_moe(&self) -> bool {
        self.ffn == FfnKind::Moe
    }

    /// MoE layers with the `sigmoid_bias` router (their weights carry a bias per expert).
    pub fn has_router_bias(&self) -> bool {
        self.is_moe() && self.router == RouterKind::SigmoidBias
    }
}
