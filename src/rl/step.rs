//! One RL step, in the order of the method: rollout → π_old recompute → advantages → for each
//! minibatch: update, then the drift probe. [`Trainer::step`] returns every tensor-level
//! quantity the metrics need, so instrumentation never reaches into the trainer.

mod probes;
mod update;

use super::advantage::advantages;
use super::config::{DriftInjection, RlConfig};
use super::drift::{DriftWalk, calibrate_sigma};
use super::micro::{Batch, concat_layers};
use super::old::{OldPolicy, old_policy};
use super::predictor::Predictor;
pub use super::record::{StepOutput, UpdateRecord};
use super::rollout::{engine_model, rollout_on};
use crate::model::Model;
use crate::optim::AdamW;
use crate::task::Task;
use crate::util::hash::derive_seed;
use crate::util::parallel::serial_off_host;
use crate::util::tensors::{StepTransfers, Transfers};
use anyhow::{Result, bail};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use std::time::Instant;

pub use super::correct::ALL_MASKED;

/// An RL cell's trainer: the policy, its optimizer, the frozen reference and the RNG streams.
pub struct Trainer {
    pub cfg: RlConfig,
    pub model: Model,
    pub reference: Option<Model>,
    /// The frozen teacher of on-policy distillation ([`Trainer::with_teacher`]).
    pub teacher: Option<Model>,
    pub task: Task,
    opt: AdamW,
    sample_rng: Xoshiro256PlusPlus,
    noise_rng: Xoshiro256PlusPlus,
    walk_seed: u64,
    pub step: usize,
    /// σ of the drift walk in force (given, or calibrated on the first step), if injection is on.
    pub drift_sigma: Option<f64>,
    /// Run the drift probe after every update (default true).
    pub probe: bool,
    /// With `rollout_staleness = k > 0`: the policies at the start of the last k + 1 steps,
    /// oldest first (the rollout engine samples with the oldest).
    snapshots: std::collections::VecDeque<Model>,
    /// PR²'s route predictors, when `pr2` is on.
    pub predictor: Option<Predictor>,
}

