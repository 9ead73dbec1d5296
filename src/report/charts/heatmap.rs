//! Heatmaps on one colour scale, one panel per arm.

use super::{Chart, err};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

/// A colour on a white → dark-blue scale for `v` in [0, 1].
fn heat(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * v).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// One heatmap panel: `values[row][col]` (NaN: no data), rows bottom to top.
pub struct HeatPanel {
    pub title: String,
    pub rows: usize,
    pub cols: Vec<f64>,
    pub values: Vec<Vec<f64>>,
}

/// Heatmaps on one shared colour scale, one panel per arm, stacked in a grid; the scale's
/// range is printed in every panel's title.
pub struct Heatmap {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Colour by log10 of the value (for quantities that span decades).
    pub log: bool,
    pub panels: Vec<HeatPanel>,
}

impl Heatmap {
    fn range(&self) -> (f64, f64) {
        let t = |v: f64| if self.log { v.log10() } else { v };
        let vals: Vec<f64> = self
            .panels
            .iter()
            .flat_map(|p| p.values.iter().flatten())
            .filter(|v| v.is_finite() && (!self.log || **v > 0.0))
            .map(|&v| t(v))
            .collect();
        let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if lo.is_finite() && hi > lo {
            (lo, hi)
        } else if lo.is_finite() {
            (lo - 0.5, lo + 0.5)
        } else {
            (0.0, 1.0)
        }
    }
}

impl Chart for Heatmap {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn size(&self) -> (u32, u32) {
        let n = self.panels.len().max(1);
        let rows = n.div_ceil(if n > 3 { 2 } else { 1 });
        (1000, 50 + 230 * rows as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let (lo, hi) = self.range();
        let untr = |v: f64| if self.log { 10f64.powf(v) } else { v };
        let title = format!(
            "{} (colour: {} → {}{})",
            self.title,
            fmt_val(untr(lo)),
            fmt_val(untr(hi)),
            if self.log { ", log scale" } else { "" }
        );
        let root = root.titled(&title, ("sans-serif", 20)).map_err(err)?;
        let n = self.panels.len().max(1);
        let cols = if n > 3 { 2 } else { 1 };
        let rows = n.div_ceil(cols);
        let areas = root.split_evenly((rows, cols));
        for (p, area) in self.panels.iter().zip(areas) {
            let x0 = p.cols.first().copied().unwrap_or(0.0);
            let x1 = p.cols.last().copied().unwrap_or(1.0) + 1.0;
            let mut chart = ChartBuilder::on(&area)
                .caption(&p.title, ("sans-serif", 15))
                .margin(6)
                .x_label_area_size(30)
                .y_label_area_size(45)
                .build_cartesian_2d(x0..x1, -0.5f64..p.rows.max(1) as f64 - 0.5)
                .map_err(err)?;
            chart
                .configure_mesh()
                .disable_mesh()
                .x_desc(&self.x_label)
                .y_desc(&self.y_label)
                .y_labels(p.rows.clamp(2, 12))
                .y_label_formatter(&|v: &f64| {
                    if v.fract().abs() < 1e-9 {
                        format!("{}", *v as i64)
                    } else {
                        String::new()
                    }
                })
                .label_style(("sans-serif", 12))
                .axis_desc_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            let t = |v: f64| if self.log { v.log10() } else { v };
            let mut cells = Vec::new();
            for (r, row) in p.values.iter().enumerate() {
                for (c, &v) in row.iter().enumerate() {
                    let x = p.cols[c];
                    let color = if v.is_finite() && (!self.log || v > 0.0) {
                        heat((t(v) - lo) / (hi - lo))
                    } else {
                        RGBColor(230, 230, 230)
                    };
                    cells.push(Rectangle::new(
                        [(x, r as f64 - 0.5), (x + 1.0, r as f64 + 0.5)],
                        color.filled(),
                    ));
                }
            }
            chart.draw_series(cells).map_err(err)?;
        }
        Ok(())
    }
}

fn fmt_val(v: f64) -> String {
    if v != 0.0 && (v.abs() < 0.01 || v.abs() >= 1000.0) {
        format!("{v:.1e}")
    } else {
        format!("{v:.3}")
    }
}
