#!/usr/bin/env bash
# Sets up, builds and runs the main job: a sweep between two engines on this
# host. Extra arguments go to `ferry bench` (e.g. --op write --bidir).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/bin/ferry bench --local --verify "$@"
