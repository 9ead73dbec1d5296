//! Matrix products on host slices for the CPU backend's hand-written nodes, through `gemm` (the
//! crate burn-flex uses, with its AVX-512 kernels chosen at run time), with arbitrary strides so
//! a head's or an expert's block is read and written in place.

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
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        a.data.len() >= a.reach(m, k)
            && b.data.len() >= b.reach(k, n)
            && c.len() >= (m - 1) * c_rs + n
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
            c.as_mut_ptr(),
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

/// `len` floats left as the allocator hands them over, for a kernel that writes every one before
/// anything reads it (a product by [`gemm_into`] without `acc`, which never reads its output,
/// `silu_mul`): the zeroing pass `vec![0.0; len]` would make is skipped. The buffers of the
/// hand-written nodes are megabytes each, allocated for every layer of every forward, so that
/// pass and the page faults it takes were a tenth of an experiment cell's step.
///
/// # Safety
/// The caller writes every element before reading any and before the vector leaves its hands.
#[allow(clippy::uninit_vec)]
pub unsafe fn scratch(len: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(len);
    // SAFETY: capacity is `len`; the caller's contract covers the values.
    unsafe { v.set_len(len) };
    v
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
