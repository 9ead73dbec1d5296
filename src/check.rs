//! `driftlab check`: run the small deterministic `check` experiment and compare its stability
//! metrics with the committed baseline `results/baselines/check.json` within stated tolerances.

use crate::experiment::{ExperimentSpec, RunOptions, run_experiment};
use crate::report::metric::METRICS;
use crate::report::{ArmSummary, load_frames, summarize};
use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// A metric passes when `|new − base| ≤ abs + rel·|base|`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
}

/// The metrics the check guards, with their tolerances. The run is deterministic on one machine
/// kind, so the tolerances only absorb float differences between CPUs and library builds.
pub fn tolerances() -> BTreeMap<String, Tolerance> {
    let t = |(abs, rel): (f64, f64)| Tolerance { abs, rel };
    let mut out: BTreeMap<String, Tolerance> = METRICS
        .iter()
        .filter_map(|m| m.check.map(|c| (m.name.to_string(), t(c))))
        .collect();
    for (k, c) in [
        ("final_reward", (0.02, 0.0)),
        ("collapse_cells", (0.0, 0.0)),
        ("warning_cells", (0.0, 0.0)),
    ] {
        out.insert(k.to_string(), t(c));
    }
    out
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub experiment: String,
    /// The device kind the baseline was measured on (absent: flex, the baselines written before
    /// devices had their own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    pub tolerances: BTreeMap<String, Tolerance>,
    /// arm → metric → value (NaN-free; a metric that does not apply is absent).
    pub arms: BTreeMap<String, BTreeMap<String, f64>>,
}

fn metrics(a: &ArmSummary) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: f64| {
        if v.is_finite() {
            m.insert(k.to_string(), v);
        }
    };
    put("final_reward", a.final_reward.mean);
    for m in METRICS.iter().filter(|m| m.check.is_some()) {
        put(m.name, a.m(m.name).mean);
    }
    put("collapse_cells", a.collapsed_cells as f64);
    put("warning_cells", a.warned_cells as f64);
    m
}

/// One compared value.
#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub arm: String,
    pub metric: String,
    pub baseline: Option<f64>,
    pub current: Option<f64>,
    pub allowed: f64,
    pub ok: bool,
}

/// Compare current per-arm metrics with a baseline; every baseline value must be matched.
pub fn compare(base: &Baseline, current: &BTreeMap<String, BTreeMap<String, f64>>) -> Vec<Row> {
    let mut rows = Vec::new();
    let arms: std::collections::BTreeSet<&String> =
        base.arms.keys().chain(current.keys()).collect();
    for arm in arms {
        let (b, c) = (base.arms.get(arm), current.get(arm));
        let keys: std::collections::BTreeSet<&String> = b
            .into_iter()
            .flat_map(|m| m.keys())
            .chain(c.into_iter().flat_map(|m| m.keys()))
            .collect();
        for k in keys {
            let bv = b.and_then(|m| m.get(k)).copied();
            let cv = c.and_then(|m| m.get(k)).copied();
            let tol = base
                .tolerances
                .get(k)
                .copied()
                .unwrap_or(Tolerance { abs: 0.0, rel: 0.0 });
            let allowed = tol.abs + tol.rel * bv.unwrap_or(0.0).abs();
            let ok = matches!((bv, cv), (Some(x), Some(y)) if (x - y).abs() <= allowed);
            rows.push(Row {
                arm: arm.clone(),
                metric: k.clone(),
                baseline: bv,
                current: cv,
                allowed,
                ok,
            });
        }
    }
    rows
}

