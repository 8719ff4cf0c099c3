#!/usr/bin/env bash
# LoRA against full finetuning (issue #41's goals): the same model, data and batch, one
# `attend train --init_from BASE` run each, STEPS steps: the median ms/step of the steps
# after the first (from the log) and the process's peak resident memory (/usr/bin/time).
# Models: GPT-2 124M's shape with GPT-2's tokenizer (B 4, T 256) and stories15m's (B 4,
# T 256, a char vocabulary), each from a 0-step base; LoRA R 8 on q and v (the default).
# Modes: full, lora (f32 base), lora16 (LoRA on a bf16 base: --base_weights bf16).
# Also the size of the run's checkpoint (a LoRA one holds the adapters, not the base).
#   bench/bench_lora.sh [BUILD_DIR] [STEPS]          (default build 4)
#   MODELS="stories15m" runs only some (default "gpt2 stories15m"); MODES likewise (default
#   "full lora lora16"); ROUNDS=N runs the modes N times, alternating (default 1): this
#   machine's speed drifts, so compare modes within a round, or medians over rounds.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-4}"
A="$build/attend"
[ -x "$A" ] || { echo "bench_lora: $A not built" >&2; exit 1; }
case "$steps" in '' | *[!0-9]*) echo "bench_lora: STEPS must be a whole number, got '$steps'" >&2; exit 2 ;; esac
[ "$steps" -ge 2 ] || { echo "bench_lora: STEPS must be at least 2 (the first is not timed)" >&2; exit 2; }
text="$root/../shared/data/tinyshakespeare.txt"
[ -f "$text" ] || { echo "bench_lora: needs $text" >&2; exit 1; }
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-11s %-6s %5s %10s %10s %10s\n" model mode round "ms/step" "peak MB" "ckpt MB"
# median of the ms/step the log prints for steps 2.. (the first pays for warm-up)
median_ms() { grep -o '[0-9.]* ms/step' "$1" | awk 'NR > 1 { print $1 }' | sort -n |
  awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
for model in ${MODELS:-gpt2 stories15m}; do
  case "$model" in
    gpt2) shape="--preset gpt2 --tokenizer gpt2 --block_size 256" ;;
    stories15m) shape="--preset stories15m --tokenizer char" ;;
    *) echo "bench_lora: unknown model '$model' (gpt2, stories15m)" >&2; exit 2 ;;
  esac
  # shellcheck disable=SC2086
  "$A" train --data "$text" --out "$w/$model-base" $shape --max_iters 0 --eval_iters 1 \
    --batch_size 1 >/dev/null 2>&1
  for round in $(seq "${ROUNDS:-1}"); do
  for mode in ${MODES:-full lora lora16}; do
    case "$mode" in
      full) extra="" ;;
      lora) extra="--lora_rank 8" ;;
      lora16) extra="--lora_rank 8 --base_weights bf16" ;;
      *) echo "bench_lora: unknown mode '$mode' (full, lora, lora16)" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    /usr/bin/time -f "%M" -o "$w/rss" "$A" train --data "$w/$model-base/data" \
      --init_from "$w/$model-base" --out "$w/$model-$mode" --batch_size 4 --max_iters "$steps" \
      --log_interval 1 --eval_interval 100000 --checkpoint_interval 100000 $extra \
      >"$w/log" 2>&1 || { cat "$w/log" >&2; exit 1; }
    ckpt="$(find "$w/$model-$mode" -name 'ckpt_*.h5' | sort | tail -1)"
    printf "%-11s %-6s %5d %10.1f %10.1f %10.2f\n" "$model" "$mode" "$round" \
      "$(median_ms "$w/log")" "$(awk '{ print $1 / 1024 }' "$w/rss")" \
      "$(stat -c %s "$ckpt" | awk '{ print $1 / 1048576 }')"
    rm -rf "${w:?}/$model-$mode"
  done
  done
done
