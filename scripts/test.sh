#!/usr/bin/env bash
# README's test command: install what is missing, build, run every test suite; then build
# the loaders' and parsers' suites (data_tests, io_tests, train_tests, term_tests: token files,
# tokenizers, checkpoints, config, metrics, the keys of chat's line editor, their fuzzers) with AddressSanitizer + UndefinedBehavior-
# Sanitizer and run them too. CI runs exactly this.
#   scripts/test.sh              both
#   scripts/test.sh --sanitize   every suite under the sanitizers (longer; by hand)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test-extras
jobs="$(nproc)"
# The sanitizers' runtime: every finding fatal; leaks not checked (LeakSanitizer needs
# ptrace, which containers often forbid).
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" UBSAN_OPTIONS="print_stacktrace=1"
# ASan's shadow memory clashes with 32 bits of mmap randomisation (newer kernels); where
# the kernel uses more than 28 and setarch may turn randomisation off, run without it.
sanitized_ctest() {
  if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ] &&
    setarch "$(uname -m)" -R true 2>/dev/null; then
    setarch "$(uname -m)" -R ctest "$@"
  else
    ctest "$@"
  fi
}
sanitized_build() {
  # -O1: the sanitizers' usual level, and the quickest optimised build for CI.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" \
    -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" -DATTEND_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$jobs" "$@"
}
if [ "${1:-}" = "--sanitize" ]; then
  sanitized_build
  # The 300-step learning run is left out: under the sanitizers it takes many minutes.
  sanitized_ctest --test-dir build-asan --output-on-failure -j "$jobs" -E "300 steps"
  exit 0
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"
echo "--- the loaders' and parsers' suites under ASan + UBSan ---"
sanitized_build --target data_tests io_tests train_tests term_tests
sanitized_ctest --test-dir build-asan --output-on-failure -j "$jobs" \
  -R "^(data_tests|io_tests|train_tests|term_tests):" \
  -E "300 steps"
