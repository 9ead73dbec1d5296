//! Bar charts: one value per category with error bars and reference lines.

use super::{Chart, LineCtx, REF_COLORS, RefLine, axis_label, err, log_label, palette, y_axis};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One bar: its category, its value and an optional error bar `(lo, hi)`.
pub type Bar = (String, f64, Option<(f64, f64)>);

/// A bar chart of one value per category, with optional error bars.
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub bars: Vec<Bar>,
    pub log_y: bool,
    /// Paper values as dashed lines with a legend.
    pub refs: Vec<RefLine>,
}

impl BarChart {
    /// A value on the plotted axis.
    fn t(&self, v: f64) -> f64 {
        if self.log_y { v.max(1e-6).log10() } else { v }
    }

    /// The plotted y range: bars, error bars and reference lines, padded.
    fn y_range(&self) -> (f64, f64) {
        let mut vals: Vec<f64> = self
            .bars
            .iter()
            .flat_map(|b| [Some(self.t(b.1)), b.2.map(|e| self.t(e.1))])
            .flatten()
            .collect();
        vals.extend(self.refs.iter().map(|r| self.t(r.y)));
        let hi = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lo = if self.log_y {
            vals.iter().copied().fold(f64::INFINITY, f64::min).floor() - 0.2
        } else {
            0.0
        };
        let hi = if hi.is_finite() && hi > lo {
            hi + 0.1 * (hi - lo)
        } else {
            lo + 1.0
        };
        (lo, hi)
    }

    /// The paper's values as dashed lines across the `n` bars, with a legend.
    fn draw_refs<DB: DrawingBackend>(&self, chart: &mut LineCtx<'_, DB>, n: usize) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        for (k, r) in self.refs.iter().enumerate() {
            let c = REF_COLORS[k % REF_COLORS.len()];
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, self.t(r.y)), (n as f64, self.t(r.y))],
                    8,
                    5,
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(&r.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        Ok(())
    }
}

impl Chart for BarChart {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let t = |v: f64| self.t(v);
        let (lo, hi) = self.y_range();
        let n = self.bars.len();
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, y_axis(lo, hi, self.log_y))
            .map_err(err)?;
        let names: Vec<String> = self.bars.iter().map(|b| b.0.clone()).collect();
        let log = self.log_y;
        let yfmt = move |v: &f64| {
            if log {
                log_label(*v)
            } else {
                format!("{v:.3}")
            }
        };
        let xfmt = move |v: &f64| {
            let i = v.floor() as usize;
            if (v - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        let y_label = axis_label(&self.y_label, self.log_y);
        chart
            .configure_mesh()
            .disable_x_mesh()
            .max_light_lines(0)
            .x_labels(2 * n + 1)
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .y_desc(&y_label)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        let colors = super::series_colors(self.bars.iter().map(|b| (b.0.as_str(), None)));
        for (i, b) in self.bars.iter().enumerate() {
            let x = i as f64;
            chart
                .draw_series((b.1 > 0.0).then(|| {
                    Rectangle::new(
                        [(x + 0.15, lo), (x + 0.85, t(b.1))],
                        palette(colors[i]).filled(),
                    )
                }))
                .map_err(err)?;
            let label = if b.1 <= 0.0 {
                "0".to_string()
            } else if b.1 < 0.01 {
                format!("{:.1e}", b.1)
            } else {
                format!("{:.3}", b.1)
            };
            let top = if b.1 <= 0.0 { lo } else { t(b.1) };
            chart
                .draw_series(std::iter::once(Text::new(
                    label,
                    (x + 0.53, top + 0.02 * (hi - lo)),
                    ("sans-serif", 14),
                )))
                .map_err(err)?;
            if let Some((elo, ehi)) = b.2 {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x + 0.5, t(elo)), (x + 0.5, t(ehi))],
                        BLACK.stroke_width(2),
                    )))
                    .map_err(err)?;
            }
        }
        self.draw_refs(&mut chart, n)?;
        if !self.refs.is_empty() {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}
