//! Host <-> device helpers: the few conversions every module needs, in one place.

use burn::tensor::{Device, Int, Tensor, TensorData};
use std::sync::atomic::{AtomicU64, Ordering};

static READS: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);

/// Host↔device transfers made through these helpers since the process started. Every read
/// back to the host and every upload of host values goes through [`to_vec`], [`floats`] and
/// [`ints`], so these count the sync points a GPU pays for, on any device (on `flex` they are
/// copies). Process-wide: per-stage deltas mean something only while one trainer runs alone
/// (`bench --rl`, a test of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Device → host reads.
    pub reads: u64,
    /// Host → device uploads.
    pub uploads: u64,
}

impl Transfers {
    /// The counts now.
    pub fn now() -> Transfers {
        Transfers {
            reads: READS.load(Ordering::Relaxed),
            uploads: UPLOADS.load(Ordering::Relaxed),
        }
    }

    /// The transfers since `earlier`.
    pub fn since(earlier: Transfers) -> Transfers {
        let n = Transfers::now();
        Transfers {
            reads: n.reads - earlier.reads,
            uploads: n.uploads - earlier.uploads,
        }
    }
}

/// Float tensor from host values.
pub fn floats<const D: usize>(values: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    UPLOADS.fetch_add(1, Ordering::Relaxed);
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// Int tensor (indices) from host values.
pub fn ints<const D: usize>(
    values: &[usize],
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    UPLOADS.fetch_add(1, Ordering::Relaxed);
    let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// Read a float tensor back to the host (one sync).
pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    READS.fetch_add(1, Ordering::Relaxed);
    t.into_data_as::<f32>()
        .try_into_vec::<f32>()
        .expect("float tensor read back as f32")
}

/// Read a scalar-sized float tensor back to the host.
pub fn scalar<const D: usize>(t: Tensor<D>) -> f32 {
    let v = to_vec(t);
    debug_assert_eq!(v.len(), 1);
    v[0]
}

/// Max absolute elementwise difference, for tests and cross-device checks.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// `e^x` elementwise. On the CPU backend through [`crate::util::fastmath::exp`] (flex's `exp` is scalar
/// libm), built under autodiff as `c + c ⊙ (x − sg(x))` with the constant `c = e^x`: its value
/// is exactly `c` and its gradient exactly `c`. The value is the same with and without autodiff.
pub fn exp<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    if !is_host(&x.device()) {
        return x.exp();
    }
    let dims = x.dims();
    let device = x.device().inner();
    if !x.is_autodiff() {
        // No graph: the input is read by move (no copy where nothing else holds it) and
        // exponentiated in place.
        let mut v = to_vec(x);
        crate::util::fastmath::exp_in_place(&mut v);
        return floats(v, dims, &device);
    }
    let xc = x.clone().inner();
    let mut e = to_vec(xc.clone());
    crate::util::fastmath::exp_in_place(&mut e);
    let c = floats(e, dims, &device).autodiff();
    c.clone() + c * (x - xc.autodiff())
}

/// Softmax along `dim`, from primitive ops. burn's own softmax takes a different path with
/// autodiff than without, which changes the last bit; this one gives bitwise-identical values
/// with and without autodiff, so a no-graph recompute of π_old equals the first update's forward.
pub fn softmax<const D: usize>(x: burn::tensor::Tensor<D>, dim: usize) -> burn::tensor::Tensor<D> {
    let m = x.clone().detach().max_dim(dim);
    let e = (x - m).exp();
    e.clone() / e.sum_dim(dim)
}

/// Log-softmax along `dim` (same construction as [`softmax`]).
pub fn log_softmax<const D: usize>(
    x: burn::tensor::Tensor<D>,
    dim: usize,
) -> burn::tensor::Tensor<D> {
    let m = x.clone().detach().max_dim(dim);
    let shifted = x - m;
    shifted.clone() - shifted.exp().sum_dim(dim).log()
}

/// Whether `device` is the CPU backend, where host-side elementwise kernels beat a round trip
/// through the backend (on a GPU they would force a transfer).
pub fn is_host(device: &Device) -> bool {
    #[cfg(feature = "flex")]
    {
        device.clone().inner() == Device::flex()
    }
    #[cfg(not(feature = "flex"))]
    {
        let _ = device;
        false
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;

    #[test]
    fn host_exp_has_the_value_and_gradient_of_exp() {
        let device = Device::flex();
        let v: Vec<f32> = (0..24).map(|i| i as f32 * 0.37 - 6.0).collect();
        let plain = to_vec(exp(floats(v.clone(), [4, 6], &device)));
        let x = floats(v.clone(), [4, 6], &device.clone().autodiff()).require_grad();
        let y = exp(x.clone());
        // Same value with and without autodiff, within 4 ulp of libm's.
        assert_eq!(to_vec(y.clone().inner()), plain);
        for (a, b) in plain.iter().zip(&v) {
            assert!(
                (a - b.exp()).abs() <= 4.0 * f32::EPSILON * b.exp(),
                "{a} vs {}",
                b.exp()
            );
        }
        // d/dx Σ w ⊙ e^x = w ⊙ e^x.
        let w: Vec<f32> = (0..24).map(|i| 1.0 + i as f32 * 0.1).collect();
        let grads = (y * floats(w.clone(), [4, 6], &device.clone().autodiff()))
            .sum()
            .backward();
        let g = to_vec(x.grad(&grads).expect("gradient"));
        for i in 0..24 {
            assert_eq!(g[i], w[i] * plain[i], "element {i}");
        }
    }
}
