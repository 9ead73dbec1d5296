#!/usr/bin/env bash
# The `deep` step measured across a session (docs/speed.md, tenth pass): this machine's speed
# swings by up to 25% within minutes, so a few back-to-back rounds say more about the hour than
# about the build. Runs ROUNDS rounds of
#   driftlab --threads 1 bench --rl --preset deep --reps 3
# one every GAP seconds, each under `flock LOCK` (take the same lock around builds and tests of
# the same session so nothing of yours runs beside a round), logs each round's "probe and
# kl_ref on" row with its start time, and prints the median of the round values at the end.
# Every round is kept: none is dropped or repeated.
#
#   scripts/deep_rounds.sh [path/to/driftlab] [rounds=9] [gap seconds=720] [log=deep_rounds.log] [lock=/tmp/bench.lock]
#
# Copy the binary aside first if you keep building while the rounds run.
set -euo pipefail
bin=${1:-./target/release/driftlab}
rounds=${2:-9}
gap=${3:-720}
log=${4:-deep_rounds.log}
lock=${5:-/tmp/bench.lock}
: > "$log"
for i in $(seq 1 "$rounds"); do
  start=$(date +%s)
  row=$(flock "$lock" "$bin" --threads 1 bench --rl --preset deep --reps 3 2>&1 |
    grep "probe and kl_ref on" | sed -E 's/.*warm-up\): //')
  echo "round $i $(date -u -d "@$start" +%H:%M:%S) $row" | tee -a "$log"
  if [ "$i" -lt "$rounds" ]; then
    left=$((gap - ($(date +%s) - start)))
    [ "$left" -gt 0 ] && sleep "$left"
  fi
done
awk '{ sub(/s$/, "", $4); print $4 }' "$log" | sort -n |
  awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
    printf "median of %d rounds: %.3f s (range %.3f-%.3f s)\n", NR, m, v[1], v[NR] }' | tee -a "$log"
