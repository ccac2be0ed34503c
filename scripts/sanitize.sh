#!/usr/bin/env bash
# Builds the test suites with a sanitizer (clang), in a tree of its own, and
# runs them. A memory error, undefined behaviour or a data race fails the
# test it happens in (reports go to that test's output).
#
#   scripts/sanitize.sh address [CTEST ARGS...]
#       AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/): the unit,
#       integration and Python suites
#   scripts/sanitize.sh thread [CTEST ARGS...]
#       ThreadSanitizer (build-tsan/): the unit and integration suites
#
# Needs what scripts/setup.sh installs. scripts/test.sh runs both.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
shift || true
case "$kind" in
  address)
    labels='^(unit|integration)$'
    targets=(ferry_unit_tests ferry_ops_tests ferry_integration_tests ferry_test_peer _ferry)
    ;;
  thread)
    labels='^(unit|integration)$'
    targets=(ferry_unit_tests ferry_ops_tests ferry_integration_tests ferry_test_peer)
    ;;
  *)
    echo "usage: scripts/sanitize.sh address|thread [ctest arguments]" >&2
    exit 2
    ;;
esac

source scripts/sanitizer_tree.sh
sanitizer_tree "$kind"
cmake --build "$build" --target "${targets[@]}"

# Every report fails: ASan aborts at the first, UBSan is built not to
# recover, TSan makes the process exit 66 after reporting.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:exitcode=66}
ctest --test-dir "$build" --output-on-failure --timeout 600 -L "$labels" "$@"

if [ "$kind" = address ]; then
  # The Python suite loads the instrumented module into an interpreter that
  # is not: the sanitizers' runtimes must be loaded first. The interpreter
  # keeps its own objects at exit, which leak detection would report, so the
  # Python suite alone runs without it (the C++ suites keep it).
  echo "sanitize: the Python suite with the instrumented module"
  LD_PRELOAD="$(clang++ -print-file-name=libclang_rt.asan-x86_64.so)" \
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" PYTHONPATH="$build/python" PYTHONDONTWRITEBYTECODE=1 \
    timeout 900 /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python
fi
