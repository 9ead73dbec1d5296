//! Drawing a [`LineChart`]: its ranges, bands, faint seed lines, reference lines, markers and
//! legend (placed in the corner with the least data).

use super::stack::{Glyph, WARNING_GREY};
use super::{
    Chart, LineChart, LineCtx, MarkerKind, Series, axis_label, err, log_label, palette, si_label,
    y_axis,
};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;

impl LineChart {
    /// The x and y ranges of the data (bands included), padded; y in plotted units.
    pub(super) fn ranges(&self) -> ((f64, f64), (f64, f64)) {
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .collect();
        let mut ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter_map(|p| self.ty(p.1)))
            .collect();
        ys.extend(self.series.iter().flat_map(|s| {
            s.band
                .iter()
                .flat_map(|b| [self.ty(b.1), self.ty(b.2)])
                .flatten()
        }));
        ys.extend(
            self.faint
                .iter()
                .flatten()
                .flatten()
                .filter_map(|p| self.ty(p.1)),
        );
        ys.extend(self.refs.iter().filter_map(|r| self.ty(r.y)));
        let (x0, x1) = xs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let (mut y0, mut y1) = ys
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &v| {
                (a.min(v), b.max(v))
            });
        let (x0, x1) = if x0.is_finite() {
            if x1 > x0 {
                (x0, x1)
            } else {
                (x0 - 1.0, x1 + 1.0)
            }
        } else {
            (0.0, 1.0)
        };
        if !y0.is_finite() {
            (y0, y1) = (0.0, 1.0);
        } else if y1 - y0 <= 1e-9 * y1.abs().max(y0.abs()) || y1 == y0 {
            let pad = if y1 == 0.0 { 0.5 } else { 0.1 * y1.abs() };
            (y0, y1) = (y0 - pad, y1 + pad);
        } else {
            let pad = 0.05 * (y1 - y0);
            (y0, y1) = (y0 - pad, y1 + pad);
        }
        ((x0, x1), (y0, y1))
    }

    /// Each series' palette index ([`super::series_colors`]).
    pub(super) fn colors(&self) -> Vec<usize> {
        super::series_colors(self.series.iter().map(|s| (s.name.as_str(), s.color)))
    }

    /// The outline of a series' band: its upper edge forward, its lower edge back.
    fn band_polygon(&self, s: &Series) -> Vec<(f64, f64)> {
        let mut poly: Vec<(f64, f64)> = s
            .band
            .iter()
            .filter_map(|b| self.ty(b.2).map(|y| (b.0, y)))
            .collect();
        poly.extend(
            s.band
                .iter()
                .rev()
                .filter_map(|b| self.ty(b.1).map(|y| (b.0, y))),
        );
        poly
    }

    /// The faint per-seed lines and the paper's reference lines.
    fn draw_backdrop<DB: DrawingBackend>(
        &self,
        chart: &mut LineCtx<'_, DB>,
        x0: f64,
        x1: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let colors = self.colors();
        for (i, lines) in self.faint.iter().enumerate() {
            let color = palette(colors.get(i).copied().unwrap_or(i)).mix(0.12);
            for l in lines {
                let pts: Vec<(f64, f64)> = l
                    .iter()
                    .filter_map(|p| self.ty(p.1).map(|y| (p.0, y)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(1)))
                    .map_err(err)?;
            }
        }
        // A line with an empty label continues the one before it (e.g. −δ after +δ): same
        // colour, no legend entry of its own.
        for (r, grey) in self.refs.iter().zip(self.ref_colors()) {
            let Some(y) = self.ty(r.y) else { continue };
            // Dark and dashed, in colours the series palette does not use.
            let drawn = chart
                .draw_series(DashedLineSeries::new(
                    vec![(x0, y), (x1, y)],
                    8,
                    5,
                    grey.stroke_width(2),
                ))
                .map_err(err)?;
            if !r.label.is_empty() {
                drawn.label(&r.label).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2))
                });
            }
        }
        Ok(())
    }

    /// Each series' band and line (or points), with its legend entry.
    fn draw_lines<DB: DrawingBackend>(&self, chart: &mut LineCtx<'_, DB>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let colors = self.colors();
        for (i, s) in self.series.iter().enumerate() {
            let color = palette(colors[i]);
            if !s.band.is_empty() {
                let poly = self.band_polygon(s);
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        poly,
                        color.mix(0.12).filled(),
                    )))
                    .map_err(err)?;
            }
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter_map(|p| self.ty(p.1).map(|y| (p.0, y)))
                .collect();
            // In a scatter, data are points and a dashed series is a guide line.
            let dots = self.scatter && !s.dashed;
            let anno = if dots {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
            } else if s.dashed {
                chart.draw_series(DashedLineSeries::new(pts, 6, 4, color.stroke_width(2)))
            } else {
                chart.draw_series(LineSeries::new(pts, color.stroke_width(2)))
            }
            .map_err(err)?;
            // A series without a name (e.g. a fit drawn in its data's colour) has no legend entry.
            if s.name.is_empty() {
                continue;
            }
            let anno = anno.label(&s.name);
            match self.series_glyph(s, colors[i]) {
                Glyph::Dot(c) => anno.legend(move |(x, y)| Circle::new((x + 10, y), 4, c.filled())),
                Glyph::Dashed(c) => anno.legend(move |(x, y)| {
                    DashedPathElement::new(vec![(x, y), (x + 20, y)], 5, 3, c.stroke_width(2))
                }),
                _ => anno.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
                }),
            };
        }
        Ok(())
    }

    /// Event markers, one legend entry per kind.
    fn draw_markers<DB: DrawingBackend>(&self, chart: &mut LineCtx<'_, DB>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        for kind in [MarkerKind::Collapse, MarkerKind::Warning] {
            let pts: Vec<(f64, f64)> = self
                .markers
                .iter()
                .filter(|m| m.kind == kind)
                .filter_map(|m| self.ty(m.y).map(|y| (m.x, y)))
                .collect();
            if pts.is_empty() {
                continue;
            }
            // Black and grey: no series colour (red and orange are series colours).
            let grey = WARNING_GREY;
            match kind {
                MarkerKind::Collapse => {
                    chart
                        .draw_series(
                            pts.into_iter()
                                .map(|p| Cross::new(p, 7, BLACK.stroke_width(2))),
                        )
                        .map_err(err)?
                        .label(kind.legend())
                        .legend(|(x, y)| Cross::new((x + 10, y), 6, BLACK.stroke_width(2)));
                }
                MarkerKind::Warning => {
                    chart
                        .draw_series(
                            pts.into_iter()
                                .map(|p| TriangleMarker::new(p, 7, grey.stroke_width(2))),
                        )
                        .map_err(err)?
                        .label(kind.legend())
                        .legend(move |(x, y)| {
                            TriangleMarker::new((x + 10, y), 6, grey.stroke_width(2))
                        });
                }
            }
        }
        Ok(())
    }

    /// The corner of the plot whose quarter holds the fewest data points (lines, bands, faint
    /// seed lines, markers), so that the legend covers as little data as it can, and whether
    /// even that corner holds some.
    pub(super) fn legend_corner(
        &self,
        (x0, x1): (f64, f64),
        (y0, y1): (f64, f64),
    ) -> (SeriesLabelPosition, bool) {
        let mut count = [0usize; 4];
        // A line crosses the space between its points: three points along each segment (on the
        // drawn axis) count as well as its ends.
        let along = |line: &[(f64, f64)]| -> Vec<(f64, f64)> {
            let drawn: Vec<(f64, f64)> = (line.iter())
                .filter_map(|&(x, y)| self.ty(y).map(|y| (x, y)))
                .collect();
            let mut out = drawn.clone();
            for w in drawn.windows(2) {
                for t in [0.25, 0.5, 0.75] {
                    out.push((
                        w[0].0 + t * (w[1].0 - w[0].0),
                        w[0].1 + t * (w[1].1 - w[0].1),
                    ));
                }
            }
            out
        };
        let lines = (self.series.iter().map(|s| s.points.as_slice()))
            .chain(self.faint.iter().flatten().map(Vec::as_slice));
        let bands = self.series.iter().flat_map(|s| {
            (s.band.iter()).flat_map(|b| {
                [(b.0, b.1), (b.0, b.2)]
                    .into_iter()
                    .filter_map(|(x, y)| self.ty(y).map(|y| (x, y)))
            })
        });
        let marks = (self.markers.iter()).filter_map(|m| self.ty(m.y).map(|y| (m.x, y)));
        let pts = lines.flat_map(along).chain(bands).chain(marks);
        for (x, y) in pts {
            let (fx, fy) = ((x - x0) / (x1 - x0), (y - y0) / (y1 - y0));
            // Upper right, upper left, lower right, lower left: the legend's box spans about
            // 45% of the width and 35% of the height from its corner.
            let (right, left, up, low) = (fx > 0.55, fx < 0.45, fy > 0.65, fy < 0.35);
            for (k, hit) in [right && up, left && up, right && low, left && low]
                .into_iter()
                .enumerate()
            {
                count[k] += usize::from(hit);
            }
        }
        let best = (0..4).min_by_key(|&k| count[k]).unwrap_or(0);
        let corner = [
            SeriesLabelPosition::UpperRight,
            SeriesLabelPosition::UpperLeft,
            SeriesLabelPosition::LowerRight,
            SeriesLabelPosition::LowerLeft,
        ][best]
            .clone();
        (corner, count[best] > 0)
    }

    /// The entries of the legend: named series, paper values and marker kinds.
    fn legend_entries(&self) -> usize {
        let kinds: std::collections::BTreeSet<_> =
            self.markers.iter().map(|m| m.kind.legend()).collect();
        self.series.iter().filter(|s| !s.name.is_empty()).count() + self.refs.len() + kinds.len()
    }

    pub(super) fn ty(&self, y: f64) -> Option<f64> {
        if !y.is_finite() {
            None
        } else if self.log_y {
            (y > 0.0).then(|| y.log10())
        } else {
            Some(y)
        }
    }
}

