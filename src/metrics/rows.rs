//! One row per update, per layer and per step, with the column names of DESIGN §7–§8.

use super::collapse::Event;
use super::drift::{
    DEAD_EXPERT_LOAD, dead_experts, expert_load, load_max_violation, mean_entropy, mean_js,
    model_drift, router_confidence,
};
pub use super::mismatch::{mismatch_stats, mismatch_suite};
use super::ratio::{ess, k3, mean_var, within_seq_var};
pub use super::teacher::{teacher_kl, teacher_routing};
use crate::model::{FfnKind, NO_ROUTE, RouterKind};
use crate::rl::{AlgorithmKind, OldLogp, RoutingMode, StepOutput, UpdateRecord};

/// A cell value. Floats are nullable (a metric that does not apply is null, never a fake 0).
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    S(String),
    I(i64),
    F(Option<f64>),
}

pub type Row = Vec<(&'static str, Val)>;

/// A float cell: null unless finite.
pub(crate) fn f(x: f64) -> Val {
    Val::F(x.is_finite().then_some(x))
}

/// Identity of a cell: the columns every frame starts with ([`super::schema::IDENTITY`]).
#[derive(Clone, Debug, PartialEq)]
pub struct CellId {
    pub experiment: String,
    pub regime: String,
    pub arm: String,
    pub algorithm: AlgorithmKind,
    pub routing: RoutingMode,
    pub ffn: FfnKind,
    pub old_logp: OldLogp,
    pub staleness: usize,
    pub n_layers: usize,
    pub router: RouterKind,
    /// The router-shift floor when `router_shift` is on.
    pub router_shift: Option<f64>,
    pub seed: u64,
}

impl CellId {
    pub fn row(&self, step: usize) -> Row {
        vec![
            ("experiment", Val::S(self.experiment.clone())),
            ("regime", Val::S(self.regime.clone())),
            ("arm", Val::S(self.arm.clone())),
            ("algorithm", Val::S(self.algorithm.name().into())),
            ("routing", Val::S(self.routing.name().into())),
            ("ffn", Val::S(self.ffn.name().into())),
            ("old_logp", Val::S(self.old_logp.name().into())),
            ("rollout_staleness", Val::I(self.staleness as i64)),
            ("n_layers", Val::I(self.n_layers as i64)),
            ("router", Val::S(self.router.name().into())),
            (
                "router_shift",
                Val::S(
                    if self.router_shift.is_some() {
                        "on"
                    } else {
                        "off"
                    }
                    .into(),
                ),
            ),
            ("seed", Val::I(self.seed as i64)),
            ("step", Val::I(step as i64)),
        ]
    }
}

/// The largest token ratio of an update (−∞ for none); the frames' `ratio_tok_max` and the
/// collapse detector's ratio-explosion signal.
pub fn ratio_tok_max(ratio_tok: &[f32]) -> f64 {
    ratio_tok
        .iter()
        .map(|&x| f64::from(x))
        .fold(f64::NEG_INFINITY, f64::max)
}

/// One event of the collapse detector.
pub fn event_row(id: &CellId, e: &Event) -> Row {
    let mut row = id.row(e.step);
    row.extend([
        ("kind", Val::S(e.kind.name().into())),
        ("value", f(e.value)),
        ("threshold", f(e.threshold)),
        ("detail", Val::S(e.detail.clone())),
    ]);
    row
}

/// Model shape the rows need.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub k: usize,
    pub n_experts: usize,
    pub moe: bool,
}

