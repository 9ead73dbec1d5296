//! Shared helpers for the integration tests.
#![allow(dead_code)]

pub mod grads;

use burn::tensor::Device;
use driftlab::generate::layout;
use driftlab::model::{Model, ModelConfig, SeqBatch};
use driftlab::task::{EOS, Problem, Task, TaskConfig, Tokenizer};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;

pub fn flex() -> Device {
    driftlab::device::DeviceChoice::Flex
        .device()
        .expect("flex device")
}

pub fn tiny_cfg() -> ModelConfig {
    ModelConfig::preset(driftlab::model::Preset::Tiny, Tokenizer.vocab_size()).expect("tiny preset")
}

/// One MoE layer small enough to compute by hand: d 2, one head, 3 experts, top-2, d_ff 2.
pub fn hand_cfg() -> ModelConfig {
    ModelConfig {
        n_layers: 1,
        d_model: 2,
        n_heads: 1,
        n_experts: 3,
        top_k: 2,
        d_ff: 2,
        ..tiny_cfg()
    }
}

pub fn tiny_model(seed: u64) -> Model {
    Model::init(tiny_cfg(), seed, &flex())
}

pub fn sort_task(seed: u64) -> Task {
    Task::new(
        TaskConfig {
            min_len: 3,
            max_len: 8,
            eval_size: 32,
            ..TaskConfig::default()
        },
        seed,
    )
    .expect("task")
}

pub fn problems(task: &Task, n: usize, seed: u64) -> Vec<Problem> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    (0..n).map(|_| task.sample(&mut rng)).collect()
}

/// A padded batch of prompt + answer + <eos> rows.
pub fn batch_of(problems: &[Problem]) -> SeqBatch {
    let prompts: Vec<Vec<u32>> = problems.iter().map(|p| p.prompt.clone()).collect();
    let answers: Vec<Vec<u32>> = problems
        .iter()
        .map(|p| p.answer.iter().copied().chain([EOS]).collect())
        .collect();
    layout(&prompts, &answers).0
}

pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    driftlab::util::tensors::max_abs_diff(a, b)
}

/// A tiny experiment of two seeds (B 4 × G 4, N 2, a 20-step cold start) with these arms; tests
/// change what they need.
pub fn tiny_experiment(
    steps: usize,
    arms: Vec<driftlab::experiment::ArmSpec>,
) -> driftlab::experiment::ExperimentSpec {
    driftlab::experiment::ExperimentSpec {
        name: "tiny_test".into(),
        description: "integration test".into(),
        preset: driftlab::model::Preset::Tiny,
        model: Default::default(),
        task: TaskConfig {
            min_len: 2,
            max_len: 5,
            eval_size: 16,
            ..TaskConfig::default()
        },
        seeds: vec![0, 1],
        steps,
        eval_every: 2,
        flush_every: 1,
        flush_secs: 0.0,
        rl: driftlab::rl::RlConfig {
            batch_prompts: 4,
            group_size: 4,
            minibatches: 2,
            ..driftlab::rl::RlConfig::default()
        },
        coldstart: serde_json::from_value(serde_json::json!({
            "max_steps": 20, "batch_size": 16, "eval_every": 10, "target_accuracy": 2.0
        }))
        .unwrap(),
        collapse: Default::default(),
        arms,
        regimes: vec![],
        claims: None,
        secondary: vec![],
        reversal: false,
        sweep: None,
        quick_seeds: None,
        compute_target: Default::default(),
    }
}

/// Run options for a test: a fresh `driftlab-<tag>-<pid>` output folder under the temporary
/// directory, flex, one job, no progress bars; cold starts cached in `cache_dir`.
pub fn run_options(tag: &str, cache_dir: std::path::PathBuf) -> driftlab::experiment::RunOptions {
    let out = std::env::temp_dir().join(format!("driftlab-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    driftlab::experiment::RunOptions {
        cache_dir,
        out,
        device: flex(),
        device_name: "flex".into(),
        progress: driftlab::util::progress::Progress::Hidden,
        shard: None,
        resume: false,
        jobs: 1,
        stop: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)),
        on_step: None,
    }
}

