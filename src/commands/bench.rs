//! `driftlab bench`: the benchmarks' medians, printed (the measurements are in
//! [`crate::bench`]).

use crate::bench::preset::rl_preset;
use crate::bench::{adamw_secs, model_throughput, moe_layer_ms, rl_step};
use crate::model::Preset;
use anyhow::Result;
use burn::tensor::Device;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Timed repetitions per measurement.
    #[arg(long, default_value_t = 15)]
    pub reps: usize,
    /// Only the MoE layer benchmark.
    #[arg(long)]
    pub layer_only: bool,
    /// Also time RL steps (toy, sort 4-16, B 16, G 8, N 4) from the cached cold start.
    #[arg(long)]
    pub rl: bool,
    /// With --rl: time RL steps of this preset instead (its cached cold start, else a
    /// random init), split into rollout, pi_old, train fwd+bwd, optimizer and probe, with
    /// tokens/s, achieved GFLOP/s and peak RSS.
    #[arg(long)]
    pub preset: Option<Preset>,
}

pub fn run(device: &Device, a: &BenchArgs) -> Result<()> {
    let reps = a.reps;
    if let Some(p) = a.preset {
        anyhow::ensure!(a.rl, "--preset selects the RL step benchmark: add --rl");
        return rl_preset(p, device, reps);
    }
    if a.rl {
        rl_step(device, reps)?;
    }
    let (ms, fused) = moe_layer_ms(device, reps);
    let fused = fused.map_or(String::new(), |f| {
        format!("; fused expert node {f:.2} ({:.2}x)", ms / f)
    });
    println!(
        "moe_layer_fwd_bwd_ms (tokens 4096, d 64, 8 experts, top-2, d_ff 128): median {ms:.2}{fused}"
    );
    if a.layer_only {
        return Ok(());
    }
    for preset in [Preset::Toy, Preset::Small] {
        let (train_tps, gen_tps) = model_throughput(preset, device, reps)?;
        println!(
            "{preset}: train fwd+bwd {train_tps:.0} tokens/s (median), generation {gen_tps:.0} tokens/s (median, untrained model, 128 prompts)"
        );
    }
    for preset in [Preset::Toy, Preset::Medium] {
        let (tensor, fused) = adamw_secs(preset, device, reps.min(5))?;
        let fused = fused.map_or("no fused path on this device".into(), |f| {
            format!("fused host pass {:.1} ms ({:.1}x)", f * 1e3, tensor / f)
        });
        println!(
            "adamw step ({preset} weights): tensor ops {:.1} ms, {fused} (medians)",
            tensor * 1e3
        );
    }
    Ok(())
}
