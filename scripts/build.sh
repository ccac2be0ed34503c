#!/usr/bin/env bash
# Configures and builds ferry into build/ (the CLI lands at build/bin/ferry).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler_cache.sh
# DEBUG_INFO=lines: line tables only (-g1). Stack traces keep file and line,
# a debugger loses local variables; a translation unit compiles about 30%
# faster (scripts/test.sh builds so). Full debug information otherwise.
debug=-g
[ "${DEBUG_INFO:-}" = lines ] && debug=-g1
# CXX=clang++ (or another compiler) picks the compiler; a clang build also
# checks the lock annotations (CMakeLists.txt).
# UNOPTIMIZED_TOOLS=1: the CLI and ops/ compiled at -O0, the rest as usual
# (FERRY_UNOPTIMIZED_TOOLS, CMakeLists.txt; CI builds so).
compiler=()
[ -n "${CXX:-}" ] && compiler=(-DCMAKE_CXX_COMPILER="$CXX")
tools=OFF
[ "${UNOPTIMIZED_TOOLS:-}" = 1 ] && tools=ON
cmake -S . -B build -G Ninja "${compiler[@]}" -DFERRY_UNOPTIMIZED_TOOLS=$tools -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 $debug -DNDEBUG" >/dev/null
cmake --build build
