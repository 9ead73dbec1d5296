//! `--device flex|wgpu|wgpu-cpu|cuda` → a burn `Device`, with clear errors for what is not built in.

use anyhow::{Result, bail};
use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use std::fmt;

crate::named_enum! {
    /// Which compute device a run uses. Never `Device::default()`: that picks whatever backend
    /// the build happens to enable first.
    pub enum DeviceChoice("device") {
        /// burn's pure-Rust CPU backend (default; deterministic).
        Flex = "flex",
        /// burn's wgpu backend on the best available GPU adapter.
        Wgpu = "wgpu",
        /// burn's wgpu backend on a CPU adapter (a software Vulkan such as Mesa's lavapipe).
        WgpuCpu = "wgpu-cpu",
        /// burn's CUDA backend (cargo feature `cuda`, opt-in).
        Cuda = "cuda",
    }
}

impl Default for DeviceChoice {
    fn default() -> Self {
        DeviceChoice::Flex
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
    /// Let `--device wgpu` run on a software adapter (a CPU Vulkan such as lavapipe), which
    /// it otherwise refuses: results from it are correct but far slower than on a GPU.
    #[arg(long, global = true)]
    pub allow_software: bool,
}

impl DeviceArgs {
    /// Start the chosen device. A wgpu device prints the adapter it got to stderr; under
    /// `--device wgpu` a software adapter is an error unless `--allow-software`.
    pub fn start(&self) -> Result<Device> {
        let device = self.device.device()?;
        if let Some(a) = adapter(self.device) {
            eprintln!("device {}: adapter {a}", self.device);
            check_adapter(self.device, &a, self.allow_software)?;
        }
        Ok(device)
    }
}

/// The wgpu adapter a device runs on, as wgpu describes it (`config.json`'s `adapter`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Adapter {
    /// The adapter's name (e.g. "NVIDIA H100", "llvmpipe (LLVM 15.0.7, 256 bits)").
    pub name: String,
    /// The graphics API wgpu drives it through (vulkan, metal, dx12, gl).
    pub backend: String,
    /// wgpu's device type: discrete-gpu, integrated-gpu, virtual-gpu, cpu or other.
    pub device_type: String,
    /// The driver's name and version, as the driver reports them.
    pub driver: String,
    /// A CPU adapter (wgpu's device type `Cpu`): a software rasteriser, not a GPU.
    pub software: bool,
}

impl fmt::Display for Adapter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}' ({}, {}{}, driver '{}')",
            self.name,
            self.backend,
            self.device_type,
            if self.software { ", software" } else { "" },
            self.driver
        )
    }
}

/// A software adapter under `--device wgpu` (which promises a GPU) is an error unless
/// `allow_software`; `--device wgpu-cpu` asks for one and always passes.
pub fn check_adapter(choice: DeviceChoice, a: &Adapter, allow_software: bool) -> Result<()> {
    if choice == DeviceChoice::Wgpu && a.software && !allow_software {
        bail!(
            "--device wgpu got a software adapter, {a}: no GPU adapter was found, and a run on it \
             would be far slower than on a GPU. Install the GPU's Vulkan driver, use \
             --device wgpu-cpu or flex, or pass --allow-software to run on it anyway"
        );
    }
    Ok(())
}

/// The adapter of the wgpu device `name` names ("wgpu", "wgpu-cpu") when it has started in
/// this process; `None` for every other device.
pub fn adapter_named(name: &str) -> Option<Adapter> {
    name.parse().ok().and_then(adapter)
}

/// The adapter of `choice` when it is a wgpu device started in this process.
pub fn adapter(choice: DeviceChoice) -> Option<Adapter> {
    let cpu = match choice {
        DeviceChoice::Wgpu => false,
        DeviceChoice::WgpuCpu => true,
        DeviceChoice::Flex | DeviceChoice::Cuda => return None,
    };
    started_adapter(cpu)
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
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d, _)) = started.iter().find(|(c, _, _)| *c == cpu) {
        return Ok(d.clone());
    }
    let init =
        std::panic::catch_unwind(|| Device::wgpu_options().device_kind(kind).init_with_setup());
    match init {
        Ok(Ok((device, setup))) => {
            let info = setup.adapter.get_info();
            let adapter = Adapter {
                name: info.name.clone(),
                backend: info.backend.to_string(),
                device_type: device_type_name(info.device_type).into(),
                driver: format!("{} {}", info.driver, info.driver_info)
                    .trim()
                    .to_string(),
                software: info.device_type == burn::tensor::wgpu::wgpu::DeviceType::Cpu,
            };
            started.push((cpu, device.clone(), adapter));
            Ok(device)
        }
        Ok(Err(e)) => bail!("device '{what}' could not start: {e}. {}", driver_hint(cpu)),
        Err(_) => bail!(
            "device '{what}' could not start (the wgpu runtime panicked). {}",
            driver_hint(cpu)
        ),
    }
}
/// The wgpu devices started in this process, by `cpu` (wgpu-cpu or wgpu), with their
/// adapters. The wgpu runtime registers once per process: a second `init` of the same kind
/// fails, so each device is started once and handed out again after.
#[cfg(feature = "wgpu")]
static STARTED: std::sync::Mutex<Vec<(bool, Device, Adapter)>> = std::sync::Mutex::new(Vec::new());

/// The adapter of the wgpu device (`cpu`: wgpu-cpu) started in this process, if any.
#[cfg(feature = "wgpu")]
fn started_adapter(cpu: bool) -> Option<Adapter> {
    let started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    started
        .iter()
        .find(|(c, _, _)| *c == cpu)
        .map(|(_, _, a)| a.clone())
}
#[cfg(not(feature = "wgpu"))]
fn started_adapter(_cpu: bool) -> Option<Adapter> {
    None
}

/// wgpu's device type in kebab case.
#[cfg(feature = "wgpu")]
fn device_type_name(t: burn::tensor::wgpu::wgpu::DeviceType) -> &'static str {
    use burn::tensor::wgpu::wgpu::DeviceType;
    match t {
        DeviceType::DiscreteGpu => "discrete-gpu",
        DeviceType::IntegratedGpu => "integrated-gpu",
        DeviceType::VirtualGpu => "virtual-gpu",
        DeviceType::Cpu => "cpu",
        DeviceType::Other => "other",
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
