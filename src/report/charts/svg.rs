//! The committed form of an SVG figure: the same picture as plotters draws it, in fewer bytes.
//!
//! Figures were most of a results folder's size (483 SVGs, 11.5 MB, before this pass), and
//! plotters writes every element with every attribute, a dashed line as one `<polyline>` per
//! dash. Four rewrites, none changing what is drawn:
//! - `opacity="1"` is dropped (the default);
//! - `stroke="none"` is dropped (the default stroke);
//! - a text's `fill="#000000"` is dropped (black is the default fill);
//! - consecutive opaque, unfilled polylines of one stroke and width (a dashed line, the ticks
//!   of an axis) become one `<path>` with one subpath each.
//!
//! Checked by rendering every committed figure with librsvg before and after (11.5 -> 8.2 MB
//! over the 483): 465 are the same pixels; in the other 18 (dashed slanted guide lines, as in
//! `ratio_var_vs_len.svg`) 13-817 edge pixels differ by at most 13 of 255, the rasteriser
//! antialiasing one path of many subpaths a shade differently from as many polylines.
//!
//! Only tag lines are touched; a text's content (its own line in plotters' output, with `"`
//! escaped) is copied as is.

/// `svg` as plotters wrote it, rewritten as described above.
pub fn compact(svg: &str) -> String {
    let mut out = String::with_capacity(svg.len());
    let mut run: Option<(String, String)> = None; // (stroke attributes, path data)
    let mut in_text = false;
    for line in svg.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        if !in_text && let Some((style, points)) = opaque_polyline(body) {
            match &mut run {
                Some((s, d)) if *s == style => push_subpath(d, points),
                _ => {
                    flush(&mut out, run.take());
                    let mut d = String::new();
                    push_subpath(&mut d, points);
                    run = Some((style, d));
                }
            }
            continue;
        }
        flush(&mut out, run.take());
        if in_text || !body.starts_with('<') {
            out.push_str(line);
        } else {
            out.push_str(&tag(body));
            out.push_str(&line[body.len()..]);
        }
        if body.starts_with("<text") && !body.contains("</text>") {
            in_text = true;
        }
        if body.contains("</text>") {
            in_text = false;
        }
    }
    flush(&mut out, run.take());
    out
}

/// `<polyline fill="none" opacity="1" stroke="S" stroke-width="W" points="P"/>` as
/// (`stroke="S" stroke-width="W"`, `P`); any other line is `None`.
fn opaque_polyline(line: &str) -> Option<(String, &str)> {
    let rest = line.strip_prefix(r#"<polyline fill="none" opacity="1" "#)?;
    let (style, rest) = rest.split_once(r#" points=""#)?;
    // An empty `points` would be a bare `M`, an error that stops the rest of the path.
    let points = rest
        .strip_suffix(r#""/>"#)
        .filter(|p| !p.trim().is_empty())?;
    let plain = style.starts_with("stroke=\"") && !style.contains(['<', '>']);
    (plain && !points.contains('"')).then(|| (style.to_string(), points))
}

/// Append one subpath: a moveto followed by implicit linetos, as SVG reads "M x,y x,y ...".
fn push_subpath(d: &mut String, points: &str) {
    d.push('M');
    d.push_str(points.trim());
}

fn flush(out: &mut String, run: Option<(String, String)>) {
    if let Some((style, d)) = run {
        out.push_str(&format!("<path fill=\"none\" {style} d=\"{d}\"/>\n"));
    }
}

/// One tag line without its default attributes.
fn tag(line: &str) -> String {
    let mut s = line
        .replace(r#" opacity="1""#, "")
        .replace(r#" stroke="none""#, "");
    if s.starts_with("<text") {
        s = s.replace(r##" fill="#000000""##, "");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn dashes_of_one_stroke_become_one_path_and_defaults_go() {
        // Lines the pass leaves as they are: a faint polyline (opacity < 1), and a text's
        // content, copied as is even when it reads like a tag.
        let open = "<svg width=\"10\" height=\"10\" xmlns=\"http://www.w3.org/2000/svg\">\n";
        let faint = "<polyline fill=\"none\" opacity=\"0.2\" stroke=\"#000000\" stroke-width=\"2\" points=\"5,1 6,1 \"/>\n";
        let end = concat!(
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#000000\" stroke-width=\"2\" points=\"1,1 2,1 \"/>\n",
            "</text>\n",
            "<text x=\"5\" y=\"5\" font-size=\"12\" fill=\"#FF0000\">\n",
            "a\n",
            "</text>\n",
            "</svg>\n",
        );
        let svg = [
            open,
            "<rect x=\"0\" y=\"0\" width=\"10\" height=\"10\" opacity=\"1\" fill=\"#FFFFFF\" stroke=\"none\"/>\n",
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#000000\" stroke-width=\"2\" points=\"1,1 2,1 \"/>\n",
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#000000\" stroke-width=\"2\" points=\"3,1 4,1 \"/>\n",
            faint,
            "<text x=\"5\" y=\"5\" font-family=\"sans-serif\" font-size=\"11.290322580645162\" opacity=\"1\" fill=\"#000000\">\n",
            end,
        ]
        .concat();
        let want = [
            open,
            "<rect x=\"0\" y=\"0\" width=\"10\" height=\"10\" fill=\"#FFFFFF\"/>\n",
            "<path fill=\"none\" stroke=\"#000000\" stroke-width=\"2\" d=\"M1,1 2,1M3,1 4,1\"/>\n",
            faint,
            "<text x=\"5\" y=\"5\" font-family=\"sans-serif\" font-size=\"11.290322580645162\">\n",
            end,
        ]
        .concat();
        assert_eq!(compact(&svg), want);
    }

    #[test]
    fn a_run_ends_where_the_stroke_changes() {
        let svg = concat!(
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#111111\" stroke-width=\"1\" points=\"1,1 2,2 \"/>\n",
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#222222\" stroke-width=\"1\" points=\"3,3 4,4 \"/>\n",
        );
        let want = concat!(
            "<path fill=\"none\" stroke=\"#111111\" stroke-width=\"1\" d=\"M1,1 2,2\"/>\n",
            "<path fill=\"none\" stroke=\"#222222\" stroke-width=\"1\" d=\"M3,3 4,4\"/>\n",
        );
        assert_eq!(compact(svg), want);
    }
}
