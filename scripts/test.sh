#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test-extras
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
ctest --test-dir build --output-on-failure -j "$(nproc)"
