//! Loss and gradient checks of the objectives' tests: a loss's value and a leaf's gradient read
//! back, and comparisons to a reference in f64.

use burn::tensor::Tensor;
use driftlab::util::tensors::to_vec;

pub fn grad<const D: usize>(loss: Tensor<1>, leaf: &Tensor<D>) -> Vec<f32> {
    to_vec(leaf.grad(&loss.backward()).expect("gradient"))
}

pub fn value(loss: &Tensor<1>) -> f64 {
    f64::from(to_vec(loss.clone().inner())[0])
}

pub fn assert_rel(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs().max(1e-12),
        "{what}: {got} vs {want}"
    );
}

pub fn assert_abs(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    assert!(
        got.iter().zip(want).all(|(a, b)| (a - b).abs() <= tol),
        "{what}: {got:?} vs {want:?}"
    );
}

pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}
