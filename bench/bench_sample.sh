#!/usr/bin/env bash
# Generation speed: `attend sample` tokens/s (its own report on stderr with --log-level debug: from the first
# token to the last, the prompt included) for the main job's model and for GPT-2 124M
# (random weights), idle and under a CPU hog (one busy loop in another process), beside
# nanoGPT's sample.py loop in PyTorch on the same architecture (bench/torch_sample.py:
# no key/value cache, as nanoGPT has none). attend runs with its default thread policy
# (Note [Threads on a busy machine]) and with 1 thread fixed.
#   bench/bench_sample.sh [BUILD_DIR] [TOKENS] [TOKENS_GPT2]    (default build 500 100)
# (GPT-2 124M gets fewer tokens: nanoGPT's loop recomputes the whole context per token.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
n_char="${2:-500}"
n_g2="${3:-100}"
A="$build/attend"
w="$(mktemp -d)"
pid=""
trap 'rm -rf "$w"; [ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
corpus=/usr/share/games/fortunes
[ -e "$corpus" ] || { echo "bench_sample: needs $corpus (apt-get install fortunes)"; exit 1; }
# The main job's model (preset cpu-char: 4 layers, 4 heads, C 128, T 64), a short run.
"$A" train --data "$corpus" --out "$w/char" --max_iters 50 --eval_iters 2 >/dev/null 2>&1
# GPT-2 124M, random weights (0 steps), GPT-2's tokenizer.
find "$corpus" -maxdepth 1 -type f ! -name "*.dat" -exec cat {} + 2>/dev/null | head -c 200000 > "$w/small.txt" || true
"$A" train --data "$w/small.txt" --tokenizer gpt2 --preset gpt2 --out "$w/g2" --max_iters 0 \
  --eval_iters 1 --batch_size 1 >/dev/null 2>&1
# The twin gets OpenBLAS's AVX-512 kernels where the CPU has them (as bench_vs_torch.sh).
torch_env=(OMP_NUM_THREADS=2)
grep -qw avx512f /proc/cpuinfo && torch_env+=(OPENBLAS_CORETYPE=SkylakeX)
rate() {  # env... -- attend sample args: prints tokens/s
  env "$@" 2>&1 >/dev/null | sed -n 's/.*sampled [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s.*/\1/p'
}
echo "attend $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), $n_char new tokens (char), $n_g2 (gpt2); tokens/s"
printf "%-22s %-5s %12s %12s %14s\n" model hog "attend auto" "attend 1 thr" "torch (nanoGPT)"
for hog in no yes; do
  if [ "$hog" = yes ]; then
    (while :; do :; done) &
    pid=$!
  fi
  for m in char g2; do
    if [ "$m" = char ]; then
      shape="65 64 4 4 128"; label="cpu-char (main job)"; n=$n_char
    else
      shape="50257 1024 12 12 768"; label="gpt2 124M"; n=$n_g2
    fi
    a=$(rate X=1 "$A" --log-level debug sample --checkpoint "$w/$m" --prompt "The " --max_new_tokens "$n" --seed 1)
    b=$(rate OMP_NUM_THREADS=1 "$A" --log-level debug sample --checkpoint "$w/$m" --prompt "The " --max_new_tokens "$n" --seed 1)
    t=$(env "${torch_env[@]}" /usr/bin/python3 "$root/bench/torch_sample.py" $shape "$n" 2>/dev/null | sed -n 's/.*: \([0-9.]*\) tokens\/s.*/\1/p' || true)
    printf "%-22s %-5s %12s %12s %14s\n" "$label" "$hog" "$a" "$b" "${t:-n/a}"
  done
  [ -n "$pid" ] && kill "$pid" && pid=""
done
