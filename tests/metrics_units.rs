//! Metrics on hand-built inputs, and each collapse rule on synthetic streams.

use driftlab::metrics::collapse::{CollapseConfig, CollapseDetector, StepSignals};
use driftlab::metrics::drift::{
    dead_experts, expert_load, js, layer_drift, load_max_violation, mean_entropy, model_drift,
};
use driftlab::metrics::ratio::{ess, k3, mean_var, within_seq_var};

#[test]
fn drift_fractions_on_known_route_sets() {
    let valid = [true, true, true];
    // k = 2. Token 0 identical (reordered), token 1 one expert changed, token 2 both changed.
    let old = [0u16, 1, 2, 3, 4, 5];
    let new = [1u16, 0, 2, 6, 7, 0];
    let d = layer_drift(&old, &new, &valid, 2);
    assert_eq!((d.changed_slots, d.changed_tokens, d.tokens), (3, 2, 3));
    assert!((d.expert_frac() - 0.5).abs() < 1e-12);
    assert_eq!(
        layer_drift(&old, &old, &valid, 2).expert_frac(),
        0.0,
        "identical sets → 0"
    );
    assert_eq!(
        layer_drift(&[0, 1], &[2, 3], &[true], 2).expert_frac(),
        1.0,
        "disjoint → 1"
    );
    // Padding is ignored.
    assert_eq!(
        layer_drift(&old, &new, &[true, false, false], 2).expert_frac(),
        0.0
    );
    // Two layers: layer 1 unchanged.
    let (e, t, f, _) = model_drift(
        &[old.to_vec(), old.to_vec()],
        &[new.to_vec(), old.to_vec()],
        &valid,
        2,
    );
    assert!(
        (e - 0.25).abs() < 1e-12 && (t - 2.0 / 3.0).abs() < 1e-12 && (f - 2.0 / 3.0).abs() < 1e-12
    );
    // k = 1.
    assert_eq!(
        layer_drift(&[3, 3], &[3, 1], &[true, true], 1).expert_frac(),
        0.5
    );
}

