//! The cold-start cache: a checkpoint per hash of everything that determines it, with its
//! metadata and the build that trained it.

use crate::model::{Model, ModelConfig, Weights};
use crate::task::TaskConfig;
use crate::util::hash::fnv1a64;
use crate::util::io::{write_atomic, write_json};
use anyhow::Result;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use super::settings::{ColdStart, ColdStartConfig, EvalAccuracy};

/// Bump when the training procedure or its numerics change, so stale caches are not reused.
/// 2: the CPU backend's SwiGLU sigmoid and attention exp are computed on the host.
/// 3: RoPE is applied from the QKV projection (`Rope::extend_qkv`).
const COLDSTART_VERSION: u32 = 3;

/// Cache key: a stable hash of everything that determines the checkpoint.
pub fn cache_key(
    model: &ModelConfig,
    task: &TaskConfig,
    cs: &ColdStartConfig,
    seed: u64,
) -> String {
    // Where it trains is in the device tag, not here (flex's checkpoint named or not is one).
    let cs = ColdStartConfig {
        device: None,
        ..cs.clone()
    };
    let json = serde_json::json!({ "v": COLDSTART_VERSION, "model": model, "task": task, "coldstart": cs, "seed": seed });
    format!("{:016x}", fnv1a64(json.to_string().as_bytes()))
}

/// Where the cached checkpoint for this key lives.
pub fn cache_path(cache_dir: &Path, key: &str) -> PathBuf {
    cache_dir.join(format!("coldstart-{key}.bin"))
}

/// The key of the checkpoint trained on `device`: a cold start trained on another device has
/// other bits (another summation order), so a run on wgpu or cuda neither loads flex's
/// checkpoint nor leaves its own where a flex run would load it. Flex keeps the bare key, so
/// every cache entry written before devices were told apart keeps its name.
pub fn device_key(key: &str, device: &Device) -> String {
    if crate::util::tensors::is_host(device) {
        key.to_string()
    } else {
        let what = format!("{device:?}");
        format!("{key}-{:08x}", fnv1a64(what.as_bytes()) as u32)
    }
}

#[derive(Serialize, Deserialize)]
struct CacheMeta {
    steps: usize,
    accuracy: EvalAccuracy,
    seconds: f64,
    /// The build that trained it (absent in entries written before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    build: Option<String>,
}

/// The cached cold start for these settings, if one is cached; never trains (a benchmark of a
/// large preset uses it where it exists and a random init where not).
pub fn cached(
    model_cfg: &ModelConfig,
    task: &TaskConfig,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    cache_dir: &Path,
) -> Option<ColdStart> {
    let key = device_key(&cache_key(model_cfg, task, cs, seed), device);
    load_cached(&cache_path(cache_dir, &key), model_cfg, device)
}

/// The cached cold start at `path`, if there is a usable one.
pub(super) fn load_cached(
    path: &Path,
    model_cfg: &ModelConfig,
    device: &Device,
) -> Option<ColdStart> {
    if !path.exists() {
        return None;
    }
    let loaded = std::fs::read(path)
        .map_err(anyhow::Error::from)
        .and_then(|b| Weights::from_bytes(model_cfg, &b, device))
        .and_then(|w| {
            let meta: CacheMeta =
                serde_json::from_slice(&std::fs::read(path.with_extension("json"))?)?;
            Ok((w, meta))
        });
    match loaded {
        Ok((w, meta)) => Some(ColdStart {
            model: Model::new(model_cfg.clone(), w, device),
            steps: meta.steps,
            accuracy: meta.accuracy,
            losses: Vec::new(),
            from_cache: true,
            seconds: meta.seconds,
            build: meta.build,
        }),
        Err(e) => {
            eprintln!(
                "warning: cached cold start {} is unusable ({e:#}); rebuilding it",
                path.display()
            );
            None
        }
    }
}

/// Write `cs` to the cache at `path`: its metadata first, the weights last, so a reader that
/// sees the weights sees their metadata.
pub(super) fn save(path: &Path, cs: &ColdStart) -> Result<()> {
    let meta = CacheMeta {
        steps: cs.steps,
        accuracy: cs.accuracy,
        seconds: cs.seconds,
        build: cs.build.clone(),
    };
    write_json(&path.with_extension("json"), &meta)?;
    write_atomic(path, &cs.model.weights.to_bytes())
}

#[cfg(test)]
mod key_tests {
    use super::*;
    use crate::model::ModelConfig;
    use crate::task::TaskConfig;

    /// A draw is part of the cache key; without one the key is what it was before draws
    /// existed (the field is not serialised), so existing caches stay valid.
    #[test]
    fn a_last_bit_draw_has_its_own_cache_key() {
        let model = ModelConfig::preset(crate::model::Preset::Tiny, 16).unwrap();
        let task = TaskConfig::default();
        let cs = ColdStartConfig::default();
        let json = serde_json::to_string(&cs).unwrap();
        assert!(!json.contains("ulp_jitter"), "{json}");
        let drawn = ColdStartConfig {
            ulp_jitter: Some(1),
            ..cs.clone()
        };
        assert_ne!(
            cache_key(&model, &task, &cs, 0),
            cache_key(&model, &task, &drawn, 0)
        );
    }
}

#[cfg(test)]
mod cache_meta_tests {
    use super::CacheMeta;

    /// A cache entry written before builds were recorded still reads (its build unknown); a new
    /// one records the build.
    #[test]
    fn old_cache_entries_read_with_an_unknown_build() {
        let old = r#"{"steps": 300, "accuracy": {"sampled": 0.4, "greedy": 0.5}, "seconds": 1.0}"#;
        let m: CacheMeta = serde_json::from_str(old).unwrap();
        assert_eq!((m.steps, m.build), (300, None));
        let new = r#"{"steps": 1, "accuracy": {"sampled": 0.4, "greedy": 0.5}, "seconds": 1.0, "build": "abc"}"#;
        let m: CacheMeta = serde_json::from_str(new).unwrap();
        assert_eq!(m.build.as_deref(), Some("abc"));
    }
}
