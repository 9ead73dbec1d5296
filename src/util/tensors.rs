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