pub fn tiny_rl(
    alg: driftlab::rl::Algorithm,
    routing: driftlab::rl::RoutingMode,
) -> driftlab::rl::RlConfig {
    driftlab::rl::RlConfig {
        routing,
        batch_prompts: 4,
        group_size: 4,
        minibatches: 2,
        teacher: alg
            .needs_teacher()
            .then(driftlab::rl::TeacherConfig::default),
        algorithm: alg,
        ..driftlab::rl::RlConfig::default()
    }
}

pub fn short_sort() -> Task {
    Task::new(
        TaskConfig {
            min_len: 2,
            max_len: 4,
            eval_size: 64,
            ..TaskConfig::default()
        },
        0,
    )
    .unwrap()
}

/// A tiny model cold-started on short sorts, so rewards vary within groups and every expert
/// receives policy gradient (trained once per test binary).
pub fn warm_tiny() -> Model {
    static WARM: std::sync::OnceLock<Model> = std::sync::OnceLock::new();
    WARM.get_or_init(|| {
        let cs = driftlab::coldstart::ColdStartConfig {
            target_accuracy: 0.3,
            max_steps: 600,
            eval_every: 25,
            ..driftlab::coldstart::ColdStartConfig::default()
        };
        let out = driftlab::coldstart::train(
            &tiny_cfg(),
            &short_sort(),
            &cs,
            0,
            &flex(),
            &driftlab::util::progress::Progress::Hidden,
        )
        .unwrap();
        assert!(
            out.accuracy.sampled >= 0.2,
            "tiny warm start reached {:?}",
            out.accuracy
        );
        out.model
    })
    .clone()
}

pub fn trainer(cfg: driftlab::rl::RlConfig, seed: u64) -> driftlab::rl::Trainer {
    with_teacher_if_set(driftlab::rl::Trainer::new(cfg, warm_tiny(), short_sort(), seed).unwrap())
}

/// `t` with a teacher when its settings name one: a tiny model of its own (random) weights on
/// the trainer's device and configuration (the tests' teachers are not trained).
pub fn with_teacher_if_set(t: driftlab::rl::Trainer) -> driftlab::rl::Trainer {
    if t.cfg.teacher.is_none() {
        return t;
    }
    let teacher = Model::init(t.model.cfg.clone(), 77, &t.model.device());
    t.with_teacher(teacher).unwrap()
}

/// `df` without its wall-clock columns (`t_*`, seconds).
pub fn without_timings(df: polars::prelude::DataFrame) -> polars::prelude::DataFrame {
    let timed: Vec<String> = df
        .get_column_names()
        .iter()
        .filter(|n| n.starts_with("t_"))
        .map(|n| n.to_string())
        .collect();
    df.drop_many(timed)
}

/// A spec file of a tiny experiment (seeds 0 and 1, a 20-step cold start, B 4 × G 4, N 2) for
/// tests that run the binary: `steps` RL steps, eval and flush every `every` (whatever the time
/// since the last flush), then `arms` (`[[arms]]` tables).
pub fn tiny_spec_toml(name: &str, steps: usize, every: usize, arms: &str) -> String {
    format!(
        r#"name = "{name}"
description = "a test of the driftlab binary"
preset = "tiny"
seeds = [0, 1]
steps = {steps}
eval_every = {every}
flush_every = {every}
flush_secs = 0

[task]
kind = "sort"
min_len = 2
max_len = 5
eval_size = 16

[rl]
batch_prompts = 4
group_size = 4
minibatches = 2

[coldstart]
max_steps = 20
batch_size = 16
eval_every = 10
target_accuracy = 2.0

{arms}"#
    )
}

/// The rows of `values` (`[tokens, width]`, row-major) at the real tokens of `valid`, joined:
/// what a comparison reads where a padding position's values may differ (the CPU attention
/// node gives a padding query context 0).
pub fn at_real<T: Copy>(values: &[T], width: usize, valid: &[bool]) -> Vec<T> {
    (values.chunks_exact(width).zip(valid))
        .filter(|(_, ok)| **ok)
        .flat_map(|(row, _)| row.to_vec())
        .collect()
}

