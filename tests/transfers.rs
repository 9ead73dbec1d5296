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
        let cfg_shards = cfg.rollout_shards;
        let mut t = Trainer::new(cfg, model, short_sort(), 0).unwrap();
        t.step();
        let o = t.step();
        let x = o.transfers;
        let generated = o.resp_lens.iter().copied().max().unwrap_or(0) as u64;
        let mbs = o.updates.len() as u64;
        eprintln!(
            "{choice}: longest response {generated} tokens, {mbs} minibatches\n  rollout {}\n  pi_old {}\n  train {}\n  optimizer {}\n  probe {}",
            x.rollout, x.pi_old, x.train, x.optimizer, x.probe
        );
        assert!(
            x.rollout.reads > 0 && x.train.reads > 0,
            "the counters count"
        );
        assert_eq!(
            x.total().reads,
            [x.rollout, x.pi_old, x.train, x.optimizer, x.probe]
                .iter()
                .map(|p| p.reads)
                .sum::<u64>(),
            "the phases add up"
        );
        // Measured on 2026-12-07 (tiny model, 4 prompts × 4 responses, 2 minibatches, longest
        // response 5 tokens), reads + uploads:
        //   flex:     rollout 30 + 110, pi_old 28 + 104, train 28 + 56, optimizer 148 + 74
        //             (its fused host pass), probe 8 + 28
        //   wgpu-cpu: rollout 30 + 130 (10 + 87, 9.3 → 4.6 KiB read, since tokens are picked on
        //             the device, one [rows, 2] read per decoding step for both shards in place of
        //             each shard's logits, and the decoding steps' top-k runs there too, their
        //             routes read once per generation in place of each layer's scores per step;
        //             the prompts' routes are 4 of the 10),
        //             pi_old 28 + 120, train 28 + 80, optimizer 2 + 0 (the
        //             global norm, once per optimizer step: the update stays on the device),
        //             probe 8 + 32.
        // The bounds are those with a little room, per unit of work.
        let steps = generated + 1;
        let host = choice == DeviceChoice::Flex;
        // On flex the fused host pass reads each parameter and its gradient and writes the
        // parameter back (37 tensors).
        let params = warm.weights.tensors().len() as u64;
        // Off flex the prompts' routes are read once a generation, one read per MoE layer and
        // rollout shard; the decoding steps then read one buffer each (their tokens and
        // log-probs) and the generation one more (its decoding steps' routes).
        let prompt_routes = (warm.cfg.n_layers * cfg_shards) as u64;
        let rollout_reads = if host {
            x.rollout.reads
        } else {
            x.rollout.reads.saturating_sub(prompt_routes)
        };
        for (what, got, per, unit, n) in [
            (
                "rollout reads (beyond the prompts' routes off flex)",
                rollout_reads,
                if host { 6 } else { 1 },
                "generation steps",
                steps,
            ),
            (
                "rollout uploads",
                x.rollout.uploads,
                if host { 20 } else { 24 },
                "generation steps",
                steps,
            ),
            ("pi_old reads", x.pi_old.reads, 16, "minibatches", mbs),
            ("pi_old uploads", x.pi_old.uploads, 64, "minibatches", mbs),
            ("train reads", x.train.reads, 16, "minibatches", mbs),
            ("train uploads", x.train.uploads, 44, "minibatches", mbs),
            (
                "optimizer reads",
                x.optimizer.reads,
                if host { 2 * params } else { 1 },
                "optimizer steps",
                mbs,
            ),
            (
                "optimizer uploads",
                x.optimizer.uploads,
                if host { params } else { 0 },
                "optimizer steps",
                mbs,
            ),
            ("probe reads", x.probe.reads, 6, "minibatches", mbs),
            ("probe uploads", x.probe.uploads, 18, "minibatches", mbs),
        ] {
            assert!(
                got <= per * n,
                "{choice}: {what} {got} over {n} {unit} (bound {per} each)"
            );
        }
    }
    // The sampler alone on wgpu-cpu (one shard): the device sampler reads back a token and a
    // log-prob per row and decoding step, not the vocabulary's logits, and the routes once at
    // the end, beside the prompts' routes (measured: host 18 reads, 6.9 KiB; device 9 reads, 3.5 KiB, over
    // 6 steps).
    let (h, d) = common::host_and_device_samples(&DeviceChoice::WgpuCpu.device().unwrap());
    let steps = d.0.responses.iter().map(Vec::len).max().unwrap() as u64;
    let vocab = warm.cfg.vocab_size as u64;
    eprintln!("sampling, host: {}\nsampling, device: {}", h.1, d.1);
    assert!(
        d.1.reads <= steps + 1 + warm.cfg.n_layers as u64,
        "one read a decoding step, one of their routes, one per layer of the prompts' routes"
    );
    assert!(
        h.1.read_bytes - d.1.read_bytes >= steps * 8 * 4 * (vocab - 2),
        "the logits stay on the device"
    );
}
