//! The expert products of the fused node on host slices: the `gemm` call, one expert's up,
//! gate and down products, and the same on rows repeated so a product keeps the gemm path of
//! the batch its rows stand for.

use crate::kernels::flex::fastmath::silu_mul;
use crate::kernels::flex::host_mm::{Scratch, View, gemm_into, gemm_to, written_ref};
use std::mem::MaybeUninit;

/// `c[m×n] = a·b` (or `c += a·b` with `acc`); `a` is `[m×k]` row-major, or `[k×m]` read
/// transposed with `at`; `b` is `[k×n]`, or `[n×k]` read transposed with `bt`.
#[allow(clippy::too_many_arguments)]
pub(super) fn mm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    at: bool,
    b: &[f32],
    bt: bool,
    c: &mut [f32],
    acc: bool,
) {
    let (a, b) = views(m, n, k, a, at, b, bt);
    gemm_into(m, n, k, a, b, c, n, 1.0, acc);
}

/// [`mm`] without accumulation into uninitialised memory: `c[m×n] = a·b`, all of it written.
#[allow(clippy::too_many_arguments)]
pub(super) fn mm_to(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    at: bool,
    b: &[f32],
    bt: bool,
    c: &mut [MaybeUninit<f32>],
) {
    let (a, b) = views(m, n, k, a, at, b, bt);
    gemm_to(m, n, k, a, b, c, n, 1.0);
}

/// An expert's up, gate and down products on its `m` rows `xe` `[m, d]`: `a1`, `a3`, `h`
/// `[m, f]` and `o` `[m, d]` (exactly those lengths), each written in full.
pub(super) fn products(
    xe: &[f32],
    m: usize,
    [w1, w3, w2]: [&[f32]; 3],
    (d, f): (usize, usize),
    bufs: [&mut [MaybeUninit<f32>]; 4],
) {
    let [a1, a3, h, o] = bufs;
    assert!(a1.len() == m * f && a3.len() == m * f && h.len() == m * f && o.len() == m * d);
    mm_to(m, f, d, xe, false, w1, false, a1);
    mm_to(m, f, d, xe, false, w3, false, a3);
    // SAFETY: each product wrote all m·f of its output.
    let (a1, a3) = unsafe { (written_ref(a1), written_ref(a3)) };
    silu_mul(a1, a3, h);
    // SAFETY: silu_mul wrote all m·f.
    let h = unsafe { written_ref(h) };
    mm_to(m, d, f, h, false, w2, false, o);
}

/// [`products`] on `xe` with its first row repeated up to `rows` rows; the first `m` rows of each
/// result are written to `bufs`.
pub(super) fn products_padded(
    xe: &[f32],
    rows: usize,
    w: [&[f32]; 3],
    (d, f): (usize, usize),
    bufs: [&mut [MaybeUninit<f32>]; 4],
) {
    let m = xe.len() / d;
    let mut x = xe.to_vec();
    for _ in m..rows {
        x.extend_from_slice(&xe[..d]);
    }
    let mut tmp = [rows * f, rows * f, rows * f, rows * d].map(Scratch::new);
    {
        let [t1, t3, th, to] = &mut tmp;
        products(
            &x,
            rows,
            w,
            (d, f),
            [t1.out(), t3.out(), th.out(), to.out()],
        );
    }
    for (dst, mut src) in bufs.into_iter().zip(tmp) {
        // SAFETY: `products` wrote every value of the four.
        let src = unsafe { written_ref(src.out()) };
        for (d, &s) in dst.iter_mut().zip(src) {
            d.write(s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::mm;

    /// `mm` against a plain triple loop, for every transpose and accumulate combination, at a
    /// small shape and at one above the threshold where gemm splits the work over threads.
    #[test]
    fn mm_matches_the_triple_loop() {
        for (m, n, k) in [(3, 5, 7), (200, 192, 200)] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 5 % 11) as f32 - 5.0) / 8.0)
                .collect();
            let c0: Vec<f32> = (0..m * n).map(|i| (i % 3) as f32).collect();
            for (at, bt, acc) in (0..8).map(|x| (x & 1 == 1, x & 2 == 2, x & 4 == 4)) {
                // Stored transposed when read transposed: a as [k×m], b as [n×k].
                let get_a = |i: usize, p: usize| if at { a[p * m + i] } else { a[i * k + p] };
                let get_b = |p: usize, j: usize| if bt { b[j * k + p] } else { b[p * n + j] };
                let mut c = c0.clone();
                mm(m, n, k, &a, at, &b, bt, &mut c, acc);
                for i in 0..m {
                    for j in 0..n {
                        let dot: f64 = (0..k).map(|p| f64::from(get_a(i, p) * get_b(p, j))).sum();
                        let want = dot + if acc { f64::from(c0[i * n + j]) } else { 0.0 };
                        let got = f64::from(c[i * n + j]);
                        assert!(
                            (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "{m}x{n}x{k} at {at} bt {bt} acc {acc}: [{i},{j}] {got} vs {want}"
                        );
                    }
                }
            }
        }
    }
}

/// The operands of `a[m×k]·b[k×n]` as views, each read transposed when its flag is set.
#[allow(clippy::too_many_arguments)]
fn views<'a>(
    m: usize,
    n: usize,
    k: usize,
    a: &'a [f32],
    at: bool,
    b: &'a [f32],
    bt: bool,
) -> (View<'a>, View<'a>) {
    let a = if at {
        View::transposed(a, m)
    } else {
        View::rows(a, k)
    };
    let b = if bt {
        View::transposed(b, k)
    } else {
        View::rows(b, n)
    };
    (a, b)
}
