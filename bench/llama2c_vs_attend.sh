#!/usr/bin/env bash
# Generation speed against llama2.c's run.c (issue #25), one sitting: a stories15m-shaped
# Llama (6 layers, 6 heads, C 288, T 256) with a BPE vocabulary trained on
# tinyshakespeare, random weights (speed does not depend on them, and greedy text from
# random weights is varied enough to compare), exported with `attend export --format
# llama2c`; both programs start from token 1 (llama2.c's BOS, a byte 0x01 for attend's
# byte-level BPE) and generate greedily. Rates are each program's own report: run.c's
# "achieved tok/s" (from its second token on), attend's debug line (from the first).
# Idle and under a CPU hog (one busy loop in another process), 1 and 2 threads.
#
#   LLAMA2C_DIR=path/to/llama2.c bench/llama2c_vs_attend.sh [BUILD_DIR] [STEPS] [REPS]
#   (default build 256 3). LLAMA2C_DIR is a checkout of github.com/karpathy/llama2.c; its
#   run is built with its Makefile's fastest OpenMP target (`make runomp`: -Ofast
#   -fopenmp -march=native) when missing. DATA= another corpus.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-256}"
reps="${3:-3}"
data="${DATA:-$root/../shared/data/tinyshakespeare.txt}"
l2c="${LLAMA2C_DIR:-}"
[ -n "$l2c" ] && [ -f "$l2c/run.c" ] || {
  echo "llama2c_vs_attend: set LLAMA2C_DIR to a llama2.c checkout (with run.c); skipped"
  exit 77
}
[ -f "$data" ] || { echo "llama2c_vs_attend: corpus $data not found" >&2; exit 1; }
A="$build/attend"
[ -x "$A" ] || { echo "llama2c_vs_attend: $A not built" >&2; exit 1; }
[ -x "$l2c/run" ] || make -C "$l2c" runomp >/dev/null
w="$(mktemp -d)"
pid=""
trap 'rm -rf "$w"; [ -n "$pid" ] && kill "$pid" 2>/dev/null || true' EXIT
"$A" train --preset stories15m --data "$data" --tokenizer bpe:32000 --max_iters 0 \
  --eval_iters 1 --batch_size 2 --out "$w/run" >"$w/train.log" 2>&1
"$A" export --format llama2c --checkpoint "$w/run" --out "$w/m" >/dev/null
printf '\001' >"$w/prompt.txt"
new=$steps  # run.c's -n N: N forwards from BOS, N new tokens
attend_rate() {  # THREADS|auto: tokens/s; text in $w/a.txt
  local threads=(--threads "$1")
  [ "$1" = auto ] && threads=()
  "$A" "${threads[@]}" --log-level debug sample --checkpoint "$w/run" --prompt_file "$w/prompt.txt" \
    --max_new_tokens "$new" --temperature 0 >"$w/a.txt" 2>"$w/a.err"
  sed -n 's/.*sampled [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s.*/\1/p' "$w/a.err"
}
run_rate() {  # THREADS|auto: tokens/s; text in $w/r.txt
  local n="$1"
  [ "$n" = auto ] && n="$(nproc)"  # run.c has no policy of its own: OpenMP's default
  OMP_NUM_THREADS="$n" "$l2c/run" "$w/m/model.bin" -z "$w/m/tokenizer.bin" -t 0 -n "$steps" -i "" \
    >"$w/r.txt" 2>"$w/r.err"
  sed -n 's/^achieved tok\/s: \([0-9.]*\).*/\1/p' "$w/r.err"
}
echo "attend $(git -C "$root" rev-parse --short HEAD), llama2.c $(git -C "$l2c" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
sed -n 's/.*model: \([0-9]*\) parameters \(.*\); .*/model: \1 parameters \2/p' "$w/train.log"
echo "greedy, $new new tokens; tokens/s per round (attend auto: its own thread policy)"
printf "%-5s %-7s %-28s %-28s\n" hog threads attend "run.c"
for hog in no yes; do
  if [ "$hog" = yes ]; then
    (while :; do :; done) &
    pid=$!
  fi
  for t in 1 2 auto; do
    a="" r=""
    for _ in $(seq "$reps"); do
      a="$a $(attend_rate "$t")"
      r="$r $(run_rate "$t")"
    done
    printf "%-5s %-7s %-28s %-28s\n" "$hog" "$t" "$a" "$r"
  done
  [ -n "$pid" ] && kill "$pid" && pid=""
done
# The same greedy text: attend prints its prompt (the byte 0x01), run.c drops BOS and the
# space a SentencePiece decoder strips after it.
if [ "$(tail -c +2 "$w/a.txt" | sed 's/^ //')" = "$(cat "$w/r.txt")" ]; then
  echo "greedy text: identical"
else
  echo "greedy text: DIFFERS"; head -c 200 "$w/a.txt"; echo; head -c 200 "$w/r.txt"; echo
fi
