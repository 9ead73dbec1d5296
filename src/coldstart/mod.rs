//! Supervised cold start: next-token training on correct answers until a sampled eval accuracy
//! or a step budget is reached; the checkpoint is cached by a hash of everything that makes it.
//! Its settings are in `settings.rs`, the training in `train.rs`, the cache in `cache.rs`.

mod cache;
mod settings;
mod train;

pub use cache::{cache_key, cache_path, cached, device_key};
pub use settings::{ColdStart, ColdStartConfig, EvalAccuracy};
pub use train::{accuracy, evaluate, sft_loss, train, ulp_step};

use cache::load_cached;
use settings::this_build;
use train::label;

use crate::model::ModelConfig;
use crate::task::Task;
use crate::util::progress::Progress;
use anyhow::{Context, Result};
use burn::tensor::Device;
use std::path::Path;

/// Load the cached cold start for these settings, or train and cache it. A corrupt or partial
/// cache file is rebuilt. Processes that need the same cold start at once (shards of a sweep)
/// train it once: the first takes `<cache file>.lock`, the others wait for the cache file and
/// load it.
pub fn load_or_train(
    model_cfg: &ModelConfig,
    task: &Task,
    cs: &ColdStartConfig,
    seed: u64,
    device: &Device,
    cache_dir: &Path,
    progress: &Progress,
) -> Result<ColdStart> {
    use crate::util::lock::{Attempt, Lock};
    let key = device_key(&cache_key(model_cfg, &task.cfg, cs, seed), device);
    let path = cache_path(cache_dir, &key);
    if let Some(c) = load_cached(&path, model_cfg, device) {
        let by = match (&c.build, this_build()) {
            (Some(b), Some(t)) if *b == t => String::new(),
            (Some(b), _) => format!(", trained by build {b}"),
            (None, _) => ", trained by an unrecorded build".into(),
        };
        progress.note(&format!(
            "{}: loaded from {} (sampled accuracy {:.3}{by})",
            label(model_cfg, seed),
            path.display(),
            c.accuracy.sampled
        ));
        return Ok(c);
    }
    std::fs::create_dir_all(cache_dir)
        .with_context(|| format!("creating cache dir {}", cache_dir.display()))?;
    let lock_path = path.with_extension("lock");
    let mut told = false;
    let _lock = loop {
        match Lock::try_acquire(&lock_path)? {
            Attempt::Acquired(l) => break l,
            Attempt::Held(holder) => {
                if !told {
                    eprintln!(
                        "cold start {key} is being trained by '{holder}'; waiting for {}",
                        path.display()
                    );
                    told = true;
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
        }
    };
    // The holder before us may have finished it.
    if let Some(c) = load_cached(&path, model_cfg, device) {
        return Ok(c);
    }
    let cs_out = train(model_cfg, task, cs, seed, device, progress)?;
    cache::save(&path, &cs_out)?;
    Ok(cs_out)
}
