//! Predictive Routing Replay, PR² (arXiv 2606.00395). The paper's text was not reachable (a
//! stored copy of its HTML holds the abstract only); this follows its first author's
//! implementation and reference document, which cite the paper's Eq. 4–8, Algorithm 3 and
//! Appendix E.1: radixark/miles PR #1362 at `3cc09866`, `docs/predictive-routing-replay.md` and
//! the router patch `miles/backends/megatron_utils/predictive_router_replay.py`
//! (`patched_forward`, `RouterPredictiveAction`), and the same design in DaizeDong/verl
//! `verl/utils/megatron/router_replay_patch.py` at `01f3e5b0` (the router's `forward`).
//!
//! - One predictor per MoE layer, a linear map W_p `[d_model, n_experts]` without bias,
//!   **zero-initialised**, so PR² starts as plain replay (R2).
//! - Routing (Eq. 4–6): in π_old's pass, per token, ρ̂ = softmax(p_old + h_old W_p) with p_old the
//!   router logits and h_old the router input; the predicted top-k Î is the route every update
//!   of the rollout batch replays (R2's forced routes). Here ln π_old's router probabilities
//!   stand in for p_old (a softmax is unchanged by a per-token shift), and the top-k is taken on
//!   p_old · exp(h W_p), so that W_p = 0 picks exactly R2's routes (tested bitwise).
//! - π_old's pass, `gates` ([`Pr2Gates`]): both authors' codes route π_old's pass through the
//!   shifted logits — miles' `RECORD` branch returns `self.routing(effective_logits)` with
//!   `effective_logits = logits + predicted_delta_logits` (the delta `bias_predictor(input)`,
//!   its stabiliser the identity at the default `layer_scale_schedule = "none"`), and verl's
//!   `RECORD` branch `self.routing(logits + delta_logits)` — so π_old's experts *and* its gate
//!   weights are those of `routing(logits + h W_p)`. Here π_old's pass runs natively (its native
//!   routes, router distributions and inputs give the drift, the prediction and the loss's
//!   target), then once more with the predicted routes forced, whose log-probs are π_old's.
//!   In that second pass, with `gates = "shifted"` (the default, the authors' form) every MoE
//!   layer's router logits carry the offset h W_p, so the gates are the softmax of the shifted
//!   logits at the predicted experts (renormalised over the k when `norm_topk`): Megatron's
//!   `routing` of the shifted logits (tested by hand). The updates replay the predicted experts
//!   with the live, unshifted router's gates (as the authors' updates run the router without
//!   the predictor), so once W_p ≠ 0 minibatch 1's ratios differ from 1 by the gate shift.
//!   `gates = "native"` keeps driftlab's earlier form: the predicted experts forced, the gates
//!   the unshifted router's, so minibatch 1 stays exactly on-policy (tested). Deviation (both
//!   forms): the prediction and the offset at layer l use the native pass's input h_l, where the
//!   authors' pass feeds layer l the output of layers < l routed by their predictions. Until
//!   2026-12-05 π_old kept the native pass's log-probs, so once W_p moved a route, minibatch
//!   1's ratios were not 1 there (fix_leaderboard's `grpo_pr2` arm ran that version, at
//!   abc03f4); until 2026-12-07 the second pass's gates were the unshifted router's (now
//!   `gates = "native"`), so PR² runs from before then differ from the default's.
//! - Where the sampler routes: natively (the paper's rollout uses the prediction; not verified
//!   against its text).
//! - Loss (Eq. 7–8, "kl-post"): Σ_l mean_t KL(sg(ρ_t) ‖ ρ̂_t), ρ the live router's distribution at
//!   the current minibatch on the same tokens (before its optimizer step: the router as the
//!   earlier minibatches left it), only W_p learning; skipped on a step's first minibatch,
//!   where the router has not moved (Algorithm 3).
//! - Optimizer: Adam in its own parameter group at the actor's learning rate × `lr_mult`
//!   (default 1e3; the paper sweeps 5e1–1e4), β = (0.9, 0.999), ε = 1e-8, no weight decay
//!   (an assumption: the miles code steps W_p with the actor's optimizer). Softmax routers
//!   only; with r2 routing.
//!
//! Logged: `pr2_loss` (the mean KL of the update, summed over layers); how well the prediction
//! holds is `replay_stale_frac`, the share of replayed slots the live router would not pick.

