//! The forward that computes a prompt group's shared prefix once (`model::shared`) gives the
//! full forward's numbers bit for bit, at every position.

mod common;
use common::*;
use driftlab::generate::layout;
use driftlab::model::Shared;
use driftlab::model::{ForwardOptions, LayerRouting, Model, ModelConfig, Preset, SeqBatch};
use driftlab::task::{EOS, Tokenizer};
use driftlab::util::tensors::to_vec;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

/// `groups` prompt groups of `g` rows: prompts of half `max_prompt` (at least 2) to `max_prompt` tokens, responses of 1 to
/// `max_resp` tokens (some a single `<eos>`, so some rows hold fewer real tokens than the
/// attention node's widening asks for), left-padded prompts, right-padded responses.
fn grouped_batch(
    groups: usize,
    g: usize,
    (max_prompt, max_resp): (usize, usize),
    seed: u64,
) -> (SeqBatch, usize) {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let vocab = Tokenizer.vocab_size() as u32;
    let tok = |rng: &mut Xoshiro256PlusPlus| rng.random_range(3..vocab);
    let (mut prompts, mut responses) = (Vec::new(), Vec::new());
    for _ in 0..groups {
        let len = rng.random_range((max_prompt / 2).max(2)..=max_prompt);
        let prompt: Vec<u32> = (0..len).map(|_| tok(&mut rng)).collect();
        for _ in 0..g {
            let n = rng.random_range(0..max_resp);
            let mut r: Vec<u32> = (0..n).map(|_| tok(&mut rng)).collect();
            r.push(EOS);
            prompts.push(prompt.clone());
            responses.push(r);
        }
    }
    layout(&prompts, &responses)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Logits and every trace of the shared forward against the full forward, bit for bit.
fn assert_same(model: &Model, batch: &SeqBatch, opts: &ForwardOptions<'_>, sh: Shared) {
    let full = model.forward(batch, opts);
    let (logits, traces) = model
        .forward_shared(batch, opts, sh)
        .expect("the shared forward applies");
    assert_eq!(bits(&to_vec(full.logits)), bits(&to_vec(logits)), "logits");
    assert_eq!(full.traces.len(), traces.len());
    for (l, (a, b)) in full.traces.iter().zip(&traces).enumerate() {
        assert_eq!(a.native, b.native, "layer {l}: native routes");
        assert_eq!(a.used, b.used, "layer {l}: used routes");
        let p = |t: &driftlab::model::RoutingTrace| t.probs.as_deref().map(bits);
        assert_eq!(p(a), p(b), "layer {l}: router distributions");
        let i = |t: &driftlab::model::RoutingTrace| t.input.as_deref().map(bits);
        assert_eq!(i(a), i(b), "layer {l}: router inputs");
        assert_eq!(
            (a.n_tokens, a.replay_slots),
            (b.n_tokens, b.replay_slots),
            "layer {l}"
        );
    }
    let routes = model.route_traces(batch, opts);
    let shared = model.route_traces_shared(batch, opts, sh).expect("applies");
    for (a, b) in routes.iter().zip(&shared) {
        assert_eq!((&a.native, &a.used), (&b.native, &b.used), "route traces");
        assert_eq!(a.probs.as_deref().map(bits), b.probs.as_deref().map(bits));
    }
}

fn opts_with(n_layers: usize, forced: Option<&[Vec<u16>]>, want_input: bool) -> ForwardOptions<'_> {
    ForwardOptions {
        routing: (0..n_layers)
            .map(|l| LayerRouting {
                forced: forced.map(|f| f[l].as_slice()),
                want_input,
                ..LayerRouting::default()
            })
            .collect(),
        want_probs: true,
        round_bf16: false,
        routes_on_device: false,
    }
}

