#!/usr/bin/env bash
# Training steps with and without a CPU hog (a busy loop in another process), for 1 and 2
# threads and for OpenMP's wait policies, to see what the threads do on a shared machine.
#   bench/bench_load.sh [BUILD_DIR] [STEPS] [CONFIG]     (default build 10 C)
# Each line: the median ms/step of bench_train for CONFIG.
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
  run "2 threads, attend's default" OMP_NUM_THREADS=2
  run "2 threads, OMP_WAIT_POLICY=active" OMP_NUM_THREADS=2 OMP_WAIT_POLICY=active ATTEND_NO_REEXEC=1
  run "2 threads, OMP_WAIT_POLICY=passive" OMP_NUM_THREADS=2 OMP_WAIT_POLICY=passive
  run "2 threads, libgomp's default spinning" OMP_NUM_THREADS=2 ATTEND_OMP_DEFAULTS=1
  run "1 thread" OMP_NUM_THREADS=1
  [ -n "$pid" ] && kill "$pid"
done