use crate::model::native_topk;
use crate::rl::config::{Pr2Config, Pr2Gates};

/// The per-layer predictors and their Adam state.
#[derive(Clone, Debug)]
pub struct Predictor {
    d: usize,
    e: usize,
    k: usize,
    lr_mult: f64,
    /// Where π_old's pass takes its gates from.
    pub gates: Pr2Gates,
    /// Per layer, W_p row-major `[d, e]`.
    pub w: Vec<Vec<f32>>,
    m: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    t: i32,
}

impl Predictor {
    /// Zero-initialised predictors for `n_layers` layers of `d` inputs and `e` experts, top-`k`.
    pub fn new(n_layers: usize, d: usize, e: usize, k: usize, cfg: &Pr2Config) -> Self {
        let z = || vec![vec![0f32; d * e]; n_layers];
        Predictor {
            d,
            e,
            k,
            lr_mult: cfg.lr_mult,
            gates: cfg.gates,
            w: z(),
            m: z(),
            v: z(),
            t: 0,
        }
    }

    /// h W_p of `layer` for every token of `h` `[T, d]`, `[T, e]`.
    fn delta(&self, layer: usize, h: &[f32]) -> Vec<f32> {
        let (d, e, w) = (self.d, self.e, &self.w[layer]);
        let mut out = vec![0f32; h.len() / d * e];
        for (row, o) in h.chunks_exact(d).zip(out.chunks_exact_mut(e)) {
            for (i, &x) in row.iter().enumerate() {
                if x != 0.0 {
                    for (oj, &wj) in o.iter_mut().zip(&w[i * e..(i + 1) * e]) {
                        *oj += x * wj;
                    }
                }
            }
        }
        out
    }

    /// The predicted top-k of `layer` `[T, k]` (descending), from π_old's router
    /// distribution `probs_old` `[T, e]` and router inputs `h` `[T, d]`.
    pub fn routes(&self, layer: usize, h: &[f32], probs_old: &[f32]) -> Vec<u16> {
        self.top_k(&self.delta(layer, h), probs_old)
    }

    /// The top-k of `probs_old · exp(delta)`, `[T, k]`.
    fn top_k(&self, delta: &[f32], probs_old: &[f32]) -> Vec<u16> {
        let scores: Vec<f32> = probs_old
            .iter()
            .zip(delta)
            .map(|(&p, &x)| p * x.exp())
            .collect();
        native_topk(&scores, self.e, self.k)
    }

    /// π_old's pass at `layer`: the predicted top-k `[T, k]` it forces (as
    /// [`Predictor::routes`]) and, with `gates = "shifted"`, the offset h W_p `[T, e]` its router
    /// logits carry, so that its gates are those of the shifted logits at those experts (`None`
    /// with `gates = "native"`: the unshifted router's gates).
    pub fn old_pass(
        &self,
        layer: usize,
        h: &[f32],
        probs_old: &[f32],
    ) -> (Vec<u16>, Option<Vec<f32>>) {
        let delta = self.delta(layer, h);
        let routes = self.top_k(&delta, probs_old);
        (routes, (self.gates == Pr2Gates::Shifted).then_some(delta))
    }

    /// Mean over the `valid` tokens of KL(target ‖ softmax(ln probs_old + h W_p)) for `layer`,
    /// and its gradient with respect to W_p (`h ⊗ (ρ̂ − target)`, averaged), `[d, e]`.
    pub fn loss_grad(
        &self,
        layer: usize,
        h: &[f32],
        probs_old: &[f32],
        target: &[f32],
        valid: &[bool],
    ) -> (f64, Vec<f32>) {
        let (d, e) = (self.d, self.e);
        let delta = self.delta(layer, h);
        let mut grad = vec![0f64; d * e];
        let (mut kl, mut n) = (0.0, 0usize);
        let mut q = vec![0f64; e];
        for t in 0..valid.len() {
            if !valid[t] {
                continue;
            }
            let (p, x, tg) = (
                &probs_old[t * e..(t + 1) * e],
                &delta[t * e..(t + 1) * e],
                &target[t * e..(t + 1) * e],
            );
            let logits: Vec<f64> = p
                .iter()
                .zip(x)
                .map(|(&p, &x)| f64::from(p.max(1e-30)).ln() + f64::from(x))
                .collect();
            let mx = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = logits.iter().map(|l| (l - mx).exp()).sum();
            for (qj, l) in q.iter_mut().zip(&logits) {
                *qj = (l - mx).exp() / z;
            }
            for (j, &tj) in tg.iter().enumerate() {
                let tj = f64::from(tj);
                if tj > 0.0 {
                    kl += tj * (tj.ln() - q[j].max(1e-300).ln());
                }
            }
            let hrow = &h[t * d..(t + 1) * d];
            for (i, &hi) in hrow.iter().enumerate() {
                let hi = f64::from(hi);
                for j in 0..e {
                    grad[i * e + j] += hi * (q[j] - f64::from(tg[j]));
                }
            }
            n += 1;
        }
        let n = n.max(1) as f64;
        (kl / n, grad.iter().map(|g| (g / n) as f32).collect())
    }

