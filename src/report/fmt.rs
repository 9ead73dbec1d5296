//! How the report prints numbers: significant digits, p-values, means with intervals.

use super::stats::MeanCi;

/// A number with three decimals, or two significant digits in scientific notation when it is
/// very small or large.
pub fn sig(x: f64) -> String {
    if x == 0.0 {
        "0".into()
    } else if x.abs() >= 0.01 && x.abs() < 1000.0 {
        format!("{x:.3}")
    } else {
        format!("{x:.2e}")
    }
}

/// `mean ± ci95`, the mean alone over one seed, `missing` when there is none.
pub fn fmt_ci(m: &MeanCi, missing: &str) -> String {
    if !m.mean.is_finite() {
        missing.into()
    } else if m.ci95.is_finite() {
        format!("{} ± {}", sig(m.mean), sig(m.ci95))
    } else {
        sig(m.mean)
    }
}

/// A p-value as the report prints it.
pub fn p_text(p: f64) -> String {
    if !p.is_finite() {
        "n/a".into()
    } else if p < 0.001 {
        format!("{p:.1e}")
    } else {
        format!("{p:.3}")
    }
}

/// A number as the report prints it ("n/a" when not finite).
pub fn num(x: f64) -> String {
    if x.is_finite() { sig(x) } else { "n/a".into() }
}
