#!/usr/bin/env bash
# attend against its PyTorch twin in one sitting: issue #14's configs A, B, C (GPT-2's
# block) and issue #24's D (llama-char) and E (stories15m, V 4096), the same
# model and step on both sides (bench/bench_train.cpp, bench/torch_twin.py), alternating
# attend and torch per config, REPS rounds. Prints ms/step, tokens/s, attend's speed-up
# (torch ms / attend ms) and MFU against the FMA peak bench_peak measures first.
#
#   bench/bench_vs_torch.sh [BUILD_DIR] [STEPS] [REPS]     (default build 10 2; 2 threads)
#   CONFIGS="C" runs only some of the configs (default "C A B D E"); THREADS=N another count.
#   PRECISION=bf16: attend with bf16 products (ATTEND_PRECISION=bf16) against the twin under
#   torch.autocast("cpu", dtype=torch.bfloat16); MFU then against the measured bf16 peak.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-10}"
reps="${3:-2}"
threads="${THREADS:-2}"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "bench_vs_torch: python3-torch not installed (apt-get install python3-torch); skipped"
  exit 77
fi
# Debian's python3-torch calls whichever libblas.so.3 is selected; the reference BLAS makes
# it 20x slower than it is (an unfair twin). The issue's figures used OpenBLAS (OpenMP).
if ! readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 | grep -q openblas; then
  echo "bench_vs_torch: libblas.so.3 is not OpenBLAS; install libopenblas0-openmp first" >&2
  exit 1
fi
# OpenBLAS 0.3.21 (Debian 12) does not know Zen 5 and runs its Haswell (AVX2) kernels there,
# half the FMA rate of the AVX-512 ones attend's GEMM uses: give the twin OpenBLAS's
# AVX-512 kernels wherever the CPU has AVX-512 (TORCH_OPENBLAS_CORETYPE= to turn that off,
# or another OpenBLAS core name).
if [ -z "${TORCH_OPENBLAS_CORETYPE+set}" ] && grep -qw avx512f /proc/cpuinfo; then
  TORCH_OPENBLAS_CORETYPE=SkylakeX
fi
torch_env=()
[ -n "${TORCH_OPENBLAS_CORETYPE:-}" ] && torch_env=(OPENBLAS_CORETYPE="$TORCH_OPENBLAS_CORETYPE")
openblas_core="$(env "${torch_env[@]}" OPENBLAS_VERBOSE=2 /usr/bin/python3 -c \
  'import torch; a = torch.ones(64, 64); (a @ a).sum()' 2>&1 | sed -n 's/^Core: //p' | head -1)"
for b in bench_train bench_peak; do
  [ -x "$build/bench/$b" ] || { echo "bench_vs_torch: $build/bench/$b not built" >&2; exit 1; }
done

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%Y-%m-%dT%H:%MZ); $threads threads"
peak_line="$("$build/bench/bench_peak" "$threads")"
echo "$peak_line"
echo "PyTorch's OpenBLAS kernels: ${openblas_core:-unknown}${TORCH_OPENBLAS_CORETYPE:+ (OPENBLAS_CORETYPE=$TORCH_OPENBLAS_CORETYPE)}"
# The machine's speed drifts (its neighbours): a slow moment only lowers a measurement, so
# the peak is the best bench_peak run, taken before and again after the steps, and every
# MFU is against that (conservative) figure.
peak="$(echo "$peak_line" | sed -n '1s/.*best \([0-9.]*\)).*/\1/p')"
precision="${PRECISION:-f32}"
torch_args=()
if [ "$precision" = bf16 ]; then
  peak="$(echo "$peak_line" | sed -n 's/^bf16 peak:.*best \([0-9.]*\)).*/\1/p')"
  [ -n "$peak" ] || { echo "bench_vs_torch: no bf16 peak on this CPU (no AVX512_BF16): MFU against the f32 peak" >&2;
                      peak="$(echo "$peak_line" | sed -n '1s/.*best \([0-9.]*\)).*/\1/p')"; }
  torch_args=(--bf16)
fi
echo "precision: $precision (MFU against $peak GFLOP/s)"
printf "%-4s %5s %12s %12s %10s %10s %9s %9s\n" cfg round "attend ms" "torch ms" "speed-up" \
  "attend tok/s" "attend MFU" "torch MFU"
for rep in $(seq "$reps"); do
  for cfg in ${CONFIGS:-C A B D E}; do
    a="$(ATTEND_PRECISION=$precision OMP_NUM_THREADS=$threads "$build/bench/bench_train" "$steps" "$cfg" | awk -v c="$cfg" '$1 == c')"
    t="$(env "${torch_env[@]}" /usr/bin/python3 "$root/bench/torch_twin.py" "$steps" "$cfg" --threads "$threads" "${torch_args[@]}" | awk -v c="$cfg" '$1 == c')"
    # attend: name params B T ms tok/s GFLOP/s; torch: name params B T ms tok/s
    echo "$a|$t" | awk -F'|' -v peak="$peak" -v rep="$rep" '{
      split($1, a, " "); split($2, t, " ");
      flops = a[7] * a[5] / 1000;                      # GFLOP per step
      printf "%-4s %5d %12.1f %12.1f %9.2fx %12.0f %8.1f%% %8.1f%%\n", a[1], rep, a[5], t[5],
             t[5] / a[5], a[6], 100 * a[7] / peak, 100 * flops / (t[5] / 1000) / peak }'
  done
done
peak_line="$("$build/bench/bench_peak" "$threads")"
echo "again after the steps: $peak_line"
which_line='1p'
[ "$precision" = bf16 ] && which_line='/^bf16 peak:/p'
echo "$peak_line" | sed -n "$which_line" | sed -n 's/.*best \([0-9.]*\)).*/\1/p' | awk -v p="$peak" \
  '{ if ($1 > p) printf "(the MFU columns used %.1f GFLOP/s; the best peak seen is %.1f: scale them by %.3f)\n", p, $1, p / $1 }'
