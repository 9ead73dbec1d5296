//! Host↔device transfers per RL step (issue: the GPU path is bound by round trips). Every read
//! back and upload goes through `util::tensors`, whose process-wide counters this binary's one
//! test reads while its one trainer at a time runs alone. The bounds are today's counts with a
//! little room: a change that adds round trips per token or per expert shows here, without a
//! GPU: on flex and on wgpu-cpu (the software Vulkan CI has, the GPU code path).

mod common;

use common::{short_sort, tiny_rl, warm_tiny};
use driftlab::device::DeviceChoice;
use driftlab::model::{Model, Weights};
use driftlab::rl::{Algorithm, GrpoConfig, RoutingMode, Trainer};

#[test]
fn a_tiny_rl_step_stays_under_its_transfer_bounds() {
    let warm = warm_tiny();
    for choice in [DeviceChoice::Flex, DeviceChoice::WgpuCpu] {
        let device = choice
            .device()
            .expect("wgpu-cpu needs a software Vulkan (mesa-vulkan-drivers); .ci/run installs it");
        let model = Model::new(
            warm.cfg.clone(),
            Weights::from_bytes(&warm.cfg, &warm.weights.to_bytes(), &device).unwrap(),
            &device,
        );
        let cfg = tiny_rl(Algorithm::Grpo(GrpoConfig::default()), RoutingMode::Native);
        let mut t = Trainer::new(cfg, model, short_sort(), 0).unwrap();
        t.step();
        let o = t.step();
        let [ro, up] = o.transfers;
        let generated = o.resp_lens.iter().copied().max().unwrap_or(0) as u64;
        eprintln!(
            "{choice}: rollout {} reads + {} uploads (longest response {generated} tokens); update {} reads + {} uploads ({} minibatches)",
            ro.reads,
            ro.uploads,
            up.reads,
            up.uploads,
            o.updates.len()
        );
        assert!(ro.reads > 0 && up.reads > 0, "the counters count");
        // Measured on 2026-12-05 (tiny model, 4 prompts × 4 responses, 2 minibatches, longest
        // response 5 tokens): flex rollout 30 reads + 110 uploads, update 214 reads + 278
        // uploads; wgpu-cpu rollout 30 + 130 (230 before the MoE dispatch uploaded one token
        // permutation per layer instead of two index lists per expert), update 66 + 252 (476).
        // Flex reads more in the update: its host kernels (exp, softmax pieces) are host passes.
        let steps = generated + 1;
        let mbs = o.updates.len() as u64;
        let host = choice == DeviceChoice::Flex;
        for (what, got, per, unit, n) in [
            ("rollout reads", ro.reads, 6, "generation steps", steps),
            (
                "rollout uploads",
                ro.uploads,
                if host { 20 } else { 24 },
                "generation steps",
                steps,
            ),
            (
                "update reads",
                up.reads,
                if host { 120 } else { 40 },
                "minibatches",
                mbs,
            ),
            ("update uploads", up.uploads, 150, "minibatches", mbs),
        ] {
            assert!(
                got <= per * n,
                "{choice}: {what} {got} over {n} {unit} (bound {per} each)"
            );
        }
    }
}
