//! Expert-activation drift between two routings of the same tokens (DESIGN §7).

/// Drift of one layer: changed expert slots, tokens whose set changed, real tokens compared.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LayerDrift {
    /// Σ_t |S_new(t) \ S_old(t)| over real tokens.
    pub changed_slots: usize,
    /// Real tokens whose set changed.
    pub changed_tokens: usize,
    pub tokens: usize,
    pub k: usize,
}

impl LayerDrift {
    /// Share of activated expert slots that changed.
    pub fn expert_frac(&self) -> f64 {
        self.changed_slots as f64 / (self.tokens * self.k).max(1) as f64
    }
}

/// Compare two `[tokens, k]` routings of one layer over the real tokens (`valid`). Sets are
/// compared, so reordering the same experts is not drift.
pub fn layer_drift(old: &[u16], new: &[u16], valid: &[bool], k: usize) -> LayerDrift {
    assert_eq!(
        old.len(),
        new.len(),
        "routings cover different token counts"
    );
    assert_eq!(
        old.len(),
        valid.len() * k,
        "valid mask does not match the routing"
    );
    let mut d = LayerDrift {
        k,
        ..LayerDrift::default()
    };
    for (t, (a, b)) in old.chunks_exact(k).zip(new.chunks_exact(k)).enumerate() {
        if !valid[t] {
            continue;
        }
        d.tokens += 1;
        let changed = b.iter().filter(|e| !a.contains(e)).count();
        d.changed_slots += changed;
        d.changed_tokens += usize::from(changed > 0);
    }
    d
}

/// Drift over all layers of a model: `(expert_frac, token_frac, flips_per_token, per-layer)`.
/// `expert_frac` = Σ_{t,l} |S_new \ S_old| / (T·L·k); `token_frac` = share of tokens with a
/// changed set in ≥ 1 layer; `flips_per_token` = mean number of layers whose set changed.
pub fn model_drift(
    old: &[Vec<u16>],
    new: &[Vec<u16>],
    valid: &[bool],
    k: usize,
) -> (f64, f64, f64, Vec<LayerDrift>) {
    let layers: Vec<LayerDrift> = old
        .iter()
        .zip(new)
        .map(|(a, b)| layer_drift(a, b, valid, k))
        .collect();
    let t = valid.iter().filter(|&&v| v).count();
    if layers.is_empty() || t == 0 {
        return (0.0, 0.0, 0.0, layers);
    }
    let slots: usize = layers.iter().map(|l| l.changed_slots).sum();
    let flips: usize = layers.iter().map(|l| l.changed_tokens).sum();
    let mut any = 0usize;
    for (tok, &v) in valid.iter().enumerate() {
        if v && old.iter().zip(new).any(|(a, b)| {
            let (sa, sb) = (&a[tok * k..(tok + 1) * k], &b[tok * k..(tok + 1) * k]);
            sb.iter().any(|e| !sa.contains(e))
        }) {
            any += 1;
        }
    }
    (
        slots as f64 / (t * layers.len() * k) as f64,
        any as f64 / t as f64,
        flips as f64 / t as f64,
        layers,
    )
}

/// Jensen–Shannon divergence (natural log) between two distributions.
pub fn js(p: &[f32], q: &[f32]) -> f64 {
    let mut d = 0.0;
    for (&a, &b) in p.iter().zip(q) {
        let (a, b) = (f64::from(a), f64::from(b));
        let m = 0.5 * (a + b);
        if a > 0.0 {
            d += 0.5 * a * (a / m).ln();
        }
        if b > 0.0 {
            d += 0.5 * b * (b / m).ln();
        }
    }
    d.max(0.0)
}

