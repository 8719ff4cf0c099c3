#!/usr/bin/env bash
# What --weights costs in quality (issue #40): validation loss and perplexity with the
# weights in f32, bf16 and q8_0, and how long greedy text agrees with f32's, for the main
# job's model (cpu-char, its recipe for STEPS steps on tinyshakespeare) and a Llama
# (llama-char preset, the same steps).
#   bench/bench_weights_quality.sh [BUILD_DIR] [STEPS]    (default build 300)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-300}"
A="$build/attend"
data="${DATA:-$root/../shared/data/tinyshakespeare.txt}"
[ -f "$data" ] || { echo "bench_weights_quality: corpus $data not found" >&2; exit 1; }
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
echo "attend $(git -C "$root" rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $steps steps each"
for preset in cpu-char llama-char; do
  "$A" train --data "$data" --preset "$preset" --max_iters "$steps" --eval_iters 5 --out "$w/$preset" >"$w/log" 2>&1
  echo "$preset: $(sed -n 's/.*model: \([0-9]*\) parameters \(.*\); .*/\1 parameters \2/p' "$w/log" | head -1)"
  "$A" sample --checkpoint "$w/$preset" --prompt "ROMEO:" --temperature 0 --max_new_tokens 200 2>/dev/null >"$w/f32.txt"
  for f in f32 bf16 q8_0; do
    loss=$("$A" eval --checkpoint "$w/$preset" --data "$w/$preset/data/val.bin" --weights "$f" 2>/dev/null | sed -n 's/^loss //p')
    "$A" sample --checkpoint "$w/$preset" --prompt "ROMEO:" --temperature 0 --max_new_tokens 200 --weights "$f" 2>/dev/null >"$w/$f.txt"
    same=$( (cmp "$w/f32.txt" "$w/$f.txt" 2>/dev/null || true) | sed -n 's/.*byte \([0-9]*\),.*/\1/p')
    same=${same:-all}
    awk -v f="$f" -v l="$loss" -v s="$same" 'BEGIN { printf "  %-5s val loss %.5f  perplexity %.4f  greedy text = f32 up to byte %s of 206\n", f, l, exp(l), s }'
  done
done