/// On a log axis, a value more than this factor below the chart's largest is a numerical zero
/// (a degenerate variance comes out ~1e-36, not 0): it is left out, and the y label says how
/// many were, instead of stretching the axis over 30 empty decades.
const LOG_ZERO_FACTOR: f64 = 1e12;

/// The largest share of a plot's height given to headroom for its legend; a legend taller than
/// that (a small panel of a stacked figure) keeps the emptiest corner instead.
const LEGEND_HEADROOM_MAX: f64 = 0.45;

impl LineChart {
    /// This chart without the zeros of its log axis (values ≤ its largest / [`LOG_ZERO_FACTOR`],
    /// zero and negative ones included), its y label saying how many data points that left out;
    /// `None` when it has a linear axis or no such value.
    pub(super) fn without_log_zeros(&self) -> Option<LineChart> {
        if !self.log_y {
            return None;
        }
        let data = || {
            (self
                .series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1)))
            .chain(self.faint.iter().flatten().flatten().map(|p| p.1))
        };
        let top = (data().chain(self.series.iter().flat_map(|s| s.band.iter().map(|b| b.2))))
            .filter(|y| y.is_finite())
            .fold(f64::NEG_INFINITY, f64::max);
        if !(top > 0.0) {
            return None;
        }
        let floor = top / LOG_ZERO_FACTOR;
        let zero = |y: f64| y.is_finite() && y <= floor;
        let n = data().filter(|&y| zero(y)).count();
        if n == 0 {
            return None;
        }
        let mut c = self.clone();
        for s in &mut c.series {
            s.points.retain(|p| !zero(p.1));
            for b in &mut s.band {
                // Left out by the axis (non-positive), like the values themselves.
                if zero(b.1) {
                    b.1 = 0.0;
                }
                if zero(b.2) {
                    b.2 = 0.0;
                }
            }
        }
        for f in &mut c.faint {
            for line in f.iter_mut() {
                line.retain(|p| !zero(p.1));
            }
        }
        c.y_label = format!(
            "{}; {n} value{} at 0 not drawn",
            self.y_label,
            if n == 1 { "" } else { "s" }
        );
        Some(c)
    }
}

