//! Stacked figures: line charts on one page sharing the x axis, with one legend band under the
//! title (a small panel has no room for a legend of its own that does not cover its data), and
//! the legend entries of a line chart it is built from.

use super::{Chart, LineChart, MarkerKind, REF_COLORS, Series, err, palette};
use anyhow::Result;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// How a legend entry is drawn, 20 pixels wide from its left end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Glyph {
    /// A series' solid line.
    Line(RGBColor),
    /// A dashed series (a fit, a guide).
    Dashed(RGBColor),
    /// A scatter series' point.
    Dot(RGBColor),
    /// A paper value's dashed reference line.
    Ref(RGBColor),
    Collapse,
    Warning,
}

/// Grey of the warning markers: no series colour (red and orange are series colours).
pub(super) const WARNING_GREY: RGBColor = RGBColor(100, 100, 100);

impl Glyph {
    /// Draw the glyph with its left end at `(x, y)` of `area`: the glyphs of a line chart's
    /// own legend (`line.rs`), drawn outside a chart.
    fn draw<DB: DrawingBackend>(
        self,
        area: &DrawingArea<DB, Shift>,
        (x, y): (i32, i32),
    ) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let span = vec![(x, y), (x + 20, y)];
        match self {
            Glyph::Line(c) => area.draw(&PathElement::new(span, c.stroke_width(3))),
            Glyph::Dashed(c) => area.draw(&DashedPathElement::new(span, 5, 3, c.stroke_width(2))),
            Glyph::Dot(c) => area.draw(&Circle::new((x + 10, y), 4, c.filled())),
            Glyph::Ref(c) => area.draw(&PathElement::new(span, c.stroke_width(2))),
            Glyph::Collapse => area.draw(&Cross::new((x + 10, y), 6, BLACK.stroke_width(2))),
            Glyph::Warning => area.draw(&TriangleMarker::new(
                (x + 10, y),
                6,
                WARNING_GREY.stroke_width(2),
            )),
        }
        .map_err(err)
    }

    pub(super) fn of_marker(kind: MarkerKind) -> Glyph {
        match kind {
            MarkerKind::Collapse => Glyph::Collapse,
            MarkerKind::Warning => Glyph::Warning,
        }
    }
}

impl LineChart {
    /// The colour of each reference line: a line with an empty label continues the one before
    /// it (e.g. −δ after +δ) in its colour.
    pub(super) fn ref_colors(&self) -> Vec<RGBColor> {
        let mut k = 0;
        (self.refs.iter().enumerate())
            .map(|(i, r)| {
                if i > 0 && !r.label.is_empty() {
                    k += 1;
                }
                REF_COLORS[k % REF_COLORS.len()]
            })
            .collect()
    }

    /// The glyph of series `s` drawn in palette colour `color`.
    pub(super) fn series_glyph(&self, s: &Series, color: usize) -> Glyph {
        let c = palette(color);
        if self.scatter && !s.dashed {
            Glyph::Dot(c)
        } else if s.dashed {
            Glyph::Dashed(c)
        } else {
            Glyph::Line(c)
        }
    }

    /// The chart's legend, in the order its own legend lists it: labelled reference lines that
    /// are drawn, named series, marker kinds present.
    pub(super) fn legend_items(&self) -> Vec<(String, Glyph)> {
        let refs = (self.refs.iter().zip(self.ref_colors()))
            .filter(|(r, _)| !r.label.is_empty() && self.ty(r.y).is_some())
            .map(|(r, c)| (r.label.clone(), Glyph::Ref(c)));
        let colors = self.colors();
        let series = (self.series.iter().zip(colors))
            .filter(|(s, _)| !s.name.is_empty())
            .map(|(s, c)| (s.name.clone(), self.series_glyph(s, c)));
        let marks = [MarkerKind::Collapse, MarkerKind::Warning]
            .into_iter()
            .filter(|&k| (self.markers.iter()).any(|m| m.kind == k && self.ty(m.y).is_some()))
            .map(|k| (k.legend().to_string(), Glyph::of_marker(k)));
        refs.chain(series).chain(marks).collect()
    }
}

/// Height of one row of a legend band, in pixels.
const ROW_H: i32 = 20;
/// Space between two entries of a row, and at the band's right.
const GAP: i32 = 24;
/// Where a row starts: above the panels' plot areas (margin 12 + y label area 70), clear of a
/// long rotated y label.
const LEFT: i32 = 82;

fn font() -> TextStyle<'static> {
    ("sans-serif", 14).into_font().into()
}

/// Where each entry of a legend band of `width` pixels goes: `(row, x)` of its glyph, entries
/// flowing left to right and wrapping.
pub(super) fn band_layout(items: &[(String, Glyph)], width: u32) -> Vec<(i32, i32)> {
    super::register_font();
    let (mut row, mut x) = (0, LEFT);
    let mut out = Vec::new();
    for (label, _) in items {
        let text_w = font()
            .font
            .box_size(label)
            .map_or(8 * label.len() as i32, |b| b.0 as i32);
        let w = 28 + text_w;
        if x > LEFT && x + w > width as i32 - GAP {
            (row, x) = (row + 1, LEFT);
        }
        out.push((row, x));
        x += w + GAP;
    }
    out
}

/// Pixel height of the band that [`band_layout`] lays out (0 without entries).
pub(super) fn band_height(layout: &[(i32, i32)]) -> u32 {
    layout
        .iter()
        .map(|&(r, _)| r + 1)
        .max()
        .map_or(0, |rows| (rows * ROW_H + 8) as u32)
}

/// Draw the legend band: each entry's glyph and label at its place from [`band_layout`].
pub(super) fn draw_band<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    items: &[(String, Glyph)],
    layout: &[(i32, i32)],
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let style = font().pos(Pos::new(HPos::Left, VPos::Center));
    for ((label, glyph), &(row, x)) in items.iter().zip(layout) {
        let y = row * ROW_H + ROW_H / 2 + 4;
        glyph.draw(area, (x, y))?;
        area.draw(&Text::new(label.as_str(), (x + 28, y), style.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// The entries of several panels' legends, each (label, glyph) once, in first-seen order.
pub(super) fn merged(panels: &[LineChart]) -> Vec<(String, Glyph)> {
    let mut out: Vec<(String, Glyph)> = Vec::new();
    for item in panels.iter().flat_map(LineChart::legend_items) {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Line charts stacked on one page, sharing the x axis (the mechanism chain). Their legends
/// are merged into one band under the title (each entry once): a panel is too short for a
/// legend that does not cover its data.
pub struct Stack {
    pub title: String,
    pub panels: Vec<LineChart>,
}

/// Width of a stacked figure in pixels.
const STACK_WIDTH: u32 = 1000;

impl Chart for Stack {
    fn title_mut(&mut self) -> &mut String {
        &mut self.title
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        root.fill(&WHITE).map_err(err)?;
        let root = root.titled(&self.title, ("sans-serif", 20)).map_err(err)?;
        let items = merged(&self.panels);
        let layout = band_layout(&items, STACK_WIDTH);
        let (band, panels) = root.split_vertically(band_height(&layout));
        draw_band(&band, &items, &layout)?;
        let areas = panels.split_evenly((self.panels.len().max(1), 1));
        for (p, a) in self.panels.iter().zip(areas) {
            p.draw_in(&a, false)?;
        }
        Ok(())
    }

    fn size(&self) -> (u32, u32) {
        let items = merged(&self.panels);
        let band = band_height(&band_layout(&items, STACK_WIDTH));
        (
            STACK_WIDTH,
            260 * self.panels.len().max(1) as u32 + 40 + band,
        )
    }
}
