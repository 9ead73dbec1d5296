//! One RL step: rollout → π_old recompute → advantages → N minibatch updates, each followed by
//! the drift probe. [`Trainer::step`] returns every tensor-level quantity the metrics need, so
//! instrumentation never reaches into the trainer.

use super::advantage::advantages;
use super::config::{DriftInjection, RlConfig, RoutingMode};
use super::drift::{DriftWalk, calibrate_sigma};
use super::loss::{LossStats, PolicyBatch, micro_share, policy_loss};
use super::rollout::{Rollout, rollout};
use crate::model::{ForwardOptions, LayerRouting, Model, SeqBatch, token_logp};
use crate::optim::AdamW;
use crate::task::Task;
use crate::tensors::{ints, scalar, to_vec};
use crate::util::derive_seed;
use anyhow::{Result, bail};
use burn::tensor::Tensor;
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;
use std::time::Instant;

/// Minibatch `index` of a rollout batch: whole prompt groups, in the rollout batch's layout.
#[derive(Clone, Debug)]
pub struct Minibatch {
    pub index: usize,
    /// Response rows of the rollout batch.
    pub rows: std::ops::Range<usize>,
    /// Response tokens of the rollout batch (flattened in row order).
    pub tokens: std::ops::Range<usize>,
    pub batch: SeqBatch,
    /// Row of the minibatch's flattened logits that predicts each response token.
    pub logit_rows: Vec<usize>,
    pub targets: Vec<usize>,
    /// Response (within the minibatch) of each token, and tokens per response.
    pub seg: Vec<usize>,
    pub lens: Vec<usize>,
}

/// Split a rollout into `n` minibatches of whole prompt groups.
pub fn minibatches(ro: &Rollout, group_size: usize, n: usize) -> Vec<Minibatch> {
    let g = &ro.generation;
    let (seq, pw) = (g.batch.seq, g.prompt_width);
    let rows_per = g.responses.len() / n;
    assert_eq!(rows_per % group_size, 0, "minibatches hold whole groups");
    let mut tok_start = 0;
    (0..n)
        .map(|m| {
            let rows = m * rows_per..(m + 1) * rows_per;
            let batch = SeqBatch {
                batch: rows_per,
                seq,
                tokens: g.batch.tokens[rows.start * seq..rows.end * seq].to_vec(),
                valid: g.batch.valid[rows.start * seq..rows.end * seq].to_vec(),
            };
            let (mut logit_rows, mut targets, mut seg, mut lens) = (vec![], vec![], vec![], vec![]);
            for (i, r) in rows.clone().enumerate() {
                let resp = &g.responses[r];
                for (j, &tok) in resp.iter().enumerate() {
                    logit_rows.push(i * seq + pw + j - 1);
                    targets.push(tok as usize);
                    seg.push(i);
                }
                lens.push(resp.len());
            }
            let tokens = tok_start..tok_start + targets.len();
            tok_start = tokens.end;
            Minibatch {
                index: m,
                rows,
                tokens,
                batch,
                logit_rows,
                targets,
                seg,
                lens,
            }
        })
        .collect()
}

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
    pub lr: f64,
    /// Per MoE layer, `[tokens, k]` over the minibatch layout: native routes of the pre-step
    /// policy (from the update forward), ids the update forward ran, native routes of the
    /// updated policy (drift probe), and π_old's native routes.
    pub routes_before: Vec<Vec<u16>>,
    pub routes_used: Vec<Vec<u16>>,
    pub routes_after: Vec<Vec<u16>>,
    pub routes_old: Vec<Vec<u16>>,
    /// Per MoE layer router distributions `[tokens, n_experts]` before and after the step.
    pub probs_before: Vec<Vec<f32>>,
    pub probs_after: Vec<Vec<f32>>,
    /// Real (non-padding) tokens of the minibatch layout.
    pub valid: Vec<bool>,
    /// Per response token of the minibatch: log π_old, rollout engine, reference (log π_θ before
    /// the step is `stats.logp`).
    pub logp_old: Vec<f32>,
    pub logp_mu: Vec<f32>,
    pub logp_ref: Vec<f32>,
    /// Advantages and lengths of the minibatch's responses.
    pub adv: Vec<f32>,
    pub lens: Vec<usize>,
    pub t_update: f64,
    pub t_probe: f64,
}

