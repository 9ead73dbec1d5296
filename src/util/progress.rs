//! Progress of cold starts and cells: bars on a terminal, plain lines at a bounded rate when
//! stderr is a file or a pipe (a Slurm log, CI), so a batch job's log shows what runs, how far
//! it is and when it should end.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where progress goes.
#[derive(Clone)]
pub enum Progress {
    /// Live bars (stderr is a terminal).
    Bars(MultiProgress),
    /// One line per stage start and end, and at most one line per `every` per stage in
    /// between, on stderr.
    Lines { every: Duration },
    /// Nothing (tests, `check`).
    Hidden,
}

/// Seconds between two progress lines of one stage (`DRIFTLAB_PROGRESS_SECS` overrides).
const LINE_EVERY_S: f64 = 30.0;

impl Progress {
    /// A one-off line (in line mode only): a stage that needed no work, such as a cached cold
    /// start.
    pub fn note(&self, msg: &str) {
        if let Progress::Lines { .. } = self {
            line(msg);
        }
    }

    /// Bars when stderr is a terminal, else lines.
    pub fn auto() -> Self {
        if std::io::stderr().is_terminal() {
            Progress::Bars(MultiProgress::new())
        } else {
            let s = std::env::var("DRIFTLAB_PROGRESS_SECS")
                .ok()
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|s| s.is_finite() && *s >= 0.0)
                .unwrap_or(LINE_EVERY_S);
            Progress::Lines {
                every: Duration::from_secs_f64(s),
            }
        }
    }

    /// A tracker of one stage (`label`, e.g. "cold start toy/moe seed 0") of `total` units
    /// (`unit`, e.g. "steps"); bars use `template`.
    pub fn stage(&self, label: String, total: u64, unit: &'static str, template: &str) -> Stage {
        let bar = match self {
            Progress::Bars(mp) => {
                let b = mp.add(ProgressBar::new(total));
                b.set_style(ProgressStyle::with_template(template).expect("valid template"));
                b
            }
            _ => ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden()),
        };
        let lines = match self {
            Progress::Lines { every } => {
                line(&format!("{label}: started ({total} {unit} at most)"));
                Some(Mutex::new(LineState {
                    every: *every,
                    last: Instant::now(),
                    first: None,
                }))
            }
            _ => None,
        };
        Stage(Arc::new(StageInner {
            bar,
            lines,
            label,
            unit,
            total,
            started: Instant::now(),
        }))
    }
}

struct LineState {
    every: Duration,
    last: Instant,
    /// Time and position of the first advance: rates count from there, so time spent before
    /// the first unit (a run's cold starts) does not read as a slow rate.
    first: Option<(Instant, u64)>,
}

struct StageInner {
    bar: ProgressBar,
    lines: Option<Mutex<LineState>>,
    label: String,
    unit: &'static str,
    total: u64,
    started: Instant,
}

/// One stage's progress (cheap to clone).
#[derive(Clone)]
pub struct Stage(Arc<StageInner>);

fn line(msg: &str) {
    // One write per line, so lines of parallel cells never interleave mid-line.
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("[driftlab] {msg}\n").as_bytes());
}

/// `1h02m`, `3m07s` or `12s`.
pub fn duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".into();
    }
    let s = s.round() as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

impl Stage {
    /// A stage that shows nothing.
    pub fn hidden() -> Self {
        Progress::Hidden.stage(String::new(), 0, "", "{pos}")
    }

    pub fn set_prefix(&self, p: String) {
        self.0.bar.set_prefix(p);
    }

    /// Advance by `n`; `msg` (the latest figures) goes on the bar and on the next line.
    pub fn inc(&self, n: u64, msg: Option<String>) {
        let s = &self.0;
        s.bar.inc(n);
        if let Some(m) = &msg {
            s.bar.set_message(m.clone());
        }
        let Some(state) = &s.lines else { return };
        let mut st = state.lock().expect("progress lock");
        let pos = s.bar.position();
        let (t0, p0) = *st.first.get_or_insert((Instant::now(), pos));
        if st.last.elapsed() < st.every {
            return;
        }
        st.last = Instant::now();
        let secs = s.started.elapsed().as_secs_f64();
        let rate = (pos - p0) as f64 / t0.elapsed().as_secs_f64().max(1e-9);
        let eta = if pos > p0 {
            s.total.saturating_sub(pos) as f64 / rate
        } else {
            f64::NAN
        };
        line(&format!(
            "{}: {pos}/{} {}, {rate:.2} {}/s, elapsed {}, ETA {}{}",
            s.label,
            s.total,
            s.unit,
            s.unit,
            duration(secs),
            duration(eta),
            Some(s.bar.message())
                .filter(|m| !m.is_empty())
                .map(|m| format!(", {m}"))
                .unwrap_or_default()
        ));
    }

    /// The stage ended (`how`: "done", "collapsed", …); returns the line it printed, if any.
    pub fn finish(&self, how: &str) -> Option<String> {
        let s = &self.0;
        // Read before finishing: finishing moves the bar to its end.
        let pos = s.bar.position();
        s.bar.finish_and_clear();
        s.lines.as_ref()?;
        let msg = format!(
            "{}: {how} after {pos} {} in {}",
            s.label,
            s.unit,
            duration(s.started.elapsed().as_secs_f64())
        );
        line(&msg);
        Some(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_that_ends_early_says_how_far_it_got() {
        let p = Progress::Lines {
            every: Duration::from_secs(3600),
        };
        let st = p.stage("cold start x".into(), 2000, "steps", "{pos}");
        st.inc(1, None);
        st.inc(2, Some("acc 0.31".into()));
        assert_eq!(
            st.finish("sampled accuracy 0.31").as_deref(),
            Some("cold start x: sampled accuracy 0.31 after 3 steps in 0s")
        );
        assert_eq!(Stage::hidden().finish("done"), None);
    }

    #[test]
    fn durations_read_like_a_clock() {
        assert_eq!(duration(7.4), "7s");
        assert_eq!(duration(187.0), "3m07s");
        assert_eq!(duration(3720.0), "1h02m");
        assert_eq!(duration(f64::INFINITY), "?");
    }
}
