//! How the objectives read the fixes' weights.

use crate::rl::fixes::{Ratio, Weights};
use crate::rl::loss::PolicyBatch;
use burn::tensor::Tensor;

/// Two responses, of 2 and 3 tokens, on-policy.
fn batch() -> PolicyBatch {
    let device = crate::device::DeviceChoice::Flex.device().unwrap();
    PolicyBatch {
        logp: Tensor::zeros([5], &device),
        logp_old: vec![0.0; 5],
        logp_tis: vec![0.0; 5],
        logp_mu: vec![0.0; 5],
        logp_ref: None,
        fixes: Weights::default(),
        adv: vec![1.0, 1.0],
        rewards: vec![0.0; 2],
        seg: vec![0, 0, 1, 1, 1],
        lens: vec![2, 3],
        group_size: 2,
        teacher: None,
    }
}

fn close(a: &[f32], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (f64::from(*x) - y).abs() < 1e-5)
}

/// A sequence-level objective takes the token mean of the mask over each response; a
/// token-level one the mask itself, times the importance weight of its level.
#[test]
fn objectives_take_the_weights_per_token_or_as_a_response_mean() {
    let mut b = batch();
    b.fixes.mask = Some(vec![1.0, 0.0, 0.5, 0.5, 0.5]);
    assert_eq!(b.tok_weight().unwrap(), vec![1.0, 0.0, 0.5, 0.5, 0.5]);
    assert!(close(&b.seq_weight().unwrap(), &[0.5, 0.5]));
    b.fixes.ratio = Some(Ratio {
        tok: vec![2.0; 5],
        seq: vec![1.0, 3.0],
    });
    assert!(close(&b.tok_weight().unwrap(), &[2.0, 0.0, 1.0, 1.0, 1.0]));
    assert!(close(&b.seq_weight().unwrap(), &[0.5, 1.5]));
    b.fixes = Weights::default();
    assert!(b.tok_weight().is_none() && b.seq_weight().is_none());
}