impl Chart for LineChart {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        self.draw_in(root, true)
    }
}

impl LineChart {
    /// Draw the chart with its own legend, or without (a stacked figure's panel, whose legend
    /// the figure draws once above its panels).
    pub(super) fn draw_in<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
        with_legend: bool,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        if let Some(c) = self.without_log_zeros() {
            return c.draw_in(root, with_legend);
        }
        root.fill(&WHITE).map_err(err)?;
        let ((x0, x1), (y0, mut y1)) = self.ranges();
        // Where every corner holds data, the y axis gets headroom as tall as the legend (on a
        // plot tall enough for it), and the legend sits in it, above the data.
        let (mut corner, covered) = self.legend_corner((x0, x1), (y0, y1));
        let plot_h = f64::from(root.dim_in_pixel().1) - 94.0;
        let legend = if with_legend {
            self.legend_entries()
        } else {
            0
        };
        let share = (17.0 * legend as f64 + 12.0) / plot_h + 0.04;
        if covered && legend > 0 && plot_h > 0.0 && share <= LEGEND_HEADROOM_MAX {
            y1 = y0 + (y1 - y0) / (1.0 - share);
            corner = SeriesLabelPosition::UpperRight;
        }
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y_axis(y0, y1, self.log_y))
            .map_err(err)?;
        let log = self.log_y;
        // A tick at 0 computed as a sum of steps comes out as float noise (−5.6e-17).
        let zero = 1e-9 * (y1 - y0).abs();
        // One format per axis: e-notation when the whole axis is below 0.01 or beyond 1000,
        // else decimals (trailing zeros trimmed), never a mix of the two.
        let span = y0.abs().max(y1.abs());
        let sci = !(0.01..1000.0).contains(&span);
        let fmt = move |v: &f64| {
            if log {
                log_label(*v)
            } else if v.abs() <= zero {
                "0".to_string()
            } else if sci {
                format!("{v:.1e}")
            } else {
                let s = format!("{v:.4}");
                s.trim_end_matches('0').trim_end_matches('.').to_string()
            }
        };
        let y_label = axis_label(&self.y_label, self.log_y);
        let xfmt = |v: &f64| si_label(*v);
        let mut mesh = chart.configure_mesh();
        // Bold grid lines at the labelled ticks only: the faint lines between them were
        // a third of every figure's bytes and carried no value a reader could read off.
        mesh.max_light_lines(0);
        mesh.x_desc(&self.x_label)
            .y_desc(&y_label)
            .y_label_formatter(&fmt)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16));
        let integer = |v: &f64| {
            if (v - v.round()).abs() < 1e-9 {
                format!("{}", v.round() as i64)
            } else {
                String::new()
            }
        };
        if self.categorical_x {
            // One tick per category (plotters places ticks at round steps of the range).
            mesh.x_labels((x1 - x0).round() as usize + 1)
                .x_label_formatter(&integer)
                .disable_x_mesh();
        } else {
            // Integers without ".0", thousands as "50k".
            mesh.x_label_formatter(&xfmt);
        }
        mesh.draw().map_err(err)?;
        self.draw_backdrop(&mut chart, x0, x1)?;
        self.draw_lines(&mut chart)?;
        self.draw_markers(&mut chart)?;
        if with_legend {
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 14))
                .position(corner)
                .draw()
                .map_err(err)?;
        }
        Ok(())
    }
}
