#!/usr/bin/env bash
# Decoding speed against llama.cpp on the same GGUF file (issues #39, #40), one sitting: a
# stories15m-shaped Llama (6 layers, 6 heads, C 288, T 256) with a BPE vocabulary trained
# on tinyshakespeare, random weights (speed does not depend on them), exported with
# `attend export --format gguf` at F32 and Q8_0 and run by node-llama-cpp's prebuilt CPU
# llama.cpp (bench/llama_cpp_bench.mjs: prompt processing and generation, tokens/s) and by
# `attend sample --weights f32|bf16|q8_0` (greedy, the same number of new tokens; its
# debug line's prompt and generation rates). 1 and 2 threads, idle.
#
#   bench/llama_cpp_vs_attend.sh [BUILD_DIR] [NEW_TOKENS] [PROMPT_TOKENS]   (build 128 64)
# node-llama-cpp from $ATTEND_NODE_LLAMA_CPP or the cache scripts/setup.sh --test-extras
# fills; exit 77 (skipped) without it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
new="${2:-128}"
prompt="${3:-64}"
data="${DATA:-$root/../shared/data/tinyshakespeare.txt}"
pkg="${ATTEND_NODE_LLAMA_CPP:-${XDG_CACHE_HOME:-$HOME/.cache}/attend/node-llama-cpp}"
[ -f "$pkg/node_modules/node-llama-cpp/package.json" ] && command -v node >/dev/null || {
  echo "llama_cpp_vs_attend: node-llama-cpp not in $pkg (scripts/setup.sh --test-extras); skipped"
  exit 77
}
[ -f "$data" ] || { echo "llama_cpp_vs_attend: corpus $data not found" >&2; exit 1; }
A="$build/attend"
[ -x "$A" ] || { echo "llama_cpp_vs_attend: $A not built" >&2; exit 1; }
w="$(mktemp -d)"
trap 'rm -rf "$w"' EXIT
"$A" train --preset stories15m --data "$data" --tokenizer bpe:4096 --max_iters 0 \
  --eval_iters 1 --batch_size 2 --out "$w/run" >"$w/train.log" 2>&1
for t in f32 q8_0; do
  "$A" export --checkpoint "$w/run" --format gguf --dtype "$t" --out "$w/m_$t.gguf" >/dev/null
done
# attend's prompt: the corpus's first lines (about PROMPT_TOKENS tokens; attend's rate is
# of generation only, so its prompt's length matters little).
head -c $((prompt * 3)) "$data" >"$w/prompt.txt"
attend_rates() {  # THREADS WEIGHTS: "prompt_rate gen_rate"
  "$A" --threads "$1" --log-level debug sample --checkpoint "$w/run" --prompt_file "$w/prompt.txt" \
    --max_new_tokens "$new" --temperature 0 --weights "$2" >/dev/null 2>"$w/a.err"
  sed -n 's/.*prompt [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s; generated [0-9]* tokens in [0-9.]* s: \([0-9.]*\) tokens\/s.*/\1 \2/p' "$w/a.err"
}
llama_rates() {  # THREADS TYPE: "prompt_rate gen_rate"
  node "$root/bench/llama_cpp_bench.mjs" "$pkg" "$w/m_$2.gguf" "$1" "$prompt" "$new" 2>/dev/null |
    sed -n 's/.*: \([0-9.]*\) tokens\/s/\1/p' | tr '\n' ' '
}
echo "attend $(git -C "$root" rev-parse --short HEAD), node-llama-cpp $(node -p "require('$pkg/node_modules/node-llama-cpp/package.json').version"), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 '^model\s' /proc/cpuinfo | cut -d: -f2 | xargs)"
sed -n 's/.*model: \([0-9]*\) parameters \(.*\); .*/model: \1 parameters \2/p' "$w/train.log"
ls -l "$w"/m_*.gguf | awk '{print "file: " $NF " " $5 " bytes"}' | sed "s#$w/##"
echo "prompt $prompt tokens, $new new tokens, greedy; tokens/s"
printf "%-8s %-8s %-22s %-22s\n" threads weights "llama.cpp pp / gen" "attend pp / gen"
for th in 1 2; do
  for t in f32 q8_0; do
    printf "%-8s %-8s %-22s %-22s\n" "$th" "$t" "$(llama_rates "$th" "$t")" "$(attend_rates "$th" "$t")"
  done
  printf "%-8s %-8s %-22s %-22s\n" "$th" bf16 "-" "$(attend_rates "$th" bf16)"
done