impl Trainer {
    /// A trainer over resolved settings (`cfg` as [`RlConfig::with_sizes`] leaves it, which is
    /// how a spec's cells are resolved); `cfg` is validated, not re-derived.
    pub fn new(cfg: RlConfig, model: Model, task: Task, seed: u64) -> Result<Self> {
        cfg.validate()?;
        if model.cfg.has_router_bias()
            && matches!(
                cfg.drift_injection,
                Some(DriftInjection::TargetExpertFrac { .. })
            )
        {
            bail!(
                "drift_injection target_expert_frac calibrates σ on a softmax router's \
                 distribution; with router = sigmoid_bias give the walk's sigma instead"
            );
        }
        let need = task.cfg.max_prompt_tokens() + task.cfg.max_answer_tokens();
        if need > model.cfg.max_seq_len {
            bail!(
                "task needs sequences of up to {need} tokens but model.max_seq_len is {}",
                model.cfg.max_seq_len
            );
        }
        // The frozen cold-start model: the KL term's reference, and the `kl_ref` metric. Its
        // weights never change, so its QKV projections are extended once for the whole cell.
        let reference = (cfg.algorithm.kl_beta() > 0.0 || cfg.measure_kl_ref)
            .then(|| model.with_extended_qkv());
        let opt = AdamW::new(cfg.optimizer.clone(), &model.weights);
        let drift_sigma = match cfg.drift_injection {
            Some(DriftInjection::Sigma { sigma }) => Some(sigma),
            _ => None,
        };
        let mc = &model.cfg;
        if cfg.pr2.is_some() && (!mc.is_moe() || mc.has_router_bias()) {
            bail!(
                "pr2 predicts a softmax router's routes: it needs an MoE model with router = softmax"
            );
        }
        let predictor = cfg
            .pr2
            .as_ref()
            .map(|p| Predictor::new(mc.n_layers, mc.d_model, mc.n_experts, mc.top_k, p));
        Ok(Trainer {
            predictor,
            opt,
            reference,
            teacher: None,
            task,
            model: model.inner(),
            sample_rng: Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "rl-sample")),
            noise_rng: Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "rl-mismatch")),
            walk_seed: derive_seed(seed, "rl-drift-walk"),
            step: 0,
            drift_sigma,
            probe: true,
            snapshots: std::collections::VecDeque::new(),
            cfg,
        })
    }

    /// The frozen teacher `rl.teacher` describes (trained or loaded by the caller, which holds
    /// the cold-start cache): checked against the student's vocabulary; its QKV projections
    /// are extended once, as the reference's, since its weights never change.
    pub fn with_teacher(mut self, teacher: Model) -> Result<Self> {
        super::teacher::check_vocab(&self.model.cfg, &teacher.cfg)?;
        anyhow::ensure!(
            self.cfg.teacher.is_some(),
            "a teacher model was given but rl.teacher is not set"
        );
        self.teacher = Some(teacher.with_extended_qkv());
        Ok(self)
    }

    /// Copies of the random streams the next rollout draws from (prompts and tokens; mismatch
    /// noise), so a caller can replay that rollout with [`super::rollout::rollout`].
    pub fn rollout_rngs(&self) -> (Xoshiro256PlusPlus, Xoshiro256PlusPlus) {
        (self.sample_rng.clone(), self.noise_rng.clone())
    }

    /// One RL step. Never panics on a non-finite loss or gradient: the update is skipped and
    /// the record says why. On a GPU device its pieces run from this thread only
    /// ([`crate::util::parallel::serial_while`]), so its numbers never depend on the schedule.
    pub fn step(&mut self) -> StepOutput {
        let _serial = serial_off_host(&self.model.device());
        let cfg = self.cfg.clone();
        let started = Instant::now();
        let moved = Transfers::now();
        self.keep_snapshot();
        let behaviour = self.snapshots.front().unwrap_or(&self.model);
        let engine = engine_model(behaviour, cfg.mismatch, cfg.router_precision);
        let ro = rollout_on(
            &engine,
            &self.task,
            &cfg,
            &mut self.sample_rng,
            &mut self.noise_rng,
        );
        let t_rollout = started.elapsed().as_secs_f64();
        let x_rollout = Transfers::since(moved);
        let moved = Transfers::now();
        let started = Instant::now();
        let t_check = Instant::now();
        let router_check = router_check(&cfg, &engine, behaviour, &ro.generation.batch);
        let t_check = t_check.elapsed().as_secs_f64();
        let x_check = Transfers::since(moved);
        let moved = Transfers::now();
        let b = Batch::new(ro, &cfg, self.model.cfg.top_k);
        assert!(
            cfg.teacher.is_none() || self.teacher.is_some(),
            "rl.teacher is set: give the trainer its model with Trainer::with_teacher"
        );
        let old = old_policy(
            &self.model,
            self.reference
                .as_ref()
                .filter(|_| cfg.reference_at(self.step)),
            self.teacher.as_ref(),
            &self.cfg,
            &b,
            self.predictor.as_ref(),
        );
        let adv = advantages(&b.ro.rewards, cfg.group_size, cfg.advantage);
        self.calibrate_drift(&b, &old);
        let mut walk = self.drift_walk(&b);
        let t_old = started.elapsed().as_secs_f64();
        let x_old = Transfers::since(moved);
        let moved = Transfers::now();
        let lr = cfg.optimizer.lr * cfg.lr_schedule.factor(self.step, cfg.total_steps);
        let updates = self.updates(&b, &old, &adv, walk.as_mut(), lr);
        let t_probe: f64 = updates.iter().map(|u| u.t_probe).sum::<f64>() + t_check;
        let t_update = started.elapsed().as_secs_f64() - t_probe;
        let x_updates = Transfers::since(moved);
        let x_opt: Transfers = updates.iter().map(|u| u.x_opt).sum();
        let x_probe: Transfers = updates.iter().map(|u| u.x_probe).sum();
        let transfers = StepTransfers {
            rollout: x_rollout,
            pi_old: x_old,
            train: x_updates - x_opt - x_probe,
            optimizer: x_opt,
            probe: x_probe + x_check,
        };
        let n_layers = self.model.cfg.n_layers;
        let out = StepOutput {
            step: self.step,
            staleness: self.step.min(cfg.rollout_staleness),
            resp_lens: b.ro.generation.responses.iter().map(Vec::len).collect(),
            adv,
            logp_old: old.logp,
            logp_teacher: old.logp_teacher,
            entropy: old.entropy,
            routes_old: concat_layers(old.routes.iter(), n_layers),
            routes_teacher: old.teacher_routes,
            teacher_mass: old.teacher_mass,
            routes_rollout: b.ro.generation.routes,
            valid: b.ro.generation.batch.valid,
            router_check,
            logp_mu: b.logp_mu,
            rewards: b.ro.rewards,
            correct: b.ro.correct,
            updates,
            t_rollout,
            t_update,
            t_probe,
            t_old,
            transfers,
        };
        self.step += 1;
        out
    }

    /// With `rollout_staleness = k`, keep the policies of the last k steps and this one (the
    /// oldest samples the rollout).
    fn keep_snapshot(&mut self) {
        let k = self.cfg.rollout_staleness;
        if k > 0 {
            self.snapshots.push_back(self.model.clone());
            while self.snapshots.len() > k + 1 {
                self.snapshots.pop_front();
            }
        }
    }

    /// Drift injection with a target share: σ is calibrated once per cell, on π_old's router
    /// distributions of the first rollout batch.
    fn calibrate_drift(&mut self, b: &Batch, old: &OldPolicy) {
        let mc = &self.model.cfg;
        if let Some(DriftInjection::TargetExpertFrac { target }) = self.cfg.drift_injection
            && self.drift_sigma.is_none()
            && mc.is_moe()
        {
            let valid: Vec<bool> = b.mbs.iter().flat_map(|mb| mb.batch.valid.clone()).collect();
            let probs = concat_layers(old.passes.iter().map(|o| &o.probs), mc.n_layers);
            self.drift_sigma = Some(calibrate_sigma(
                &probs,
                &valid,
                mc.n_experts,
                mc.top_k,
                target,
                self.walk_seed,
            ));
        }
    }

    /// The drift walk of this rollout batch (it restarts with each one), if injection is on.
    fn drift_walk(&self, b: &Batch) -> Option<DriftWalk> {
        let mc = &self.model.cfg;
        self.drift_sigma.filter(|_| mc.is_moe()).map(|sigma| {
            DriftWalk::new(
                sigma,
                mc.n_layers,
                b.ro.generation.batch.n_tokens(),
                mc.n_experts,
                derive_seed(self.walk_seed, &self.step.to_string()),
            )
        })
    }
}

/// The engine's expert choices against an f64 router on the same hidden states, where
/// `rl.router_check` asks for them ([`super::engine_router`]).
fn router_check(
    cfg: &RlConfig,
    engine: &Model,
    behaviour: &Model,
    batch: &crate::model::SeqBatch,
) -> Vec<super::engine_router::RouterCheck> {
    if !cfg.router_check {
        return Vec::new();
    }
    super::engine_router::check(
        engine,
        behaviour,
        batch,
        cfg.router_precision,
        matches!(cfg.mismatch, super::Mismatch::Bf16),
    )
}
