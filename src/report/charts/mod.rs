//! Line and bar charts with plotters, as PNG and SVG, with an embedded font (no system fonts).
//! What to draw from a run is decided in [`super::figures`].

mod bar;
mod forest;
mod heatmap;
mod map;

pub use bar::{Bar, BarChart};
pub use forest::{Forest, ForestRow};
pub use heatmap::{HeatPanel, Heatmap};
pub use map::{MapCell, MapPanel, StabilityMap};

use anyhow::{Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

/// The drawing context of a chart with two float axes.
type Ctx<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

static FONT: &[u8] = include_bytes!("../../../assets/DejaVuSans.ttf");

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

/// What a marker on a line chart stands for: each kind has its own shape and legend entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// Training broke down (reward, entropy, non-finite or expert collapse): a red cross.
    Collapse,
    /// A warning (ratio explosion, gradient spike) and no breakdown: an orange triangle.
    Warning,
}

impl MarkerKind {
    fn legend(self) -> &'static str {
        match self {
            MarkerKind::Collapse => "first collapse event of a seed",
            MarkerKind::Warning => "first warning of a seed (ratio explosion / gradient spike)",
        }
    }
}

/// A marker at `(x, y)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    pub x: f64,
    pub y: f64,
    pub kind: MarkerKind,
}

/// A horizontal reference line at `y`, labelled with its source.
#[derive(Clone, Debug, PartialEq)]
pub struct RefLine {
    pub y: f64,
    pub label: String,
}

/// The faint lines of one series: one polyline per seed.
pub type Faint = Vec<Vec<(f64, f64)>>;

pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Thin, light lines in the colour of the series with the same index (raw per-seed
    /// curves behind their smoothed mean); not in the legend.
    pub faint: Vec<Faint>,
    /// Plot log10(y) on a linear axis labelled with the real values (non-positive y dropped).
    pub log_y: bool,
    /// Event markers, one legend entry per kind present.
    pub markers: Vec<Marker>,
    /// Paper values, drawn as dashed grey lines with their labels in the legend.
    pub refs: Vec<RefLine>,
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
pub(crate) fn axis_label(label: &str, log: bool) -> String {
    if log {
        format!("{label} (log scale)")
    } else {
        label.to_string()
    }
}

pub(crate) fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
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

    /// Pixel size of the figure.
    fn size(&self) -> (u32, u32) {
        (1000, 600)
    }

    /// Write `<stem>.png` and `<stem>.svg` under `dir`.
    fn save(&self, dir: &Path, stem: &str) -> Result<()> {
        register_font();
        let png = dir.join(format!("{stem}.png"));
        self.draw(BitMapBackend::new(&png, self.size()).into_drawing_area())?;
        let svg = dir.join(format!("{stem}.svg"));
        self.draw(SVGBackend::new(&svg, self.size()).into_drawing_area())
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
        chart: &mut Ctx<'_, DB>,
        x0: f64,
        x1: f64,
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        for (i, lines) in self.faint.iter().enumerate() {
            let color = palette(i).mix(0.12);
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
        for (k, r) in self.refs.iter().enumerate() {
            let Some(y) = self.ty(r.y) else { continue };
            // Dark, distinct from the series palette: grey, dark red, dark green.
            let grey = [
                RGBColor(90, 90, 90),
                RGBColor(150, 30, 30),
                RGBColor(30, 110, 50),
            ][k % 3];
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(x0, y), (x1, y)],
                    8,
                    5,
                    grey.stroke_width(2),
                ))
                .map_err(err)?
                .label(&r.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2))
                });
        }
        Ok(())
    }

    /// Each series' band and line (or points), with its legend entry.
    fn draw_lines<DB: DrawingBackend>(&self, chart: &mut Ctx<'_, DB>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        for (i, s) in self.series.iter().enumerate() {
            let color = palette(i);
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
        Ok(())
    }

    /// Event markers, one legend entry per kind.
    fn draw_markers<DB: DrawingBackend>(&self, chart: &mut Ctx<'_, DB>) -> Result<()>
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
            let orange = RGBColor(230, 120, 0);
            match kind {
                MarkerKind::Collapse => {
                    chart
                        .draw_series(
                            pts.into_iter()
                                .map(|p| Cross::new(p, 7, RED.stroke_width(2))),
                        )
                        .map_err(err)?
                        .label(kind.legend())
                        .legend(|(x, y)| Cross::new((x + 10, y), 6, RED.stroke_width(2)));
                }
                MarkerKind::Warning => {
                    chart
                        .draw_series(
                            pts.into_iter()
                                .map(|p| TriangleMarker::new(p, 7, orange.stroke_width(2))),
                        )
                        .map_err(err)?
                        .label(kind.legend())
                        .legend(move |(x, y)| {
                            TriangleMarker::new((x + 10, y), 6, orange.stroke_width(2))
                        });
                }
            }
        }
        Ok(())
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
        // A tick at 0 computed as a sum of steps comes out as float noise (−5.6e-17).
        let zero = 1e-9 * (y1 - y0).abs();
        let fmt = move |v: &f64| {
            if log {
                format!("{:.0e}", 10f64.powf(*v))
            } else if v.abs() <= zero {
                "0".to_string()
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
        self.draw_backdrop(&mut chart, x0, x1)?;
        self.draw_lines(&mut chart)?;
        self.draw_markers(&mut chart)?;
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

/// Line charts stacked on one page, sharing the x axis (the mechanism chain).
pub struct Stack {
    pub title: String,
    pub panels: Vec<LineChart>,
}

impl Chart for Stack {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&self.title, ("sans-serif", 20)).map_err(err)?;
        let areas = root.split_evenly((self.panels.len().max(1), 1));
        for (p, a) in self.panels.iter().zip(areas) {
            p.draw(a)?;
        }
        Ok(())
    }

    fn size(&self) -> (u32, u32) {
        (1000, 260 * self.panels.len().max(1) as u32 + 40)
    }
}
