//! `--device flex|wgpu|wgpu-cpu|cuda` → a burn `Device`, with clear errors for what is not built in.

use anyhow::{Result, bail};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Which compute device a run uses. Never `Device::default()`: that picks whatever backend the
/// build happens to enable first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceChoice {
    /// burn's pure-Rust CPU backend (default; deterministic).
    #[default]
    Flex,
    /// burn's wgpu backend on the best available GPU adapter.
    Wgpu,
    /// burn's wgpu backend on a CPU adapter (a software Vulkan such as Mesa's lavapipe).
    #[value(name = "wgpu-cpu")]
    WgpuCpu,
    /// burn's CUDA backend (cargo feature `cuda`, opt-in).
    Cuda,
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceChoice::Flex => "flex",
            DeviceChoice::Wgpu => "wgpu",
            DeviceChoice::WgpuCpu => "wgpu-cpu",
            DeviceChoice::Cuda => "cuda",
        })
    }
}

impl FromStr for DeviceChoice {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "flex" => Ok(DeviceChoice::Flex),
            "wgpu" => Ok(DeviceChoice::Wgpu),
            "wgpu-cpu" => Ok(DeviceChoice::WgpuCpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            other => bail!("unknown device '{other}'; allowed: flex, wgpu, wgpu-cpu, cuda"),
        }
    }
}

impl DeviceChoice {
    /// The non-autodiff device for this choice. Errors name the missing cargo feature or driver.
    pub fn device(self) -> Result<Device> {
        match self {
            DeviceChoice::Flex => flex(),
            DeviceChoice::Wgpu => wgpu(false),
            DeviceChoice::WgpuCpu => wgpu(true),
            DeviceChoice::Cuda => cuda(),
        }
    }
}

// The options of every command (`--device`, `--threads`), given before or after its name; the
// top-level parser and the task line `driftlab slurm` checks both flatten them. (A plain
// comment: a doc comment here would become the help text of the commands that flatten it.)
#[derive(clap::Args, Clone, Debug)]
pub struct DeviceArgs {
    /// Compute device.
    #[arg(long, global = true, default_value = "flex")]
    pub device: DeviceChoice,
    /// Rayon threads for the flex backend (default: all cores).
    #[arg(long, global = true)]
    pub threads: Option<usize>,
}

#[cfg(feature = "flex")]
fn flex() -> Result<Device> {
    Ok(Device::flex())
}
#[cfg(not(feature = "flex"))]
fn flex() -> Result<Device> {
    bail!("device 'flex' is not compiled in: build with `--features flex` (on by default)")
}

#[cfg(feature = "wgpu")]
fn wgpu(cpu: bool) -> Result<Device> {
    use burn::tensor::DeviceKind;
    // wgpu's Vulkan loader wants a runtime dir; CI containers often have none.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let dir = std::env::temp_dir().join(format!("driftlab-xdg-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        // SAFETY: set before any other thread of ours touches the environment (device setup
        // happens at start-up, before training threads are spawned).
        unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
    }
    // lavapipe (Mesa's software Vulkan, the adapter of wgpu-cpu) splits each dispatch over
    // threads of its own, which changes last bits from run to run; with LP_NUM_THREADS=0 it runs
    // each dispatch on the submitting thread, and the check repeats bit for bit (and ran faster
    // on 2 cores: 27 s against 29–33 s). Only lavapipe reads it; a value the user set stays.
    if std::env::var_os("LP_NUM_THREADS").is_none() {
        // SAFETY: as above.
        unsafe { std::env::set_var("LP_NUM_THREADS", "0") };
    }
    let kind = if cpu {
        DeviceKind::Cpu
    } else {
        DeviceKind::DefaultDevice
    };
    let what = if cpu { "wgpu-cpu" } else { "wgpu" };
    // The wgpu runtime registers once per process: a second `init` of the same kind fails, so
    // the device is started once and handed out again after.
    static STARTED: std::sync::Mutex<Vec<(bool, Device)>> = std::sync::Mutex::new(Vec::new());
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = started.iter().find(|(c, _)| *c == cpu) {
        return Ok(d.clone());
    }
    let init = std::panic::catch_unwind(|| Device::wgpu_options().device_kind(kind).init());
    match init {
        Ok(Ok(device)) => {
            started.push((cpu, device.clone()));
            Ok(device)
        }
        Ok(Err(e)) => bail!("device '{what}' could not start: {e}. {}", driver_hint(cpu)),
        Err(_) => bail!(
            "device '{what}' could not start (the wgpu runtime panicked). {}",
            driver_hint(cpu)
        ),
    }
}
#[cfg(feature = "wgpu")]
fn driver_hint(cpu: bool) -> &'static str {
    if cpu {
        "A CPU adapter needs a software Vulkan driver: on Debian `apt-get install mesa-vulkan-drivers libvulkan1`"
    } else {
        "No usable GPU adapter was found; install the GPU's Vulkan driver, or use --device wgpu-cpu or flex"
    }
}
#[cfg(not(feature = "wgpu"))]
fn wgpu(cpu: bool) -> Result<Device> {
    let what = if cpu { "wgpu-cpu" } else { "wgpu" };
    bail!("device '{what}' is not compiled in: build with `--features wgpu` (on by default)")
}

#[cfg(feature = "cuda")]
fn cuda() -> Result<Device> {
    // `Device::cuda(0)` only names the device: the driver is loaded on the first operation, so
    // the guard runs one (a one-element upload read back); a missing libcuda or GPU panics
    // inside it and is reported here, not in the middle of a run.
    std::panic::catch_unwind(|| {
        let device = Device::cuda(0);
        crate::util::tensors::to_vec(crate::util::tensors::floats(vec![0.0], [1], &device));
        device
    })
    .map_err(|_| anyhow::anyhow!("device 'cuda' could not start: no CUDA driver or GPU found"))
}
#[cfg(not(feature = "cuda"))]
fn cuda() -> Result<Device> {
    bail!(
        "device 'cuda' is not compiled in: build with `cargo build --release --features cuda` (opt-in; it downloads LLVM at build time)"
    )
}
