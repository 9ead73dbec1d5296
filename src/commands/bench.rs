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
    /// With --rl --preset: add a row with the probe and the reference on every K-th step only
    /// (the declared settings `probe_every = K`, `kl_ref_every = K`), one thread: the mean
    /// step over a whole number of K-step periods.
    #[arg(long, requires = "preset", value_parser = clap::value_parser!(u64).range(2..))]
    pub measure_every: Option<u64>,
    /// With --rl: time every arm of one regime of this experiment instead, as its cells run
    /// (the regime's settings, each arm's cold start of the spec's first seed, one thread), in
    /// interleaved rounds (--reps), medians.
    #[arg(long)]
    pub spec: Option<String>,
    /// With --spec: the regime (needed when the experiment has several).
    #[arg(long, requires = "spec")]
    pub regime: Option<String>,
    /// With --spec: also write the result as JSON here (a results folder's `bench.json` is
    /// the cost per step its fix leaderboard shows).
    #[arg(long, requires = "spec")]
    pub out: Option<std::path::PathBuf>,
    #[arg(long, default_value = "experiments")]
    pub specs: std::path::PathBuf,
    #[arg(long, default_value = crate::util::io::DEFAULT_CACHE_DIR)]
    pub cache_dir: std::path::PathBuf,
}

pub fn run(device: &Device, device_name: &str, a: &BenchArgs) -> Result<()> {
    let reps = a.reps;
    if let Some(name) = &a.spec {
        anyhow::ensure!(
            a.rl,
            "--spec selects the per-arm RL step benchmark: add --rl"
        );
        anyhow::ensure!(a.preset.is_none(), "--spec and --preset exclude each other");
        return arms(device, device_name, name, a);
    }
    if let Some(p) = a.preset {
        anyhow::ensure!(a.rl, "--preset selects the RL step benchmark: add --rl");
        return rl_preset(p, device, reps, a.measure_every.map(|k| k as usize));
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

/// `bench --rl --spec NAME`: every arm of one regime, interleaved rounds, medians.
fn arms(device: &Device, device_name: &str, name: &str, a: &BenchArgs) -> Result<()> {
    use crate::bench::arms::bench_arms;
    let spec = crate::experiment::find_spec(&a.specs, name)?;
    let opts = crate::experiment::RunOptions::one_job(
        std::env::temp_dir(),
        device.clone(),
        device_name.to_string(),
        a.cache_dir.clone(),
        crate::util::progress::Progress::auto(),
    );
    let b = bench_arms(&spec, a.regime.as_deref(), &opts, 2, a.reps)?;
    println!(
        "rl step of each arm of {} / {} (seed {}, one thread, {} interleaved rounds after {} warm-up steps): median seconds",
        b.experiment, b.regime, b.seed, b.rounds, b.warmup
    );
    let mut rows: Vec<(&String, &f64)> = b.median_s.iter().collect();
    rows.sort_by(|x, y| x.1.total_cmp(y.1));
    for (arm, s) in rows {
        println!("  {arm:<24} {s:.3}");
    }
    if let Some(out) = &a.out {
        crate::util::io::write_json(out, &b)?;
        println!("wrote {}", out.display());
    }
    Ok(())
}
