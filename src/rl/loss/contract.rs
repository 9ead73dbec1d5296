//! The contract every objective shares: the [`PolicyBatch`] it reads, the [`LossStats`] it
//! returns, and PPO's clipping test.

use crate::rl::config::Aggregation;
use crate::rl::fixes::{self, Masked, Weights};
use crate::util::tensors::{floats, ints, to_vec};
use burn::tensor::{Device, Tensor};

/// The response tokens of one minibatch, flattened: `n_tok` tokens in `R` responses that form
/// consecutive groups of `group_size`.
#[derive(Clone)]
pub struct PolicyBatch {
    /// log π_θ of each response token, with graph, `[n_tok]`.
    pub logp: Tensor<1>,
    /// log π_θold, the ratios' denominator, `[n_tok]`: the trainer's recompute before the first
    /// update of this rollout batch, or the rollout engine's log-probs with `old_logp = rollout`.
    pub logp_old: Vec<f32>,
    /// TIS's numerator, `[n_tok]`: the ratios' π_old before any router shift. With
    /// `old_logp = rollout` it is `logp_mu`, so every TIS weight is 1 (the ratio already
    /// corrects for the engine, as verl's bypass mode).
    pub logp_tis: Vec<f32>,
    /// Log-probs the rollout engine recorded, `[n_tok]`.
    pub logp_mu: Vec<f32>,
    /// Frozen reference model, `[n_tok]`, when a KL term needs it.
    pub logp_ref: Option<Vec<f32>>,
    /// The stability fixes' detached weights (see [`crate::rl::fixes`]); none when every fix
    /// is off.
    pub fixes: Weights,
    /// Advantage of each response, `[R]`.
    pub adv: Vec<f32>,
    /// Raw reward of each response, `[R]`.
    pub rewards: Vec<f32>,
    /// Response index of each token, `[n_tok]`.
    pub seg: Vec<usize>,
    /// Tokens per response, `[R]`, each ≥ 1.
    pub lens: Vec<usize>,
    pub group_size: usize,
    /// What the frozen teacher scored on these tokens (on-policy distillation); none without
    /// a teacher.
    pub teacher: Option<TeacherBatch>,
}

/// The teacher's side of a [`PolicyBatch`] (see [`crate::rl::teacher`]).
#[derive(Clone)]
pub struct TeacherBatch {
    /// log π_T of each response token at the rollout's temperature, `[n_tok]`, no graph.
    pub logp: Vec<f32>,
    /// For the full-vocabulary losses only: the student's logits of the response tokens
    /// `[n_tok, vocab]` with graph, and the teacher's, row-major on the host.
    pub logits: Option<(Tensor<2>, Vec<f32>)>,
}

/// Host-side quantities of one loss evaluation (values at the current parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossStats {
    /// Policy loss value (including the KL term when on).
    pub loss_policy: f32,
    /// log π_θ of each token at the current parameters (host copy), `[n_tok]`.
    pub logp: Vec<f32>,
    /// Token ratios `w = exp(logp − logp_old)`, `[n_tok]`.
    pub ratio_tok: Vec<f32>,
    /// Sequence ratios `s_i = exp(mean_t (logp − logp_old))`, `[R]`.
    pub ratio_seq: Vec<f32>,
    /// Tokens clipped at the low / high bound (for sequence-level clipping, every token of a
    /// clipped response), `[n_tok]`.
    pub clip_low: Vec<bool>,
    pub clip_high: Vec<bool>,
    /// Responses with any clipped token (or clipped as a whole), `[R]`.
    pub clip_seq: Vec<bool>,
    /// Mean k3 KL to the reference, when computed.
    pub kl_ref: Option<f32>,
    /// The stability fixes' weights applied, `[n_tok]` (token-level) or `[R]` (sequence-level
    /// objectives).
    pub tis_weight: Option<Vec<f32>>,
    /// What each stability fix masked (see [`crate::rl::fixes::Masked`]).
    pub masked: Masked,
    /// Every token's correction weight is 0 (the update is skipped).
    pub all_masked: bool,
    /// With `replay_threshold`: (replayed slots, slots the filter replaced) over the MoE
    /// layers of the update forward.
    pub replay_filter: Option<(usize, usize)>,
    /// Router-shift weights γ̃ applied to the token ratios, `[n_tok]`, when `router_shift` is on
    /// (the ratios above are then the raw ones, the clipping statistics those of the rescaled
    /// ratios the objective clipped; see [`LossStats::unshift_ratios`]).
    pub router_shift: Option<Vec<f32>>,
}

impl LossStats {
    /// The statistics of a loss that clips nothing: its value, and the ratios against π_old
    /// at the current parameters.
    pub fn unclipped(batch: &PolicyBatch, loss: &Tensor<1>) -> LossStats {
        let logp = batch.logp_host();
        let (ratio_tok, ratio_seq) = batch.ratios(&logp);
        LossStats {
            loss_policy: crate::util::tensors::scalar(loss.clone().inner()),
            clip_low: vec![false; batch.n_tok()],
            clip_high: vec![false; batch.n_tok()],
            clip_seq: vec![false; batch.n_resp()],
            ratio_tok,
            ratio_seq,
            logp,
            ..LossStats::default()
        }
    }
}

