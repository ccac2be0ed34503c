#!/usr/bin/env bash
# Builds everything that compiles here (the library, the CLI, the soak, the
# Python module and every test binary; not the CUDA parts) with clang and
# -Wthread-safety, in a tree of its own (build-clang/), and fails on any
# report of clang's thread-safety analysis: a member marked GUARDED_BY touched
# without its lock, a function marked REQUIRES called without it
# (src/platform/thread_annotations.h, src/platform/mutex.h). Builds only; no
# test runs. Unoptimized, since the analysis runs before any optimization.
#
#   scripts/thread_safety.sh [TARGET...]    (default: all)
#
# Needs clang (scripts/setup.sh installs it). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-clang
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-Wthread-safety -Werror=thread-safety" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -DNDEBUG" \
  -DCMAKE_CUDA_COMPILER=NOTFOUND -DPython_EXECUTABLE=/usr/bin/python3 >/dev/null
# -Werror=thread-safety stops the build at the first file with a report; the
# log is searched as well, in case a flag elsewhere turned the errors back
# into warnings.
targets=()
[ $# -gt 0 ] && targets=(--target "$@")
log="$build/thread_safety.log"
status=0
cmake --build "$build" "${targets[@]}" 2>&1 | tee "$log" || status=$?
if grep -q 'Wthread-safety' "$log"; then
  echo "thread_safety: clang's thread-safety analysis reported the lines above" >&2
  exit 1
fi
exit $status
