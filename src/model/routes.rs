//! Which experts a token runs: the native top-k of the router's scores, and the forced routes
//! of Routing Replay put in their place (optionally filtered against the live router).

/// Marks a forced slot as "no route recorded here: use the native choice".
pub const NO_ROUTE: u16 = u16::MAX;

/// Native top-k of each row of `probs` (`[tokens, n_experts]`): descending probability, ties to
/// the lower expert id, so the choice is deterministic. One pass per row keeps the best `k` in
/// order (an insertion into a short sorted list); the order (`f32::total_cmp`, then the id) is
/// total, so the result is the first `k` of the fully sorted row.
pub fn native_topk(probs: &[f32], n_experts: usize, k: usize) -> Vec<u16> {
    assert!(k <= n_experts, "top-{k} of {n_experts} experts");
    let mut out = Vec::with_capacity(probs.len() / n_experts * k);
    if k == 0 {
        return out;
    }
    let mut best: Vec<(f32, usize)> = Vec::with_capacity(k);
    for row in probs.chunks_exact(n_experts) {
        best.clear();
        for (e, &p) in row.iter().enumerate() {
            // Ids arrive in increasing order, so a later expert goes after every kept one
            // that it does not strictly beat.
            let beats = |&(q, _): &(f32, usize)| p.total_cmp(&q).is_gt();
            if best.len() == k && !beats(&best[k - 1]) {
                continue;
            }
            let at = best.iter().position(beats).unwrap_or(best.len());
            if best.len() == k {
                best.pop();
            }
            best.insert(at, (p, e));
        }
        out.extend(best.iter().map(|&(_, e)| e as u16));
    }
    out
}

/// The expert ids that run: the native ones, with `forced` rows (replay) put in their place;
/// with a `filter` `(ratio, scores [T, E])`, a forced expert scoring below `ratio` × the weakest
/// native score of its token is replaced by the first native experts the row lacks (prime-rl's
/// `_filter_replayed_experts`). Also returns the forced slots and how many were replaced.
pub(super) fn used_ids(
    native: &[u16],
    forced: Option<&[u16]>,
    (t, k, e_n): (usize, usize, usize),
    filter: Option<(f32, &[f32])>,
) -> (Vec<u16>, usize, usize) {
    let Some(f) = forced else {
        return (native.to_vec(), 0, 0);
    };
    assert_eq!(
        f.len(),
        t * k,
        "forced routes have {} slots, expected {}",
        f.len(),
        t * k
    );
    let mut used = native.to_vec();
    let (mut slots, mut replaced) = (0, 0);
    for tok in 0..t {
        let row = &f[tok * k..(tok + 1) * k];
        if row.iter().all(|&e| e == NO_ROUTE) {
            continue;
        }
        slots += k;
        for (j, &e) in row.iter().enumerate() {
            assert!(
                (e as usize) < e_n,
                "forced expert id {e} out of range 0..{e_n}"
            );
            used[tok * k + j] = e;
        }
        let Some((ratio, scores)) = filter else {
            continue;
        };
        let live = &native[tok * k..(tok + 1) * k];
        let score = |e: u16| scores[tok * e_n + e as usize];
        let floor = ratio * live.iter().map(|&e| score(e)).fold(f32::INFINITY, f32::min);
        let out = &mut used[tok * k..(tok + 1) * k];
        let mut empty: Vec<usize> = Vec::new();
        for (j, e) in out.iter_mut().enumerate() {
            if score(*e) < floor {
                *e = NO_ROUTE;
                empty.push(j);
            }
        }
        replaced += empty.len();
        let mut fill = empty.into_iter();
        for &c in live {
            if out.contains(&c) {
                continue;
            }
            let Some(j) = fill.next() else { break };
            out[j] = c;
        }
    }
    (used, slots, replaced)
}

#[cfg(test)]
mod replay_filter_tests {
    use super::*;

    /// prime-rl's filter by hand: 4 experts, top-2. Token 0: live top-2 (2, 0) with scores 0.4
    /// and 0.3, replayed (1, 0); expert 1 scores 0.1 < 0.5 × 0.3, so it is replaced by the
    /// first live expert the row lacks, 2. Token 1: replayed (3, 1) both above the floor, kept.
    /// Token 2 has no recorded route (native). Ratio 0 (no filter) replays verbatim.
    #[test]
    fn a_replayed_expert_below_the_floor_is_replaced_by_the_live_choice() {
        let native = [2u16, 0, 1, 3, 0, 1];
        let forced = [1u16, 0, 3, 1, NO_ROUTE, NO_ROUTE];
        let scores = [
            0.3f32, 0.1, 0.4, 0.2, // token 0
            0.1, 0.3, 0.1, 0.5, // token 1: live (1, 3) → floor 0.5 × 0.3
            0.4, 0.3, 0.2, 0.1, // token 2
        ];
        let (used, slots, replaced) =
            used_ids(&native, Some(&forced), (3, 2, 4), Some((0.5, &scores)));
        assert_eq!(used, vec![2, 0, 3, 1, 0, 1]);
        assert_eq!((slots, replaced), (4, 1));
        let (plain, slots, replaced) = used_ids(&native, Some(&forced), (3, 2, 4), None);
        assert_eq!(plain, vec![1, 0, 3, 1, 0, 1]);
        assert_eq!((slots, replaced), (4, 0));
        // Ratio 1: only replayed experts at least as strong as the weakest live one stay.
        let (strict, _, replaced) =
            used_ids(&native, Some(&forced), (3, 2, 4), Some((1.0, &scores)));
        assert_eq!(strict, vec![2, 0, 3, 1, 0, 1]);
        assert_eq!(replaced, 1);
    }
}

#[cfg(test)]
mod topk_tests {
    use super::native_topk;

    /// The sort it replaces: every row ordered by `total_cmp` descending, ties to the lower id.
    fn by_sorting(probs: &[f32], e_n: usize, k: usize) -> Vec<u16> {
        probs
            .chunks_exact(e_n)
            .flat_map(|row| {
                let mut order: Vec<usize> = (0..e_n).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                order[..k].iter().map(|&e| e as u16).collect::<Vec<_>>()
            })
            .collect()
    }

    /// Rows drawn from a handful of values (so ties are common), with ±0, ±inf and NaN of both
    /// signs among them, for the presets' (experts, k) and the edges k = 0, 1, all.
    #[test]
    fn the_one_pass_top_k_is_the_first_k_of_the_sorted_row() {
        let pool = [
            0.25f32,
            0.5,
            0.125,
            0.0,
            -0.0,
            1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            0.25,
            3e-39,
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for (e_n, ks) in [
            (4, vec![0, 1, 2, 4]),
            (8, vec![2, 8]),
            (32, vec![4]),
            (64, vec![8]),
        ] {
            let probs: Vec<f32> = (0..e_n * 300)
                .map(|_| pool[(next() % pool.len() as u64) as usize])
                .collect();
            for k in ks {
                let (got, want) = (native_topk(&probs, e_n, k), by_sorting(&probs, e_n, k));
                assert_eq!(got, want, "{e_n} experts, top-{k}");
            }
        }
    }
}