/// Mean JS divergence over the real tokens of one layer's `[tokens, n_experts]` distributions.
pub fn mean_js(p: &[f32], q: &[f32], valid: &[bool], n_experts: usize) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for (t, (a, b)) in p
        .chunks_exact(n_experts)
        .zip(q.chunks_exact(n_experts))
        .enumerate()
    {
        if valid[t] {
            sum += js(a, b);
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

/// Share of routed slots per expert over the real tokens of one layer's `[tokens, k]` routing.
pub fn expert_load(routes: &[u16], valid: &[bool], n_experts: usize, k: usize) -> Vec<f64> {
    let mut load = vec![0f64; n_experts];
    let mut n = 0usize;
    for (t, ids) in routes.chunks_exact(k).enumerate() {
        if valid[t] {
            for &e in ids {
                if (e as usize) < n_experts {
                    load[e as usize] += 1.0;
                    n += 1;
                }
            }
        }
    }
    load.iter_mut().for_each(|l| *l /= n.max(1) as f64);
    load
}

/// `max_e load_e / uniform − 1` (0 for a perfectly balanced layer).
pub fn load_max_violation(load: &[f64]) -> f64 {
    let uniform = 1.0 / load.len().max(1) as f64;
    load.iter().copied().fold(0.0, f64::max) / uniform - 1.0
}

/// An expert is dead (and, for `expert_patience` steps, collapsed) below this share of the
/// uniform load.
pub const DEAD_EXPERT_LOAD: f64 = 0.01;

/// Experts whose load is below `frac` of the uniform load.
pub fn dead_experts(load: &[f64], frac: f64) -> usize {
    let uniform = 1.0 / load.len().max(1) as f64;
    load.iter().filter(|&&l| l < frac * uniform).count()
}

/// Width of a near tie between the k-th and the (k+1)-th expert: ln p_k − ln p_(k+1) below this
/// (0.1 nats: the two probabilities within ~10%), where a small push to the logits flips the
/// route.
pub const NEAR_TIE_NATS: f64 = 0.1;

/// Router confidence over the real tokens of one layer's `[tokens, n_experts]` distributions:
/// `(mean top-k mass, mean ln p_k − ln p_(k+1), share of tokens whose gap is below
/// [`NEAR_TIE_NATS`])`, p sorted in descending order. For a softmax router the gap is the gap
/// of the k-th and (k+1)-th logits. `None` with no real token, or k = n_experts.
pub fn router_confidence(
    p: &[f32],
    valid: &[bool],
    n_experts: usize,
    k: usize,
) -> Option<(f64, f64, f64)> {
    if k >= n_experts {
        return None;
    }
    let (mut mass, mut gap, mut ties, mut n) = (0.0, 0.0, 0usize, 0usize);
    let mut row_sorted = vec![0f32; n_experts];
    for (t, row) in p.chunks_exact(n_experts).enumerate() {
        if !valid[t] {
            continue;
        }
        row_sorted.copy_from_slice(row);
        row_sorted.sort_by(|a, b| b.total_cmp(a));
        mass += row_sorted[..k].iter().map(|&x| f64::from(x)).sum::<f64>();
        let g = f64::from(row_sorted[k - 1]).ln() - f64::from(row_sorted[k]).ln();
        gap += g;
        ties += usize::from(g < NEAR_TIE_NATS);
        n += 1;
    }
    (n > 0).then(|| {
        let n = n as f64;
        (mass / n, gap / n, ties as f64 / n)
    })
}

/// Mean entropy of the router distributions over real tokens.
pub fn mean_entropy(p: &[f32], valid: &[bool], n_experts: usize) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for (t, row) in p.chunks_exact(n_experts).enumerate() {
        if valid[t] {
            sum -= row
                .iter()
                .filter(|&&x| x > 0.0)
                .map(|&x| f64::from(x) * f64::from(x).ln())
                .sum::<f64>();
            n += 1;
        }
    }
    if n == 0 { 0.0 } else { sum / n as f64 }
}

#[cfg(test)]
mod confidence_tests {
    use super::*;

    /// By hand: 4 experts, top-2; token 0 (0.4, 0.3, 0.2, 0.1): mass 0.7, gap ln 1.5; token 1
    /// (0.5, 0.25, 0.24, 0.01): mass 0.75, gap ln(0.25/0.24) ≈ 0.041, a near tie; token 2 padding.
    #[test]
    fn router_confidence_by_hand() {
        let p = [
            0.4f32, 0.3, 0.2, 0.1, 0.25, 0.5, 0.01, 0.24, 0.9, 0.05, 0.03, 0.02,
        ];
        let (mass, gap, ties) = router_confidence(&p, &[true, true, false], 4, 2).unwrap();
        assert!((mass - 0.725).abs() < 1e-6, "{mass}");
        let want = (1.5f64.ln() + (0.25f64 / 0.24).ln()) / 2.0;
        assert!((gap - want).abs() < 1e-5, "{gap} vs {want}");
        assert_eq!(ties, 0.5);
        assert!(router_confidence(&p, &[false; 3], 4, 2).is_none());
        assert!(router_confidence(&p, &[true; 3], 4, 4).is_none());
    }
}
