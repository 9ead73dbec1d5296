//! KV-cache generation against full recompute; task rewards and eval sets.

mod common;
use common::*;
use driftlab::generate::{Sampler, Sampling, generate};
use driftlab::model::{ForwardOptions, NO_ROUTE, token_logp};
use driftlab::task::{EOS, Problem, Task, TaskConfig, TaskKind, Tokenizer};
use driftlab::util::tensors::{ints, to_vec};
use rand::SeedableRng;
use rand::rngs::Xoshiro256PlusPlus;

/// `n` sort prompts (task seed, count, problem seed) and sampling at temperature 1 with up to
/// `max_new` response tokens.
fn sort_prompts(
    (task_seed, n, seed): (u64, usize, u64),
    max_new: usize,
) -> (Vec<Vec<u32>>, Sampling) {
    let task = sort_task(task_seed);
    let prompts = problems(&task, n, seed)
        .into_iter()
        .map(|p| p.prompt)
        .collect();
    let s = Sampling {
        temperature: 1.0,
        greedy: false,
        max_new,
        logit_noise: 0.0,
        sampler: Sampler::Host,
    };
    (prompts, s)
}

#[test]
fn kv_cache_logp_and_routes_match_full_recompute() {
    let model = tiny_model(7).inner();
    let (prompts, s) = sort_prompts((1, 10, 11), 12);
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
    let g = generate(&model, &prompts, &s, &mut rng, &mut |_| {
        ForwardOptions::default()
    });
    assert!(
        g.responses.iter().any(|r| r.len() > 3),
        "some responses should be several tokens long"
    );

    let full = model.forward(&g.batch, &ForwardOptions::default());
    let seq = g.batch.seq;
    let (mut rows, mut targets, mut recorded) = (vec![], vec![], vec![]);
    for (b, r) in g.responses.iter().enumerate() {
        for (j, &tok) in r.iter().enumerate() {
            rows.push(b * seq + g.prompt_width + j - 1);
            targets.push(tok as usize);
            recorded.push(g.logp[b][j]);
        }
    }
    let device = flex();
    let picked = full.logits.select(0, ints(&rows, [rows.len()], &device));
    let recomputed = to_vec(token_logp(picked, &targets, 1.0));
    let d = max_abs(&recomputed, &recorded);
    assert!(
        d <= 1e-5,
        "KV-cache log-probs differ from full recompute by {d}"
    );

    // Routes recorded during generation are the full forward's native routes wherever the
    // position was fed to the model; NO_ROUTE elsewhere.
    let k = model.cfg.top_k;
    for (l, tr) in full.traces.iter().enumerate() {
        for b in 0..g.batch.batch {
            for p in 0..seq {
                let i = b * seq + p;
                let rec = &g.routes[l][i * k..(i + 1) * k];
                let fed = g.batch.valid[i]
                    && !(p >= g.prompt_width && p + 1 == g.prompt_width + g.responses[b].len());
                if fed {
                    assert_eq!(
                        rec,
                        &tr.native[i * k..(i + 1) * k],
                        "layer {l} row {b} pos {p}"
                    );
                } else {
                    assert!(
                        rec.iter().all(|&e| e == NO_ROUTE),
                        "unfed position {p} of row {b} has a route"
                    );
                }
            }
        }
    }
}

