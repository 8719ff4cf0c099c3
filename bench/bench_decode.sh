#!/usr/bin/env bash
# Decoding against its roof (issue #40): for each model and weight format, `attend sample`'s
# generation rate (greedy, from its debug line: new tokens after the first, the prompt's
# forward apart), the bytes of weights a token reads in that format, the GB/s that makes,
# and that as a fraction of the read bandwidth bench_bandwidth measures (same thread count)
# for a working set of that size: the roofline of a memory-bound product.
#   [ROUNDS=N] [MODELS="char s15 g2"] bench/bench_decode.sh [BUILD_DIR] [NEW_TOKENS]
#   (default build 128, 1 round, every model; at most 56 tokens on cpu-char, whose context
#   is 64 tokens)
# Models: the main job's (cpu-char: 4 layers, C 128, T 64; 0.8 MB), stories15m's shape
# (BPE 4096: 29 MB f32) and GPT-2 124M (GPT-2's tokenizer: 494 MB f32), random weights.
# With ROUNDS > 1 each round runs a model's three formats one after the other at each thread
# count; the table then holds each rate's median, and the medians of the rounds' own ratios
# bf16 / f32 and q8_0 / f32 follow it. On a VM whose speed moves by 10-25% from minute to
# minute (the 2-core Zen 5, 2026-12-07), one run's ratio moved from 2.09x to 3.19x; a ratio
# of neighbouring runs, over rounds, is what a goal on the ratio can be held to.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
new="${2:-128}"
rounds="${ROUNDS:-1}"
models="${MODELS:-char s15 g2}"
A="$build/attend"
data="${DATA:-$root/../shared/data/tinyshakespeare.txt}"
[ -f "$data" ] || { echo "bench_decode: corpus $data not found" >&2; exit 1; }
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
"$build/bench/bench_bandwidth" 1024 >"$w/bw.txt"
for m in $models; do
  case "$m" in
    char) "$A" train --data "$data" --out "$w/char" --max_iters 0 --eval_iters 1 >/dev/null 2>&1 ;;
    s15) "$A" train --preset stories15m --data "$data" --tokenizer bpe:4096 --max_iters 0 \
      --eval_iters 1 --batch_size 2 --out "$w/s15" >/dev/null 2>&1 ;;
    g2) "$A" train --preset gpt2 --data "$data" --tokenizer gpt2 --max_iters 0 --eval_iters 1 \
      --batch_size 1 --block_size 256 --out "$w/g2" >/dev/null 2>&1 ;;
    *) echo "bench_decode: unknown model $m (char, s15, g2)" >&2; exit 1 ;;
  esac
done
bandwidth() {  # BYTES THREADS: GB/s at the smallest measured working set >= BYTES
  awk -v b="$1" -v t="$2" 'NR > 2 { if ($1 * 1048576 >= b) { print (t == 1 ? $2 : $3); exit } }
                           END { }' "$w/bw.txt"
}
echo "attend $(git -C "$root" rev-parse --short HEAD), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ), $new new tokens"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)"
sed -n '1,$p' "$w/bw.txt" | sed 's/^/  /'
echo "rounds: $rounds"
: >"$w/rates.txt"  # round model format threads tokens/s bytes
for r in $(seq "$rounds"); do
  for m in $models; do
    for t in 1 2; do
      for f in f32 bf16 q8_0; do
        # inside the context (cpu-char's T is 64): past it every token reruns the whole window
        n="$new"
        [ "$m" = char ] && [ "$n" -gt 56 ] && n=56
        "$A" --threads "$t" --log-level debug sample --checkpoint "$w/$m" --prompt "The " \
          --max_new_tokens "$n" --temperature 0 --weights "$f" >/dev/null 2>"$w/err" || true
        line=$(grep "generated" "$w/err" || true)
        rate=$(echo "$line" | sed -n 's/.*generated [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s.*/\1/p')
        bytes=$(echo "$line" | sed -n 's/.* \([0-9]*\) bytes of weights a token.*/\1/p')
        [ -n "$rate" ] && [ -n "$bytes" ] || { echo "$m $f $t: failed (round $r)" >&2; continue; }
        echo "$r $m $f $t $rate $bytes" >>"$w/rates.txt"
      done
    done
  done
done
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
printf "%-10s %-6s %-8s %10s %12s %8s %8s %9s\n" model format threads tokens/s "bytes/token" GB/s roof "of roof"
for m in $models; do
  for f in f32 bf16 q8_0; do
    for t in 1 2; do
      rate=$(awk -v m="$m" -v f="$f" -v t="$t" '$2 == m && $3 == f && $4 == t { print $5 }' "$w/rates.txt" | median)
      bytes=$(awk -v m="$m" -v f="$f" -v t="$t" '$2 == m && $3 == f && $4 == t { print $6; exit }' "$w/rates.txt")
      [ -n "$rate" ] && [ -n "$bytes" ] || { printf "%-10s %-6s %-8s failed\n" "$m" "$f" "$t"; continue; }
      roof=$(bandwidth "$bytes" "$t")
      awk -v m="$m" -v f="$f" -v t="$t" -v r="$rate" -v b="$bytes" -v roof="$roof" 'BEGIN {
        gbs = r * b / 1e9; printf "%-10s %-6s %-8s %10.1f %12d %8.1f %8.1f %8.0f%%\n", m, f, t, r, b, gbs, roof, 100 * gbs / roof }'
    done
  done
done
if [ "$rounds" -gt 1 ]; then
  echo "tokens/s by round:"
  for m in $models; do
    for t in 1 2; do
      for f in f32 bf16 q8_0; do
        printf "  %-10s %-6s %-8s %s\n" "$m" "$f" "$t" "$(awk -v m="$m" -v f="$f" -v t="$t" \
          '$2 == m && $3 == f && $4 == t { printf "%s ", $5 }' "$w/rates.txt")"
      done
    done
  done
  echo "medians of the rounds' ratios (each round's formats run one after the other):"
  for m in $models; do
    for t in 1 2; do
      for f in bf16 q8_0; do
        ratio=$(awk -v m="$m" -v f="$f" -v t="$t" '$2 == m && $4 == t { v[$1 " " $3] = $5 }
          END { for (k in v) { split(k, p, " "); if (p[2] == f && v[p[1] " f32"] > 0) print v[k] / v[p[1] " f32"] } }' \
          "$w/rates.txt" | median | awk '{ printf "%.2fx", $1 }')
        printf "  %-10s %d thread(s) %-5s / f32 %s\n" "$m" "$t" "$f" "${ratio:-failed}"
      done
    done
  done
fi
