//! `driftlab._driftlab`: the Python binding of the driftlab library. It only converts: every
//! spec is read, checked and run by the library's own code (the same as the `driftlab` CLI),
//! and errors keep the library's messages, which name the culprit. The Python package
//! (`python/driftlab/__init__.py`) wraps these functions in the documented API.

use driftlab::commands::experiment::{ExperimentArgs, run_with_stop, spec as resolve_spec};
use driftlab::device::DeviceChoice;
use driftlab::experiment::{ExperimentSpec, list_specs};
use pyo3::create_exception;
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

create_exception!(
    _driftlab,
    SpecError,
    pyo3::exceptions::PyValueError,
    "A spec that does not parse or validate; the message names the key, the arm or the regime."
);

/// The library's error, with its chain of causes, as one message.
fn message(e: &anyhow::Error) -> String {
    format!("{e:#}")
}

fn spec_error(e: anyhow::Error) -> PyErr {
    SpecError::new_err(message(&e))
}

/// `[(name, description or the reason it does not parse)]` of the specs in `specs`.
#[pyfunction]
#[pyo3(signature = (specs = "experiments"))]
fn experiments(specs: &str) -> PyResult<Vec<(String, String, bool)>> {
    let found = list_specs(std::path::Path::new(specs)).map_err(spec_error)?;
    Ok(found
        .into_iter()
        .map(|(name, s)| match s {
            Ok(s) => (name, s.description, true),
            Err(e) => (name, message(&e), false),
        })
        .collect())
}

/// The command-line arguments of `driftlab experiment` that a Python call sets.
#[allow(clippy::too_many_arguments)]
fn args(
    name: String,
    specs: String,
    quick: bool,
    seeds: Option<Vec<u64>>,
    steps: Option<usize>,
    regimes: Option<Vec<String>>,
    arms: Option<Vec<String>>,
    out: Option<String>,
    jobs: usize,
    resume: bool,
    cache_dir: String,
) -> ExperimentArgs {
    ExperimentArgs {
        name,
        steps,
        seeds,
        preset: None,
        out: out.map(PathBuf::from),
        quick,
        force: false,
        arms,
        jobs: Some(jobs.max(1)),
        regime: regimes,
        specs: PathBuf::from(specs),
        cache_dir: PathBuf::from(cache_dir),
        ulp_jitter: None,
        shard: None,
        resume,
    }
}

/// The spec `name` (a name in `specs` or a `.toml` path) with the selections applied, as
/// JSON, and its resolved cells as JSON; a `SpecError` names what is wrong.
#[pyfunction]
#[pyo3(signature = (name, specs = "experiments".to_string(), quick = false, seeds = None, steps = None, regimes = None, arms = None))]
fn resolve(
    name: String,
    specs: String,
    quick: bool,
    seeds: Option<Vec<u64>>,
    steps: Option<usize>,
    regimes: Option<Vec<String>>,
    arms: Option<Vec<String>>,
) -> PyResult<(String, String)> {
    let a = args(
        name,
        specs,
        quick,
        seeds,
        steps,
        regimes,
        arms,
        None,
        1,
        false,
        String::new(),
    );
    let spec = resolve_spec(&a).map_err(spec_error)?;
    let cells = spec.resolve("flex").map_err(spec_error)?;
    let err = |e: serde_json::Error| PyRuntimeError::new_err(e.to_string());
    Ok((
        serde_json::to_string(&spec).map_err(err)?,
        serde_json::to_string(&cells).map_err(err)?,
    ))
}

/// A spec given as JSON (a Python dict) written as TOML, read back by the library's own
/// parser, so a dict is checked exactly as a spec file is (unknown keys, keys at the wrong
/// level, impossible sizes).
#[pyfunction]
fn toml_from_json(json: &str) -> PyResult<String> {
    let v: toml::Value = serde_json::from_str(json)
        .map_err(|e| SpecError::new_err(format!("the spec is not a TOML table: {e}")))?;
    let text = toml::to_string(&v)
        .map_err(|e| SpecError::new_err(format!("the spec is not a TOML table: {e}")))?;
    ExperimentSpec::from_toml(&text, "the spec given from Python").map_err(spec_error)?;
    Ok(text)
}

