//! Branch-free `exp` and sigmoid for host-side elementwise work on the CPU backend.
//!
//! flex evaluates `exp` one element at a time through libm; in the SwiGLU experts that sigmoid
//! was the largest cost after matrix products. These versions are plain arithmetic the compiler
//! vectorises: Cody–Waite range reduction `x = n·ln2 + r`, `|r| ≤ ln2/2`, a degree-7 Taylor
//! polynomial for `e^r` (truncation error below 6e-9 relative) and `2^n` built from the exponent
//! bits. Measured against `f32::exp` over [-87, 88]: a few ulp (see the unit test). Deterministic:
//! the same input always gives the same bits.

const LOG2E: f32 = std::f32::consts::LOG2_E;
// ln 2 split so that n·LN2_HI is exact for |n| < 2^9.
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
// 1.5·2^23: adding and subtracting it rounds to the nearest integer (ties to even) in f32.
const ROUND: f32 = 12_582_912.0;

/// `e^x` for finite `x`, inputs clamped to [-87, 88] (the result stays a normal f32).
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // t's low mantissa bits hold n (its ulp is 1), so 2^n needs integer ops only.
    let n_int = t.to_bits().wrapping_sub(ROUND.to_bits());
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    p * scale
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Defines a slice kernel whose body is compiled twice: as is, and for AVX-512 (taken at run
/// time where the CPU has avx512f). The arithmetic is the same and Rust never contracts a
/// multiply and an add into one FMA, so only the vector width differs: both give the same bits
/// (tested), and no number depends on the machine's vector unit.
macro_rules! wide {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) $body:block) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn body($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f")]
                unsafe fn avx512($($arg: $ty),*) {
                    body($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has avx512f.
                    return unsafe { avx512($($arg),*) };
                }
            }
            body($($arg),*)
        }
    };
}

pub(crate) use wide;

use super::scratch::Scratch;
use super::transpose::rows_to_lanes;
use std::mem::MaybeUninit;

wide! {
    /// The attention node's score rows `p` (`[b·h·s, kv]`, row `r` the query `i = r mod s` of
    /// batch row `r / (s·h)`) in place, the rows `sel` only (ascending; the others are left as
    /// they are): each row's softmax over keys `0..=pos0 + i` (`keep`, `[b, kv]`, as 0/1) and
    /// exactly 0 after. Bitwise the row-by-row loop, sixteen selected rows at a time, one row
    /// per vector lane: the group's rows are copied key-major into a `[keys, 16]` block (each
    /// row only up to its own key), so that the maximum, the exponentials, the sum and the
    /// scaling are vertical vector operations, whatever the row length. A row's weights `w`
    /// are `keep` before its own key, 1 at it and 0 after, so `exp(x − m)·w` gives the kept
    /// keys' values and exact zeros elsewhere; its maximum over the kept keys does not depend
    /// on the order it is taken in (comparisons with NaN are false either way), and its sum
    /// runs key by key in order, as the row-by-row loop's does (the zeros after the last key
    /// add nothing to a positive sum). A lane's values never depend on the other lanes' rows.
    pub fn softmax_rows(p: &mut [f32], dims: (usize, usize, usize, usize), keep: &[f32], sel: &[usize]) {
        const L: usize = 16;
        let (kv, s, h, pos0) = dims;
        let (mut x, mut w) = (vec![[0.0f32; L]; kv], vec![[0.0f32; L]; kv]);
        for group in sel.chunks(L) {
            let n = group.len();
            let mut own = [0usize; L];
            let mut m = [0.0f32; L];
            let mut width = 0;
            for (t, &r) in group.iter().enumerate() {
                own[t] = pos0 + r % s;
                width = width.max(own[t] + 1);
            }
            // Each row up to its own key, and its batch row's `keep` before that key; the
            // lanes get +0 past a row's end and in the lanes of missing rows.
            let (mut rows, mut kept) = ([&[][..]; L], [&[][..]; L]);
            for (t, &r) in group.iter().enumerate() {
                let (o, bi) = (own[t], r / (s * h));
                (rows[t], kept[t]) = (&p[r * kv..=r * kv + o], &keep[bi * kv..bi * kv + o]);
                m[t] = p[r * kv + o];
            }
            for j0 in (0..width).step_by(L) {
                let c = (width - j0).min(L);
                rows_to_lanes(&rows[..n], j0, &mut x[j0..j0 + c]);
                rows_to_lanes(&kept[..n], j0, &mut w[j0..j0 + c]);
                for (j, wj) in (j0..).zip(&mut w[j0..j0 + c]) {
                    *wj = std::array::from_fn(|t| if t < n && j == own[t] { 1.0 } else { wj[t] });
                }
            }
            let (x, w) = (&mut x[..width], &w[..width]);
            for (xj, wj) in x.iter().zip(w) {
                // Whole arrays per key, so that the comparisons compile to vector ones.
                let v: [f32; L] =
                    std::array::from_fn(|t| if wj[t] > 0.0 { xj[t] } else { f32::NEG_INFINITY });
                m = std::array::from_fn(|t| if v[t] > m[t] { v[t] } else { m[t] });
            }
            let mut acc = [-0.0f32; L];
            for (xj, wj) in x.iter_mut().zip(w) {
                for t in 0..L {
                    xj[t] = exp(xj[t] - m[t]) * wj[t];
                    acc[t] += xj[t];
                }
            }
            let mut inv = [0.0f32; L];
            for t in 0..L {
                inv[t] = 1.0 / acc[t];
            }
            for xj in x.iter_mut() {
                for t in 0..L {
                    xj[t] *= inv[t];
                }
            }
            for (t, &r) in group.iter().enumerate() {
                let (o, row) = (own[t], &mut p[r * kv..(r + 1) * kv]);
                for (v, xj) in row[..=o].iter_mut().zip(x.iter()) {
                    *v = xj[t];
                }
                row[o + 1..].fill(0.0);
            }
        }
    }
}

