//! Verifiable synthetic tasks (`sort`, `reverse`, `add`), their rewards and fixed eval sets.

pub mod tokenizer;

use crate::util::hash::derive_seed;
use anyhow::{Result, bail};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
pub use tokenizer::{EOS, PAD, Tokenizer};

crate::named_enum! {
    /// A verifiable task.
    pub enum TaskKind("task") {
        /// `S<digits>=` → the digits in ascending order.
        Sort = "sort",
        /// `R<digits>=` → the digits reversed.
        Reverse = "reverse",
        /// `A<a>+<b>=` → `a + b`, written least-significant digit first by default
        /// (`add_lsb_first`), which makes the carry computable left to right.
        Add = "add",
    }
}

/// Task settings. Lengths are digit counts (of the list, or of each addend).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TaskConfig {
    pub kind: TaskKind,
    pub min_len: usize,
    pub max_len: usize,
    /// Reward the fraction of correct positions when the length is right (else exact match only).
    pub partial_credit: bool,
    /// Size of the fixed held-out eval set.
    pub eval_size: usize,
    /// For `add`: answer least-significant digit first.
    pub add_lsb_first: bool,
}

impl Default for TaskConfig {
    fn default() -> Self {
        TaskConfig {
            kind: TaskKind::Sort,
            min_len: 4,
            max_len: 16,
            partial_credit: false,
            eval_size: 256,
            add_lsb_first: true,
        }
    }
}

impl TaskConfig {
    /// Reject lengths and sizes the generator cannot serve, naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.min_len == 0 || self.min_len > self.max_len {
            bail!(
                "task lengths must satisfy 1 <= min_len <= max_len (got min_len {}, max_len {})",
                self.min_len,
                self.max_len
            );
        }
        if self.max_len > 128 {
            bail!("task.max_len = {} exceeds 128", self.max_len);
        }
        if self.eval_size == 0 {
            bail!("task.eval_size must be at least 1");
        }
        Ok(())
    }

    /// Longest answer in tokens, `<eos>` included.
    pub fn max_answer_tokens(&self) -> usize {
        match self.kind {
            TaskKind::Sort | TaskKind::Reverse => self.max_len + 1,
            TaskKind::Add => self.max_len + 2,
        }
    }

    /// Longest prompt in tokens.
    pub fn max_prompt_tokens(&self) -> usize {
        match self.kind {
            TaskKind::Sort | TaskKind::Reverse => self.max_len + 2,
            TaskKind::Add => 2 * self.max_len + 3,
        }
    }

    /// Longest sequence a model must hold for this task: the longest prompt, then the longest
    /// answer with its `<eos>` (what the cold start trains on and a rollout generates).
    pub fn max_seq_tokens(&self) -> usize {
        self.max_prompt_tokens() + self.max_answer_tokens()
    }

    /// `Err` unless a model with `max_seq_len` positions holds this task's longest sequence,
    /// naming both keys and the least length that works.
    pub fn check_fits_seq_len(&self, max_seq_len: usize) -> Result<()> {
        let need = self.max_seq_tokens();
        if need > max_seq_len {
            bail!(
                "model.max_seq_len = {max_seq_len} is shorter than the task's longest sequence: \
                 task {} with max_len {} needs {need} tokens (prompt {} + answer with <eos> {}); \
                 set model.max_seq_len to at least {need} or lower task.max_len",
                self.kind,
                self.max_len,
                self.max_prompt_tokens(),
                self.max_answer_tokens()
            );
        }
        Ok(())
    }
}

/// One problem: prompt tokens and the correct answer (without `<eos>`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Problem {
    pub prompt: Vec<u32>,
    pub answer: Vec<u32>,
}

/// A task instance for one seed: a generator of training problems and a fixed eval set that the
/// generator never returns.
#[derive(Clone, Debug)]
pub struct Task {
    pub cfg: TaskConfig,
    pub tok: Tokenizer,
    pub eval: Vec<Problem>,
    eval_prompts: HashSet<Vec<u32>>,
}