/// Everything one RL step produced.
#[derive(Clone, Debug)]
pub struct StepOutput {
    pub step: usize,
    pub rewards: Vec<f32>,
    pub correct: Vec<bool>,
    pub adv: Vec<f32>,
    pub resp_lens: Vec<usize>,
    /// Per response token of the rollout batch: rollout-engine and π_old log-probs.
    pub logp_mu: Vec<f32>,
    pub logp_old: Vec<f32>,
    /// Mean full-vocabulary entropy of π_old on the sampled positions.
    pub entropy: f32,
    /// Per MoE layer over the whole rollout layout `[tokens, k]`: rollout-engine routes
    /// (`NO_ROUTE` where never routed) and π_old's native routes; real-token mask.
    pub routes_rollout: Vec<Vec<u16>>,
    pub routes_old: Vec<Vec<u16>>,
    pub valid: Vec<bool>,
    pub updates: Vec<UpdateRecord>,
    /// σ of the drift walk in force (given or calibrated), if injection is on.
    pub drift_sigma: Option<f64>,
    pub t_rollout: f64,
    pub t_update: f64,
    pub t_probe: f64,
}

/// An RL cell's trainer: the policy, its optimizer, the frozen reference and the RNG streams.
pub struct Trainer {
    pub cfg: RlConfig,
    pub model: Model,
    pub reference: Option<Model>,
    pub task: Task,
    opt: AdamW,
    sample_rng: Xoshiro256PlusPlus,
    noise_rng: Xoshiro256PlusPlus,
    walk_seed: u64,
    pub step: usize,
    pub drift_sigma: Option<f64>,
    /// Run the drift probe after every update (default true).
    pub probe: bool,
}

