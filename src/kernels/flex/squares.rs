//! The gradient norm's per-tensor sums of squares on host values, each in the order burn-flex
//! sums `g.powi_scalar(2)`, so the norm keeps its bits.

use crate::kernels::gemm_paths::PARALLEL_SUM;
use burn::tensor::Tensor;
use burn_flex::{Flex, FlexTensor};
use macerator::{Scalar, Simd, vload_unaligned};

/// `Σ g²` of each tensor, each as burn-flex computes `g.powi_scalar(2).sum()` (the squares
/// `g·g`, summed by its eight-accumulator kernel), or `None` where a tensor is not a
/// contiguous host tensor under [`PARALLEL_SUM`] values.
pub fn host_sums(grads: &[Tensor<2>]) -> Option<Vec<f32>> {
    let flex: Vec<FlexTensor> = grads
        .iter()
        .map(|g| g.clone().try_into_primitive::<Flex>().ok())
        .collect::<Option<_>>()?;
    let values: Vec<&[f32]> = flex
        .iter()
        .map(|t| t.as_slice::<f32>().filter(|s| s.len() < PARALLEL_SUM))
        .collect::<Option<_>>()?;
    Some(crate::util::parallel::par_map(values.len(), |i| {
        sum_of_squares(values[i])
    }))
}

/// `Σ x²` over `xs`, in exactly the order of burn-flex's `simd::kernels::sum_f32` over the
/// squares (its `sum_body`: eight vector accumulators over blocks of eight vectors, combined
/// as `((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))`, then the remaining whole vectors,
/// the lanes' reduction, plus the scalar tail), with the same SIMD dispatch (macerator's);
/// each square is a separate product, as `powi_scalar(2)` computes it, never an FMA.
#[macerator::with_simd]
pub fn sum_of_squares<S: Simd>(mut xs: &[f32]) -> f32 {
    let lanes = f32::lanes::<S>();
    let stride = lanes * 8;
    let zero = 0.0f32.splat::<S>();
    let (mut s0, mut s1, mut s2, mut s3) = (zero, zero, zero, zero);
    let (mut s4, mut s5, mut s6, mut s7) = (zero, zero, zero, zero);
    while xs.len() >= stride {
        // SAFETY: `xs` holds at least eight whole vectors.
        unsafe {
            let p = xs.as_ptr();
            let sq = |i: usize| {
                let v = vload_unaligned::<S, f32>(p.add(lanes * i));
                v * v
            };
            s0 += sq(0);
            s1 += sq(1);
            s2 += sq(2);
            s3 += sq(3);
            s4 += sq(4);
            s5 += sq(5);
            s6 += sq(6);
            s7 += sq(7);
        }
        xs = &xs[stride..];
    }
    let mut sum = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
    while xs.len() >= lanes {
        // SAFETY: `xs` holds at least one whole vector.
        let v = unsafe { vload_unaligned::<S, f32>(xs.as_ptr()) };
        sum += v * v;
        xs = &xs[lanes..];
    }
    sum.reduce_add() + xs.iter().map(|&x| x * x).sum::<f32>()
}
