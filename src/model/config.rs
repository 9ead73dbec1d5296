//! Model configuration: presets, validation with errors that say what is allowed.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Feed-forward block type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum FfnKind {
    /// Mixture of experts with a learned top-k router.
    #[default]
    Moe,
    /// Dense control: one SwiGLU with the active parameter count of `top_k` experts.
    Dense,
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
    /// Longest sequence (prompt + response) the RoPE tables cover.
    pub max_seq_len: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    pub vocab_size: usize,
}

/// Preset names accepted by `--preset` and spec files.
pub const PRESETS: &[&str] = &["tiny", "toy", "small", "deep", "medium"];

impl ModelConfig {
    /// A preset from DESIGN §4. `vocab_size` comes from the tokenizer.
    pub fn preset(name: &str, vocab_size: usize) -> Result<Self> {
        let (n_layers, d_model, n_heads, n_experts, top_k, d_ff) = match name {
            "tiny" => (2, 32, 2, 4, 2, 64),
            "toy" => (2, 64, 4, 8, 2, 128),
            "small" => (4, 128, 4, 16, 4, 256),
            "deep" => (12, 128, 4, 32, 4, 128),
            "medium" => (12, 256, 8, 64, 8, 256),
            other => bail!(
                "unknown preset '{other}'; allowed: {}{}",
                PRESETS.join(", "),
                crate::util::suggest(other, PRESETS)
            ),
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
        if self.d_model % self.n_heads != 0 {
            bail!(
                "model.n_heads = {} does not divide model.d_model = {}; allowed head counts: {:?}",
                self.n_heads,
                self.d_model,
                (1..=self.d_model)
                    .filter(|h| self.d_model % h == 0)
                    .collect::<Vec<_>>()
            );
        }
        if (self.d_model / self.n_heads) % 2 != 0 {
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
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            bail!(
                "model.rope_theta = {} must be a finite number > 1",
                self.rope_theta
            );
        }
        Ok(())
    }

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
}
