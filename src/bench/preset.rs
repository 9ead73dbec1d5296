//! `driftlab bench --rl --preset P`: RL steps of one preset (sort 4–16, B 16, G 8, N 4, GRPO)
//! split into their phases, with tokens/s, the achieved GFLOP/s of the train forward+backward
//! and the process's peak resident memory.

use super::timing::{median, secs};
use crate::coldstart::{ColdStartConfig, cached};
use crate::model::{Model, ModelConfig, Preset};
use crate::rl::{RlConfig, StepOutput, Trainer};
use crate::task::{Task, TaskConfig, Tokenizer};
use anyhow::Result;
use burn::tensor::Device;

/// Forward FLOPs of a model over sequences of these real lengths (2 FLOPs per multiply-add):
/// per token and layer, the active matmuls 2·(3d² QKV + d² out + d·E router + (top_k + shared)
/// · 3·d·d_ff SwiGLU experts; a dense FFN has the same width), plus the head 2·d·V; per
/// sequence of n tokens and layer, causal attention 2·2·d·n(n+1)/2 (QKᵀ and A·V over the
/// n(n+1)/2 visible pairs). Norms, softmaxes, RoPE and the embedding lookup are not counted.
/// A training forward+backward is 3× the forward.
pub fn forward_flops(cfg: &ModelConfig, seq_lens: &[usize]) -> f64 {
    let (d, l) = (cfg.d_model as f64, cfg.n_layers as f64);
    let experts = (cfg.top_k + usize::from(cfg.shared_expert)) as f64;
    let router = if cfg.is_moe() {
        d * cfg.n_experts as f64
    } else {
        0.0
    };
    let per_token = l * 2.0 * (4.0 * d * d + router + experts * 3.0 * d * cfg.d_ff as f64)
        + 2.0 * d * cfg.vocab_size as f64;
    seq_lens
        .iter()
        .map(|&n| {
            let n = n as f64;
            n * per_token + l * 2.0 * d * n * (n + 1.0)
        })
        .sum()
}

/// Real (non-padding) tokens per row of a step's rollout layout: its prompt and response.
pub fn seq_lens(out: &StepOutput) -> Vec<usize> {
    let rows = out.resp_lens.len().max(1);
    let width = out.valid.len() / rows;
    out.valid
        .chunks(width.max(1))
        .map(|r| r.iter().filter(|&&v| v).count())
        .collect()
}

/// The process's peak resident set (VmHWM) in MiB, where /proc says it.
pub fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Medians over the timed steps of one configuration.
struct Split {
    total: f64,
    rollout: f64,
    old: f64,
    train: f64,
    opt: f64,
    probe: f64,
    gen_tokens: usize,
    train_flops: f64,
    /// What crossed the bus in that step, by phase.
    moved: Moved,
}

fn split(out: &StepOutput, cfg: &ModelConfig) -> Split {
    let opt: f64 = out.updates.iter().map(|u| u.t_opt).sum();
    let train = out.t_update - out.t_old - opt;
    Split {
        total: out.t_rollout + out.t_update + out.t_probe,
        rollout: out.t_rollout,
        old: out.t_old,
        train,
        opt,
        probe: out.t_probe,
        gen_tokens: out.resp_lens.iter().sum(),
        // Every update trains its minibatch's rows once: the whole batch once per step.
        train_flops: 3.0 * forward_flops(cfg, &seq_lens(out)),
        moved: Moved::of(out),
    }
}

