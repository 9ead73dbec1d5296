//! Sixteen rows into sixteen lanes: the copy that turns up to sixteen host rows into key-major
//! `[keys, 16]` blocks (one row per vector lane), so that row-wise reductions run as vertical
//! vector operations (the attention softmax, [`super::fastmath::softmax_rows`]). With AVX-512 it
//! runs as 16 × 16 tiles transposed in registers instead of one scattered store per element.
//! It only moves values: the blocks are the same bits whichever way they are filled.

/// Lanes per block.
pub const L: usize = 16;

/// `out[jj][t] = rows[t][j0 + jj]` where that element exists and `+0.0` otherwise (past the end
/// of a row, and in every lane `t ≥ rows.len()`), for `jj < out.len() ≤ 16`.
pub fn rows_to_lanes(rows: &[&[f32]], j0: usize, out: &mut [[f32; L]]) {
    assert!(
        rows.len() <= L && out.len() <= L,
        "at most 16 rows and 16 keys a call"
    );
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has avx512f; every load is masked to the row's own elements.
        unsafe { avx512::rows_to_lanes(rows, j0, out) };
        return;
    }
    scalar(rows, j0, out);
}

/// The element-by-element form (and the reference the tiles are tested against).
fn scalar(rows: &[&[f32]], j0: usize, out: &mut [[f32; L]]) {
    for (jj, o) in out.iter_mut().enumerate() {
        for (t, lane) in o.iter_mut().enumerate() {
            *lane = rows
                .get(t)
                .and_then(|r| r.get(j0 + jj))
                .copied()
                .unwrap_or(0.0);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::L;
    use std::arch::x86_64::*;

    /// [`super::rows_to_lanes`] as one 16 × 16 tile: sixteen masked row loads, the transpose
    /// in registers (interleave pairs of rows, then pairs of pairs, then 128-bit quarters twice),
    /// and one store per key.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn rows_to_lanes(rows: &[&[f32]], j0: usize, out: &mut [[f32; L]]) {
        let mut r = [_mm512_setzero_ps(); L];
        for (t, row) in rows.iter().enumerate() {
            let n = row.len().saturating_sub(j0).min(L);
            if n > 0 {
                let mask: __mmask16 = if n == L { 0xFFFF } else { (1u16 << n) - 1 };
                // SAFETY: the mask covers `row[j0..j0 + n]` only, all inside the row.
                r[t] = unsafe { _mm512_maskz_loadu_ps(mask, row.as_ptr().add(j0)) };
            }
        }
        let mut t = [_mm512_setzero_ps(); L];
        for i in 0..L / 2 {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
        }
        let (pd, ps) = (_mm512_castps_pd, _mm512_castpd_ps);
        for i in 0..L / 4 {
            let b = 4 * i;
            r[b] = ps(_mm512_unpacklo_pd(pd(t[b]), pd(t[b + 2])));
            r[b + 1] = ps(_mm512_unpackhi_pd(pd(t[b]), pd(t[b + 2])));
            r[b + 2] = ps(_mm512_unpacklo_pd(pd(t[b + 1]), pd(t[b + 3])));
            r[b + 3] = ps(_mm512_unpackhi_pd(pd(t[b + 1]), pd(t[b + 3])));
        }
        for h in 0..2 {
            let b = 8 * h;
            for i in 0..4 {
                t[b + i] = _mm512_shuffle_f32x4::<0x88>(r[b + i], r[b + 4 + i]);
                t[b + 4 + i] = _mm512_shuffle_f32x4::<0xDD>(r[b + i], r[b + 4 + i]);
            }
        }
        for i in 0..8 {
            r[i] = _mm512_shuffle_f32x4::<0x88>(t[i], t[8 + i]);
            r[8 + i] = _mm512_shuffle_f32x4::<0xDD>(t[i], t[8 + i]);
        }
        for (jj, o) in out.iter_mut().enumerate() {
            // SAFETY: `o` is 16 floats.
            unsafe { _mm512_storeu_ps(o.as_mut_ptr(), r[jj]) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows of every length around the tile (none, short, exactly 16, longer), a start inside
    /// and past them, fewer rows than lanes, and fewer keys than 16: the tiles give the
    /// element-by-element values, signed zeros and NaN bits included.
    #[test]
    fn the_tiles_are_the_elements_moved() {
        let data: Vec<f32> = (0..40 * 16)
            .map(|i| match i % 11 {
                3 => -0.0,
                7 => f32::from_bits(0x7FC0_0001 + i as u32),
                _ => i as f32 * 0.5 - 100.0,
            })
            .collect();
        for n_rows in [0, 1, 5, 16] {
            let rows: Vec<&[f32]> = (0..n_rows)
                .map(|t| &data[t * 40..t * 40 + [0, 3, 16, 17, 40][t % 5]])
                .collect();
            for j0 in [0, 1, 16, 30, 41] {
                for keys in [1, 7, 16] {
                    let (mut got, mut want) = (vec![[1.0; L]; keys], vec![[2.0; L]; keys]);
                    rows_to_lanes(&rows, j0, &mut got);
                    scalar(&rows, j0, &mut want);
                    let bits = |v: &[[f32; L]]| {
                        v.iter()
                            .flat_map(|r| r.map(f32::to_bits))
                            .collect::<Vec<_>>()
                    };
                    assert_eq!(bits(&got), bits(&want), "{n_rows} rows from {j0}, {keys}");
                }
            }
        }
    }
}
