//! Collapse detector: turns the metric stream of one cell into events (DESIGN §7).
//!
//! Rules (thresholds configurable):
//! - `non_finite`: an update whose loss or gradient was NaN/Inf (it was skipped); every one is an
//!   event, and after `non_finite_stop` in a row the cell stops with status `collapsed`.
//! - `reward_collapse`: EMA(`reward_ema`) of the reward stays below `reward_drop` × its running
//!   maximum (once that maximum is ≥ `reward_min_max`) for `reward_patience` steps; reported once,
//!   at the first step of that stretch.
//! - `entropy_collapse`: entropy < `entropy_drop` × its step-0 value; reported once.
//! - `ratio_explosion`: `ratio_tok_max` > `ratio_max` or `mismatch_extreme_frac` > `extreme_frac`;
//!   at most one event per step.
//! - `grad_spike`: grad norm > `grad_spike` × the running median of earlier grad norms (after 5).
//! - `expert_collapse`: in some layer an expert receives < `expert_min_load` of the uniform load
//!   for `expert_patience` consecutive steps; reported once per cell.
//! - `all_masked`: an update whose every token the masking corrections (IcePop, MIS, OPSM)
//!   masked, so it was skipped; a warning, one event per such update.
//!
//! Three more rules watch a student under on-policy distillation; they run only in cells with
//! a teacher (`rl.teacher`, so that a step's `teacher_kl` exists), so runs without one keep
//! exactly the events they had:
//! - `length_collapse`: the mean response length falls below `length_drop` × its step-0 value
//!   (the student learns to stop early, the EOS rate rises: OPD's known shortcut of matching
//!   the teacher on short responses); reported once.
//! - `entropy_inflation`: entropy rises above `entropy_rise` × its step-0 value (the student's
//!   mass spreads instead of sharpening toward the teacher's); reported once.
//! - `teacher_divergence`: the EMA (weight `reward_ema` on the past) of the per-token teacher
//!   KL (`teacher_kl`) rises above `teacher_kl_rise` × its step-0 value (plus 0.01 nats, so
//!   that a start near 0 does not flag noise): the student's samples move where the teacher
//!   puts little mass, the opposite of distillation; reported once. (Its first form read each
//!   step's value unsmoothed and fired on single-batch spikes: `results/opd` holds events of
//!   that form.)

use anyhow::{Result, ensure};
use serde::{Deserialize, Serialize};

crate::named_enum! {
    /// What a collapse-detector event reports.
    pub enum EventKind("event kind") {
        /// An update whose loss or gradient was not finite (it was skipped).
        NonFinite = "non_finite",
        RewardCollapse = "reward_collapse",
        EntropyCollapse = "entropy_collapse",
        RatioExplosion = "ratio_explosion",
        GradSpike = "grad_spike",
        ExpertCollapse = "expert_collapse",
        /// An update whose every token the masking corrections masked (it was skipped).
        AllMasked = "all_masked",
        /// Under a teacher: the mean response length fell below a share of its start.
        LengthCollapse = "length_collapse",
        /// Under a teacher: entropy rose above a multiple of its start.
        EntropyInflation = "entropy_inflation",
        /// Under a teacher: the per-token teacher KL rose above a multiple of its start.
        TeacherDivergence = "teacher_divergence",
    }
}

impl EventKind {
    /// Whether the event means training itself broke down; ratio explosions and gradient
    /// spikes are warning signs, counted separately.
    pub fn is_collapse(self) -> bool {
        match self {
            EventKind::NonFinite
            | EventKind::RewardCollapse
            | EventKind::EntropyCollapse
            | EventKind::ExpertCollapse
            | EventKind::LengthCollapse
            | EventKind::EntropyInflation
            | EventKind::TeacherDivergence => true,
            EventKind::RatioExplosion | EventKind::GradSpike | EventKind::AllMasked => false,
        }
    }
}