/// Per-update metrics (DESIGN §7).
pub fn update_row(id: &CellId, step: usize, u: &UpdateRecord, shape: Shape) -> Row {
    let st = &u.stats;
    let w: Vec<f64> = st.ratio_tok.iter().map(|&x| f64::from(x)).collect();
    let lw: Vec<f64> = w.iter().map(|x| x.ln()).collect();
    let (rmean, rvar) = mean_var(&w);
    let seg: Vec<usize> = u
        .lens
        .iter()
        .enumerate()
        .flat_map(|(i, &l)| std::iter::repeat_n(i, l))
        .collect();
    let seqr: Vec<f64> = st.ratio_seq.iter().map(|&x| f64::from(x)).collect();
    let n = w.len().max(1) as f64;
    let frac = |v: &[bool]| v.iter().filter(|&&b| b).count() as f64 / v.len().max(1) as f64;
    let clip_tok: Vec<bool> = st
        .clip_low
        .iter()
        .zip(&st.clip_high)
        .map(|(a, b)| *a || *b)
        .collect();
    let mut row = id.row(step);
    row.push(("minibatch", Val::I(u.minibatch as i64)));
    row.extend([
        ("ratio_tok_mean", f(rmean)),
        ("ratio_tok_var", f(rvar)),
        ("ratio_tok_max", f(ratio_tok_max(&st.ratio_tok))),
        (
            "ratio_tok_min",
            f(w.iter().copied().fold(f64::INFINITY, f64::min)),
        ),
        ("logratio_tok_var", f(mean_var(&lw).1)),
        ("ratio_seq_var", f(mean_var(&seqr).1)),
        (
            "logratio_within_seq_var",
            f(within_seq_var(&lw, &seg, u.lens.len())),
        ),
        ("ess", f(ess(&w))),
        ("clip_frac_tok", f(frac(&clip_tok))),
        ("clip_frac_low", f(frac(&st.clip_low))),
        ("clip_frac_high", f(frac(&st.clip_high))),
        ("clip_frac_seq", f(frac(&st.clip_seq))),
        ("kl_old", f(-lw.iter().sum::<f64>() / n)),
        (
            "kl_ref",
            if u.logp_ref.is_empty() {
                Val::F(None)
            } else {
                f(k3(&u.stats.logp, &u.logp_ref))
            },
        ),
        ("grad_norm", f(f64::from(u.grad_norm))),
        ("loss_policy", f(f64::from(u.loss_policy))),
        ("loss_aux", f(f64::from(u.loss_aux))),
        ("loss_total", f(f64::from(u.loss_total))),
        ("applied", Val::I(i64::from(u.applied))),
        ("lr", f(u.lr)),
        (
            "resp_len_mean",
            f(u.lens.iter().sum::<usize>() as f64 / u.lens.len().max(1) as f64),
        ),
        ("n_tokens", Val::I(w.len() as i64)),
    ]);
    row.extend(router_shift_cols(id, st));
    // The stability fixes' logged shares (schema: crate::rl::fixes::SHARES).
    row.extend(
        (st.masked.shares().into_iter()).map(|(col, share)| (col, share.map_or(Val::F(None), f))),
    );
    row.extend([
        ("pr2_loss", u.pr2_loss.map_or(Val::F(None), f)),
        (
            "replay_replaced_frac",
            st.replay_filter
                .filter(|&(n, _)| n > 0)
                .map_or(Val::F(None), |(n, r)| f(r as f64 / n as f64)),
        ),
    ]);
    row.extend(drift_cols(id, u, shape));
    row
}

