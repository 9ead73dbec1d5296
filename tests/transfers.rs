//! Host↔device transfers per RL step (issue: the GPU path is bound by round trips). Every read
//! back and upload goes through `util::tensors`, whose process-wide counters this binary's one
//! test reads while its one trainer runs alone. The bounds are today's counts with a little
//! room: a change that adds round trips per token or per expert shows here, without a GPU.

mod common;

use common::{tiny_rl, trainer};
use driftlab::rl::{Algorithm, GrpoConfig, RoutingMode};

#[test]
fn a_tiny_rl_step_stays_under_its_transfer_bounds() {
    let cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
    let mut t = trainer(cfg, 0);
    t.step();
    let o = t.step();
    let [ro, up] = o.transfers;
    let generated = o.resp_lens.iter().copied().max().unwrap_or(0) as u64;
    eprintln!(
        "rollout {} reads + {} uploads (longest response {generated} tokens); update {} reads + {} uploads ({} minibatches)",
        ro.reads,
        ro.uploads,
        up.reads,
        up.uploads,
        o.updates.len()
    );
    assert!(ro.reads > 0 && up.reads > 0, "the counters count");
    // Measured on 2026-12-05 (tiny model, 4 prompts × 4 responses, 2 minibatches): rollout 30
    // reads + 110 uploads over a longest response of 5 tokens, update 214 reads + 278 uploads.
    let steps = generated + 1;
    let mbs = o.updates.len() as u64;
    for (what, got, per, unit, n) in [
        ("rollout reads", ro.reads, 6, "generation steps", steps),
        ("rollout uploads", ro.uploads, 20, "generation steps", steps),
        ("update reads", up.reads, 120, "minibatches", mbs),
        ("update uploads", up.uploads, 150, "minibatches", mbs),
    ] {
        assert!(
            got <= per * n,
            "{what} {got} over {n} {unit} (bound {per} each)"
        );
    }
}
