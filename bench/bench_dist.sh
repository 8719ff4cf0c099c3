#!/usr/bin/env bash
# Data-parallel training on this machine: the same training (same flags, same bits) as
#   1 process  x T threads      attend --threads T train ...
#   W processes x 1 thread     mpirun -np W attend --threads 1 train ...
# printing ms per step and tokens/s (median over the logged windows after the first) and,
# for mpirun, the gradient exchange time per step that rank 0 measured.
#
#   bench/bench_dist.sh [BUILD_DIR] [STEPS]      (default build, 60 steps)
# Needs ../shared/data/tinyshakespeare.txt and mpirun. Config: cpu-char (4 layers, 4 heads,
# C 128, T 64, B 12), gradient_accumulation_steps 2, character level.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-60}"
attend="$build/attend"
corpus="$root/../shared/data/tinyshakespeare.txt"
[ -x "$attend" ] || { echo "bench_dist: $attend not built" >&2; exit 1; }
[ -f "$corpus" ] || { echo "bench_dist: $corpus not found" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_dist: mpirun not found" >&2; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$attend" prepare --data "$corpus" --out "$work/data" >/dev/null 2>&1
flags="train --data $work/data --preset cpu-char --gradient_accumulation_steps 2
       --max_iters $steps --eval_interval 100000 --checkpoint_interval 100000 --log_interval 10"

# Median tokens/s of the log windows after the first (column 6 of metrics.csv).
median_tok_s() {
  awk -F, 'NR > 2 && $6 != "" && $6 != "nan" { print $6 }' "$1/metrics.csv" | sort -g |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'
}
report() {  # name run_dir
  local tok; tok="$(median_tok_s "$2")"
  awk -v n="$1" -v t="$tok" 'BEGIN { printf "%-28s %8.1f ms/step %9.0f tok/s\n", n, 1000 * 1536 / t, t }'
}

echo "config: preset cpu-char, B 12, T 64, gradient_accumulation_steps 2 (1536 tokens/step), $steps steps"
echo "machine: $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
for rep in 1 2; do
  "$attend" --threads 2 $flags --out "$work/p1_$rep" >/dev/null 2>&1
  report "1 process x 2 threads" "$work/p1_$rep"
  mpirun --allow-run-as-root --oversubscribe -np 2 "$attend" --threads 1 $flags \
    --out "$work/p2_$rep" >/dev/null 2>"$work/p2_$rep.err"
  report "2 processes x 1 thread" "$work/p2_$rep"
  grep -o "gradient exchange.*" "$work/p2_$rep.err" | sed 's/^/  /'
  "$attend" --threads 1 $flags --out "$work/p0_$rep" >/dev/null 2>&1
  report "1 process x 1 thread" "$work/p0_$rep"
done
