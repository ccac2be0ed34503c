#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan and UBSan, in
# build-asan/, the tree scripts/sanitize.sh address tests: the harnesses link
# its libraries) and runs each for SECONDS (default 60), one after another or
# --jobs N at once, on a copy of its seed corpus in
# tests/fuzz/corpus/<harness>. Prints one line per harness (executions,
# corpus files/KiB, result) and exits non-zero if any harness crashed,
# leaked, ran out of memory or hung on an input; what made it fail is kept
# under build-asan/fuzz/artifacts/<harness>/, its log under
# build-asan/fuzz/logs/.
#
#   scripts/fuzz.sh [--runs N] [--jobs N] [SECONDS] [HARNESS...]
#       e.g. scripts/fuzz.sh 600 fuzz_frame_header; with --runs a harness
#       also stops after N executions; --jobs N runs N harnesses at once
#   scripts/fuzz.sh --record    rewrites the seed corpora from real traffic
#
# Needs what scripts/setup.sh installs (clang, libclang-rt-dev, cmake, ninja).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/sanitizer_tree.sh
sanitizer_tree address
work=$build/fuzz
if [ "${1:-}" = "--record" ]; then
  cmake --build "$build" --target ferry_fuzz_record_seeds >/dev/null
else
  cmake --build "$build" --target ferry_fuzz_harnesses >/dev/null
fi

if [ "${1:-}" = "--record" ]; then
  rm -rf "$work/seeds"
  "$build/bin/ferry_fuzz_record_seeds" "$work/seeds"
  for d in "$work"/seeds/*/; do
    name=$(basename "$d")
    # Regression inputs stay; the recorded seeds are replaced.
    mkdir -p "tests/fuzz/corpus/$name"
    rm -f "tests/fuzz/corpus/$name"/seed-*
    cp "$d"/seed-* "tests/fuzz/corpus/$name/"
  done
  exit 0
fi

runs=()
jobs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=(-runs="$2"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) break ;;
  esac
done
seconds=${1:-60}
shift || true
if [ $# -gt 0 ]; then
  harnesses=("$@")
else
  harnesses=()
  for f in tests/fuzz/fuzz_*.cc; do harnesses+=("$(basename "$f" .cc)"); done
fi

# Stateful harnesses set up a connection per input and may wait on it for
# seconds when an input stalls it; a decoder never takes long.
timeout_for() {
  case "$1" in
    fuzz_tcp_connection | fuzz_local_connection | fuzz_sysfs_tree) echo 60 ;;
    *) echo 10 ;;
  esac
}

# A steady-state frame's decoder (fuzz_msg_*) is a few dozen branches over
# one header: a few seconds reach all of them, so a short CI run gives these
# at most 5 (a long run, SECONDS above 60, gives each its full time).
seconds_for() {
  case "$1" in
    fuzz_msg_*) [ "$seconds" -le 60 ] && [ "$seconds" -gt 5 ] && echo 5 || echo "$seconds" ;;
    *) echo "$seconds" ;;
  esac
}

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

# Runs harness $1 and writes its line of the table to $work/results/$1.
run_one() {
  local h=$1
  local corpus="$work/corpus/$h" artifacts="$work/artifacts/$h" log="$work/logs/$h.log"
  rm -rf "$corpus" "$artifacts"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  [ -d "tests/fuzz/corpus/$h" ] && cp -r "tests/fuzz/corpus/$h/." "$corpus/"
  local rc=0
  "$build/bin/$h" "$corpus" "${runs[@]}" -max_total_time="$(seconds_for "$h")" -timeout="$(timeout_for "$h")" -rss_limit_mb=4096 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  local execs files kib found result kind
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  [ -n "$execs" ] || execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#')
  files=$(find "$corpus" -type f | wc -l)
  kib=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {printf "%d", (s + 1023) / 1024}')
  found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | head -1)
  if [ $rc -eq 0 ] && [ -z "$found" ]; then
    result=ok
  else
    kind=$(basename "${found:-failed-rc$rc}" | cut -d- -f1)
    result="$kind ($([ -n "$found" ] && echo "$found" || echo "exit $rc, see $log"))"
  fi
  printf '%-24s %12s %10s  %s\n' "$h" "${execs:-0}" "$files/${kib}K" "$result" >"$work/results/$h"
}

# --jobs N runs N harnesses at once (each is one process on one core).
rm -rf "$work/results"
mkdir -p "$work/results"
running=0
for h in "${harnesses[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_one "$h" &
  running=$((running + 1))
done
wait || true

failed=0
printf '%-24s %12s %10s  %s\n' harness executions 'corpus' result
for h in "${harnesses[@]}"; do
  if [ -s "$work/results/$h" ]; then
    cat "$work/results/$h"
    grep -qE ' ok$' "$work/results/$h" || failed=1
  else
    printf '%-24s %12s %10s  %s\n' "$h" 0 - "no result (see $work/logs/$h.log)"
    failed=1
  fi
done
exit $failed