/// The detector's thresholds (the rules in the module docs say what each does); checked by
/// [`CollapseConfig::validate`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CollapseConfig {
    pub non_finite_stop: usize,
    pub reward_ema: f64,
    pub reward_drop: f64,
    pub reward_min_max: f64,
    pub reward_patience: usize,
    pub entropy_drop: f64,
    pub ratio_max: f64,
    pub extreme_frac: f64,
    pub grad_spike: f64,
    pub expert_min_load: f64,
    pub expert_patience: usize,
    pub length_drop: f64,
    pub entropy_rise: f64,
    pub teacher_kl_rise: f64,
}

impl Default for CollapseConfig {
    fn default() -> Self {
        CollapseConfig {
            non_finite_stop: 3,
            reward_ema: 0.9,
            reward_drop: 0.7,
            reward_min_max: 0.1,
            reward_patience: 10,
            entropy_drop: 0.1,
            ratio_max: 10.0,
            extreme_frac: 0.1,
            grad_spike: 10.0,
            expert_min_load: super::drift::DEAD_EXPERT_LOAD,
            expert_patience: 10,
            length_drop: 0.5,
            entropy_rise: 2.0,
            teacher_kl_rise: 2.0,
        }
    }
}

impl CollapseConfig {
    /// Reject thresholds outside the range their rule can use, naming the key and the range:
    /// shares and fractions of a maximum in [0, 1], the EMA factor in [0, 1), ratio and
    /// gradient-spike factors at least 1 (the on-policy ratio is 1; a spike factor below 1
    /// flags half the updates), counts of steps at least 1.
    pub fn validate(&self) -> Result<()> {
        let counts = [
            ("non_finite_stop", self.non_finite_stop),
            ("reward_patience", self.reward_patience),
            ("expert_patience", self.expert_patience),
        ];
        for (key, v) in counts {
            ensure!(v >= 1, "collapse.{key} = {v}: must be at least 1");
        }
        let unit = [
            ("reward_drop", self.reward_drop),
            ("reward_min_max", self.reward_min_max),
            ("entropy_drop", self.entropy_drop),
            ("extreme_frac", self.extreme_frac),
            ("expert_min_load", self.expert_min_load),
            ("length_drop", self.length_drop),
        ];
        for (key, v) in unit {
            ensure!(
                (0.0..=1.0).contains(&v),
                "collapse.{key} = {v}: must be in [0, 1]"
            );
        }
        ensure!(
            (0.0..1.0).contains(&self.reward_ema),
            "collapse.reward_ema = {}: must be in [0, 1) (the weight of the old average)",
            self.reward_ema
        );
        for (key, v) in [
            ("ratio_max", self.ratio_max),
            ("grad_spike", self.grad_spike),
            ("entropy_rise", self.entropy_rise),
            ("teacher_kl_rise", self.teacher_kl_rise),
        ] {
            ensure!(
                v.is_finite() && v >= 1.0,
                "collapse.{key} = {v}: must be a finite number of at least 1"
            );
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub step: usize,
    pub kind: EventKind,
    pub value: f64,
    pub threshold: f64,
    pub detail: String,
}

/// What the detector needs from one step.
#[derive(Clone, Debug, Default)]
pub struct StepSignals {
    pub step: usize,
    pub reward_mean: f64,
    pub entropy: f64,
    pub ratio_tok_max: f64,
    pub mismatch_extreme_frac: f64,
    /// Grad norms of the applied updates.
    pub grad_norms: Vec<f64>,
    /// Updates skipped for a non-finite loss or gradient, in order (true = skipped).
    pub skipped: Vec<bool>,
    /// Updates skipped because the masking corrections masked every token, in order.
    pub all_masked: Vec<bool>,
    /// Per layer, per expert share of routed slots.
    pub loads: Vec<Vec<f64>>,
    /// Mean response length of the rollout batch.
    pub resp_len_mean: f64,
    /// The step's per-token teacher KL; None in cells without a teacher (the OPD rules then
    /// stay silent).
    pub teacher_kl: Option<f64>,
}

#[derive(Clone, Debug, Default)]
pub struct CollapseDetector {
    pub cfg: CollapseConfig,
    ema: Option<f64>,
    ema_max: f64,
    below_since: Option<usize>,
    below_count: usize,
    reward_reported: bool,
    entropy0: Option<f64>,
    entropy_reported: bool,
    grad_history: Vec<f64>,
    non_finite_run: usize,
    starved: Vec<Vec<usize>>,
    expert_reported: bool,
    /// The OPD rules' step-0 values (length, entropy, teacher KL) and what they reported.
    opd0: Option<[f64; 3]>,
    opd_reported: [bool; 3],
    kl_ema: Option<f64>,
    /// Set once the cell must stop (`non_finite_stop` non-finite updates in a row).
    pub collapsed: bool,
}

impl CollapseDetector {
    pub fn new(cfg: CollapseConfig) -> Self {
        CollapseDetector {
            cfg,
            ..Default::default()
        }
    }

    /// The events of one step, rule by rule in the order of the module docs.
    pub fn observe(&mut self, s: &StepSignals) -> Vec<Event> {
        let mut ev = Vec::new();
        let mut push =
            |kind: EventKind, value: f64, threshold: f64, detail: String, step: usize| {
                ev.push(Event {
                    step,
                    kind,
                    value,
                    threshold,
                    detail,
                });
            };
        self.non_finite(s, &mut push);
        for (i, _) in s.all_masked.iter().enumerate().filter(|(_, m)| **m) {
            push(
                EventKind::AllMasked,
                0.0,
                0.0,
                format!("update {i} skipped: every token masked by the corrections"),
                s.step,
            );
        }
        self.reward(s, &mut push);
        self.entropy(s, &mut push);
        self.ratio(s, &mut push);
        self.grad(s, &mut push);
        self.experts(s, &mut push);
        self.distillation(s, &mut push);
        ev
    }

    /// The three OPD rules (module docs), in cells with a teacher only.
    fn distillation(
        &mut self,
        s: &StepSignals,
        push: &mut impl FnMut(EventKind, f64, f64, String, usize),
    ) {
        let Some(kl) = s.teacher_kl else { return };
        let c = &self.cfg;
        // The teacher KL of one rollout batch is noisy: its EMA (the reward's weight) is read.
        let ema = match (self.kl_ema, kl.is_finite()) {
            (Some(e), true) => c.reward_ema * e + (1.0 - c.reward_ema) * kl,
            (Some(e), false) => e,
            (None, _) => kl,
        };
        self.kl_ema = Some(ema);
        let now = [s.resp_len_mean, s.entropy, ema];
        let start = *self.opd0.get_or_insert(now);
        let rules = [
            (
                EventKind::LengthCollapse,
                c.length_drop * start[0],
                false,
                "mean response length",
            ),
            (
                EventKind::EntropyInflation,
                c.entropy_rise * start[1],
                true,
                "entropy",
            ),
            (
                EventKind::TeacherDivergence,
                c.teacher_kl_rise * start[2].max(0.0) + 0.01,
                true,
                "teacher KL",
            ),
        ];
        for (k, (kind, threshold, above, what)) in rules.into_iter().enumerate() {
            let v = now[k];
            let crossed = if above { v > threshold } else { v < threshold };
            if self.opd_reported[k] || !v.is_finite() || !crossed {
                continue;
            }
            self.opd_reported[k] = true;
            push(
                kind,
                v,
                threshold,
                format!("{what} {v:.4} vs {:.4} at the start", start[k]),
                s.step,
            );
        }
    }

    fn non_finite(
        &mut self,
        s: &StepSignals,
        push: &mut impl FnMut(EventKind, f64, f64, String, usize),
    ) {
        for (i, &skipped) in s.skipped.iter().enumerate() {
            if skipped {
                self.non_finite_run += 1;
                push(
                    EventKind::NonFinite,
                    f64::NAN,
                    0.0,
                    format!("update {i} skipped ({} in a row)", self.non_finite_run),
                    s.step,
                );
                if self.non_finite_run >= self.cfg.non_finite_stop {
                    self.collapsed = true;
                }
            } else {
                self.non_finite_run = 0;
            }
        }
    }

    fn reward(
        &mut self,
        s: &StepSignals,
        push: &mut impl FnMut(EventKind, f64, f64, String, usize),
    ) {
        let c = &self.cfg;
        if !s.reward_mean.is_finite() {
            return;
        }
        let ema = match self.ema {
            None => s.reward_mean,
            Some(e) => c.reward_ema * e + (1.0 - c.reward_ema) * s.reward_mean,
        };
        self.ema = Some(ema);
        self.ema_max = self.ema_max.max(ema);
        if self.ema_max >= c.reward_min_max && ema < c.reward_drop * self.ema_max {
            self.below_since.get_or_insert(s.step);
            self.below_count += 1;
            if self.below_count >= c.reward_patience && !self.reward_reported {
                self.reward_reported = true;
                let first = self.below_since.expect("set above");
                push(
                    EventKind::RewardCollapse,
                    ema,
                    c.reward_drop * self.ema_max,
                    format!(
                        "reward EMA below {:.2}× its max {:.3} since step {first}",
                        c.reward_drop, self.ema_max
                    ),
                    first,
                );
            }
        } else {
            self.below_since = None;
            self.below_count = 0;
        }
    }

    fn entropy(
        &mut self,
        s: &StepSignals,
        push: &mut impl FnMut(EventKind, f64, f64, String, usize),
    ) {
        let drop = self.cfg.entropy_drop;
        let e0 = *self.entropy0.get_or_insert(s.entropy);
        if !self.entropy_reported && s.entropy < drop * e0 {
            self.entropy_reported = true;
            push(
                EventKind::EntropyCollapse,
                s.entropy,
                drop * e0,
                format!("entropy {:.4} vs {:.4} at the start", s.entropy, e0),
                s.step,
            );
        }
    }

    fn ratio(&self, s: &StepSignals, push: &mut impl FnMut(EventKind, f64, f64, String, usize)) {
        let c = &self.cfg;
        if s.ratio_tok_max > c.ratio_max {
            push(
                EventKind::RatioExplosion,
                s.ratio_tok_max,
                c.ratio_max,
                "ratio_tok_max".into(),
                s.step,
            );
        } else if s.mismatch_extreme_frac > c.extreme_frac {
            push(
                EventKind::RatioExplosion,
                s.mismatch_extreme_frac,
                c.extreme_frac,
                "mismatch_extreme_frac".into(),
                s.step,
            );
        }
    }

    fn grad(&mut self, s: &StepSignals, push: &mut impl FnMut(EventKind, f64, f64, String, usize)) {
        let spike = self.cfg.grad_spike;
        for &g in &s.grad_norms {
            if self.grad_history.len() >= 5 {
                let mut h = self.grad_history.clone();
                h.sort_by(f64::total_cmp);
                let median = h[h.len() / 2];
                if g > spike * median {
                    push(
                        EventKind::GradSpike,
                        g,
                        spike * median,
                        format!("running median {median:.4}"),
                        s.step,
                    );
                }
            }
            if g.is_finite() {
                self.grad_history.push(g);
            }
        }
    }

    fn experts(
        &mut self,
        s: &StepSignals,
        push: &mut impl FnMut(EventKind, f64, f64, String, usize),
    ) {
        let (min_load, patience) = (self.cfg.expert_min_load, self.cfg.expert_patience);
        if self.starved.len() != s.loads.len() {
            self.starved = s.loads.iter().map(|l| vec![0; l.len()]).collect();
        }
        for (l, load) in s.loads.iter().enumerate() {
            let uniform = 1.0 / load.len().max(1) as f64;
            for (e, &x) in load.iter().enumerate() {
                let starved = x < min_load * uniform;
                if !starved {
                    self.starved[l][e] = 0;
                    continue;
                }
                self.starved[l][e] += 1;
                if self.starved[l][e] >= patience && !self.expert_reported {
                    self.expert_reported = true;
                    push(
                        EventKind::ExpertCollapse,
                        x / uniform,
                        min_load,
                        format!(
                            "layer {l} expert {e} below {:.0}% of uniform load for {patience} steps",
                            min_load * 100.0
                        ),
                        s.step,
                    );
                }
            }
        }
    }
}
