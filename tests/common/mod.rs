//! Shared helpers for the integration tests.
#![allow(dead_code)]

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
    driftlab::tensors::max_abs_diff(a, b)
}
