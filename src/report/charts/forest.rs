//! Forest plots: effects with intervals in units of their margin.

use super::{Chart, Ctx, err, palette};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

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

/// Effects beyond ±30 δ are drawn at the edge.
fn c(v: f64) -> f64 {
    v.clamp(-30.0, 30.0)
}

/// The colour of a tone.
fn tone(t: usize) -> RGBColor {
    palette([2, 3, 7, 0, 4][t % 5])
}

impl Forest {
    /// The x range: every interval and paper value, and ±1.5 δ at least; with its padding
    /// (the chart leaves eight paddings on the right for the legend).
    fn x_range(&self) -> (f64, f64, f64) {
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
        (lo, hi, pad)
    }

    /// Each row's interval, effect and paper value; whether any row had a paper value.
    fn draw_rows<DB: DrawingBackend>(&self, chart: &mut Ctx<'_, DB>) -> Result<bool>
    where
        DB::ErrorType: 'static,
    {
        let n = self.rows.len().max(1);
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
        Ok(any_ref)
    }
}

impl Forest {
    /// The tones some row has, in legend order (a legend lists only what is drawn).
    fn present_tones(&self) -> Vec<usize> {
        (0..self.tones.len())
            .filter(|t| self.rows.iter().any(|r| r.tone == *t))
            .collect()
    }
}

impl Chart for Forest {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn size(&self) -> (u32, u32) {
        // Tall enough for the legend (the band, each tone present, the paper's value).
        let legend = 2 + self.present_tones().len() as u32;
        (
            1200,
            (130 + 34 * self.rows.len().max(1) as u32).max(110 + 22 * legend),
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let (lo, hi, pad) = self.x_range();
        let n = self.rows.len().max(1);
        let labels: Vec<String> = self.rows.iter().map(|r| r.label.clone()).collect();
        let (left, body) = root.split_horizontally(430);
        let mut chart = ChartBuilder::on(&body)
            .caption(&self.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .build_cartesian_2d((lo - pad)..(hi + 8.0 * pad), 0f64..n as f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .max_light_lines(0)
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
        for t in self.present_tones() {
            let (col, name) = (tone(t), &self.tones[t]);
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, col.filled()));
        }
        let any_ref = self.draw_rows(&mut chart)?;
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
        Ok(())
    }
}