/// A model with its QKV projections extended once (what generation runs) gives bitwise the
/// logits and routes of one that extends them in each forward: over whole sequences, and over
/// a prompt's forward and decoding steps with a KV cache.
#[test]
fn extending_the_projections_once_changes_no_bit() {
    let model = tiny_model(3).inner();
    let once = model.with_extended_qkv();
    let (prompts, s) = sort_prompts((2, 6, 4), 8);
    let gen_with = |m: &driftlab::model::Model| {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
        generate(m, &prompts, &s, &mut rng, &mut |_| {
            ForwardOptions::default()
        })
    };
    let g = gen_with(&model);
    let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<_>>();
    let opts = ForwardOptions::default();
    let (a, b) = (
        model.forward(&g.batch, &opts),
        once.forward(&g.batch, &opts),
    );
    assert_eq!(
        bits(to_vec(a.logits)),
        bits(to_vec(b.logits)),
        "whole sequences"
    );
    assert_eq!(a.traces, b.traces);
    let (pw, seq) = (g.prompt_width, g.batch.seq);
    let (mut ca, mut cb) = (Vec::new(), Vec::new());
    for (pos0, len) in [(0, pw), (pw, 1), (pw + 1, 1), (pw + 2, seq - pw - 2)] {
        let part = |v: &[u32]| -> Vec<u32> {
            v.chunks(seq)
                .flat_map(|r| r[pos0..pos0 + len].to_vec())
                .collect()
        };
        let valid: Vec<bool> = (g.batch.valid.chunks(seq))
            .flat_map(|r| r[pos0..pos0 + len].to_vec())
            .collect();
        let keys: Vec<bool> = (g.batch.valid.chunks(seq))
            .flat_map(|r| r[..pos0 + len].to_vec())
            .collect();
        let batch = driftlab::model::SeqBatch {
            batch: g.batch.batch,
            seq: len,
            tokens: part(&g.batch.tokens),
            valid,
        };
        let a = model.forward_at(&batch, pos0, &keys, &opts, Some(&mut ca));
        let b = once.forward_at(&batch, pos0, &keys, &opts, Some(&mut cb));
        assert_eq!(bits(to_vec(a.logits)), bits(to_vec(b.logits)), "at {pos0}");
        assert_eq!(a.traces, b.traces, "routes at {pos0}");
    }
    let h = gen_with(&once);
    assert_eq!(
        (h.responses, bits(h.logp.concat())),
        (g.responses, bits(g.logp.concat()))
    );
}

#[test]
fn greedy_generation_is_deterministic_and_stops_at_eos() {
    let model = tiny_model(8).inner();
    let task = sort_task(2);
    let prompts: Vec<Vec<u32>> = problems(&task, 5, 1)
        .into_iter()
        .map(|p| p.prompt)
        .collect();
    let s = Sampling {
        temperature: 1.0,
        greedy: true,
        max_new: 10,
        logit_noise: 0.0,
        sampler: Sampler::Host,
    };
    let run = |seed| {
        generate(
            &model,
            &prompts,
            &s,
            &mut Xoshiro256PlusPlus::seed_from_u64(seed),
            &mut |_| ForwardOptions::default(),
        )
    };
    let (a, b) = (run(1), run(2));
    assert_eq!(a.responses, b.responses, "greedy ignores the RNG");
    for r in &a.responses {
        assert!(r.len() <= 10);
        if let Some(p) = r.iter().position(|&t| t == EOS) {
            assert_eq!(p + 1, r.len(), "nothing is generated after <eos>");
        }
    }
}

fn problem(task: &Task, prompt: &str, answer: &str) -> Problem {
    Problem {
        prompt: task.tok.encode(prompt),
        answer: task.tok.encode(answer),
    }
}

#[test]
fn rewards_for_correct_wrong_long_short_and_garbage_answers() {
    let tok = Tokenizer;
    let exact = Task::new(TaskConfig::default(), 0).unwrap();
    let partial = Task::new(
        TaskConfig {
            partial_credit: true,
            ..TaskConfig::default()
        },
        0,
    )
    .unwrap();
    let p = problem(&exact, "S3142=", "1234");
    let resp = |s: &str| {
        let mut v = tok.encode(s);
        v.push(EOS);
        v
    };
    assert_eq!(exact.reward(&p, &resp("1234")), 1.0);
    assert_eq!(exact.reward(&p, &resp("1243")), 0.0);
    assert_eq!(partial.reward(&p, &resp("1243")), 0.5);
    assert_eq!(partial.reward(&p, &resp("12345")), 0.0, "too long");
    assert_eq!(partial.reward(&p, &resp("123")), 0.0, "too short");
    assert_eq!(
        partial.reward(&p, &tok.encode("1234")),
        0.0,
        "truncated: no <eos>"
    );
    assert_eq!(partial.reward(&p, &[EOS]), 0.0, "empty answer");
    assert_eq!(
        partial.reward(&p, &[0, 99, 12, 1234, EOS]),
        0.0,
        "garbage tokens never panic"
    );
    assert_eq!(partial.reward(&p, &[]), 0.0);
    let mut after = resp("1234");
    after.extend(tok.encode("99"));
    assert_eq!(
        exact.reward(&p, &after),
        1.0,
        "tokens after <eos> are ignored"
    );
    assert!(exact.is_correct(&p, &resp("1234")) && !exact.is_correct(&p, &resp("1243")));
}

