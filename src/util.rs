//! Small helpers shared by the CLI and config code: name suggestions and stable hashing.

/// ", did you mean 'x'?" for the closest allowed name, or "" when nothing is close.
pub fn suggest(given: &str, allowed: &[&str]) -> String {
    let best = allowed
        .iter()
        .map(|a| (levenshtein(given, a), *a))
        .min_by_key(|(d, _)| *d);
    match best {
        Some((d, a)) if d <= (given.len().max(2) / 2).max(2) => format!("; did you mean '{a}'?"),
        _ => String::new(),
    }
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// FNV-1a, 64 bit: a stable hash (unlike `DefaultHasher`) for cache keys and checksums.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A seed derived from a base seed and a label, so independent streams never share state.
pub fn derive_seed(seed: u64, label: &str) -> u64 {
    fnv1a64(format!("{seed}/{label}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn suggests_close_names_only() {
        assert_eq!(suggest("tyo", &["tiny", "toy"]), "; did you mean 'toy'?");
        assert_eq!(suggest("zzzzzzzz", &["tiny", "toy"]), "");
    }
    #[test]
    fn fnv_is_stable() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}

/// `f(0), …, f(n − 1)` in order, on the rayon pool when it has more than one thread, else one
/// after the other on this thread. Each call must be independent of the others, so the results
/// never depend on the thread count.
pub fn par_map<T: Send>(n: usize, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    if n > 1 && rayon::current_num_threads() > 1 {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// `f(i, &mut items[i])` for every item, in order, like [`par_map`].
pub fn par_map_mut<S: Send, T: Send>(
    items: &mut [S],
    f: impl Fn(usize, &mut S) -> T + Sync + Send,
) -> Vec<T> {
    use rayon::prelude::*;
    if items.len() > 1 && rayon::current_num_threads() > 1 {
        items
            .par_iter_mut()
            .enumerate()
            .map(|(i, s)| f(i, s))
            .collect()
    } else {
        items.iter_mut().enumerate().map(|(i, s)| f(i, s)).collect()
    }
}

/// The largest divisor of `n` that is at most `max` (at least 1).
pub fn largest_divisor_at_most(n: usize, max: usize) -> usize {
    (1..=max.min(n).max(1))
        .rev()
        .find(|d| n % d == 0)
        .unwrap_or(1)
}