impl Trainer {
    pub fn new(cfg: RlConfig, model: Model, task: Task, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let need = task.cfg.max_prompt_tokens() + task.cfg.max_answer_tokens();
        if need > model.cfg.max_seq_len {
            bail!(
                "task needs sequences of up to {need} tokens but model.max_seq_len is {}",
                model.cfg.max_seq_len
            );
        }
        // The frozen cold-start model: the KL term's reference, and the `kl_ref` metric.
        let reference =
            (cfg.algorithm.kl_beta() > 0.0 || cfg.measure_kl_ref).then(|| model.inner());
        let opt = AdamW::new(cfg.optimizer.clone(), &model.weights);
        let drift_sigma = match cfg.drift_injection {
            Some(DriftInjection::Sigma { sigma }) => Some(sigma),
            _ => None,
        };
        Ok(Trainer {
            opt,
            reference,
            task,
            model: model.inner(),
            sample_rng: Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "rl-sample")),
            noise_rng: Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "rl-mismatch")),
            walk_seed: derive_seed(seed, "rl-drift-walk"),
            step: 0,
            drift_sigma,
            probe: true,
            cfg,
        })
    }

    /// Forward options for minibatch `mb` in this trainer's routing mode.
    fn routing<'a>(
        &self,
        forced: Option<&'a [Vec<u16>]>,
        offsets: Option<Vec<burn::tensor::Tensor<2>>>,
    ) -> ForwardOptions<'a> {
        let n = self.model.cfg.n_layers;
        let mut offsets = offsets.map(|v| v.into_iter());
        let routing = (0..n)
            .map(|l| LayerRouting {
                forced: forced.map(|f| f[l].as_slice()),
                logit_offset: offsets.as_mut().and_then(|o| o.next()),
            })
            .collect();
        ForwardOptions {
            routing,
            want_probs: true,
            round_bf16: false,
        }
    }

    /// One RL step. Never panics on a non-finite loss or gradient: the update is skipped and
    /// the record says why.
    pub fn step(&mut self) -> StepOutput {
        let cfg = self.cfg.clone();
        let started = Instant::now();
        let ro = rollout(
            &self.model,
            &self.task,
            &cfg,
            &mut self.sample_rng,
            &mut self.noise_rng,
        );
        let t_rollout = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let adv = advantages(&ro.rewards, cfg.group_size, cfg.advantage);
        let n_micro = cfg.micro_per_minibatch();
        let mbs = minibatches(&ro, cfg.group_size, cfg.minibatches);
        // Micro-batch `j` of minibatch `m` is `micros[m * n_micro + j]`.
        let micros = minibatches(&ro, cfg.group_size, cfg.minibatches * n_micro);
        let logp_mu: Vec<f32> = ro.generation.logp.iter().flatten().copied().collect();
        let k = self.model.cfg.top_k;
        let n_layers = self.model.cfg.n_layers;
        let tok_per_row = ro.generation.batch.seq;
        let token_range = |mb: &Minibatch| mb.rows.start * tok_per_row..mb.rows.end * tok_per_row;
        let rollout_routes: Vec<Vec<Vec<u16>>> = micros
            .iter()
            .map(|mb| {
                let r = token_range(mb);
                ro.generation
                    .routes
                    .iter()
                    .map(|l| l[r.start * k..r.end * k].to_vec())
                    .collect()
            })
            .collect();

        // π_old: one no-graph recompute per micro-batch, before the first update, in exactly the
        // layout and routing the updates will use, so minibatch 1 is exactly on-policy.
        let inner = self.model.inner();
        let temp = cfg.temperature;
        let old: Vec<OldPass> = crate::util::par_map(micros.len(), |i| {
            let mb = &micros[i];
            let forced = (cfg.routing == RoutingMode::R3).then(|| rollout_routes[i].as_slice());
            let out = inner.forward(&mb.batch, &self.routing(forced, None));
            let device = out.logits.device();
            let rows = || ints(&mb.logit_rows, [mb.logit_rows.len()], &device);
            let picked = out.logits.select(0, rows());
            let host = to_vec(picked.clone());
            let (routes, probs) = native_and_probs(out.traces);
            OldPass {
                entropy_sum: entropy_sum(&host, self.model.cfg.vocab_size, temp),
                logp: to_vec(token_logp(picked, &mb.targets, temp)),
                routes,
                probs,
                logp_ref: self.reference.as_ref().map(|r| {
                    let o = r.forward(&mb.batch, &ForwardOptions::default());
                    to_vec(token_logp(o.logits.select(0, rows()), &mb.targets, temp))
                }),
            }
        });
        let logp_old: Vec<f32> = old.iter().flat_map(|o| o.logp.iter().copied()).collect();
        let ent_sum: f64 = old.iter().map(|o| o.entropy_sum).sum();
        let entropy = (ent_sum / logp_old.len().max(1) as f64) as f32;
        let routes_old: Vec<Vec<Vec<u16>>> = old
            .chunks(n_micro)
            .map(|c| concat_layers(c.iter().map(|o| &o.routes), n_layers))
            .collect();

        // Drift injection: σ resolved once per cell; the walk restarts with each rollout batch.
        if let Some(DriftInjection::TargetExpertFrac { target }) = cfg.drift_injection
            && self.drift_sigma.is_none()
            && self.model.cfg.is_moe()
        {
            let valid: Vec<bool> = mbs.iter().flat_map(|mb| mb.batch.valid.clone()).collect();
            let probs = concat_layers(old.iter().map(|o| &o.probs), n_layers);
            self.drift_sigma = Some(calibrate_sigma(
                &probs,
                &valid,
                self.model.cfg.n_experts,
                k,
                target,
                self.walk_seed,
            ));
        }
        let mut walk = self
            .drift_sigma
            .filter(|_| self.model.cfg.is_moe())
            .map(|sigma| {
                DriftWalk::new(
                    sigma,
                    self.model.cfg.n_layers,
                    ro.generation.batch.n_tokens(),
                    self.model.cfg.n_experts,
                    derive_seed(self.walk_seed, &self.step.to_string()),
                )
            });

        let lr = cfg.optimizer.lr * cfg.lr_schedule.factor(self.step, cfg.total_steps);
        let mut updates = Vec::with_capacity(mbs.len());
        let mut t_probe_total = 0.0;
        for (m, mb) in mbs.iter().enumerate() {
            let t_up = Instant::now();
            let device = self.model.device();
            let active_all = mb.batch.valid.iter().filter(|&&v| v).count().max(1);
            // Phase 1, per micro-batch: forward and policy loss.
            let mut fwd: Vec<MicroForward> = crate::util::par_map(n_micro, |j| {
                let i = m * n_micro + j;
                let mc = &micros[i];
                let offsets = walk
                    .as_ref()
                    .filter(|w| w.steps > 0)
                    .map(|w| w.offsets(token_range(mc), &device));
                let forced: Option<&[Vec<u16>]> = match cfg.routing {
                    RoutingMode::Native => None,
                    RoutingMode::R2 => Some(&old[i].routes),
                    RoutingMode::R3 => Some(&rollout_routes[i]),
                };
                let train = self.model.require_grad();
                let out = train.forward(&mc.batch, &self.routing(forced, offsets));
                let rows_idx = ints(&mc.logit_rows, [mc.logit_rows.len()], &device);
                let logp = token_logp(out.logits.select(0, rows_idx), &mc.targets, temp);
                let pb = PolicyBatch {
                    logp,
                    logp_old: logp_old[mc.tokens.clone()].to_vec(),
                    logp_mu: logp_mu[mc.tokens.clone()].to_vec(),
                    logp_ref: old[i].logp_ref.clone(),
                    adv: adv[mc.rows.clone()].to_vec(),
                    rewards: ro.rewards[mc.rows.clone()].to_vec(),
                    seg: mc.seg.clone(),
                    lens: mc.lens.clone(),
                    group_size: cfg.group_size,
                };
                let (ploss, stats) = policy_loss(&cfg.algorithm, &pb, cfg.tis.as_ref());
                let share = micro_share(&cfg.algorithm, &pb, mb.rows.len(), mb.tokens.len());
                // The z-loss averages over real tokens.
                let active = mc.batch.valid.iter().filter(|&&v| v).count();
                let routes_used = out.traces.iter().map(|t| t.used.clone()).collect();
                let (routes_before, probs_before) = native_and_probs(out.traces);
                MicroForward {
                    stats,
                    share,
                    active_share: active as f32 / active_all as f32,
                    loss_z: scalar(out.z_loss.clone().inner()),
                    partial: Some((ploss * share, out.z_loss)),
                    load: out.load,
                    routes_before,
                    routes_used,
                    probs_before,
                    train,
                }
            });
            // The load-balancing loss of the whole minibatch, split over its micro-batches.
            let loads: Vec<&[crate::model::moe::LoadTerms]> =
                fwd.iter().map(|f| f.load.as_slice()).collect();
            let aux = crate::model::aux_loss_of_parts(&loads, k, &fwd[0].train.device());
            let loss_aux: f32 = aux.iter().map(|a| scalar(a.clone().inner())).sum();
            // Phase 2, per micro-batch: total loss and backward.
            let back: Vec<(f32, Option<Vec<Tensor<2>>>)> =
                crate::util::par_map_mut(&mut fwd, |j, f| {
                    let (ploss, z) = f.partial.take().expect("phase 1 ran");
                    let total = ploss
                        + aux[j].clone() * cfg.aux_coef as f32
                        + z * (cfg.z_coef as f32 * f.active_share);
                    let loss_total = scalar(total.clone().inner());
                    let grads = loss_total
                        .is_finite()
                        .then(|| AdamW::collect_grads(&f.train.weights, &total.backward()));
                    (loss_total, grads)
                });
            let loss_z: f32 = fwd.iter().map(|f| f.active_share * f.loss_z).sum();
            let loss_total: f32 = back.iter().map(|b| b.0).sum();
            let routes_before = concat_layers(fwd.iter().map(|f| &f.routes_before), n_layers);
            let routes_used = concat_layers(fwd.iter().map(|f| &f.routes_used), n_layers);
            let probs_before = concat_layers(fwd.iter().map(|f| &f.probs_before), n_layers);
            let finite = loss_total.is_finite() && back.iter().all(|b| b.1.is_some());
            // Gradients of the micro-batches, summed in order.
            let grads = back
                .into_iter()
                .filter_map(|b| b.1)
                .reduce(|acc, g| acc.into_iter().zip(g).map(|(a, b)| a + b).collect());
            let stats_parts = fwd.into_iter().map(|f| (f.stats, f.share)).collect();
            let stats = LossStats::concat(stats_parts);
            let (grad_norm, applied, skip_reason) = match grads {
                Some(g) if finite => {
                    let (w, report) = self.opt.step(self.model.weights.clone(), g, lr);
                    self.model.weights = w;
                    (
                        report.grad_norm,
                        report.applied,
                        (!report.applied).then(|| "non-finite gradient".to_string()),
                    )
                }
                _ => (f32::NAN, false, Some("non-finite loss".to_string())),
            };
            if let Some(w) = walk.as_mut() {
                w.advance();
            }
            let t_update = t_up.elapsed().as_secs_f64();

            // Drift probe: the updated policy on the same micro-batches, native routes, no graph,
            // with the walk as the next update would see it.
            let t_pr = Instant::now();
            let (routes_after, probs_after) = if self.probe {
                let probed: Vec<(Vec<Vec<u16>>, Vec<Vec<f32>>)> =
                    crate::util::par_map(n_micro, |j| {
                        let mc = &micros[m * n_micro + j];
                        let offsets = walk.as_ref().map(|w| w.offsets(token_range(mc), &device));
                        let o = self.model.forward(&mc.batch, &self.routing(None, offsets));
                        native_and_probs(o.traces)
                    });
                (
                    concat_layers(probed.iter().map(|p| &p.0), n_layers),
                    concat_layers(probed.iter().map(|p| &p.1), n_layers),
                )
            } else {
                (Vec::new(), Vec::new())
            };
            let t_probe = t_pr.elapsed().as_secs_f64();
            t_probe_total += t_probe;
            let logp_ref = old[m * n_micro..(m + 1) * n_micro]
                .iter()
                .flat_map(|o| o.logp_ref.iter().flatten().copied())
                .collect();
            updates.push(UpdateRecord {
                minibatch: m,
                loss_policy: stats.loss_policy,
                stats,
                loss_aux,
                loss_z,
                loss_total,
                grad_norm,
                applied,
                skip_reason,
                lr,
                routes_before,
                routes_used,
                routes_after,
                routes_old: routes_old[m].clone(),
                probs_before,
                probs_after,
                valid: mb.batch.valid.clone(),
                logp_old: logp_old[mb.tokens.clone()].to_vec(),
                logp_mu: logp_mu[mb.tokens.clone()].to_vec(),
                logp_ref,
                adv: adv[mb.rows.clone()].to_vec(),
                lens: mb.lens.clone(),
                t_update,
                t_probe,
            });
        }
        let t_update = started.elapsed().as_secs_f64() - t_probe_total;
        let out = StepOutput {
            step: self.step,
            resp_lens: ro.generation.responses.iter().map(Vec::len).collect(),
            adv,
            logp_mu,
            logp_old,
            entropy,
            routes_old: concat_layers(routes_old.iter(), n_layers),
            routes_rollout: ro.generation.routes.clone(),
            valid: ro.generation.batch.valid.clone(),
            rewards: ro.rewards,
            correct: ro.correct,
            updates,
            drift_sigma: self.drift_sigma,
            t_rollout,
            t_update,
            t_probe: t_probe_total,
        };
        self.step += 1;
        out
    }
}

