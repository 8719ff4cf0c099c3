#!/usr/bin/env bash
# Threads on a shared machine, with and without a CPU hog (a busy loop in another
# process): first training steps of bench_train for 1 and 2 threads, libgomp's wait
# policies and the trainer's tuner; then every computing command of `attend` (adaptive,
# 1 and 2 threads: bench/bench_commands_load.sh) and generation speed against nanoGPT's
# loop (bench/bench_sample.sh). See Note [Threads on a busy machine].
#   bench/bench_load.sh [BUILD_DIR] [STEPS] [CONFIG]     (default build 10 C)
# The first table: the median ms/step of bench_train for CONFIG.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-10}"
cfg="${3:-C}"
run() {  # label env...
  local label="$1"; shift
  local ms
  ms="$(env "$@" "$build/bench/bench_train" "$steps" "$cfg" | awk -v c="$cfg" '$1 == c { print $5 }')"
  printf "%-48s %10s ms/step\n" "$label" "$ms"
}
echo "config $cfg, $steps steps, $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
for hog in no yes; do
  pid=""
  if [ "$hog" = yes ]; then
    (while :; do :; done) &
    pid=$!
  fi
  echo "-- hog: $hog"
  run "2 threads (libgomp's default wait policy)" OMP_NUM_THREADS=2
  run "2 threads, OMP_WAIT_POLICY=passive" OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
  run "2 threads, GOMP_SPINCOUNT=10000" OMP_NUM_THREADS=2 GOMP_SPINCOUNT=10000
  run "1 thread" OMP_NUM_THREADS=1
  auto_ms="$(OMP_NUM_THREADS=2 "$build/bench/bench_train" 40 "$cfg" auto | awk -v c="$cfg" '$1 == c { print $5 }')"
  printf "%-48s %10s ms/step\n" "2 threads + the trainer's tuner (40 steps)" "$auto_ms"
  [ -n "$pid" ] && kill "$pid"
done
"$root/bench/bench_commands_load.sh" "$build" 3
"$root/bench/bench_sample.sh" "$build" 500 20