#[test]
fn js_ess_and_ratio_statistics() {
    assert_eq!(js(&[0.2, 0.3, 0.5], &[0.2, 0.3, 0.5]), 0.0);
    assert!(
        (js(&[1.0, 0.0], &[0.0, 1.0]) - 2f64.ln()).abs() < 1e-12,
        "disjoint distributions: ln 2"
    );
    assert!((ess(&[1.3; 5]) - 1.0).abs() < 1e-12);
    assert!((ess(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    let (m, v) = mean_var(&[1.0, 2.0, 3.0, 4.0]);
    assert!((m - 2.5).abs() < 1e-12 && (v - 1.25).abs() < 1e-12);
    // Response 0: [0, 2] var 1; response 1: [5] var 0 → mean 0.5.
    assert!((within_seq_var(&[0.0, 2.0, 5.0], &[0, 0, 1], 2) - 0.5).abs() < 1e-12);
    assert_eq!(k3(&[0.1, -0.2], &[0.1, -0.2]), 0.0);
    let load = expert_load(&[0, 1, 0, 0], &[true, true], 4, 2);
    assert_eq!(load, vec![0.75, 0.25, 0.0, 0.0]);
    assert!((load_max_violation(&load) - 2.0).abs() < 1e-12);
    assert_eq!(dead_experts(&load, 0.01), 2);
    assert!((mean_entropy(&[0.5, 0.5], &[true], 2) - 2f64.ln()).abs() < 1e-12);
}

fn sig(step: usize, reward: f64) -> StepSignals {
    StepSignals {
        step,
        reward_mean: reward,
        entropy: 1.0,
        ratio_tok_max: 1.0,
        loads: vec![vec![0.5, 0.5]],
        grad_norms: vec![1.0],
        skipped: vec![false],
        ..StepSignals::default()
    }
}

fn kinds(det: &mut CollapseDetector, stream: Vec<StepSignals>) -> Vec<(String, usize)> {
    stream
        .iter()
        .flat_map(|s| det.observe(s))
        .map(|e| (e.kind.name().to_string(), e.step))
        .collect()
}

#[test]
fn reward_collapse_trips_on_a_lasting_drop_only() {
    let mut stream: Vec<StepSignals> = (0..10).map(|s| sig(s, 0.6)).collect();
    stream.extend((10..40).map(|s| sig(s, 0.1)));
    let ev = kinds(
        &mut CollapseDetector::new(CollapseConfig::default()),
        stream,
    );
    assert_eq!(ev.iter().filter(|e| e.0 == "reward_collapse").count(), 1);
    let first = ev.iter().find(|e| e.0 == "reward_collapse").unwrap().1;
    assert!(
        (10..20).contains(&first),
        "reported at the first step of the stretch: {first}"
    );
    // A dip shorter than the patience is not a collapse.
    let mut stream: Vec<StepSignals> = (0..10).map(|s| sig(s, 0.6)).collect();
    stream.extend((10..13).map(|s| sig(s, 0.0)));
    stream.extend((13..40).map(|s| sig(s, 0.7)));
    assert!(
        kinds(
            &mut CollapseDetector::new(CollapseConfig::default()),
            stream
        )
        .is_empty()
    );
}

#[test]
fn entropy_ratio_grad_expert_and_non_finite_rules() {
    let cfg = CollapseConfig::default();
    let mut d = CollapseDetector::new(cfg.clone());
    let mut s = vec![sig(0, 0.5), sig(1, 0.5)];
    s[1].entropy = 0.05;
    assert_eq!(kinds(&mut d, s), vec![("entropy_collapse".into(), 1)]);
    let mut d = CollapseDetector::new(cfg.clone());
    let mut s = vec![sig(0, 0.5)];
    s[0].ratio_tok_max = 11.0;
    assert_eq!(kinds(&mut d, s), vec![("ratio_explosion".into(), 0)]);
    let mut d = CollapseDetector::new(cfg.clone());
    let mut s = vec![sig(0, 0.5)];
    s[0].mismatch_extreme_frac = 0.2;
    assert_eq!(kinds(&mut d, s), vec![("ratio_explosion".into(), 0)]);
    let mut d = CollapseDetector::new(cfg.clone());
    let mut s: Vec<StepSignals> = (0..8).map(|i| sig(i, 0.5)).collect();
    s[7].grad_norms = vec![50.0];
    assert_eq!(kinds(&mut d, s), vec![("grad_spike".into(), 7)]);
    let mut d = CollapseDetector::new(cfg.clone());
    let s: Vec<StepSignals> = (0..12)
        .map(|i| StepSignals {
            loads: vec![vec![0.999, 0.001]],
            ..sig(i, 0.5)
        })
        .collect();
    assert_eq!(kinds(&mut d, s), vec![("expert_collapse".into(), 9)]);
    let mut d = CollapseDetector::new(cfg.clone());
    let s: Vec<StepSignals> = (0..12)
        .map(|i| StepSignals {
            loads: vec![vec![0.9, 0.1]],
            ..sig(i, 0.5)
        })
        .collect();
    assert!(
        kinds(&mut d, s).is_empty(),
        "10% of the load is not starvation"
    );
    let mut d = CollapseDetector::new(cfg);
    let mut s = sig(0, 0.5);
    s.skipped = vec![true, true];
    assert_eq!(d.observe(&s).len(), 2);
    assert!(!d.collapsed);
    let mut s2 = sig(1, 0.5);
    s2.skipped = vec![true];
    d.observe(&s2);
    assert!(
        d.collapsed,
        "three non-finite updates in a row stop the cell"
    );
    let mut d = CollapseDetector::new(CollapseConfig::default());
    let mut a = sig(0, 0.5);
    a.skipped = vec![true, true, false, true];
    d.observe(&a);
    assert!(!d.collapsed, "not in a row");
}

#[test]
fn the_opd_rules_fire_once_each_and_only_under_a_teacher() {
    let opd = |step: usize, len: f64, entropy: f64, kl: Option<f64>| StepSignals {
        resp_len_mean: len,
        entropy,
        teacher_kl: kl,
        ..sig(step, 0.5)
    };
    // Without a teacher the same stream raises nothing.
    let plain = vec![opd(0, 10.0, 0.5, None), opd(1, 2.0, 0.5, None)];
    let mut d = CollapseDetector::new(CollapseConfig::default());
    assert!(kinds(&mut d, plain).is_empty());
    // A one-batch spike of the teacher KL (0.4 -> 2.0 -> 0.4) moves its EMA by 0.16: no event.
    let mut stream = vec![
        opd(0, 10.0, 0.5, Some(0.4)),
        opd(1, 6.0, 0.9, Some(2.0)),
        opd(2, 4.9, 1.1, Some(0.4)),
        opd(3, 3.0, 1.2, Some(0.4)),
    ];
    // A lasting rise to 2.0: the EMA (0.9 on the past) passes 2 x 0.4 + 0.01 at step 6.
    stream.extend((4..10).map(|i| opd(i, 3.0, 1.2, Some(2.0))));
    let mut d = CollapseDetector::new(CollapseConfig::default());
    assert_eq!(
        kinds(&mut d, stream),
        vec![
            ("length_collapse".into(), 2),
            ("entropy_inflation".into(), 2),
            ("teacher_divergence".into(), 6),
        ]
    );
    let bad = CollapseConfig {
        entropy_rise: 0.5,
        ..CollapseConfig::default()
    };
    let err = bad.validate().unwrap_err().to_string();
    assert!(err.contains("collapse.entropy_rise"), "{err}");
}
