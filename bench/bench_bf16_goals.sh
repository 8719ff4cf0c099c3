#!/usr/bin/env bash
# Issue #27's speed and memory goals in one sitting: bf16 against attend's own f32 step on
# A (baby GPT) and B (GPT-2 124M, T 64), alternating the precisions ROUNDS times
# (bench_train STEPS each: median ms/step, and peak tensor storage), then each config's
# median f32 ms / median bf16 ms beside the goal (1.6x, and a lower peak); then the bf16
# products on GPT-2's shapes (bench_bf16_layouts, the packing's share). Says first whether
# the CPU has AVX512_BF16: without it every bf16 product is the AVX2 emulation, and the
# ratios measure the emulation, not the goal. The PyTorch autocast twin is
# `PRECISION=bf16 bench/bench_vs_torch.sh` (slow where the CPU lacks bf16 arithmetic).
#   bench/bench_bf16_goals.sh [BUILD_DIR] [STEPS] [ROUNDS]     (default build 10 3)
#   CONFIGS="A" runs only some (default "A B"); THREADS=N (default: all cores).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-10}"
rounds="${3:-3}"
threads="${THREADS:-$(nproc)}"
for b in bench_train bench_bf16_layouts; do
  [ -x "$build/bench/$b" ] || { echo "bench_bf16_goals: $build/bench/$b not built" >&2; exit 1; }
done
case "$steps$rounds" in *[!0-9]*) echo "bench_bf16_goals: STEPS and ROUNDS must be whole numbers, got '$steps' '$rounds'" >&2; exit 2 ;; esac
if grep -qw avx512_bf16 /proc/cpuinfo; then
  if [ "${ATTEND_BF16:-}" = native ] || { [ -z "${ATTEND_BF16:-}" ] && ! grep -q GenuineIntel /proc/cpuinfo; }; then
    kind="native (AVX512_BF16: vdpbf16ps)"
  else
    kind="AVX-512 FMAs on bf16 values (attend's choice on Intel, where vdpbf16ps runs at half the FMA rate; ATTEND_BF16=native for vdpbf16ps)"
  fi
elif grep -qw avx512f /proc/cpuinfo; then
  kind="AVX-512 FMAs on bf16 values (no AVX512_BF16 on this CPU: the goal needs it)"
else
  kind="emulated (no AVX512_BF16 on this CPU: these ratios are the emulation's, not the goal's)"
fi
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%Y-%m-%dT%H:%MZ); $threads threads"
echo "bf16 products: $kind"
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
printf "%-4s %5s %-5s %10s %10s\n" cfg round prec "ms/step" "peak MB"
for rep in $(seq "$rounds"); do
  for cfg in ${CONFIGS:-A B}; do
    for p in f32 bf16; do
      # bench_train: name params B T ms tok/s GFLOP/s peak
      line="$(ATTEND_PRECISION=$p OMP_NUM_THREADS=$threads "$build/bench/bench_train" "$steps" "$cfg" | awk -v c="$cfg" '$1 == c')"
      echo "$line" | awk -v r="$rep" -v p="$p" '{ printf "%-4s %5d %-5s %10.1f %10.1f\n", $1, r, p, $5, $8 }'
      echo "$line" | awk -v p="$p" '{ print $1, p, $5, $8 }' >> "$w/runs"
    done
  done
done
echo
echo "goal: bf16 at least 1.6x f32's step, and a lower peak (issue #27)"
for cfg in ${CONFIGS:-A B}; do
  med() { awk -v c="$cfg" -v p="$1" -v k="$2" '$1 == c && $2 == p { print $k }' "$w/runs" | sort -g |
          awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  f="$(med f32 3)"; h="$(med bf16 3)"; pf="$(med f32 4)"; ph="$(med bf16 4)"
  awk -v c="$cfg" -v f="$f" -v h="$h" -v pf="$pf" -v ph="$ph" 'BEGIN {
    s = f / h;
    printf "%-4s median f32 %.1f ms, bf16 %.1f ms: %.2fx (%s); peak %.1f -> %.1f MB (%s)\n", c, f, h, s,
           (s >= 1.6 ? "met" : "not met"), pf, ph, (ph < pf ? "lower" : "not lower") }'
done
echo
OMP_NUM_THREADS=$threads "$build/bench/bench_bf16_layouts" 5
