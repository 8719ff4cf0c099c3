#!/usr/bin/env bash
# The long fuzzing run, by hand: every parser's fuzz test with many more cases than the
# suite's bounded smoke run, in the release build and (with --sanitize) under ASan + UBSan.
# Prints each target's cases, refused, accepted and findings; exits non-zero on a finding,
# a crash or a hang (each target has a time limit).
#   scripts/fuzz.sh [CASES] [--sanitize]
set -euo pipefail
cd "$(dirname "$0")/.."
cases="${1:-20000}"
build=build
if [ "${2:-}" = "--sanitize" ]; then build=build-asan; fi
if [ ! -x "$build/tests/train_tests" ]; then
  echo "fuzz: build first (scripts/test.sh, or scripts/test.sh --sanitize for build-asan)" >&2
  exit 1
fi
status=0
for suite in data_tests io_tests train_tests; do
  # One process per test case, so a crash names its target.
  while IFS= read -r name; do
    case "$name" in fuzz:*) ;; *) continue ;; esac
    start=$(date +%s)
    if ! ATTEND_FUZZ_CASES="$cases" timeout 3600 "$build/tests/$suite" "--test-case=$name" \
        2>&1 >/dev/null | grep '^FUZZ'; then
      echo "FINDING: '$name' crashed, hung or failed (rerun: ATTEND_FUZZ_CASES=$cases $build/tests/$suite --test-case='$name')"
      status=1
    fi
    echo "  ($(( $(date +%s) - start )) s)"
  done < <("$build/tests/$suite" --list-test-cases --no-version 2>/dev/null | sed -n 's/^\(fuzz:.*\)$/\1/p')
done
exit $status