/// RL steps of `preset` from its cached cold start (seed 0, sort 4–16) where one is cached,
/// else from a random init (said; its responses run longer). Two rows: probe and reference on
/// with one thread (what an experiment cell runs), and probe off with every thread; with
/// `every = Some(k)` a third: probe and reference on every k-th step, one thread.
pub fn rl_preset(preset: Preset, device: &Device, reps: usize, every: Option<usize>) -> Result<()> {
    let task = Task::new(TaskConfig::default(), 0)?;
    let cfg = ModelConfig::preset(preset, Tokenizer.vocab_size())?;
    let cache = std::path::Path::new(crate::util::io::DEFAULT_CACHE_DIR);
    let (model, from) = match cached(
        &cfg,
        &task.cfg,
        &ColdStartConfig::for_preset(preset),
        0,
        device,
        cache,
    ) {
        Some(c) => (
            c.model,
            format!(
                "cached cold start, sampled accuracy {:.2}",
                c.accuracy.sampled
            ),
        ),
        None => (
            Model::init(cfg.clone(), 0, device),
            "random init: no cached cold start".into(),
        ),
    };
    let params = model.weights.num_params();
    for (probe, threads) in [(true, 1), (false, rayon::current_num_threads())] {
        let (mut t, pool) = bench_trainer(&model, &task, probe, threads, 1)?;
        let mut rows: Vec<Split> = Vec::new();
        for i in 0..reps.max(1) + 1 {
            let o = pool.install(|| t.step());
            if i >= 1 {
                rows.push(split(&o, &cfg));
            }
        }
        let n = rows.len();
        // The step of median total time, with its own split (the parts add up to it).
        rows.sort_by(|a, b| a.total.total_cmp(&b.total));
        let r = &rows[n / 2];
        let gen_tps = r.gen_tokens as f64 / r.rollout;
        let gflops = r.train_flops / r.train / 1e9;
        println!(
            "rl step ({preset}, {params} parameters, {from}; sort 4-16, B 16, G 8, N 4, probe and kl_ref {}, {threads} thread(s); the median of {n} steps after 1 warm-up): {:.3}s = rollout {:.3}s + pi_old {:.3}s + train fwd+bwd {:.3}s + optimizer {:.3}s + probe {:.3}s; rollout {gen_tps:.0} generated tokens/s; train fwd+bwd {gflops:.2} GFLOP/s (real tokens, padding not counted)",
            if probe { "on" } else { "off" },
            r.total,
            r.rollout,
            r.old,
            r.train,
            r.opt,
            r.probe,
        );
        r.moved.print();
        if probe && threads == 1 {
            // Cells run one thread each, one per core: what an experiment gets per core-hour
            // (RL steps only; the cold start and the evals come on top).
            println!(
                "  as an experiment cell: {:.0} RL steps per core-hour; a 50-step cell (moe_drift's) {:.1} cells per core-hour",
                3600.0 / r.total,
                3600.0 / (50.0 * r.total)
            );
        }
    }
    if let Some(k) = every {
        measured_every(&model, &task, reps, k)?;
    }
    purge_ratio(&model, &task, reps)?;
    match peak_rss_mib() {
        Some(m) => println!("peak RSS of this process: {m:.0} MiB"),
        None => println!("peak RSS: not available (/proc/self/status unreadable)"),
    }
    Ok(())
}

/// A step's transfers by phase, with the units they are counted per.
#[derive(Clone, Copy)]
pub struct Moved {
    x: crate::util::tensors::StepTransfers,
    /// Decoding steps of the rollout (the longest response).
    decode_steps: usize,
    minibatches: usize,
}

impl Moved {
    pub fn of(out: &StepOutput) -> Moved {
        Moved {
            x: out.transfers,
            decode_steps: out.resp_lens.iter().copied().max().unwrap_or(0),
            minibatches: out.updates.len(),
        }
    }

    /// The bytes and round trips of a step by phase, beside the times above: on a GPU each
    /// read waits for the device, so these bound what the phase can gain there.
    pub fn print(&self) {
        let per = |n: u64, of: usize| n as f64 / of.max(1) as f64;
        let (m, steps, mbs) = (&self.x, self.decode_steps, self.minibatches);
        println!(
            "  host-device transfers: rollout {} ({:.1} reads per decoding step, {steps} steps); pi_old {}; train {}; optimizer {} ({:.1} reads per optimizer step, {mbs} steps); probe {}",
            m.rollout,
            per(m.rollout.reads, steps),
            m.pi_old,
            m.train,
            m.optimizer,
            per(m.optimizer.reads, mbs),
            m.probe
        );
    }
}

