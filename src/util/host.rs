//! The machine a run ran on, as `config.json` records it: the CPU model, the instruction-set
//! features the CPU backend's kernels dispatch on, the caches its matrix products block by,
//! and the C library whose `expf` the backend calls. Runs are bitwise reproducible on the same
//! CPU model at any thread count; across CPU models only the verdicts are expected to hold,
//! and this record tells a reader which case applies.
//!
//! What moves the bits between CPU models (read from the sources of the CPU backend's
//! dependencies): the `gemm` crate picks its k-block `kc` from the L1 data cache it detects
//! (size, associativity, SMT siblings sharing it; at least 512 and at most k), and each
//! k-block's partial sum is added into the output, so a different L1d gives a different
//! rounding order whenever k > 512 (weight gradients, whose k is the token count): a 32 KiB
//! 8-way L1d gives kc = 512, a 48 KiB 12-way one 672 with SMT or 1024 without. The backend's
//! own elementwise and reduction kernels (`macerator`) choose their vector width at run time
//! (AVX-512 needs avx512f/bw/cd/dq/vl with bmi1/bmi2/lzcnt/popcnt, else AVX2), which changes
//! the order of sums and softmax normalisers. `exp`/`ln` go to the C library's `expf`/`logf`.

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
    /// The CPU caches of cpu0 from `/sys` (empty where not readable).
    #[serde(default)]
    pub caches: Vec<Cache>,
    /// The C library's version (`gnu_get_libc_version`), where it is glibc.
    #[serde(default)]
    pub libc: Option<String>,
}

/// One CPU cache as Linux reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Cache {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    pub size_kib: u64,
    pub ways: u32,
    /// The logical CPUs that share it (`shared_cpu_list`).
    pub shared_with: String,
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
            caches: caches(),
            libc: libc_version(),
        }
    }
}

fn caches() -> Vec<Cache> {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let read = |dir: &std::path::Path, f: &str| {
        std::fs::read_to_string(dir.join(f))
            .map(|s| s.trim().to_string())
            .ok()
    };
    let mut out: Vec<Cache> = (0..8)
        .map(|i| base.join(format!("index{i}")))
        .filter_map(|d| {
            let size = read(&d, "size")?;
            let kib = size.trim_end_matches('K').parse().ok()?;
            Some(Cache {
                level: read(&d, "level")?.parse().ok()?,
                kind: read(&d, "type")?,
                size_kib: kib,
                ways: read(&d, "ways_of_associativity")
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(0),
                shared_with: read(&d, "shared_cpu_list").unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    out
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn libc_version() -> Option<String> {
    // SAFETY: glibc returns a pointer to a static, NUL-terminated version string.
    let p = unsafe { libc::gnu_get_libc_version() };
    (!p.is_null()).then(|| {
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    })
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn libc_version() -> Option<String> {
    None
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
        "avx512cd",
        "avx512bf16",
        "avx512vnni",
        "bmi1",
        "bmi2",
        "lzcnt",
        "popcnt"
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
        if cfg!(target_os = "linux") {
            let l1d = h.caches.iter().find(|c| c.level == 1 && c.kind == "Data");
            assert!(l1d.is_some_and(|c| c.size_kib > 0), "{:?}", h.caches);
        }
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(
                h.libc.as_deref().is_some_and(|v| v.starts_with("2.")),
                "{:?}",
                h.libc
            );
        }
    }
}
