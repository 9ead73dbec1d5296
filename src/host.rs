//! The machine a run ran on, as `config.json` records it: the CPU model and the instruction-set
//! features the CPU backend's kernels may dispatch on. Runs are bitwise reproducible on the
//! same CPU model at any thread count; across CPU models only the verdicts are expected to
//! hold (kernel dispatch and blocking change the last bits), and this record tells a reader
//! which case applies.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// `model name` from `/proc/cpuinfo` ("unknown" where there is none).
    pub cpu_model: String,
    /// The detected features among those SIMD kernels choose between, in a fixed order.
    pub cpu_features: Vec<String>,
    pub logical_cpus: usize,
    /// Threads of the process's thread pool when the run started.
    pub threads: usize,
    pub arch: String,
    pub os: String,
}

impl Host {
    pub fn detect() -> Host {
        Host {
            cpu_model: cpu_model(),
            cpu_features: features().into_iter().map(String::from).collect(),
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            threads: rayon::current_num_threads(),
            arch: std::env::consts::ARCH.into(),
            os: std::env::consts::OS.into(),
        }
    }
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(target_arch = "x86_64")]
fn features() -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {
            $(if std::arch::is_x86_feature_detected!($f) { out.push($f); })*
        };
    }
    probe!(
        "sse2",
        "sse4.1",
        "sse4.2",
        "avx",
        "avx2",
        "fma",
        "f16c",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512bf16",
        "avx512vnni"
    );
    out
}

#[cfg(target_arch = "aarch64")]
fn features() -> Vec<&'static str> {
    let mut out = Vec::new();
    macro_rules! probe {
        ($($f:tt),*) => {
            $(if std::arch::is_aarch64_feature_detected!($f) { out.push($f); })*
        };
    }
    probe!("neon", "fp16", "sve", "sve2", "bf16");
    out
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn features() -> Vec<&'static str> {
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_record_names_the_cpu_and_its_features() {
        let h = Host::detect();
        assert!(!h.cpu_model.is_empty() && h.logical_cpus >= 1 && h.threads >= 1);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(h.cpu_features.first().map(String::as_str), Some("sse2"));
        }
    }
}