wide! {
    /// `v[i] = e^v[i]` in place.
    pub fn exp_in_place(v: &mut [f32]) {
        for a in v.iter_mut() {
            *a = exp(*a);
        }
    }
}

wide! {
    /// `out[i] = b[i] · (a[i] · σ(a[i]))`: the value of `silu(a) ⊙ b`; every element of `out`
    /// (as long as `a` and `b`) written.
    pub fn silu_mul(a: &[f32], b: &[f32], out: &mut [MaybeUninit<f32>]) {
        for ((o, &a), &b) in out.iter_mut().zip(a).zip(b) {
            o.write(b * (a * sigmoid(a)));
        }
    }
}

wide! {
    /// The constants of the exp-free SwiGLU backward: `c3 = a·σ(a)` (= silu(a)) and
    /// `c1 = b·σ(a)(1 + a(1 − σ(a)))` (= b·silu'(a)); every element of both written.
    pub fn silu_mul_consts(a: &[f32], b: &[f32], c1: &mut [MaybeUninit<f32>], c3: &mut [MaybeUninit<f32>]) {
        for (((c1, c3), &a), &b) in c1.iter_mut().zip(c3.iter_mut()).zip(a).zip(b) {
            let s = sigmoid(a);
            c3.write(a * s);
            c1.write(b * (s + a * s * (1.0 - s)));
        }
    }
}

/// [`silu_mul`] into a new vector.
pub fn silu_mul_vec(a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "silu_mul of two equal lengths");
    let mut y = Scratch::new(a.len());
    silu_mul(a, b, y.out());
    // SAFETY: `silu_mul` writes every element of an output as long as its inputs.
    unsafe { y.written() }
}