#[test]
fn sharing_the_prompt_changes_no_bit() {
    let vocab = Tokenizer.vocab_size();
    let toy = ModelConfig::preset(Preset::Toy, vocab).unwrap();
    let deep = ModelConfig {
        n_layers: 3,
        ..ModelConfig::preset(Preset::Deep, vocab).unwrap()
    };
    let dense = ModelConfig {
        ffn: driftlab::model::FfnKind::Dense,
        ..toy.clone()
    };
    // The bias-steered sigmoid router, with a shared expert.
    let sigmoid = ModelConfig {
        router: driftlab::model::RouterKind::SigmoidBias,
        shared_expert: true,
        ..toy.clone()
    };
    for (cfg, seed) in [(toy, 1), (deep, 2), (dense, 3), (sigmoid, 4)] {
        let model = Model::init(cfg.clone(), seed, &flex()).with_extended_qkv();
        // The last: one group with short responses, so many experts get a few compact rows
        // that stand for more rows of the batch.
        for (groups, shape, g) in [
            (6, (18, 19), 8),
            (6, (6, 14), 4),
            (6, (12, 30), 2),
            (1, (32, 3), 8),
        ] {
            let (batch, pw) = grouped_batch(groups, g, shape, seed);
            let sh = Shared {
                group: g,
                prefix: pw,
            };
            eprintln!("case {groups} {shape:?} {g}: seq {} pw {pw}", batch.seq);
            let n = cfg.n_layers;
            assert_same(&model, &batch, &opts_with(n, None, false), sh);
            assert_same(&model, &batch, &opts_with(n, None, true), sh);
            // Replay of routes equal within each group's prefix (π_old's own, as R2 replays).
            let native: Vec<Vec<u16>> = (model.forward(&batch, &ForwardOptions::default()).traces)
                .into_iter()
                .map(|t| t.native)
                .collect();
            if cfg.is_moe() {
                assert_same(&model, &batch, &opts_with(n, Some(&native), false), sh);
            }
            let bf16 = ForwardOptions {
                round_bf16: true,
                ..opts_with(n, None, false)
            };
            assert_same(&model, &batch, &bf16, sh);
        }
    }
}

#[test]
fn the_shared_forward_declines_what_it_cannot_share() {
    let model = tiny_model(4);
    let (batch, pw) = grouped_batch(3, 4, (10, 12), 5);
    let opts = ForwardOptions::default();
    let sh = |group, prefix| Shared { group, prefix };
    assert!(model.forward_shared(&batch, &opts, sh(4, pw)).is_some());
    // Groups that are not whole, or rows that differ within the prefix.
    assert!(model.forward_shared(&batch, &opts, sh(5, pw)).is_none());
    assert!(model.forward_shared(&batch, &opts, sh(4, pw + 1)).is_none());
    assert!(model.forward_shared(&batch, &opts, sh(12, pw)).is_none());
    // Forced routes that differ within a group's prefix.
    let k = model.cfg.top_k;
    let mut forced: Vec<Vec<u16>> = (model.forward(&batch, &opts).traces)
        .into_iter()
        .map(|t| t.native)
        .collect();
    let row1 = batch.seq * k;
    forced[0][row1 + (pw - 1) * k] = (forced[0][(pw - 1) * k] + 1) % model.cfg.n_experts as u16;
    let o = opts_with(model.cfg.n_layers, Some(&forced), false);
    assert!(model.forward_shared(&batch, &o, sh(4, pw)).is_none());
    // A sequence of at most 16 positions (the attention node computes every query there).
    let (short, spw) = grouped_batch(3, 4, (6, 4), 5);
    assert!(short.seq <= 16);
    assert!(model.forward_shared(&short, &opts, sh(4, spw)).is_none());
    // A graph.
    let graph = model.require_grad();
    assert!(graph.forward_shared(&batch, &opts, sh(4, pw)).is_none());
}