/// What the π_old pass computed for one micro-batch.
struct OldPass {
    entropy_sum: f64,
    logp: Vec<f32>,
    /// Per MoE layer: native routes and router distributions.
    routes: Vec<Vec<u16>>,
    probs: Vec<Vec<f32>>,
    logp_ref: Option<Vec<f32>>,
}

/// A micro-batch after its forward: the graph's leaves, the loss terms still to be combined, and
/// what the update record needs.
struct MicroForward {
    train: Model,
    stats: LossStats,
    share: f32,
    active_share: f32,
    loss_z: f32,
    /// Share-weighted policy loss and z-loss, with graph (taken by the backward phase).
    partial: Option<(Tensor<1>, Tensor<1>)>,
    load: Vec<crate::model::moe::LoadTerms>,
    routes_before: Vec<Vec<u16>>,
    routes_used: Vec<Vec<u16>>,
    probs_before: Vec<Vec<f32>>,
}

/// Per MoE layer: the native routes and the router distributions of a forward's traces.
fn native_and_probs(traces: Vec<crate::model::RoutingTrace>) -> (Vec<Vec<u16>>, Vec<Vec<f32>>) {
    traces
        .into_iter()
        .map(|t| (t.native, t.probs.unwrap_or_default()))
        .unzip()
}

/// Per-layer vectors of consecutive parts of a layout, joined layer by layer. A model without
/// MoE layers has no per-layer entries, so the result is empty then.
fn concat_layers<'a, T: Clone + 'a>(
    parts: impl Iterator<Item = &'a Vec<Vec<T>>>,
    n_layers: usize,
) -> Vec<Vec<T>> {
    let parts: Vec<&Vec<Vec<T>>> = parts.collect();
    let n = parts.first().map_or(0, |p| p.len()).min(n_layers);
    (0..n)
        .map(|l| parts.iter().flat_map(|p| p[l].iter().cloned()).collect())
        .collect()
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
