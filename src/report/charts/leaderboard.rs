//! The fix leaderboard: one row per arm, three panels on a shared row axis — the paired effect
//! against the reference arm with its interval, the share of cells that collapsed or had a
//! token-ratio explosion, and the seconds per RL step.

use super::{Chart, Ctx, err, palette};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::prelude::*;

/// One arm of the leaderboard.
pub struct LeaderRow {
    pub label: String,
    /// The paired effect against the reference arm with its 95% interval; `None` for the
    /// reference arm itself.
    pub effect: Option<(f64, (f64, f64))>,
    /// Verdict colour (the forest plot's tones).
    pub tone: usize,
    /// Share of the arm's cells with a collapse, and with a token-ratio explosion.
    pub collapse: f64,
    pub explosion: f64,
    /// Median seconds per RL step over the arm's steps, where the frames keep the timings.
    pub secs: Option<f64>,
}

pub struct Leaderboard {
    pub title: String,
    /// What the effect is (the x label of the first panel).
    pub x_label: String,
    /// The margin δ: the grey band ±δ.
    pub margin: f64,
    /// The cost panel's title: where the seconds per step come from.
    pub cost_from: &'static str,
    pub rows: Vec<LeaderRow>,
    /// Legend text of each tone.
    pub tones: Vec<String>,
    /// A line under the panels (what the rows marked † ran), where there is one.
    pub footnote: Option<String>,
}

/// A panel's legend, in the blank row at the bottom.
fn legend<'a, DB: DrawingBackend + 'a>(chart: &mut Ctx<'a, DB>) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    Ok(())
}

/// The colour of a tone (as in the forest plot).
fn tone(t: usize) -> RGBColor {
    palette([2, 3, 7, 0, 4][t % 5])
}

const LABELS: u32 = 210;
const EFFECT: u32 = 560;
const RATES: u32 = 260;
const TOP: u32 = 40;
const BOTTOM: u32 = 45;
/// The height of the footnote's line.
const FOOT: u32 = 24;

impl Leaderboard {
    /// The effect panel's x range: every interval and ±1.5 δ, padded.
    fn x_range(&self) -> (f64, f64) {
        let mut xs = vec![-1.5 * self.margin, 1.5 * self.margin];
        for (m, (lo, hi)) in self.rows.iter().filter_map(|r| r.effect) {
            xs.extend([m, lo, hi].into_iter().filter(|v| v.is_finite()));
        }
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let pad = 0.05 * (hi - lo);
        (lo - pad, hi + pad)
    }

