//! The stability map: categorical heatmaps (rows × columns with labels) on one diverging
//! colour scale around 0, one panel per arm, every cell annotated with its value and whether
//! its 95% interval settles the question at the margin δ.

use super::{Chart, err};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One cell of a map panel: the mean and its 95% interval (NaN: not run).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MapCell {
    pub mean: f64,
    pub lo: f64,
    pub hi: f64,
    /// The cell is a control (what the others are compared against): drawn grey, labelled.
    pub control: bool,
    /// Seeds behind the cell (0: not given).
    pub n: usize,
}

impl MapCell {
    pub const EMPTY: MapCell = MapCell {
        mean: f64::NAN,
        lo: f64::NAN,
        hi: f64::NAN,
        control: false,
        n: 0,
    };

    pub const CONTROL: MapCell = MapCell {
        control: true,
        ..MapCell::EMPTY
    };

    /// What the interval says at margin `d`: "▼" below −δ (a drop that matters), "▲" above
    /// +δ, "=" inside ±δ (no change that matters), "" neither.
    pub fn mark(&self, d: f64) -> &'static str {
        if !(self.lo.is_finite() && self.hi.is_finite()) {
            ""
        } else if self.hi < -d {
            "▼"
        } else if self.lo > d {
            "▲"
        } else if self.lo > -d && self.hi < d {
            "="
        } else {
            ""
        }
    }
}

/// One panel: `cells[row][col]`, rows listed top to bottom.
pub struct MapPanel {
    pub title: String,
    pub cells: Vec<Vec<MapCell>>,
}

/// Panels sharing row and column labels and one colour scale.
pub struct StabilityMap {
    pub title: String,
    pub row_label: String,
    pub rows: Vec<String>,
    pub cols: Vec<String>,
    /// The margin the marks are read at; None: the cells are rates in [0, 1] (white at 0, red
    /// at 1) and carry no marks.
    pub margin: Option<f64>,
    pub panels: Vec<MapPanel>,
}

/// Width of the colour bar at the right of a map, in pixels.
const COLOUR_BAR: u32 = 70;

/// Red for negative, white at 0, blue for positive; `v` in [−1, 1].
fn diverging(v: f64) -> RGBColor {
    let v = v.clamp(-1.0, 1.0);
    let lerp = |a: f64, b: f64, t: f64| (a + (b - a) * t).round() as u8;
    if v < 0.0 {
        let t = -v;
        RGBColor(
            lerp(255.0, 178.0, t),
            lerp(255.0, 24.0, t),
            lerp(255.0, 43.0, t),
        )
    } else {
        RGBColor(
            lerp(255.0, 33.0, v),
            lerp(255.0, 102.0, v),
            lerp(255.0, 172.0, v),
        )
    }
}

impl StabilityMap {
    /// The colour scale's half-range: the largest |mean|, at least twice the margin (1 for
    /// rates).
    fn scale(&self) -> f64 {
        let Some(d) = self.margin else { return 1.0 };
        self.panels
            .iter()
            .flat_map(|p| p.cells.iter().flatten())
            .map(|c| c.mean.abs())
            .filter(|v| v.is_finite())
            .fold(2.0 * d, f64::max)
    }

    /// The title with the colour scale and the marks explained.
    fn full_title(&self) -> String {
        let s = self.scale();
        match self.margin {
            Some(d) => format!(
                "{} (colour ±{s:.2}; unadjusted 95% CI per cell: ▼ below −δ, = inside ±δ, ▲ above +δ; δ = {d})",
                self.title
            ),
            None => format!("{} (colour: 0 white, 1 red)", self.title),
        }
    }

    fn color(&self, v: f64) -> RGBColor {
        match self.margin {
            Some(_) => diverging(v / self.scale()),
            // A rate: more is worse, so red.
            None => diverging(-v),
        }
    }

    /// A cell's two lines: its value (and mark), then its interval's half-width and seeds.
    fn text(&self, c: &MapCell) -> (String, String) {
        let n = if c.n > 0 {
            format!("n {}", c.n)
        } else {
            String::new()
        };
        match self.margin {
            Some(d) => {
                let half = (c.hi - c.lo) / 2.0;
                let second = if half.is_finite() {
                    format!("±{half:.3} {n}")
                } else {
                    n
                };
                (format!("{:+.3} {}", c.mean, c.mark(d)), second)
            }
            None => (format!("{:.2}", c.mean), n),
        }
    }

    /// The colour bar at the right: the scale from its low end (bottom) to its high end.
    fn draw_colour_bar<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (w, h) = area.dim_in_pixel();
        let (top, bottom) = (40i32, h as i32 - 40);
        let (x0, x1) = (10i32, 30i32.min(w as i32));
        let (lo, hi) = match self.margin {
            Some(_) => (-self.scale(), self.scale()),
            None => (0.0, 1.0),
        };
        let steps = 60;
        for i in 0..steps {
            let f = (i as f64 + 0.5) / steps as f64;
            let y = bottom - ((bottom - top) as f64 * (i + 1) as f64 / steps as f64) as i32;
            let y1 = bottom - ((bottom - top) as f64 * i as f64 / steps as f64) as i32;
            area.draw(&Rectangle::new(
                [(x0, y), (x1, y1)],
                self.color(lo + f * (hi - lo)).filled(),
            ))
            .map_err(err)?;
        }
        area.draw(&Rectangle::new([(x0, top), (x1, bottom)], BLACK))
            .map_err(err)?;
        let label = |v: f64| match self.margin {
            Some(_) => format!("{v:+.2}"),
            None => format!("{v:.1}"),
        };
        for (v, y) in [
            (hi, top),
            ((lo + hi) / 2.0, (top + bottom) / 2),
            (lo, bottom),
        ] {
            area.draw(&Text::new(label(v), (x1 + 4, y - 6), ("sans-serif", 11)))
                .map_err(err)?;
        }
        Ok(())
    }
}