/// `driftlab --threads 1 experiment NAME --jobs 1 --specs ROOT/specs --cache-dir ROOT/cache
/// --out OUT EXTRA…` in `root`, with plain progress lines every 0.2 s and stderr into `log`
/// (the spec file `ROOT/specs/NAME.toml` is the caller's).
pub fn experiment_cmd(
    root: &std::path::Path,
    name: &str,
    out: &std::path::Path,
    log: &std::path::Path,
    extra: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_driftlab"));
    c.current_dir(root)
        .args(["--threads", "1", "experiment", name, "--jobs", "1"])
        .arg("--specs")
        .arg(root.join("specs"))
        .arg("--cache-dir")
        .arg(root.join("cache"))
        .arg("--out")
        .arg(out)
        .args(extra)
        .env("DRIFTLAB_PROGRESS_SECS", "0.2")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    c
}

/// Positions `from..to` of every row of `batch` (a decoding step's input).
pub fn columns(
    batch: &driftlab::model::SeqBatch,
    from: usize,
    to: usize,
) -> driftlab::model::SeqBatch {
    fn cut<T: Clone>(v: &[T], b: usize, s: usize, from: usize, to: usize) -> Vec<T> {
        (0..b)
            .flat_map(|r| v[r * s + from..r * s + to].to_vec())
            .collect()
    }
    let (b, s) = (batch.batch, batch.seq);
    driftlab::model::SeqBatch {
        batch: b,
        seq: to - from,
        tokens: cut(&batch.tokens, b, s, from, to),
        valid: cut(&batch.valid, b, s, from, to),
    }
}

/// Which cached keys of every row of `batch` are valid, positions `0..to`, row-major.
pub fn key_valid(batch: &driftlab::model::SeqBatch, to: usize) -> Vec<bool> {
    let s = batch.seq;
    (0..batch.batch)
        .flat_map(|r| batch.valid[r * s..r * s + to].to_vec())
        .collect()
}

/// Gradients for `weights` of `size` times a uniform in [-0.5, 0.5), from a 64-bit LCG at
/// `seed` (advanced), on `device`: the optimizer tests' inputs, the same values on any device.
pub fn lcg_grads(
    weights: &driftlab::model::Weights,
    size: f32,
    seed: &mut u64,
    device: &Device,
) -> Vec<burn::tensor::Tensor<2>> {
    weights
        .tensors()
        .iter()
        .map(|w| {
            let dims = w.dims();
            let vals: Vec<f32> = (0..dims[0] * dims[1])
                .map(|_| {
                    *seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((*seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * size
                })
                .collect();
            driftlab::util::tensors::floats(vals, dims, device)
        })
        .collect()
}

/// The optimizer tests' AdamW: a large lr (3e-2) so every step moves the weights, gradient
/// clipping at 0.5, weight decay 0.1 on matrices and a router learning-rate multiplier 0.25.
pub fn adamw_test_cfg() -> driftlab::optim::AdamWConfig {
    driftlab::optim::AdamWConfig {
        lr: 3e-2,
        weight_decay: 0.1,
        grad_clip: 0.5,
        router_lr_mult: 0.25,
        ..driftlab::optim::AdamWConfig::default()
    }
}

/// One generation of 8 sort prompts (tiny model, seed 7, up to 6 tokens) on `device` with the
/// host sampler and with the default one, each with the transfers it made (meaningful only
/// where one test runs alone: `tests/transfers.rs`).
pub fn host_and_device_samples(
    device: &Device,
) -> (
    (
        driftlab::generate::Generation,
        driftlab::util::tensors::Transfers,
    ),
    (
        driftlab::generate::Generation,
        driftlab::util::tensors::Transfers,
    ),
) {
    use driftlab::generate::{Sampler, Sampling, generate};
    use driftlab::util::tensors::Transfers;
    use rand::SeedableRng;
    let m = tiny_model(7);
    let model = Model::new(
        m.cfg.clone(),
        driftlab::model::Weights::from_bytes(&m.cfg, &m.weights.to_bytes(), device).unwrap(),
        device,
    );
    let task = sort_task(1);
    let prompts: Vec<Vec<u32>> = problems(&task, 8, 11)
        .into_iter()
        .map(|p| p.prompt)
        .collect();
    let run = |sampler| {
        let s = Sampling {
            temperature: 1.0,
            greedy: false,
            max_new: 6,
            logit_noise: 0.0,
            sampler,
        };
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(5);
        let before = Transfers::now();
        let g = generate(&model, &prompts, &s, &mut rng, &mut |_| {
            driftlab::model::ForwardOptions::default()
        });
        (g, Transfers::since(before))
    };
    (run(Sampler::Host), run(Sampler::Auto))
}
