#!/usr/bin/env bash
# Sets up, builds and runs every test; CI calls this. Every tree is built
# with clang, which also checks the lock annotations (a GUARDED_BY member
# touched without its lock fails the build), and compiles the CLI and ops/
# without optimization (FERRY_UNOPTIMIZED_TOOLS: the engine and the tests
# keep their flags). Stages:
#   suites     the unit, integration, CLI, Python and network-lab tests, and a
#              two-minute soak with faults on both transports (ctest)
#   address    the unit, integration and Python suites under AddressSanitizer
#              and UndefinedBehaviorSanitizer (scripts/sanitize.sh)
#   thread     the unit and integration suites under ThreadSanitizer
#   fuzz       every libFuzzer harness for 15 s, two at a time, linked against
#              the AddressSanitizer tree's libraries (scripts/fuzz.sh)
# Every stage runs even when an earlier one failed; the run fails if any did.
#
#   scripts/test.sh                   every stage
#   scripts/test.sh --quick [ARGS]    the suites only; ARGS go to ctest
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi

scripts/setup.sh || exit 1
source scripts/compiler_cache.sh
CXX=clang++ DEBUG_INFO=lines UNOPTIMIZED_TOOLS=1 scripts/build.sh || exit 1

results=()
failed=0
stage() {
  local name=$1
  shift
  local start=$SECONDS
  echo "== $name: $*"
  if "$@"; then
    results+=("$(printf '%-8s %5d s  ok' "$name" $((SECONDS - start)))")
  else
    results+=("$(printf '%-8s %5d s  FAILED' "$name" $((SECONDS - start)))")
    failed=1
  fi
}

stage suites ctest --test-dir build --output-on-failure --timeout 300 "$@"
if [ "$quick" -eq 0 ]; then
  stage address scripts/sanitize.sh address
  stage thread scripts/sanitize.sh thread
  stage fuzz scripts/fuzz.sh --jobs 2 15
fi

echo "== summary"
printf '%s\n' "${results[@]}"
# The suites' failing cases by name, last, where a reader of the log's end
# sees them (a Python case fails inside one ctest test, python_tests).
log=build/Testing/Temporary/LastTest.log
if [ "$failed" -ne 0 ] && [ -f "$log" ]; then
  echo "== failing cases"
  grep -E '^(FAILED|ERROR) |\[  FAILED  \] [A-Za-z]' "$log" | sort -u | head -40
fi
exit $failed
