#!/usr/bin/env bash
# Configures and builds ferry into build/ (the CLI lands at build/bin/ferry).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler_cache.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build
