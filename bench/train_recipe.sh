#!/usr/bin/env bash
# nanoGPT's CPU recipe (char level; 4 layers, 4 heads, C 128, block 64, batch 12, lr 1e-3,
# 2000 iters, warmup 100, cosine to 1e-4, beta2 0.99, dropout 0) on tinyshakespeare.
# nanoGPT reports val loss 1.88 for it. Prints the final val loss and the wall time, then
# runs the same recipe in PyTorch (bench/torch_recipe.py, when python3-torch is there) in
# the same sitting and prints both times and their ratio.
#   bench/train_recipe.sh [tinyshakespeare.txt] [build dir]
#   PRECISION=bf16 trains attend's run with --precision bf16; SKIP_TORCH=1 leaves out PyTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
text="${1:-../shared/data/tinyshakespeare.txt}"
build="${2:-build}"
run="$(mktemp -d)/run"
echo "attend $("$build/attend" --version | cut -d' ' -f2), threads ${OMP_NUM_THREADS:-$(nproc)}, corpus $text"
start=$(date +%s%N)
# PRECISION=bf16: attend's run with bf16 products (--precision bf16).
"$build/attend" train --data "$text" --out "$run" --preset cpu-char --eval_interval 500 --eval_iters 200 \
  --log_interval 100 --precision "${PRECISION:-f32}" 2>&1 | tail -n 8
end=$(date +%s%N)
attend_ms=$(( (end - start) / 1000000 ))
echo "wall time: $attend_ms ms"
"$build/attend" eval --checkpoint "$run" --data "$run/data/val.bin"
rm -rf "$(dirname "$run")"
if [ -z "${SKIP_TORCH:-}" ] && /usr/bin/python3 -c "import torch" 2>/dev/null; then
  # As in bench_vs_torch.sh: OpenBLAS's AVX-512 kernels for the twin wherever the CPU has
  # AVX-512 (Debian 12's OpenBLAS runs its AVX2 ones on Zen 5); TORCH_OPENBLAS_CORETYPE=
  # turns that off.
  if [ -z "${TORCH_OPENBLAS_CORETYPE+set}" ] && grep -qw avx512f /proc/cpuinfo; then
    TORCH_OPENBLAS_CORETYPE=SkylakeX
  fi
  torch_env=()
  [ -n "${TORCH_OPENBLAS_CORETYPE:-}" ] && torch_env=(OPENBLAS_CORETYPE="$TORCH_OPENBLAS_CORETYPE")
  echo "PyTorch twin: OpenBLAS kernels $(env "${torch_env[@]}" OPENBLAS_VERBOSE=2 /usr/bin/python3 -c \
    'import torch; a = torch.ones(64, 64); (a @ a).sum()' 2>&1 | sed -n 's/^Core: //p' | head -1)"
  out=$(env "${torch_env[@]}" /usr/bin/python3 bench/torch_recipe.py "$text" --threads "${OMP_NUM_THREADS:-$(nproc)}")
  echo "$out"
  torch_ms=$(echo "$out" | sed -n 's/.*wall time: \([0-9]*\) ms.*/\1/p')
  awk -v a="$attend_ms" -v t="$torch_ms" \
    'BEGIN { printf "attend %.1f s, PyTorch %.1f s: attend takes %.2fx PyTorch'"'"'s wall time\n", a / 1000, t / 1000, a / t }'
else
  echo "PyTorch twin skipped: python3-torch is not installed (apt-get install python3-torch)"
fi