    /// A panel with rows on the y axis and `x` on the x axis, its mesh drawn.
    fn panel<'a, DB: DrawingBackend>(
        &self,
        area: &'a DrawingArea<DB, Shift>,
        caption: &str,
        x: (f64, f64),
        x_label: &str,
    ) -> Result<Ctx<'a, DB>>
    where
        DB::ErrorType: 'static,
    {
        let n = self.slots();
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 15))
            .margin_top(8)
            .margin_right(14)
            .x_label_area_size(BOTTOM - 8)
            .build_cartesian_2d(x.0..x.1, 0f64..n)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .max_light_lines(0)
            .y_labels(0)
            .x_labels(6)
            .x_label_formatter(&|v: &f64| {
                let s = format!("{v:.2}");
                if s == "-0.00" { "0.00".into() } else { s }
            })
            .x_desc(x_label)
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .draw()
            .map_err(err)?;
        Ok(chart)
    }

    /// Row slots on the y axis: one per arm and one at the bottom for the legends.
    fn slots(&self) -> f64 {
        self.rows.len() as f64 + 1.0
    }

    /// The y of row `i` (the first row at the top).
    fn y(&self, i: usize) -> f64 {
        self.slots() - 0.5 - i as f64
    }

    fn draw_effects<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let n = self.slots();
        let (lo, hi) = self.x_range();
        let mut chart = self.panel(
            area,
            "effect vs the reference, 95% t interval",
            (lo, hi),
            &self.x_label,
        )?;
        let d = self.margin;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(-d, 1.0), (d, n)],
                RGBColor(200, 200, 200).mix(0.35).filled(),
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(0.0, 1.0), (0.0, n)],
                BLACK.stroke_width(1),
            )))
            .map_err(err)?;
        for (i, r) in self.rows.iter().enumerate() {
            let y = self.y(i);
            let Some((m, (a, b))) = r.effect else {
                chart
                    .draw_series(std::iter::once(Text::new(
                        "reference",
                        (lo + 0.02 * (hi - lo), y + 0.15),
                        ("sans-serif", 12),
                    )))
                    .map_err(err)?;
                continue;
            };
            let col = tone(r.tone);
            if a.is_finite() && b.is_finite() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(a, y), (b, y)],
                        col.stroke_width(3),
                    )))
                    .map_err(err)?;
            }
            chart
                .draw_series(std::iter::once(Circle::new((m, y), 6, col.filled())))
                .map_err(err)?;
        }
        for t in (0..self.tones.len())
            .filter(|t| self.rows.iter().any(|r| r.effect.is_some() && r.tone == *t))
        {
            let col = tone(t);
            chart
                .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
                .map_err(err)?
                .label(&self.tones[t])
                .legend(move |(x, y)| Circle::new((x + 10, y), 5, col.filled()));
        }
        legend(&mut chart)
    }

    fn draw_rates<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let mut chart = self.panel(area, "cells that broke", (0.0, 1.05), "share of cells")?;
        let (bar, dot) = (palette(3), palette(1));
        for (i, r) in self.rows.iter().enumerate() {
            let y = self.y(i);
            if r.collapse > 0.0 {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 0.3), (r.collapse, y + 0.3)],
                        bar.filled(),
                    )))
                    .map_err(err)?;
            }
            chart
                .draw_series(std::iter::once(Circle::new(
                    (r.explosion, y),
                    5,
                    dot.stroke_width(2),
                )))
                .map_err(err)?;
        }
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(err)?
            .label("collapse")
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 20, y + 5)], bar.filled()));
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())
            .map_err(err)?
            .label("token-ratio explosion")
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, dot.stroke_width(2)));
        legend(&mut chart)
    }

    fn draw_costs<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let hi = self.rows.iter().filter_map(|r| r.secs).fold(0f64, f64::max);
        let hi = if hi > 0.0 { 1.25 * hi } else { 1.0 };
        let mut chart = self.panel(
            area,
            self.cost_from,
            (0.0, hi),
            "seconds per RL step (median)",
        )?;
        for (i, r) in self.rows.iter().enumerate() {
            let y = self.y(i);
            let (rect, text) = match r.secs {
                Some(s) => (Some(s), format!("{s:.2}")),
                None => (None, "not kept".to_string()),
            };
            if let Some(s) = rect {
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(0.0, y - 0.3), (s, y + 0.3)],
                        palette(7).mix(0.7).filled(),
                    )))
                    .map_err(err)?;
            }
            let x = rect.unwrap_or(0.0) + 0.02 * hi;
            chart
                .draw_series(std::iter::once(Text::new(
                    text,
                    (x, y + 0.15),
                    ("sans-serif", 11),
                )))
                .map_err(err)?;
        }
        Ok(())
    }
}

impl Chart for Leaderboard {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn size(&self) -> (u32, u32) {
        let rest = 260;
        (
            LABELS + EFFECT + RATES + rest,
            TOP + BOTTOM
                + 40
                + 32 * (self.rows.len() + 1) as u32
                + if self.footnote.is_some() { FOOT } else { 0 },
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&self.title, ("sans-serif", 18)).map_err(err)?;
        let root = match &self.footnote {
            Some(note) => {
                let (_, h) = root.dim_in_pixel();
                let (upper, foot) = root.split_vertically(h.saturating_sub(FOOT));
                foot.draw(&Text::new(note.clone(), (8, 4), ("sans-serif", 12)))
                    .map_err(err)?;
                upper
            }
            None => root,
        };
        let (left, body) = root.split_horizontally(LABELS);
        let (effects, body) = body.split_horizontally(EFFECT);
        let (rates, costs) = body.split_horizontally(RATES);
        self.draw_effects(&effects)?;
        self.draw_rates(&rates)?;
        self.draw_costs(&costs)?;
        // Row labels, aligned with the rows: the plot area lies between the caption (8 px
        // margin and a 15 px font) and the x-label area.
        let (_, h) = left.dim_in_pixel();
        let top = 8.0 + 15.0 + 10.0;
        let bottom = h as f64 - (BOTTOM - 8) as f64;
        let step = (bottom - top) / self.slots();
        for (i, r) in self.rows.iter().enumerate() {
            let y = (top + (i as f64 + 0.5) * step) as i32 - 7;
            left.draw(&Text::new(r.label.clone(), (8, y), ("sans-serif", 13)))
                .map_err(err)?;
        }
        Ok(())
    }
}