impl Chart for StabilityMap {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn size(&self) -> (u32, u32) {
        let n = self.panels.len().max(1) as u32;
        let h = 70 + 34 * self.rows.len().max(1) as u32;
        // Wide enough that the longest column label (11 px text, ~6.5 px a character) fits
        // its column: two panels side by side, each with its row labels.
        let longest = self
            .cols
            .iter()
            .map(|c| c.chars().count())
            .max()
            .unwrap_or(0) as u32;
        let col = (longest * 13 / 2 + 16).max(100);
        let panel = 110 + col * self.cols.len().max(1) as u32;
        // And wide enough for the title (15 px text, ~7.8 px a character).
        let title = self.full_title().chars().count() as u32 * 39 / 5 + 40;
        (
            (2 * panel).max(1100).max(title) + COLOUR_BAR,
            60 + n.div_ceil(2) * h,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let root = root
            .titled(&self.full_title(), ("sans-serif", 15))
            .map_err(err)?;
        let (w, _) = root.dim_in_pixel();
        let (root, bar) = root.split_horizontally(w.saturating_sub(COLOUR_BAR));
        self.draw_colour_bar(&bar)?;
        let n = self.panels.len().max(1);
        let grid = (n.div_ceil(2), if n > 1 { 2 } else { 1 });
        let (nr, nc) = (self.rows.len().max(1), self.cols.len().max(1));
        for (p, area) in self.panels.iter().zip(root.split_evenly(grid)) {
            let mut chart = ChartBuilder::on(&area)
                .caption(&p.title, ("sans-serif", 14))
                .margin(6)
                .x_label_area_size(34)
                .y_label_area_size(90)
                .build_cartesian_2d(0f64..nc as f64, 0f64..nr as f64)
                .map_err(err)?;
            let (rows, cols) = (self.rows.clone(), self.cols.clone());
            chart
                .configure_mesh()
                .disable_mesh()
                .x_labels(nc * 2 + 1)
                .y_labels(nr * 2 + 1)
                .x_label_formatter(&|v: &f64| label_at(&cols, *v, false))
                .y_label_formatter(&|v: &f64| label_at(&rows, *v, true))
                .y_desc(&self.row_label)
                .label_style(("sans-serif", 11))
                .axis_desc_style(("sans-serif", 12))
                .draw()
                .map_err(err)?;
            for (r, row) in p.cells.iter().enumerate() {
                // Row 0 is drawn at the top.
                let y = (nr - 1 - r) as f64;
                for (c, cell) in row.iter().enumerate() {
                    let x = c as f64;
                    let color = if cell.mean.is_finite() {
                        self.color(cell.mean)
                    } else {
                        RGBColor(230, 230, 230)
                    };
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x, y), (x + 1.0, y + 1.0)],
                            color.filled(),
                        )))
                        .map_err(err)?;
                    if cell.mean.is_finite() || cell.control {
                        let (first, second) = if cell.control {
                            ("control".to_string(), String::new())
                        } else {
                            self.text(cell)
                        };
                        chart
                            .draw_series([
                                Text::new(first, (x + 0.08, y + 0.78), ("sans-serif", 12)),
                                Text::new(second, (x + 0.08, y + 0.38), ("sans-serif", 10)),
                            ])
                            .map_err(err)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// The label of the category whose centre is at `v` (labels sit at k + 0.5), else nothing.
/// Rows count from the top.
fn label_at(labels: &[String], v: f64, from_top: bool) -> String {
    let k = v - 0.5;
    if k < -1e-9 || (k - k.round()).abs() > 1e-6 {
        return String::new();
    }
    let k = k.round() as usize;
    let i = if from_top {
        labels.len().checked_sub(k + 1)
    } else {
        Some(k)
    };
    i.and_then(|i| labels.get(i)).cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_read_the_interval_at_the_margin() {
        let c = |lo: f64, hi: f64| MapCell {
            mean: (lo + hi) / 2.0,
            lo,
            hi,
            control: false,
            n: 6,
        };
        assert_eq!(c(-0.2, -0.06).mark(0.05), "▼");
        assert_eq!(c(0.06, 0.2).mark(0.05), "▲");
        assert_eq!(c(-0.03, 0.04).mark(0.05), "=");
        assert_eq!(c(-0.08, 0.01).mark(0.05), "");
        assert_eq!(MapCell::EMPTY.mark(0.05), "");
        let l: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
        assert_eq!(label_at(&l, 0.5, false), "a");
        assert_eq!(label_at(&l, 0.5, true), "c");
        assert_eq!(label_at(&l, 1.0, false), "");
    }
}
