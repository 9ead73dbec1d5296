//! Batched sampling with a KV cache on the non-autodiff device: tokens, per-token log-probs and
//! the routes the generating model used, laid out like the trainer's full-sequence batch.

use crate::model::{ForwardOptions, Model, SeqBatch};
use crate::task::{EOS, PAD};
use rand::RngExt;
use rand::rngs::Xoshiro256PlusPlus;

mod device_pick;
mod route_log;
mod shards;
pub use device_pick::{Sampler, pick_on_device};
use route_log::{OnDevice, RouteLog};
use shards::{Logits, Shards, long_inner};

/// How to pick each next token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Sampling distribution is `softmax(logits / temperature)`; log-probs refer to it.
    pub temperature: f32,
    /// Take the arg-max instead of sampling (log-probs still refer to the tempered distribution).
    pub greedy: bool,
    /// At most this many response tokens (`<eos>` included).
    pub max_new: usize,
    /// Standard deviation of Gaussian noise added to the logits before sampling (a mismatched
    /// rollout engine); 0 = none. Log-probs refer to the noisy distribution actually sampled.
    pub logit_noise: f32,
    /// Where tokens are picked: on the host from every logit, or on the device
    /// ([`device_pick`]); `Auto` picks by the model's device.
    pub sampler: Sampler,
}

/// Result of generating one response per prompt.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Prompt (left-padded to `prompt_width`) then response (right-padded): `[batch, seq]`.
    pub batch: SeqBatch,
    pub prompt_width: usize,
    /// Response tokens per row, `<eos>` included when produced.
    pub responses: Vec<Vec<u32>>,
    /// Log-prob of each response token under the sampling distribution.
    pub logp: Vec<Vec<f32>>,
    /// Per MoE layer, the expert ids that ran, `[batch·seq, k]`;
    /// [`NO_ROUTE`](crate::model::NO_ROUTE) where the model never routed that position (padding,
    /// and each row's last token, which is never fed back).
    pub routes: Vec<Vec<u16>>,
}

/// Left-pad prompts to a common width: `(width, tokens, valid)`, `[batch, width]` row-major.
pub fn left_pad(prompts: &[Vec<u32>]) -> (usize, Vec<u32>, Vec<bool>) {
    let width = prompts.iter().map(Vec::len).max().unwrap_or(0);
    let mut tokens = Vec::with_capacity(prompts.len() * width);
    let mut valid = Vec::with_capacity(prompts.len() * width);
    for p in prompts {
        let pad = width - p.len();
        tokens.extend(std::iter::repeat_n(PAD, pad).chain(p.iter().copied()));
        valid.extend(std::iter::repeat_n(false, pad).chain(std::iter::repeat_n(true, p.len())));
    }
    (width, tokens, valid)
}

/// Lay out prompts and responses as one `[batch, prompt_width + resp_width]` batch.
pub fn layout(prompts: &[Vec<u32>], responses: &[Vec<u32>]) -> (SeqBatch, usize) {
    let (pw, ptok, pvalid) = left_pad(prompts);
    let rw = responses.iter().map(Vec::len).max().unwrap_or(0);
    let seq = pw + rw;
    let mut tokens = Vec::with_capacity(prompts.len() * seq);
    let mut valid = Vec::with_capacity(prompts.len() * seq);
    for (b, r) in responses.iter().enumerate() {
        tokens.extend_from_slice(&ptok[b * pw..(b + 1) * pw]);
        valid.extend_from_slice(&pvalid[b * pw..(b + 1) * pw]);
        tokens.extend(
            r.iter()
                .copied()
                .chain(std::iter::repeat_n(PAD, rw - r.len())),
        );
        valid.extend(
            std::iter::repeat_n(true, r.len()).chain(std::iter::repeat_n(false, rw - r.len())),
        );
    }
    (
        SeqBatch {
            batch: prompts.len(),
            seq,
            tokens,
            valid,
        },
        pw,
    )
}

/// Pick a token from one row of logits; returns `(token, logp)` under `softmax(logits / τ)`.
fn pick(row: &[f32], s: &Sampling, rng: &mut Xoshiro256PlusPlus) -> (u32, f32) {
    let t = f64::from(s.temperature);
    let noise = |rng: &mut Xoshiro256PlusPlus| -> f64 {
        if s.logit_noise > 0.0 {
            rand_distr::Distribution::<f64>::sample(
                &rand_distr::Normal::new(0.0, f64::from(s.logit_noise)).expect("valid sigma"),
                rng,
            )
        } else {
            0.0
        }
    };
    let scaled: Vec<f64> = row
        .iter()
        .map(|&x| (f64::from(x) + noise(rng)) / t)
        .collect();
    let max = scaled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = max + scaled.iter().map(|x| (x - max).exp()).sum::<f64>().ln();
    let tok = if s.greedy {
        // First maximum: deterministic ties.
        let mut best = 0;
        for (i, &x) in scaled.iter().enumerate() {
            if x > scaled[best] {
                best = i;
            }
        }
        best
    } else {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        let mut chosen = scaled.len() - 1;
        for (i, &x) in scaled.iter().enumerate() {
            acc += (x - lse).exp();
            if u < acc {
                chosen = i;
                break;
            }
        }
        chosen
    };
    (tok as u32, (scaled[tok] - lse) as f32)
}

