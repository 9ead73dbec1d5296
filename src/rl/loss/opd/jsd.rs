//! Full-vocabulary generalised Jensen–Shannon divergence between student and teacher, TRL's
//! distillation loss: a direct loss on the student's logits (gradient through p_S only).
//!
//! Per response token, `p_S = softmax(z_S / T)`, `p_T = softmax(z_T / T)`:
//! - β = 1: reverse KL `Σ_v p_S(v)(log p_S(v) − log p_T(v))` (mode-seeking; TRL's default);
//! - β = 0: forward KL `Σ_v p_T(v)(log p_T(v) − log p_S(v))`;
//! - 0 < β < 1: with `m = (1−β) p_S + β p_T`, `JSD_β = β KL(p_T ‖ m) + (1−β) KL(p_S ‖ m)`.
//!
//! The ends are special cases, as in TRL: JSD_β itself tends to 0 at both (≈ β·KL(p_T‖p_S) near
//! 0, ≈ (1−β)·KL(p_S‖p_T) near 1), so β = 0.999 and β = 1 differ by a factor ≈ 1000 in scale.
//! Loss = mean over response tokens (TRL's `batchmean` over completion tokens); no T² factor.
//!
//! Source: huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8,
//! `trl/experimental/gkd/gkd_trainer.py` L239–323 (`generalized_jsd_loss`) and
//! `trl/experimental/distillation/distillation_trainer.py` L104–145 (`_jsd_divergence`).

use crate::kernels::log_softmax;
use crate::rl::loss::contract::{LossStats, PolicyBatch};
use crate::util::tensors::floats;
use burn::tensor::Tensor;
use serde::{Deserialize, Serialize};

/// The divergence's settings (`algorithm = { kind = "opd_kl", … }`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpdKlConfig {
    /// Weight β of the teacher in the mixture: 1 reverse KL, 0 forward KL (TRL's `beta`).
    pub beta: f64,
    /// Temperature T of both softmaxes.
    pub temperature: f64,
}

impl Default for OpdKlConfig {
    /// TRL's DistillationTrainer defaults: reverse KL at T = 1.
    fn default() -> Self {
        OpdKlConfig {
            beta: 1.0,
            temperature: 1.0,
        }
    }
}

impl OpdKlConfig {
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.beta),
            "opd_kl.beta must lie in [0, 1] (1 reverse KL, 0 forward KL; it is {})",
            self.beta
        );
        anyhow::ensure!(
            self.temperature > 0.0 && self.temperature.is_finite(),
            "opd_kl.temperature must be > 0 (it is {})",
            self.temperature
        );
        Ok(())
    }
}

/// The objective `opd_kl` on a batch that carries the student's logits and the teacher's
/// (see [`TeacherBatch::logits`]), with the statistics every objective reports (ratios
/// against π_old; nothing is clipped). The stability fixes' mask weights each token's
/// divergence; an importance weight (TIS) has nothing to correct in a direct loss and is
/// ignored (as TRL's trainers, which have no engine ratio).
pub fn objective(c: &OpdKlConfig, batch: &PolicyBatch) -> (Tensor<1>, LossStats) {
    let (student, teacher) = batch
        .teacher
        .as_ref()
        .and_then(|t| t.logits.as_ref())
        .expect("opd_kl needs the student's and the teacher's logits");
    let [n_tok, vocab] = student.dims();
    let teacher = floats(teacher.clone(), [n_tok, vocab], &student.device());
    let per_tok = divergence(c, student.clone(), teacher);
    let loss = match &batch.fixes.mask {
        Some(m) => (per_tok * batch.constant(m.clone())).sum() / n_tok as f32,
        None => per_tok.sum() / n_tok as f32,
    };
    let stats = LossStats::unclipped(batch, &loss);
    (loss, stats)
}

/// The mean over response tokens of the divergence, a `[1]` tensor with graph through the
/// student's logits only.
///
/// # Shapes
/// - `student_logits`: `[n_tok, vocab]`, one row per response token, with graph
/// - `teacher_logits`: `[n_tok, vocab]`, the same tokens (detached here)
///
/// Panics when the shapes differ: student and teacher must share one tokenizer.
pub fn loss(c: &OpdKlConfig, student_logits: Tensor<2>, teacher_logits: Tensor<2>) -> Tensor<1> {
    let [n_tok, vocab] = student_logits.dims();
    assert_eq!(
        teacher_logits.dims(),
        [n_tok, vocab],
        "student and teacher logits differ in shape [tokens, vocab]: they must share a tokenizer"
    );
    assert!((0.0..=1.0).contains(&c.beta), "JSD β must lie in [0, 1]");
    divergence(c, student_logits, teacher_logits).sum() / n_tok as f32
}

/// The divergence of each token, `[n_tok]`, with graph through the student's logits.
fn divergence(c: &OpdKlConfig, student_logits: Tensor<2>, teacher_logits: Tensor<2>) -> Tensor<1> {
    let temp = c.temperature as f32;
    let ls = log_softmax(student_logits / temp, 1);
    let lt = log_softmax(teacher_logits.detach() / temp, 1);
    let per_entry = if c.beta == 1.0 {
        kl_terms(ls, lt)
    } else if c.beta == 0.0 {
        kl_terms(lt, ls)
    } else {
        // log m = logsumexp(log p_S + ln(1−β), log p_T + ln β), shifted by its detached max.
        let a = ls.clone() + (1.0 - c.beta).ln() as f32;
        let b = lt.clone() + c.beta.ln() as f32;
        let top = a.clone().max_pair(b.clone()).detach();
        let lm = top.clone() + ((a - top.clone()).exp() + (b - top).exp()).log();
        kl_terms(lt, lm.clone()) * c.beta as f32 + kl_terms(ls, lm) * (1.0 - c.beta) as f32
    };
    per_entry.sum_dim(1).squeeze_dim(1)
}

/// The terms `p(v)(log p(v) − log q(v))` of KL(p ‖ q), `[n_tok, vocab]`.
fn kl_terms(lp: Tensor<2>, lq: Tensor<2>) -> Tensor<2> {
    lp.clone().exp() * (lp - lq)
}