#[test]
fn tasks_generate_correct_answers() {
    let tok = Tokenizer;
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(0);
    for kind in [TaskKind::Sort, TaskKind::Reverse, TaskKind::Add] {
        let t = Task::new(
            TaskConfig {
                kind,
                min_len: 2,
                max_len: 64,
                ..TaskConfig::default()
            },
            3,
        )
        .unwrap();
        for _ in 0..50 {
            let p = t.sample(&mut rng);
            let text = tok.decode(&p.prompt);
            let ans = tok.decode(&p.answer);
            let body = &text[1..text.len() - 1];
            match kind {
                TaskKind::Sort => {
                    let mut c: Vec<char> = body.chars().collect();
                    c.sort();
                    assert_eq!(ans, c.into_iter().collect::<String>());
                }
                TaskKind::Reverse => assert_eq!(ans, body.chars().rev().collect::<String>()),
                TaskKind::Add => {
                    let (a, b) = body.split_once('+').unwrap();
                    // Column addition, answer least-significant digit first.
                    let (da, db): (Vec<u32>, Vec<u32>) = (
                        a.chars().rev().map(|c| c.to_digit(10).unwrap()).collect(),
                        b.chars().rev().map(|c| c.to_digit(10).unwrap()).collect(),
                    );
                    let mut carry = 0;
                    let mut want = String::new();
                    for i in 0..da.len() {
                        let s = da[i] + db[i] + carry;
                        want.push(char::from_digit(s % 10, 10).unwrap());
                        carry = s / 10;
                    }
                    if carry > 0 {
                        want.push('1');
                    }
                    assert_eq!(ans, want, "{text}");
                }
            }
            assert!(p.answer.len() < t.cfg.max_answer_tokens(), "room for <eos>");
            assert!(p.prompt.len() <= t.cfg.max_prompt_tokens());
        }
    }
    let long = Task::new(
        TaskConfig {
            kind: TaskKind::Sort,
            min_len: 64,
            max_len: 64,
            ..TaskConfig::default()
        },
        0,
    )
    .unwrap();
    assert_eq!(
        long.sample(&mut rng).answer.len(),
        64,
        "answers reach 64 tokens"
    );
}

#[test]
fn eval_set_is_stable_by_seed_and_held_out() {
    let cfg = TaskConfig {
        min_len: 3,
        max_len: 6,
        eval_size: 64,
        ..TaskConfig::default()
    };
    let a = Task::new(cfg.clone(), 1).unwrap();
    let b = Task::new(cfg.clone(), 1).unwrap();
    let c = Task::new(cfg, 2).unwrap();
    assert_eq!(a.eval, b.eval);
    assert_ne!(a.eval, c.eval);
    let eval: std::collections::HashSet<_> = a.eval.iter().map(|p| p.prompt.clone()).collect();
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(9);
    for _ in 0..2000 {
        assert!(
            !eval.contains(&a.sample(&mut rng).prompt),
            "a training prompt leaked from the eval set"
        );
    }
}

