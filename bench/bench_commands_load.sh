#!/usr/bin/env bash
# Every computing command, timed idle and under a CPU hog (one busy loop in another
# process), with the adaptive thread count (attend's default) and with the count fixed at
# 1 and at 2 by OMP_NUM_THREADS. See Note [Threads on a busy machine] (tensor/threads.h).
#   bench/bench_commands_load.sh [BUILD_DIR] [REPEATS]        (default build 3)
# Needs a trained run: it trains one (300 steps of the main job's recipe on Debian's
# fortunes) into a temporary folder first. Each cell is the median wall time of REPEATS
# runs, in seconds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
repeats="${2:-3}"
A="$build/attend"
w="$(mktemp -d)"
pid=""
trap 'rm -rf "$w"; [ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
corpus=/usr/share/games/fortunes
[ -e "$corpus" ] || { echo "bench_commands_load: needs $corpus (apt-get install fortunes)"; exit 1; }
OMP_NUM_THREADS=2 "$A" train --data "$corpus" --out "$w/run" --max_iters 300 >/dev/null 2>&1
declare -A cmds=(
  [sample]="sample --checkpoint $w/run --prompt The --max_new_tokens 500"
  [eval]="eval --checkpoint $w/run --data $w/run/data/val.bin"
  [attention]="attention --checkpoint $w/run --prompt Whereupon --out $w/a.html"
  [heads]="heads --checkpoint $w/run --data $w/run/data/val.bin --batches 4"
  [diagram]="diagram --checkpoint $w/run --prompt Hello --out $w/d.html"
  [gradcheck]="gradcheck"
  [export]="export --checkpoint $w/run --out $w/hf"
  [train]="train --data $corpus --out $w/t --max_iters 40 --eval_interval 1000"
)
order=(sample eval attention heads diagram gradcheck export train)
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
time_cmd() {  # env... -- name
  local name="${*: -1}" times=() s e
  for _ in $(seq "$repeats"); do
    rm -rf "$w/t" "$w/hf"
    s=$(date +%s.%N)
    # shellcheck disable=SC2086
    env "${@:1:$#-1}" "$A" ${cmds[$name]} >/dev/null 2>&1
    e=$(date +%s.%N)
    times+=("$(echo "$e - $s" | bc)")
  done
  printf "%s\n" "${times[@]}" | median
}
echo "attend $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), median of $repeats"
printf "%-10s %-5s %9s %9s %9s\n" command hog adaptive 1-thread 2-threads
for hog in no yes; do
  if [ "$hog" = yes ]; then
    (while :; do :; done) &
    pid=$!
  fi
  for c in "${order[@]}"; do
    printf "%-10s %-5s %9.2f %9.2f %9.2f\n" "$c" "$hog" "$(time_cmd X=1 "$c")" \
      "$(time_cmd OMP_NUM_THREADS=1 "$c")" "$(time_cmd OMP_NUM_THREADS=2 "$c")"
  done
  [ -n "$pid" ] && kill "$pid" && pid=""
done
