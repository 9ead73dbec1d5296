//! Matrix products on host slices for the CPU backend's hand-written nodes, through `gemm` (the
//! crate burn-flex uses, with its AVX-512 kernels chosen at run time), with arbitrary strides so
//! a head's or an expert's block is read and written in place.

use std::mem::MaybeUninit;

pub use super::scratch::{Scratch, written, written_ref};

/// A matrix on a host slice: element `(i, j)` at `data[i·rs + j·cs]`.
#[derive(Clone, Copy, Debug)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> View<'a> {
    /// Row-major with `cols` columns.
    pub fn rows(data: &'a [f32], cols: usize) -> Self {
        View {
            data,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of a row-major matrix with `cols` columns (read as `[cols × rows]`).
    pub fn transposed(data: &'a [f32], cols: usize) -> Self {
        View {
            data,
            rs: 1,
            cs: cols,
        }
    }

    /// The largest index an `r × c` matrix reaches, plus one (0 when empty).
    fn reach(&self, r: usize, c: usize) -> usize {
        if r == 0 || c == 0 {
            0
        } else {
            (r - 1) * self.rs + (c - 1) * self.cs + 1
        }
    }
}

/// `c[m×n] = beta·a·b` (or `c += beta·a·b` with `acc`): `a` is `m×k`, `b` is `k×n`, `c` is
/// written at `c[i·c_rs + j]`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_into(
    m: usize,
    n: usize,
    k: usize,
    a: View<'_>,
    b: View<'_>,
    c: &mut [f32],
    c_rs: usize,
    beta: f32,
    acc: bool,
) {
    // SAFETY: `c` is initialised, so reading it (with `acc`) is sound; gemm writes floats.
    unsafe {
        gemm_raw(
            (m, n, k),
            (a, b),
            (c.as_mut_ptr(), c.len(), c_rs),
            beta,
            acc,
        )
    }
}

/// [`gemm_into`] without accumulation into uninitialised memory: `c[m×n] = beta·a·b`, every
/// element at `c[i·c_rs + j]` (`i < m`, `j < n`) written, nothing read (gemm without
/// accumulation never reads its output).
#[allow(clippy::too_many_arguments)]
pub fn gemm_to(
    m: usize,
    n: usize,
    k: usize,
    a: View<'_>,
    b: View<'_>,
    c: &mut [MaybeUninit<f32>],
    c_rs: usize,
    beta: f32,
) {
    // SAFETY: without accumulation gemm reads nothing of `c` and writes only floats.
    unsafe {
        let c = (c.as_mut_ptr().cast::<f32>(), c.len(), c_rs);
        gemm_raw((m, n, k), (a, b), c, beta, false)
    }
}

/// The one gemm call. `c` is `(pointer, length, row stride)`.
///
/// # Safety
/// With `acc`, the `m×n` elements the strides reach must be initialised.
unsafe fn gemm_raw(
    (m, n, k): (usize, usize, usize),
    (a, b): (View<'_>, View<'_>),
    (c, c_len, c_rs): (*mut f32, usize, usize),
    beta: f32,
    acc: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        a.data.len() >= a.reach(m, k)
            && b.data.len() >= b.reach(k, n)
            && c_len >= (m - 1) * c_rs + n
            && c_rs >= n,
        "gemm_into: a view reaches past its slice"
    );
    let par = if m * n * k >= crate::kernels::gemm_paths::PARALLEL_PRODUCT {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: the assert above bounds every index the strides reach, and `c`'s rows (c_rs ≥ n)
    // do not overlap.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            c_rs as isize,
            acc,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0,
            beta,
            false,
            false,
            false,
            par,
        );
    }
}

/// A flex tensor's values, borrowed where it is contiguous.
pub fn host(t: &burn_flex::FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(
            t.to_contiguous()
                .into_data()
                .try_into_vec::<f32>()
                .expect("an f32 tensor"),
        ),
    }
}
