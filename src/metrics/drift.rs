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
