//! Axis ticks and labels: log axes ticked at round values and labelled with their true value,
//! thousands and millions on x as "50k" and "1.5M".

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// An x tick label: thousands as "50k", millions as "1.5M".
pub(crate) fn si_label(v: f64) -> String {
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if v.abs() >= 1e6 {
        format!("{}M", trim(format!("{:.2}", v / 1e6)))
    } else if v.abs() >= 1e3 {
        format!("{}k", trim(format!("{:.2}", v / 1e3)))
    } else {
        trim(format!("{v:.3}"))
    }
}

/// The y axis of a line or bar chart from `y0` to `y1` (in plotted units): plotters' own
/// ticks on a linear axis; on a log axis (plotted as log10 y) the ticks of [`log_ticks`], at
/// round values, without light lines.
pub(crate) struct YAxis {
    inner: RangedCoordf64,
    log: bool,
}

pub(crate) fn y_axis(y0: f64, y1: f64, log: bool) -> YAxis {
    YAxis {
        inner: (y0..y1).into(),
        log,
    }
}

impl Ranged for YAxis {
    type ValueType = f64;
    type FormatOption = DefaultFormatting;

    fn range(&self) -> std::ops::Range<f64> {
        self.inner.range()
    }

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if !self.log {
            return self.inner.key_points(hint);
        }
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        let r = self.inner.range();
        // At most 7 labels: a log axis reads by its decades, and stacked panels are short.
        log_ticks(r.start, r.end, hint.max_num_points().min(7))
    }

    fn axis_pixel_range(&self, limit: (i32, i32)) -> std::ops::Range<i32> {
        self.inner.axis_pixel_range(limit)
    }
}

/// Ticks of a log axis plotted as log10 y over `[l0, l1]`: the exponents of round values
/// (1, 2, 5 × 10^k; else 1 × 10^k; else 1…9 × 10^k), the first set that gives at least
/// three ticks and at most `max`; on a decade or more that none fits, 1 and 3 × 10^k or the
/// powers of ten alone; on a range too narrow for any of them, round values of a linear axis
/// over the same real range. Every tick is a round real value, so its label
/// ([`log_label`]) is exact.
pub(crate) fn log_ticks(l0: f64, l1: f64, max: usize) -> Vec<f64> {
    let max = max.max(2);
    let (k0, k1) = (l0.floor() as i32, l1.ceil() as i32);
    let at = |mults: &[f64]| -> Vec<f64> {
        (k0..=k1)
            .flat_map(|k| mults.iter().map(move |m| (m * 10f64.powi(k)).log10()))
            .filter(|v| *v >= l0 - 1e-12 && *v <= l1 + 1e-12)
            .collect()
    };
    let sets: [&[f64]; 3] = [
        &[1.0, 2.0, 5.0],
        &[1.0],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ];
    let cands: Vec<Vec<f64>> = sets.iter().map(|m| at(m)).collect();
    if let Some(t) = cands.iter().find(|t| t.len() >= 3 && t.len() <= max) {
        return t.clone();
    }
    if cands[1].len() > max {
        // Many decades: every k-th power of ten.
        let step = cands[1].len().div_ceil(max);
        return cands[1].iter().step_by(step).copied().collect();
    }
    // A decade or more that neither set fits (1, 2, 5 too many; 1 too few, as in a short
    // panel over 0.002-0.5): 1 and 3 of each decade, else its powers of ten even if only
    // two. Linear ticks there crowd the top decade and leave the lower ones unlabelled.
    if l1 - l0 >= 1.0 {
        let thirds = at(&[1.0, 3.0]);
        if thirds.len() >= 3 && thirds.len() <= max {
            return thirds;
        }
        if cands[1].len() >= 2 {
            return cands[1].clone();
        }
    }
    // Less than a decade: round values of a linear axis over the same real range, unless
    // they give fewer ticks than the round multiples do.
    let linear: Vec<f64> = RangedCoordf64::from(10f64.powf(l0)..10f64.powf(l1))
        .key_points(max)
        .into_iter()
        .filter(|v| *v > 0.0)
        .map(f64::log10)
        .collect();
    if linear.len() >= 3 {
        return linear;
    }
    match cands.iter().rev().find(|t| t.len() >= 2 && t.len() <= max) {
        Some(t) => t.clone(),
        None => linear,
    }
}

/// The label of a log-axis tick at `l` (= log10 y): y itself, to three significant digits,
/// as a decimal from 0.01 to 9999, else in e-notation.
pub(crate) fn log_label(l: f64) -> String {
    let y = 10f64.powf(l);
    if (0.01 - 1e-12..1e4).contains(&y) {
        // Three significant digits: as many decimals as the magnitude leaves.
        let decimals = (2 - y.log10().floor() as i32).max(0) as usize;
        let s = format!("{y:.decimals$}");
        return if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        };
    }
    let s = format!("{:.2e}", y);
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let mant = if mant.contains('.') {
        mant.trim_end_matches('0').trim_end_matches('.')
    } else {
        mant
    };
    format!("{mant}e{exp}")
}
