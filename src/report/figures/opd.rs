//! Claim (p)'s figures: the students' greedy eval accuracy with the teacher's marked (each
//! arm's curve against the accuracy it is distilled towards), and the per-token teacher KL of
//! every arm (GRPO's too: it is scored by the same teacher and trained on the reward alone).

use super::series::{band_chart, curves, line, reference};
use crate::report::charts::LineChart;
use crate::report::claims::teacher_eval;
use crate::report::regime::Regime;
use crate::report::stats::mean_ci;
use anyhow::Result;

/// The figures (p) adds to a regime's folder.
pub const OPD_PLOTS: &[&str] = &["opd_accuracy", "teacher_kl"];

/// (p)'s figures, each with its file stem, where the regime has a teacher (none otherwise).
pub(super) fn opd_charts(r: &Regime) -> Result<Vec<(LineChart, &'static str)>> {
    let f = &r.frames;
    let teacher = teacher_eval(&f.steps);
    if teacher.is_empty() {
        return Ok(Vec::new());
    }
    let t = mean_ci(&teacher.values().copied().collect::<Vec<_>>());
    let (series, _) = band_chart(&curves(&f.steps, false, "step", "eval_accuracy")?, false);
    let mut acc = line(
        "Students' greedy eval accuracy, the teacher's dashed (mean over seeds, 95% band)",
        "RL step",
        "greedy eval accuracy",
        series,
        false,
    );
    acc.refs = vec![reference(
        t.mean,
        &format!(
            "teacher {:.3} (mean over {} seeds' teachers)",
            t.mean,
            teacher.len()
        ),
    )];
    if f.steps.column("teacher_kl").is_err() {
        return Ok(vec![(acc, OPD_PLOTS[0])]);
    }
    let (series, _) = band_chart(&curves(&f.steps, false, "step", "teacher_kl")?, true);
    let kl = line(
        "Teacher KL per token, log π_S − log π_T on the student's samples: EMA(0.9), 95% band",
        "RL step",
        "teacher KL per token (nats)",
        series,
        false,
    );
    Ok(vec![(acc, OPD_PLOTS[0]), (kl, OPD_PLOTS[1])])
}
