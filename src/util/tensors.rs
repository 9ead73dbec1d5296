//! Host <-> device helpers: the few conversions every module needs, in one place.

use burn::tensor::{Device, Int, Tensor, TensorData};
use std::sync::atomic::{AtomicU64, Ordering};

static READS: AtomicU64 = AtomicU64::new(0);
static UPLOADS: AtomicU64 = AtomicU64::new(0);
static READ_BYTES: AtomicU64 = AtomicU64::new(0);
static UPLOAD_BYTES: AtomicU64 = AtomicU64::new(0);

/// Host↔device transfers made through these helpers since the process started. Every read
/// back to the host and every upload of host values goes through [`to_vec`], [`floats`] and
/// [`ints`], so these count the sync points a GPU pays for, and the bytes that cross the bus,
/// on any device (on `flex` they are copies). Process-wide: per-stage deltas mean something
/// only while one trainer runs alone (`bench --rl`, a test of its own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Transfers {
    /// Device → host reads (round trips: each waits for the device).
    pub reads: u64,
    /// Host → device uploads.
    pub uploads: u64,
    /// Bytes read back (4 a value).
    pub read_bytes: u64,
    /// Bytes uploaded (4 a value: f32 or i32).
    pub upload_bytes: u64,
}

impl Transfers {
    /// The counts now.
    pub fn now() -> Transfers {
        Transfers {
            reads: READS.load(Ordering::Relaxed),
            uploads: UPLOADS.load(Ordering::Relaxed),
            read_bytes: READ_BYTES.load(Ordering::Relaxed),
            upload_bytes: UPLOAD_BYTES.load(Ordering::Relaxed),
        }
    }

    /// The transfers since `earlier`.
    pub fn since(earlier: Transfers) -> Transfers {
        Transfers::now() - earlier
    }
}

impl std::ops::Add for Transfers {
    type Output = Transfers;
    fn add(self, o: Transfers) -> Transfers {
        Transfers {
            reads: self.reads + o.reads,
            uploads: self.uploads + o.uploads,
            read_bytes: self.read_bytes + o.read_bytes,
            upload_bytes: self.upload_bytes + o.upload_bytes,
        }
    }
}

/// Saturating: a part measured inside a span is never more than the span.
impl std::ops::Sub for Transfers {
    type Output = Transfers;
    fn sub(self, o: Transfers) -> Transfers {
        Transfers {
            reads: self.reads.saturating_sub(o.reads),
            uploads: self.uploads.saturating_sub(o.uploads),
            read_bytes: self.read_bytes.saturating_sub(o.read_bytes),
            upload_bytes: self.upload_bytes.saturating_sub(o.upload_bytes),
        }
    }
}

impl std::iter::Sum for Transfers {
    fn sum<I: Iterator<Item = Transfers>>(it: I) -> Transfers {
        it.fold(Transfers::default(), |a, b| a + b)
    }
}

impl std::fmt::Display for Transfers {
    /// `12 reads (3.1 KiB) + 40 uploads (1.2 MiB)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} reads ({}) + {} uploads ({})",
            self.reads,
            bytes(self.read_bytes),
            self.uploads,
            bytes(self.upload_bytes)
        )
    }
}

/// A byte count in B, KiB or MiB.
fn bytes(n: u64) -> String {
    match n {
        n if n < 1024 => format!("{n} B"),
        n if n < 1024 * 1024 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0)),
    }
}

/// One RL step's transfers by phase (what `bench --rl` prints beside the phase times).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTransfers {
    /// Sampling the rollout batch (prefill and every decoding step).
    pub rollout: Transfers,
    /// π_old's recompute, the reference and teacher passes, advantages and drift calibration.
    pub pi_old: Transfers,
    /// The updates' forwards, losses and backwards (PR²'s predictor included).
    pub train: Transfers,
    /// AdamW (global norm, clip, update) and the router-bias nudge, over all minibatches.
    pub optimizer: Transfers,
    /// The drift probe, the bias-only probe and the router check.
    pub probe: Transfers,
}

impl StepTransfers {
    pub fn total(&self) -> Transfers {
        self.rollout + self.pi_old + self.train + self.optimizer + self.probe
    }
}

/// Float tensor from host values.
pub fn floats<const D: usize>(values: Vec<f32>, shape: [usize; D], device: &Device) -> Tensor<D> {
    UPLOADS.fetch_add(1, Ordering::Relaxed);
    UPLOAD_BYTES.fetch_add(4 * values.len() as u64, Ordering::Relaxed);
    Tensor::from_data(TensorData::new(values, shape), device)
}

/// Int tensor (indices) from host values.
pub fn ints<const D: usize>(
    values: &[usize],
    shape: [usize; D],
    device: &Device,
) -> Tensor<D, Int> {
    UPLOADS.fetch_add(1, Ordering::Relaxed);
    UPLOAD_BYTES.fetch_add(4 * values.len() as u64, Ordering::Relaxed);
    let v: Vec<i32> = values.iter().map(|&x| x as i32).collect();
    Tensor::from_data(TensorData::new(v, shape), device)
}

/// Read a float tensor back to the host (one sync).
pub fn to_vec<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    READS.fetch_add(1, Ordering::Relaxed);
    READ_BYTES.fetch_add(4 * t.shape().num_elements() as u64, Ordering::Relaxed);
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