/// The row of `--measure-every k`: one thread, probe and reference on steps 0, k, 2k, …; the
/// mean step over whole k-step periods (at least `reps` steps) after one warm-up period.
fn measured_every(model: &Model, task: &Task, reps: usize, k: usize) -> Result<()> {
    let (mut t, pool) = bench_trainer(model, task, true, 1, k)?;
    let n = reps.max(1).div_ceil(k) * k;
    let (mut total, mut probe, mut old) = (0.0, 0.0, 0.0);
    for i in 0..n + k {
        let o = pool.install(|| t.step());
        if i >= k {
            total += o.t_rollout + o.t_update + o.t_probe;
            (probe, old) = (probe + o.t_probe, old + o.t_old);
        }
    }
    let m = n as f64;
    println!(
        "rl step, probe and kl_ref on every {k}-th step only (probe_every = kl_ref_every = {k}), 1 thread, the mean of {n} steps after {k} warm-up: {:.3}s (pi_old {:.3}s, probe {:.3}s); a 50-step cell {:.1} cells per core-hour",
        total / m,
        old / m,
        probe / m,
        3600.0 / (50.0 * total / m)
    );
    Ok(())
}

/// The benchmark's trainer (B 16, G 8, N 4, micro-batches and rollout shards 2; probe and
/// reference as `probe` says, on every `every`-th step) and a pool of `threads` to step it in.
fn bench_trainer(
    model: &Model,
    task: &Task,
    probe: bool,
    threads: usize,
    every: usize,
) -> Result<(Trainer, rayon::ThreadPool)> {
    let rl = RlConfig {
        measure_kl_ref: probe,
        micro_batches: 2,
        rollout_shards: 2,
        probe_every: every,
        kl_ref_every: every,
        ..RlConfig::default()
    };
    let mut t = Trainer::new(rl, model.clone(), task.clone(), 0)?;
    t.probe = probe;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()?;
    Ok((t, pool))
}

/// Steps (one thread, probe off) that alternate between mimalloc never returning freed memory
/// to the OS (what the binary sets, `crate::keep_freed_memory`) and its default one-second
/// purge delay, step by step, so that both see the same machine load; their medians.
fn purge_ratio(model: &Model, task: &Task, reps: usize) -> Result<()> {
    let (mut t, pool) = bench_trainer(model, task, false, 1, 1)?;
    let before = crate::purge_delay_ms();
    let (mut keep, mut purge) = (Vec::new(), Vec::new());
    for i in 0..2 * reps.max(1) + 1 {
        let never = i % 2 == 1;
        crate::set_purge_delay_ms(if never { -1 } else { 1000 });
        let s = secs(|| {
            pool.install(|| t.step());
        });
        match i {
            0 => {} // warm-up
            _ if never => keep.push(s),
            _ => purge.push(s),
        }
    }
    crate::set_purge_delay_ms(before);
    let (k, p) = (median(keep), median(purge));
    println!(
        "allocator (1 thread, probe off, {} alternating steps each, medians): freed memory kept {k:.3}s per step, mimalloc's default 1 s purge delay {p:.3}s; kept/purged time {:.2}",
        reps.max(1),
        k / p
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: toy (d 64, 2 layers, 8 experts top-2 of d_ff 128, no shared expert, V = vocab)
    /// over one sequence of 3 tokens.
    #[test]
    fn forward_flops_by_hand() {
        let cfg = ModelConfig::preset(Preset::Toy, 20).unwrap();
        assert_eq!(
            (cfg.d_model, cfg.n_layers, cfg.top_k, cfg.d_ff),
            (64, 2, 2, 128)
        );
        let per_layer = 2.0 * (4.0 * 64.0 * 64.0 + 64.0 * 8.0 + 2.0 * 3.0 * 64.0 * 128.0);
        let per_token = 2.0 * per_layer + 2.0 * 64.0 * 20.0;
        let attention = 2.0 * 2.0 * 64.0 * 3.0 * 4.0;
        let want = 3.0 * per_token + attention;
        assert_eq!(forward_flops(&cfg, &[3]), want);
        assert_eq!(forward_flops(&cfg, &[3, 3]), 2.0 * want);
        assert_eq!(forward_flops(&cfg, &[]), 0.0);
    }
}