/// Trainer steps (π_old, the reference model's log-probs, the drift probe) give the same
/// numbers with the shared forward as with the full one, on sorts long enough to share, for
/// native routing, R2 (π_old's routes replayed) and R3 (the rollout's).
#[test]
fn trainer_steps_are_the_same_with_the_shared_forward() {
    use driftlab::kernels::hooks::{self, Node, Switch};
    use driftlab::rl::{Algorithm, GrpoConfig, RoutingMode, Trainer};
    use driftlab::task::{Task, TaskConfig};
    let task = Task::new(
        TaskConfig {
            min_len: 6,
            max_len: 10,
            eval_size: 16,
            ..TaskConfig::default()
        },
        0,
    )
    .unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let f = |v: &[f32]| bits(v);
    let ff = |v: &[Vec<f32>]| v.iter().map(|x| bits(x)).collect::<Vec<_>>();
    for routing in [RoutingMode::Native, RoutingMode::R2, RoutingMode::R3] {
        let cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), routing);
        let run = || {
            let toy = ModelConfig::preset(Preset::Toy, Tokenizer.vocab_size()).unwrap();
            let model = Model::init(toy, 7, &flex());
            let mut t = Trainer::new(cfg.clone(), model, task.clone(), 3).unwrap();
            (0..2).map(|_| t.step()).collect::<Vec<_>>()
        };
        let (shared, full, n) = pool.install(|| {
            let counts = hooks::counts();
            let shared = run();
            let n = counts.of(Node::SharedForward);
            let full = hooks::counts();
            let out = (shared, hooks::with(Switch::FullForwards, run), n);
            assert_eq!(
                full.of(Node::SharedForward),
                0,
                "full forwards share nothing"
            );
            out
        });
        assert!(n > 0, "{routing:?}: the trainer shared");
        for (a, b) in shared.iter().zip(&full) {
            assert_eq!(f(&a.logp_old), f(&b.logp_old), "{routing:?}: π_old");
            assert_eq!(a.entropy.to_bits(), b.entropy.to_bits());
            assert_eq!(a.routes_old, b.routes_old);
            for (u, v) in a.updates.iter().zip(&b.updates) {
                assert_eq!(f(&u.logp_ref), f(&v.logp_ref), "{routing:?}: reference");
                assert_eq!(u.routes_after, v.routes_after, "{routing:?}: probe");
                assert_eq!(ff(&u.probs_after), ff(&v.probs_after));
                assert_eq!(u.loss_total.to_bits(), v.loss_total.to_bits());
                assert_eq!(u.grad_norm.to_bits(), v.grad_norm.to_bits());
            }
        }
    }
}

/// A generation whose prompts come in groups prefills each group's prompt once and gives the
/// tokens, log-probs and routes of prefilling every row, bit for bit: one and three shards (a
/// group split between shards), the MoE and the dense model; with router noise (every row its
/// own) it prefills every row.
#[test]
fn prefilling_a_group_once_changes_no_bit() {
    use driftlab::generate::{Generation, Sampler, Sampling, generate_sharded};
    use driftlab::kernels::hooks::{self, Node, Switch};
    use driftlab::util::tensors::floats;
    let vocab = Tokenizer.vocab_size();
    let toy = ModelConfig::preset(Preset::Toy, vocab).unwrap();
    let dense = ModelConfig {
        ffn: driftlab::model::FfnKind::Dense,
        ..toy.clone()
    };
    let task = sort_task(2);
    let prompts: Vec<Vec<u32>> = problems(&task, 12, 9)
        .into_iter()
        .flat_map(|p| std::iter::repeat_n(p.prompt, 8))
        .collect();
    let s = Sampling {
        temperature: 1.0,
        greedy: false,
        max_new: 10,
        logit_noise: 0.0,
        sampler: Sampler::Host,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for (cfg, shards, noise) in [
        (&toy, 1, false),
        (&toy, 3, false),
        (&dense, 2, false),
        (&toy, 1, true),
    ] {
        let model = Model::init(cfg.clone(), 11, &flex());
        let (n_layers, e) = (cfg.n_layers, cfg.n_experts);
        let run = || {
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
            let mut noise_rng = Xoshiro256PlusPlus::seed_from_u64(4);
            let mut opts = |n: usize| -> ForwardOptions<'static> {
                let routing = (0..n_layers)
                    .filter(|_| noise)
                    .map(|_| {
                        let off: Vec<f32> = (0..n * e)
                            .map(|_| noise_rng.random_range(-1.0..1.0))
                            .collect();
                        LayerRouting {
                            logit_offset: Some(floats(off, [n, e], &flex())),
                            ..LayerRouting::default()
                        }
                    })
                    .collect();
                ForwardOptions {
                    routing,
                    ..ForwardOptions::default()
                }
            };
            generate_sharded(&model, &prompts, &s, &mut rng, &mut opts, shards)
        };
        let (shared, full, n): (Generation, Generation, usize) = pool.install(|| {
            let counts = hooks::counts();
            let shared = run();
            let n = counts.of(Node::SharedForward);
            let full = hooks::counts();
            let out = (shared, hooks::with(Switch::FullForwards, run), n);
            assert_eq!(
                full.of(Node::SharedForward),
                0,
                "full forwards share nothing"
            );
            out
        });
        assert_eq!(n > 0, !noise, "shards {shards}, noise {noise}: shared");
        assert_eq!(shared.responses, full.responses);
        let lp = |g: &Generation| g.logp.iter().map(|r| bits(r)).collect::<Vec<_>>();
        assert_eq!(lp(&shared), lp(&full), "log-probs");
        assert_eq!(shared.routes, full.routes, "routes");
    }
}
