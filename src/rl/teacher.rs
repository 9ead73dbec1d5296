//! The teacher of on-policy distillation (OPD): a frozen model the student's samples are scored
//! by. It has its own preset and its own cold start, trained by a declared recipe and cached
//! like every cold start (keyed by its model, the task, its cold-start settings, its seed and
//! the device), so a spec names a teacher by what makes it, never by a file.
//!
//! The default recipe is the student's own cold start without its early stop: the same
//! training, run for `coldstart.max_steps` steps instead of stopping at a sampled accuracy of
//! 0.3, so the teacher solves clearly more of the task than the student starts from (the
//! runner and `learn` print both accuracies). A wider or deeper teacher is `preset = "small"`.
//!
//! The teacher always routes natively: its forwards take no forced routes, no drift offsets
//! and no replay filter, whatever the student's routing mode, and its weights never change.
//! Its log-probs of the sampled tokens (and, for the full-vocabulary losses, its logits) are
//! computed once per rollout batch in the π_old pass ([`super::old`]), with no graph.

use super::algorithm::Algorithm;
use crate::coldstart::ColdStartConfig;
use crate::model::{ModelConfig, Preset};
use anyhow::{Result, ensure};
use serde::{Deserialize, Deserializer, Serialize};

/// `[rl] teacher = { … }`: the teacher's model and the recipe that trains it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TeacherConfig {
    /// The teacher's model size (its vocabulary is the task's tokenizer's, as the student's).
    pub preset: Preset,
    /// The teacher's cold start: the defaults of a cold start, except that it never stops
    /// early (`target_accuracy = 2`) and trains `max_steps = 2000` steps. A key given here
    /// replaces that key of these defaults only (`coldstart = { max_steps = 500 }` still never
    /// stops early).
    #[serde(deserialize_with = "teacher_coldstart")]
    pub coldstart: ColdStartConfig,
    /// The teacher's training seed; absent, the cell's seed (one teacher per seed, so the
    /// teacher's own variation is part of the seeds' spread).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

impl Default for TeacherConfig {
    fn default() -> Self {
        TeacherConfig {
            preset: Preset::Toy,
            coldstart: ColdStartConfig {
                target_accuracy: 2.0,
                max_steps: 2000,
                ..ColdStartConfig::default()
            },
            seed: None,
        }
    }
}

/// The teacher's recipe: the keys given, over the teacher's defaults (not over a student's cold
/// start, whose early stop a teacher must not inherit); an unknown key is refused by name.
fn teacher_coldstart<'de, D: Deserializer<'de>>(d: D) -> Result<ColdStartConfig, D::Error> {
    use serde::de::Error;
    let given = serde_json::Value::deserialize(d)?;
    let serde_json::Value::Object(given) = given else {
        return Err(D::Error::custom("rl.teacher.coldstart must be a table"));
    };
    let mut merged =
        serde_json::to_value(TeacherConfig::default().coldstart).map_err(D::Error::custom)?;
    if let serde_json::Value::Object(m) = &mut merged {
        m.extend(given);
    }
    serde_json::from_value(merged).map_err(D::Error::custom)
}

/// `rl.teacher` against the objective: a distillation objective needs one.
pub fn validate_for(teacher: Option<&TeacherConfig>, algorithm: &Algorithm) -> Result<()> {
    match teacher {
        Some(t) => t.validate(),
        None => {
            ensure!(
                !algorithm.needs_teacher(),
                "algorithm '{}' distils a teacher: give one with [rl] teacher = {{ preset = \
                 \"toy\" }} (its model and cold-start recipe; docs/spec.md)",
                algorithm.name()
            );
            Ok(())
        }
    }
}

impl TeacherConfig {
    /// The teacher's model for a vocabulary of `vocab_size` tokens.
    pub fn model(&self, vocab_size: usize) -> Result<ModelConfig> {
        ModelConfig::preset(self.preset, vocab_size)
    }

    /// The seed the teacher trains with, in a cell of seed `cell_seed`.
    pub fn seed_in(&self, cell_seed: u64) -> u64 {
        self.seed.unwrap_or(cell_seed)
    }

    pub fn validate(&self) -> Result<()> {
        self.coldstart
            .validate()
            .map_err(|e| e.context("rl.teacher.coldstart"))?;
        Ok(())
    }
}

/// Refuse a teacher the token-level losses cannot compare with the student: its vocabulary
/// must be the student's (one logit per token id, the same ids).
pub fn check_vocab(student: &ModelConfig, teacher: &ModelConfig) -> Result<()> {
    ensure!(
        student.vocab_size == teacher.vocab_size,
        "rl.teacher: the teacher's vocabulary has {} tokens and the student's {}; on-policy \
         distillation compares their log-probs token by token, so they must share one tokenizer",
        teacher.vocab_size,
        student.vocab_size
    );
    Ok(())
}