/// A readable table of the rows that failed (or all rows with `all`).
pub fn table(rows: &[Row], all: bool) -> String {
    let f = |v: Option<f64>| v.map_or("missing".to_string(), |x| format!("{x:.6e}"));
    let mut s = format!(
        "{:<10} {:<26} {:>14} {:>14} {:>12} {:>10}  status\n",
        "arm", "metric", "baseline", "current", "moved", "allowed"
    );
    for r in rows.iter().filter(|r| all || !r.ok) {
        let moved = match (r.baseline, r.current) {
            (Some(a), Some(b)) => format!("{:+.2e}", b - a),
            _ => "–".into(),
        };
        let _ = writeln!(
            s,
            "{:<10} {:<26} {:>14} {:>14} {:>12} {:>10.1e}  {}",
            r.arm,
            r.metric,
            f(r.baseline),
            f(r.current),
            moved,
            r.allowed,
            if r.ok { "ok" } else { "REGRESSED" }
        );
    }
    s
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// A JUnit XML report of the compared values: one test case per arm and metric (class
/// `check.<arm>`, name `<metric>`), a failure for each value beyond its tolerance with the
/// measured and baseline values, so a CI system shows which stability metric moved.
pub fn junit_xml(rows: &[Row], seconds: f64) -> String {
    let f = |v: Option<f64>| v.map_or("missing".to_string(), |x| format!("{x:.6e}"));
    let failures = rows.iter().filter(|r| !r.ok).count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"driftlab check\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" time=\"{seconds:.3}\">",
        rows.len()
    );
    let _ = writeln!(
        s,
        "  <testsuite name=\"stability metrics\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"0\" time=\"{seconds:.3}\">",
        rows.len()
    );
    for r in rows {
        let head = format!(
            "    <testcase classname=\"check.{}\" name=\"{}\" time=\"0\"",
            xml_escape(&r.arm),
            xml_escape(&r.metric)
        );
        // The compared values and the tolerance, for CI systems that show properties.
        let props = format!(
            "      <properties>\n        <property name=\"measured\" value=\"{}\"/>\n        <property name=\"baseline\" value=\"{}\"/>\n        <property name=\"allowed\" value=\"{:.6e}\"/>\n      </properties>\n",
            f(r.current),
            f(r.baseline),
            r.allowed
        );
        if r.ok {
            let _ = write!(s, "{head}>\n{props}    </testcase>\n");
            continue;
        }
        let moved = match (r.baseline, r.current) {
            (Some(a), Some(b)) => format!("{:+.3e}", b - a),
            _ => "–".into(),
        };
        let msg = format!(
            "{} of {}: measured {}, baseline {}, moved {moved}, allowed ±{:.3e}",
            r.metric,
            r.arm,
            f(r.current),
            f(r.baseline),
            r.allowed
        );
        let _ = writeln!(
            s,
            "{head}>\n{props}      <failure message=\"{m}\" type=\"regression\">{m}</failure>\n    </testcase>",
            m = xml_escape(&msg)
        );
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

/// Per arm, per metric: the value the check compares.
pub type ArmMetrics = BTreeMap<String, BTreeMap<String, f64>>;

/// Run the check experiment into `out` and return per-arm metrics and summaries.
pub fn measure(spec: &ExperimentSpec, opts: &RunOptions) -> Result<(ArmMetrics, Vec<ArmSummary>)> {
    run_experiment(spec, opts)?;
    let sums = summarize(&load_frames(&opts.out)?)?;
    Ok((
        sums.iter().map(|a| (a.arm.clone(), metrics(a))).collect(),
        sums,
    ))
}

/// The baseline at `path`, which must have been measured on `device`.
fn read_baseline(path: &Path, device: &str) -> Result<Baseline> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading baseline {} (create it with `driftlab check --device {device} --update`)",
            path.display()
        )
    })?;
    let base: Baseline = serde_json::from_str(&text)
        .with_context(|| format!("parsing baseline {}", path.display()))?;
    let measured_on = base.device.as_deref().unwrap_or("flex");
    anyhow::ensure!(
        measured_on == device,
        "baseline {} was measured on device '{measured_on}', this run is on '{device}': each device is compared with its own baseline (`driftlab check --device {device} --update` writes one)",
        path.display()
    );
    Ok(base)
}

/// The current values compared with the baseline (None after rewriting it with `update`).
fn measured_rows(
    spec: &ExperimentSpec,
    opts: &RunOptions,
    baseline: &Path,
    update: bool,
) -> Result<Option<Vec<Row>>> {
    // Read first: a missing or foreign baseline fails before the run, not after it.
    let base = if update {
        None
    } else {
        Some(read_baseline(baseline, &opts.device_name)?)
    };
    let (current, _) = measure(spec, opts)?;
    let Some(base) = base else {
        let b = Baseline {
            experiment: spec.name.clone(),
            device: Some(opts.device_name.clone()).filter(|d| d != "flex"),
            tolerances: tolerances(),
            arms: current,
        };
        if let Some(dir) = baseline.parent() {
            std::fs::create_dir_all(dir)?;
        }
        crate::util::io::write_json(baseline, &b)?;
        return Ok(None);
    };
    Ok(Some(compare(&base, &current)))
}