/// [`silu_mul_consts`] into two new vectors, `(c1, c3)`.
pub fn silu_mul_consts_vec(a: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>) {
    assert_eq!(a.len(), b.len(), "silu_mul_consts of two equal lengths");
    let (mut c1, mut c3) = (Scratch::new(a.len()), Scratch::new(a.len()));
    silu_mul_consts(a, b, c1.out(), c3.out());
    // SAFETY: `silu_mul_consts` writes every element of outputs as long as its inputs.
    unsafe { (c1.written(), c3.written()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-by-one softmax the attention node ran before its rows were vectorised.
    fn softmax_in_order(seen: &mut [f32], keep: &[f32]) {
        let p = seen.len() - 1;
        let mut m = seen[p];
        for (&x, &k) in seen[..p].iter().zip(keep) {
            let x = if k > 0.0 { x } else { f32::NEG_INFINITY };
            m = if x > m { x } else { m };
        }
        seen[p] = exp(seen[p] - m);
        for (x, &k) in seen[..p].iter_mut().zip(keep) {
            *x = exp(*x - m) * k;
        }
        let inv = 1.0 / seen.iter().sum::<f32>();
        for x in seen.iter_mut() {
            *x *= inv;
        }
    }

    /// Short rows over a cache (`pos0 > 0`), causal rows longer than the vector lanes
    /// (`pos0 = 0`, as the training forward has), one query over a cache (generation) and a
    /// partial last group of rows; masked keys, zeros of both signs and NaN before, at and
    /// after a row's own key.
    #[test]
    fn softmax_rows_is_bitwise_row_by_row() {
        for (b, h, s, pos0) in [(3, 2, 5, 4), (2, 3, 40, 0), (5, 4, 1, 33), (1, 1, 17, 0)] {
            let kv = pos0 + s;
            for salt in 0..6 {
                let mut p: Vec<f32> = (0..b * h * s * kv)
                    .map(|i| ((i * 29 + salt * 13) % 31) as f32 / 4.0 - 3.0)
                    .collect();
                match salt {
                    1 => p[2 * kv + 1] = f32::NAN,
                    2 => p.iter_mut().step_by(7).for_each(|x| *x = -0.0),
                    3 => p.iter_mut().step_by(5).for_each(|x| *x = 0.0),
                    4 => p[kv - 1] = f32::NAN,
                    5 => p[(s - 1) * kv + pos0 + s - 1] = f32::NAN,
                    _ => {}
                }
                let keep: Vec<f32> = (0..b * kv)
                    .map(|i| f32::from(u8::from((i + salt) % 3 != 0)))
                    .collect();
                let mut want = p.clone();
                for (r, row) in want.chunks_exact_mut(kv).enumerate() {
                    let (last, bi) = (pos0 + r % s, r / (s * h));
                    let (seen, after) = row.split_at_mut(last + 1);
                    softmax_in_order(seen, &keep[bi * kv..(bi + 1) * kv]);
                    after.fill(0.0);
                }
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                // A selection of rows: those rows as in the loop, the others untouched.
                let sel: Vec<usize> = (0..b * h * s).filter(|r| r % 3 != 1).collect();
                let mut part = p.clone();
                softmax_rows(&mut part, (kv, s, h, pos0), &keep, &sel);
                for (r, ((got, want), orig)) in part
                    .chunks_exact(kv)
                    .zip(want.chunks_exact(kv))
                    .zip(p.chunks_exact(kv))
                    .enumerate()
                {
                    let expect = if r % 3 != 1 { want } else { orig };
                    assert_eq!(
                        bits(got),
                        bits(expect),
                        "row {r} of a selection, case {salt}"
                    );
                }
                let all: Vec<usize> = (0..b * h * s).collect();
                softmax_rows(&mut p, (kv, s, h, pos0), &keep, &all);
                assert_eq!(
                    bits(&p),
                    bits(&want),
                    "[{b}, {h}, {s}] at {pos0}, case {salt}"
                );
            }
        }
    }

    fn ulps(a: f32, b: f32) -> u32 {
        (a.to_bits() as i64 - b.to_bits() as i64).unsigned_abs() as u32
    }

    #[test]
    fn exp_matches_libm_within_a_few_ulp() {
        let mut worst = 0;
        let mut x = -87.0f32;
        while x <= 88.0 {
            worst = worst.max(ulps(exp(x), x.exp()));
            x += 0.001_3;
        }
        assert!(worst <= 4, "worst error {worst} ulp");
        assert_eq!(exp(0.0), 1.0);
        // Clamped ends stay finite and ordered.
        assert!(exp(1e6).is_finite() && exp(-1e6) > 0.0);
    }

    #[test]
    fn sigmoid_matches_the_definition() {
        for i in -2000..=2000 {
            let x = i as f32 * 0.01;
            let want = 1.0 / (1.0 + (-x as f64).exp());
            assert!(
                (sigmoid(x) as f64 - want).abs() <= 2e-7 * want.max(1e-3),
                "x={x}"
            );
        }
        assert_eq!(sigmoid(0.0), 0.5);
    }

    /// The slice kernels (AVX-512 where this CPU has it) give bitwise the values of the
    /// element functions, one call per element, over the whole clamped range and beyond.
    #[test]
    fn slice_kernels_are_bitwise_the_element_functions() {
        let a: Vec<f32> = (0..10_007).map(|i| (i as f32 - 5000.0) * 0.019).collect();
        let b: Vec<f32> = a.iter().map(|x| 1.5 - x * 0.3).collect();
        let one = |f: fn(f32) -> f32, x: f32| std::hint::black_box(f)(std::hint::black_box(x));
        let mut e = a.clone();
        exp_in_place(&mut e);
        let y = silu_mul_vec(&a, &b);
        let (c1, c3) = silu_mul_consts_vec(&a, &b);
        for i in 0..a.len() {
            let (x, s) = (a[i], one(sigmoid, a[i]));
            assert_eq!(e[i].to_bits(), one(exp, x).to_bits(), "exp({x})");
            assert_eq!(
                y[i].to_bits(),
                (b[i] * (x * s)).to_bits(),
                "silu_mul at {x}"
            );
            assert_eq!(c3[i].to_bits(), (x * s).to_bits(), "c3 at {x}");
            let want = b[i] * (s + x * s * (1.0 - s));
            assert_eq!(c1[i].to_bits(), want.to_bits(), "c1 at {x}");
        }
    }
}