/// Generate one response per prompt with a KV cache. `model` should be the non-autodiff model.
/// `routing_for` may supply per-layer routing controls for each forward (given the number of
/// tokens in it), e.g. router noise of a mismatched rollout engine.
pub fn generate(
    model: &Model,
    prompts: &[Vec<u32>],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
    routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
) -> Generation {
    generate_sharded(model, prompts, s, rng, routing_for, 1)
}

/// [`generate`] with the rows split into `shards` contiguous shards, each with its own KV cache
/// and forward, run in parallel when the thread pool has more than one thread. Tokens are still
/// sampled on this thread, row by row in order from `rng`, so the random stream is the one of
/// an unsharded run; `routing_for` is called once per shard and forward, in shard order, for
/// all the shard's rows (where finished rows no longer decode, their part is dropped). The
/// numbers do not depend on the thread count, nor on finished rows leaving the decoding steps.
pub fn generate_sharded(
    model: &Model,
    prompts: &[Vec<u32>],
    s: &Sampling,
    rng: &mut Xoshiro256PlusPlus,
    routing_for: &mut dyn FnMut(usize) -> ForwardOptions<'static>,
    shards: usize,
) -> Generation {
    let b = prompts.len();
    let v = model.cfg.vocab_size;
    // One forward per decoded position with the same weights: extend the QKV projections once.
    let model = &model.with_extended_qkv();
    let (pw, ptok, pvalid) = left_pad(prompts);
    assert!(pw >= 1, "prompts must not be empty");
    assert!(
        pw + s.max_new <= model.cfg.max_seq_len,
        "prompt width {pw} + max_new {} exceeds max_seq_len {}",
        s.max_new,
        model.cfg.max_seq_len
    );
    let device = model.device();
    let on_device = s.sampler.on_device(&device);
    let on = OnDevice {
        logits: on_device,
        routes: on_device && !crate::util::tensors::is_host(&device),
    };
    let mut sh = Shards::new(b, shards);
    let mut log = RouteLog::new(model.cfg.top_k);
    let mut last = sh.prefill(model, &ptok, &pvalid, pw, routing_for, &mut log, on);
    let mut key_valid: Vec<Vec<bool>> = (0..b)
        .map(|r| pvalid[r * pw..(r + 1) * pw].to_vec())
        .collect();
    let mut responses = vec![Vec::new(); b];
    let mut logp = vec![Vec::new(); b];
    let mut done = vec![false; b];
    for step in 0..s.max_new {
        let mut next = vec![PAD; b];
        let picks: Vec<Option<(u32, f32)>> = match last {
            Logits::Host(l) => (0..b)
                .map(|r| (!done[r]).then(|| pick(&l[r * v..(r + 1) * v], s, rng)))
                .collect(),
            Logits::Device(l) => {
                let active: Vec<bool> = done.iter().map(|d| !d).collect();
                pick_on_device(l, &active, s, rng)
            }
        };
        for (r, p) in picks.into_iter().enumerate() {
            let Some((tok, lp)) = p else { continue };
            responses[r].push(tok);
            logp[r].push(lp);
            next[r] = tok;
            if tok == EOS {
                done[r] = true;
            }
        }
        // Feed the new tokens only if some row still needs another prediction.
        let active: Vec<bool> = (0..b).map(|r| !done[r]).collect();
        if step + 1 == s.max_new || active.iter().all(|a| !a) {
            break;
        }
        for r in 0..b {
            key_valid[r].push(active[r]);
        }
        // Rows that finished leave the shards' batches where that keeps every bit.
        if !on_device {
            sh.drop_finished(&active, long_inner(&model.cfg));
        }
        let pos = pw + step;
        last = sh.decode(
            model,
            &next,
            &active,
            &key_valid,
            pos,
            routing_for,
            &mut log,
            on,
        );
    }
    let (batch, _) = layout(prompts, &responses);
    let routes = log.into_layout(b, batch.seq);
    Generation {
        batch,
        prompt_width: pw,
        responses,
        logp,
        routes,
    }
}
