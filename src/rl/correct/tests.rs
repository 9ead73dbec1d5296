//! The masking corrections by hand.

use super::*;
use crate::rl::config::{IcePopConfig, MisConfig, MisLevel, OpsmConfig};
use burn::tensor::Tensor;

/// Two responses, of 2 and 3 tokens, whose engine log-ratios ln(π_old / π_engine) are `x`.
fn batch(x: [f64; 5], adv: [f32; 2]) -> PolicyBatch {
    let device = crate::device::DeviceChoice::Flex.device().unwrap();
    PolicyBatch {
        logp: Tensor::zeros([5], &device),
        logp_old: vec![0.0; 5],
        logp_tis: x.iter().map(|&v| v as f32).collect(),
        logp_mu: vec![0.0; 5],
        logp_ref: None,
        corr: None,
        adv: adv.to_vec(),
        rewards: vec![0.0; 2],
        seg: vec![0, 0, 1, 1, 1],
        lens: vec![2, 3],
        group_size: 2,
    }
}

fn close(a: &[f32], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (f64::from(*x) - y).abs() < 1e-5)
}

/// IcePop keeps k = π_old / π_engine as the weight inside [0.5, 5] and masks it outside, on
/// both sides.
#[test]
fn icepop_weighs_inside_its_band_and_masks_both_sides() {
    let k = [0.45, 0.55, 1.0, 4.5, 5.5];
    let b = batch(k.map(f64::ln), [1.0, 1.0]);
    let ice = IcePopConfig::default();
    let c = Corrections {
        icepop: Some(&ice),
        ..Corrections::default()
    }
    .weights(&b, None)
    .unwrap();
    assert!(
        close(&c.weight, &[0.0, 0.55, 1.0, 4.5, 0.0]),
        "{:?}",
        c.weight
    );
    assert_eq!(c.icepop.unwrap(), vec![true, false, false, false, true]);
    assert!(c.mis.is_none() && c.opsm.is_none());
}

/// MIS at each level: the token's own ratio, the response's product, or its geometric mean,
/// kept as the weight inside [low, high], 0 outside, one weight per response at sequence level.
#[test]
fn mis_masks_tokens_responses_or_geometric_means() {
    // Response 0: ratios 2 and 2 (product 4, geometric mean 2); response 1: 0.5, 1, 1.
    let r = [2.0, 2.0, 0.5, 1.0, 1.0];
    let b = batch(r.map(f64::ln), [1.0, 1.0]);
    let run = |level: MisLevel, low: f64, high: f64| {
        let m = MisConfig { level, low, high };
        Corrections {
            mis: Some(&m),
            ..Corrections::default()
        }
        .weights(&b, None)
        .unwrap()
    };
    let tok = run(MisLevel::Token, 0.6, 3.0);
    assert!(
        close(&tok.weight, &[2.0, 2.0, 0.0, 1.0, 1.0]),
        "{:?}",
        tok.weight
    );
    assert_eq!(tok.mis.unwrap(), vec![false, false, true, false, false]);
    let seq = run(MisLevel::Sequence, 0.0, 3.0);
    assert!(
        close(&seq.weight, &[0.0, 0.0, 0.5, 0.5, 0.5]),
        "{:?}",
        seq.weight
    );
    assert_eq!(seq.mis.unwrap(), vec![true, true, false, false, false]);
    let geo = run(MisLevel::Geometric, 0.9, 3.0);
    let g1 = 0.5f64.powf(1.0 / 3.0);
    assert!(
        close(&geo.weight, &[2.0, 2.0, 0.0, 0.0, 0.0]),
        "{:?} ({g1})",
        geo.weight
    );
    let geo_low = run(MisLevel::Geometric, 0.5, 3.0);
    assert!(
        close(&geo_low.weight, &[2.0, 2.0, g1, g1, g1]),
        "{:?}",
        geo_low.weight
    );
}

/// OPSM masks a response only when its advantage is negative and its mean log(π_engine / π_θ)
/// exceeds the threshold; the corrections' weights multiply.
#[test]
fn opsm_masks_negative_advantage_responses_that_drifted() {
    let mut b = batch([0.0; 5], [-1.0, 1.0]);
    // π_θ fell below the engine by 0.6 per token in response 0, by 1.0 in response 1.
    let logp = vec![-0.6f32, -0.6, -1.0, -1.0, -1.0];
    let o = OpsmConfig { threshold: 0.5 };
    let c = Corrections {
        opsm: Some(&o),
        ..Corrections::default()
    };
    let w = c.weights(&b, Some(&logp)).unwrap();
    assert_eq!(
        w.opsm.clone().unwrap(),
        vec![true, false],
        "positive advantage kept"
    );
    assert!(close(&w.weight, &[0.0, 0.0, 1.0, 1.0, 1.0]));
    b.adv = vec![-1.0, -1.0];
    let w = c
        .weights(&b, Some(&[-0.4f32, -0.4, -1.0, -1.0, -1.0]))
        .unwrap();
    assert_eq!(
        w.opsm.unwrap(),
        vec![false, true],
        "below the threshold kept"
    );
    // IcePop and OPSM together: the product.
    let ice = IcePopConfig::default();
    let both = Corrections {
        icepop: Some(&ice),
        opsm: Some(&o),
        ..Corrections::default()
    };
    let b2 = batch([2f64.ln(), 0.0, 0.0, 0.0, 0.0], [1.0, -1.0]);
    let w = both
        .weights(&b2, Some(&[0.0f32, 0.0, -1.0, -1.0, -1.0]))
        .unwrap();
    assert!(
        close(&w.weight, &[2.0, 1.0, 0.0, 0.0, 0.0]),
        "{:?}",
        w.weight
    );
}

/// Without a mismatch (engine = trainer) and before the policy moves, nothing is masked and
/// every weight is 1; with every correction off there are no weights at all.
#[test]
fn on_policy_nothing_is_masked() {
    let b = batch([0.0; 5], [-1.0, 1.0]);
    let (ice, mis, opsm) = (
        IcePopConfig::default(),
        MisConfig::default(),
        OpsmConfig::default(),
    );
    let c = Corrections {
        icepop: Some(&ice),
        mis: Some(&mis),
        opsm: Some(&opsm),
    }
    .weights(&b, Some(&[0.0; 5]))
    .unwrap();
    assert!(c.weight.iter().all(|&w| w == 1.0));
    for m in [c.icepop.unwrap(), c.mis.unwrap()] {
        assert!(m.iter().all(|&x| !x));
    }
    assert!(c.opsm.unwrap().iter().all(|&x| !x));
    assert!(Corrections::default().weights(&b, None).is_none());
}

/// A sequence-level objective takes the token mean of the weights over each response; a
/// token-level one the weights themselves, times TIS's.
#[test]
fn objectives_take_the_weights_per_token_or_as_a_response_mean() {
    let mut b = batch([0.0; 5], [1.0, 1.0]);
    b.corr = Some(vec![1.0, 0.0, 0.5, 0.5, 0.5]);
    assert_eq!(b.tok_weight(None).unwrap(), vec![1.0, 0.0, 0.5, 0.5, 0.5]);
    assert!(close(&b.seq_weight(None).unwrap(), &[0.5, 0.5]));
    let tis = crate::rl::config::TisConfig { cap: 2.0 };
    assert!(
        close(&b.seq_weight(Some(&tis)).unwrap(), &[0.5, 0.5]),
        "TIS weight 1"
    );
    b.corr = None;
    assert!(b.tok_weight(None).is_none() && b.seq_weight(None).is_none());
}
