#!/usr/bin/env bash
# README's first command: install what is missing, build, then the main job: train a small
# GPT (nanoGPT's CPU recipe, character level) on a corpus and sample from it.
#   scripts/main.sh [CORPUS [RUN_DIR]]
# CORPUS defaults to the fortune files of Debian's fortunes package (installed by the
# set-up), RUN_DIR to runs/<corpus name>. Run it again to continue an interrupted run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

corpus="${1:-/usr/share/games/fortunes}"
run="${2:-runs/$(basename "$corpus" .txt)}"
if ls "$run"/ckpt_*.h5 >/dev/null 2>&1; then
  ./build/attend train --resume "$run"
else
  ./build/attend train --data "$corpus" --out "$run"
fi
echo
echo "--- a sample from $run ---"
./build/attend sample --checkpoint "$run" --max_new_tokens 400 --seed 1
echo "--- loss curve: $run/loss.svg, metrics: $run/metrics.csv ---"