impl PolicyBatch {
    /// The teacher's log-prob of each token; panics without a teacher (the config's
    /// validation requires one for every distillation objective).
    pub fn teacher_logp(&self) -> &[f32] {
        &self
            .teacher
            .as_ref()
            .expect("a distillation objective needs rl.teacher")
            .logp
    }

    pub fn n_tok(&self) -> usize {
        self.seg.len()
    }
    pub fn n_resp(&self) -> usize {
        self.lens.len()
    }
    pub fn device(&self) -> Device {
        self.logp.device()
    }
    /// A host vector as a `[n]` tensor on the batch's device (a constant).
    pub fn constant(&self, v: Vec<f32>) -> Tensor<1> {
        let n = v.len();
        floats(v, [n], &self.device())
    }
    /// Per-token advantages, `[n_tok]`.
    pub fn adv_tok(&self) -> Tensor<1> {
        self.constant(self.seg.iter().map(|&i| self.adv[i]).collect())
    }
    /// Sum of a per-token tensor within each response, `[R]` (differentiable scatter-add).
    pub fn seq_sum(&self, x: Tensor<1>) -> Tensor<1> {
        let d = self.device();
        Tensor::zeros([self.n_resp()], &d).select_assign(
            0,
            ints(&self.seg, [self.n_tok()], &d),
            x,
            burn::tensor::IndexingUpdateOp::Add,
        )
    }
    /// Per-token weights of an aggregation: `seq_mean_token_mean` gives `1 / (L_i · R)`,
    /// `token_mean` gives `1 / n_tok`.
    pub fn agg_weights(&self, agg: Aggregation) -> Tensor<1> {
        let r = self.n_resp() as f32;
        let n = self.n_tok() as f32;
        self.constant(
            self.seg
                .iter()
                .map(|&i| match agg {
                    Aggregation::SeqMeanTokenMean => 1.0 / (self.lens[i] as f32 * r),
                    Aggregation::TokenMean => 1.0 / n,
                })
                .collect(),
        )
    }
    /// Host copy of log π_θ (one sync).
    pub fn logp_host(&self) -> Vec<f32> {
        to_vec(self.logp.clone().inner())
    }
    /// Token and sequence ratios at the current parameters.
    pub fn ratios(&self, logp: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let tok: Vec<f32> = logp
            .iter()
            .zip(&self.logp_old)
            .map(|(a, b)| (a - b).exp())
            .collect();
        let mut sum = vec![0f64; self.n_resp()];
        for (t, (&a, &b)) in logp.iter().zip(&self.logp_old).enumerate() {
            sum[self.seg[t]] += f64::from(a - b);
        }
        let seq = sum
            .iter()
            .zip(&self.lens)
            .map(|(s, &l)| (s / l as f64).exp() as f32)
            .collect();
        (tok, seq)
    }
    /// What the stability fixes read of this batch.
    pub fn fix_batch(&self) -> fixes::Batch<'_> {
        fixes::Batch::new(
            &self.logp_tis,
            &self.logp_mu,
            &self.adv,
            &self.seg,
            &self.lens,
            Box::new(move || self.logp_host()),
        )
    }
}

impl PolicyBatch {
    /// The detached per-token weights of a token-level objective: the fixes' per-token
    /// importance weight times their mask (`None` when every fix is off).
    pub fn tok_weight(&self) -> Option<Vec<f32>> {
        let t = self.fixes.ratio.as_ref().map(|r| r.tok.clone());
        combine(t, self.fixes.mask.clone())
    }

    /// The fixes' per-response importance weight (`None` when none is on).
    pub fn ratio_seq_weight(&self) -> Option<Vec<f32>> {
        self.fixes.ratio.as_ref().map(|r| r.seq.clone())
    }

    /// Per-response weights `seq` (e.g. [`Self::ratio_seq_weight`]) given to each of the
    /// response's tokens, times the fixes' mask (`None` when neither is on).
    pub fn tok_weight_of_seq(&self, seq: Option<&[f32]>) -> Option<Vec<f32>> {
        let t = seq.map(|w| self.seg.iter().map(|&i| w[i]).collect());
        combine(t, self.fixes.mask.clone())
    }

    /// The detached per-response weights of a sequence-level objective: the fixes'
    /// per-response importance weight times the token mean of their mask over the response
    /// (what broadcasting the response's loss to its tokens and averaging them gives).
    pub fn seq_weight(&self) -> Option<Vec<f32>> {
        let t = self.ratio_seq_weight();
        let c = self.fixes.mask.as_ref().map(|c| {
            let mut s = vec![0f32; self.n_resp()];
            for (t, &w) in c.iter().enumerate() {
                s[self.seg[t]] += w;
            }
            s.iter()
                .zip(&self.lens)
                .map(|(v, &l)| v / l as f32)
                .collect()
        });
        combine(t, c)
    }
}

/// The element-wise product of two optional weight vectors of one length.
fn combine(a: Option<Vec<f32>>, b: Option<Vec<f32>>) -> Option<Vec<f32>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.iter().zip(&b).map(|(x, y)| x * y).collect()),
        (a, b) => a.or(b),
    }
}

/// Is a ratio clipped, PPO style: only on the side where clipping removes the gradient.
pub fn clipped(ratio: f32, adv: f32, eps_low: f64, eps_high: f64) -> (bool, bool) {
    let low = adv < 0.0 && f64::from(ratio) < 1.0 - eps_low;
    let high = adv > 0.0 && f64::from(ratio) > 1.0 + eps_high;
    (low, high)
}