/// The router-shift columns of an update (null when the weighting is off).
fn router_shift_cols(id: &CellId, st: &crate::rl::loss::LossStats) -> [(&'static str, Val); 2] {
    let shift = st.router_shift.as_deref().unwrap_or_default();
    // γ̃ is stored as f32: compare with the floor as f32 (0.8 widens to 0.800000011920929).
    let floored = |floor: f64| shift.iter().filter(|&&g| g <= floor as f32).count();
    [
        (
            "router_shift_mean",
            Val::F(
                (!shift.is_empty())
                    .then(|| shift.iter().map(|&g| f64::from(g)).sum::<f64>() / shift.len() as f64),
            ),
        ),
        (
            "router_shift_floored",
            Val::F(
                id.router_shift
                    .filter(|_| !shift.is_empty())
                    .map(|fl| floored(fl) as f64 / shift.len() as f64),
            ),
        ),
    ]
}

/// Router confidence ([`router_confidence`]) averaged over the MoE layers; null for a dense
/// model.
fn confidence_means(probs: &[Vec<f32>], valid: &[bool], shape: Shape) -> [Val; 3] {
    let per: Vec<(f64, f64, f64)> = probs
        .iter()
        .filter_map(|p| router_confidence(p, valid, shape.n_experts, shape.k))
        .collect();
    if per.is_empty() {
        return [Val::F(None), Val::F(None), Val::F(None)];
    }
    let n = per.len() as f64;
    let mean = |g: fn(&(f64, f64, f64)) -> f64| f(per.iter().map(g).sum::<f64>() / n);
    [mean(|x| x.0), mean(|x| x.1), mean(|x| x.2)]
}

/// The drift-probe columns of an update (null where the probe did not run).
fn drift_cols(id: &CellId, u: &UpdateRecord, shape: Shape) -> Vec<(&'static str, Val)> {
    let probed = !u.routes_after.is_empty() || !shape.moe;
    let (de, dt, df, _) = model_drift(&u.routes_before, &u.routes_after, &u.valid, shape.k);
    let (ds, _, _, _) = model_drift(&u.routes_old, &u.routes_after, &u.valid, shape.k);
    let js = if u.probs_after.is_empty() {
        0.0
    } else {
        u.probs_before
            .iter()
            .zip(&u.probs_after)
            .map(|(a, b)| mean_js(a, b, &u.valid, shape.n_experts))
            .sum::<f64>()
            / u.probs_before.len() as f64
    };
    let or_null = |x: f64| if probed { f(x) } else { Val::F(None) };
    let layers = u.routes_before.len().max(1) as f64;
    let stale = if id.routing == RoutingMode::Native || !shape.moe {
        Val::F(None)
    } else {
        f(model_drift(&u.routes_before, &u.routes_used, &u.valid, shape.k).0)
    };
    let [mass, gap, ties] = confidence_means(&u.probs_before, &u.valid, shape);
    vec![
        ("drift_expert_frac", or_null(de)),
        ("drift_token_frac", or_null(dt)),
        ("drift_flips_per_token", or_null(df)),
        ("drift_router_frac", or_null(df / layers)),
        ("replay_stale_frac", stale),
        ("drift_since_rollout_frac", or_null(ds)),
        ("router_js", or_null(js)),
        ("router_topk_mass", mass),
        ("router_topk_gap", gap),
        ("router_near_tie_frac", ties),
        (
            "drift_bias_expert_frac",
            if u.routes_bias_only.is_empty() {
                Val::F(None)
            } else {
                f(model_drift(&u.routes_before, &u.routes_bias_only, &u.valid, shape.k).0)
            },
        ),
        ("t_update", f(u.t_update)),
        ("t_probe", f(u.t_probe)),
    ]
}

/// Per-layer drift, router entropy and load of one update.
/// `check`: the step's router check per layer (`rl.router_check`; empty when off), written on
/// minibatch 0's rows.
pub fn layer_rows(
    id: &CellId,
    step: usize,
    u: &UpdateRecord,
    shape: Shape,
    check: &[crate::rl::engine_router::RouterCheck],
) -> Vec<Row> {
    if !shape.moe || u.routes_after.is_empty() {
        return Vec::new();
    }
    let (_, _, _, layers) = model_drift(&u.routes_before, &u.routes_after, &u.valid, shape.k);
    let (_, _, _, since) = model_drift(&u.routes_old, &u.routes_after, &u.valid, shape.k);
    let conf: Vec<Option<(f64, f64, f64)>> = u
        .probs_before
        .iter()
        .map(|p| router_confidence(p, &u.valid, shape.n_experts, shape.k))
        .collect();
    layers
        .iter()
        .enumerate()
        .map(|(l, d)| {
            let load = expert_load(&u.routes_before[l], &u.valid, shape.n_experts, shape.k);
            let mut row = id.row(step);
            row.push(("minibatch", Val::I(u.minibatch as i64)));
            row.push(("layer", Val::I(l as i64)));
            row.extend([
                ("drift_expert_frac", f(d.expert_frac())),
                (
                    "drift_token_frac",
                    f(d.changed_tokens as f64 / d.tokens.max(1) as f64),
                ),
                ("drift_since_rollout_frac", f(since[l].expert_frac())),
                (
                    "router_js",
                    f(mean_js(
                        &u.probs_before[l],
                        &u.probs_after[l],
                        &u.valid,
                        shape.n_experts,
                    )),
                ),
                (
                    "router_entropy",
                    f(mean_entropy(&u.probs_before[l], &u.valid, shape.n_experts)),
                ),
                ("router_topk_mass", conf[l].map_or(Val::F(None), |c| f(c.0))),
                ("router_topk_gap", conf[l].map_or(Val::F(None), |c| f(c.1))),
                (
                    "router_near_tie_frac",
                    conf[l].map_or(Val::F(None), |c| f(c.2)),
                ),
                ("load_max_violation", f(load_max_violation(&load))),
                (
                    "dead_experts",
                    Val::I(dead_experts(&load, DEAD_EXPERT_LOAD) as i64),
                ),
            ]);
            row.extend(check_cols(super::router_check::layer_shares(
                check,
                l,
                u.minibatch,
            )));
            row
        })
        .collect()
}

/// Per-layer expert loads of π_old on a step's rollout batch (for the collapse detector).
pub fn step_loads(out: &StepOutput, shape: Shape) -> Vec<Vec<f64>> {
    out.routes_old
        .iter()
        .map(|r| expert_load(r, &out.valid, shape.n_experts, shape.k))
        .collect()
}

/// What a step's row shares with the collapse detector, computed once per step.
pub struct StepMeasures {
    /// [`mismatch_stats`]: `(mismatch_kl_k3, mismatch_extreme_frac)`.
    pub mismatch: (f64, f64),
    /// [`step_loads`] (empty for a dense model).
    pub loads: Vec<Vec<f64>>,
    /// The teacher's greedy eval accuracy (a constant of the cell; None without a teacher),
    /// written on the steps that evaluate the student.
    pub teacher_eval: Option<f64>,
}

impl StepMeasures {
    pub fn of(out: &StepOutput, shape: Shape) -> Self {
        StepMeasures {
            mismatch: mismatch_stats(out),
            loads: step_loads(out, shape),
            teacher_eval: None,
        }
    }
}

/// Per-step metrics (DESIGN §7). `eval_accuracy` is null on steps without an evaluation.
pub fn step_row(
    id: &CellId,
    out: &StepOutput,
    eval_accuracy: Option<f64>,
    shape: Shape,
    group_size: usize,
    m: &StepMeasures,
) -> Row {
    let r: Vec<f64> = out.rewards.iter().map(|&x| f64::from(x)).collect();
    let (rm, rv) = mean_var(&r);
    let zero_groups = out
        .rewards
        .chunks_exact(group_size)
        .filter(|g| g.iter().all(|&x| x == g[0]))
        .count();
    let n_groups = (out.rewards.len() / group_size).max(1);
    let (mkl, extreme) = m.mismatch;
    let routed: Vec<bool> = out
        .routes_rollout
        .first()
        .map(|r| r.chunks_exact(shape.k).map(|c| c[0] != NO_ROUTE).collect())
        .unwrap_or_default();
    let (route_frac, token_frac, flips, _) =
        model_drift(&out.routes_old, &out.routes_rollout, &routed, shape.k);
    let layers = out.routes_old.len().max(1) as f64;
    let suite = mismatch_suite(out);
    let moe_only = |x: f64| if shape.moe { f(x) } else { Val::F(None) };
    let loads = &m.loads;
    let mut row = id.row(out.step);
    row.extend([
        ("reward_mean", f(rm)),
        ("reward_std", f(rv.sqrt())),
        (
            "accuracy",
            f(out.correct.iter().filter(|&&c| c).count() as f64 / out.correct.len().max(1) as f64),
        ),
        ("eval_accuracy", Val::F(eval_accuracy)),
        (
            "resp_len_mean",
            f(out.resp_lens.iter().sum::<usize>() as f64 / out.resp_lens.len().max(1) as f64),
        ),
        ("entropy", f(f64::from(out.entropy))),
        (
            "frac_zero_adv_groups",
            f(zero_groups as f64 / n_groups as f64),
        ),
        ("mismatch_kl_k3", f(mkl)),
        ("mismatch_extreme_frac", f(extreme)),
        ("mismatch_route_frac", moe_only(route_frac)),
        ("mismatch_router_frac", moe_only(flips / layers)),
        ("mismatch_token_frac", moe_only(token_frac)),
        ("mismatch_abs_logp", f(suite[0])),
        ("mismatch_sq_logp", f(suite[1])),
        ("mismatch_beyond5_frac", f(suite[2])),
        (
            "load_max_violation",
            if shape.moe {
                f(loads
                    .iter()
                    .map(|l| load_max_violation(l))
                    .fold(0.0, f64::max))
            } else {
                Val::F(None)
            },
        ),
        (
            "dead_experts",
            Val::I(
                loads
                    .iter()
                    .map(|l| dead_experts(l, DEAD_EXPERT_LOAD) as i64)
                    .sum(),
            ),
        ),
        ("staleness", Val::I(out.staleness as i64)),
        ("t_rollout", f(out.t_rollout)),
        ("t_update", f(out.t_update)),
        ("t_probe", f(out.t_probe)),
        (
            "n_tokens",
            Val::I(out.resp_lens.iter().sum::<usize>() as i64),
        ),
        ("teacher_kl", Val::F(teacher_kl(out))),
        ("teacher_eval", Val::F(eval_accuracy.and(m.teacher_eval))),
    ]);
    let [top1, topk, mass] = teacher_routing(out);
    row.extend([
        ("teacher_route_top1", Val::F(top1)),
        ("teacher_route_topk", Val::F(topk)),
        ("teacher_router_mass", Val::F(mass)),
    ]);
    row.extend(check_cols(super::router_check::pooled_shares(
        &out.router_check,
    )));
    row
}

/// The router check's columns ([`super::router_check::COLUMNS`]) holding `shares`.
fn check_cols(shares: [Option<f64>; 3]) -> [(&'static str, Val); 3] {
    let c = super::router_check::COLUMNS;
    [
        (c[0], Val::F(shares[0])),
        (c[1], Val::F(shares[1])),
        (c[2], Val::F(shares[2])),
    ]
}