/// Finished rows left out of the decoding steps (the CPU backend's generation) change no bit of
/// any row: tokens, log-probs and routes equal decoding every row to the end, in one shard and
/// in three, with rollout router noise (per-token logit offsets) and route-flip noise (choice
/// offsets) drawn for every row as before, and on the dense model.
#[test]
fn leaving_finished_rows_out_changes_no_bit() {
    use driftlab::generate::generate_sharded;
    use driftlab::kernels::hooks::{self, Node, Switch};
    use driftlab::model::LayerRouting;
    use driftlab::util::tensors::floats;
    use rand_distr::{Distribution, Normal};
    let moe = tiny_model(4).inner();
    let dense_cfg = driftlab::model::ModelConfig {
        ffn: driftlab::model::FfnKind::Dense,
        ..tiny_cfg()
    };
    let dense = driftlab::model::Model::init(dense_cfg, 4, &flex());
    let (prompts, s) = sort_prompts((3, 90, 8), 12);
    let device = flex();
    for (model, noise, shards) in [(&moe, 0, 1), (&moe, 1, 3), (&moe, 2, 2), (&dense, 0, 2)] {
        let run = || {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(21);
            let mut noise_rng = Xoshiro256PlusPlus::seed_from_u64(22);
            let (layers, e) = (model.cfg.n_layers, model.cfg.n_experts);
            let mut routing_for = |n: usize| -> ForwardOptions<'static> {
                let mut draw = |n: usize| -> Vec<f32> {
                    let normal = Normal::new(0.0f32, 0.5).unwrap();
                    (0..n).map(|_| normal.sample(&mut noise_rng)).collect()
                };
                let routing = match noise {
                    1 => (0..layers)
                        .map(|_| LayerRouting {
                            logit_offset: Some(floats(draw(n * e), [n, e], &device)),
                            ..LayerRouting::default()
                        })
                        .collect(),
                    2 => (0..layers)
                        .map(|_| LayerRouting {
                            choice_offset: Some(draw(n * e)),
                            ..LayerRouting::default()
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                ForwardOptions {
                    routing,
                    ..ForwardOptions::default()
                }
            };
            generate_sharded(model, &prompts, &s, &mut rng, &mut routing_for, shards)
        };
        let counts = hooks::counts();
        let dropped = run();
        assert!(counts.of(Node::RowsLeftOut) > 0, "rows were left out");
        let counts = hooks::counts();
        let every = hooks::with(Switch::EveryRow, run);
        assert_eq!(counts.of(Node::RowsLeftOut), 0, "every row decoded");
        assert_eq!(dropped.responses, every.responses);
        let bits = |g: &driftlab::generate::Generation| -> Vec<Vec<u32>> {
            g.logp
                .iter()
                .map(|r| r.iter().map(|x| x.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&dropped), bits(&every), "log-probs, noise {noise}");
        assert_eq!(dropped.routes, every.routes, "routes, noise {noise}");
    }
}

/// The device sampler ([`driftlab::generate::pick_on_device`]) draws the host sampler's tokens
/// from the same random stream, reports their log-probs to f32 rounding and leaves the stream
/// where the host sampler leaves it: sampled, greedy and with logit noise, on flex (its f32 sums
/// may pick a neighbouring token only when a uniform falls within rounding of a CDF step).
#[test]
fn the_device_sampler_draws_the_host_samplers_tokens() {
    use rand::RngExt;
    let model = tiny_model(7).inner();
    for (greedy, logit_noise) in [(false, 0.0), (true, 0.0), (false, 0.5)] {
        let (prompts, s) = sort_prompts((1, 16, 11), 12);
        let run = |sampler| {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(5);
            let s = Sampling {
                greedy,
                logit_noise,
                sampler,
                ..s
            };
            let g = generate(&model, &prompts, &s, &mut rng, &mut |_| {
                ForwardOptions::default()
            });
            (g, rng.random::<u64>())
        };
        let ((h, h_next), (d, d_next)) = (run(Sampler::Host), run(Sampler::Device));
        let what = format!("greedy {greedy}, logit noise {logit_noise}");
        assert_eq!(h.responses, d.responses, "{what}");
        assert_eq!(h.routes, d.routes, "{what}");
        let d_lp = max_abs(&h.logp.concat(), &d.logp.concat());
        assert!(d_lp < 1e-5, "{what}: log-probs differ by {d_lp}");
        assert_eq!(h_next, d_next, "{what}: the stream moved on differently");
        assert!(
            greedy || h.responses.iter().any(|r| r.len() > 2),
            "{what}: too short to test"
        );
    }
}