/// Run a spec (as `driftlab experiment`), the GIL released; returns the output folder.
/// Ctrl-C stops after the current step (the frames, `status.json` and what the cells finished
/// are written) and raises `KeyboardInterrupt`; `resume=True` then continues.
#[pyfunction]
#[pyo3(signature = (name, specs = "experiments".to_string(), quick = false, seeds = None, steps = None, regimes = None, arms = None, out = None, jobs = 1, threads = None, resume = false, progress = true, cache_dir = "results/.cache".to_string()))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    name: String,
    specs: String,
    quick: bool,
    seeds: Option<Vec<u64>>,
    steps: Option<usize>,
    regimes: Option<Vec<String>>,
    arms: Option<Vec<String>>,
    out: Option<String>,
    jobs: usize,
    threads: Option<usize>,
    resume: bool,
    progress: bool,
    cache_dir: String,
) -> PyResult<String> {
    let a = args(
        name, specs, quick, seeds, steps, regimes, arms, out, jobs, resume, cache_dir,
    );
    resolve_spec(&a).map_err(spec_error)?;
    // The flex backend's pool is process-wide: set once, by the first run that asks (one
    // thread per cell when several cells run at once, as the CLI does).
    if let Some(n) = threads.or((jobs > 1).then_some(1)) {
        let _ = rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build_global();
    }
    let device = DeviceChoice::Flex
        .device()
        .map_err(|e| PyRuntimeError::new_err(message(&e)))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let progress = match progress {
        true => driftlab::util::progress::Progress::auto(),
        false => driftlab::util::progress::Progress::Hidden,
    };
    let worker = std::thread::spawn(move || {
        run_with_stop(device, "flex".into(), a.jobs(), &a, flag, progress)
    });
    let mut interrupted = None;
    while !worker.is_finished() {
        py.allow_threads(|| std::thread::sleep(Duration::from_millis(100)));
        if interrupted.is_none()
            && let Err(e) = py.check_signals()
        {
            stop.store(true, Ordering::SeqCst);
            interrupted = Some(e);
        }
    }
    let result = worker
        .join()
        .map_err(|_| PyRuntimeError::new_err("the run panicked"))?;
    if let Some(e) = interrupted {
        return Err(if e.is_instance_of::<PyKeyboardInterrupt>(py) {
            PyKeyboardInterrupt::new_err(
                "interrupted: the finished cells are kept; run again with resume=True",
            )
        } else {
            e
        });
    }
    result
        .map(|dir| dir.display().to_string())
        .map_err(|e| PyRuntimeError::new_err(message(&e)))
}

/// Rebuild summary, plots and `report.md` of a results folder from its frames.
#[pyfunction]
fn report(dir: &str) -> PyResult<()> {
    driftlab::report::write_report(std::path::Path::new(dir))
        .map(|_| ())
        .map_err(|e| PyRuntimeError::new_err(message(&e)))
}

/// Every frame's columns and dtypes, as `driftlab schema` prints them (JSON).
#[pyfunction]
fn schema() -> PyResult<String> {
    driftlab::metrics::schema::to_json().map_err(|e| PyRuntimeError::new_err(e.to_string()))
}

#[pymodule]
fn _driftlab(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SpecError", m.py().get_type::<SpecError>())?;
    m.add_function(wrap_pyfunction!(experiments, m)?)?;
    m.add_function(wrap_pyfunction!(resolve, m)?)?;
    m.add_function(wrap_pyfunction!(toml_from_json, m)?)?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(report, m)?)?;
    m.add_function(wrap_pyfunction!(schema, m)?)?;
    Ok(())
}
