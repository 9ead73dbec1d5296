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
            MarkerKind::Collapse => "collapse event",
            MarkerKind::Warning => "warning (ratio explosion / gradient spike)",
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
        for (i, lines) in self.faint.iter().enumerate() {
            let color = palette(i).mix(0.25);
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
        for r in &self.refs {
            let Some(y) = self.ty(r.y) else { continue };
            let grey = RGBColor(90, 90, 90);
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
    /// Paper values as dashed lines with a legend.
    pub refs: Vec<RefLine>,
}

impl Chart for BarChart {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let t = |v: f64| if self.log_y { v.max(1e-6).log10() } else { v };
        let mut vals: Vec<f64> = self
            .bars
            .iter()
            .flat_map(|b| [Some(t(b.1)), b.2.map(|e| t(e.1))])
            .flatten()
            .collect();
        vals.extend(self.refs.iter().map(|r| t(r.y)));
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
        for (k, r) in self.refs.iter().enumerate() {
            let c = [RGBColor(90, 90, 90), RGBColor(200, 60, 60)][k % 2];
            chart
                .draw_series(DashedLineSeries::new(
                    vec![(0.0, t(r.y)), (n as f64, t(r.y))],
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
        root.present().map_err(err)?;
        Ok(())
    }
}

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
    fn size(&self) -> (u32, u32) {
        let n = self.panels.len().max(1);
        let rows = n.div_ceil(if n > 3 { 2 } else { 1 });
        (1000, 50 + 230 * rows as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
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
        root.present().map_err(err)?;
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

/// One row of a forest plot: an effect with its interval, in units of the row's margin.
pub struct ForestRow {
    pub label: String,
    pub effect: f64,
    pub ci: (f64, f64),
    /// The paper's value, when it reports one.
    pub reference: Option<f64>,
    /// Colour: a verdict (holds, does not hold, inconclusive, secondary).
    pub tone: usize,
}

/// Effects with intervals on one axis: the no-effect line at 0, the equivalence band ±1
/// (effects are divided by their margin δ), the paper's values as diamonds.
pub struct Forest {
    pub title: String,
    pub x_label: String,
    pub rows: Vec<ForestRow>,
    /// Legend text of each tone.
    pub tones: Vec<String>,
}

impl Chart for Forest {
    fn size(&self) -> (u32, u32) {
        (1200, 130 + 34 * self.rows.len().max(1) as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let clip = 30.0;
        let c = |v: f64| v.clamp(-clip, clip);
        let mut xs: Vec<f64> = vec![-1.5, 1.5];
        for r in &self.rows {
            xs.extend(
                [r.effect, r.ci.0, r.ci.1]
                    .into_iter()
                    .filter(|v| v.is_finite())
                    .map(c),
            );
            xs.extend(r.reference.map(c));
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = 0.05 * (hi - lo);
        let n = self.rows.len().max(1);
        let labels: Vec<String> = self.rows.iter().map(|r| r.label.clone()).collect();
        let (left, body) = root.split_horizontally(430);
        let mut chart = ChartBuilder::on(&body)
            .caption(&self.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .build_cartesian_2d((lo - pad)..(hi + pad), 0f64..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(0)
            .x_desc(&self.x_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(-1.0, 0.0), (1.0, n as f64)],
                RGBColor(200, 200, 200).mix(0.35).filled(),
            )))
            .map_err(err)?
            .label("equivalence band ±δ")
            .legend(|(x, y)| {
                Rectangle::new(
                    [(x, y - 5), (x + 20, y + 5)],
                    RGBColor(200, 200, 200).filled(),
                )
            });
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 0.0), (0.0, n as f64)],
                BLACK.stroke_width(1),
            )))
            .map_err(err)?;
        let tone = |t: usize| palette([2, 3, 7, 0][t % 4]);
        for (t, name) in self.tones.iter().enumerate() {
            let col = tone(t);
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, col.filled()));
        }
        let mut any_ref = false;
        for (i, r) in self.rows.iter().enumerate() {
            let y = (n - 1 - i) as f64 + 0.5;
            let col = tone(r.tone);
            if r.ci.0.is_finite() && r.ci.1.is_finite() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(c(r.ci.0), y), (c(r.ci.1), y)],
                        col.stroke_width(3),
                    )))
                    .map_err(err)?;
            }
            if r.effect.is_finite() {
                chart
                    .draw_series(std::iter::once(Circle::new(
                        (c(r.effect), y),
                        6,
                        col.filled(),
                    )))
                    .map_err(err)?;
            }
            if let Some(p) = r.reference {
                any_ref = true;
                chart
                    .draw_series(std::iter::once(
                        EmptyElement::at((c(p), y))
                            + Polygon::new(
                                vec![(0, -8), (6, 0), (0, 8), (-6, 0)],
                                BLACK.stroke_width(1),
                            ),
                    ))
                    .map_err(err)?;
            }
        }
        if any_ref {
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label("paper's value (diamond)")
                .legend(|(x, y)| {
                    EmptyElement::at((x + 10, y))
                        + Polygon::new(vec![(0, -6), (5, 0), (0, 6), (-5, 0)], BLACK.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .position(SeriesLabelPosition::LowerRight)
            .draw()
            .map_err(err)?;
        // Row labels on the left, aligned with the rows (plot area between the caption and
        // the x-label area).
        let (_, h) = left.dim_in_pixel();
        let top = 10 + 30;
        let bottom = h as i32 - 10 - 40;
        let step = (bottom - top) as f64 / n as f64;
        for (i, l) in labels.iter().enumerate() {
            let y = top + ((i as f64 + 0.5) * step) as i32 - 7;
            left.draw(&Text::new(l.clone(), (8, y), ("sans-serif", 13)))
                .map_err(err)?;
        }
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