    /// One Adam step on every layer's W_p at `actor_lr × lr_mult`.
    pub fn step(&mut self, grads: &[Vec<f32>], actor_lr: f64) {
        let (b1, b2, eps) = (0.9f64, 0.999f64, 1e-8f64);
        self.t += 1;
        let lr = actor_lr * self.lr_mult;
        let (c1, c2) = (1.0 - b1.powi(self.t), 1.0 - b2.powi(self.t));
        for (l, g) in grads.iter().enumerate() {
            for (i, &gi) in g.iter().enumerate() {
                let gi = f64::from(gi);
                let m = b1 * f64::from(self.m[l][i]) + (1.0 - b1) * gi;
                let v = b2 * f64::from(self.v[l][i]) + (1.0 - b2) * gi * gi;
                self.m[l][i] = m as f32;
                self.v[l][i] = v as f32;
                let upd = lr * (m / c1) / ((v / c2).sqrt() + eps);
                self.w[l][i] = (f64::from(self.w[l][i]) - upd) as f32;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pred() -> Predictor {
        Predictor::new(
            1,
            2,
            3,
            1,
            &Pr2Config {
                lr_mult: 1.0,
                ..Pr2Config::default()
            },
        )
    }

    /// Zero-initialised, the prediction is π_old's own top-k, and a predictor whose target is
    /// π_old's distribution has no loss and no gradient.
    #[test]
    fn a_zero_predictor_predicts_the_old_routes_with_no_loss() {
        let p = pred();
        let probs = [0.2f32, 0.5, 0.3, 0.6, 0.1, 0.3];
        let h = [1.0f32, -1.0, 0.5, 2.0];
        assert_eq!(p.routes(0, &h, &probs), vec![1, 0]);
        let (kl, g) = p.loss_grad(0, &h, &probs, &probs, &[true, true]);
        assert!(
            kl.abs() < 1e-6 && g.iter().all(|x| x.abs() < 1e-6),
            "{kl} {g:?}"
        );
    }

    /// By hand: one token, h = (1, 0), π_old uniform over 3 experts, target (0.5, 0.25, 0.25):
    /// the gradient is h ⊗ (ρ̂ − target) = row 0 (1/3 − 1/2, 1/3 − 1/4, 1/3 − 1/4), row 1 zero;
    /// one Adam step moves each weight by lr against its gradient's sign, which makes expert 0
    /// the prediction.
    #[test]
    fn the_kl_gradient_and_one_adam_step_by_hand() {
        let mut p = pred();
        let third = 1.0f32 / 3.0;
        let probs = [third; 3];
        let h = [1.0f32, 0.0];
        let target = [0.5f32, 0.25, 0.25];
        let (kl, g) = p.loss_grad(0, &h, &probs, &target, &[true]);
        let want_kl = 0.5 * (0.5f64 * 3.0).ln() + 2.0 * 0.25 * (0.25f64 * 3.0).ln();
        assert!((kl - want_kl).abs() < 1e-6, "{kl} vs {want_kl}");
        let want = [third - 0.5, third - 0.25, third - 0.25, 0.0, 0.0, 0.0];
        assert!(
            g.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6),
            "{g:?}"
        );
        p.step(&[g], 0.1);
        assert!((p.w[0][0] - 0.1).abs() < 1e-6 && (p.w[0][1] + 0.1).abs() < 1e-6);
        assert_eq!(p.w[0][3], 0.0);
        assert_eq!(p.routes(0, &h, &probs), vec![0]);
    }
}
