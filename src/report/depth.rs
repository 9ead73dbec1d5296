//! Drift against depth (claim C1, "more in deeper models"): per arm and seed, a power law
//! drift ∝ n_layers^b fitted by least squares on ln drift against ln x over the sweep's
//! regimes, and its value at the paper's 48 layers.

use super::regime::Regime;
use std::collections::BTreeMap;

/// Layers of the model the GSPO paper measured ~10% drift on (Qwen3-30B-A3B).
pub const PAPER_DEPTH: f64 = 48.0;

/// A fitted power law `y = exp(a) · x^b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PowerLaw {
    pub a: f64,
    pub b: f64,
}

impl PowerLaw {
    pub fn at(&self, x: f64) -> f64 {
        (self.a + self.b * x.ln()).exp()
    }
}

/// Least squares of ln y on ln x over the points with x, y > 0; None under two distinct x.
pub fn fit(points: &[(f64, f64)]) -> Option<PowerLaw> {
    let p: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0 && x.is_finite() && y.is_finite())
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    let n = p.len() as f64;
    let mx = p.iter().map(|q| q.0).sum::<f64>() / n;
    let my = p.iter().map(|q| q.1).sum::<f64>() / n;
    let sxx: f64 = p.iter().map(|q| (q.0 - mx).powi(2)).sum();
    if p.len() < 2 || sxx <= 1e-12 {
        return None;
    }
    let b = p.iter().map(|q| (q.0 - mx) * (q.1 - my)).sum::<f64>() / sxx;
    Some(PowerLaw { a: my - b * mx, b })
}

/// Per arm name (in order of first appearance), per seed: the fit of its per-cell drift per
/// update against the regimes' `x`, over arms present in at least three regimes.
pub fn drift_fits(regs: &[Regime]) -> Vec<(String, BTreeMap<i64, PowerLaw>)> {
    type Points = BTreeMap<i64, Vec<(f64, f64)>>;
    let mut pts: Vec<(String, Points)> = Vec::new();
    for r in regs {
        let Some(x) = r.x else { continue };
        for (a, _) in &r.arms.arms {
            let mine = super::load::named(&mut pts, &a.name);
            let v = a.per_seed.get("drift_expert_frac");
            for (i, s) in a.seed_ids.iter().enumerate() {
                if let Some(y) = v.and_then(|v| v.get(i)) {
                    mine.entry(*s).or_default().push((x, *y));
                }
            }
        }
    }
    pts.into_iter()
        .map(|(n, seeds)| {
            let fits = seeds
                .into_iter()
                .filter(|(_, p)| p.len() >= 3)
                .filter_map(|(s, p)| fit(&p).map(|f| (s, f)))
                .collect();
            (n, fits)
        })
        .filter(|(_, f): &(String, BTreeMap<i64, PowerLaw>)| !f.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_power_law_is_recovered_and_extrapolated() {
        // y = 0.001 · x^0.5 at 2, 4, 8, 12 layers.
        let p: Vec<(f64, f64)> = [2.0, 4.0, 8.0, 12.0]
            .iter()
            .map(|&x: &f64| (x, 0.001 * x.sqrt()))
            .collect();
        let f = fit(&p).unwrap();
        assert!((f.b - 0.5).abs() < 1e-12, "{f:?}");
        assert!((f.at(48.0) - 0.001 * 48f64.sqrt()).abs() < 1e-12);
        // Zeros cannot enter a log fit; one distinct x cannot fix a slope.
        assert!(fit(&[(2.0, 0.0), (4.0, 0.0), (8.0, 1.0)]).is_none());
        assert!(fit(&[(2.0, 1.0), (2.0, 3.0)]).is_none());
    }
}
