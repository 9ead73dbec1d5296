//! The folder of experiment specs (`experiments/` by default): every spec in it, and one by
//! name.

use super::spec::ExperimentSpec;
use anyhow::{Context, Result, bail};
use std::path::Path;

/// Every `*.toml` in `dir` with its parsed spec (or the parse error).
pub fn list_specs(dir: &Path) -> Result<Vec<(String, Result<ExperimentSpec>)>> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("reading experiment folder {}", dir.display()))?;
    for e in entries {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "toml") {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default();
            out.push((name, ExperimentSpec::load(&path)));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The spec `experiments/<name>.toml`, or the spec file `name` itself when it names a file
/// (ends in `.toml` or holds a `/`); an unknown name lists the known ones.
pub fn find_spec(dir: &Path, name: &str) -> Result<ExperimentSpec> {
    if name.ends_with(".toml") || name.contains(std::path::MAIN_SEPARATOR) {
        let path = Path::new(name);
        if !path.is_file() {
            bail!("no spec file {name}");
        }
        return ExperimentSpec::load(path);
    }
    let path = dir.join(format!("{name}.toml"));
    if !path.exists() {
        let names: Vec<String> = list_specs(dir)?.into_iter().map(|(n, _)| n).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        bail!(
            "{} (no {})",
            crate::util::names::unknown("experiment", name, &refs),
            path.display()
        );
    }
    ExperimentSpec::load(&path)
}
