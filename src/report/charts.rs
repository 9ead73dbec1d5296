//! Line and bar charts with plotters, as PNG and SVG, with an embedded font (no system fonts).
//! What to draw from a run is decided in [`super::figures`].

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Register the embedded font under the family plotters asks for by default.
pub fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for style in [
            FontStyle::Normal,
            FontStyle::Bold,
            FontStyle::Italic,
            FontStyle::Oblique,
        ] {
            plotters::style::register_font("sans-serif", style, FONT)
                .unwrap_or_else(|_| panic!("embedded font is valid"));
        }
    });
}

/// One named series: points `(x, y)` and an optional band `(x, lo, hi)` drawn behind it.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
}

pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Plot log10(y) on a linear axis labelled with the real values (non-positive y dropped).
    pub log_y: bool,
    /// Markers `(x, y, label)` drawn as red crosses (collapse events).
    pub markers: Vec<(f64, f64, String)>,
    /// Draw points only (scatter), no connecting lines.
    pub scatter: bool,
}

pub fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

/// A y-axis title, marked when the axis is logarithmic.
fn axis_label(label: &str, log: bool) -> String {
    if log {
        format!("{label} (log scale)")
    } else {
        label.to_string()
    }
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("plotting failed: {e:?}")
}

/// Does the positive data span at least two decades (so a log axis reads better)?
pub fn spans_decades(values: impl Iterator<Item = f64>) -> bool {
    let pos: Vec<f64> = values.filter(|v| *v > 0.0 && v.is_finite()).collect();
    let (lo, hi) = pos
        .iter()
        .fold((f64::INFINITY, 0f64), |(a, b), &v| (a.min(v), b.max(v)));
    !pos.is_empty() && hi / lo >= 100.0
}

/// A chart that can draw itself on any plotters backend.
pub trait Chart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;

    /// Write `<stem>.png` and `<stem>.svg` under `dir`.
    fn save(&self, dir: &Path, stem: &str) -> Result<()> {
        register_font();
        let png = dir.join(format!("{stem}.png"));
        self.draw(BitMapBackend::new(&png, (1000, 600)).into_drawing_area())?;
        let svg = dir.join(format!("{stem}.svg"));
        self.draw(SVGBackend::new(&svg, (1000, 600)).into_drawing_area())
    }
}

impl LineChart {
    /// The x and y ranges of the data (bands included), padded; y in plotted units.
    fn ranges(&self) -> ((f64, f64), (f64, f64)) {
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

    fn ty(&self, y: f64) -> Option<f64> {
        if !y.is_finite() {
            None
        } else if self.log_y {
            (y > 0.0).then(|| y.log10())
        } else {
            Some(y)
        }
    }
}

impl Chart for LineChart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let ((x0, x1), (y0, y1)) = self.ranges();
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let log = self.log_y;
        let fmt = move |v: &f64| {
            if log {
                format!("{:.0e}", 10f64.powf(*v))
            } else if v.abs() >= 1000.0 || (v.abs() < 0.01 && *v != 0.0) {
                format!("{v:.1e}")
            } else {
                format!("{v:.3}")
            }
        };
        let y_label = axis_label(&self.y_label, self.log_y);
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&y_label)
            .y_label_formatter(&fmt)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        for (i, s) in self.series.iter().enumerate() {
            let color = palette(i);
            if !s.band.is_empty() {
                let poly = self.band_polygon(s);
                chart
                    .draw_series(std::iter::once(Polygon::new(
                        poly,
                        color.mix(0.18).filled(),
                    )))
                    .map_err(err)?;
            }
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter_map(|p| self.ty(p.1).map(|y| (p.0, y)))
                .collect();
            if self.scatter {
                chart
                    .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                    .map_err(err)?
                    .label(&s.name)
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
            } else {
                chart
                    .draw_series(LineSeries::new(pts, color.stroke_width(2)))
                    .map_err(err)?
                    .label(&s.name)
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(3))
                    });
            }
        }
        if !self.markers.is_empty() {
            let pts: Vec<(f64, f64)> = self
                .markers
                .iter()
                .filter_map(|m| self.ty(m.1).map(|y| (m.0, y)))
                .collect();
            chart
                .draw_series(
                    pts.into_iter()
                        .map(|p| Cross::new(p, 7, RED.stroke_width(2))),
                )
                .map_err(err)?
                .label("collapse event")
                .legend(|(x, y)| Cross::new((x + 10, y), 6, RED.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
        Ok(())
    }
}

/// One bar: its category, its value and an optional error bar `(lo, hi)`.
pub type Bar = (String, f64, Option<(f64, f64)>);

/// A bar chart of one value per category, with optional error bars.
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub bars: Vec<Bar>,
    pub log_y: bool,
}

impl Chart for BarChart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let t = |v: f64| if self.log_y { v.max(1e-6).log10() } else { v };
        let vals: Vec<f64> = self
            .bars
            .iter()
            .flat_map(|b| [Some(t(b.1)), b.2.map(|e| t(e.1))])
            .flatten()
            .collect();
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
        let n = self.bars.len();
        let mut chart = ChartBuilder::on(&root)
            .caption(&self.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(60)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..n as f64, lo..hi)
            .map_err(err)?;
        let names: Vec<String> = self.bars.iter().map(|b| b.0.clone()).collect();
        let log = self.log_y;
        let yfmt = move |v: &f64| {
            if log {
                format!("{:.0e}", 10f64.powf(*v))
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
            .x_labels(2 * n + 1)
            .x_label_formatter(&xfmt)
            .y_label_formatter(&yfmt)
            .y_desc(&y_label)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16))
            .draw()
            .map_err(err)?;
        for (i, b) in self.bars.iter().enumerate() {
            let x = i as f64;
            chart
                .draw_series((b.1 > 0.0).then(|| {
                    Rectangle::new([(x + 0.15, lo), (x + 0.85, t(b.1))], palette(i).filled())
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
                    (x + 0.42, top + 0.02 * (hi - lo)),
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
        root.present().map_err(err)?;
        Ok(())
    }
}
