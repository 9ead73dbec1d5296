//! Acceptance: a cold start on `toy` + `sort` (4–16 digits) lands in the RL-ready accuracy band.

mod common;
use common::flex;
use driftlab::coldstart::{ColdStartConfig, train};
use driftlab::model::ModelConfig;
use driftlab::task::{Task, TaskConfig, Tokenizer};
use driftlab::util::progress::Progress;

#[test]
fn toy_sort_cold_start_reaches_the_band() {
    let cfg = ModelConfig::preset(driftlab::model::Preset::Toy, Tokenizer.vocab_size()).unwrap();
    let task = Task::new(TaskConfig::default(), 0).unwrap();
    let cs = ColdStartConfig::default();
    let out = train(&cfg, &task, &cs, 0, &flex(), &Progress::Hidden).unwrap();
    let acc = out.accuracy.sampled;
    assert!(
        out.steps < cs.max_steps,
        "stopped on accuracy, not on the step budget ({} steps)",
        out.steps
    );
    assert!(
        (0.2..=0.8).contains(&acc),
        "sampled eval accuracy {acc} outside 0.2..=0.8 after {} steps",
        out.steps
    );
    assert!(
        out.accuracy.greedy >= acc * 0.8,
        "greedy decoding is not far below sampling: {:?}",
        out.accuracy
    );
}