impl Task {
    pub fn new(cfg: TaskConfig, seed: u64) -> Result<Self> {
        cfg.validate()?;
        let tok = Tokenizer;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(derive_seed(seed, "eval-set"));
        let mut eval = Vec::with_capacity(cfg.eval_size);
        let mut eval_prompts = HashSet::new();
        // Distinct prompts; give up on distinctness if the space is too small.
        let mut tries = 0;
        while eval.len() < cfg.eval_size {
            let p = generate(&cfg, &tok, &mut rng);
            tries += 1;
            if eval_prompts.insert(p.prompt.clone()) || tries > 20 * cfg.eval_size {
                eval.push(p);
            }
        }
        Ok(Task {
            cfg,
            tok,
            eval,
            eval_prompts,
        })
    }

    /// A training problem that is not in the eval set (when the problem space allows).
    pub fn sample(&self, rng: &mut Xoshiro256PlusPlus) -> Problem {
        for _ in 0..100 {
            let p = generate(&self.cfg, &self.tok, rng);
            if !self.eval_prompts.contains(&p.prompt) {
                return p;
            }
        }
        generate(&self.cfg, &self.tok, rng)
    }

    /// Reward of a sampled response (tokens after the prompt). The answer must end with `<eos>`;
    /// a response with no `<eos>` (truncated) scores 0. Exact match scores 1; otherwise, with
    /// partial credit, the fraction of correct positions when the length is right, else 0.
    pub fn reward(&self, problem: &Problem, response: &[u32]) -> f32 {
        let Some(end) = response.iter().position(|&t| t == EOS) else {
            return 0.0;
        };
        let got = &response[..end];
        if got == problem.answer.as_slice() {
            return 1.0;
        }
        if !self.cfg.partial_credit || got.len() != problem.answer.len() || got.is_empty() {
            return 0.0;
        }
        let right = got
            .iter()
            .zip(&problem.answer)
            .filter(|(a, b)| a == b)
            .count();
        right as f32 / got.len() as f32
    }

    /// Exact-match correctness (reward 1).
    pub fn is_correct(&self, problem: &Problem, response: &[u32]) -> bool {
        response
            .iter()
            .position(|&t| t == EOS)
            .is_some_and(|end| response[..end] == problem.answer[..])
    }
}

fn digits(rng: &mut Xoshiro256PlusPlus, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.random_range(0..10u8)).collect()
}

fn generate(cfg: &TaskConfig, tok: &Tokenizer, rng: &mut Xoshiro256PlusPlus) -> Problem {
    let n = rng.random_range(cfg.min_len..=cfg.max_len);
    let enc = |ds: &[u8]| ds.iter().map(|&d| tok.digit(d)).collect::<Vec<u32>>();
    match cfg.kind {
        TaskKind::Sort | TaskKind::Reverse => {
            let ds = digits(rng, n);
            let marker = if cfg.kind == TaskKind::Sort { "S" } else { "R" };
            let mut prompt = tok.encode(marker);
            prompt.extend(enc(&ds));
            prompt.extend(tok.encode("="));
            let mut ans = ds.clone();
            if cfg.kind == TaskKind::Sort {
                ans.sort_unstable();
            } else {
                ans.reverse();
            }
            Problem {
                prompt,
                answer: enc(&ans),
            }
        }
        TaskKind::Add => {
            // Most significant digit first in the prompt, as people write numbers.
            let a = digits(rng, n);
            let b = digits(rng, n);
            let mut prompt = tok.encode("A");
            prompt.extend(enc(&a));
            prompt.extend(tok.encode("+"));
            prompt.extend(enc(&b));
            prompt.extend(tok.encode("="));
            let mut sum_lsb = Vec::with_capacity(n + 1);
            let mut carry = 0u8;
            for i in (0..n).rev() {
                let s = a[i] + b[i] + carry;
                sum_lsb.push(s % 10);
                carry = s / 10;
            }
            if carry > 0 {
                sum_lsb.push(carry);
            }
            if !cfg.add_lsb_first {
                sum_lsb.reverse();
            }
            Problem {
                prompt,
                answer: enc(&sum_lsb),
            }
        }
    }
}
