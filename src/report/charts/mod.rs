//! Line and bar charts with plotters, as PNG and SVG, with an embedded font (no system fonts).
//! What to draw from a run is decided in [`super::figures`].

mod axis;
mod bar;
mod forest;
mod heatmap;
mod leaderboard;
mod line;
mod map;
mod stack;
mod svg;

pub(crate) use axis::{YAxis, log_label, si_label, y_axis};
pub use bar::{Bar, BarChart};
pub use forest::{Forest, ForestRow};
pub use heatmap::{HeatPanel, Heatmap};
pub use leaderboard::{LeaderRow, Leaderboard};
pub use map::{MapCell, MapPanel, StabilityMap};
pub use stack::Stack;

use anyhow::{Context, Result, anyhow};
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;
use std::sync::Once;

/// The drawing context of a chart with two float axes.
type Ctx<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
/// A line chart's context: its y axis places its own ticks ([`y_ticks`]).
type LineCtx<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, YAxis>>;

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
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub band: Vec<(f64, f64, f64)>,
    /// Drawn dashed: a guide or an extrapolation, not data.
    pub dashed: bool,
    /// Palette index of its colour (None: its place in the chart), so that a fit can share
    /// its data's colour.
    pub color: Option<usize>,
}

/// What a marker on a line chart stands for: each kind has its own shape and legend entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// Training broke down (reward, entropy, non-finite or expert collapse): a black cross.
    Collapse,
    /// A warning (ratio explosion, gradient spike) and no breakdown: a grey triangle.
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
    /// Empty: the line continues the one before it (same colour, no legend entry).
    pub label: String,
}

/// The faint lines of one series: one polyline per seed.
pub type Faint = Vec<Vec<(f64, f64)>>;

#[derive(Clone)]
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
    /// The x values are categories numbered 0, 1, 2, …: ticks at the integers only.
    pub categorical_x: bool,
}

/// The arms whose colour is fixed across every figure of every run: their place here.
pub const METHODS: &[&str] = &[
    "grpo",
    "grpo_r2",
    "grpo_r3",
    "gspo",
    "gvpo",
    "dense",
    "cispo",
    "grpo_shift",
    "gmpo",
    "grpo_tis",
    "grpo_icepop",
    "grpo_mis",
    "grpo_opsm",
    "grpo_r3_threshold",
    "grpo_pr2",
];

/// The palette index of a method, so that an arm keeps its colour in every figure of every
/// run: the arm name is the part after a `regime/` prefix and before ` = ` (merged twins).
/// None for a name outside [`METHODS`].
pub fn method_color(name: &str) -> Option<usize> {
    let arm = name.rsplit('/').next().unwrap_or(name);
    let arm = arm.split(" = ").next().unwrap_or(arm).trim();
    METHODS.iter().position(|k| *k == arm)
}

/// The palette index of each series of a chart: its own `color`, else its method's, else its
/// place; a colour already taken by an earlier series goes to the next free one, so that two
/// series of one chart never share a colour.
pub fn series_colors<'a>(names: impl Iterator<Item = (&'a str, Option<usize>)>) -> Vec<usize> {
    let mut taken: Vec<(usize, String)> = Vec::new();
    let mut out = Vec::new();
    for (i, (name, own)) in names.enumerate() {
        let want = own.or_else(|| method_color(name)).unwrap_or(i);
        // A series sharing another's colour on purpose (a fit in its data's colour) keeps it.
        let mut c = want;
        if own.is_none() {
            while taken.iter().any(|(t, n)| *t == c % COLORS && n != name) && taken.len() < COLORS {
                c += 1;
            }
        }
        taken.push((c % COLORS, name.to_string()));
        out.push(c % COLORS);
    }
    out
}

/// How many distinct series colours [`palette`] has.
pub const COLORS: usize = 16;

/// The series colours: the ten of matplotlib's tab10 first (every committed figure with up
/// to ten series keeps them), then six more for the arms of the larger studies.
pub fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; COLORS] = [
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
        RGBColor(230, 171, 2),
        RGBColor(27, 94, 32),
        RGBColor(204, 0, 153),
        RGBColor(251, 128, 114),
        RGBColor(102, 194, 165),
        RGBColor(166, 86, 40),
    ];
    C[i % C.len()]
}

/// The colours of the paper's reference lines: black, dark teal, navy (none is in
/// [`palette`], so a reference line is never mistaken for a series).
pub(crate) const REF_COLORS: [RGBColor; 3] = [
    RGBColor(0, 0, 0),
    RGBColor(0, 95, 95),
    RGBColor(20, 20, 110),
];

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
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static;

    /// The figure's title, for a caller that names the regime in it.
    fn title_mut(&mut self) -> &mut String;

    /// Pixel size of the figure.
    fn size(&self) -> (u32, u32) {
        (1000, 600)
    }

    /// Write `<stem>.png` and `<stem>.svg` under `dir`, each drawn into a temporary file
    /// beside it and renamed into place: a failed figure (a full disk) leaves no partial file,
    /// and its error names the figure's file.
    fn save(&self, dir: &Path, stem: &str) -> Result<()> {
        register_font();
        for ext in ["png", "svg"] {
            let path = dir.join(format!("{stem}.{ext}"));
            // The bitmap backend picks its encoder from the extension, so it stays last.
            let tmp = dir.join(format!(".{stem}.partial.{ext}"));
            let drawn = if ext == "png" {
                present(
                    self,
                    BitMapBackend::new(&tmp, self.size()).into_drawing_area(),
                )
            } else {
                // Drawn into memory and written once, in its committed form (`svg::compact`).
                let mut drawn = String::new();
                present(
                    self,
                    SVGBackend::with_string(&mut drawn, self.size()).into_drawing_area(),
                )
                .and_then(|()| Ok(std::fs::write(&tmp, svg::compact(&drawn))?))
            };
            // Each backend is dropped (and has written what it would) inside `present`.
            let done = drawn.and_then(|()| Ok(std::fs::rename(&tmp, &path)?));
            if let Err(e) = done {
                let _ = std::fs::remove_file(&tmp);
                return Err(e).with_context(|| format!("writing the figure {}", path.display()));
            }
        }
        Ok(())
    }
}

/// Draw `chart` on `root` and write the file once, after every panel is drawn: the SVG backend
/// writes its file on the first `present()` and drops what is drawn after it, so no chart
/// presents its own area (a multi-panel figure would keep only its first panel).
fn present<C: Chart + ?Sized, DB: DrawingBackend>(
    chart: &C,
    root: DrawingArea<DB, Shift>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart.draw(&root)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests;
