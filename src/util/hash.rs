//! Stable hashing (unlike `DefaultHasher`, the same on every run and machine): cache keys,
//! checksums and the seeds of independent random streams.

/// FNV-1a, 64 bit.
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
    fn fnv_is_stable() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
