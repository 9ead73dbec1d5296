//! Figures that are whole (every panel in the SVG) and axes that tell the truth.

use super::axis::log_ticks;
use super::*;

fn line(y_label: &str, log_y: bool) -> LineChart {
    LineChart {
        title: format!("panel {y_label}"),
        x_label: "RL step".into(),
        y_label: y_label.into(),
        series: vec![Series {
            name: "grpo".into(),
            points: vec![(0.0, 1e-3), (1.0, 4e-3), (2.0, 2e-2)],
            ..Series::default()
        }],
        faint: vec![],
        log_y,
        markers: vec![],
        refs: vec![],
        scatter: false,
        categorical_x: false,
    }
}

/// The SVG file of `chart`, as `save` writes it.
fn svg_of(chart: &impl Chart) -> String {
    let dir = std::env::temp_dir().join(format!(
        "driftlab-svg-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    chart.save(&dir, "fig").unwrap();
    let svg = std::fs::read_to_string(dir.join("fig.svg")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    svg
}

/// Every panel of every multi-panel figure kind reaches the SVG file (the SVG backend
/// writes on the first `present()`, so a panel that presented alone cut the rest off).
#[test]
fn every_panel_of_a_multi_panel_figure_is_in_its_svg() {
    let stack = Stack {
        title: "chain".into(),
        panels: vec![
            line("drift A", true),
            line("ratio B", false),
            line("reward C", false),
        ],
    };
    let svg = svg_of(&stack);
    for label in [
        "drift A (log scale)",
        "ratio B",
        "reward C",
        "panel reward C",
    ] {
        assert!(svg.contains(label), "{label} missing from the stacked SVG");
    }
    let heat = Heatmap {
        title: "heat".into(),
        x_label: "x axis".into(),
        y_label: "y axis".into(),
        log: false,
        panels: (0..4)
            .map(|i| HeatPanel {
                title: format!("arm {i}"),
                rows: 2,
                cols: vec![0.0, 1.0],
                values: vec![vec![0.1, 0.2], vec![0.3, 0.4]],
            })
            .collect(),
    };
    let svg = svg_of(&heat);
    for i in 0..4 {
        assert!(
            svg.contains(&format!("arm {i}")),
            "heatmap panel {i} missing"
        );
    }
    let cell = MapCell {
        mean: 0.1,
        lo: 0.0,
        hi: 0.2,
        control: false,
        n: 4,
    };
    let map = StabilityMap {
        title: "map".into(),
        row_label: "rows".into(),
        rows: vec!["r0".into(), "r1".into()],
        cols: vec!["c0".into(), "c1".into()],
        margin: Some(0.05),
        panels: (0..3)
            .map(|i| MapPanel {
                title: format!("map arm {i}"),
                cells: vec![vec![cell; 2]; 2],
            })
            .collect(),
    };
    let svg = svg_of(&map);
    for i in 0..3 {
        assert!(
            svg.contains(&format!("map arm {i}")),
            "map panel {i} missing"
        );
    }
}

/// Log-axis ticks sit at round values and are labelled with them: the label read back
/// equals 10^tick, and no tick falls between its neighbours' round values.
#[test]
fn log_ticks_sit_at_round_values_labelled_truly() {
    for (l0, l1) in [
        (-3.0, -2.0),
        (-2.9, -2.1),
        (-6.0, 0.0),
        (-12.0, 3.0),
        (-2.61, -2.55),
    ] {
        let ticks = log_ticks(l0, l1, 10);
        assert!(ticks.len() >= 2, "{l0}..{l1}: {ticks:?}");
        assert!(ticks.len() <= 10, "{l0}..{l1}: {ticks:?}");
        for &t in &ticks {
            assert!(t >= l0 - 1e-9 && t <= l1 + 1e-9, "{t} outside {l0}..{l1}");
            let label = log_label(t);
            let back: f64 = label.parse().unwrap();
            let truth = 10f64.powf(t);
            assert!(
                ((back - truth) / truth).abs() < 1e-9,
                "tick {t} labelled {label}, is {truth}"
            );
            // Round: at most three significant digits (a narrow range falls back to a
            // linear axis's round steps, e.g. 2.55e-3 between 2.45e-3 and 2.82e-3).
            let mant = label.split('e').next().unwrap().replace(['.', '-'], "");
            assert!(
                mant.trim_end_matches('0').len() <= 3,
                "{label} is not a round value"
            );
        }
    }
    // The case the review found: 1.58e-3 was labelled 2e-3.
    let t = log_ticks(-3.0, -2.0, 10);
    assert_eq!(
        t.iter().map(|&v| log_label(v)).collect::<Vec<_>>(),
        ["1e-3", "2e-3", "5e-3", "0.01"]
    );
    // A short panel over 0.002-0.5 (c7_confirm's clipping panel): decades labelled, not
    // linear steps crowding 0.1-0.5 with nothing below.
    let t = log_ticks(0.002f64.log10(), 0.5f64.log10(), 5);
    assert_eq!(
        t.iter().map(|&v| log_label(v)).collect::<Vec<_>>(),
        ["3e-3", "0.01", "0.03", "0.1", "0.3"]
    );
    let t = log_ticks(-1.0, 2.0, 10);
    assert_eq!(
        t.iter().map(|&v| log_label(v)).collect::<Vec<_>>(),
        ["0.1", "0.2", "0.5", "1", "2", "5", "10", "20", "50", "100"]
    );
}

/// The leaderboard's three panels, every arm's label, and "not kept" where a run's frames
/// have no timings, all reach the SVG file.
#[test]
fn the_leaderboard_draws_all_three_panels_and_every_arm() {
    let row = |label: &str, effect: Option<(f64, (f64, f64))>, secs: Option<f64>| LeaderRow {
        label: label.into(),
        effect,
        tone: 2,
        collapse: 0.25,
        explosion: 0.5,
        secs,
    };
    let board = Leaderboard {
        title: "board".into(),
        x_label: "arm − grpo".into(),
        margin: 0.05,
        cost_from: "cost in this run",
        rows: vec![
            row("grpo_r2", Some((0.04, (0.01, 0.07))), Some(0.2)),
            row("gspo", Some((-0.01, (-0.05, 0.03))), None),
            row("grpo", None, Some(0.19)),
        ],
        tones: vec![
            "holds".into(),
            "does not hold".into(),
            "inconclusive".into(),
        ],
        footnote: Some("† grpo_pr2: a footnote".into()),
    };
    let svg = svg_of(&board);
    for text in [
        "effect vs the reference",
        "cells that broke",
        "cost in this run",
        "grpo_r2",
        "gspo",
        "reference",
        "not kept",
        "0.20",
        "inconclusive",
        "a footnote",
    ] {
        assert!(
            svg.contains(text),
            "{text} missing from the leaderboard SVG"
        );
    }
}

#[test]
fn every_named_method_gets_its_own_colour_and_tab10_stays_first() {
    let arms = super::METHODS;
    let c = super::series_colors(arms.iter().map(|a| (*a, None)));
    let distinct: std::collections::BTreeSet<_> = c.iter().collect();
    assert_eq!(distinct.len(), arms.len(), "{c:?}");
    // A figure of ten series or fewer keeps the colours it had with a ten-colour palette.
    let ten = super::series_colors((0..10).map(|i| ("x", Some(i))));
    assert_eq!(ten, (0..10).collect::<Vec<_>>());
}

/// A figure that cannot be written fails with an error naming its file and leaves no partial
/// file behind (a full disk used to leave partial PNGs and a Debug dump without a name).
#[test]
fn a_figure_that_cannot_be_written_names_its_file_and_leaves_nothing() {
    let dir = std::env::temp_dir().join(format!(
        "driftlab-fig-fail-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // The SVG's temporary path is taken (by a folder), so that write fails after the PNG's.
    std::fs::create_dir_all(dir.join(".fig.partial.svg")).unwrap();
    let e = line("x", false).save(&dir, "fig").unwrap_err();
    assert!(format!("{e:#}").contains("fig.svg"), "{e:#}");
    assert!(!dir.join("fig.svg").exists());
    std::fs::remove_dir_all(dir.join(".fig.partial.svg")).unwrap();
    let left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(left, ["fig.png"], "only the figure written whole is left");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A numerical zero on a log axis (a degenerate variance of ~1e-36) is left out and counted in
/// the y label, so the axis spans the data's decades rather than thirty empty ones.
#[test]
fn log_axes_leave_numerical_zeros_out_and_say_so() {
    let mut chart = line("variance", true);
    chart.series[0].points.push((3.0, 1e-36));
    chart.series[0].points.push((4.0, 0.0));
    let kept = chart.without_log_zeros().expect("two zeros to leave out");
    assert_eq!(kept.series[0].points.len(), 3);
    assert_eq!(kept.y_label, "variance; 2 values at 0 not drawn");
    let ((_, _), (y0, _)) = kept.ranges();
    assert!(y0 > -4.0, "the axis starts at {y0} (log10)");
    let svg = svg_of(&chart);
    assert!(
        svg.contains("2 values at 0 not drawn"),
        "the figure says so"
    );
    // Nothing to leave out: the chart is drawn as it is.
    assert!(line("variance", true).without_log_zeros().is_none());
    assert!(line("reward", false).without_log_zeros().is_none());
}

/// The legend goes where no data is: a corner the lines do not cross is found (a segment counts
/// between its points, not only at them), and a chart whose every corner holds data says so, so
/// that its axis gets headroom for the legend.
#[test]
fn the_legend_corner_avoids_lines_between_their_points() {
    let mut chart = line("y", false);
    // One line from the lower left to the upper right: its points sit in two corners only,
    // and it crosses the middle; the upper left and lower right stay empty.
    chart.series[0].points = vec![(0.0, 0.0), (10.0, 10.0)];
    let (corner, covered) = chart.legend_corner((0.0, 10.0), (0.0, 10.0));
    assert!(!covered);
    assert!(
        matches!(corner, SeriesLabelPosition::UpperLeft),
        "{corner:?}"
    );
    // A short line whose two ends lie outside every corner crosses the upper left between
    // them: the legend goes to the lower right instead.
    chart.series.push(Series {
        name: "b".into(),
        points: vec![(0.0, 5.0), (5.0, 10.0)],
        ..Series::default()
    });
    let (corner, covered) = chart.legend_corner((0.0, 10.0), (0.0, 10.0));
    assert!(!covered);
    assert!(
        matches!(corner, SeriesLabelPosition::LowerRight),
        "{corner:?}"
    );
    // A third line through the lower right leaves no corner free.
    chart.series.push(Series {
        name: "c".into(),
        points: vec![(10.0, 0.0)],
        ..Series::default()
    });
    assert!(chart.legend_corner((0.0, 10.0), (0.0, 10.0)).1);
}