/// A JUnit report of a check that could not compare anything (the run or the baseline
/// failed): one test case in error.
fn junit_error(e: &anyhow::Error, seconds: f64) -> String {
    let m = xml_escape(&format!("{e:#}"));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"driftlab check\" tests=\"1\" failures=\"0\" errors=\"1\" time=\"{seconds:.3}\">\n  <testsuite name=\"stability metrics\" tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"{seconds:.3}\">\n    <testcase classname=\"check\" name=\"run and baseline\" time=\"{seconds:.3}\">\n      <error message=\"{m}\" type=\"error\">{m}</error>\n    </testcase>\n  </testsuite>\n</testsuites>\n"
    )
}

/// Compare with (or, with `update`, rewrite) the baseline file, writing a JUnit report to
/// `junit` when given (also when the run or the baseline fails). Errors when anything
/// regressed.
pub fn check(
    spec: &ExperimentSpec,
    opts: &RunOptions,
    baseline: &Path,
    update: bool,
    junit: Option<&Path>,
) -> Result<String> {
    let started = std::time::Instant::now();
    let write = |xml: String| -> Result<()> {
        match junit {
            Some(path) => crate::util::io::write_atomic(path, xml.as_bytes())
                .with_context(|| format!("writing the JUnit report {}", path.display())),
            None => Ok(()),
        }
    };
    let rows = match measured_rows(spec, opts, baseline, update) {
        Ok(Some(rows)) => rows,
        Ok(None) => return Ok(format!("baseline rewritten: {}", baseline.display())),
        Err(e) => {
            write(junit_error(&e, started.elapsed().as_secs_f64()))?;
            return Err(e);
        }
    };
    write(junit_xml(&rows, started.elapsed().as_secs_f64()))?;
    if rows.iter().any(|r| !r.ok) {
        bail!(
            "stability metrics moved beyond their tolerances:\n{}",
            table(&rows, false)
        );
    }
    Ok(format!(
        "check passed: {} values within tolerance\n{}",
        rows.len(),
        table(&rows, true)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_reports_parse_and_mark_failures_and_errors() {
        let row = |metric: &str, base: f64, cur: Option<f64>, ok| Row {
            arm: "a<&>".into(),
            metric: metric.into(),
            baseline: Some(base),
            current: cur,
            allowed: 0.1,
            ok,
        };
        let rows = vec![
            row("final_reward", 0.5, Some(0.52), true),
            row("drift_expert_frac", 0.01, Some(0.5), false),
            row("clip_frac_tok", 0.2, None, false),
        ];
        let xml = junit_xml(&rows, 1.5);
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let suite = doc
            .descendants()
            .find(|n| n.has_tag_name("testsuite"))
            .unwrap();
        assert_eq!(suite.attribute("tests"), Some("3"));
        assert_eq!(suite.attribute("failures"), Some("2"));
        let cases: Vec<_> = suite
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .collect();
        assert_eq!(cases[0].attribute("classname"), Some("check.a<&>"));
        let failure = |c: &roxmltree::Node| {
            c.children()
                .find(|n| n.has_tag_name("failure"))
                .and_then(|n| n.attribute("message").map(str::to_string))
        };
        assert_eq!(failure(&cases[0]), None);
        let m = failure(&cases[1]).unwrap();
        assert!(
            m.contains("measured 5.000000e-1") && m.contains("baseline 1.000000e-2"),
            "{m}"
        );
        assert!(failure(&cases[2]).unwrap().contains("measured missing"));
        let err = junit_error(&anyhow::anyhow!("no baseline <here>"), 0.0);
        let doc = roxmltree::Document::parse(&err).unwrap();
        let e = doc.descendants().find(|n| n.has_tag_name("error")).unwrap();
        assert_eq!(e.attribute("message"), Some("no baseline <here>"));
    }
}
