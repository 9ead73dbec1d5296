//! What one RL step produced: per minibatch update and for the whole step, every tensor-level
//! quantity the metrics read, and the seconds each phase took.

use super::loss::LossStats;

/// What one minibatch update did, with everything measured around it.
#[derive(Clone, Debug)]
pub struct UpdateRecord {
    pub minibatch: usize,
    pub stats: LossStats,
    /// Loss terms: policy (incl. KL), load balance, z; and their weighted total.
    pub loss_policy: f32,
    pub loss_aux: f32,
    pub loss_z: f32,
    pub loss_total: f32,
    pub grad_norm: f32,
    /// False when the update was skipped; `skip_reason` says why.
    pub applied: bool,
    pub skip_reason: Option<String>,
    /// PR²'s predictor loss on this minibatch (summed over layers; `None` when off, and on a
    /// step's first minibatch, where it does not train).
    pub pr2_loss: Option<f64>,
    pub lr: f64,
    /// Per MoE layer, `[tokens, k]` over the minibatch layout: native routes of the pre-step
    /// policy (from the update forward), ids the update forward ran, native routes of the
    /// updated policy (drift probe), and π_old's native routes.
    pub routes_before: Vec<Vec<u16>>,
    pub routes_used: Vec<Vec<u16>>,
    pub routes_after: Vec<Vec<u16>>,
    /// `sigmoid_bias` only (empty otherwise): native routes of the pre-step weights with the
    /// updated bias, on the same inputs and walk offsets as the update forward, so that
    /// `routes_before → routes_bias_only` is the drift the bias update alone causes.
    pub routes_bias_only: Vec<Vec<u16>>,
    pub routes_old: Vec<Vec<u16>>,
    /// Per MoE layer router distributions `[tokens, n_experts]` before and after the step.
    pub probs_before: Vec<Vec<f32>>,
    pub probs_after: Vec<Vec<f32>>,
    /// Real (non-padding) tokens of the minibatch layout.
    pub valid: Vec<bool>,
    /// Per response token of the minibatch: log π_old from the trainer's recompute (also with
    /// `old_logp = rollout`, where the ratios use `logp_mu`), rollout engine, reference (log π_θ
    /// before the step is `stats.logp`).
    pub logp_old: Vec<f32>,
    pub logp_mu: Vec<f32>,
    pub logp_ref: Vec<f32>,
    /// Advantages and lengths of the minibatch's responses.
    pub adv: Vec<f32>,
    pub lens: Vec<usize>,
    pub t_update: f64,
    pub t_probe: f64,
    /// Of `t_update`, the seconds in AdamW (and the router-bias nudge).
    pub t_opt: f64,
    /// Host↔device transfers of AdamW (and the nudge), and of this update's probes.
    pub x_opt: crate::util::tensors::Transfers,
    pub x_probe: crate::util::tensors::Transfers,
}

/// Everything one RL step produced.
#[derive(Clone, Debug)]
pub struct StepOutput {
    pub step: usize,
    /// How many steps old the policy that sampled this rollout batch is: `min(step, k)` for
    /// `rollout_staleness = k`.
    pub staleness: usize,
    pub rewards: Vec<f32>,
    pub correct: Vec<bool>,
    pub adv: Vec<f32>,
    pub resp_lens: Vec<usize>,
    /// Per response token of the rollout batch: rollout-engine and π_old log-probs.
    pub logp_mu: Vec<f32>,
    pub logp_old: Vec<f32>,
    /// The teacher's log-probs of the same tokens (on-policy distillation), when a teacher is
    /// set.
    pub logp_teacher: Option<Vec<f32>>,
    /// Mean full-vocabulary entropy of π_old on the sampled positions.
    pub entropy: f32,
    /// Per MoE layer over the whole rollout layout `[tokens, k]`: rollout-engine routes
    /// (`NO_ROUTE` where never routed) and π_old's native routes; real-token mask.
    pub routes_rollout: Vec<Vec<u16>>,
    pub routes_old: Vec<Vec<u16>>,
    /// Per MoE layer of a MoE teacher over the same layout: its native routes `[tokens, k_T]`
    /// and its router's mass on them per token (empty for a dense teacher or none).
    pub routes_teacher: Vec<Vec<u16>>,
    pub teacher_mass: Vec<Vec<f32>>,
    pub valid: Vec<bool>,
    /// Per MoE layer, the engine's expert choices against an f64 router on the same hidden
    /// states (`rl.router_check`; empty when off): see [`super::engine_router`].
    pub router_check: Vec<super::engine_router::RouterCheck>,
    pub updates: Vec<UpdateRecord>,
    pub t_rollout: f64,
    /// `t_probe` includes the router check's forward when it is on.
    /// π_old recompute, advantages and updates (the probe's time excluded).
    pub t_update: f64,
    pub t_probe: f64,
    /// Host↔device transfers by phase (process-wide counters: exact only while this trainer
    /// runs alone, as in `bench --rl`).
    pub transfers: crate::util::tensors::StepTransfers,
    /// Of `t_update`, the seconds before the first update: π_old's recompute, the advantages
    /// and the drift calibration.
    pub t_old: f64,
}
