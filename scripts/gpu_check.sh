#!/usr/bin/env bash
# docs/devices.md's table on any machine with a GPU, in one log: the MoE layer, a toy and a
# `medium` RL step on `--device wgpu` and on flex with every CPU thread of the same host, then
# `driftlab check --device wgpu` against wgpu's own baseline: the committed
# results/baselines/check-wgpu.json where there is one; where not, the first check writes one
# beside the log and a second run is compared with it (run-to-run reproducibility on that GPU;
# commit the written file as results/baselines/check-wgpu.json to make it the GPU's record).
#
#   scripts/gpu_check.sh [path/to/driftlab] [log file]
#
# Run from the repository root (check reads experiments/ and results/baselines/). Needs a
# Vulkan loader and glvnd (Debian: libvulkan1 libglvnd0 libglx0 libegl1 libgl1 libopengl0)
# and the GPU driver's Vulkan ICD; on NVIDIA containers set
# VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json if no adapter is found.
# Each command's exit status is logged and the script goes on, so one failure does not hide
# the rest.
set -uo pipefail
bin=${1:-./target/release/driftlab}
log=${2:-gpu_check.log}
threads=$(nproc)
run() {
  echo "## $*"
  local t0=$SECONDS
  "$@" 2>&1
  echo "rc $? (${SECONDS}s wall, $((SECONDS - t0))s this command)"
}
{
  echo "# driftlab gpu_check, $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -4
  grep -m1 "model name" /proc/cpuinfo
  echo "threads: $threads"
  run "$bin" --device wgpu bench --layer-only --reps 10
  run "$bin" bench --layer-only --reps 10 --threads "$threads"
  run "$bin" --device wgpu bench --rl --preset toy --reps 5
  run "$bin" bench --rl --preset toy --reps 5 --threads "$threads"
  run "$bin" --device wgpu bench --rl --preset medium --reps 1
  run "$bin" bench --rl --preset medium --reps 1 --threads "$threads"
  if [ -f results/baselines/check-wgpu.json ]; then
    run "$bin" --device wgpu check
  else
    own="${log%.log}-check-wgpu.json"
    run "$bin" --device wgpu check --update --baseline "$own"
    run "$bin" --device wgpu check --baseline "$own"
  fi
} | tee "$log"
